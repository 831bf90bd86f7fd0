"""Copies: per direction and host memory kind, and host-to-device copies together."""

from __future__ import annotations

import pandas as pd

from ..model import Trace, kind_in
from ._cache import _cached
from .activity import gpu_work_union
from .intervals import overlap
from .windows import windows


@_cached
def copy_stats(trace: Trace) -> pd.DataFrame:
    """Per direction and host memory kind: ``count, time_us, bytes, gb_per_s, overlap_share``.

    ``overlap_share`` is the share of copy time during which a compute kernel ran on the same GPU.
    """
    ev = trace.events
    cp = ev[kind_in(ev, ("memcpy",))]
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
    return host_copy_stats(trace, ("H2D",))


def host_copy_stats(trace: Trace, kinds: tuple[str, ...] = ("H2D", "D2H")) -> dict[str, float] | None:
    """:func:`h2d_stats`' figures over copies between host and device in both directions (by default):
    an offloading loop pays as much for its device-to-host copies as for the way back. None without any."""
    c = copy_stats(trace)
    h = c[c["copy_kind"].isin(kinds)]
    if h.empty:
        return None
    time_us, nbytes = float(h["time_us"].sum()), float(h["bytes"].sum())
    exposed = float((h["time_us"] * (1 - h["overlap_share"])).sum())
    return {
        "time_us": time_us, "bytes": nbytes, "gb_per_s": nbytes / (time_us * 1e3) if time_us > 0 else float("nan"),
        "exposed_us": exposed, "overlap_with_compute": 1 - exposed / time_us if time_us > 0 else 0.0,
        "pageable_byte_share": float(h.loc[h["host_memory"] == "pageable", "bytes"].sum() / max(nbytes, 1)),
    }
