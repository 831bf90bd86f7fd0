"""The blind-triage lab's unlabelled loops (lab 07): each case is a real loop; its id says nothing.

    python -m tools.triage_cases --variant t4 --steps 5 --warmup 10 --profile runs   (from the repository root)

Kept outside the installed package: which case is which loop is the lab's answer. What each case
really is, and what a correct reading names, is the instructors' key, docs/instructors/triage_key.json
(its ``recipe`` field is :func:`make_step`'s choice here); the package checks readings against its
sealed form (helpers/checks/_triage_key.py, tools/seal_answers.py). Several cases are decoys an eager
reader gets wrong: a GPU-bound loop with harmless syncs, pinned copies that already overlap compute,
two streams whose white space is not idle time, a loop held up by NumPy/Python work on the host, a
CUDA-Graph replay of many small kernels, two problems at once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.profiling import annotate, require_gpu  # noqa: E402
from helpers.workloads import data_stall, h2d_copy, host_bound, launch_overhead, mystery, sync_stall  # noqa: E402
from helpers.workloads.common import StepFn, run_cli  # noqa: E402

VARIANTS = ("t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9", "t10")

HARMLESS_SYNC_EVERY = 4


def harmless_sync_step(device: torch.device) -> StepFn:
    model, opt, xs, ys = sync_stall.setup(device)
    log: list[float] = []

    def step(i: int) -> None:
        with annotate("forward"):
            loss = F.cross_entropy(model(xs[i % 8]), ys[i % 8])
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        if i % HARMLESS_SYNC_EVERY == 0:
            with annotate("log"):
                log.append(loss.item())  # waits for a GPU that is busy anyway: costs almost nothing

    return step


def two_stream_step(device: torch.device, n: int = 4096, chain: int = 6) -> StepFn:
    """Stream A and stream B take turns on dependent halves of the work; together they keep the GPU busy."""
    require_gpu("The two-stream triage case")
    g = torch.Generator(device="cpu").manual_seed(0)
    wa = (torch.randn(n, n, generator=g) / n**0.5).to(device)
    wb = (torch.randn(n, n, generator=g) / n**0.5).to(device)
    a, b = torch.cuda.Stream(device), torch.cuda.Stream(device)
    state = {"x": torch.randn(n, n, generator=g).to(device), "b_done": None}

    def step(i: int) -> None:
        a_done = torch.cuda.Event()
        with annotate("stream_a"), torch.cuda.stream(a):
            if state["b_done"] is not None:
                a.wait_event(state["b_done"])
            x = state["x"]
            for _ in range(chain):
                x = torch.tanh(x @ wa)
            a_done.record(a)
        b_done = torch.cuda.Event()
        with annotate("stream_b"), torch.cuda.stream(b):
            b.wait_event(a_done)
            for _ in range(chain):
                x = torch.tanh(x @ wb)
            b_done.record(b)
        state["x"], state["b_done"] = x, b_done

    return step


#: Cases that reuse a course workload's variant: case -> (module, variant).
REUSED = {
    "t2": (host_bound, "broken"), "t3": (launch_overhead, "graphs"), "t4": (data_stall, "broken"),
    "t6": (h2d_copy, "fixed"), "t7": (mystery, "broken"), "t8": (launch_overhead, "broken"),
    "t9": (h2d_copy, "broken"), "t10": (host_bound, "synced"),
}


def make_step(variant: str, device: torch.device) -> StepFn:
    if variant == "t1":
        return harmless_sync_step(device)
    if variant == "t5":
        return two_stream_step(device)
    if variant in REUSED:
        module, reused = REUSED[variant]
        return module.make_step(reused, device)
    raise ValueError(f"unknown triage case {variant!r}; choose from {VARIANTS}")


if __name__ == "__main__":
    sys.exit(run_cli(__doc__.splitlines()[0], VARIANTS, make_step, default_steps=5))
