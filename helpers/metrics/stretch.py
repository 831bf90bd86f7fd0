"""Figures of one stretch of time: what a selected window on a timeline shows.

The same building blocks as the whole-trace metrics (GPU work unions, the idle gaps and the cause
each is blamed on, sync calls), clipped to ``[start_us, end_us)``: a window that is exactly one
step gives that step's figures from :func:`~.gpu.gpu_busy` and :func:`~.gpu.idle_gaps`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model import Trace
from .activity import CAUSES, gpu_work_union, is_sync_call
from .gpu import idle_gaps
from .intervals import merge_intervals, overlap
from .syncs import sync_point_calls
from .windows import _devices_of


def _clipped(starts: np.ndarray, ends: np.ndarray, ws: float, we: float) -> float:
    """Microseconds of the intervals inside the window (intervals of one kind may overlap: their union)."""
    if starts.size == 0:
        return 0.0
    us, ue = merge_intervals(starts, ends)
    return float(overlap(us, ue, np.array([ws]), np.array([we])).sum())


def window_stats(trace: Trace, start_us: float, end_us: float) -> dict[str, Any]:
    """GPU busy, the GPU's idle time by what the host did meanwhile, and the kernels, copies and syncs
    in ``[start_us, end_us)`` (absolute microseconds, as the events table holds them).

    ``gpu_busy_share`` is the busiest GPU's (one rank and device); ``idle_by_cause_us`` sums the
    analysis windows' idle gaps clipped to the stretch; counts are of events that overlap it, times
    are the parts inside it.
    """
    ws, we = float(start_us), float(end_us)
    length = max(we - ws, 0.0)
    out: dict[str, Any] = {"start_us": ws, "end_us": we, "length_us": length, "has_gpu": trace.has_gpu}
    ev = trace.events
    inw = (ev["end_us"].to_numpy() > ws) & (ev["start_us"].to_numpy() < we)
    busy = {}
    if trace.has_gpu:
        for rank in trace.ranks:
            for device in _devices_of(trace, rank):
                us, ue = gpu_work_union(trace, rank, device)
                busy[(rank, device)] = float(overlap(us, ue, np.array([ws]), np.array([we])).sum())
    out["gpu_busy_us"] = max(busy.values()) if busy else float("nan")
    out["gpu_busy_share"] = out["gpu_busy_us"] / length if busy and length > 0 else float("nan")
    idle = {c: 0.0 for c in CAUSES}
    gaps = idle_gaps(trace)
    if not gaps.empty:
        inside = gaps[(gaps["end_us"] > ws) & (gaps["start_us"] < we)]
        clip = (np.minimum(inside["end_us"], we) - np.maximum(inside["start_us"], ws)).clip(lower=0)
        for cause, us in clip.groupby(inside["cause"]).sum().items():
            idle[str(cause)] = float(us)
    out["idle_by_cause_us"] = idle
    kind = ev["kind"].to_numpy()
    on_gpu = ev["device"].to_numpy() >= 0
    start, end = ev["start_us"].to_numpy(), ev["end_us"].to_numpy()
    k = inw & on_gpu & (kind == "kernel")
    out["kernels"] = int(k.sum())
    out["kernel_us"] = _clipped(start[k], end[k], ws, we)
    coll = inw & (kind == "collective")
    out["collectives"] = int(coll.sum())
    copies = {}
    cp = inw & (kind == "memcpy")
    if cp.any():
        direction = ev["copy_kind"].to_numpy(dtype=object)
        for d in sorted(set(direction[cp].tolist())):
            of = cp & (direction == d)
            copies[str(d)] = {"count": int(of.sum()), "time_us": _clipped(start[of], end[of], ws, we)}
    out["copies"] = copies
    sy = inw & is_sync_call(trace)
    out["syncs"] = int((sy & sync_point_calls(trace)).sum())  # a .cpu() copy and its stream sync: one wait
    out["sync_blocked_us"] = _clipped(start[sy], end[sy], ws, we)
    return out


__all__ = ["window_stats"]
