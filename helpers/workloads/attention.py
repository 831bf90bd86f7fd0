"""Causal self-attention, written out by hand (eager) and as one fused call (SDPA).

Eager attention computes the scores ``q @ k^T`` as a T x T matrix per batch row and head, scales and masks
it, takes its softmax and multiplies by ``v``: every one of those is a kernel that writes (or reads) the
whole T x T matrix through memory, and autograd keeps some of them for backward. Memory and traffic
grow with T^2. ``torch.nn.functional.scaled_dot_product_attention`` runs the same computation in one fused
kernel where one exists for the device and dtype (FlashAttention or memory-efficient attention on a GPU,
a flash-style kernel on the CPU): the scores are made and used in tiles that never leave the chip, so no
T x T matrix is ever written to memory.

eager:  :func:`attend_eager` (scores, scale, causal mask, softmax, @ v).
sdpa:   ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` on the per-head layout.

q, k and v come in the layout a model makes them in, ``(batch, T, heads, head_dim)`` (``x @ W_q`` viewed per
head); attention itself works per head, on ``(batch, heads, T, head_dim)``.

``python -m helpers.workloads.attention --variant eager`` runs forward and backward of one attention call
per step (``tools/record_kernels.py`` profiles it with nsys and ncu).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..profiling import annotate
from .common import StepFn, run_cli

VARIANTS = ("eager", "sdpa")
#: (batch, sequence length T, heads, head dimension): on a GPU in bf16, on a CPU in fp32 and small enough for seconds.
GPU_SHAPE = (8, 2048, 16, 64)
CPU_SHAPE = (2, 1024, 4, 64)


def shape(device: torch.device) -> tuple[int, int, int, int]:
    return GPU_SHAPE if device.type == "cuda" else CPU_SHAPE


def dtype_for(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def make_qkv(device: torch.device, seed: int = 0, requires_grad: bool = True,
             size: tuple[int, int, int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v of shape (batch, T, heads, head_dim) from ``seed``, in the device's dtype."""
    b, t, h, d = size or shape(device)
    g = torch.Generator().manual_seed(seed)
    out = [torch.randn(b, t, h, d, generator=g).to(device=device, dtype=dtype_for(device)) for _ in range(3)]
    return tuple(x.requires_grad_(requires_grad) for x in out)  # type: ignore[return-value]


def attend_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention as written in many models: each position attends to itself and the positions before it.
    Takes and returns ``(batch, T, heads, head_dim)``."""
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))  # (batch, heads, T, head_dim)
    t = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (batch, heads, T, T)
    future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2)


def make_step_with(attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
                   device: torch.device, size: tuple[int, int, int, int] | None = None) -> StepFn:
    """A step of forward and backward through ``attend(q, k, v)`` on this device's q, k and v (or ``size``)."""
    q, k, v = make_qkv(device, size=size)

    def step(i: int) -> None:
        with annotate("forward"):
            out = attend(q, k, v)
        with annotate("backward"):
            out.float().square().mean().backward()
        q.grad = k.grad = v.grad = None

    return step


def make_step(variant: str, device: torch.device) -> StepFn:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")
    if variant == "eager":
        return make_step_with(attend_eager, device)
    return make_step_with(lambda q, k, v: F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2), device)


if __name__ == "__main__":
    sys.exit(run_cli((__doc__ or __name__).splitlines()[0], VARIANTS, make_step, default_steps=10))
