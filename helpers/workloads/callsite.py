"""A token-classification loop whose hidden syncs sit in library code (lab 11).

The loop itself reads no GPU value: a static scan of its source finds nothing. The syncs are inside the
utilities it calls (``helpers.workloads.trainkit``): the masked loss, the loss meter, gradient clipping. A
profile with Python call stacks (``with_stack=True``) shows, above each op that syncs, the Python frames that
called it; on a GPU, ``torch.cuda.set_sync_debug_mode("warn")`` names the same lines as they run, and Nsight
Systems' ``--cudabacktrace`` records a backtrace at each synchronizing CUDA call.

broken: the loop as written, with the library's syncing utilities.
fixed:  the same training: the loss with ``ignore_index``, clipping without the non-finite check, the
        meter's sums kept on the device and read every LOG_EVERY steps.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch import nn

from ..profiling import annotate
from . import trainkit
from .common import StepFn, run_cli

VARIANTS = ("broken", "fixed")
LOG_EVERY = 10
#: (batch, sequence, width) on a GPU and on a CPU; a fifth of the targets are padding.
GPU_SIZES, CPU_SIZES = (64, 512, 1024), (8, 64, 64)
#: The clipping norm is below the gradients' (0.1-0.2 on these models), so clipping acts on every step: a loop that
#: drops it trains differently.
CLASSES, MAX_NORM, LR = 16, 0.05, 1e-3


def make_model(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.GELU(),
                         nn.Linear(width, CLASSES))


def setup(device: torch.device, seed: int = 0, sizes: tuple[int, int, int] | None = None):
    """Model, Adam and 4 fixed batches of token features and targets (a fifth of them padding), from ``seed``."""
    batch, seq, width = sizes or (GPU_SIZES if device.type == "cuda" else CPU_SIZES)
    torch.manual_seed(seed)
    model = make_model(width).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(4, batch, seq, width, generator=g)
    ys = torch.randint(0, CLASSES, (4, batch, seq), generator=g)
    ys[torch.rand(4, batch, seq, generator=g) < 0.2] = trainkit.IGNORE
    return model, opt, xs.to(device), ys.to(device)


def broken_step(model: nn.Module, opt: torch.optim.Optimizer, xs: torch.Tensor, ys: torch.Tensor, log: list[str]) -> StepFn:
    """Return step(i): the loop as written."""
    meter = trainkit.LossMeter()

    def step(i: int) -> None:
        x, y = xs[i % len(xs)], ys[i % len(ys)]
        with annotate("forward"):
            loss = trainkit.masked_cross_entropy(model(x).flatten(0, 1), y.flatten())
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            trainkit.clip_gradients(model, MAX_NORM)
            opt.step()
            opt.zero_grad(set_to_none=True)
        with annotate("logging"):
            meter.update(loss.detach())
            if (i + 1) % LOG_EVERY == 0:
                log.append(f"step {i + 1}: loss={meter.mean():.4f}")
                meter.reset()

    return step


def fixed_step(model: nn.Module, opt: torch.optim.Optimizer, xs: torch.Tensor, ys: torch.Tensor, log: list[str]) -> StepFn:
    """Return step(i): the same training with no sync but the read every LOG_EVERY steps."""
    running = {"total": torch.zeros((), device=xs.device), "count": torch.zeros((), device=xs.device)}

    def step(i: int) -> None:
        x, y = xs[i % len(xs)], ys[i % len(ys)]
        with annotate("forward"):
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=trainkit.IGNORE)
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
            opt.step()
            opt.zero_grad(set_to_none=True)
        with annotate("logging"):
            ok = torch.isfinite(loss.detach())
            running["total"] = running["total"] + torch.where(ok, loss.detach(), 0.0)
            running["count"] = running["count"] + ok
            if (i + 1) % LOG_EVERY == 0:
                log.append(f"step {i + 1}: loss={(running['total'] / running['count'].clamp(min=1)).item():.4f}")
                running["total"] = torch.zeros((), device=xs.device)
                running["count"] = torch.zeros((), device=xs.device)

    return step


def make_step(variant: str, device: torch.device) -> StepFn:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")
    return (broken_step if variant == "broken" else fixed_step)(*setup(device), [])


if __name__ == "__main__":
    sys.exit(run_cli((__doc__ or __name__).splitlines()[0], VARIANTS, make_step, default_steps=20))
