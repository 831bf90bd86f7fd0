"""GPU busy and idle time, and the idle gaps blamed on what the host was doing meanwhile."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..model import GPU_WORK_KINDS, Trace
from ..seal import figure_gate
from ._cache import _cached
from ._store import _memo, rank_events, rank_rows
from .activity import CAUSES, GAP_AFTER_SYNC_TOLERANCE_US, SYNC_RETURN_US, gpu_work_union, graph_spans, host_union, is_sync_call
from .intervals import gaps_in, merge_intervals, overlap
from .windows import _devices_of, windows


@figure_gate("metrics.gpu_busy")  # lab 00 asks for this figure: the learner reads it first (helpers.seal)
@_cached
def gpu_busy(trace: Trace) -> pd.DataFrame:
    """Per rank, device and window: ``busy_us``, ``kernel_us`` (compute only), ``idle_us``, ``busy_share``.

    Busy is the union of kernels, copies and memsets on all streams (:func:`gpu_work_union`).
    ``graph_span_us`` is shown apart: the window's time covered by busy work or by a CUDA Graph
    replay's first-to-last-kernel span (:func:`graph_spans`); it equals ``busy_us`` without graphs.
    """
    spans = graph_spans(trace)
    rows = []
    for rank in trace.ranks:
        win = windows(trace, rank)
        for device in _devices_of(trace, rank):
            us, ue = gpu_work_union(trace, rank, device)
            ks, ke = gpu_work_union(trace, rank, device, ("kernel",))
            ws, we = win["start_us"].to_numpy(), win["end_us"].to_numpy()
            busy = overlap(us, ue, ws, we)
            kern = overlap(ks, ke, ws, we)
            mine = spans[(spans["rank"] == rank) & (spans["device"] == device)]
            if mine.empty:
                spanned = busy
            else:
                ss, se = merge_intervals(np.r_[us, mine["start_us"].to_numpy(float)], np.r_[ue, mine["end_us"].to_numpy(float)])
                spanned = overlap(ss, se, ws, we)
            for step, w, b, k, g in zip(win["step"], we - ws, busy, kern, spanned):
                rows.append((rank, device, int(step), w, b, k, w - b, b / w if w > 0 else 0.0, g))
    return pd.DataFrame(rows, columns=["rank", "device", "step", "window_us", "busy_us", "kernel_us", "idle_us", "busy_share",
                                       "graph_span_us"])


@_cached
def stream_busy(trace: Trace) -> pd.DataFrame:
    """Per rank, device and stream: GPU work on that stream over the analysis windows (``busy_us, window_us, busy_share``)."""
    rows = []
    ev = trace.events
    work = ev[ev["kind"].isin(GPU_WORK_KINDS) & (ev["device"] >= 0)]
    for (rank, device, stream), grp in work.groupby(["rank", "device", "stream"]):
        win = windows(trace, int(rank))
        us, ue = merge_intervals(grp["start_us"].to_numpy(), grp["end_us"].to_numpy())
        busy = float(overlap(us, ue, win["start_us"].to_numpy(), win["end_us"].to_numpy()).sum())
        total = float(win["dur_us"].sum())
        rows.append((int(rank), int(device), int(stream), busy, total, busy / total if total else 0.0))
    return pd.DataFrame(rows, columns=["rank", "device", "stream", "busy_us", "window_us", "busy_share"])


@figure_gate("metrics.gpu_utilization")  # lab 00 asks for this figure: the learner reads it first (helpers.seal)
def gpu_utilization(trace: Trace) -> float:
    """Share of step time (all steps, devices and ranks together) in which a GPU had work. NaN without GPU events."""
    busy = gpu_busy(trace)
    window = float(busy["window_us"].sum())
    if busy.empty or not window > 0:  # no GPU events, or windows of no length: no share to give
        return float("nan")
    return float(busy["busy_us"].sum()) / window


@figure_gate("metrics.idle_gaps")  # lab 00 asks for this figure: the learner reads it first (helpers.seal)
@_cached
def idle_gaps(trace: Trace, min_gap_us: float = 0.0, with_cause: bool = True) -> pd.DataFrame:
    """GPU idle gaps inside the analysis windows, each with what the host was doing meanwhile.

    Columns: ``rank, device, step, start_us, end_us, dur_us, cause`` and the microseconds of the
    gap the host spent in each activity (``sync_us, data_wait_us, collective_us, launch_us``).
    ``cause`` is ``sync`` when the gap starts as a host synchronization returns (the host was
    blocked, so nothing was queued ahead) or the host spends at least half of it inside a sync call
    (a blocking copy waiting on the stream), otherwise the activity that filled at least half of
    the gap, in the order data_wait, collective, launch; else ``other``. A gap between two kernels of
    one CUDA Graph replay is ``graph`` whatever the host did meanwhile: the host queued the whole graph
    in one call, and the GPU's own step from node to node opened the gap. ``host_cause`` is that
    activity whether or not a sync just returned (``after_sync``): the gaps after syncs go to it where the
    host's own work in them is the bigger win (:func:`idle_cost_by_cause`). ``with_cause=False``
    leaves the verdict columns out (``cause``, ``host_cause``, ``after_sync``): the measured figures
    without the verdict, as the labs show them before the learner's reading.
    """
    if not with_cause:
        return idle_gaps(trace, min_gap_us).drop(columns=["cause", "host_cause", "after_sync"])
    cols = ["rank", "device", "step", "start_us", "end_us", "dur_us", "cause",
            "sync_us", "data_wait_us", "collective_us", "launch_us", "host_cause", "after_sync"]
    out = []
    for rank in trace.ranks:
        out += _gaps_of_rank(trace, rank, min_gap_us)
    if not out:
        return pd.DataFrame(columns=cols)
    gaps = pd.concat(out, ignore_index=True)[cols]
    top = _host_work_wins(trace, gaps)
    if top is not None:  # the gaps after syncs are the host's own work's: a fix there wins more
        gaps.loc[gaps["after_sync"].to_numpy(bool) & (gaps["host_cause"] == top).to_numpy(), "cause"] = top
    return gaps


def _gaps_of_rank(trace: Trace, rank: int, min_gap_us: float) -> list[pd.DataFrame]:
    """One rank's part of :func:`idle_gaps` (a frame per device, before the job-wide move of the gaps after syncs):
    worked out here, or taken from the store where a forked process worked it out (:mod:`helpers.rank_split`)."""
    memo = _memo(trace)
    key = ("rank_idle_gaps", int(rank), float(min_gap_us))
    got = memo.get(key)
    if got is None:
        remote = memo.get("critical_remote")  # (helpers.critical._REMOTE: this layer cannot import it)
        if remote is not None and rank in remote.ranks:
            remote.receive()  # what it worked out, its idle gaps too, is in the store once received
            got = memo.get(key)
    if got is not None:
        return list(got)
    return _rank_idle_gaps(trace, rank, min_gap_us)


def _rank_idle_gaps(trace: Trace, rank: int, min_gap_us: float) -> list[pd.DataFrame]:
    out = []
    replays = _replays(trace)
    win = windows(trace, rank)
    host = {c: host_union(trace, rank, c) for c in ("sync", "data_wait", "collective", "launch")}
    at = rank_rows(trace, rank)  # the rank's own rows, not every rank's tested for each rank
    sync_ends = np.sort(rank_events(trace, rank)["end_us"].to_numpy()[is_sync_call(trace) if at is None else is_sync_call(trace)[at]])
    for device in _devices_of(trace, rank):
        us, ue = gpu_work_union(trace, rank, device)
        # Collect every window's gaps, then ask each host activity once (not once per window).
        pieces = [(step, *gaps_in(us, ue, ws, we)) for step, ws, we in zip(win["step"], win["start_us"], win["end_us"])]
        gs = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros(0)
        ge = np.concatenate([p[2] for p in pieces]) if pieces else np.zeros(0)
        steps = np.concatenate([np.full(p[1].size, int(p[0])) for p in pieces]) if pieces else np.zeros(0, int)
        keep = (ge - gs) > min_gap_us
        gs, ge, steps = gs[keep], ge[keep], steps[keep]
        if gs.size == 0:
            continue
        frame = {"rank": rank, "device": device, "step": steps, "start_us": gs, "end_us": ge, "dur_us": ge - gs}
        for c, (hs, he) in host.items():
            frame[f"{c}_us"] = overlap(hs, he, gs, ge)
        # the gap starts as a sync returns: the host was blocked until the GPU drained
        j = np.searchsorted(sync_ends, gs - GAP_AFTER_SYNC_TOLERANCE_US, side="left")
        jj = np.clip(j, 0, max(sync_ends.size - 1, 0))
        after_sync = ((j < sync_ends.size) & (sync_ends[jj] <= np.minimum(ge, gs + SYNC_RETURN_US))) if sync_ends.size else np.zeros(gs.size, bool)
        in_graph = _inside_spans(gs, ge, replays.get((rank, device)))
        after_sync &= ~in_graph  # a replay's nodes run in the order it recorded: no host wait opens a gap among them
        frame["cause"] = _blame(after_sync, frame, in_sync=True)
        frame["host_cause"] = _blame(np.zeros(gs.size, bool), frame)  # what the host did in it, syncs aside
        frame["cause"][in_graph] = frame["host_cause"][in_graph] = "graph"
        frame["after_sync"] = after_sync
        out.append(pd.DataFrame(frame))
    return out


def _replays(trace: Trace) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
    """Each (rank, device)'s CUDA Graph replays' spans, as (starts, ends), grouped once per trace."""
    memo = _memo(trace)
    if "graph_replays" not in memo:
        spans = graph_spans(trace)
        memo["graph_replays"] = {key: (g["start_us"].to_numpy(), g["end_us"].to_numpy())
                                 for key, g in spans.groupby(["rank", "device"])}
    return memo["graph_replays"]


def _inside_spans(gs: np.ndarray, ge: np.ndarray, spans: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """For each gap: does it lie inside one replay's span (between two kernels of the same graph launch)?"""
    if spans is None or gs.size == 0:
        return np.zeros(gs.size, bool)
    order = np.argsort(spans[0], kind="stable")
    ss, se = spans[0][order], np.maximum.accumulate(spans[1][order])  # the latest end among replays started so far
    i = np.searchsorted(ss, gs, side="right") - 1
    ok = i >= 0
    return ok & (ge <= se[np.clip(i, 0, None)])


def _host_work_wins(trace: Trace, gaps: pd.DataFrame) -> str | None:
    """``data_wait`` or ``other`` when fixing what the host does in the GPU's gaps (loading a batch, or
    its own code outside every recorded op) wins back more idle time than removing the syncs could
    (the host's wait in them while the GPU computed, :func:`blocked_while_computing`); else None."""
    after = gaps[gaps["after_sync"].to_numpy(bool)]  # the gaps both fixes compete for
    if after.empty:
        return None
    dur = after["dur_us"].to_numpy()
    busy = after[["sync_us", "data_wait_us", "collective_us", "launch_us"]].to_numpy().sum(axis=1)
    own = {"data_wait": float(after["data_wait_us"].sum()), "other": float(np.clip(dur - busy, 0.0, None).sum())}
    top = max(own, key=own.get)
    return top if own[top] > min(_sync_win(trace), float(gaps["dur_us"].sum())) else None


def _sync_win(trace: Trace) -> float:
    """At most what removing the syncs wins back: the host's wait in them while its GPU computed, once per device.
    (A GPU idle while the host waits in a sync is waiting on something else too: that is not won back.)"""
    blocked = blocked_while_computing(trace)
    busy = gpu_busy(trace)
    devices = len(set(zip(busy["rank"].tolist(), busy["device"].tolist())))  # distinct (rank, device) pairs
    return blocked * max(devices / max(len(trace.ranks), 1), 1.0)


def _blame(after_sync: np.ndarray, frame: dict[str, Any], in_sync: bool = False) -> np.ndarray:
    """A gap that starts as a sync returns is the sync's; otherwise the host activity filling half of it."""
    dur = frame["dur_us"]
    cause = np.full(dur.size, "other", dtype=object)
    # ... and so is one the host spends at least half of inside a sync call (a blocking copy waiting on
    # the stream): it could queue nothing meanwhile, however busy its ops look.
    blocked = frame["sync_us"] >= 0.5 * dur if in_sync else np.zeros(dur.size, bool)
    cause[after_sync | blocked] = "sync"
    undecided = ~(after_sync | blocked)
    for name in ("data_wait", "collective", "launch"):
        hit = undecided & (frame[f"{name}_us"] >= 0.5 * dur)
        cause[hit] = name
        undecided &= ~hit
    return cause


@figure_gate("metrics.idle_by_cause")  # lab 00 asks for this figure: the learner reads it first (helpers.seal)
def idle_by_cause(trace: Trace) -> dict[str, float]:
    """Microseconds of GPU idle time blamed on each cause, summed over windows and devices."""
    gaps = idle_gaps(trace)
    totals = {c: 0.0 for c in CAUSES}
    if not gaps.empty:
        for cause, us in gaps.groupby("cause")["dur_us"].sum().items():
            totals[str(cause)] = float(us)
    return totals


@figure_gate("metrics.idle_cost_by_cause")  # lab 00 asks for this figure: the learner reads it first (helpers.seal)
def idle_cost_by_cause(trace: Trace) -> dict[str, float]:
    """GPU idle time (microseconds) by the cause a fix would remove: the one cost model that
    ``summary`` shows and ``diagnose`` ranks by.

    Starts from each gap's blame (:func:`idle_gaps`). Removing the syncs lets the host run ahead by
    the time it waited in them while the GPU computed (:func:`blocked_while_computing`), so a sync's
    cost is at most ``min(that, GPU idle)``; the rest of the gaps after syncs goes to what the host
    did next. Where removing the syncs is the bigger win, the host's loading or launching after them
    would overlap the GPU too: that much idle time moves to ``sync``, taken in proportion from the
    other causes. Where fixing the host's own work in the gaps wins more (a batch fetched after a sync,
    NumPy work longer than the wait), :func:`idle_gaps` has already put those gaps on it and nothing
    moves. The parts add up to the total idle time, so costs built on them never exceed the step.
    """
    idle = idle_by_cause(trace)
    total = sum(idle.values())
    if total <= 0:
        return idle
    blocked = _sync_win(trace)
    gaps = idle_gaps(trace)
    moved = min(blocked, total) - idle["sync"]
    if moved < 0:
        # More idle after (or inside) syncs than the host ever waited in them while its GPU computed: the
        # rest of those gaps is what the host did next (host work, loading, launching), or, for a gap the
        # host sat out in a sync while its GPU idled too, idle no recorded host activity explains
        # ("other"). Removing the sync does not buy either.
        after = gaps[gaps["cause"] == "sync"]
        frame = {c: after[c].to_numpy() for c in ("dur_us", "data_wait_us", "collective_us", "launch_us")}
        alt = pd.Series(after["dur_us"].to_numpy()).groupby(_blame(np.zeros(len(after), bool), frame)).sum()
        out = dict(idle)
        out["sync"] = idle["sync"] + moved
        for cause, us in alt.items():
            out[str(cause)] += -moved * float(us) / float(alt.sum())
        return out
    others = total - idle["sync"]
    if moved == 0 or others <= 0 or _host_work_wins(trace, gaps) is not None:
        return idle
    keep = 1.0 - min(moved, others) / others
    out = {c: (v if c == "sync" else v * keep) for c, v in idle.items()}
    out["sync"] = idle["sync"] + min(moved, others)
    return out


@_cached
def blocked_while_computing(trace: Trace) -> float:
    """Microseconds the host spent in synchronizing calls (inside the steps) while its GPU ran kernels:
    the overlap a sync prevents. A blocking copy's wait for its own transfer is not in it: that time
    is the copy's (the h2d_copy cost), and running ahead would not hide it."""
    ev = trace.events
    syncs = ev[is_sync_call(trace)]
    win = windows(trace)
    if (win["step"] >= 0).any():
        syncs = syncs[syncs["step"] >= 0]
    total = 0.0
    for rank in trace.ranks:
        mine = syncs[syncs["rank"] == rank]
        if mine.empty:
            continue
        ss, se = merge_intervals(mine["start_us"].to_numpy(), mine["end_us"].to_numpy())
        parts = [gpu_work_union(trace, rank, d, ("kernel", "collective")) for d in _devices_of(trace, rank)]
        if not parts:
            continue
        ks, ke = merge_intervals(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        total += float(overlap(ks, ke, ss, se).sum())
    return total
