"""An interactive timeline for JupyterLab and Notebook 7: zoom, pan, hover and select a stretch.

Built on anywidget: the front end is one ES module (``static/explore.js``) shipped with the package,
so nothing is fetched from a CDN, and the traitlets it syncs are the whole protocol. The lanes,
colours and time origin are :mod:`helpers.plots`'s, so a window read here is the same stretch on
``plots.timeline(trace, window_ms=...)`` and in a ``checks.Reading``.

Level of detail: the browser never holds the events table. For the visible range Python sends each
lane's bars merged to what a pixel can show (``lane_bins``); a zoom asks again (the ``view_ms``
traitlet), so a 2M-event trace costs a few thousand bars per draw. Hover and selection are round
trips too: Python answers with the event under the pointer (``event_at``) and the selected stretch's
figures (:func:`helpers.metrics.window_stats`).

Where no widget front end runs (nbval, CI, an exported notebook) the cell shows the static
``plots.timeline`` figure instead: it is part of the widget's display data.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import metrics as m
from .lanes import (
    COPY_COLORS,
    FIGURE_WIDTH_PX,
    KIND_COLORS,
    _colour_keys,
    _lane_label,
    _lanes_in,
    _phase_color,
    time_origin_us,
    timeline,
    trace_name,
)
from .model import Trace

STATIC = Path(__file__).parent / "static"
#: Range nesting drawn (deeper ranges are inside a phase: noise at timeline scale, as in plots.timeline).
MAX_RANGE_DEPTH = 2
#: Hover tolerance in pixels either side of the pointer: a 1-px kernel is still hittable.
HOVER_PX = 3


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


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0)


class Lanes:
    """The lanes of a trace, indexed once for fast range queries (what the widget asks on every zoom)."""

    def __init__(self, trace: Trace, ranks: Sequence[int] | None = None, max_lanes: int = 24):
        ev = trace.events
        self.trace = trace
        self.origin_us = time_origin_us(trace)
        t0 = float(ev["start_us"].min()) if not ev.empty else 0.0
        t1 = float(ev["end_us"].max()) if not ev.empty else 1.0
        self.full_us = (t0, t1)
        order, on_lanes = _lanes_in(trace, t0, t1, ranks)
        if len(order) > max_lanes:  # the same choice as plots.timeline: GPU, range and API lanes first
            keep = sorted(order, key=lambda rl: (not rl[1].startswith(("GPU", "ranges", "CUDA")), -len(on_lanes[rl])))
            order = [rl for rl in order if rl in set(keep[:max_lanes])]
        code, names = _colour_keys(ev)
        self.colour_names = names + ["range"]
        self.colours = [COPY_COLORS.get(k, KIND_COLORS.get(k, "#999999")) for k in names]
        phase: dict[str, int] = {}  # range colours are appended after the kind colours
        start_all, end_all = ev["start_us"].to_numpy(), ev["end_us"].to_numpy()
        multi = len({r for r, _ in order}) > 1
        self.labels = [_lane_label(ln, r, multi) for r, ln in order]
        self.lanes: list[_Lane] = []
        for rank, lane in order:
            rows = on_lanes[(rank, lane)]
            if lane.startswith("ranges"):
                s, e = start_all[rows], end_all[rows]
                o = np.lexsort((-(e - s), s))
                rows = rows[o]
                colour = []
                for name in ev["name"].to_numpy(dtype=object)[rows].tolist():
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
        self._by_correlation: tuple[np.ndarray, np.ndarray] | None = None

    def to_ms(self, us: np.ndarray | float) -> Any:
        return (np.asarray(us) - self.origin_us) / 1e3

    def to_us(self, ms: float) -> float:
        return self.origin_us + float(ms) * 1e3

    def bins(self, t0_ms: float, t1_ms: float, width_px: int) -> list[dict[str, list]]:
        """Per lane, the bars a ``width_px``-wide view of ``[t0_ms, t1_ms)`` can show.

        Bars of one colour closer than a pixel merge into one (a lane is then at most about
        ``width_px`` bars per colour); ranges narrower than a pixel or nested deeper than
        :data:`MAX_RANGE_DEPTH` are left out, as on the static figure. Times are ms on the trace's axis.
        """
        t0, t1 = self.to_us(t0_ms), self.to_us(t1_ms)
        px = max(t1 - t0, 1e-6) / max(int(width_px), 1)
        name = self.trace.events["name"].to_numpy(dtype=object)
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
            x0, x1, cs = [], [], []
            codes = lane.colour[pos]
            for c in np.unique(codes[codes >= 0]).tolist():
                of = pos[codes == c]
                s, e = m.merge_intervals(lane.start[of], lane.end[of] + px)
                e = np.maximum(e - px, s)  # undo the pixel added to bridge: a bar ends where its last event does
                x0.append(s)
                x1.append(e)
                cs.append(np.full(s.size, c))
            out.append({"x0": np.round(self.to_ms(_cat(x0)), 6).tolist(), "x1": np.round(self.to_ms(_cat(x1)), 6).tolist(),
                        "c": _cat(cs).astype(np.int64).tolist()})
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
        ev = self.trace.events
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

    def describe(self, row: int) -> dict[str, Any]:
        """What a tooltip shows of one event: name, kind, start and duration (ms), where it ran, what it links to."""
        ev = self.trace.events
        r = ev.iloc[row]
        device = int(r["device"])
        where = (f"GPU {device}, stream {int(r['stream'])}" if device >= 0 else f"thread {int(r['tid'])}")
        info: dict[str, Any] = {"name": str(r["name"]), "kind": str(r["kind"]), "start_ms": float(self.to_ms(r["start_us"])),
                                "dur_us": float(r["dur_us"]), "where": where, "rank": int(r["rank"]), "row": int(row)}
        if r["kind"] == "memcpy":
            info["copy"] = f"{r['copy_kind']} {r['host_memory']}".strip()
        links = []
        for k in self.linked(row)[:4]:
            o = ev.iloc[k]
            dev = int(o["device"])
            links.append({"name": str(o["name"]), "kind": str(o["kind"]), "start_ms": float(self.to_ms(o["start_us"])),
                          "dur_us": float(o["dur_us"]),
                          "where": f"GPU {dev}, stream {int(o['stream'])}" if dev >= 0 else f"thread {int(o['tid'])}"})
        if links:
            info["link"] = "launched by" if device >= 0 else "launched"
            info["links"] = links
        return info

    def figures(self, t0_ms: float, t1_ms: float) -> dict[str, Any]:
        """:func:`helpers.metrics.window_stats` of the stretch, with its window in ms on the trace's axis."""
        stats = m.window_stats(self.trace, self.to_us(t0_ms), self.to_us(t1_ms))
        stats["window_ms"] = [float(t0_ms), float(t1_ms)]
        return stats


def figures_lines(f: dict[str, Any], causes: bool = True) -> list[str]:
    """A selected stretch's figures as short lines (what the widget's panel prints); ``causes=False`` leaves
    out what the host was doing while the GPU idled (a lab's view before the learner's own reading)."""
    a, b = f["window_ms"]
    lines = [f"{a:.3f}-{b:.3f} ms ({(b - a):.3f} ms)"]
    if f["has_gpu"]:
        lines.append(f"GPU busy {f['gpu_busy_share']:.0%} ({f['gpu_busy_us'] / 1e3:.3f} ms)")
        idle = {k: v for k, v in f.get("idle_by_cause_us", {}).items() if v > 0}
        words = {"data_wait": "in the DataLoader", "sync": "just back from a sync", "launch": "launching kernels",
                 "collective": "in a collective", "graph": "replaying a CUDA Graph (gaps between its kernels)",
                 "other": "in other code"}
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
    import anywidget
    import traitlets as t

    class Explorer(anywidget.AnyWidget):
        """The interactive timeline. ``window_ms`` is the selected stretch (else the visible range),
        ready for ``checks.Reading(window_ms=view.window_ms, ...)``; ``figures`` its figures."""

        _esm = STATIC / "explore.js"
        _css = STATIC / "explore.css"
        title = t.Unicode("").tag(sync=True)
        labels = t.List(t.Unicode()).tag(sync=True)
        colours = t.List(t.Unicode()).tag(sync=True)
        legend = t.List().tag(sync=True)
        full_ms = t.List(t.Float()).tag(sync=True)
        view_ms = t.List(t.Float()).tag(sync=True)
        width_px = t.Int(FIGURE_WIDTH_PX - 200).tag(sync=True)
        bins = t.Dict().tag(sync=True)
        probe = t.Dict().tag(sync=True)
        hover_info = t.Dict().tag(sync=True)  # not "tooltip": DOMWidget has a trait of that name
        selection_ms = t.List(t.Float()).tag(sync=True)
        figures = t.Dict().tag(sync=True)
        figure_lines = t.List(t.Unicode()).tag(sync=True)

        def __init__(self, lanes: Lanes, view_ms: tuple[float, float], title: str, fallback: bool = True,
                     causes: bool = True):
            self._lanes = lanes
            self._fallback = fallback
            self._causes = causes
            legend = sorted({lanes.colour_names[c] for ln in lanes.lanes if not ln.is_ranges
                             for c in np.unique(ln.colour[ln.colour >= 0]).tolist()})
            full = [float(lanes.to_ms(lanes.full_us[0])), float(lanes.to_ms(lanes.full_us[1]))]
            super().__init__(title=title, labels=lanes.labels, colours=lanes.colours, full_ms=full,
                             legend=[[k, COPY_COLORS.get(k, KIND_COLORS.get(k, "#999999"))] for k in legend])
            self.observe(self._on_view, names=["view_ms", "width_px"])
            self.observe(self._on_probe, names=["probe"])
            self.observe(self._on_selection, names=["selection_ms"])
            self.view_ms = [float(view_ms[0]), float(view_ms[1])]

        # Python side of the round trips -------------------------------------------------------
        def _on_view(self, _change=None) -> None:
            a, b = self.view_ms
            self.bins = {"view": [a, b], "width": self.width_px, "lanes": self._lanes.bins(a, b, self.width_px)}

        def _on_probe(self, change) -> None:
            p = change["new"] or {}
            row = self._lanes.event_at(int(p.get("lane", -1)), float(p.get("t", 0.0)), float(p.get("tol", 0.0)))
            self.hover_info = {"seq": p.get("seq", 0), **(self._lanes.describe(row) if row is not None else {})}

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
            """Show ``[start_ms, end_ms)`` (as wheel and drag would)."""
            self.view_ms = [float(start_ms), float(end_ms)]

        def __repr__(self) -> str:
            a, b = self.view_ms
            return f"explore({self.title}: {a:.1f}-{b:.1f} ms, {len(self.labels)} lanes)"

        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs)
            data, meta = bundle if isinstance(bundle, tuple) else (bundle or {}, {})
            data = dict(data)
            data["text/plain"] = repr(self)  # deterministic: no model id, no trait dump
            if self._fallback:
                data["image/png"] = _png(self._lanes.trace, self._lanes, tuple(self.view_ms), self.title)
            return data, meta

    return Explorer


_EXPLORER = None


def explore(trace: Trace, window_ms: tuple[float, float] | None = None, step: int | None = None,
            ranks: Sequence[int] | None = None, title: str | None = None, fallback: bool = True, causes: bool = True):
    """An interactive timeline of ``trace``: wheel to zoom, drag to pan, shift-drag to select, hover for an
    event's details; double-click shows the whole trace again.

    ``window_ms`` (on the same axis as :func:`helpers.plots.timeline`) or ``step`` picks the first view.
    ``fallback`` adds the static figure to the display data, for where no widget front end runs.
    ``causes=False`` leaves out of a selection's figures what the host was doing while the GPU idled: the
    labs' views before a reading, where naming the cause would answer the exercise.
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
                raise ValueError(f"step {step} is not in the trace (steps: {sorted(set(win['step']))})")
            window_ms = (float(lanes.to_ms(row["start_us"].min())), float(lanes.to_ms(row["end_us"].max())))
        else:
            window_ms = (float(lanes.to_ms(lanes.full_us[0])), float(lanes.to_ms(lanes.full_us[1])))
    return _EXPLORER(lanes, window_ms, title if title is not None else trace_name(trace), fallback, causes)


__all__ = ["Lanes", "explore", "figures_lines"]
