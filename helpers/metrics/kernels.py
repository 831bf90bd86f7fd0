"""Kernels and launches: counts per step, durations, launch-to-start delays."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..model import Trace
from ._cache import _cached
from ._store import name_mask
from .activity import SMALL_KERNEL_US
from .windows import windows


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
    calls = ev[(ev["kind"] == "runtime") & name_mask(trace, "kernel_launch", lambda n: n.startswith(("cudaLaunch", "cuLaunch", "hipLaunch", "hipExtLaunch", "hipModuleLaunch", "hipExtModuleLaunch")))]
    kernels = ev[ev["kind"].isin(("kernel", "collective")) & (ev["correlation"] >= 0)]
    # One call per (rank, correlation id): a damaged or hostile trace that reuses an id for thousands of
    # calls and kernels would otherwise multiply into calls x kernels rows. The first call is the launch.
    first_call = calls[["rank", "correlation", "start_us", "dur_us"]].drop_duplicates(["rank", "correlation"])
    joined = kernels[["rank", "correlation", "start_us"]].merge(
        first_call, on=["rank", "correlation"], suffixes=("_kernel", "_call"))
    delay = (joined["start_us_kernel"] - joined["start_us_call"]).to_numpy()
    graph_calls = ev[(ev["kind"] == "runtime") & name_mask(trace, "graph_launch", lambda n: n.startswith(("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")))]
    from_graphs = kernels.merge(graph_calls[["rank", "correlation"]].drop_duplicates(), on=["rank", "correlation"])
    individually = 1.0 - len(from_graphs) / len(kernels) if len(kernels) else float("nan")
    return {
        "individually_launched_share": individually,
        "launch_calls": int(len(calls)),
        "median_launch_call_us": float(calls["dur_us"].median()) if len(calls) else float("nan"),
        "median_launch_to_start_us": float(np.median(delay)) if delay.size else float("nan"),
        "p90_launch_to_start_us": float(np.percentile(delay, 90)) if delay.size else float("nan"),
    }
