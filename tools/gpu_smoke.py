"""Checks that only a CUDA machine can make: run on the GPU box before trusting its traces.

    python tools/gpu_smoke.py

Prints one JSON line per check: NVTX ranges from helpers.annotate, the live sync finder on the
broken sync-stall loop, and the --nsys-range path of a workload script.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from helpers.profiling import _nvtx, annotate, find_syncs_live  # noqa: E402
from helpers.workloads import sync_stall  # noqa: E402


def main() -> int:
    print(json.dumps({"check": "cuda", "ok": torch.cuda.is_available(), "device": torch.cuda.get_device_name(0),
                      "torch": torch.__version__}))
    with annotate("smoke"):
        torch.ones(1, device="cuda").add_(1)
    print(json.dumps({"check": "nvtx", "ok": _nvtx is not None}))
    step = sync_stall.make_step("broken", torch.device("cuda"))
    step(0)
    found = find_syncs_live(lambda: step(1))
    print(json.dumps({"check": "find_syncs_live broken", "ok": len(found) > 0, "found": found}))
    fixed = sync_stall.make_step("fixed", torch.device("cuda"))
    fixed(0)
    found_fixed = find_syncs_live(lambda: [fixed(i) for i in range(1, 9)])
    print(json.dumps({"check": "find_syncs_live fixed (8 steps)", "found": found_fixed}))
    rc = subprocess.run([sys.executable, "-m", "helpers.workloads.sync_stall", "--variant", "fixed", "--steps", "5",
                         "--nsys-range"], cwd=ROOT).returncode
    print(json.dumps({"check": "--nsys-range", "ok": rc == 0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
