"""Host syncs and the ops that cause them; PyTorch ops the host dispatches per step."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from ..model import Trace, kind_in
from ._cache import _cached
from ._store import _memo, name_mask
from .activity import _SYNCING_OP_SET, OPTIMIZER_RANGE, blocking_copy_calls, is_sync_call
from .intervals import merge_intervals, overlap
from .windows import windows


@_cached
def sync_stats(trace: Trace) -> dict[str, Any]:
    """Host time blocked in synchronizing CUDA calls, sync points per step, and the ops that caused them.

    ``syncing_ops_per_step`` counts PyTorch ops that force a sync on a GPU (``aten::item`` and
    friends); it is measurable on CPU-only traces too, where nothing actually waits.
    """
    ev = trace.events
    is_sync = is_sync_call(trace)
    win = windows(trace)
    n_steps = max(int((win["step"] >= 0).sum()), 1)
    if (win["step"] >= 0).any():
        is_sync = is_sync & (ev["step"] >= 0).to_numpy()
    in_steps = ev[is_sync]
    blocked = float(in_steps["dur_us"].sum())  # CUDA API calls on one thread never nest
    points = ev[is_sync & sync_point_calls(trace)]
    causes = _sync_causes(ev, points)
    total_window = float(win["dur_us"].sum()) or 1.0
    ops = ev[kind_in(ev, ("cpu_op",)) & name_mask(trace, "syncing_op", _SYNCING_OP_SET.__contains__)]
    ops = ops[ops["step"] >= 0] if (win["step"] >= 0).any() else ops
    ops = ops[~_inside_ranges(ops, ev, OPTIMIZER_RANGE)]
    # aten::item calls aten::_local_scalar_dense, `if t:` calls aten::is_nonzero which calls aten::item:
    # count the outermost op of each nest once.
    outer = outermost_ops(ops)
    return {
        "syncing_ops_per_step": float(len(outer) / n_steps),
        "sync_points": int(len(points)),
        "sync_points_per_step": float(len(points) / n_steps),
        "blocked_us_per_step": blocked / n_steps,
        "blocked_share": blocked / total_window,
        "causes": causes,
    }


def sync_point_calls(trace: Trace) -> np.ndarray:
    """For every event: is it a sync point, one host wait for the GPU? Every sync call is one, except a
    blocking copy directly followed by a sync (:func:`_copies_then_sync`): that pair is one wait. Kept with
    the trace: explore's selection figures ask on every selection."""
    memo = _memo(trace)
    if "sync_point_calls" not in memo:
        memo["sync_point_calls"] = is_sync_call(trace) & ~_copies_then_sync(trace)
    return memo["sync_point_calls"]


def _copies_then_sync(trace: Trace) -> np.ndarray:
    """For every event: is it a blocking copy call (:func:`blocking_copy_calls`) whose thread's next CUDA
    call is a sync? PyTorch copies a tensor to pageable memory that way (``.cpu()``: the copy, then a
    stream sync); the host waits once, so the pair is one sync point, counted at the sync."""
    ev = trace.events
    out = np.zeros(len(ev), dtype=bool)
    blocking = blocking_copy_calls(trace)
    if not blocking.any():
        return out
    at = np.flatnonzero(kind_in(ev, ("runtime",)) & (ev["device"].to_numpy() < 0))
    rt = ev.iloc[at]
    order = np.lexsort((rt["start_us"].to_numpy(), rt["tid"].to_numpy(), rt["rank"].to_numpy()))
    rows = at[order]
    rank, tid = ev["rank"].to_numpy()[rows], ev["tid"].to_numpy()[rows]
    named = is_sync_call(trace) & ~blocking
    paired = blocking[rows[:-1]] & named[rows[1:]] & (rank[:-1] == rank[1:]) & (tid[:-1] == tid[1:])
    out[rows[:-1][paired]] = True
    return out


def _inside_ranges(sel: pd.DataFrame, ev: pd.DataFrame, pattern: re.Pattern) -> np.ndarray:
    """For each row of ``sel``: does an annotation range matching ``pattern`` on its thread contain it?"""
    out = np.zeros(len(sel), dtype=bool)
    if sel.empty:
        return out
    annotations = ev[kind_in(ev, ("annotation",))]  # few rows: plain string matching is fine here
    ranges = annotations[annotations["name"].str.contains(pattern)]
    for (rank, tid), grp in ranges.groupby(["rank", "tid"]):
        rs, re_ = merge_intervals(grp["start_us"].to_numpy(), grp["end_us"].to_numpy())
        on = ((sel["rank"] == rank) & (sel["tid"] == tid)).to_numpy()
        if on.any():
            s, e = sel["start_us"].to_numpy()[on], sel["end_us"].to_numpy()[on]
            out[on] = overlap(rs, re_, s, e) >= (e - s) - 1e-9
    return out


@_cached
def host_op_stats(trace: Trace) -> dict[str, float]:
    """PyTorch operators the host dispatches per step: all of them, and the top-level ones.

    Top-level ops are those not nested in another op on the same thread: one per Python-level
    call, which is what per-op dispatch cost scales with (a foreach op is one call for all tensors).
    """
    ev = trace.events
    ops = ev[kind_in(ev, ("cpu_op",))]
    win = windows(trace)
    n_steps = max(int((win["step"] >= 0).sum()), 1)
    if (win["step"] >= 0).any():
        ops = ops[ops["step"] >= 0]
    top = 0
    for _, grp in ops.groupby(["rank", "tid"]):
        grp = grp.sort_values(["start_us", "dur_us"], ascending=[True, False])
        ends = grp["end_us"].to_numpy()
        reach = np.maximum.accumulate(np.r_[-np.inf, ends[:-1]])
        top += int((grp["start_us"].to_numpy() >= reach).sum())
    return {"ops_per_step": float(len(ops) / n_steps), "top_level_ops_per_step": float(top / n_steps)}


def _sync_causes(ev: pd.DataFrame, syncs: pd.DataFrame) -> dict[str, int]:
    """For each sync call, the outermost PyTorch op around it on the same thread (or the call itself)."""
    counts: dict[str, int] = {}
    if syncs.empty:
        return counts
    ops = ev[kind_in(ev, ("cpu_op",))]
    for (rank, tid), grp in syncs.groupby(["rank", "tid"]):
        th = ops[(ops["rank"] == rank) & (ops["tid"] == tid)]
        s_arr, e_arr, names = th["start_us"].to_numpy(), th["end_us"].to_numpy(), th["name"].to_numpy()
        for s, e, own in zip(grp["start_us"], grp["end_us"], grp["name"]):
            inside = (s_arr <= s) & (e_arr >= e)
            if inside.any():
                idx = np.flatnonzero(inside)
                label = str(names[idx[np.argmin(s_arr[idx])]])
            else:
                label = str(own)
            counts[label] = counts.get(label, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def outermost_ops(ops: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``ops`` not inside another row of ``ops`` on the same thread (one per nest of calls)."""
    if ops.empty:
        return ops
    keep = np.ones(len(ops), dtype=bool)
    for (_, _), grp in ops.groupby(["rank", "tid"], sort=False):
        order = grp.sort_values(["start_us", "end_us"], ascending=[True, False])
        end = -np.inf
        for idx, en in zip(order.index, order["end_us"].to_numpy()):
            if en <= end:  # inside the last outer op
                keep[ops.index.get_loc(idx)] = False
            else:
                end = en
    return ops[keep]
