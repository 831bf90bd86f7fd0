"""The what-if against the measured fixes: for every broken/fixed pair the course recorded (data/manifest.json), the
critical path's prediction of the fixed loop's step from the broken loop's trace, with the fix as it was applied.

    python tools/what_if_pairs.py            # the table of docs/benchmarks.md ("What-if against the measured fixes")
    python tools/what_if_pairs.py --nsys     # the same pairs from their Nsight Systems exports (data/nsys/)

"As it was applied": each cause is scaled to what the fixed loop's own trace shows, i.e. by the time the fixed trace
spends on it a step over the time the broken trace does (on the critical path or hidden beside it: helpers.
critical_path's ``work_ms_per_step``), and the host's waits for the GPU (syncs) by the ratio of their counts; a fix
that moved work off the compute stream (the h2d_copy fix prefetches each batch on a side stream: helpers/workloads/
h2d_copy.py) also names that work ``overlapped``. On a trace of several ranks each rank gets its own factors. The
predicted step is compared with the step the fixed loop's own trace measures (``critical_path(fixed).step_ms``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import helpers  # noqa: E402
from helpers import critical as cr  # noqa: E402

#: (workload, broken variant, fixed variant): every fix the course recorded against the variant it fixes.
PAIRS = [
    ("data_stall", "broken", "fixed"), ("h2d_copy", "broken", "fixed"), ("h2d_copy", "broken", "pinned_blocking"),
    ("launch_overhead", "broken", "graphs"), ("launch_overhead", "broken", "compile"),
    ("launch_overhead", "broken", "compile_foreach"), ("launch_overhead", "broken", "foreach"),
    ("launch_overhead", "broken", "bigbatch"), ("sync_stall", "broken", "fixed"), ("host_bound", "broken", "fixed"),
    ("mystery", "broken", "fixed"), ("mystery", "broken", "data_fixed"), ("gpu_bound", "fp32", "tf32"),
    ("gpu_bound", "fp32", "bf16"), ("gpu_bound", "fp32", "fp16"), ("gpu_bound", "fp32", "compile"),
    ("communication", "manual", "ddp"), ("communication", "manual", "tiny_buckets"),
    ("communication", "manual", "no_sync"), ("communication", "manual", "fp16_hook"), ("communication", "ddp", "imbalance"),
]
#: Fixes that moved work off the path rather than shrinking it, and what they moved.
OVERLAPPED = {("h2d_copy", "fixed"): ("h2d_copies",)}


def _files(tag_kind: str) -> dict[tuple[str, str, str], Path]:
    doc = json.loads((ROOT / "data" / "manifest.json").read_text())
    if tag_kind == "nsys":
        return {(e["workload"], e["variant"], e["tag"].replace("h200cpu", "cpu")): ROOT / "data" / e["file"]
                for e in doc.get("recordings", []) if e.get("format") == "nsys-sqlite" and e["file"].startswith("nsys/")}
    return {(e["workload"], e["variant"], e["tag"]): ROOT / "data" / e["file"].rstrip("/") for e in doc["traces"]}


def _factors(broken: helpers.Trace, fixed: helpers.Trace) -> dict[int, dict[str, float]]:
    """Per rank of ``broken``: each cause scaled to what ``fixed`` (the same rank, else its slowest) shows."""
    b, f = cr.critical_path(broken), cr.critical_path(fixed)
    bw, fw = b.info["work_ms_per_step_by_rank"], f.info["work_ms_per_step_by_rank"]
    bs, fs = b.info["waits_per_step_by_rank"], f.info["waits_per_step_by_rank"]
    out = {}
    for rank, work in bw.items():
        r = rank if rank in fw else f.rank
        fac = {c: fw[r][c] / v for c, v in work.items() if v > 1e-3 and c != "sync"}
        fac["sync"] = fs[r] / bs[rank] if bs[rank] else 1.0
        out[rank] = fac
    return out


def predict(broken: helpers.Trace, fixed: helpers.Trace, overlapped: tuple[str, ...] = ()) -> float:
    """The broken trace's step replayed with the fix as applied (per rank), in ms."""
    factors = _factors(broken, fixed)
    graphs = cr._graphs(broken)
    means = []
    for rank, g in graphs.items():
        f = cr._factors(factors.get(rank, {}))
        if overlapped:
            g = cr._overlapped(g, overlapped)
        hs, he, gs, ge = cr._simulate(g, f)
        means.append(cr._span(g, hs, he, gs, ge) / max(len(g.windows), 1))
    return max(means) / 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nsys", action="store_true", help="the pairs' Nsight Systems exports instead of the profiler traces")
    args = ap.parse_args(argv)
    files = _files("nsys" if args.nsys else "traces")
    rows, errs = [], []
    for workload, a, b in PAIRS:
        for tag in ("h200", "cpu"):
            fa, fb = files.get((workload, a, tag)), files.get((workload, b, tag))
            if fa is None or fb is None:
                continue
            broken, fixed = helpers.load(fa), helpers.load(fb)
            before, measured = cr.critical_path(broken).step_ms, cr.critical_path(fixed).step_ms
            pred = predict(broken, fixed, OVERLAPPED.get((workload, b), ()))
            err = (pred - measured) / measured
            errs.append(abs(err))
            track = "GPU (H200)" if tag == "h200" else "CPU"
            rows.append(f"| {workload}: {a} -> {b} | {track} | {before:.2f} | {measured:.2f} | {pred:.2f} | {err:+.0%} |")
    print("| fix | track | broken step (ms) | fixed step, measured (ms) | fixed step, predicted (ms) | error |")
    print("|---|---|---:|---:|---:|---:|")
    print("\n".join(rows))
    gpu = [e for r, e in zip(rows, errs) if "GPU" in r]
    print(f"\n{len(errs)} pairs: median |error| {np.median(errs):.1%}, worst {max(errs):.1%}"
          + (f"; GPU track: median {np.median(gpu):.1%}, worst {max(gpu):.1%}" if gpu else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
