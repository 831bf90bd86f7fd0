"""GPU-bound training loop: fp32 matrix products on FFMA units while the tensor cores stay idle.

The GPU is busy the whole step (no host stall, no data wait), so the timeline's gaps are gone and
what is left is the kernels themselves: fp32 GEMMs (cuBLAS ``sgemm``/``..._ffma_...`` kernels)
plus a LayerNorm and GELU per block (memory-bound elementwise kernels). The fixes change what the
kernels compute with, not when they run.

fp32:          the loop as written (the broken one): fp32 GEMMs on the FFMA pipes.
tf32:          ``torch.backends.cuda.matmul.fp32_precision = "tf32"`` (PyTorch 2.9+; before it ``allow_tf32 = True``):
               the same fp32 tensors, GEMMs on tensor cores with a 10-bit mantissa.
bf16:          ``torch.autocast("cuda", dtype=torch.bfloat16)`` around forward and loss.
fp16:          fp16 autocast with a ``torch.amp.GradScaler`` (fp16's small range needs the scaling).
compile:       bf16 + ``torch.compile(model)``: Triton kernels fuse the LayerNorm/GELU chains.
compile_ro:    bf16 + ``torch.compile(model, mode="reduce-overhead")`` (CUDA Graphs under the hood).
checkpoint:    bf16 + activation checkpointing of every block: less memory kept for backward,
               a second forward of each block inside backward.
empty_cache:   bf16 + ``torch.cuda.empty_cache()`` every step: the caching allocator gives its
               blocks back, so every step pays cudaFree/cudaMalloc again (each a device sync).
graph_break:   fp32 with a ``.item()`` inside the model's forward: what ``torch._dynamo.explain``
               reports as a graph break.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..capability import set_tf32
from ..profiling import annotate
from .common import StepFn, run_cli

VARIANTS = ("fp32", "tf32", "bf16", "fp16", "compile", "compile_ro", "checkpoint", "empty_cache", "graph_break")
WIDTH, DEPTH, BATCH = 4096, 6, 2048  # GPU sizes: about 25 ms of fp32 GEMMs a step on an H200
CPU_WIDTH, CPU_BATCH = 128, 64  # CPU sizes: the same structure, seconds not minutes
CLASSES = 10
LR = 1e-4


class Block(nn.Module):
    """Linear -> LayerNorm -> GELU: one GEMM (compute-bound) and two elementwise kernels (memory-bound)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.norm(self.fc(x)))


class Net(nn.Module):
    def __init__(self, width: int = WIDTH, depth: int = DEPTH, ckpt: bool = False, item_break: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, CLASSES)
        self.ckpt = ckpt
        self.item_break = item_break
        self.seen: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for k, block in enumerate(self.blocks):
            x = checkpoint(block, x, use_reentrant=False) if self.ckpt and self.training else block(x)
            if self.item_break and k == 0:
                self.seen.append(x.mean().item())  # a Python float in the middle of forward: a graph break
        return self.head(x)


def sizes(device: torch.device) -> tuple[int, int]:
    """(width, batch) for this device: the GPU sizes on CUDA, small ones on a CPU."""
    return (WIDTH, BATCH) if device.type == "cuda" else (CPU_WIDTH, CPU_BATCH)


def setup(device: torch.device, seed: int = 0, ckpt: bool = False, item_break: bool = False):
    """Model, optimizer and 4 fixed batches, all from ``seed`` (two setups with one seed are identical)."""
    width, batch = sizes(device)
    torch.manual_seed(seed)
    model = Net(width, DEPTH, ckpt=ckpt, item_break=item_break).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(4, batch, width, generator=g).to(device)
    ys = torch.randint(0, CLASSES, (4, batch), generator=g).to(device)
    return model, opt, xs, ys


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               dtype: torch.dtype | None = None, scaler: torch.amp.GradScaler | None = None) -> torch.Tensor:
    """One step; ``dtype`` autocasts forward and loss (bf16/fp16), ``scaler`` scales fp16's loss."""
    with annotate("forward"), torch.autocast(x.device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
        loss = F.cross_entropy(model(x), y)
    with annotate("backward"):
        (scaler.scale(loss) if scaler is not None else loss).backward()
    with annotate("optimizer"):
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
    return loss.detach()


def make_step(variant: str, device: torch.device) -> StepFn:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")
    cuda = device.type == "cuda"
    # A process-wide switch: set both ways so one process can run several variants in turn (PyTorch 2.9+'s
    # fp32_precision where it exists: once it is set, the older allow_tf32 can no longer be read).
    set_tf32(variant == "tf32")
    model, opt, xs, ys = setup(device, ckpt=variant == "checkpoint", item_break=variant == "graph_break")
    dtype = {"fp32": None, "tf32": None, "graph_break": None, "fp16": torch.float16}.get(variant, torch.bfloat16)
    scaler = torch.amp.GradScaler(device.type) if variant == "fp16" else None
    fwd: nn.Module | Callable = model
    if variant == "compile":
        fwd = torch.compile(model)
    elif variant == "compile_ro":
        fwd = torch.compile(model, mode="reduce-overhead")

    def step(i: int) -> None:
        if variant == "compile_ro" and cuda:
            torch.compiler.cudagraph_mark_step_begin()  # each step's outputs may be overwritten by the next replay
        train_step(fwd, opt, xs[i % 4], ys[i % 4], dtype=dtype, scaler=scaler)
        if variant == "empty_cache" and cuda:
            torch.cuda.empty_cache()

    return step


def losses(step_fn: Callable[..., torch.Tensor], device: torch.device, steps: int = 5, seed: int = 0,
           **kw: object) -> list[float]:
    """Losses of ``steps`` steps of ``step_fn(model, opt, x, y, **kw)`` from a fresh setup with ``seed``."""
    return run_steps(step_fn, device, steps, seed, **kw)[0]


def run_steps(step_fn: Callable[..., torch.Tensor], device: torch.device, steps: int = 5, seed: int = 0,
              **kw: object) -> tuple[list[float], torch.Tensor]:
    """``steps`` steps of ``step_fn(model, opt, x, y, **kw)`` from a fresh setup with ``seed``: the losses
    and the change of all parameters (one flat fp32 vector, on the CPU)."""
    model, opt, xs, ys = setup(device, seed=seed)
    before = torch.cat([p.detach().flatten().float().cpu() for p in model.parameters()])
    out = [float(step_fn(model, opt, xs[i % 4], ys[i % 4], **kw)) for i in range(steps)]
    after = torch.cat([p.detach().flatten().float().cpu() for p in model.parameters()])
    return out, after - before


if __name__ == "__main__":
    sys.exit(run_cli((__doc__ or __name__).splitlines()[0], VARIANTS, make_step, default_steps=20))
