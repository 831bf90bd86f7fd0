"""Launch overhead: a model of many tiny layers launches thousands of microsecond-long kernels.

broken:   eager mode, a for-loop optimizer (one kernel per parameter per op).
foreach:  the same model with a multi-tensor (foreach) optimizer: fewer, bigger optimizer kernels.
compile:  torch.compile fuses the small ops into a few kernels (plus a fused optimizer on GPU).
compile_foreach: torch.compile with the same foreach Adam as ``foreach``, so compile's own gain is
          measured apart from the optimizer's (``compile`` changes both at once on a GPU).
graphs:   the whole step captured once as a CUDA Graph and replayed with one launch (GPU only).
graphs_nowarmup: a wrong answer kept for recording: the same capture without the warm-up steps, so
          Adam creates its state (zero-filled moments) inside the capture and every replay resets it.
bigbatch: 16x the samples per step: the same number of launches does 16x the work
          (an honest fix when the batch was small only by habit; compare time per sample).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch import nn

from ..profiling import annotate, require_gpu
from .common import StepFn, phases_step, run_cli

VARIANTS = ("broken", "foreach", "compile", "compile_foreach", "graphs", "graphs_nowarmup", "bigbatch")
DEPTH, WIDTH, BATCH = 24, 64, 32
SAMPLES = 8  # distinct input batches, reused round-robin


class TinyBlocks(nn.Module):
    """DEPTH blocks of Linear + LayerNorm + GELU with a residual: lots of ops, little math each."""

    def __init__(self, depth: int = DEPTH, width: int = WIDTH) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def make_data(device: torch.device, batch: int = BATCH) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(batch, WIDTH, generator=g).to(device), torch.randn(batch, 1, generator=g).to(device)) for _ in range(SAMPLES)]


def make_eager_step(device: torch.device, foreach: bool, batch: int = BATCH, compiled: bool = False,
                    fused_adam: bool | None = None) -> StepFn:
    """Eager (or compiled) steps; on a GPU a compiled step uses fused Adam unless ``fused_adam=False``."""
    torch.manual_seed(0)
    model = TinyBlocks().to(device)
    fused = (compiled if fused_adam is None else fused_adam) and device.type == "cuda"
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=foreach and not fused, fused=fused or None)
    fwd = torch.compile(model) if compiled else model
    data = make_data(device, batch)

    def forward(b):
        x, y = b
        return F.mse_loss(fwd(x), y)

    def optimizer() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    return phases_step(lambda i: data[i % SAMPLES], forward, lambda loss: loss.backward(), optimizer)


def _recorded_graph_step(device: torch.device, warmup: bool = True) -> StepFn:
    """Capture forward, backward and the optimizer step as one CUDA Graph (``warmup=False``: the wrong answer)."""
    require_gpu("CUDA Graphs")
    torch.manual_seed(0)
    model = TinyBlocks().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True, foreach=True)
    data = make_data(device)
    static_x = torch.zeros_like(data[0][0])
    static_y = torch.zeros_like(data[0][1])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream, as graph capture requires
        for _ in range(3 if warmup else 0):
            opt.zero_grad(set_to_none=True)
            F.mse_loss(model(static_x), static_y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = F.mse_loss(model(static_x), static_y)
        static_loss.backward()
        opt.step()

    def step(i: int) -> None:
        with annotate("data"):
            x, y = data[i % SAMPLES]
            static_x.copy_(x)
            static_y.copy_(y)
        with annotate("graph replay"):
            graph.replay()

    return step


def make_step(variant: str, device: torch.device) -> StepFn:
    if variant in ("graphs", "graphs_nowarmup"):
        return _recorded_graph_step(device, warmup=variant == "graphs")
    if variant == "bigbatch":
        return make_eager_step(device, foreach=True, batch=BATCH * 16)
    if variant == "compile_foreach":
        return make_eager_step(device, foreach=True, compiled=True, fused_adam=False)
    return make_eager_step(device, foreach=variant != "broken", compiled=variant == "compile")


if __name__ == "__main__":
    sys.exit(run_cli((__doc__ or __name__).splitlines()[0], VARIANTS, make_step, default_steps=20))
