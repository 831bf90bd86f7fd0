"""Shapes and layouts that decide whether the tensor cores can be used well.

Tensor-core kernels load their tiles 16 bytes at a time: a matrix dimension that is not a multiple of 8
bf16/fp16 elements (4 for TF32) forces cuBLAS onto kernels with narrower loads (``align1``/``align2`` in the
CUTLASS names) or, for TF32, onto the fp32 FFMA pipes. The classic case is a language model's output layer
over a vocabulary of 50257 tokens; padding it to 50304 (a multiple of 64) keeps every product aligned. For
convolutions, cuDNN's tensor-core kernels want channels last (NHWC): with the default NCHW layout each
convolution is wrapped in layout transposes.

vocab_50257:     bf16 forward + backward of a (tokens x 768) @ (768 x 50257) output layer.
vocab_50304:     the same, padded to 50304 outputs (the logits sliced back to 50257 before the loss).
conv_nchw:       bf16 forward + backward of a small conv stack, default (NCHW) layout.
conv_channels_last: the same model and input in ``torch.channels_last``.

On a CPU the sizes are small and the tensor-core effects do not exist: the CPU runs exist so that the code runs
anywhere; what they time is not what a GPU would show.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch import nn

from ..profiling import annotate
from .common import StepFn, run_cli

VARIANTS = ("vocab_50257", "vocab_50304", "conv_nchw", "conv_channels_last")
VOCAB, PADDED_VOCAB, EMBED = 50257, 50304, 768


def _tokens(device: torch.device) -> int:
    return 8192 if device.type == "cuda" else 64


class PaddedLogits(nn.Module):
    """An output layer of ``padded`` rows of which only the first ``real`` are logits (the rest stay zero)."""

    def __init__(self, embed: int, real: int, padded: int) -> None:
        super().__init__()
        self.real = real
        self.fc = nn.Linear(embed, padded, bias=False)
        with torch.no_grad():
            self.fc.weight[real:].zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)[..., : self.real]


def conv_net() -> nn.Module:
    layers: list[nn.Module] = []
    chans = 3
    for out in (64, 128, 128, 256):
        layers += [nn.Conv2d(chans, out, 3, padding=1), nn.BatchNorm2d(out), nn.ReLU()]
        chans = out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(chans, 10))


def make_step(variant: str, device: torch.device) -> StepFn:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    if variant.startswith("vocab"):
        head: nn.Module = (nn.Linear(EMBED, VOCAB, bias=False) if variant == "vocab_50257"
                           else PaddedLogits(EMBED, VOCAB, PADDED_VOCAB))
        head = head.to(device)
        x = torch.randn(_tokens(device), EMBED, device=device)
        y = torch.randint(0, VOCAB, (_tokens(device),), device=device)

        def forward() -> torch.Tensor:
            return F.cross_entropy(head(x), y)

        params = list(head.parameters())
    else:
        model = conv_net().to(device)
        batch, size = (64, 112) if cuda else (4, 32)
        x = torch.randn(batch, 3, size, size, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        if variant == "conv_channels_last":
            model = model.to(memory_format=torch.channels_last)
            x = x.to(memory_format=torch.channels_last)

        def forward() -> torch.Tensor:
            return F.cross_entropy(model(x), y)

        params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=1e-3)

    def step(i: int) -> None:
        with annotate("forward"), torch.autocast(device.type, dtype=dtype, enabled=cuda):
            loss = forward()
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step


if __name__ == "__main__":
    sys.exit(run_cli((__doc__ or __name__).splitlines()[0], VARIANTS, make_step, default_steps=20))
