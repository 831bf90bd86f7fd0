"""The capstone's mystery loop: more than one problem at once.

broken:     a starved DataLoader (num_workers=0) *and* per-step logging that syncs
            (``.item()``, formatting a GPU tensor, ``torch.cuda.synchronize()``).
data_fixed: only the loader fixed: the sync stall is still there, and now it shows.
fixed:      both fixed.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from ..profiling import annotate
from . import data_stall, sync_stall
from .common import StepFn, run_cli

VARIANTS = ("broken", "data_fixed", "fixed")


class FeatureRows(Dataset):
    """Feature vectors that cost some CPU time each (parsing, normalising)."""

    def __init__(self, width: int, passes: int = 6, length: int = 1_000_000) -> None:
        self.width, self.passes, self.length = width, passes, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(index)
        row = rng.standard_normal(self.width, dtype=np.float32)
        for _ in range(self.passes):
            row = np.tanh(row * 0.9 + 0.1)
        return torch.from_numpy(row), index % 10


def sizes(device: torch.device) -> tuple[int, int, int]:
    """(width, batch, passes per sample): GPU-sized on a GPU, small enough for two CPU cores otherwise."""
    return (sync_stall.WIDTH, sync_stall.BATCH, 2) if device.type == "cuda" else (256, 64, 30)


def make_loader(variant: str, device: torch.device) -> DataLoader:
    width, batch, passes = sizes(device)
    dataset = FeatureRows(width, passes)
    if variant == "broken":
        return data_stall.broken_loader(dataset, batch)
    return data_stall.fixed_loader(dataset, batch)


def make_step_from_loader(loader: DataLoader, device: torch.device, sync_every_step: bool) -> StepFn:
    torch.manual_seed(0)
    if device.type == "cpu":
        torch.set_num_threads(1)  # leave the other cores to the loader's workers (see data_stall)
    width, _, _ = sizes(device)
    model = sync_stall.make_model(width).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    non_blocking = bool(getattr(loader, "pin_memory", False))
    state = {"it": iter(loader), "loss_sum": None}
    log: list[str] = []

    def step(i: int) -> None:
        with annotate("data"):
            try:
                x, y = next(state["it"])
            except StopIteration:
                state["it"] = iter(loader)
                x, y = next(state["it"])
            x, y = x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)
        with annotate("forward"):
            loss = F.cross_entropy(model(x), y)
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        with annotate("logging"):
            if sync_every_step:
                log.append(f"step {i} loss {loss}")
                log.append(f"{loss.item():.4f}")
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
            else:
                d = loss.detach()
                state["loss_sum"] = d if state["loss_sum"] is None else state["loss_sum"] + d
                if (i + 1) % 10 == 0:
                    log.append(f"{state['loss_sum'].item() / 10:.4f}")
                    state["loss_sum"] = None

    return step


def make_step(variant: str, device: torch.device) -> StepFn:
    return make_step_from_loader(make_loader(variant, device), device, sync_every_step=variant != "fixed")


if __name__ == "__main__":
    sys.exit(run_cli(__doc__.splitlines()[0], VARIANTS, make_step, default_steps=10))
