"""Benchmark the helpers: the real launch-bound H200 trace, and synthetic traces of growing size.

    python tools/benchmark.py                 # everything (about a minute on 2 cores)
    python tools/benchmark.py --skip-scaling  # only the real trace

For the real trace it times, side by side in one process: parsing the file's JSON alone (gunzip +
json.loads), helpers.load + every metric (metrics.summary) + diagnose, and Holistic Trace Analysis
0.5.0's TraceAnalysis load (when installed: pip install HolisticTraceAnalysis==0.5.0), and prints the
ratios. For 10k, 100k and 1M synthetic events it reports time and peak memory, each in a fresh process.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BENCH_TRACE = ROOT / "data" / "bench" / "launch_overhead_long__h200.json.gz"


def best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def full_analysis(path: Path) -> None:
    import helpers
    from helpers import metrics

    trace = helpers.load(path)
    metrics.summary(trace)
    helpers.diagnose(trace)


def real_trace(repeat: int) -> None:
    raw = gzip.decompress(BENCH_TRACE.read_bytes())
    n_events = len(json.loads(raw)["traceEvents"])
    parse = best_of(lambda: json.loads(gzip.decompress(BENCH_TRACE.read_bytes())), repeat)
    ours = best_of(lambda: full_analysis(BENCH_TRACE), repeat)
    print(f"trace: {BENCH_TRACE.relative_to(ROOT)} ({len(raw) / 1e6:.1f} MB of JSON, {n_events} events)")
    print(f"  gunzip + json.loads alone:                 {parse:.3f} s")
    print(f"  helpers load + all metrics + diagnose:     {ours:.3f} s  ({ours / parse:.2f}x the JSON parse)")
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        print("  Holistic Trace Analysis: not installed (pip install HolisticTraceAnalysis==0.5.0)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(BENCH_TRACE, Path(tmp) / "rank0.json.gz")
        hta = best_of(lambda: TraceAnalysis(trace_dir=tmp), repeat)
    print(f"  HTA 0.5.0 TraceAnalysis(trace_dir) load:   {hta:.3f} s  (ours is {hta / ours:.2f}x faster)")


def synthetic(n_events: int, path: Path) -> None:
    """A launch-bound-looking trace: steps, launches, kernels, ops, in the shape Kineto writes."""
    rng = random.Random(0)
    events, t, corr = [], 0.0, 0
    per_step = 1000
    n_steps = max(n_events // (3 * per_step), 1)
    for s in range(n_steps):
        start = t
        for _ in range(per_step):
            corr += 1
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": t, "dur": 6.0, "args": {}})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 1,
                           "dur": 4.0, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": f"k{rng.randrange(50)}", "pid": 0, "tid": 7, "ts": t + 8,
                           "dur": rng.uniform(1, 4), "args": {"device": 0, "stream": 7, "correlation": corr}})
            t += 9.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": start,
                       "dur": t - start, "args": {}})
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)


def scaling() -> None:
    print("synthetic traces (fresh process each: load + all metrics + diagnose)")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (10_000, 100_000, 1_000_000):
            path = Path(tmp) / f"s{n}.json.gz"
            synthetic(n, path)
            code = (f"import sys, time, resource; sys.path.insert(0, {str(ROOT)!r}); t=time.perf_counter(); "
                    f"import tools.benchmark as b; b.full_analysis(__import__('pathlib').Path({str(path)!r})); "
                    "print(time.perf_counter()-t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
            secs, rss_kb = float(out[0]), int(out[1])
            print(f"  {n:>9,} events: {secs:6.2f} s, peak RSS {rss_kb / 1024:7.0f} MB")


def rank_folder(folder: Path, ranks: int = 8) -> None:
    """``ranks`` copies of the recorded trace, each saying which rank it is, as a profiler's folder."""
    doc = json.loads(gzip.decompress(BENCH_TRACE.read_bytes()))
    for r in range(ranks):
        doc["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": ranks}
        with gzip.open(folder / f"rank{r}.pt.trace.json.gz", "wb", compresslevel=1) as fh:
            fh.write(json.dumps(doc).encode())


def folder_of_ranks(repeat: int) -> None:
    """An 8-rank folder: helpers.load reading the ranks in parallel processes, one after another, and HTA."""
    import helpers
    import helpers.readers as readers

    with tempfile.TemporaryDirectory() as tmp:
        rank_folder(Path(tmp))
        workers = readers._workers
        try:
            readers._workers = lambda n: min(n, os.cpu_count() or 1)  # parallel even on two cores ...
            parallel = median_of(lambda: helpers.diagnose(helpers.load(tmp)), repeat)
            readers._workers = lambda n: 1  # ... and one after another, for comparison
            serial = median_of(lambda: helpers.diagnose(helpers.load(tmp)), repeat)
        finally:
            readers._workers = workers
        print(f"8-rank folder ({BENCH_TRACE.name} x 8), load + diagnose, median of {repeat}:")
        print(f"  ranks read in parallel processes: {parallel:.2f} s; one after another: {serial:.2f} s")
        try:
            from hta.trace_analysis import TraceAnalysis
        except ImportError:
            print("  Holistic Trace Analysis: not installed (pip install -r tools/bench-requirements.txt)")
            return
        hta = median_of(lambda: TraceAnalysis(trace_dir=tmp), repeat)
        print(f"  HTA 0.5.0 TraceAnalysis(trace_dir) load: {hta:.2f} s (ours is {hta / parallel:.2f}x faster)")


def median_of(fn, repeat: int = 3) -> float:
    """Median wall time: the machine is shared, so one run can be slowed by others' load."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only-folder", action="store_true", help="only the 8-rank folder benchmark")
    args = parser.parse_args()
    if args.only_folder:
        folder_of_ranks(args.repeat)
        return 0
    real_trace(args.repeat)
    folder_of_ranks(args.repeat)
    if not args.skip_scaling:
        scaling()
    return 0


if __name__ == "__main__":
    sys.exit(main())
