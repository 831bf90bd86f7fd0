"""Data loading stall: heavy per-sample CPU work in the main process starves the model.

broken: ``num_workers=0`` (the training process decodes every sample itself), pageable memory,
        blocking host-to-device copies.
fixed:  worker processes, pinned memory, non-blocking copies, prefetching, persistent workers.

The variants are what ``tools/record_traces.py`` records. Lab 01 shows only the loop as first
written (:class:`AugmentedImages`, :func:`broken_loader`, :func:`make_step_from_loader` with its
default :func:`blocking_copy`); the learner writes the loader and the device copy of the fix.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator

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


# (Former single_thread_worker, removed: every DataLoader worker already runs torch.set_num_threads(1)
# before it loads a sample (threads_in_workers shows it). What can oversubscribe the cores from inside
# workers is a native library with its own thread pool: NumPy's BLAS, OpenCV, numexpr; limit those in a
# worker_init_fn (threadpoolctl.threadpool_limits(1), cv2.setNumThreads(0)) when transforms use them.)


def _worker_threads(_: int) -> tuple[int, int]:
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return (info.id if info else -1), torch.get_num_threads()


def threads_in_workers(num_workers: int = 2) -> dict[str, object]:
    """The machine's cores, and PyTorch's intra-op threads in this process and in each DataLoader worker, measured."""
    probe = _ThreadProbe(num_workers)
    loader = DataLoader(probe, batch_size=None, num_workers=num_workers,
                        multiprocessing_context="fork" if sys.platform.startswith("linux") else None)
    seen = dict(iter(loader))
    return {"cores": os.cpu_count(), "this process": torch.get_num_threads(), "each worker": [seen[k] for k in sorted(seen)]}


class _ThreadProbe(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[int, int]:
        return _worker_threads(index)


def broken_loader(dataset: Dataset, batch_size: int = BATCH_SIZE) -> DataLoader:
    """The loader as first written."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=0)


def _fixed_loader(dataset: Dataset, batch_size: int = BATCH_SIZE) -> DataLoader:
    """The recorded ``fixed`` variant: workers prepare batches in parallel and ahead of time, into pinned memory."""
    workers = min(12, os.cpu_count() or 1)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                      pin_memory=torch.cuda.is_available(), prefetch_factor=4, persistent_workers=True,
                      multiprocessing_context="fork" if sys.platform.startswith("linux") else None)


def blocking_copy(batch: tuple[torch.Tensor, torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's device copy as first written."""
    x, y = batch
    return x.to(device), y.to(device)


def _async_copy(batch: tuple[torch.Tensor, torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = batch
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


ToDevice = Callable[[tuple[torch.Tensor, torch.Tensor], torch.device], tuple[torch.Tensor, torch.Tensor]]


def make_step_from_loader(loader: DataLoader, device: torch.device, to_device: ToDevice = blocking_copy) -> StepFn:
    """A training step that takes its batch from ``loader`` and moves it with ``to_device(batch, device)``."""
    torch.manual_seed(0)
    if device.type == "cpu":
        # On a CPU-only machine the model would otherwise spread over every core and fight the
        # loader's workers; one core plays the part a GPU plays on a GPU machine.
        torch.set_num_threads(1)
    # On a CPU the model shares the cores with the loader; keep it small so data stays the bottleneck.
    model = make_model(32 if device.type == "cuda" else 4).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches: Iterator = iter(loader)

    def data(_: int):
        nonlocal batches
        try:
            batch = next(batches)
        except StopIteration:
            batches = iter(loader)
            batch = next(batches)
        return to_device(batch, device)

    def forward(batch) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x), y)

    def optimizer() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    return phases_step(data, forward, lambda loss: loss.backward(), optimizer)


def make_step(variant: str, device: torch.device) -> StepFn:
    dataset = AugmentedImages()
    if variant == "broken":
        return make_step_from_loader(broken_loader(dataset), device)
    return make_step_from_loader(_fixed_loader(dataset), device, to_device=_async_copy)


if __name__ == "__main__":
    sys.exit(run_cli((__doc__ or __name__).splitlines()[0], VARIANTS, make_step, default_steps=10))
