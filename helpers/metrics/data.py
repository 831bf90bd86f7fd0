"""Data loading: host time waiting for the next batch."""

from __future__ import annotations

from ..model import Trace
from ._cache import _cached
from .activity import host_union
from .intervals import overlap
from .windows import windows


@_cached
def data_wait(trace: Trace) -> dict[str, float]:
    """Host time in DataLoader / data ranges per step (less the device copies issued there: those are
    copy work), and the share of step time it takes."""
    win = windows(trace)
    n_steps = max(int((win["step"] >= 0).sum()), 1)
    total = 0.0
    for rank in trace.ranks:
        us, ue = host_union(trace, rank, "data_wait")
        w = win[win["rank"] == rank]
        total += float(overlap(us, ue, w["start_us"].to_numpy(), w["end_us"].to_numpy()).sum())
    return {"data_wait_us_per_step": total / n_steps, "data_wait_share": total / (float(win["dur_us"].sum()) or 1.0)}
