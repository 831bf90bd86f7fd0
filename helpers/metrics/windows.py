"""Analysis windows: the training steps (marked, or the steady state's repeats found by
:mod:`.steady` in a trace without markers), else the whole capture."""

from __future__ import annotations

import pandas as pd

from ..model import GPU_WORK_KINDS, Trace
from ._cache import _cached


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
