"""Steady state of a trace without step markers: what repeats, used as the training steps.

Nsight Systems exports and hand-made captures often have no ``ProfilerStep#N`` or ``step N``
range, so every figure would be one average over the whole capture, start-up and tail included.
A training loop repeats itself, and the repeat shows in the trace:

1. the host's **ranges** (NVTX / ``record_function``): the top-level ranges of the thread that has
   the most, as a sequence of names (``data, forward, backward, optimizer, data, ...``);
2. else the **kernels** of the rank's first GPU, as a sequence of kernel names (and copies: not unified-memory
   migrations, which no launch queued);
3. else (CPU-only traces) the host's top-level **PyTorch ops** on its busiest thread.

:func:`find_period` finds the shortest period with which the longest stretch of such a sequence
repeats (:data:`helpers.thresholds.STEADY_MIN_MATCH` of the elements equal to the one a period
later, at least :data:`~helpers.thresholds.STEADY_MIN_REPEATS` repeats). Each repeat is one step:
for ranges it starts where the period's first range starts; for kernels it starts at the host
launch call of the kernel after the largest recurring GPU gap (where one step hands over to the
next). :func:`stepped` returns a new Trace with those steps (the trace itself when it has step
markers or nothing repeats); every metric reads the steps through it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .. import thresholds as _th
from ..model import GPU_WORK_KINDS, Trace, assign_steps, empty_steps, kind_in
from ._store import _memo, rank_events, rank_rows, stamp
from .intervals import merge_intervals, overlap


# --- period detection on a sequence of codes ------------------------------------------------
def _longest_good_run(good: np.ndarray, min_match: float) -> tuple[int, int]:
    """Longest ``[i, j)`` in which at least ``min_match`` of ``good`` is True.

    With ``v = good - min_match`` and prefix sums ``s``, that is the longest ``j - i`` with
    ``s[j] >= s[i]``; the best ``i`` for a ``j`` is the first prefix minimum at or below ``s[j]``.
    """
    v = np.where(good, 1.0 - min_match, -min_match)
    s = np.r_[0.0, np.cumsum(v)]
    run_min = np.minimum.accumulate(s)
    left = np.flatnonzero(np.r_[True, s[1:] < run_min[:-1]])  # where the prefix sum reaches a new low
    k = np.searchsorted(-s[left], -s - 1e-9, side="left")  # -s[left] increases
    length = np.arange(s.size) - left[np.minimum(k, left.size - 1)]
    j = int(np.argmax(length))
    return int(left[min(int(k[j]), left.size - 1)]), j


def _candidates(codes: np.ndarray, limit: int) -> list[int]:
    """Periods worth trying: all for short sequences, else the spacings of the rarer recurring codes
    and of the rarer recurring runs of 8 codes (a step's kernels drawn from a few names repeat as runs)."""
    n = codes.size
    if n <= 400:
        return list(range(1, n // 2 + 1))
    out = _spacings(codes, limit // 2)
    k = 8
    h = np.zeros(n - k + 1, dtype=np.int64)
    with np.errstate(over="ignore"):
        for j in range(k):
            h = h * np.int64(1_000_003) + codes[j:n - k + 1 + j].astype(np.int64)
    out |= _spacings(pd.factorize(h)[0], limit // 2)
    return sorted(p for p in out if 1 <= p <= n // 2)


def _spacings(codes: np.ndarray, limit: int) -> set[int]:
    """Distances between nearby occurrences of the rarer codes that occur more than once."""
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    bounds = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1], True])
    counts = np.diff(bounds)
    rare = np.argsort(counts, kind="stable")
    out: set[int] = set()
    for g in rare:
        c = counts[g]
        if c < 2:
            continue
        pos = order[bounds[g]:bounds[g + 1]]  # positions of this code, ascending (stable sort)
        for m in (1, 2, 3):
            if pos.size > m:
                out.update(int(d) for d in np.unique(pos[m:] - pos[:-m])[:8])
        if len(out) >= limit:
            break
    return out


def find_period(codes: np.ndarray, min_repeats: int | None = None, min_match: float | None = None) -> dict[str, Any] | None:
    """The period of the longest repeating stretch of ``codes``: ``period, start, repeats, match``.

    ``start`` is the index of the stretch's first element, ``repeats`` the whole periods in it, and
    ``match`` the share of its elements equal to the element one period later. Among periods that
    cover nearly as much as the best one, the best-matching wins, and of equals the shortest (a
    period's multiples repeat too). None when nothing repeats ``min_repeats`` times.
    """
    min_repeats = _th.STEADY_MIN_REPEATS if min_repeats is None else min_repeats
    min_match = _th.STEADY_MIN_MATCH if min_match is None else min_match
    codes = np.asarray(codes)
    n = codes.size
    if n < min_repeats:
        return None
    scored = []
    for p in _candidates(codes, _th.STEADY_MAX_CANDIDATES):
        eq = codes[:-p] == codes[p:]
        i, j = _longest_good_run(eq, min_match)
        hit = np.flatnonzero(eq[i:j])
        if hit.size == 0:
            continue
        i, j = i + int(hit[0]), i + int(hit[-1]) + 1  # the stretch starts and ends on a match
        covered = j - i + p
        repeats = covered // p
        if repeats < min_repeats or covered < _th.STEADY_MIN_COVER * n:
            continue
        scored.append((p, i, repeats, covered, float(eq[i:j].mean())))
    if not scored:
        return None
    most = max(s[3] for s in scored)
    near = [s for s in scored if s[3] >= _th.STEADY_NEAR_COVER * most]
    top = max(s[4] for s in near)
    p, i, repeats, _, match = min((s for s in near if s[4] >= top - 0.01), key=lambda s: s[0])
    return {"period": p, "start": i, "repeats": repeats, "match": match}


# --- the sequences a trace offers -------------------------------------------------------------
def _top_level(sel: pd.DataFrame) -> pd.DataFrame:
    """Rows of one thread not nested in another row of it."""
    sel = sel.sort_values(["start_us", "dur_us"], ascending=[True, False])
    ends = sel["end_us"].to_numpy()
    reach = np.maximum.accumulate(np.r_[-np.inf, ends[:-1]]) if ends.size else ends
    return sel[sel["start_us"].to_numpy() >= reach - 1e-9]


def _busiest_thread(sel: pd.DataFrame) -> pd.DataFrame:
    if sel.empty:
        return sel
    tid = sel["tid"].value_counts().idxmax()
    return sel[sel["tid"] == tid]


def _host_sequence(ev: pd.DataFrame, kind: str) -> pd.DataFrame:
    sel = _busiest_thread(ev[(ev["kind"] == kind) & (ev["device"] < 0)])
    if sel.empty:
        return sel
    counts = sel["name"].value_counts()
    sel = sel[sel["name"].map(counts).to_numpy() >= 2]  # a range met once (a wrapper, set-up) is no step part
    return _top_level(sel)


def _steps_from_host(seq: pd.DataFrame, found: dict[str, Any], rank: int) -> pd.DataFrame:
    p, i, k = found["period"], found["start"], found["repeats"]
    starts = seq["start_us"].to_numpy()
    ends = seq["end_us"].to_numpy()
    first = i + p * np.arange(k)
    s = starts[first]
    e = np.r_[starts[first[1:]], ends[i:i + p * k].max()]
    return pd.DataFrame({"rank": rank, "step": np.arange(k), "start_us": s, "end_us": e, "dur_us": e - s})


def _steps_from_kernels(ev: pd.DataFrame, kernels: pd.DataFrame, found: dict[str, Any], rank: int) -> pd.DataFrame:
    p, i, k = found["period"], found["start"], found["repeats"]
    ks, ke = kernels["start_us"].to_numpy(), kernels["end_us"].to_numpy()
    idle_before = np.r_[0.0, np.maximum(ks[1:] - np.maximum.accumulate(ke)[:-1], 0.0)]
    block = idle_before[i:i + p * k].reshape(k, p)
    phase = int(np.argmax(block[1:].sum(axis=0))) if k > 1 else 0  # the step boundary: the largest recurring gap
    n_steps = (p * k - phase) // p
    if n_steps < _th.STEADY_MIN_REPEATS:
        n_steps = k
        phase = 0
    first = i + phase + p * np.arange(n_steps)
    last = first[-1] + p - 1
    corr = kernels["correlation"].to_numpy()
    # A CUDA / HIP Graph replays many repeats from one launch call (a decode step's layers): the host
    # saw one step, not several of zero length. Repeats whose first kernel shares a launch are one step.
    own = np.r_[True, (corr[first[1:]] != corr[first[:-1]]) | (corr[first[1:]] < 0)]
    if not own.all():
        first = first[own]
        if first.size < _th.STEADY_MIN_REPEATS:
            return empty_steps()
        n_steps = int(first.size)
    # Steps are host windows: start each at the launch call of its first kernel (the GPU runs behind).
    calls = ev[(ev["kind"] == "runtime") & (ev["correlation"] >= 0)]
    launch_at = dict(zip(calls["correlation"].to_numpy(), calls["start_us"].to_numpy()))
    host = np.array([launch_at.get(c, t) for c, t in zip(corr[first], ks[first])])
    host = np.maximum.accumulate(host)  # a launch recorded out of order never makes a step end before it starts
    end = float(launch_at.get(corr[last], ks[last]))
    calls_end = calls.set_index("correlation")["end_us"] if not calls.empty else None
    if calls_end is not None and corr[last] in calls_end.index:
        end = float(np.max(np.atleast_1d(calls_end.loc[corr[last]])))
    e = np.r_[host[1:], max(end, host[-1])]
    return pd.DataFrame({"rank": rank, "step": np.arange(n_steps), "start_us": host, "end_us": e, "dur_us": e - host})


#: How the nsys reader names a unified-memory migration (helpers.readers.nsys).
_MIGRATION = "Unified Memory Memcpy"


def _queued_work(on: pd.DataFrame) -> pd.DataFrame:
    """The GPU work the host queued, on the rank's first GPU, in time order: kernels, copies, memsets, collectives,
    but not unified-memory migrations, which page faults move on demand (the host's code touching managed memory,
    a kernel reading it), with no launch to start a step at; a run of them would read as a loop of one "kernel"."""
    k = on[on["kind"].isin(GPU_WORK_KINDS) & (on["device"] >= 0)]
    k = k[~k["name"].str.startswith(_MIGRATION, na=False)]
    return k[k["device"] == k["device"].min()].sort_values("start_us", kind="stable")


def _group_by_kernel_period(on: pd.DataFrame, found: dict[str, Any]) -> dict[str, Any] | None:
    """A range that repeats once per layer (``layer, layer, ...``) has a shorter period than the step.
    When the GPU's kernels repeat at least twice as rarely as the ranges, c = (range repeats / kernel
    repeats) consecutive range repeats make one step; None when fewer than the minimum repeats remain."""
    k = _queued_work(on)
    if k.empty:
        return found
    by_kernels = find_period(pd.factorize(k["name"])[0])
    if by_kernels is None or found["repeats"] < 2 * by_kernels["repeats"]:
        return found
    c = int(round(found["repeats"] / by_kernels["repeats"]))
    repeats = found["repeats"] // c
    if repeats < _th.STEADY_MIN_REPEATS:
        return None
    return {**found, "period": found["period"] * c, "repeats": repeats}


def steady_steps(trace: Trace) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Steps found from what repeats, per rank (empty when nothing does), and how they were found:
    ``source`` (``ranges``, ``kernels`` or ``ops``), ``period`` (the names of one repeat, shortened),
    ``period_length``, ``steps``, ``match``."""
    ev = trace.events
    frames, info = [], {}
    for rank in sorted(int(r) for r in ev["rank"].unique()):
        on = rank_events(trace, rank)
        found = steps = None
        for source in ("ranges", "kernels", "ops"):
            if source == "kernels":
                seq = _queued_work(on)
                if seq.empty:
                    continue
            else:
                seq = _host_sequence(on, "annotation" if source == "ranges" else "cpu_op")
            if len(seq) < 2:
                continue
            codes = pd.factorize(seq["name"])[0]
            found = find_period(codes)
            if found is None:
                continue
            if source == "ranges":
                found = _group_by_kernel_period(on, found)
                if found is None:
                    continue
            steps = (_steps_from_kernels(on, seq, found, rank) if source == "kernels"
                     else _steps_from_host(seq, found, rank))
            if steps.empty:  # the repeats were one graph replay's: no steps from this source
                continue
            names = seq["name"].to_numpy()[found["start"]:found["start"] + found["period"]]
            info = {"source": source, "period": [str(x)[:40] for x in names[:6]] + (["..."] if len(names) > 6 else []),
                    "period_length": int(found["period"]), "steps": int(len(steps)), "match": found["match"]}
            break
        if steps is not None and not steps.empty:
            frames.append(steps)
    if not frames:
        return empty_steps(), {}
    return pd.concat(frames, ignore_index=True), info


def stepped(trace: Trace) -> Trace:
    """The trace with steps: itself when it has step markers or nothing repeats, else a new Trace
    (same events, ``step`` labelled) whose ``metadata['steps']`` are the steady state's repeats and
    ``metadata['steps_inferred']`` says how they were found. Cached on the trace."""
    marked = trace.metadata.get("steps")  # not trace.steps: that builds an empty frame on every call
    if (marked is not None and not marked.empty) or trace.metadata.get("steps_inferred"):
        return trace
    memo = _memo(trace)
    kept = memo.get("__stepped__")
    if kept is not None and kept is not trace and memo.get("__stepped_stamp__") != stamp(kept):
        del memo["__stepped__"]  # the user edited the trace steady_state gave them: build it again from this one
    if "__stepped__" not in memo:
        steps, info = steady_steps(trace) if not trace.events.empty else (empty_steps(), {})
        if not steps.empty and _leaves_out_the_work(trace, steps):
            steps, info = empty_steps(), {}
        if steps.empty:
            memo["__stepped__"] = trace
        else:
            ev = trace.events.copy(deep=False)
            assign_steps(ev, steps)
            labels, windows = _without_ramp_up(ev, steps)
            if windows is not steps:  # the first repeat was ramp-up
                assign_steps(ev, labels)
                info = {**info, "steps": int(len(windows)), "ramp_up_dropped": True}
            steps = windows
            md = dict(trace.metadata)
            md["steps"] = steps
            md["steps_inferred"] = info
            memo["__stepped__"] = Trace(ev, trace.source, trace.format, md)
            memo["__stepped_stamp__"] = stamp(memo["__stepped__"])
            # shares its blocks: an edit in place of the trace handed out must copy first (copy-on-write), so the stamp sees it
            memo["__stepped_view__"] = memo["__stepped__"].events.copy(deep=False)
    return memo["__stepped__"]


def _leaves_out_the_work(trace: Trace, steps: pd.DataFrame) -> bool:
    """Repeats that hold less than :data:`~helpers.thresholds.STEADY_MIN_GPU_WORK` of the capture's GPU work are not
    its loop: a few set-up copies repeat, and the one long kernel after them (the program's real work) would be left
    out as "teardown or a partial step". A repeat's GPU work is the work its launches queued (it may run long after
    the host's window, where the GPU paces the loop)."""
    ev = trace.events
    dev = (ev["device"].to_numpy() >= 0) & ev["kind"].isin(GPU_WORK_KINDS).to_numpy()
    if not dev.any():
        return False
    labelled = ev[["rank", "kind", "start_us", "end_us", "device", "correlation"]].copy()
    labelled["step"] = -1
    assign_steps(labelled, steps)
    start, end, step = ev["start_us"].to_numpy(), ev["end_us"].to_numpy(), labelled["step"].to_numpy()
    total = kept = 0.0
    for r in np.unique(ev["rank"].to_numpy()[dev]):
        mine = dev & (ev["rank"].to_numpy() == r)
        us, ue = merge_intervals(start[mine], end[mine])
        total += float((ue - us).sum())
        ks, ke = merge_intervals(start[mine & (step >= 0)], end[mine & (step >= 0)])
        kept += float((ke - ks).sum())
    return total > 0 and kept < _th.STEADY_MIN_GPU_WORK * total


def _without_ramp_up(ev: pd.DataFrame, steps: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Drop the first repeat where the capture began with the GPU idle (nsys --capture-range starts
    after a sync, the queue empty: the first step's idle time is the capture's, not the loop's).

    Returns the host windows to label events with and the analysis windows; the first kept window
    starts once the dropped step's GPU work has finished too, so none of it is counted. Traces whose
    GPU is already busy where the capture starts, CPU-only traces and short captures keep every repeat.
    """
    kept_labels, kept_windows = [], []
    changed = False
    for rank, st in steps.groupby("rank", sort=True):
        st = st.sort_values("start_us").reset_index(drop=True)
        dev = ev[(ev["rank"] == rank) & (ev["device"] >= 0) & ev["kind"].isin(GPU_WORK_KINDS)]
        s0 = float(st["start_us"].iloc[0])
        busy_at_start = bool(((dev["start_us"] <= s0) & (dev["end_us"] > s0)).any())
        if dev.empty or busy_at_start or len(st) <= _th.STEADY_DROP_FIRST_ABOVE:
            kept_labels.append(st)
            kept_windows.append(st)
            continue
        changed = True
        first_gpu_end = dev.loc[dev["step"] == 0, "end_us"]
        labels = st.iloc[1:].assign(step=lambda d: d["step"] - 1).reset_index(drop=True)
        win = labels.copy()
        if not first_gpu_end.empty:
            win.loc[0, "start_us"] = min(max(float(win.loc[0, "start_us"]), float(first_gpu_end.max())),
                                         float(win.loc[0, "end_us"]))
            win["dur_us"] = win["end_us"] - win["start_us"]
        kept_labels.append(labels)
        kept_windows.append(win)
    if not changed:
        return steps, steps
    return pd.concat(kept_labels, ignore_index=True), pd.concat(kept_windows, ignore_index=True)


def capture_stats(trace: Trace) -> dict[str, float]:
    """The whole capture, whatever its steps: ``capture_ms`` (span, summed over ranks), the share of
    it a GPU was busy (``gpu_share``) and the host was inside a recorded op, CUDA call or range
    (``host_share``: a range is the program saying what the host is doing, e.g. waiting for data)."""
    ev = trace.events
    start, end, device = ev["start_us"].to_numpy(), ev["end_us"].to_numpy(), ev["device"].to_numpy()
    # whole-table masks once, each rank's rows taken from them (no frame filtered per rank: 16 columns copied)
    work_all = kind_in(ev, GPU_WORK_KINDS) & (device >= 0)
    host_all = (device < 0) & kind_in(ev, ("cpu_op", "runtime", "annotation"))
    total = gpu = host = 0.0
    for rank in trace.ranks:
        at = rank_rows(trace, rank)
        rows = slice(None) if at is None else at
        rs, re_, rd = start[rows], end[rows], device[rows]
        s, e = float(rs.min()), float(re_.max())
        total += e - s
        work = work_all[rows]
        if work.any():  # the first GPU's share, as gpu_utilization counts each device's window
            first = rd[work] == rd[work].min()
            us, ue = merge_intervals(rs[work][first], re_[work][first])
            gpu += float(overlap(us, ue, np.array([s]), np.array([e]))[0])
        h = host_all[rows]
        us, ue = merge_intervals(rs[h], re_[h])
        host += float(overlap(us, ue, np.array([s]), np.array([e]))[0])
    total = total or 1.0
    return {"capture_ms": total / 1e3, "gpu_share": gpu / total, "host_share": host / total}
