"""Metrics: pure functions of a :class:`~helpers.model.Trace`.

Times are microseconds unless a name says otherwise. Each function returns a value, a dict or a
DataFrame, and neither prints nor plots. Analysis windows are the training steps when the trace
has them (``ProfilerStep#N`` or a named step range), else the whole trace.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from . import thresholds as _th
from .model import GPU_WORK_KINDS, Trace

# --- what the host is doing -----------------------------------------------------------------
#: CUDA API calls that block the host until the GPU (or a stream) has finished.
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cudaMemcpy2D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol", "cudaMemset",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuMemcpyDtoH", "cuMemcpyHtoD",
})
#: CUDA API calls that queue work for the GPU.
LAUNCH_PREFIXES = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch", "cudaMemcpyAsync",
                   "cudaMemsetAsync", "cuMemcpyAsync", "cuMemsetAsync")
#: Host ranges that mean "waiting for the next batch".
DATA_WAIT = re.compile(
    r"enumerate\(DataLoader\)|DataLoaderIter|^(?:data|data[ _]loading|dataloader|load[ _]batch|next[ _]batch|fetch)$",
    re.IGNORECASE,
)
#: Host ops known to force a device-to-host synchronization.
SYNCING_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero",
               "aten::equal", "aten::masked_select", "aten::unique", "aten::repeat_interleave")
#: Optimizers read their CPU-side step counters with .item(): not a device sync.
OPTIMIZER_RANGE = re.compile(r"^Optimizer\.step#")
#: Idle gaps are blamed on one of these causes.
CAUSES = ("sync", "data_wait", "collective", "launch", "other")

# Constants live in thresholds.py (one home); these names stay importable from here.
SMALL_KERNEL_US = _th.SMALL_KERNEL_US
GAP_AFTER_SYNC_TOLERANCE_US = _th.GAP_AFTER_SYNC_TOLERANCE_US
SYNC_RETURN_US = _th.SYNC_RETURN_US


def _memo(trace: Trace) -> dict[Any, Any]:
    """The trace's metric cache, emptied when ``trace.events`` was reassigned since it was filled.

    The cache holds the very events frame it was computed from and compares by identity, so a
    reassigned table can never be served old results (an id() could be reused, the object cannot).
    """
    memo = trace._memo
    if memo.get("__events__") is not trace.events:
        memo.clear()
        memo["__events__"] = trace.events
    return memo


def _cached(fn):
    """Compute a metric once per trace (summary and diagnose both ask); callers get a copy."""

    @functools.wraps(fn)
    def wrapper(trace: Trace, *args, **kwargs):
        key = (fn.__name__, *args, *sorted(kwargs.items()))
        memo = _memo(trace)
        if key not in memo:
            memo[key] = fn(trace, *args, **kwargs)
        value = memo[key]
        if isinstance(value, pd.DataFrame):
            return value.copy()
        if isinstance(value, dict):
            return {k: (v.copy() if isinstance(v, (pd.DataFrame, dict)) else v) for k, v in value.items()}
        return value

    return wrapper


# --- interval arithmetic ------------------------------------------------------------------
def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals, as sorted disjoint ``(starts, ends)`` arrays."""
    starts = np.asarray(starts, dtype="float64")
    ends = np.asarray(ends, dtype="float64")
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, s.size - 1]
    return s[first], run_end[last]


def covered_before(us: np.ndarray, ue: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the union ``(us, ue)`` that lies before each time ``t``."""
    t = np.asarray(t, dtype="float64")
    if us.size == 0:
        return np.zeros_like(t)
    cum = np.r_[0.0, np.cumsum(ue - us)]
    i = np.searchsorted(us, t, side="right") - 1
    safe = np.clip(i, 0, None)
    part = np.clip(np.minimum(t, ue[safe]) - us[safe], 0, None)
    return np.where(i >= 0, cum[safe] + part, 0.0)


def overlap(us: np.ndarray, ue: np.ndarray, qs: np.ndarray, qe: np.ndarray) -> np.ndarray:
    """How much of each query interval ``[qs, qe)`` the union ``(us, ue)`` covers."""
    return covered_before(us, ue, qe) - covered_before(us, ue, qs)


def gaps_in(us: np.ndarray, ue: np.ndarray, ws: float, we: float) -> tuple[np.ndarray, np.ndarray]:
    """The parts of ``[ws, we)`` that the union ``(us, ue)`` leaves uncovered."""
    i0 = np.searchsorted(ue, ws, side="right")
    i1 = np.searchsorted(us, we, side="left")
    s = np.clip(us[i0:i1], ws, we)
    e = np.clip(ue[i0:i1], ws, we)
    gs = np.r_[ws, e]
    ge = np.r_[s, we]
    keep = ge > gs
    return gs[keep], ge[keep]


# --- shared building blocks -----------------------------------------------------------------
def _union(trace: Trace, key: Any, mask_fn) -> tuple[np.ndarray, np.ndarray]:
    memo = _memo(trace)
    if key not in memo:
        ev = trace.events
        sel = ev[mask_fn(ev)]
        memo[key] = merge_intervals(sel["start_us"].to_numpy(), sel["end_us"].to_numpy())
    return memo[key]


def gpu_work_union(trace: Trace, rank: int, device: int, kinds=GPU_WORK_KINDS):
    key = ("gpu", rank, device, tuple(kinds))
    return _union(trace, key, lambda ev: (ev["rank"] == rank) & (ev["device"] == device) & ev["kind"].isin(kinds))


def name_mask(trace: Trace, key: str, predicate) -> np.ndarray:
    """``predicate(name)`` for every event, evaluated once per distinct name (traces repeat names a lot).

    Cached under ``key`` *and* the predicate itself, so two callers that reuse a key with
    different predicates get their own answers (``key`` only names the entry for readers).
    """
    memo = _memo(trace)
    if "name_codes" not in memo:
        memo["name_codes"] = pd.factorize(trace.events["name"])
    slot = ("name", key, predicate)
    if slot not in memo:
        codes, uniques = memo["name_codes"]
        hits = np.fromiter((bool(predicate(u)) for u in uniques), dtype=bool, count=len(uniques))
        memo[slot] = hits[codes] if len(codes) else np.zeros(0, dtype=bool)
    return memo[slot]


def _is_launch_call(name: str) -> bool:
    return name.startswith(LAUNCH_PREFIXES)


_SYNCING_OP_SET = frozenset(SYNCING_OPS)


def is_sync_call(trace: Trace) -> np.ndarray:
    return name_mask(trace, "sync_call", SYNC_CALLS.__contains__) & (trace.events["kind"] == "runtime").to_numpy()


def host_union(trace: Trace, rank: int, cause: str):
    """Union of host time spent on one activity: ``sync``, ``data_wait``, ``collective``, ``launch``."""

    def mask(ev: pd.DataFrame) -> pd.Series:
        on_rank = (ev["rank"] == rank) & (ev["device"] < 0)
        if cause == "sync":
            return on_rank & is_sync_call(trace)
        if cause == "data_wait":
            return on_rank & ev["kind"].isin(("annotation", "cpu_op")) & name_mask(trace, "data", DATA_WAIT.search)
        if cause == "collective":
            return on_rank & (ev["kind"] == "collective")
        if cause == "launch":  # dispatching: framework ops and the launch calls they make
            launches = name_mask(trace, "launch", _is_launch_call)
            return on_rank & ((ev["kind"] == "cpu_op") | ((ev["kind"] == "runtime") & launches))
        if cause == "host_compute":  # framework ops on threads that are not collective threads
            coll_threads = ev.loc[ev["kind"] == "collective", "tid"].unique()
            return on_rank & (ev["kind"] == "cpu_op") & ~ev["tid"].isin(coll_threads)
        raise ValueError(f"unknown host activity {cause!r}")

    us, ue = _union(trace, ("host", rank, cause), mask)
    if cause == "launch" and us.size and not (trace.events["kind"] == "cpu_op").any():
        # Nsight-only traces record no framework ops, so the dispatch work between two launch
        # calls is invisible: launch calls closer than the bridge count as one stretch of dispatching.
        return merge_intervals(us, ue + _th.LAUNCH_DISPATCH_BRIDGE_US)
    return us, ue


@_cached
def windows(trace: Trace, rank: int | None = None) -> pd.DataFrame:
    """Analysis windows (``rank, step, start_us, end_us, dur_us``): the training steps, else one
    whole-trace window per rank.

    Steps are host-side ranges, and a host that runs ahead finishes its last step long before
    the GPU does; the last window is stretched to the end of the GPU work launched inside the
    steps, so totals cover everything the steps asked for.
    """
    steps = trace.steps
    ranks = trace.ranks if rank is None else [rank]
    ev = trace.events
    rows = []
    for r in ranks:
        st = steps[steps["rank"] == r].copy()
        on_rank = ev[ev["rank"] == r]
        if on_rank.empty:
            continue
        if st.empty:
            s, e = float(on_rank["start_us"].min()), float(on_rank["end_us"].max())
            rows.append(pd.DataFrame({"rank": [r], "step": [-1], "start_us": [s], "end_us": [e], "dur_us": [e - s]}))
            continue
        dev = on_rank[(on_rank["device"] >= 0) & (on_rank["step"] >= 0)]
        if not dev.empty:
            last = st.index[-1]
            st.loc[last, "end_us"] = max(float(st.loc[last, "end_us"]), float(dev["end_us"].max()))
            st["dur_us"] = st["end_us"] - st["start_us"]
        rows.append(st)
    return (pd.concat(rows, ignore_index=True) if rows
            else pd.DataFrame(columns=["rank", "step", "start_us", "end_us", "dur_us"]))


@_cached
def _devices_of(trace: Trace, rank: int) -> list[int]:
    ev = trace.events
    sel = ev[(ev["rank"] == rank) & (ev["device"] >= 0) & ev["kind"].isin(GPU_WORK_KINDS)]
    return sorted(int(d) for d in sel["device"].unique())


# --- GPU busy / idle -------------------------------------------------------------------------
@_cached
def gpu_busy(trace: Trace) -> pd.DataFrame:
    """Per rank, device and window: ``busy_us``, ``kernel_us`` (compute only), ``idle_us``, ``busy_share``."""
    rows = []
    for rank in trace.ranks:
        win = windows(trace, rank)
        for device in _devices_of(trace, rank):
            us, ue = gpu_work_union(trace, rank, device)
            ks, ke = gpu_work_union(trace, rank, device, ("kernel",))
            ws, we = win["start_us"].to_numpy(), win["end_us"].to_numpy()
            busy = overlap(us, ue, ws, we)
            kern = overlap(ks, ke, ws, we)
            for step, w, b, k in zip(win["step"], we - ws, busy, kern):
                rows.append((rank, device, int(step), w, b, k, w - b, b / w if w > 0 else 0.0))
    return pd.DataFrame(rows, columns=["rank", "device", "step", "window_us", "busy_us", "kernel_us", "idle_us", "busy_share"])


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


def gpu_utilization(trace: Trace) -> float:
    """Share of step time (all steps, devices and ranks together) in which a GPU had work. NaN without GPU events."""
    busy = gpu_busy(trace)
    if busy.empty:
        return float("nan")
    return float(busy["busy_us"].sum() / busy["window_us"].sum())


@_cached
def idle_gaps(trace: Trace, min_gap_us: float = 0.0) -> pd.DataFrame:
    """GPU idle gaps inside the analysis windows, each with what the host was doing meanwhile.

    Columns: ``rank, device, step, start_us, end_us, dur_us, cause`` and the microseconds of the
    gap the host spent in each activity (``sync_us, data_wait_us, collective_us, launch_us``).
    ``cause`` is ``sync`` when the gap starts as a host synchronization returns (the host was
    blocked, so nothing was queued ahead), otherwise the activity that filled at least half of
    the gap, in the order data_wait, collective, launch; else ``other``.
    """
    cols = ["rank", "device", "step", "start_us", "end_us", "dur_us", "cause",
            "sync_us", "data_wait_us", "collective_us", "launch_us"]
    out = []
    for rank in trace.ranks:
        win = windows(trace, rank)
        host = {c: host_union(trace, rank, c) for c in ("sync", "data_wait", "collective", "launch")}
        sync_ends = np.sort(trace.events.loc[(trace.events["rank"] == rank) & is_sync_call(trace), "end_us"].to_numpy())
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
            frame["cause"] = _blame(after_sync, frame)
            out.append(pd.DataFrame(frame))
    if not out:
        return pd.DataFrame(columns=cols)
    return pd.concat(out, ignore_index=True)[cols]


def _blame(after_sync: np.ndarray, frame: dict[str, Any]) -> np.ndarray:
    """A gap that starts as a sync returns is the sync's; otherwise the host activity filling half of it."""
    dur = frame["dur_us"]
    cause = np.full(dur.size, "other", dtype=object)
    cause[after_sync] = "sync"
    undecided = ~after_sync
    for name in ("data_wait", "collective", "launch"):
        hit = undecided & (frame[f"{name}_us"] >= 0.5 * dur)
        cause[hit] = name
        undecided &= ~hit
    return cause


def idle_by_cause(trace: Trace) -> dict[str, float]:
    """Microseconds of GPU idle time blamed on each cause, summed over windows and devices."""
    gaps = idle_gaps(trace)
    totals = {c: 0.0 for c in CAUSES}
    if not gaps.empty:
        for cause, us in gaps.groupby("cause")["dur_us"].sum().items():
            totals[str(cause)] = float(us)
    return totals


def idle_cost_by_cause(trace: Trace) -> dict[str, float]:
    """GPU idle time (microseconds) by the cause a fix would remove: the one cost model that
    ``summary`` shows and ``diagnose`` ranks by.

    Starts from each gap's blame (:func:`idle_by_cause`). A sync's cost is capped at the time the
    host was blocked in it; the rest of the gaps after it go to what the host did next. A host blocked in syncs cannot run
    ahead, so the GPU then idles while the host loads or launches the next step's work: removing
    the syncs restores at most the overlap they prevent, ``min(host blocked, GPU idle)``. That much
    idle time moves to ``sync``, taken in proportion from the other causes. The parts add up to
    the total idle time, so costs built on them never exceed the step.
    """
    idle = idle_by_cause(trace)
    total = sum(idle.values())
    if total <= 0:
        return idle
    blocked = sync_stats(trace)["blocked_us_per_step"] * max(int((windows(trace)["step"] >= 0).sum()), 1)
    blocked *= max(len(gpu_busy(trace)[["rank", "device"]].drop_duplicates()) / max(len(trace.ranks), 1), 1.0)
    moved = min(blocked, total) - idle["sync"]
    if moved < 0:
        # More idle after syncs than the host ever waited in them: the rest of those gaps is what
        # the host did next (host work, loading, launching), which removing the sync does not buy.
        gaps = idle_gaps(trace)
        after = gaps[gaps["cause"] == "sync"]
        frame = {c: after[c].to_numpy() for c in ("dur_us", "data_wait_us", "collective_us", "launch_us")}
        alt = pd.Series(after["dur_us"].to_numpy()).groupby(_blame(np.zeros(len(after), bool), frame)).sum()
        out = dict(idle)
        out["sync"] = idle["sync"] + moved
        for cause, us in alt.items():
            out[str(cause)] += -moved * float(us) / float(alt.sum())
        return out
    others = total - idle["sync"]
    if moved == 0 or others <= 0:
        return idle
    keep = 1.0 - min(moved, others) / others
    out = {c: (v if c == "sync" else v * keep) for c, v in idle.items()}
    out["sync"] = idle["sync"] + min(moved, others)
    return out


# --- kernels and launches ----------------------------------------------------------------------
@_cached
def kernel_stats(trace: Trace, top: int = 10) -> dict[str, Any]:
    """Kernel count per step, duration distribution and the kernels that take the most time."""
    ev = trace.events
    k = ev[ev["kind"].isin(("kernel", "collective")) & (ev["device"] >= 0)]
    win = windows(trace)
    n_steps = max(int((win["step"] >= 0).sum()), 1)
    in_steps = k[k["step"] >= 0] if (win["step"] >= 0).any() else k
    if k.empty:
        return {"count": 0, "per_step": 0.0, "median_us": float("nan"), "p90_us": float("nan"),
                "share_under_10us": float("nan"), "top": pd.DataFrame(columns=["name", "count", "total_us", "mean_us", "share"])}
    durs = in_steps["dur_us"].to_numpy() if not in_steps.empty else k["dur_us"].to_numpy()
    total = float(k["dur_us"].sum())
    grouped = k.groupby("name")["dur_us"].agg(count="count", total_us="sum", mean_us="mean")
    grouped["share"] = grouped["total_us"] / total if total > 0 else 0.0
    top_table = grouped.sort_values("total_us", ascending=False).head(top).reset_index()
    return {
        "count": int(len(k)),
        "per_step": float(len(in_steps) / n_steps),
        "median_us": float(np.median(durs)),
        "p90_us": float(np.percentile(durs, 90)),
        "share_under_10us": float(np.mean(durs < SMALL_KERNEL_US)),
        "top": top_table,
    }


@_cached
def launch_stats(trace: Trace) -> dict[str, float]:
    """Launch-call durations and the delay from a launch call to its kernel's start."""
    ev = trace.events
    calls = ev[(ev["kind"] == "runtime") & name_mask(trace, "kernel_launch", lambda n: n.startswith(("cudaLaunch", "cuLaunch")))]
    kernels = ev[ev["kind"].isin(("kernel", "collective")) & (ev["correlation"] >= 0)]
    joined = kernels[["rank", "correlation", "start_us"]].merge(
        calls[["rank", "correlation", "start_us", "dur_us"]], on=["rank", "correlation"], suffixes=("_kernel", "_call"))
    delay = (joined["start_us_kernel"] - joined["start_us_call"]).to_numpy()
    graph_calls = ev[(ev["kind"] == "runtime") & name_mask(trace, "graph_launch", lambda n: n.startswith(("cudaGraphLaunch", "cuGraphLaunch")))]
    from_graphs = kernels.merge(graph_calls[["rank", "correlation"]], on=["rank", "correlation"])
    individually = 1.0 - len(from_graphs) / len(kernels) if len(kernels) else float("nan")
    return {
        "individually_launched_share": individually,
        "launch_calls": int(len(calls)),
        "median_launch_call_us": float(calls["dur_us"].median()) if len(calls) else float("nan"),
        "median_launch_to_start_us": float(np.median(delay)) if delay.size else float("nan"),
        "p90_launch_to_start_us": float(np.percentile(delay, 90)) if delay.size else float("nan"),
    }


# --- copies ----------------------------------------------------------------------------------
@_cached
def copy_stats(trace: Trace) -> pd.DataFrame:
    """Per direction and host memory kind: ``count, time_us, bytes, gb_per_s, overlap_share``.

    ``overlap_share`` is the share of copy time during which a compute kernel ran on the same GPU.
    """
    ev = trace.events
    cp = ev[ev["kind"] == "memcpy"]
    cols = ["copy_kind", "host_memory", "count", "time_us", "bytes", "gb_per_s", "overlap_share", "time_per_step_us"]
    if cp.empty:
        return pd.DataFrame(columns=cols)
    n_steps = max(int((windows(trace)["step"] >= 0).sum()), 1)
    cp = cp.assign(overlap_us=0.0)
    for (rank, device), grp in cp.groupby(["rank", "device"]):
        ks, ke = gpu_work_union(trace, int(rank), int(device), ("kernel", "collective"))
        cp.loc[grp.index, "overlap_us"] = overlap(ks, ke, grp["start_us"].to_numpy(), grp["end_us"].to_numpy())
    rows = []
    for (kind, mem), grp in cp.groupby(["copy_kind", "host_memory"]):
        t = float(grp["dur_us"].sum())
        b = float(grp["bytes"].sum())
        rows.append((kind, mem, len(grp), t, b, b / (t * 1e3) if t > 0 else float("nan"),
                     float(grp["overlap_us"].sum() / t) if t > 0 else 0.0, t / n_steps))
    return pd.DataFrame(rows, columns=cols).sort_values("time_us", ascending=False).reset_index(drop=True)


def h2d_stats(trace: Trace) -> dict[str, float] | None:
    """All host-to-device copies together: ``time_us, bytes, gb_per_s, exposed_us`` (copy time no
    compute kernel overlaps), ``overlap_with_compute`` and ``pageable_byte_share``. None without H2D copies."""
    c = copy_stats(trace)
    h = c[c["copy_kind"] == "H2D"]
    if h.empty:
        return None
    time_us, nbytes = float(h["time_us"].sum()), float(h["bytes"].sum())
    exposed = float((h["time_us"] * (1 - h["overlap_share"])).sum())
    return {
        "time_us": time_us, "bytes": nbytes, "gb_per_s": nbytes / (time_us * 1e3) if time_us > 0 else float("nan"),
        "exposed_us": exposed, "overlap_with_compute": 1 - exposed / time_us if time_us > 0 else 0.0,
        "pageable_byte_share": float(h.loc[h["host_memory"] == "pageable", "bytes"].sum() / max(nbytes, 1)),
    }


# --- syncs -------------------------------------------------------------------------------------
@_cached
def sync_stats(trace: Trace) -> dict[str, Any]:
    """Host time blocked in synchronizing CUDA calls, sync points per step, and the ops that caused them.

    ``syncing_ops_per_step`` counts PyTorch ops that force a sync on a GPU (``aten::item`` and
    friends); it is measurable on CPU-only traces too, where nothing actually waits.
    """
    ev = trace.events
    syncs = ev[is_sync_call(trace)]
    win = windows(trace)
    n_steps = max(int((win["step"] >= 0).sum()), 1)
    in_steps = syncs[syncs["step"] >= 0] if (win["step"] >= 0).any() else syncs
    causes = _sync_causes(ev, in_steps)
    blocked = float(in_steps["dur_us"].sum())  # CUDA API calls on one thread never nest
    total_window = float(win["dur_us"].sum()) or 1.0
    ops = ev[(ev["kind"] == "cpu_op") & name_mask(trace, "syncing_op", _SYNCING_OP_SET.__contains__)]
    ops = ops[ops["step"] >= 0] if (win["step"] >= 0).any() else ops
    ops = ops[~_inside_ranges(ops, ev, OPTIMIZER_RANGE)]
    # aten::item calls aten::_local_scalar_dense: count the outermost of each nest once.
    outer = ops[ops["name"] != "aten::_local_scalar_dense"] if (ops["name"] == "aten::item").any() else ops
    return {
        "syncing_ops_per_step": float(len(outer) / n_steps),
        "sync_points": int(len(in_steps)),
        "sync_points_per_step": float(len(in_steps) / n_steps),
        "blocked_us_per_step": blocked / n_steps,
        "blocked_share": blocked / total_window,
        "causes": causes,
    }


def _inside_ranges(sel: pd.DataFrame, ev: pd.DataFrame, pattern: re.Pattern) -> np.ndarray:
    """For each row of ``sel``: does an annotation range matching ``pattern`` on its thread contain it?"""
    out = np.zeros(len(sel), dtype=bool)
    if sel.empty:
        return out
    annotations = ev[ev["kind"] == "annotation"]  # few rows: plain string matching is fine here
    ranges = annotations[annotations["name"].str.contains(pattern)]
    for (rank, tid), grp in ranges.groupby(["rank", "tid"]):
        rs, re_ = merge_intervals(grp["start_us"].to_numpy(), grp["end_us"].to_numpy())
        on = ((sel["rank"] == rank) & (sel["tid"] == tid)).to_numpy()
        if on.any():
            s, e = sel["start_us"].to_numpy()[on], sel["end_us"].to_numpy()[on]
            out[on] = overlap(rs, re_, s, e) >= (e - s) - 1e-9
    return out


def host_op_stats(trace: Trace) -> dict[str, float]:
    """PyTorch operators the host dispatches per step: all of them, and the top-level ones.

    Top-level ops are those not nested in another op on the same thread: one per Python-level
    call, which is what per-op dispatch cost scales with (a foreach op is one call for all tensors).
    """
    ev = trace.events
    ops = ev[ev["kind"] == "cpu_op"]
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
    ops = ev[(ev["kind"] == "cpu_op")]
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


# --- data loading ------------------------------------------------------------------------------
@_cached
def data_wait(trace: Trace) -> dict[str, float]:
    """Host time in DataLoader / data ranges per step, and the share of step time it takes."""
    win = windows(trace)
    n_steps = max(int((win["step"] >= 0).sum()), 1)
    total = 0.0
    for rank in trace.ranks:
        us, ue = host_union(trace, rank, "data_wait")
        w = win[win["rank"] == rank]
        total += float(overlap(us, ue, w["start_us"].to_numpy(), w["end_us"].to_numpy()).sum())
    return {"data_wait_us_per_step": total / n_steps, "data_wait_share": total / (float(win["dur_us"].sum()) or 1.0)}


# --- communication -----------------------------------------------------------------------------
@_cached
def comm_stats(trace: Trace) -> pd.DataFrame:
    """Per rank and window: collective time, compute time, and exposed collective time.

    On GPUs, collectives are NCCL kernels and compute the other kernels on that GPU; on the
    host (gloo), collectives are the gloo ranges and compute the PyTorch ops on other threads.
    Exposed time is collective time that no compute overlaps: what the step waits for.
    """
    rows = []
    for rank in trace.ranks:
        win = windows(trace, rank)
        ws, we = win["start_us"].to_numpy(), win["end_us"].to_numpy()
        devices = _devices_of(trace, rank)
        if devices:
            pairs = [(gpu_work_union(trace, rank, d, ("collective",)), gpu_work_union(trace, rank, d, ("kernel",))) for d in devices]
        else:
            pairs = [(host_union(trace, rank, "collective"), host_union(trace, rank, "host_compute"))]
        coll = np.zeros(len(win))
        comp = np.zeros(len(win))
        exposed = np.zeros(len(win))
        for (cs, ce), (ks, ke) in pairs:
            coll += overlap(cs, ce, ws, we)
            comp += overlap(ks, ke, ws, we)
            # exposed = collective minus (collective ∩ compute)
            both_s, both_e = _intersect(cs, ce, ks, ke)
            exposed += overlap(cs, ce, ws, we) - overlap(both_s, both_e, ws, we)
        for step, w, c, k, x in zip(win["step"], we - ws, coll, comp, exposed):
            rows.append((rank, int(step), w, c, k, x, x / w if w > 0 else 0.0))
    return pd.DataFrame(rows, columns=["rank", "step", "window_us", "collective_us", "compute_us", "exposed_us", "exposed_share"])


def _intersect(as_, ae, bs, be) -> tuple[np.ndarray, np.ndarray]:
    if as_.size == 0 or bs.size == 0:
        return np.empty(0), np.empty(0)
    i = j = 0
    out_s, out_e = [], []
    while i < as_.size and j < bs.size:
        lo, hi = max(as_[i], bs[j]), min(ae[i], be[j])
        if lo < hi:
            out_s.append(lo)
            out_e.append(hi)
        if ae[i] < be[j]:
            i += 1
        else:
            j += 1
    return np.asarray(out_s), np.asarray(out_e)


def rank_imbalance(trace: Trace) -> dict[str, Any]:
    """Across ranks: mean compute and exposed-collective time per step, and their spread.

    ``compute_spread`` is (slowest - fastest) / slowest rank's compute time; with balanced work
    it is near 0. In an imbalanced job the fast ranks show the larger exposed (waiting) time.
    """
    cs = comm_stats(trace)
    if cs.empty or len(trace.ranks) < 2:
        return {"ranks": len(trace.ranks), "compute_spread": 0.0, "per_rank": pd.DataFrame()}
    per_rank = cs.groupby("rank")[["compute_us", "exposed_us", "collective_us"]].mean()
    comp = per_rank["compute_us"]
    spread = float((comp.max() - comp.min()) / comp.max()) if comp.max() > 0 else 0.0
    return {"ranks": len(per_rank), "compute_spread": spread, "slowest_rank": int(comp.idxmax()),
            "fastest_rank": int(comp.idxmin()), "per_rank": per_rank.reset_index()}


# --- the step-time breakdown -------------------------------------------------------------------
def step_breakdown(trace: Trace) -> pd.DataFrame:
    """One row per (rank, step): step time split into where it went.

    With GPU events: ``gpu_busy_us`` plus idle time by cause (``sync_us, data_wait_us,
    collective_us, launch_us, other_us``), for the rank's first GPU. Without: host time in data
    waits, exposed collectives and dispatching framework ops, and the rest as ``other_us``.
    """
    rows = []
    gaps = idle_gaps(trace)
    busy = gpu_busy(trace)
    comm = comm_stats(trace)
    for rank in trace.ranks:
        win = windows(trace, rank)
        devices = _devices_of(trace, rank)
        if devices:
            d = devices[0]
            b = busy[(busy["rank"] == rank) & (busy["device"] == d)].set_index("step")
            g = gaps[(gaps["rank"] == rank) & (gaps["device"] == d)]
            by = g.groupby(["step", "cause"])["dur_us"].sum() if not g.empty else pd.Series(dtype=float)
            for step, dur in zip(win["step"], win["dur_us"]):
                row = {"rank": rank, "step": int(step), "step_us": dur, "gpu_busy_us": float(b.loc[step, "busy_us"])}
                for c in CAUSES:
                    row[f"{c}_us"] = float(by.get((step, c), 0.0))
                rows.append(row)
        else:
            ws, we = win["start_us"].to_numpy(), win["end_us"].to_numpy()
            dw = overlap(*host_union(trace, rank, "data_wait"), ws, we)
            disp = overlap(*host_union(trace, rank, "host_compute"), ws, we)
            cm = comm[comm["rank"] == rank]["exposed_us"].to_numpy()
            for i, (step, dur) in enumerate(zip(win["step"], win["dur_us"])):
                rest = max(dur - dw[i] - cm[i] - max(disp[i] - dw[i], 0.0), 0.0)
                rows.append({"rank": rank, "step": int(step), "step_us": dur, "gpu_busy_us": float("nan"),
                             "sync_us": 0.0, "data_wait_us": float(dw[i]), "collective_us": float(cm[i]),
                             "launch_us": float(max(disp[i] - dw[i], 0.0)), "other_us": rest})
    return pd.DataFrame(rows)


def summary(trace: Trace) -> dict[str, Any]:
    """Headline figures of a trace as a JSON-friendly dict (no DataFrames)."""
    win = windows(trace)
    steps = win[win["step"] >= 0]
    kstats = kernel_stats(trace)
    out: dict[str, Any] = {
        "source": trace.source,
        "format": trace.format,
        "events": int(len(trace.events)),
        "ranks": trace.ranks,
        "devices": trace.devices,
        "device_names": trace.metadata.get("device_names") or [],
        "device_name_counts": dict(Counter(n for n in (trace.metadata.get("device_names") or []) if n)),
        "has_gpu": trace.has_gpu,
        "steps": int(len(steps)),
        "step_time_ms": step_time_ms(trace),
        **data_wait(trace),
        "sync": {k: v for k, v in sync_stats(trace).items()},
        "kernels": {k: v for k, v in kstats.items() if k != "top"},
        "top_kernels": kstats["top"].to_dict("records"),
    }
    if trace.has_gpu:
        out["gpu_utilization"] = gpu_utilization(trace)
        out["streams"] = stream_busy(trace).to_dict("records")
        out["idle_by_cause_us"] = idle_cost_by_cause(trace)  # the causes and numbers diagnose ranks by
        out["launch"] = launch_stats(trace)
        out["copies"] = copy_stats(trace).to_dict("records")
    else:
        out["gpu_utilization"] = None
        out["note"] = "the trace has no GPU activity: GPU figures are not available, host-side figures are"
    comm = comm_stats(trace)
    if not comm.empty and comm["collective_us"].sum() > 0:
        out["communication"] = {
            "collective_us_per_step": float(comm.groupby("step")["collective_us"].mean().mean()),
            "exposed_us_per_step": float(comm.groupby("step")["exposed_us"].mean().mean()),
            "exposed_share": float(comm["exposed_us"].sum() / comm["window_us"].sum()),
        }
        imb = rank_imbalance(trace)
        out["communication"]["compute_spread"] = imb["compute_spread"]
    return out


def comparison(before: Trace, after: Trace) -> pd.DataFrame:
    """What changed between two traces: ``metric, before, after, better`` (numbers; ``better`` is
    ``lower`` or ``higher``). :func:`helpers.render.change_text` words the change."""
    rows = []
    for label, fn, better in _COMPARED:
        b, a = fn(before), fn(after)
        if b is None and a is None:
            continue
        rows.append((label, b, a, better))
    return pd.DataFrame(rows, columns=["metric", "before", "after", "better"])


def step_time_ms(t: Trace) -> float | None:
    """Mean step time: the steps' total span (up to the end of their GPU work) over their number."""
    w = windows(t)
    w = w[w["step"] >= 0] if (w["step"] >= 0).any() else w
    if w.empty:
        return None
    return float(w.groupby("rank")["dur_us"].mean().max() / 1e3)


def _comm(t: Trace, col: str) -> float | None:
    cs = comm_stats(t)
    if cs.empty or cs["collective_us"].sum() <= 0:
        return None
    return float(cs.groupby("step")[col].mean().mean() / 1e3)


_COMPARED = [
    ("step time (ms, mean)", step_time_ms, "lower"),
    ("GPU utilization", lambda t: gpu_utilization(t) if t.has_gpu else None, "higher"),
    ("kernels per step", lambda t: kernel_stats(t)["per_step"] if t.has_gpu else None, "lower"),
    ("data wait (ms/step)", lambda t: data_wait(t)["data_wait_us_per_step"] / 1e3, "lower"),
    ("sync points per step", lambda t: sync_stats(t)["sync_points_per_step"] if t.has_gpu else None, "lower"),
    ("host blocked in syncs (ms/step)", lambda t: sync_stats(t)["blocked_us_per_step"] / 1e3 if t.has_gpu else None, "lower"),
    ("exposed communication (ms/step)", lambda t: _comm(t, "exposed_us"), "lower"),
]
