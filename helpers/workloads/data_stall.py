"""Data loading stall: heavy per-sample CPU work in the main process starves the model.

broken: ``num_workers=0`` (the training process decodes every sample itself), pageable memory,
        blocking host-to-device copies.
fixed:  worker processes, pinned memory, non-blocking copies, prefetching, persistent workers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .common import StepFn, phases_step, run_cli

VARIANTS = ("broken", "fixed")
BATCH_SIZE = 32
IMAGE_SIZE = 64


class AugmentedImages(Dataset):
    """Synthetic images that cost real CPU time per sample, like decoding plus augmentation."""

    def __init__(self, length: int = 100_000, size: int = IMAGE_SIZE, blur_passes: int = 20) -> None:
        self.length, self.size, self.blur_passes = length, size, blur_passes

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(index)
        img = rng.random((3, self.size, self.size), dtype=np.float32)
        # "Augmentation" in NumPy, like a PIL/OpenCV transform chain: single-threaded, one core
        # per sample however many the machine has, and invisible to the PyTorch profiler.
        for k in range(self.blur_passes):
            img = 0.5 * img + 0.5 * np.roll(img, 1, axis=1 + k % 2)
        return torch.from_numpy(img), index % 10


def make_model(width: int = 32) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        nn.Flatten(), nn.Linear(2 * width * 16, 10),
    )


def single_thread_worker(_: int) -> None:
    """worker_init_fn: one intra-op thread per DataLoader worker (many workers x many threads only fight)."""
    torch.set_num_threads(1)  # each worker is one core; many threads per worker only fight


def broken_loader(dataset: Dataset, batch_size: int = BATCH_SIZE) -> DataLoader:
    """The loader as first written: every sample is prepared in the training process."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=0)


def fixed_loader(dataset: Dataset, batch_size: int = BATCH_SIZE) -> DataLoader:
    """Workers prepare batches in parallel and ahead of time, into pinned memory."""
    workers = min(12, os.cpu_count() or 1)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                      pin_memory=torch.cuda.is_available(), prefetch_factor=4, persistent_workers=True,
                      worker_init_fn=single_thread_worker,
                      multiprocessing_context="fork" if sys.platform.startswith("linux") else None)


def make_step_from_loader(loader: DataLoader, device: torch.device) -> StepFn:
    """A training step that takes its batch from ``loader`` (copies are non-blocking when the loader pins memory)."""
    torch.manual_seed(0)
    if device.type == "cpu":
        # On a CPU-only machine the model would otherwise spread over every core and fight the
        # loader's workers; one core plays the part a GPU plays on a GPU machine.
        torch.set_num_threads(1)
    # On a CPU the model shares the cores with the loader; keep it small so data stays the bottleneck.
    model = make_model(32 if device.type == "cuda" else 4).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    non_blocking = bool(getattr(loader, "pin_memory", False))
    batches: Iterator = iter(loader)

    def data(_: int):
        nonlocal batches
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        return x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)

    def forward(batch) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x), y)

    def optimizer() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    return phases_step(data, forward, lambda loss: loss.backward(), optimizer)


def make_step(variant: str, device: torch.device) -> StepFn:
    dataset = AugmentedImages()
    loader = broken_loader(dataset) if variant == "broken" else fixed_loader(dataset)
    return make_step_from_loader(loader, device)


if __name__ == "__main__":
    sys.exit(run_cli(__doc__.splitlines()[0], VARIANTS, make_step, default_steps=10))
