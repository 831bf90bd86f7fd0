"""Overlay tracks for the timeline (the widget's ``overlays`` and the report's): stretches drawn above the lanes
from data, each with a colour, a label and what it is. Kept apart from the views, so either can draw them."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import metrics as m
from .model import Trace


def critical_path_overlay(trace: Trace) -> dict[str, Any] | None:
    """The critical path (:func:`helpers.critical.critical_path`) as an overlay track for the timeline: each stretch
    coloured by its cause, labelled with the cause and named by the event it is. None when the path is empty."""
    from .critical import critical_path
    from .patterns import CAUSE

    trace = m.stepped(trace)
    path = critical_path(trace)
    st = path.stretches
    if st.empty:
        return None
    st = st[st["rank"] == path.rank]
    origin = m.time_origin_us(trace)
    causes = st["cause"].astype(str).tolist()
    used = [c for c in CAUSE if c in set(causes)]
    return {"name": f"critical path (rank {path.rank})" if len(trace.ranks) > 1 else "critical path",
            "x0": np.round((st["start_us"].to_numpy() - origin) / 1e3, 6).tolist(),
            "x1": np.round((st["end_us"].to_numpy() - origin) / 1e3, 6).tolist(),
            "c": [CAUSE[c].colour if c in CAUSE else "#999999" for c in causes], "label": causes,
            "detail": [str(n) for n in st["name"].tolist()],
            "legend": [[c, CAUSE[c].colour] for c in used]}


__all__ = ["critical_path_overlay"]
