"""Interval arithmetic on sorted ``(starts, ends)`` arrays: unions, overlaps, gaps, intersections."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError


def _pair(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` as two float arrays of one length (no copy when they already are)."""
    s, e = np.asarray(starts, dtype="float64"), np.asarray(ends, dtype="float64")
    if s.ndim != 1 or s.shape != e.shape:
        raise ArgumentError(f"interval starts and ends must be two 1-D arrays of one length, not of shapes {s.shape} "
                            f"and {e.shape}")
    return s, e


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals, as sorted disjoint ``(starts, ends)`` arrays."""
    starts, ends = _pair(starts, ends)
    if starts.size == 0:
        return starts, ends
    if starts.size > 1 and not (starts[1:] >= starts[:-1]).all():
        order = np.argsort(starts, kind="stable")
        s, e = starts[order], ends[order]
    else:  # already in order (most callers' rows are): the stable sort would keep it as it is
        s, e = starts, ends
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, s.size - 1]
    return s[first], run_end[last]


def covered_before(us: np.ndarray, ue: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the union ``(us, ue)`` that lies before each time ``t``."""
    us, ue = _pair(us, ue)
    t = np.asarray(t, dtype="float64")
    if us.size == 0:
        return np.zeros_like(t)
    return _covered(us, ue, _cumulative(us, ue), t)


def _cumulative(us: np.ndarray, ue: np.ndarray) -> np.ndarray:
    """The union's length before each of its intervals, and its whole length last."""
    cum = np.empty(us.size + 1)
    cum[0] = 0.0
    np.cumsum(ue - us, out=cum[1:])
    return cum


def _covered(us: np.ndarray, ue: np.ndarray, cum: np.ndarray, t: np.ndarray) -> np.ndarray:
    i = np.searchsorted(us, t, side="right") - 1
    safe = np.clip(i, 0, None)
    part = np.clip(np.minimum(t, ue[safe]) - us[safe], 0, None)
    return np.where(i >= 0, cum[safe] + part, 0.0)


def overlap(us: np.ndarray, ue: np.ndarray, qs: np.ndarray, qe: np.ndarray) -> np.ndarray:
    """How much of each query interval ``[qs, qe)`` the union ``(us, ue)`` covers."""
    qs, qe = _pair(qs, qe)
    us, ue = _pair(us, ue)
    if us.size == 0:
        return np.zeros_like(qe) - np.zeros_like(qs)
    cum = _cumulative(us, ue)  # once for both ends of the queries
    return _covered(us, ue, cum, qe) - _covered(us, ue, cum, qs)


def gaps_in(us: np.ndarray, ue: np.ndarray, ws: float, we: float) -> tuple[np.ndarray, np.ndarray]:
    """The parts of ``[ws, we)`` that the union ``(us, ue)`` leaves uncovered."""
    us, ue = _pair(us, ue)
    i0 = np.searchsorted(ue, ws, side="right")
    i1 = np.searchsorted(us, we, side="left")
    s = np.clip(us[i0:i1], ws, we)
    e = np.clip(ue[i0:i1], ws, we)
    gs = np.r_[ws, e]
    ge = np.r_[s, we]
    keep = ge > gs
    return gs[keep], ge[keep]


def intersect(as_: np.ndarray, ae: np.ndarray, bs: np.ndarray, be: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intersection of two unions, as sorted disjoint ``(starts, ends)`` arrays.

    Each interval of ``a`` meets the run of ``b``'s intervals that end after it starts and start before it
    ends (two binary searches, both unions being sorted); the pairs are cut to their common part, in
    order. The same intervals as walking both lists side by side, without a Python step per interval."""
    (as_, ae), (bs, be) = _pair(as_, ae), _pair(bs, be)
    if as_.size == 0 or bs.size == 0:
        return np.empty(0), np.empty(0)
    first = np.searchsorted(be, as_, side="right")  # b's first interval ending after a's starts
    last = np.searchsorted(bs, ae, side="left")  # b's first interval starting at or after a's end
    count = np.clip(last - first, 0, None)
    i = np.repeat(np.arange(as_.size), count)
    j = np.arange(i.size) - np.repeat(np.cumsum(count) - count, count) + np.repeat(first, count)
    lo, hi = np.maximum(as_[i], bs[j]), np.minimum(ae[i], be[j])
    keep = lo < hi
    return lo[keep], hi[keep]


def subtract(as_, ae, bs, be) -> tuple[np.ndarray, np.ndarray]:
    """The union ``(as_, ae)`` less the union ``(bs, be)``, as sorted disjoint arrays."""
    if as_.size == 0 or bs.size == 0:
        return as_, ae
    lo, hi = float(min(as_[0], bs[0])), float(max(ae[-1], be[-1]))
    return intersect(as_, ae, *gaps_in(bs, be, lo, hi))
