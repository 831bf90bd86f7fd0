"""What every workload script shares: the command line, timing, profiling and nsys ranges."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

import torch

from ..profiling import annotate, capture, default_device, time_steps

StepFn = Callable[[int], object]


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
    parser.add_argument("--steps", type=int, default=default_steps, help="timed (or profiled) steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--profile", metavar="DIR", help="record a PyTorch-profiler trace into a new folder under DIR")
    parser.add_argument("--nsys-range", action="store_true",
                        help="call torch.cuda.profiler.start/stop around the steady-state steps "
                             "(for nsys profile --capture-range=cudaProfilerApi)")
    args = parser.parse_args(argv)
    device = torch.device(args.device) if args.device else default_device()
    step = make_step(args.variant, device)
    if args.profile:
        trace = capture(step, steps=args.steps, warmup=args.warmup, out_dir=args.profile, name=args.variant)
        print(json.dumps({"variant": args.variant, "device": str(device), "trace": trace.source}))
        return 0
    if args.nsys_range:
        if device.type != "cuda":
            print("--nsys-range needs a CUDA device", file=sys.stderr)
            return 2
        for i in range(args.warmup):
            step(i)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for i in range(args.warmup, args.warmup + args.steps):
            step(i)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        return 0
    ms = time_steps(step, steps=args.steps, warmup=args.warmup)
    print(json.dumps({"variant": args.variant, "device": str(device), "step_ms": round(ms, 3)}))
    return 0
