"""The pace probe's cost and spread (helpers.profiling.pace_probe; the figures behind thresholds.PACE_*).

Runs the probe in pairs, as helpers.capture does (one just before, one just after a capture's steps), ``--pairs``
times, and prints: the probe's figure (ms a run), its cost (ms a call), the ratio of a pair's two figures, and the
ratio a fix check would read between two consecutive pairs on a machine whose load did not change
(helpers.checks.speed.machine_pace: the smaller figure of the second pair over the larger of the first), with the
share of those above thresholds.PACE_MIN_RATIO: how often a steady machine would read as slower.

    python tools/measure_pace.py                 # the machine as it is
    python tools/measure_pace.py --hog           # one core kept busy by a spinning process, as CI runs the tests
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(int(p * len(xs)), len(xs) - 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--gap", type=float, default=0.5, help="seconds between the two probes of a pair (a capture's steps)")
    ap.add_argument("--hog", action="store_true", help="keep the last core busy with a spinning process meanwhile")
    args = ap.parse_args()

    from helpers import thresholds as th
    from helpers.profiling import pace_probe

    hog = None
    if args.hog:
        core = max(os.sched_getaffinity(0))
        hog = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile 1: pass"])
        time.sleep(0.2)
    try:
        pairs, costs = [], []
        for _ in range(args.pairs):
            pair = []
            for _ in range(2):
                t0 = time.perf_counter()
                pair.append(pace_probe())
                costs.append((time.perf_counter() - t0) * 1e3)
                time.sleep(args.gap)
            pairs.append(pair)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    figs = [x for p in pairs for x in p]
    within = [max(p) / min(p) for p in pairs]
    between = [min(b) / max(a) for a, b in zip(pairs, pairs[1:])]
    over = sum(r > th.PACE_MIN_RATIO for r in between)
    print(f"{'hog on one core' if args.hog else 'as it is'} (load {os.getloadavg()[0]:.1f}, {len(pairs)} pairs, "
          f"{os.cpu_count()} cores): probe {statistics.median(figs):.2f} ms a run [p10 {_q(figs, .1):.2f}, "
          f"p90 {_q(figs, .9):.2f}]; cost {statistics.median(costs):.1f} ms a call [p90 {_q(costs, .9):.1f}, "
          f"max {max(costs):.1f}]; a pair's ratio median {statistics.median(within):.2f} p90 {_q(within, .9):.2f}; "
          f"between pairs (the check's reading) median {statistics.median(between):.2f} p90 {_q(between, .9):.2f} "
          f"max {max(between):.2f}, above {th.PACE_MIN_RATIO:g}x: {over}/{len(between)}")


if __name__ == "__main__":
    main()
