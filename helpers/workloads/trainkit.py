"""A small training-utilities library, standing in for the third-party code a training loop calls.

Each utility is reasonable code of the kind found in real projects, and each hides a host-device
synchronization that the loop's own source does not show: a boolean mask used to index (its result's
size depends on the data, so the host must wait for the mask), a Python ``if`` on a tensor, ``.item()``,
and gradient clipping asked to raise on a non-finite norm (it must read the norm to decide). Lab 11 finds
them from the call stacks a profile records, and replaces them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: Targets with this value are padding: they count in no loss.
IGNORE = -100


def masked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the positions whose target is not padding (mean over those positions)."""
    keep = targets != IGNORE
    return F.cross_entropy(logits[keep], targets[keep])


class LossMeter:
    """The running mean of the losses seen since the last reset, skipping non-finite ones."""

    def __init__(self) -> None:
        self.total, self.count, self.skipped = 0.0, 0, 0

    def update(self, loss: torch.Tensor) -> None:
        if torch.isfinite(loss):
            self.total += loss.item()
            self.count += 1
        else:
            self.skipped += 1

    def mean(self) -> float:
        return self.total / max(self.count, 1)

    def reset(self) -> None:
        self.total, self.count = 0.0, 0


def clip_gradients(model: torch.nn.Module, max_norm: float) -> torch.Tensor:
    """Clip the gradients' global norm to ``max_norm``; fail loudly on a non-finite norm."""
    return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, error_if_nonfinite=True)
