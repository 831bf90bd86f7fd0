"""Host-bound loop: the GPU waits while the host runs NumPy/Python bookkeeping between steps.

The work is neither data loading nor kernel launching nor a sync: each step the training loop
updates host-side metrics (sorting and binning a buffer of per-sample scores, a Python loop over
per-class counters), as metric or logging code between steps often does. The GPU's part of the
step is a few milliseconds; the host's bookkeeping takes several times longer, so the GPU idles.

broken: the bookkeeping runs every step, on the host, on the critical path.
synced: the same, with a ``loss.item()`` before it (a sync now shows, but removing it alone buys
        little: the host work is still there).
fixed:  the bookkeeping runs once every BOOKKEEP_EVERY steps (same work per run), so the host
        stays ahead of the GPU.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..profiling import annotate
from .common import StepFn, run_cli

VARIANTS = ("broken", "synced", "fixed")
WIDTH, DEPTH, BATCH = 2048, 4, 1024  # about 2-4 ms of GPU work a step on an H200
SCORES = 500_000  # per-sample scores the bookkeeping sorts and bins each time it runs
CLASSES = 2000
BOOKKEEP_EVERY = 10


class Bookkeeping:
    """Host-side metric code: percentiles and a histogram of recent scores, per-class counters."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.scores = self.rng.standard_normal(SCORES).astype(np.float32)
        self.counts: dict[int, float] = {}
        self.report: list[tuple[float, ...]] = []

    def update(self, i: int) -> None:
        self.scores[(i * 997) % SCORES:][:4096] += np.float32(0.01)
        ordered = np.sort(self.scores)
        p5, p50, p95 = np.percentile(ordered, [5, 50, 95])
        hist, _ = np.histogram(ordered, bins=256)
        for c in range(CLASSES):  # a plain Python loop, as per-class metric code often is
            self.counts[c] = self.counts.get(c, 0.0) * 0.99 + float(hist[c % 256])
        self.report.append((float(p5), float(p50), float(p95)))


def make_step(variant: str, device: torch.device) -> StepFn:
    torch.manual_seed(0)
    width = WIDTH if device.type == "cuda" else 256
    layers: list[nn.Module] = []
    for _ in range(DEPTH):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(4, BATCH, width, generator=g).to(device)
    ys = torch.randint(0, 10, (4, BATCH), generator=g).to(device)
    books = Bookkeeping()
    every = BOOKKEEP_EVERY if variant == "fixed" else 1

    def step(i: int) -> None:
        with annotate("forward"):
            loss = F.cross_entropy(model(xs[i % 4]), ys[i % 4])
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        if variant == "synced":
            books.report.append((loss.item(),))  # a sync right before the host work
        if i % every == 0:
            with annotate("bookkeeping"):
                books.update(i)

    return step


if __name__ == "__main__":
    sys.exit(run_cli((__doc__ or __name__).splitlines()[0], VARIANTS, make_step, default_steps=30))
