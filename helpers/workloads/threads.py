"""CPU threads and processes: what oversubscribing the cores does to a step (lab 11's environment section).

Each process runs the same matrix products with ``torch.set_num_threads(threads)``. When processes x threads is
more than the cores the process may use, the threads take turns on the cores and wait for each other at every
parallel region; a process started per GPU (a rank) with torch's default thread count (one per core) does exactly
that on a shared node. ``OMP_NUM_THREADS`` (or ``torch.set_num_threads``) set to cores // processes avoids it.

    python -m helpers.workloads.threads --threads 2 --reps 20    # one JSON line: the seconds the products took

:func:`run_together` starts several such processes once and has them run each thread count at the same moment.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

#: The work: REPS products of SIZE x SIZE float32 matrices, a few hundred milliseconds on one core.
SIZE, REPS = 384, 40


def work(threads: int, reps: int = REPS) -> float:
    """Seconds ``reps`` matrix products take in this process with ``threads`` threads."""
    import torch

    torch.set_num_threads(threads)
    a = torch.randn(SIZE, SIZE)
    (a @ a).sum()  # the first product starts the thread pool
    t0 = time.perf_counter()
    for _ in range(reps):
        a = (a @ a) / SIZE
    return time.perf_counter() - t0


def run_together(processes: int, thread_counts: tuple[int, ...], reps: int = REPS, timeout_s: float = 120) -> dict[int, float]:
    """Start ``processes`` processes once; for each of ``thread_counts`` in turn, all of them run :func:`work` with that
    many threads at the same moment (the parent releases them together). Returns ``{threads: the slowest process's
    seconds}`` (a count given more than once: the median of its rounds, :func:`rounds_together`)."""
    rounds = rounds_together(processes, thread_counts, reps=reps, timeout_s=timeout_s)
    return {threads: statistics.median(seconds) for threads, seconds in rounds.items()}


def rounds_together(processes: int, thread_counts: tuple[int, ...], rounds: int = 1, reps: int = REPS,
                    timeout_s: float = 120) -> dict[int, list[float]]:
    """:func:`run_together` ``rounds`` times over, the thread counts interleaved (a, b, a, b, ...), so that a load that
    comes and goes on a shared machine falls on both: ``{threads: [the slowest process's seconds, a round each]}``."""
    thread_counts = tuple(thread_counts) * max(int(rounds), 1)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    args = [sys.executable, "-m", "helpers.workloads.threads", "--serve", ",".join(map(str, thread_counts)), "--reps", str(reps)]
    procs = [subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, bufsize=1)
             for _ in range(processes)]
    out: dict[int, list[float]] = {}
    deadline = time.monotonic() + timeout_s
    try:
        for p in procs:  # each says it is ready once torch is imported
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a worker did not start")
        for threads in thread_counts:
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            seconds = []
            for p in procs:
                line = p.stdout.readline()
                if not line.startswith("{") or time.monotonic() > deadline:
                    raise RuntimeError("a worker failed or took too long")
                seconds.append(json.loads(line)["seconds"])
            out.setdefault(threads, []).append(max(seconds))
    finally:
        for p in procs:
            try:
                p.stdin.close()
                p.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                p.kill()
                p.wait()
    return out


def serve(thread_counts: list[int], reps: int) -> None:
    """The worker side of :func:`run_together`: after each "go" on stdin, run the next thread count; print its seconds."""
    import torch  # noqa: F401 - imported before saying ready, so the start-up is not timed

    print("ready", flush=True)
    for threads in thread_counts:
        if sys.stdin.readline().strip() != "go":
            return
        print(json.dumps({"threads": threads, "seconds": round(work(threads, reps), 4)}), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or __name__).splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=REPS)
    p.add_argument("--serve", help=argparse.SUPPRESS)  # run_together's workers: comma-separated thread counts
    args = p.parse_args(argv)
    if args.serve:
        serve([int(t) for t in args.serve.split(",")], args.reps)
        return 0
    if args.threads < 1 or args.reps < 1:
        print("error: --threads and --reps must be at least 1", file=sys.stderr)
        return 2
    print(json.dumps({"threads": args.threads, "seconds": round(work(args.threads, args.reps), 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
