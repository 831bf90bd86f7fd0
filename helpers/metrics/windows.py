"""Analysis windows: the training steps (marked, or the steady state's repeats found by
:mod:`.steady` in a trace without markers), else the whole capture."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import thresholds as _th
from ..model import GPU_WORK_KINDS, Trace, kind_in
from ._cache import _cached
from ._store import _memo, rank_events


@_cached
def windows(trace: Trace, rank: int | None = None) -> pd.DataFrame:
    """Analysis windows (``rank, step, start_us, end_us, dur_us``): the training steps, else one
    whole-trace window per rank.

    Steps are host-side ranges, and a host that runs ahead finishes its last step before the GPU
    does. The last window is stretched to cover the GPU's own time on the last step's work: from
    when the GPU could start it (the host started the step, and the GPU had finished the step
    before) to its end. The queue behind it (work of earlier steps still running when the host
    started the last one) is not the last step's: stretching to the end of every step's GPU work
    would make a host two steps ahead report a last step three steps long.

    A first window whose GPU shows nothing until work queued long before it starts
    (:func:`unrecorded_gpu_lead`) begins where the GPU's record does: before that the GPU ran
    work the capture did not record, which is neither idle time nor this trace's to explain.
    """
    steps = trace.steps
    ranks = trace.ranks if rank is None else [rank]
    if _plain_steps(steps):
        mine = _rank_of_all(trace, rank) if rank is not None else None
        return mine if mine is not None else _windows_of(trace, steps, ranks)
    rows = []
    for r in ranks:
        st = steps[steps["rank"] == r].copy()
        on_rank = rank_events(trace, r)
        if on_rank.empty:
            continue
        if st.empty:
            s, e = float(on_rank["start_us"].min()), float(on_rank["end_us"].max())
            s = _first_cuda_work(on_rank, s)
            st = pd.DataFrame({"rank": [r], "step": [-1], "start_us": [s], "end_us": [e], "dur_us": [e - s]})
        else:
            st = st.sort_values("start_us").reset_index(drop=True)
            step, device = on_rank["step"].to_numpy(), on_rank["device"].to_numpy()
            on_gpu = (device >= 0) & (step >= 0)  # the GPU rows' step and end only: all the windows ask of them
            dev = pd.DataFrame({"step": step[on_gpu], "end_us": on_rank["end_us"].to_numpy()[on_gpu]})
            paced = _gpu_paced(st, dev)
            if paced is not None:
                st = paced
            elif not dev.empty:
                last = st.index[-1]
                ends = dev.groupby("step")["end_us"].max()
                step_last = int(st.loc[last, "step"])
                s_last, host_end = float(st.loc[last, "start_us"]), float(st.loc[last, "end_us"])
                if step_last in ends.index:
                    before = ends[ends.index < step_last]
                    gpu_from = max(s_last, float(before.max())) if not before.empty else s_last
                    own = float(ends[step_last]) - gpu_from
                    st.loc[last, "end_us"] = s_last + max(host_end - s_last, own)
        lead = unrecorded_gpu_lead(trace, int(r))
        if lead is not None and lead[0] <= float(st["start_us"].iloc[0]) < lead[1] < float(st["end_us"].iloc[0]):
            st.loc[st.index[0], "start_us"] = lead[1]
        st["dur_us"] = st["end_us"] - st["start_us"]
        rows.append(st)
    return (pd.concat(rows, ignore_index=True) if rows
            else pd.DataFrame(columns=["rank", "step", "start_us", "end_us", "dur_us"]))


#: The steps table as the readers and the steady state build it: these columns, these types (a table a user made
#: with others is windowed by the general code above, which keeps its columns and types).
_STEP_DTYPES = {"rank": np.dtype("int64"), "step": np.dtype("int64"), "start_us": np.dtype("float64"),
                "end_us": np.dtype("float64"), "dur_us": np.dtype("float64")}


def _plain_steps(steps: pd.DataFrame) -> bool:
    return list(steps.columns) == list(_STEP_DTYPES) and all(
        steps[c].dtype == d for c, d in _STEP_DTYPES.items())


def _windows_of(trace: Trace, steps: pd.DataFrame, ranks: list[int]) -> pd.DataFrame:
    """:func:`windows` on a plain steps table (:func:`_plain_steps`), worked on arrays: the same windows, without
    the few dozen small frames a rank cost (about 2 ms a rank, which a job of thousands of small ranks felt)."""
    srank, sstep = steps["rank"].to_numpy(), steps["step"].to_numpy()
    sstart, send = steps["start_us"].to_numpy(), steps["end_us"].to_numpy()
    out_rank, out_step, out_start, out_end = [], [], [], []
    for r in ranks:
        on_rank = rank_events(trace, r)
        if on_rank.empty:
            continue
        mine = np.flatnonzero(srank == r)
        if not mine.size:
            s, e = float(on_rank["start_us"].min()), float(on_rank["end_us"].max())
            s = _first_cuda_work(on_rank, s)
            step, start, end = np.array([-1], dtype=np.int64), np.array([s]), np.array([e])
        else:
            mine = mine[np.argsort(sstart[mine], kind="quicksort")]  # as sort_values("start_us") orders them
            step, start, end = sstep[mine], sstart[mine].copy(), send[mine].copy()
            ev_step, device = on_rank["step"].to_numpy(), on_rank["device"].to_numpy()
            on_gpu = (device >= 0) & (ev_step >= 0)  # the GPU rows' step and end only: all the windows ask of them
            dev_step, dev_end = ev_step[on_gpu], on_rank["end_us"].to_numpy()[on_gpu]
            ends_at, ends = _max_by_step(dev_step, dev_end)
            paced = _gpu_paced_arrays(step, start, ends_at, ends)
            if paced is not None:
                start, end = paced
            elif dev_step.size:
                step_last = int(step[-1])
                s_last, host_end = float(start[-1]), float(end[-1])
                at = int(np.searchsorted(ends_at, step_last))
                if at < ends_at.size and ends_at[at] == step_last:
                    before = ends[:at]  # the steps before the last (ends_at is sorted)
                    gpu_from = max(s_last, float(np.fmax.reduce(before))) if before.size else s_last
                    own = float(ends[at]) - gpu_from
                    end[-1] = s_last + max(host_end - s_last, own)
        lead = unrecorded_gpu_lead(trace, int(r))
        if lead is not None and lead[0] <= float(start[0]) < lead[1] < float(end[0]):
            start[0] = lead[1]
        out_rank.append(np.full(len(step), r, dtype=np.int64))
        out_step.append(step)
        out_start.append(start)
        out_end.append(end)
    if not out_rank:
        return pd.DataFrame(columns=["rank", "step", "start_us", "end_us", "dur_us"])
    start, end = np.concatenate(out_start).astype(np.float64), np.concatenate(out_end).astype(np.float64)
    return pd.DataFrame({"rank": np.concatenate(out_rank), "step": np.concatenate(out_step).astype(np.int64),
                         "start_us": start, "end_us": end, "dur_us": end - start})


def _rank_of_all(trace: Trace, rank: int) -> pd.DataFrame | None:
    """One rank's windows cut from every rank's, where those were worked out already (a rank's windows depend on its
    own rows only: the same rows, not worked out a second time); None where they were not, or hold none of it."""
    every = _memo(trace).get(("windows",))  # what windows(trace) stored (metrics._cache's key)
    if not isinstance(every, pd.DataFrame) or not len(every):
        return None
    ranks = every["rank"].to_numpy()
    lo, hi = int(np.searchsorted(ranks, rank, side="left")), int(np.searchsorted(ranks, rank, side="right"))
    if hi <= lo:
        return None
    start, end = every["start_us"].to_numpy()[lo:hi].copy(), every["end_us"].to_numpy()[lo:hi].copy()
    return pd.DataFrame({"rank": ranks[lo:hi].copy(), "step": every["step"].to_numpy()[lo:hi].copy(),
                         "start_us": start, "end_us": end, "dur_us": end - start})


def _max_by_step(step: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each step's latest end (NaN ends skipped unless a step has no other), as ``groupby("step").max()``: the
    steps sorted, and their ends."""
    if not step.size:
        return step, end
    order = np.argsort(step, kind="stable")
    step, end = step[order], end[order]
    first = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
    return step[first], np.fmax.reduceat(end, first)


def _gpu_paced_arrays(step: np.ndarray, start: np.ndarray, ends_at: np.ndarray,
                      ends: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_gpu_paced` on arrays (a rank's steps by start, and its GPU work's last end per step): the new
    starts and ends, or None."""
    if len(step) < 2 or not ends_at.size:
        return None
    at = np.searchsorted(ends_at, step)
    if not ((at < ends_at.size) & (ends_at[np.minimum(at, ends_at.size - 1)] == step)).all():
        return None
    ge = ends[at].astype(float)
    if not (ge[:-1] > start[1:]).all() or not (np.diff(ge) > 0).all():
        return None
    period = float(np.median(np.diff(ge)))
    if period <= _th.GPU_PACED_RATIO * float(np.median(np.diff(start))):
        return None
    return np.r_[max(float(start[0]), ge[0] - period), ge[:-1]], ge


def _first_cuda_work(on_rank: pd.DataFrame, start: float) -> float:
    """Where a capture without steps begins its GPU program: its first CUDA call or GPU op. Before it the host only
    started (imports, building the model and the data): no loop of its is there to judge (a loop whose iterations
    vary finds no repeat, and the whole capture is its one window). A trace with no GPU program keeps its start."""
    cuda = on_rank[(on_rank["kind"] == "runtime") | (on_rank["device"] >= 0)]
    return max(start, float(cuda["start_us"].min())) if len(cuda) else start


def _gpu_paced(st: pd.DataFrame, dev: pd.DataFrame) -> pd.DataFrame | None:
    """The GPU's steps when the GPU paces the loop: every step's GPU work ends after the host has started
    the next step and the GPU's steps are longer than the host's (the host runs ahead; the course's GPU-bound loops measured 13.8-14.3 ms a step
    unprofiled where the host's profiled steps were 9.6 ms). Host windows would show the GPU running other
    steps' work and report the host's shorter steps. Step i's window ends where its GPU work ends and
    starts where step i-1's did; the first is as long as the median of the others. None when the GPU
    finishes some step before the host starts the next (the host paces it: a sync, host work, loading)."""
    if len(st) < 2 or dev.empty:
        return None
    ends = dev.groupby("step")["end_us"].max()
    steps = st["step"].to_numpy()
    if not np.isin(steps, ends.index).all():
        return None
    ge = ends.loc[steps].to_numpy(dtype=float)
    if not (ge[:-1] > st["start_us"].to_numpy()[1:]).all() or not (np.diff(ge) > 0).all():
        return None
    period = float(np.median(np.diff(ge)))
    if period <= _th.GPU_PACED_RATIO * float(np.median(np.diff(st["start_us"].to_numpy()))):
        return None  # the host keeps up: its steps are the loop's (a host-paced loop's GPU just runs behind it)
    start = np.r_[max(float(st["start_us"].iloc[0]), ge[0] - period), ge[:-1]]
    return st.assign(start_us=start, end_us=ge)


@_cached
def unrecorded_gpu_lead(trace: Trace, rank: int) -> tuple[float, float, float] | None:
    """``(capture start, lead end, queued_us)`` when the capture begins with the rank's GPU waiting on
    work it does not record: GPU work that starts at least :data:`~helpers.thresholds.QUEUED_BEFORE_RECORD_US`
    after both its launch call returned and the GPU's previous recorded work ended, with less than that
    much GPU work recorded before it. An idle GPU starts queued work within microseconds, so until then
    it ran (or its stream waited on) work launched before the profiler started. None otherwise."""
    on = rank_events(trace, rank)
    device = on["device"].to_numpy()
    gpu = np.flatnonzero(kind_in(on, GPU_WORK_KINDS) & (device >= 0))
    if not gpu.size:
        return None
    all_start, all_end, all_corr = (on[c].to_numpy() for c in ("start_us", "end_us", "correlation"))
    gpu = gpu[np.argsort(all_start[gpu], kind="stable")]
    start, end, corr = all_start[gpu], all_end[gpu], all_corr[gpu]
    prev_end = np.r_[-np.inf, np.maximum.accumulate(end)[:-1]]
    done_before = np.r_[0.0, np.cumsum(end - start)[:-1]]
    limit = _th.QUEUED_BEFORE_RECORD_US
    # a graph's later kernels were not queued one by one: each id's first op only (a hash, not a sort of the ids)
    first_of_call = ~pd.Index(corr).duplicated(keep="first")
    # only the GPU work before QUEUED_BEFORE_RECORD_US of it was done can be the lead's end: look those up
    looked = np.flatnonzero(first_of_call & (corr >= 0) & (done_before < limit))
    stop = np.flatnonzero(first_of_call & (corr >= 0) & (done_before >= limit))
    if stop.size:
        looked = looked[looked < stop[0]]
    if not looked.size:
        return None
    calls = np.flatnonzero(kind_in(on, ("runtime",)) & (all_corr >= 0))
    ids, ends = all_corr[calls], all_end[calls]
    order = np.argsort(ids, kind="stable")  # the last call of an id is its run's last: that call's end counts
    ids, ends = ids[order], ends[order]
    last = np.r_[ids[1:] != ids[:-1], True] if ids.size else np.zeros(0, dtype=bool)
    ids, ends = ids[last], ends[last]
    for i in looked:
        j = int(np.searchsorted(ids, corr[i]))
        if j == ids.size or ids[j] != corr[i]:
            continue
        queued = float(start[i] - max(ends[j], prev_end[i]))
        if queued >= limit:
            return float(all_start.min()), float(start[i]), queued
    return None


@_cached
def _devices_of(trace: Trace, rank: int) -> list[int]:
    ev = rank_events(trace, rank)
    device = ev["device"].to_numpy()
    return sorted(int(d) for d in np.unique(device[(device >= 0) & kind_in(ev, GPU_WORK_KINDS)]))


def time_origin_us(trace: Trace) -> float:
    """Time zero of every timeline of ``trace``: the first profiled step's start (else the first event's).

    One origin for every view of a trace, as Nsight Systems keeps one clock: a window read off a
    zoomed plot (``step=3``) is the same stretch of time as on the whole-trace plot, and the CLI's
    ``--window`` and "where" lines count from the same zero.
    """
    win = windows(trace)
    stepped = win[win["step"] >= 0]
    if not stepped.empty:
        return float(stepped["start_us"].min())
    return float(trace.events["start_us"].min()) if not trace.events.empty else 0.0
