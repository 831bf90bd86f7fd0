"""Communication: collective time, the part no compute hides, and the spread of compute across ranks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..model import Trace
from ._cache import _cached
from .activity import gpu_work_union, host_union
from .intervals import intersect, overlap
from .windows import _devices_of, _plain_steps, windows


@_cached
def comm_stats(trace: Trace) -> pd.DataFrame:
    """Per rank and window: collective time, compute time, and exposed collective time.

    On GPUs, collectives are NCCL kernels and compute the other kernels on that GPU; on the
    host (gloo), collectives are the gloo ranges and compute the PyTorch ops on other threads.
    Exposed time is collective time that no compute overlaps: what the step waits for.
    """
    rows = []
    # every rank's windows at once where they come out in one set of types (a frame a rank costs about 1 ms)
    every = windows(trace) if _plain_steps(trace.steps) else None
    if every is not None:
        w_rank, w_step = every["rank"].to_numpy(), every["step"].to_numpy()
        w_start, w_end = every["start_us"].to_numpy(), every["end_us"].to_numpy()
    for rank in trace.ranks:
        if every is None:
            win = windows(trace, rank)
            ws, we, win_step = win["start_us"].to_numpy(), win["end_us"].to_numpy(), win["step"].to_numpy()
        else:
            mine = w_rank == rank
            ws, we, win_step = w_start[mine], w_end[mine], w_step[mine]
        devices = _devices_of(trace, rank)
        if devices:
            pairs = [(gpu_work_union(trace, rank, d, ("collective",)), gpu_work_union(trace, rank, d, ("kernel",))) for d in devices]
        else:
            pairs = [(host_union(trace, rank, "collective"), host_union(trace, rank, "host_compute"))]
        coll = np.zeros(len(ws))
        comp = np.zeros(len(ws))
        exposed = np.zeros(len(ws))
        for (cs, ce), (ks, ke) in pairs:
            coll += overlap(cs, ce, ws, we)
            comp += overlap(ks, ke, ws, we)
            # exposed = collective minus (collective ∩ compute)
            both_s, both_e = intersect(cs, ce, ks, ke)
            exposed += overlap(cs, ce, ws, we) - overlap(both_s, both_e, ws, we)
        for step, w, c, k, x in zip(win_step, we - ws, coll, comp, exposed):
            rows.append((rank, int(step), w, c, k, x, x / w if w > 0 else 0.0))
    return pd.DataFrame(rows, columns=["rank", "step", "window_us", "collective_us", "compute_us", "exposed_us", "exposed_share"])


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
