"""The interactive timeline's data for a page with no Python behind it (``python -m helpers report``).

The widget (:mod:`helpers.explore`) asks Python for each view; a report file answers in the page, from data
laid out ahead of time:

* **levels**: each lane thinned per zoom level: level ``k`` is the whole trace in ``COLUMNS * 4**k`` pixel
  columns (:func:`helpers.explore.column_runs`: busy share and colour of each column, equal columns merged). A
  level is kept for a lane while it is much smaller than the lane's events; the first draw and every zoomed-out
  view read a level, never the events.
* **detail**: the events themselves (start, duration, colour, name, correlation id, range depth, bytes), for
  hover, pin, search and flow arrows and the views finer than the levels. At most ``detail_events`` of them:
  beyond that, the events of a stretch around the diagnosis's first finding, and elsewhere the levels go on
  down to :data:`FINEST_US` a column.

Everything numeric is one blob of unsigned LEB128 varints (times in nanoseconds, starts as differences from the
previous start on the lane), gzipped and base64-encoded into the page; ``meta`` (JSON) says where each array is.
The page decodes it with the browser's own ``DecompressionStream``: nothing is fetched.
"""

from __future__ import annotations

import base64
import gzip
from typing import Any

import numpy as np
import pandas as pd

from . import metrics as m
from .explore import MAX_RANGE_DEPTH, Lanes, column_runs
from .model import Trace

#: Pixel columns of the coarsest level (the whole trace); each level has 4x the columns of the one before.
COLUMNS = 2048
#: Levels are not made finer than this many microseconds a column.
FINEST_US = 0.5
#: A lane's level is kept while its runs are fewer than this share of its events (else the events are cheaper).
LEVEL_SHARE = 0.5
#: Events stored one by one at most (the rest: the levels only).
DETAIL_EVENTS = 2_000_000
#: Runs the levels beyond the coarsest may hold in all (they stop earlier where the events are all kept).
LEVEL_RUNS = 2_000_000


def varints(values: np.ndarray) -> bytes:
    """Unsigned LEB128 of each value (non-negative integers below 2**53, as the page's numbers hold them)."""
    v = np.asarray(values, dtype=np.uint64)
    if v.size == 0:
        return b""
    n = np.ones(v.size, dtype=np.int64)
    t = v >> np.uint64(7)
    while t.any():
        n += t > 0
        t >>= np.uint64(7)
    pos = np.r_[0, np.cumsum(n)[:-1]]
    out = np.zeros(int(n.sum()), dtype=np.uint8)
    for k in range(int(n.max())):
        sel = n > k
        byte = ((v[sel] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        byte[n[sel] > k + 1] |= 0x80
        out[pos[sel] + k] = byte
    return out.tobytes()


class _Blob:
    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, values: np.ndarray) -> list[int]:
        """Append the varints of ``values``; returns ``[offset, count]`` for the page."""
        data = varints(values)
        ref = [self.size, int(np.asarray(values).size)]
        self.parts.append(data)
        self.size += len(data)
        return ref

    def encoded(self) -> str:
        return base64.b64encode(gzip.compress(b"".join(self.parts), compresslevel=6, mtime=0)).decode("ascii")


def _ns(us: np.ndarray, t0: float) -> np.ndarray:
    return np.maximum(np.round((np.asarray(us, float) - t0) * 1e3), 0).astype(np.uint64)


def _detail_window(trace: Trace, lanes: Lanes, budget: int, centre_us: float | None) -> tuple[float, float] | None:
    """None when every drawn event fits the budget, else the stretch of ``budget`` events (by start) around
    ``centre_us`` (the middle of the trace without one), moved inside the trace where it would run past an end."""
    starts = np.sort(np.concatenate([ln.start for ln in lanes.lanes if not ln.is_ranges] or [np.zeros(0)]))
    if starts.size <= budget:
        return None
    t0, t1 = lanes.full_us
    centre = (t0 + t1) / 2 if centre_us is None else float(centre_us)
    k = int(np.searchsorted(starts, centre))
    i0 = max(0, min(k - budget // 2, starts.size - budget))
    i1 = i0 + budget
    return float(starts[i0]), float(starts[i1 - 1]) if i1 < starts.size else t1


def timeline_payload(trace: Trace, title: str, detail_events: int = DETAIL_EVENTS, centre_us: float | None = None,
                     max_lanes: int = 64, overlays: list[dict] | None = None,
                     collapsed_ranks: list[int] | None = None) -> dict[str, Any]:
    """What the report's timeline needs, as one JSON-able dict: ``meta`` (lanes, colours, legend, axis, where
    each array lies) and ``blob`` (the arrays, gzipped and base64-encoded). ``trace`` is taken over its steps."""
    trace = m.stepped(trace)
    lanes = Lanes(trace, max_lanes=max_lanes)
    ev = trace.events
    t0, t1 = lanes.full_us
    names = ev["name"].to_numpy(dtype=object)
    corr = ev["correlation"].to_numpy()
    nbytes = ev["bytes"].to_numpy()
    window = _detail_window(trace, lanes, detail_events, centre_us)
    blob = _Blob()
    name_ids: dict[str, int] = {}
    lane_meta = []
    for ln in lanes.lanes:
        sel = np.arange(ln.rows.size)
        if window is not None and not ln.is_ranges:  # ranges are few: always whole
            sel = sel[(ln.end > window[0]) & (ln.start < window[1])]
        if ln.is_ranges:
            sel = sel[ln.depth[sel] <= MAX_RANGE_DEPTH]
        rows = ln.rows[sel]
        start_ns = _ns(ln.start[sel], t0)
        codes, uniq = pd.factorize(names[rows])
        ids = np.array([name_ids.setdefault(str(u), len(name_ids)) for u in uniq], dtype=np.uint64)[codes] \
            if rows.size else np.zeros(0, dtype=np.uint64)
        entry: dict[str, Any] = {
            "n": int(sel.size),
            "s": blob.add(np.diff(start_ns, prepend=np.uint64(0)) if start_ns.size else start_ns),
            "d": blob.add(_ns(ln.end[sel], 0.0) - _ns(ln.start[sel], 0.0)),
            "c": blob.add(np.maximum(ln.colour[sel], 0)),
            "m": blob.add(ids),
            "k": blob.add(np.maximum(corr[rows] + 1, 0)),
        }
        if ln.is_ranges:
            entry["p"] = blob.add(ln.depth[sel])
        elif ln.kind in ("gpu", "copy"):
            b = nbytes[rows]
            entry["b"] = blob.add(np.where(np.isfinite(b) & (b > 0), np.round(b), 0))
        lane_meta.append(entry)
    # the levels: the whole trace thinned, coarse to fine
    levels = []
    span = max(t1 - t0, 1e-3)
    kept = [not ln.is_ranges for ln in lanes.lanes]
    runs_left = LEVEL_RUNS  # what the levels may hold in all, beyond the coarsest
    k = 0
    while any(kept) and runs_left > 0:
        ncols = COLUMNS * 4**k
        px = span / ncols
        if k > 0 and px < FINEST_US:
            break
        level: dict[str, Any] = {"px_ms": px / 1e3, "ncols": ncols, "lanes": []}
        for i, ln in enumerate(lanes.lanes):
            if not kept[i]:
                level["lanes"].append(None)
                continue
            runs = column_runs(ln.start, ln.end, ln.colour, t0, px, ncols)
            # beyond what the detail holds, the levels are all there is: keep going while they are small
            needed = window is not None
            if k > 0 and len(runs["x"]) >= LEVEL_SHARE * max(ln.rows.size, 1) and not needed:
                kept[i] = False
                level["lanes"].append(None)
                continue
            if k > 0:
                runs_left -= len(runs["x"])
            x = runs["x"].astype(np.uint64)
            level["lanes"].append({"x": blob.add(np.diff(x, prepend=np.uint64(0)) if x.size else x),
                                   "n": blob.add(runs["n"]), "c": blob.add(runs["c"]), "f": blob.add(runs["f"])})
        if all(entry is None for entry in level["lanes"]):
            break
        levels.append(level)
        k += 1
    overlay_meta = []
    for ov in overlays or []:  # stretches as the lanes' events are: in the blob, thinned per level ahead of time
        x0, x1 = np.asarray(ov["x0"], float), np.asarray(ov["x1"], float)
        order = np.argsort(x0, kind="stable")
        x0, x1 = x0[order], x1[order]
        pairs = list(zip(np.asarray(ov["c"], dtype=object)[order].tolist(), np.asarray(ov["label"], dtype=object)[order].tolist()))
        kinds = list(dict.fromkeys(pairs))  # (colour, label) of each kind of stretch
        kidx = np.array([kinds.index(p) for p in pairs], dtype=np.int64) if pairs else np.zeros(0, dtype=np.int64)
        details = np.asarray(ov.get("detail") or [""] * len(order), dtype=object)[order]
        codes, uniq = pd.factorize(details)
        d_ids = np.array([name_ids.setdefault(str(u), len(name_ids)) for u in uniq], dtype=np.uint64)[codes] \
            if details.size else np.zeros(0, dtype=np.uint64)
        start_ns = np.maximum(np.round((x0 - full_ms0(lanes)) * 1e6), 0).astype(np.uint64)
        us0, us1 = lanes.to_us(0.0) + x0 * 1e3, lanes.to_us(0.0) + x1 * 1e3
        ov_levels = []
        for level in levels:  # the same columns as the lanes' levels, while they thin the track
            runs = column_runs(us0, us1, kidx, t0, level["px_ms"] * 1e3, level["ncols"])
            if len(runs["x"]) >= LEVEL_SHARE * max(order.size, 1) and ov_levels:
                break
            x = runs["x"].astype(np.uint64)
            ov_levels.append({"px_ms": level["px_ms"], "x": blob.add(np.diff(x, prepend=np.uint64(0)) if x.size else x),
                              "n": blob.add(runs["n"]), "c": blob.add(runs["c"])})
        overlay_meta.append({"name": ov["name"], "legend": ov.get("legend", []), "colours": [k[0] for k in kinds],
                             "labels": [k[1] for k in kinds], "n": int(order.size), "levels": ov_levels,
                             "s": blob.add(np.diff(start_ns, prepend=np.uint64(0)) if start_ns.size else start_ns),
                             "d": blob.add(np.maximum(np.round((x1 - x0) * 1e6), 0).astype(np.uint64)),
                             "c": blob.add(kidx), "m": blob.add(d_ids)})
    where = []
    for ln in lanes.lanes:
        if ln.lane.startswith("GPU"):
            parts = ln.lane.split()
            where.append(f"GPU {parts[1]}, " + ("copies" if "memcpy" in ln.lane else f"stream {parts[-1]}"))
        else:
            where.append(f"thread {ln.lane.split()[-1]}")
    win = m.windows(trace)
    steps = [[int(r), int(s), float(lanes.to_ms(a)), float(lanes.to_ms(b))]
             for r, s, a, b in zip(win["rank"], win["step"], win["start_us"], win["end_us"]) if s >= 0]
    full = [float(lanes.to_ms(t0)), float(lanes.to_ms(t1))]
    meta = {
        "title": title, "origin": lanes.origin_text, "labels": lanes.labels, "lane_info": lanes.lane_info(),
        "colours": lanes.colours, "colour_names": lanes.colour_names, "legend": lanes.legend(),
        "phases": lanes.phase_legend(), "overlays": overlay_meta, "full_ms": full, "t0_ms": full[0],
        "where": where, "ranks": [int(ln.rank) for ln in lanes.lanes], "names": list(name_ids),
        "lanes": lane_meta, "levels": levels, "steps": steps, "collapsed_ranks": collapsed_ranks or [],
        "detail_ms": None if window is None else [float(lanes.to_ms(window[0])), float(lanes.to_ms(window[1]))],
        "events": int(sum(e["n"] for e in lane_meta)), "lanes_left_out": lanes.lanes_left_out,
        "blob_bytes": blob.size,
    }
    return {"meta": meta, "blob": blob.encoded()}


def full_ms0(lanes: Lanes) -> float:
    """The trace's first instant in ms on the axis: the blob's times count from it."""
    return float(lanes.to_ms(lanes.full_us[0]))


__all__ = ["COLUMNS", "DETAIL_EVENTS", "timeline_payload", "varints"]
