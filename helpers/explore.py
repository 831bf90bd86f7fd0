"""An interactive timeline for JupyterLab and Notebook 7, and the same front end in ``report``'s HTML file.

Built on anywidget: the front end is one ES module (``static/explore.js``) shipped with the package,
so nothing is fetched from a CDN, and the traitlets it syncs are the whole protocol. The lanes,
colours and time origin are :mod:`helpers.plots`'s, so a window read here is the same stretch on
``plots.timeline(trace, window_ms=...)`` and in a ``checks.Reading``.

What it does, as the viewers people know (Perfetto, the Nsight Systems GUI):

* a pixel that holds many events is drawn as tall as the share of its time they keep the lane busy
  (:func:`column_runs`), so a nearly idle GPU looks nearly idle at every zoom;
* plain wheel scrolls the page; Ctrl/Cmd-wheel, W/S zoom; A/D and drag pan; shift-drag selects a stretch
  (its figures: :func:`helpers.metrics.window_stats`); zoom stays inside the trace;
* hover shows an event (long names cut), click pins it (whole name, every field); launch -> kernel flow
  arrows for the hovered or pinned event; search by name with next/previous; lanes collapse (a click on
  the label); NVTX ranges stacked by depth with their names where they fit; a legend; the axis says what
  time 0 is (:func:`helpers.lanes.time_origin_text`);
* ``overlays``: extra tracks drawn above the lanes from data (stretches with a colour and label), e.g. a
  critical path.

Level of detail: the browser never holds the events table. For the visible range Python sends each
lane's pixel columns (``Lanes.bins``); a zoom asks again (the ``view_ms`` traitlet), so a 2M-event trace
costs a few thousand runs per draw. Hover, pin, search and selection are round trips too. The report
(:mod:`helpers.report`) answers the same requests in the page from data embedded ahead of time.

Where no widget front end runs (nbval, CI, an exported notebook) the cell shows the static
``plots.timeline`` figure instead: it is part of the widget's display data.
"""

from __future__ import annotations

import base64
import io
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import metrics as m
from .errors import ArgumentError, TraceError
from .lanes import (
    COPY_COLORS,
    FIGURE_WIDTH_PX,
    KIND_COLORS,
    _colour_keys,
    _lane_label,
    _lanes_in,
    _phase_color,
    phase_legend,
    time_origin_text,
    time_origin_us,
    timeline,
    trace_name,
)
from .metrics._store import stamp
from .model import MAX_STEP_PATTERN_CHARS, Trace
from .patterns import CAUSES
from .procs import search_bounded

STATIC = Path(__file__).parent / "static"
#: Range nesting drawn (deeper ranges are inside a phase: noise at timeline scale, as in plots.timeline).
MAX_RANGE_DEPTH = 2
#: Hover tolerance in pixels either side of the pointer: a 1-px kernel is still hittable.
HOVER_PX = 3
#: Views of at most this many columns are computed densely (prefix sums per column edge); wider ones sparsely.
DENSE_COLUMNS = 65_536
#: Matches a search sends at most (the count says how many there are).
SEARCH_LIMIT = 5000
#: Seconds a /regex/ search may take over the drawn names before it is stopped (see procs.search_bounded).
SEARCH_TIMEOUT_S = 3.0


@dataclass
class _Lane:
    """One lane's rows sorted by start, with a running maximum of their ends (to find the first row
    still running at a time by bisection)."""

    rank: int
    lane: str
    rows: np.ndarray
    start: np.ndarray
    end: np.ndarray
    end_max: np.ndarray
    colour: np.ndarray  # index into the colour list; ranges: their phase colour
    depth: np.ndarray  # range nesting (0 = outermost); zeros on other lanes

    @property
    def is_ranges(self) -> bool:
        return self.lane.startswith("ranges")

    @property
    def kind(self) -> str:
        """What the lane holds, for the front end's layout: ranges, gpu, copy, api or cpu."""
        if self.is_ranges:
            return "ranges"
        if self.lane.startswith("GPU"):
            return "copy" if "memcpy" in self.lane else "gpu"
        return "api" if self.lane.startswith("CUDA API") else "cpu"

    def overlapping(self, t0: float, t1: float) -> np.ndarray:
        """Positions (into this lane's arrays) of the rows that overlap ``[t0, t1)``."""
        i0 = int(np.searchsorted(self.end_max, t0, side="right"))
        i1 = int(np.searchsorted(self.start, t1, side="left"))
        pos = np.arange(i0, max(i0, i1))
        return pos[self.end[pos] > t0]


def _range_depths(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of ranges sorted by (start, longest first), as plots.timeline draws them."""
    depth = np.zeros(start.size, dtype=np.int64)
    open_ends: list[float] = []
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist())):
        while open_ends and open_ends[-1] <= s:
            open_ends.pop()
        depth[i] = len(open_ends)
        open_ends.append(e)
    return depth


#: Most pixel columns column_runs draws a lane into (a microsecond a column over a year's capture fits).
MAX_COLUMNS = 2**52


def column_runs(start: np.ndarray, end: np.ndarray, colour: np.ndarray, t0: float, px: float,
                ncols: int) -> dict[str, np.ndarray]:
    """A lane drawn as pixel columns ``[t0 + i*px, t0 + (i+1)*px)``, ``0 <= i < ncols``: for each column the
    share of its time the lane is busy (the union of its events, in percent, at least 1 where anything runs)
    and the colour that covers most of it; runs of equal columns merged.

    Returns ``x`` (first column), ``n`` (columns in the run), ``c`` (colour), ``f`` (busy percent), sorted by
    column. Sparse: the cost is in the events, not in ``ncols``, so a whole trace at a microsecond a column
    costs what its events do. Colours are merged one by one (nested CPU ops count once); where two colours
    overlap in a column their shares are added, capped at 100%.
    """
    empty = {k: np.zeros(0, dtype=np.int64) for k in ("x", "n", "c", "f")}
    if not (start.shape == end.shape == colour.shape):
        raise ArgumentError(f"column_runs(): start, end and colour hold {start.size}, {end.size} and {colour.size} values: "
                            "give one of each per event")
    if ncols > MAX_COLUMNS:  # a column index must fit 64 bits with room for the arithmetic
        raise ArgumentError(f"column_runs(): ncols={ncols}: give at most {MAX_COLUMNS:,} columns")
    if start.size == 0 or ncols <= 0 or not px > 0:
        return empty
    if ncols <= DENSE_COLUMNS:
        return _dense_column_runs(start, end, colour, t0, px, ncols)
    lo, hi = t0, t0 + ncols * px
    full_x, full_n, full_c = [], [], []
    part_col, part_c, part_amt = [], [], []
    for c in np.unique(colour[colour >= 0]).tolist():
        s, e = m.merge_intervals(start[colour == c], end[colour == c])
        s, e = np.clip(s, lo, hi), np.clip(e, lo, hi)
        keep = e > s
        xs, xe = (s[keep] - t0) / px, (e[keep] - t0) / px
        a = np.minimum(np.floor(xs).astype(np.int64), ncols - 1)
        b = np.minimum(np.maximum(np.ceil(xe).astype(np.int64) - 1, a), ncols - 1)
        one = a == b
        # each interval's first and last pixel, in interval order: already sorted (the union is disjoint)
        cols = np.empty(2 * a.size, dtype=np.int64)
        amt = np.empty(2 * a.size)
        cols[0::2], cols[1::2] = a, b
        amt[0::2] = np.where(one, xe - xs, a + 1 - xs)
        amt[1::2] = np.where(one, 0.0, xe - b)
        real = np.ones(cols.size, dtype=bool)
        real[1::2] = ~one
        cols, amt = cols[real], amt[real]
        if cols.size:
            first = np.flatnonzero(np.r_[True, cols[1:] != cols[:-1]])
            part_col.append(cols[first])
            part_amt.append(np.add.reduceat(amt, first))
            part_c.append(np.full(first.size, c, dtype=np.int64))
        inner = ~one & (b - a >= 2)
        full_x.append(a[inner] + 1)
        full_n.append(b[inner] - a[inner] - 1)
        full_c.append(np.full(int(inner.sum()), c, dtype=np.int64))
    if not part_c:
        return empty
    fx, fn, fc = np.concatenate(full_x), np.concatenate(full_n), np.concatenate(full_c)
    if len(part_c) == 1:  # one colour (most lanes): its pixels are sorted and distinct already
        cols, total, colour_of = part_col[0], part_amt[0], part_c[0]
    else:  # a pixel's share: what all colours cover of it; its colour: the one covering most of it
        pc, pcol, pamt = np.concatenate(part_c), np.concatenate(part_col), np.concatenate(part_amt)
        order = np.lexsort((-pamt, pcol))
        pc, pcol, pamt = pc[order], pcol[order], pamt[order]
        first = np.flatnonzero(np.r_[True, pcol[1:] != pcol[:-1]])
        cols, total, colour_of = pcol[first], np.add.reduceat(pamt, first), pc[first]
    pct = np.clip(np.round(total * 100), 1, 100).astype(np.int64)
    # a partial column inside another colour's full run is drawn by that run
    if fx.size:
        fo = np.argsort(fx, kind="stable")
        run_start, run_end = fx[fo], fx[fo] + fn[fo]
        k = np.searchsorted(run_start, cols, side="right") - 1
        inside = (k >= 0) & (cols < run_end[np.clip(k, 0, None)])
        cols, colour_of, pct = cols[~inside], colour_of[~inside], pct[~inside]
    x = np.r_[fx, cols]
    n = np.r_[fn, np.ones(cols.size, dtype=np.int64)]
    c = np.r_[fc, colour_of]
    f = np.r_[np.full(fx.size, 100, dtype=np.int64), pct]
    o = np.argsort(x, kind="stable")
    x, n, c, f = x[o], n[o], c[o], f[o]
    # merge runs that touch and look the same
    same = np.r_[False, (x[1:] == x[:-1] + n[:-1]) & (c[1:] == c[:-1]) & (f[1:] == f[:-1])]
    group = np.cumsum(~same) - 1
    starts = np.flatnonzero(~same)
    return {"x": x[starts], "n": np.bincount(group, weights=n).astype(np.int64), "c": c[starts], "f": f[starts]}


def _dense_column_runs(start: np.ndarray, end: np.ndarray, colour: np.ndarray, t0: float, px: float,
                       ncols: int) -> dict[str, np.ndarray]:
    """:func:`column_runs` for a view of few columns: each colour's union covered up to every column edge (prefix
    sums, one bisection per edge), so the cost is the events' once and the columns' log(events)."""
    edges = t0 + px * np.arange(ncols + 1)
    per, keys = [], []
    for c in np.unique(colour[colour >= 0]).tolist():
        us, ue = m.merge_intervals(start[colour == c], end[colour == c])
        per.append(np.diff(m.covered_before(us, ue, edges)) / px)
        keys.append(c)
    if not per:
        return {k: np.zeros(0, dtype=np.int64) for k in ("x", "n", "c", "f")}
    share = np.vstack(per)
    total = np.clip(share.sum(axis=0), 0.0, 1.0)
    best = np.asarray(keys, dtype=np.int64)[np.argmax(share, axis=0)]
    cols = np.flatnonzero(total > 1e-9)
    if cols.size == 0:  # the lane's events all lie outside the view: nothing to draw (np.r_[False] below would index 0)
        return {k: np.zeros(0, dtype=np.int64) for k in ("x", "n", "c", "f")}
    pct = np.clip(np.round(total[cols] * 100), 1, 100).astype(np.int64)
    c = best[cols]
    same = np.r_[False, (cols[1:] == cols[:-1] + 1) & (c[1:] == c[:-1]) & (pct[1:] == pct[:-1])]
    first = np.flatnonzero(~same)
    n = np.diff(np.r_[first, cols.size])
    return {"x": cols[first].astype(np.int64), "n": n.astype(np.int64), "c": c[first], "f": pct[first]}


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0)


def _where(ev, row: int) -> str:
    device = int(ev["device"].iat[row])
    return f"GPU {device}, stream {int(ev['stream'].iat[row])}" if device >= 0 else f"thread {int(ev['tid'].iat[row])}"


class Lanes:
    """The lanes of a trace, indexed once for fast range queries (what the widget asks on every zoom)."""

    def __init__(self, trace: Trace, ranks: Sequence[int] | None = None, max_lanes: int = 24):
        ev = trace.events
        self.trace = trace
        # The rows the lanes index are this table's: a snapshot (copy-on-write keeps it as it is now, cheaply), so a
        # hover, search or selection after the user edits trace.events in place reads the events the view drew,
        # never other rows (or none) at the same positions.
        self.events = ev = ev.copy(deep=False)
        self._stamp = stamp(trace)
        self._stamp_metadata = dict(trace.metadata)
        self._snapshot: Trace | None = None
        self.origin_us = time_origin_us(trace)
        self.origin_text = time_origin_text(trace)
        t0 = float(ev["start_us"].min()) if not ev.empty else 0.0
        t1 = float(ev["end_us"].max()) if not ev.empty else 1.0
        self.full_us = (t0, t1)
        order, on_lanes = _lanes_in(trace, t0, t1, ranks)
        self.lanes_left_out = max(len(order) - max_lanes, 0)
        if len(order) > max_lanes:  # the same choice as plots.timeline: GPU, range and API lanes first
            keep = sorted(order, key=lambda rl: (not rl[1].startswith(("GPU", "ranges", "CUDA")), -len(on_lanes[rl])))
            order = [rl for rl in order if rl in set(keep[:max_lanes])]
        code, names = _colour_keys(ev)
        self.colour_names = names + ["range"]
        self.colours = [COPY_COLORS.get(k, KIND_COLORS.get(k, "#999999")) for k in names]
        phase: dict[str, int] = {}  # range colours are appended after the kind colours
        start_all, end_all = ev["start_us"].to_numpy(), ev["end_us"].to_numpy()
        self.multi_rank = len({r for r, _ in order}) > 1
        self.labels = [_lane_label(ln, r, self.multi_rank) for r, ln in order]
        self.lanes: list[_Lane] = []
        names_all = ev["name"].to_numpy(dtype=object)
        for rank, lane in order:
            rows = on_lanes[(rank, lane)]
            if lane.startswith("ranges"):
                s, e = start_all[rows], end_all[rows]
                o = np.lexsort((-(e - s), s))
                rows = rows[o]
                colour = []
                for name in names_all[rows].tolist():
                    c = _phase_color(str(name))
                    if c not in phase:
                        phase[c] = len(self.colours)
                        self.colours.append(c)
                    colour.append(phase[c])
                colour = np.array(colour, dtype=np.int64)
                depth = _range_depths(start_all[rows], end_all[rows])
            else:
                rows = rows[np.argsort(start_all[rows], kind="stable")]
                colour = code[rows]
                depth = np.zeros(rows.size, dtype=np.int64)
            s, e = start_all[rows], end_all[rows]
            self.lanes.append(_Lane(rank, lane, rows, s, e, np.maximum.accumulate(e) if e.size else e, colour, depth))
        self.lane_of_row = np.full(len(ev), -1, dtype=np.int64)
        self.depth_of_row = np.zeros(len(ev), dtype=np.int64)  # a range's nesting (its row on the lane)
        for i, lane in enumerate(self.lanes):
            self.lane_of_row[lane.rows] = i
            if lane.is_ranges:
                self.depth_of_row[lane.rows] = lane.depth
        self._by_correlation: tuple[np.ndarray, np.ndarray] | None = None

    # --- what the front end lays out ------------------------------------------------------------------
    def lane_info(self) -> list[dict[str, Any]]:
        """Each lane's label, what it holds and its rank (the front end groups and sizes lanes by them)."""
        return [{"label": lab, "kind": ln.kind, "rank": int(ln.rank),
                 "depth": int(min(ln.depth.max(), MAX_RANGE_DEPTH)) if ln.is_ranges and ln.depth.size else 0}
                for lab, ln in zip(self.labels, self.lanes)]

    def legend(self) -> list[list[str]]:
        """The kinds drawn, with their colours."""
        shown = sorted({self.colour_names[c] for ln in self.lanes if not ln.is_ranges
                        for c in np.unique(ln.colour[ln.colour >= 0]).tolist()})
        return [[k, COPY_COLORS.get(k, KIND_COLORS.get(k, "#999999"))] for k in shown]

    def drawn(self) -> Trace:
        """The trace as the view drew it: the trace itself while unchanged, else a trace of the snapshot."""
        if stamp(self.trace) == self._stamp:
            return self.trace
        if self._snapshot is None:
            t = self.trace
            self._snapshot = Trace(self.events, t.source, t.format, dict(self._stamp_metadata))
        return self._snapshot

    def phase_legend(self) -> list[list[str]]:
        """The range colours drawn, with what they stand for (forward, backward, ...)."""
        names = self.events["name"].to_numpy(dtype=object)
        return phase_legend(str(n) for ln in self.lanes if ln.is_ranges for n in set(names[ln.rows].tolist()))

    def to_ms(self, us: np.ndarray | float) -> Any:
        return (np.asarray(us) - self.origin_us) / 1e3

    def to_us(self, ms: float) -> float:
        return self.origin_us + float(ms) * 1e3

    def bins(self, t0_ms: float, t1_ms: float, width_px: int) -> list[dict[str, list]]:
        """Per lane, what a ``width_px``-wide view of ``[t0_ms, t1_ms)`` draws.

        Range lanes: their ranges (``x0, x1`` in ms, colour ``c``, depth ``d``, name ``n``), those narrower
        than a pixel or nested deeper than :data:`MAX_RANGE_DEPTH` left out, as on the static figure. Other
        lanes: pixel columns (:func:`column_runs`: first column ``x``, count ``n``, colour ``c``, busy
        percent ``f``), column 0 starting at ``t0_ms``.
        """
        t0, t1 = self.to_us(t0_ms), self.to_us(t1_ms)
        width = max(int(width_px), 1)
        px = max(t1 - t0, 1e-6) / width
        name = self.events["name"].to_numpy(dtype=object)
        out = []
        for lane in self.lanes:
            pos = lane.overlapping(t0, t1)
            if lane.is_ranges:
                pos = pos[(lane.depth[pos] <= MAX_RANGE_DEPTH) & (lane.end[pos] - lane.start[pos] >= px)]
                out.append({"x0": np.round(self.to_ms(lane.start[pos]), 6).tolist(),
                            "x1": np.round(self.to_ms(lane.end[pos]), 6).tolist(),
                            "c": lane.colour[pos].tolist(), "d": lane.depth[pos].tolist(),
                            "n": [str(v) for v in name[lane.rows[pos]]]})
                continue
            runs = column_runs(lane.start[pos], lane.end[pos], lane.colour[pos], t0, px, width)
            out.append({k: v.tolist() for k, v in runs.items()})
        return out

    def event_at(self, lane_index: int, t_ms: float, tolerance_ms: float = 0.0) -> int | None:
        """Row (into ``trace.events``) of the event on a lane at ``t_ms``: the shortest one that covers it,
        else the nearest within ``tolerance_ms``; None when there is none."""
        if not 0 <= lane_index < len(self.lanes):
            return None
        lane = self.lanes[lane_index]
        t, tol = self.to_us(t_ms), max(float(tolerance_ms), 0.0) * 1e3
        pos = lane.overlapping(t - tol, t + tol)
        if lane.is_ranges:
            pos = pos[lane.depth[pos] <= MAX_RANGE_DEPTH]
        if pos.size == 0:
            return None
        s, e = lane.start[pos], lane.end[pos]
        distance = np.maximum(np.maximum(s - t, t - e), 0.0)
        best = np.lexsort((e - s, distance))[0]  # nearest first, then the shortest (the innermost range)
        return int(lane.rows[pos[best]])

    def linked(self, row: int) -> list[int]:
        """Rows linked to ``row`` by its correlation id: a launch call's GPU work, or a kernel's launch call."""
        ev = self.events
        corr = int(ev["correlation"].iat[row])
        if corr < 0:
            return []
        if self._by_correlation is None:
            c = ev["correlation"].to_numpy()
            order = np.argsort(c, kind="stable")
            self._by_correlation = (c[order], order)
        values, order = self._by_correlation
        lo, hi = np.searchsorted(values, corr, side="left"), np.searchsorted(values, corr, side="right")
        rank = ev["rank"].to_numpy()
        on_gpu = ev["device"].iat[row] >= 0
        return [int(r) for r in order[lo:hi] if r != row and rank[r] == rank[row] and (ev["device"].iat[r] >= 0) != on_gpu]

    def _brief(self, row: int) -> dict[str, Any]:
        ev = self.events
        return {"name": str(ev["name"].iat[row]), "kind": str(ev["kind"].iat[row]), "row": int(row),
                "lane": int(self.lane_of_row[row]), "start_ms": float(self.to_ms(ev["start_us"].iat[row])),
                "end_ms": float(self.to_ms(ev["end_us"].iat[row])), "dur_us": float(ev["dur_us"].iat[row]),
                "where": _where(ev, row), "depth": int(self.depth_of_row[row])}

    def describe(self, row: int) -> dict[str, Any]:
        """What a tooltip or the pinned panel shows of one event: name, kind, start, end and duration, where it
        ran, its lane, step and rank, bytes of a copy, and what it links to (with their lanes, for the arrows)."""
        ev = self.events
        info = self._brief(row)
        info["rank"] = int(ev["rank"].iat[row])
        info["step"] = int(ev["step"].iat[row])
        if info["kind"] == "memcpy":
            info["copy"] = f"{ev['copy_kind'].iat[row]} {ev['host_memory'].iat[row]}".strip()
        nbytes = float(ev["bytes"].iat[row])
        if np.isfinite(nbytes):
            info["bytes"] = nbytes
        if int(ev["correlation"].iat[row]) >= 0:
            info["correlation"] = int(ev["correlation"].iat[row])
        links = [self._brief(k) for k in self.linked(row)[:8]]
        if links:
            info["link"] = "launched by" if int(ev["device"].iat[row]) >= 0 else "launched"
            info["links"] = links
        return info

    def search(self, query: str, limit: int = SEARCH_LIMIT) -> dict[str, Any]:
        """Events on the drawn lanes whose name contains ``query`` (case-insensitive; ``/regex/`` for a regular
        expression), in time order: ``total``, ``names`` (distinct names matched) and up to ``limit`` matches
        as ``[lane, start_ms, end_ms, row]``. An empty or invalid query matches nothing (``error`` says why)."""
        query = query.strip()
        if not query:
            return {"total": 0, "names": 0, "matches": []}
        regex = len(query) > 2 and query.startswith("/") and query.endswith("/")
        if regex:
            if len(query) > MAX_STEP_PATTERN_CHARS:
                return {"total": 0, "names": 0, "matches": [], "error": f"a pattern of {len(query):,} characters: "
                        f"over {MAX_STEP_PATTERN_CHARS:,}"}
            try:
                re.compile(query[1:-1], re.IGNORECASE)
            except (re.error, RecursionError, OverflowError, ValueError) as exc:
                return {"total": 0, "names": 0, "matches": [], "error": f"not a regular expression: {exc}"}
        ev = self.events
        drawn = np.flatnonzero(self.lane_of_row >= 0)
        names = ev["name"].to_numpy(dtype=object)[drawn]
        uniq, inv = np.unique(names.astype(str), return_inverse=True)
        if regex:  # a user's pattern can backtrack for hours on a long name: matched in a child under a time limit
            try:
                hit = np.array(search_bounded(query[1:-1], list(uniq), re.IGNORECASE, SEARCH_TIMEOUT_S), dtype=bool)
            except subprocess.TimeoutExpired:
                return {"total": 0, "names": 0, "matches": [], "error": f"the pattern did not finish within "
                        f"{SEARCH_TIMEOUT_S:g} s on these names and was stopped; write a simpler one (no nested repeats)"}
        else:
            literal = re.compile(re.escape(query), re.IGNORECASE)  # linear in the name
            hit = np.array([bool(literal.search(u)) for u in uniq], dtype=bool)
        rows = drawn[hit[inv]]
        start = ev["start_us"].to_numpy()[rows]
        rows = rows[np.argsort(start, kind="stable")]
        shown = rows[:limit]
        s, e = ev["start_us"].to_numpy()[shown], ev["end_us"].to_numpy()[shown]
        matches = [[int(ln), float(a), float(b), int(r)] for ln, a, b, r in
                   zip(self.lane_of_row[shown], np.round(self.to_ms(s), 6), np.round(self.to_ms(e), 6), shown)]
        return {"total": int(rows.size), "names": int(hit.sum()), "matches": matches}

    def figures(self, t0_ms: float, t1_ms: float) -> dict[str, Any]:
        """:func:`helpers.metrics.window_stats` of the stretch, with its window in ms on the trace's axis."""
        stats = m.window_stats(self.drawn(), self.to_us(t0_ms), self.to_us(t1_ms))
        stats["window_ms"] = [float(t0_ms), float(t1_ms)]
        return stats


def figures_lines(f: dict[str, Any], causes: bool = True) -> list[str]:
    """A selected stretch's figures as short lines (what the widget's panel prints); ``causes=False`` leaves
    out what the host was doing while the GPU idled (a lab's view before the learner's own reading)."""
    missing = [k for k in ("window_ms", "has_gpu") if k not in f]
    if missing:
        raise ArgumentError(f"figures_lines(): the figures have no {missing[0]!r}: give what Lanes.figures(t0_ms, t1_ms) "
                            "returns")
    a, b = f["window_ms"]
    lines = [f"{a:.3f}-{b:.3f} ms ({(b - a):.3f} ms)"]
    if f["has_gpu"]:
        lines.append(f"GPU busy {f['gpu_busy_share']:.0%} ({f['gpu_busy_us'] / 1e3:.3f} ms)")
        idle = {k: v for k, v in f.get("idle_by_cause_us", {}).items() if v > 0}
        words = {c.name: c.host_was for c in CAUSES if c.idle}  # the catalogue's words for each idle cause
        if idle and causes:
            lines.append("GPU idle while the host was: " + ", ".join(f"{words.get(k, k)} {v / 1e3:.3f} ms" for k, v in idle.items()))
        lines.append(f"kernels {f['kernels']} ({f['kernel_us'] / 1e3:.3f} ms)")
    copies = ", ".join(f"{d} {c['count']} ({c['time_us'] / 1e3:.3f} ms)" for d, c in f["copies"].items())
    lines.append("copies " + (copies or "none"))
    lines.append(f"syncs {f['syncs']} (host blocked {f['sync_blocked_us'] / 1e3:.3f} ms)")
    if f["collectives"]:
        lines.append(f"collectives {f['collectives']}")
    return lines


def _png(trace: Trace, lanes: Lanes, window_ms: tuple[float, float], title: str) -> str:
    """The static figure of the same view, base64 PNG: what shows where no widget front end runs."""
    import matplotlib.pyplot as plt

    fig = timeline(trace, window_ms=window_ms, ranks=sorted({ln.rank for ln in lanes.lanes}) or None, title=title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _widget_class():
    try:
        import anywidget
        import traitlets as t
    except ImportError as exc:  # a machine without the course's requirements: one line, not an import traceback
        raise TraceError(f"the interactive explorer needs {exc.name or 'anywidget'}, which this Python lacks: pip install "
                         "-r requirements.txt (or pip install anywidget); plots.timeline draws the same view as a "
                         "static figure") from None

    class Explorer(anywidget.AnyWidget):
        """The interactive timeline. ``window_ms`` is the selected stretch (else the visible range),
        ready for ``checks.Reading(window_ms=view.window_ms, ...)``; ``figures`` its figures."""

        _esm = STATIC / "explore.js"
        _css = STATIC / "explore.css"
        title = t.Unicode("").tag(sync=True)
        origin = t.Unicode("").tag(sync=True)  # what time 0 is, named on the axis
        labels = t.List(t.Unicode()).tag(sync=True)
        lane_info = t.List().tag(sync=True)
        colours = t.List(t.Unicode()).tag(sync=True)
        legend = t.List().tag(sync=True)
        phases = t.List().tag(sync=True)
        overlays = t.List().tag(sync=True)  # extra tracks drawn from data: [{name, x0, x1, c, label}]
        full_ms = t.List(t.Float()).tag(sync=True)
        view_ms = t.List(t.Float()).tag(sync=True)
        width_px = t.Int(FIGURE_WIDTH_PX - 200).tag(sync=True)
        bins = t.Dict().tag(sync=True)
        probe = t.Dict().tag(sync=True)
        hover_info = t.Dict().tag(sync=True)  # not "tooltip": DOMWidget has a trait of that name
        pin = t.Dict().tag(sync=True)  # {row} or {lane, t, tol}, and seq: the event to pin
        pinned = t.Dict().tag(sync=True)
        search_query = t.Dict().tag(sync=True)  # {q, seq}
        search_result = t.Dict().tag(sync=True)
        selection_ms = t.List(t.Float()).tag(sync=True)
        figures = t.Dict().tag(sync=True)
        figure_lines = t.List(t.Unicode()).tag(sync=True)

        def __init__(self, lanes: Lanes, view_ms: tuple[float, float], title: str, fallback: bool = True,
                     causes: bool = True, overlays: Sequence[dict] = ()):
            self._lanes = lanes
            self._fallback = fallback
            self._causes = causes
            full = [float(lanes.to_ms(lanes.full_us[0])), float(lanes.to_ms(lanes.full_us[1]))]
            super().__init__(title=title, origin=lanes.origin_text, labels=lanes.labels, lane_info=lanes.lane_info(),
                             colours=lanes.colours, full_ms=full, legend=lanes.legend(), phases=lanes.phase_legend(),
                             overlays=list(overlays))
            self.observe(self._on_view, names=["view_ms", "width_px"])
            self.observe(self._on_probe, names=["probe"])
            self.observe(self._on_pin, names=["pin"])
            self.observe(self._on_search, names=["search_query"])
            self.observe(self._on_selection, names=["selection_ms"])
            self.view_ms = [float(view_ms[0]), float(view_ms[1])]

        # Python side of the round trips -------------------------------------------------------
        def _on_view(self, _change=None) -> None:
            a, b = self.view_ms
            self.bins = {"view": [a, b], "width": self.width_px, "lanes": self._lanes.bins(a, b, self.width_px)}

        def _row_of(self, p: dict) -> int | None:
            if "row" in p:
                row = int(p["row"])
                return row if 0 <= row < len(self._lanes.lane_of_row) and self._lanes.lane_of_row[row] >= 0 else None
            return self._lanes.event_at(int(p.get("lane", -1)), float(p.get("t", 0.0)), float(p.get("tol", 0.0)))

        def _on_probe(self, change) -> None:
            p = change["new"] or {}
            row = self._row_of(p)
            self.hover_info = {"seq": p.get("seq", 0), **(self._lanes.describe(row) if row is not None else {})}

        def _on_pin(self, change) -> None:
            p = change["new"] or {}
            row = self._row_of(p) if p else None
            self.pinned = {"seq": p.get("seq", 0), **(self._lanes.describe(row) if row is not None else {})}

        def _on_search(self, change) -> None:
            q = change["new"] or {}
            self.search_result = {"seq": q.get("seq", 0), "q": q.get("q", ""), **self._lanes.search(str(q.get("q", "")))}

        def _on_selection(self, change) -> None:
            sel = change["new"]
            if len(sel) == 2 and sel[1] > sel[0]:
                figures = self._lanes.figures(sel[0], sel[1])
                if not self._causes:  # not even in view.figures: what is hidden from the panel stays hidden
                    figures = {k: v for k, v in figures.items() if k != "idle_by_cause_us"}
                self.figures = figures
                self.figure_lines = figures_lines(figures, self._causes)
            else:
                self.figures, self.figure_lines = {}, []

        # what the learner reads --------------------------------------------------------------
        @property
        def window_ms(self) -> tuple[float, float]:
            """The selected stretch (shift-drag), else the visible range: ms on the timeline's axis, 2 decimals."""
            a, b = self.selection_ms if len(self.selection_ms) == 2 else self.view_ms
            return round(a, 2), round(b, 2)

        def select(self, start_ms: float, end_ms: float) -> None:
            """Select a stretch from Python (as a shift-drag would)."""
            self.selection_ms = [float(start_ms), float(end_ms)]

        def zoom(self, start_ms: float, end_ms: float) -> None:
            """Show ``[start_ms, end_ms)`` (as Ctrl-wheel, W/S and drag would)."""
            self.view_ms = [float(start_ms), float(end_ms)]

        def find(self, query: str) -> dict[str, Any]:
            """Search by name, as the search box does: the matches (see :meth:`Lanes.search`)."""
            self.search_query = {"q": str(query), "seq": int(self.search_query.get("seq", 0)) + 1}
            return self.search_result

        def __repr__(self) -> str:
            a, b = self.view_ms
            return f"explore({self.title}: {a:.1f}-{b:.1f} ms, {len(self.labels)} lanes)"

        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs)
            data, meta = bundle if isinstance(bundle, tuple) else (bundle or {}, {})
            data = dict(data)
            data["text/plain"] = repr(self)  # deterministic: no model id, no trait dump
            if self._fallback:
                data["image/png"] = _png(self._lanes.drawn(), self._lanes, tuple(self.view_ms), self.title)
            return data, meta

    return Explorer


_EXPLORER = None


def explore(trace: Trace, window_ms: tuple[float, float] | None = None, step: int | None = None,
            ranks: Sequence[int] | None = None, title: str | None = None, fallback: bool = True, causes: bool = True,
            overlays: Sequence[dict] = (), critical_path: bool = False):
    """An interactive timeline of ``trace``: Ctrl/Cmd-wheel or W/S to zoom, drag or A/D to pan, shift-drag to
    select, hover for an event's details and click to pin them, search by name; double-click shows the whole
    trace again. A plain wheel scrolls the page.

    ``window_ms`` (on the same axis as :func:`helpers.plots.timeline`) or ``step`` picks the first view.
    ``fallback`` adds the static figure to the display data, for where no widget front end runs.
    ``causes=False`` leaves out of a selection's figures what the host was doing while the GPU idled: the
    labs' views before a reading, where naming the cause would answer the exercise.
    ``overlays``: tracks drawn above the lanes, each ``{"name", "x0", "x1", "c", "label"}`` (ms on the
    timeline's axis, a colour per stretch, a label per stretch); ``critical_path=True`` adds the critical path's
    track (:func:`helpers.critical.critical_path`: each stretch of the steps by the one thing it waited on), which
    names causes, so the labs leave it off before a reading.
    The returned widget's ``window_ms`` is the selected stretch (else the visible range).
    """
    global _EXPLORER
    if _EXPLORER is None:
        _EXPLORER = _widget_class()
    trace = m.stepped(trace)  # its steps, and so its axis, are those diagnose reports on
    lanes = Lanes(trace, ranks)
    if window_ms is None:
        if step is not None:
            win = m.windows(trace)
            row = win[win["step"] == step]
            if row.empty:
                raise ArgumentError(f"step {step} is not in the trace (steps: {sorted(set(win['step']))})")
            window_ms = (float(lanes.to_ms(row["start_us"].min())), float(lanes.to_ms(row["end_us"].max())))
        else:
            window_ms = (float(lanes.to_ms(lanes.full_us[0])), float(lanes.to_ms(lanes.full_us[1])))
    if critical_path:
        from .tracks import critical_path_overlay

        track = critical_path_overlay(trace)
        overlays = [*overlays, track] if track else list(overlays)
    return _EXPLORER(lanes, window_ms, title if title is not None else trace_name(trace), fallback, causes, overlays)


__all__ = ["Lanes", "column_runs", "explore", "figures_lines"]

# The public functions hold their arguments to their type hints (explore(t, window_ms=pd.NA) is one TraceError line).
from .arguments import check_namespace as _check_namespace  # noqa: E402

_check_namespace(globals(), __all__)
