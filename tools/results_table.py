"""Print the README's table of measured step times, broken vs fixed, from data/manifest.json.

    python tools/results_table.py
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [
    ("data loading stall", "data_stall", "broken", "fixed", "h200"),
    ("long H2D copies", "h2d_copy", "broken", "fixed", "h200"),
    ("launch overhead (CUDA Graphs)", "launch_overhead", "broken", "graphs", "h200"),
    ("launch overhead (torch.compile + fused Adam)", "launch_overhead", "broken", "compile", "h200"),
    ("launch overhead (torch.compile, foreach Adam)", "launch_overhead", "broken", "compile_foreach", "h200"),
    ("launch overhead (foreach Adam)", "launch_overhead", "broken", "foreach", "h200"),
    ("sync stall", "sync_stall", "broken", "fixed", "h200"),
    ("capstone (data + sync)", "mystery", "broken", "fixed", "h200"),
    ("data loading stall", "data_stall", "broken", "fixed", "cpu"),
    ("communication (DDP overlap)", "communication", "manual", "ddp", "cpu"),
    ("communication (DDP, 1 MB buckets)", "communication", "manual", "tiny_buckets", "cpu"),
    ("communication (no_sync, 4 micro-batches)", "communication", "manual", "no_sync", "cpu"),
    ("uneven load (4x batch on one rank)", "communication", "ddp", "imbalance", "cpu"),
]


def main() -> None:
    entries = {(e["workload"], e["variant"], e["tag"]): e for e in json.loads((ROOT / "data" / "manifest.json").read_text())["traces"]}
    print("| pattern | machine | broken | fixed | speed-up |")
    print("|---|---|---|---|---|")
    for label, workload, broken, fixed, tag in PAIRS:
        b, f = entries.get((workload, broken, tag)), entries.get((workload, fixed, tag))
        if not (b and f):
            continue
        machine = b["device"] + ("" if tag == "cpu" else f", torch {b['torch']}")
        print(f"| {label} | {machine} | {b['step_ms']:.1f} ms ({broken}) | {f['step_ms']:.1f} ms ({fixed}) | "
              f"{b['step_ms'] / f['step_ms']:.1f}x |")


if __name__ == "__main__":
    main()
