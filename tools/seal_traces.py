"""Write helpers/_sealed_traces.py: the seals of lab 07's triage recordings (helpers.seal), from data/.

    python tools/seal_traces.py          # write it
    python tools/seal_traces.py --check  # exit 1 if it does not match data/ (the tests run the same comparison)

Each triage trace in data/manifest.json (the PyTorch-profiler recording and, where listed, its Nsight Systems
export) is sealed under ``check_triage[<id>]``: helpers.diagnose and the reading helpers refuse it until the
learner's reading of it passes. Run it after re-recording the triage cases.
"""

from __future__ import annotations

import argparse
import json
import pprint
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers import seal  # noqa: E402
from helpers.readers import load  # noqa: E402

TARGET = ROOT / "helpers" / "_sealed_traces.py"


def triage_files() -> list[tuple[str, str]]:
    """(file, label) of every triage recording in data/manifest.json (PyTorch-profiler traces and Nsight exports)."""
    doc = json.loads((ROOT / "data" / "manifest.json").read_text())
    return sorted({(e["file"], f"check_triage[{e['variant']}]") for section in ("traces", "recordings")
                   for e in doc.get(section, []) if isinstance(e, dict) and e.get("workload") == "triage"})


def sketches() -> dict[str, tuple[str, list[str]]]:
    """file -> (the label that opens it, its sketch in hex)."""
    return {f: (label, [f"{int(h):016x}" for h in seal.sketch(load(ROOT / "data" / f))]) for f, label in triage_files()}


def render(sk: dict[str, list[str]]) -> str:
    return ('"""Sketches of lab 07\'s triage recordings (helpers.seal): written by tools/seal_traces.py from data/; do not edit."""\n\n'
            f"SKETCHES: dict[str, tuple[str, list[str]]] = {pprint.pformat(sk, width=120, compact=True)}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = render(sketches())
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is out of date: run python tools/seal_traces.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
