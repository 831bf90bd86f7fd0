"""What every workload script shares: the command line, timing, profiling and nsys ranges."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ..profiling import annotate, capture, default_device, new_run_dir, quiet_profiler_logs, save_trace, time_steps

StepFn = Callable[[int], object]


def count_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number no smaller than ``low`` (``--steps 0`` would time nothing and divide by zero)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
        return value

    return parse


def phases_step(data: Callable[[int], object], forward: Callable[[object], torch.Tensor],
                backward: Callable[[torch.Tensor], None], optimizer: Callable[[], None]) -> StepFn:
    """Compose a training step from its phases, each annotated (NVTX + record_function)."""

    def step(i: int) -> None:
        with annotate("data"):
            batch = data(i)
        with annotate("forward"):
            loss = forward(batch)
        with annotate("backward"):
            backward(loss)
        with annotate("optimizer"):
            optimizer()

    return step


def run_cli(description: str, variants: Sequence[str], make_step: Callable[[str, torch.device], StepFn],
            argv: Sequence[str] | None = None, default_steps: int = 20) -> int:
    """Command line shared by the single-process workloads."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--variant", choices=list(variants), default=variants[0])
    parser.add_argument("--steps", type=count_at_least(1), default=default_steps, help="timed (or profiled) steps")
    parser.add_argument("--warmup", type=count_at_least(0), default=3)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--profile", metavar="DIR", help="record a PyTorch-profiler trace into a new folder under DIR")
    parser.add_argument("--nsys-range", action="store_true",
                        help="call torch.cuda.profiler.start/stop around the steady-state steps "
                             "(for nsys profile --capture-range=cudaProfilerApi)")
    args = parser.parse_args(argv)
    device = torch.device(args.device) if args.device else default_device()
    step = make_step(args.variant, device)
    if args.nsys_range and device.type != "cuda":
        print("--nsys-range needs a CUDA device", file=sys.stderr)
        return 2
    if args.nsys_range and args.profile:
        # Both profilers on the same steps of one process: nsys records between profiler.start/stop,
        # torch.profiler's active window covers the same steps (both read CUPTI).
        trace_path, step_ms = profile_in_nsys_range(step, args.steps, args.warmup, args.profile, args.variant)
        print(json.dumps({"variant": args.variant, "device": str(device), "trace": str(trace_path),
                          "profiled_step_ms": round(step_ms, 3)}))
        return 0
    if args.profile:
        trace = capture(step, steps=args.steps, warmup=args.warmup, out_dir=args.profile, name=args.variant)
        print(json.dumps({"variant": args.variant, "device": str(device), "trace": trace.source}))
        return 0
    if args.nsys_range:
        for i in range(args.warmup):
            step(i)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for i in range(args.warmup, args.warmup + args.steps):
            # An NVTX range per step, named as helpers.load finds steps ("step N"), so the export has
            # per-step windows the way a PyTorch-profiler trace has ProfilerStep#N.
            torch.cuda.nvtx.range_push(f"step {i - args.warmup}")
            step(i)
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        return 0
    ms = time_steps(step, steps=args.steps, warmup=args.warmup)
    print(json.dumps({"variant": args.variant, "device": str(device), "step_ms": round(ms, 3)}))
    return 0


def profile_in_nsys_range(step: StepFn, steps: int, warmup: int, out_dir: str, name: str) -> tuple[Path, float]:
    """Run ``warmup`` plain steps, then ``steps`` steps seen by both nsys (cudaProfilerApi range) and
    torch.profiler; return the gzipped PyTorch-profiler trace's path and the mean wall ms per step
    inside the range (both profilers attached)."""
    import time

    from torch.profiler import ProfilerActivity, profile, schedule

    for i in range(warmup - 1):
        step(i)
    torch.cuda.synchronize()
    run_dir = new_run_dir(out_dir, name)
    # One profiler warm-up step (outside the nsys range), then the shared active steps.
    with quiet_profiler_logs(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                                        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1)) as prof:
        for k, i in enumerate(range(max(warmup - 1, 0), max(warmup - 1, 0) + 1 + steps)):
            if k == 1:
                torch.cuda.synchronize()
                torch.cuda.profiler.start()
                t0 = time.perf_counter()
            step(i)
            prof.step()
        torch.cuda.synchronize()
        range_ms = (time.perf_counter() - t0) * 1e3
        torch.cuda.profiler.stop()
    return save_trace(prof, run_dir / "trace.json.gz"), range_ms / steps
