"""Synchronization stall: hidden host-device syncs every step stop the CPU from running ahead.

Each step the host prepares part of the batch (NumPy work, as tokenizing or augmenting would)
while, in a healthy loop, the GPU is still busy with the previous step. A sync at the end of
every step forces the two to take turns instead.

The preparation runs in a range named ``prepare batch`` (:data:`PREP_RANGE`), not ``data``: it is
host compute the loop does itself, not a wait for a DataLoader, and a ``data`` range would make
the diagnosis blame the GPU's idle time on data loading (``data_stall``) on a loaded machine.

broken: every step logs ``loss.item()``, formats the GPU loss into a log line, copies
        predictions to the host for accuracy (``.cpu()``), branches on a GPU value and calls
        ``torch.cuda.synchronize()``.
fixed:  losses and accuracy accumulate on the GPU; one ``.item()`` every LOG_EVERY steps.
On a CPU there is nothing to wait for, so a CPU run of this loop shows no stall.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..profiling import annotate
from .common import StepFn, run_cli

VARIANTS = ("broken", "fixed")
WIDTH, DEPTH, BATCH = 4096, 6, 1024  # sized so the fixed loop is GPU-bound on an H200 host
NOISE = 256  # host-prepared features per sample
LOG_EVERY = 10
PREP_RANGE = "prepare batch"  # not a data-loading range name (metrics.DATA_WAIT): see the module docstring


def host_prepare(i: int, batch: int, device: torch.device) -> torch.Tensor:
    """Host-side batch preparation: a few milliseconds of NumPy work, then a non-blocking copy."""
    rng = np.random.default_rng(i)
    feats = np.tanh(rng.standard_normal((batch, NOISE), dtype=np.float32))
    for _ in range(3):
        feats = np.tanh(feats * 0.9 + 0.1)
    t = torch.from_numpy(feats)
    if device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


def make_model(width: int = WIDTH, depth: int = DEPTH) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def setup(device: torch.device):
    torch.manual_seed(0)
    width = WIDTH if device.type == "cuda" else 256
    model = make_model(width).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(8, BATCH, width, generator=g).to(device)
    ys = torch.randint(0, 10, (8, BATCH), generator=g).to(device)
    return model, opt, xs, ys


def get_batch(i: int, xs: torch.Tensor, ys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Stored inputs with the host-prepared features written into their first columns."""
    x = xs[i % 8].clone()
    x[:, :NOISE] += host_prepare(i, x.shape[0], x.device)
    return x, ys[i % 8]


def broken_step(model, opt, xs, ys, log: list[str]) -> StepFn:
    """One training step that logs its loss and accuracy every step."""

    def step(i: int) -> None:
        with annotate(PREP_RANGE):
            x, y = get_batch(i, xs, ys)
        with annotate("forward"):
            out = model(x)
            loss = F.cross_entropy(out, y)
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        with annotate("logging"):
            log.append(f"step {i} loss {loss}")
            acc = (out.argmax(1).cpu() == y.cpu()).float().mean()
            if loss > 100:
                log.append("loss exploded")
            log.append(f"loss={loss.item():.4f} acc={float(acc):.3f}")
            torch.cuda.synchronize() if torch.cuda.is_available() else None

    return step


def _fixed_step(model, opt, xs, ys, log: list[str]) -> StepFn:
    running = {"loss": None, "correct": None}

    def step(i: int) -> None:
        with annotate(PREP_RANGE):
            x, y = get_batch(i, xs, ys)
        with annotate("forward"):
            out = model(x)
            loss = F.cross_entropy(out, y)
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        with annotate("logging"):
            # Accumulate on the GPU; read back once every LOG_EVERY steps.
            batch_loss = loss.detach()
            correct = (out.argmax(1) == y).sum()
            running["loss"] = batch_loss if running["loss"] is None else running["loss"] + batch_loss
            running["correct"] = correct if running["correct"] is None else running["correct"] + correct
            if (i + 1) % LOG_EVERY == 0:
                log.append(f"loss={running['loss'].item() / LOG_EVERY:.4f}")
                running["loss"] = running["correct"] = None

    return step


def make_step(variant: str, device: torch.device) -> StepFn:
    model, opt, xs, ys = setup(device)
    log: list[str] = []
    return (broken_step if variant == "broken" else _fixed_step)(model, opt, xs, ys, log)


if __name__ == "__main__":
    sys.exit(run_cli((__doc__ or __name__).splitlines()[0], VARIANTS, make_step, default_steps=30))
