"""Long host-to-device copies: big batches copied from pageable memory, blocking, every step.

broken:          the host batches live in ordinary (pageable) memory and ``.to(device)`` blocks.
fixed:           the host batches are pinned once, copied with ``non_blocking=True`` on a side stream,
                 and the next batch is copied while this one computes (double buffering).
pinned_blocking: pinned once, but copied with a plain ``.to(device)`` on the compute stream: what
                 pinning alone changes (the copy's bandwidth), without the overlap.
Needs a CUDA GPU: pinned memory and copy engines are GPU features.

The variants are what ``tools/record_traces.py`` records. Lab 01 shows only the loop as first
written (:func:`host_batches`, :func:`first_getter`, :func:`make_step_with`); the learner writes
the getter of the fix.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

from ..profiling import annotate, require_gpu
from .common import StepFn, run_cli

VARIANTS = ("broken", "fixed", "pinned_blocking")
BATCH_MB = 64
POOL = 4  # distinct host batches, reused round-robin

Getter = Callable[[int], torch.Tensor]


def host_batches(batch_mb: int = BATCH_MB, pool: int = POOL) -> list[torch.Tensor]:
    """Host-side input batches, as a data pipeline would hand them over (ordinary host memory)."""
    n = batch_mb * 2**20 // 4
    g = torch.Generator().manual_seed(0)
    return [torch.rand(n // 1024, 1024, generator=g) for _ in range(pool)]


def compute(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The model's work on one batch: a few matrix products over the whole batch."""
    for _ in range(4):
        x = torch.tanh(x @ w)
    return x.sum()


def first_getter(batches: list[torch.Tensor], device: torch.device) -> Getter:
    """The step's input as first written: batch ``i`` moved to the device when the step asks for it."""

    def get(i: int) -> torch.Tensor:
        return batches[i % len(batches)].to(device)

    return get


def make_step_with(get_batch: Getter, device: torch.device) -> StepFn:
    """One training step: ``x = get_batch(i)`` in the ``data`` range, then the compute on it."""
    require_gpu("The host-to-device copy workload")
    w = torch.randn(1024, 1024, device=device) / 32
    results = []

    def step(i: int) -> None:
        with annotate("data"):
            x = get_batch(i)
        with annotate("forward"):
            results.append(compute(x, w))
        if len(results) > 8:
            results.pop(0)

    return step


class _Prefetcher:
    """The recorded ``fixed`` variant: copies batch i+1 on a side stream while batch i computes."""

    def __init__(self, batches: list[torch.Tensor], device: torch.device) -> None:
        self.batches, self.device = batches, device
        self.stream = torch.cuda.Stream(device)
        self.next = self._start(0)

    def _start(self, i: int) -> tuple[torch.Tensor, torch.cuda.Event]:
        with torch.cuda.stream(self.stream):
            x = self.batches[i % len(self.batches)].to(self.device, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        return x, done

    def get(self, i: int) -> torch.Tensor:
        x, done = self.next
        torch.cuda.current_stream(self.device).wait_event(done)
        x.record_stream(torch.cuda.current_stream(self.device))  # keep the allocator from reusing it early
        self.next = self._start(i + 1)
        return x


def make_step(variant: str, device: torch.device) -> StepFn:
    require_gpu("The host-to-device copy workload")
    if variant == "broken":
        return make_step_with(first_getter(host_batches(), device), device)
    pinned = [b.pin_memory() for b in host_batches()]
    if variant == "pinned_blocking":
        return make_step_with(first_getter(pinned, device), device)
    if variant == "fixed":
        return make_step_with(_Prefetcher(pinned, device).get, device)
    raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")


if __name__ == "__main__":
    sys.exit(run_cli((__doc__ or __name__).splitlines()[0], VARIANTS, make_step, default_steps=20))
