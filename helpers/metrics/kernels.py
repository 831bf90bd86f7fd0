"""Kernels and launches: counts per step, durations, launch-to-start delays."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..model import Trace, kind_in
from ._cache import _cached
from ._store import name_mask
from .activity import SMALL_KERNEL_US
from .windows import windows


@_cached
def kernel_stats(trace: Trace, top: int = 10) -> dict[str, Any]:
    """Kernel count per step, duration distribution and the kernels that take the most time."""
    ev = trace.events
    # the three columns read, not every column of the table filtered
    k = ev[["name", "dur_us", "step"]][kind_in(ev, ("kernel", "collective")) & (ev["device"].to_numpy() >= 0)]
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
    rank, corr, start = ev["rank"].to_numpy(), ev["correlation"].to_numpy(), ev["start_us"].to_numpy()
    runtime = kind_in(ev, ("runtime",))
    call = runtime & name_mask(trace, "kernel_launch", lambda n: n.startswith(("cudaLaunch", "cuLaunch", "hipLaunch", "hipExtLaunch", "hipModuleLaunch", "hipExtModuleLaunch")))
    kernel = kind_in(ev, ("kernel", "collective")) & (corr >= 0)
    calls = np.flatnonzero(call)
    kernels = np.flatnonzero(kernel)
    # One call per (rank, correlation id): a damaged or hostile trace that reuses an id for thousands of
    # calls and kernels would otherwise multiply into calls x kernels rows. The first call is the launch.
    first = first_of_keys(rank[calls], corr[calls], rank[kernels], corr[kernels])
    found = first >= 0
    delay = start[kernels[found]] - start[calls[first[found]]]
    graph = runtime & name_mask(trace, "graph_launch", lambda n: n.startswith(("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")))
    graphs = np.flatnonzero(graph)
    from_graphs = int((first_of_keys(rank[graphs], corr[graphs], rank[kernels], corr[kernels]) >= 0).sum())
    individually = 1.0 - from_graphs / kernels.size if kernels.size else float("nan")
    durs = ev["dur_us"].to_numpy()[calls]
    return {
        "individually_launched_share": individually,
        "launch_calls": int(calls.size),
        "median_launch_call_us": float(pd.Series(durs).median()) if calls.size else float("nan"),
        "median_launch_to_start_us": float(np.median(delay)) if delay.size else float("nan"),
        "p90_launch_to_start_us": float(np.percentile(delay, 90)) if delay.size else float("nan"),
    }


def first_of_keys(rank: np.ndarray, corr: np.ndarray, want_rank: np.ndarray, want_corr: np.ndarray) -> np.ndarray:
    """For each wanted (rank, correlation id): the position in ``rank``/``corr`` of its first row (the earliest in
    their order), or -1 where none has it. What a merge on the two keys with the left side's duplicates dropped
    (``keep="first"``) joins, as arrays: a join of two small frames cost a few milliseconds however few the rows."""
    out = np.full(want_rank.size, -1, dtype=np.int64)
    if not rank.size or not want_rank.size:
        return out
    order = np.lexsort((corr, rank))  # stable: among equal keys the earliest row comes first
    r, c = rank[order], corr[order]
    head = np.r_[True, (r[1:] != r[:-1]) | (c[1:] != c[:-1])]
    order, r, c = order[head], r[head], c[head]
    for value in np.unique(want_rank):  # the ranks (a few): a sorted search of the ids within each
        lo, hi = np.searchsorted(r, value, side="left"), np.searchsorted(r, value, side="right")
        if lo == hi:
            continue
        mine = np.flatnonzero(want_rank == value)
        ids = c[lo:hi]
        at = np.minimum(np.searchsorted(ids, want_corr[mine]), ids.size - 1)
        hit = ids[at] == want_corr[mine]
        out[mine[hit]] = order[lo + at[hit]]
    return out
