"""The capstone's mystery loop: more than one problem at once.

broken:     a starved DataLoader (num_workers=0) *and* per-step logging that syncs
            (``.item()``, formatting a GPU tensor, ``torch.cuda.synchronize()``), which stops the
            host from preparing the next batch's features while the GPU computes.
data_fixed: only the loader fixed: the sync stall is still there, and now it shows.
fixed:      both fixed.
(The lab's full fix also moves the per-batch feature work into the workers: FeatureRows(with_features=True).)
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
    """Feature vectors that cost some CPU time each (parsing, normalising).

    With ``with_features=True`` each row also carries the extra host-side features that the
    training loop otherwise computes per batch in the main process (``sync_stall.host_prepare``):
    the work moves into the DataLoader's workers.
    """

    def __init__(self, width: int, passes: int = 6, length: int = 1_000_000, with_features: bool = False) -> None:
        self.width, self.passes, self.length, self.with_features = width, passes, length, with_features
        self.table = np.random.default_rng(0).standard_normal((4096, 64), dtype=np.float32)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        base = self.table[index % len(self.table)]
        for _ in range(self.passes):  # per-sample work on a small vector, then tiled to full width
            base = np.tanh(base * 0.9 + 0.1)
        row = np.tile(base, self.width // 64)
        if self.with_features:
            feats = np.tanh(self.table[(index * 7) % len(self.table)].repeat(sync_stall.NOISE // 64))
            for _ in range(3):
                feats = np.tanh(feats * 0.9 + 0.1)
            row[: sync_stall.NOISE] += feats
        return torch.from_numpy(row), index % 10


def sizes(device: torch.device) -> tuple[int, int, int]:
    """(width, batch, passes per sample): GPU-sized on a GPU, small enough for two CPU cores otherwise."""
    return (sync_stall.WIDTH, sync_stall.BATCH, 4) if device.type == "cuda" else (320, 64, 60)


def make_loader(variant: str, device: torch.device) -> DataLoader:
    width, batch, passes = sizes(device)
    dataset = FeatureRows(width, passes)
    if variant == "broken":
        return data_stall.broken_loader(dataset, batch)
    return data_stall._fixed_loader(dataset, batch)


def make_step_from_loader(loader: DataLoader, device: torch.device, sync_every_step: bool) -> StepFn:
    torch.manual_seed(0)
    if device.type == "cpu":
        torch.set_num_threads(1)  # leave the other cores to the loader's workers (see data_stall)
    width, _, _ = sizes(device)
    model = sync_stall.make_model(width).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    non_blocking = bool(getattr(loader, "pin_memory", False))
    features_in_workers = bool(getattr(loader.dataset, "with_features", False))
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
            if not features_in_workers:  # per-batch feature work in the training process
                x[:, : sync_stall.NOISE] += sync_stall.host_prepare(i, x.shape[0], device)
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
    sys.exit(run_cli((__doc__ or __name__).splitlines()[0], VARIANTS, make_step, default_steps=10))
