"""Plots: each function takes a Trace (or results) and returns a matplotlib Figure.

Nothing is shown or saved here; call ``fig.savefig(...)`` or let Jupyter display it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from . import metrics as m
from .errors import ArgumentError
from .explore import explore as _explore  # anywidget itself is imported only when a view is asked for

# The timeline and its lanes live in helpers.lanes (the interactive view builds on them too); re-exported here.
from .lanes import (  # noqa: F401
    COPY_COLORS,
    FIGURE_WIDTH_PX,
    HIDDEN_KINDS,
    KIND_COLORS,
    MIN_BAND_PX,
    PHASE_COLORS,
    RANGE_LABEL,
    _colour_keys,
    _draw_ranges,
    _in_notebook,
    _lane_label,
    _lane_order,
    _lanes_in,
    _phase_color,
    _plt,
    _tidy,
    pick_window,
    time_origin_us,
    timeline,
    trace_name,
)
from .model import Trace
from .patterns import CAUSE
from .patterns import colour as pattern_colour  # noqa: F401  (re-exported)
from .render import change_text


def compare(before: Trace, after: Trace, labels: tuple[str, str] = ("before", "after"), steps: int = 2):
    """Both timelines on one time scale and a table of what changed (each trace's median step, over all its steps).

    Each timeline draws the ``steps`` consecutive steps nearest its median step (:func:`helpers.metrics.typical_steps`),
    not its first ones: a capture's first step is often slower (a 37.6 ms step before two of 33.5 and 34.0 in lab
    02's recorded loop), and a figure of it set beside the table's median showed a difference the steps do not
    have. Each title says which steps are drawn, of how many."""
    for name, tr in (("before", before), ("after", after)):
        if tr.events.empty:
            raise ArgumentError(f"compare(): {name}={tr.source or 'the trace'} has no events to draw (its events table is empty)")
    if steps < 1:
        raise ArgumentError(f"compare(): steps={steps}: give 1 or more")
    plt = _plt()
    before, after = m.stepped(before), m.stepped(after)  # each over its steps (the steady state's, unmarked)
    spans, drawn = [], []
    for tr in (before, after):
        win = m.windows(tr)
        win = win[win["rank"] == tr.ranks[0]]
        chosen = m.typical_steps(tr, steps)
        w = win[win["step"].isin(chosen)] if chosen else win
        spans.append((float(w["start_us"].min()), float(w["end_us"].max())))
        n = int((win["step"] >= 0).sum())
        drawn.append(f"\nstep{'s' if len(chosen) > 1 else ''} {chosen[0]}" + (f"-{chosen[-1]}" if len(chosen) > 1 else "")
                     + f" of {n}: the run nearest the median step" if chosen else "")
    length = max(e - s for s, e in spans)
    table = m.comparison(before, after)
    n_lanes = [len(set(tr.window(*sp).events["lane"])) for tr, sp in zip((before, after), spans)]
    # each timeline's cell: its lanes, and about 2.2 inches of what sits outside its axes (a two-line title, the
    # axis label, the kinds' and the ranges' keys), so a timeline of two lanes keeps its lanes' height
    heights = [0.42 * max(n, 3) + 2.2 for n in n_lanes] + [0.3 * len(table) + 0.6]
    fig = plt.figure(figsize=(FIGURE_WIDTH_PX / 100, sum(heights)), dpi=100)
    grid = fig.add_gridspec(3, 1, height_ratios=heights)
    for i, (tr, (s, _), label, which) in enumerate(zip((before, after), spans, labels, drawn)):
        ax = fig.add_subplot(grid[i])
        timeline(tr, window=(s, s + length), ax=ax, title=f"{label}: {trace_name(tr)}{which}")
    compare_table(fig.add_subplot(grid[2]), table, labels)
    _tidy(fig)
    return fig


def compare_table(ax, table: pd.DataFrame, labels: tuple[str, str] = ("before", "after")):
    """:func:`helpers.metrics.comparison`'s table drawn on ``ax`` (its axes hidden), as under :func:`compare`."""
    if not (hasattr(ax, "axis") and hasattr(ax, "table")):
        raise ArgumentError(f"compare_table(): ax={ax!r:.40}: give a matplotlib Axes to draw on")
    missing = {"metric", "before", "after", "better"} - set(table.columns)
    if missing:
        raise ArgumentError(f"compare_table(): the table has no column {sorted(missing)[0]!r}: give metrics.comparison(before, after)")
    ax.axis("off")
    cells = [[row["metric"], _fmt(row["before"]), _fmt(row["after"]), change_text(row["before"], row["after"], row["better"], row.get("noise"))] for _, row in table.iterrows()]
    tbl = ax.table(cellText=cells, colLabels=["metric", labels[0], labels[1], "change"], loc="center", cellLoc="left")
    tbl.auto_set_font_size(False)
    tbl.set_fontsize(9)
    tbl.auto_set_column_width(list(range(4)))  # each column as wide as its longest text: no clipped metric names
    return tbl


def _fmt(v: float) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "n/a"
    return f"{v:.3g}"


def gap_histogram(trace: Trace, bins: int = 30, by_cause: bool = True):
    """GPU idle gaps by duration (log scale), stacked by what the host was doing.

    ``by_cause=False`` draws the gaps in one colour: the figure to read before any cause is named.
    """
    if not 1 <= bins <= 10_000:
        raise ArgumentError(f"gap_histogram(): bins={bins}: give 1 to 10,000 bins")
    plt = _plt()
    gaps = m.idle_gaps(m.stepped(trace))
    fig, ax = plt.subplots(figsize=(8, 3.5), dpi=100)
    if gaps.empty:
        ax.text(0.5, 0.5, "no GPU idle gaps (or no GPU activity in this trace)", ha="center", transform=ax.transAxes)
        return fig
    edges = np.logspace(np.log10(max(gaps["dur_us"].min(), 0.1)), np.log10(gaps["dur_us"].max() * 1.01), bins)
    if by_cause:
        data = [gaps.loc[gaps["cause"] == c, "dur_us"].to_numpy() for c in m.CAUSES]
        colors = [CAUSE[c].colour for c in m.CAUSES]  # the catalogue's colour of each cause
        ax.hist(data, bins=edges, stacked=True, label=list(m.CAUSES), color=colors, weights=[d / 1e3 for d in data])
    else:
        d = gaps["dur_us"].to_numpy()
        ax.hist(d, bins=edges, color="#999999", weights=d / 1e3)
    ax.set_xscale("log")
    ax.set_xlabel("gap length (µs)")
    ax.set_ylabel("idle time in gaps of this length (ms)")
    if by_cause:
        ax.legend(title="host was", fontsize=8)
    fig.tight_layout()
    return fig


def step_breakdown(trace: Trace, by_cause: bool = True):
    """Stacked bars: where each step's time went.

    ``by_cause=False`` splits each step only into GPU busy and GPU idle (host-only traces: the step as a
    whole): the figure to read before any cause is named.
    """
    plt = _plt()
    table = m.step_breakdown(m.stepped(trace))
    fig, ax = plt.subplots(figsize=(8, 3.5), dpi=100)
    if table.empty:
        ax.text(0.5, 0.5, "no steps found", ha="center", transform=ax.transAxes)
        return fig
    parts = ["gpu_busy_us", "data_wait_us", "sync_us", "launch_us", "collective_us", "graph_us", "other_us"]
    if table["gpu_busy_us"].isna().all():
        parts = ["data_wait_us", "launch_us", "collective_us", "other_us"]
    labels = {"gpu_busy_us": "GPU busy", "data_wait_us": "waiting for data", "sync_us": "after a sync",
              "launch_us": "dispatching / launching" if "gpu_busy_us" in parts else "framework ops",
              "collective_us": "exposed communication", "graph_us": "inside a graph replay", "other_us": "other"}
    x = np.arange(len(table))
    bottom = np.zeros(len(table))
    if not by_cause:  # busy and idle only: what each idle stretch was is the reader's to find
        total = sum(table[p].fillna(0).to_numpy() for p in parts) / 1e3
        busy = table["gpu_busy_us"].fillna(0).to_numpy() / 1e3 if "gpu_busy_us" in parts else np.zeros(len(table))
        series = [("GPU busy", busy), ("GPU idle" if "gpu_busy_us" in parts else "step", total - busy)]
        series = [(lab, v) for lab, v in series if v.any() or lab != "GPU busy"]
    else:
        series = [(labels[p], table[p].fillna(0).to_numpy() / 1e3) for p in parts]
    for label, vals in series:
        ax.bar(x, vals, bottom=bottom, label=label, color="#bbbbbb" if label in ("GPU idle", "step") else None)
        bottom += vals
    ax.set_xticks(x, [f"r{r}·s{s}" if table["rank"].nunique() > 1 else f"step {s}" for r, s in zip(table["rank"], table["step"])],
                  fontsize=8, rotation=45 if len(x) > 8 else 0)
    ax.set_ylabel("ms")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    fig.tight_layout()
    return fig


def explore(trace: Trace, window_ms: tuple[float, float] | None = None, step: int | None = None,
            ranks: Sequence[int] | None = None, title: str | None = None, fallback: bool = True, causes: bool = True,
            overlays: Sequence[dict] = (), critical_path: bool = False):
    """The interactive timeline (zoom, pan, hover, select): see :func:`helpers.explore.explore`.

    Same lanes, colours and time origin as :func:`timeline`; shows :func:`timeline`'s figure where no
    widget front end runs.
    """
    return _explore(trace, window_ms=window_ms, step=step, ranks=ranks, title=title, fallback=fallback, causes=causes,
                    overlays=overlays, critical_path=critical_path)


#: What a notebook reaches as ``plots.<name>``: the figures and the lanes' helpers they share.
__all__ = ["COPY_COLORS", "FIGURE_WIDTH_PX", "KIND_COLORS", "MIN_BAND_PX", "PHASE_COLORS", "compare", "compare_table",
           "explore", "gap_histogram", "pattern_colour", "pick_window", "step_breakdown", "time_origin_us", "timeline",
           "trace_name"]

# Every public function here holds its arguments to its type hints: a pd.NA window is one TraceError line. (Only the
# names above: a helper the figures call inside, change_text with a NaN noise band, is theirs to call as they need.)
from .arguments import check_namespace as _check_namespace  # noqa: E402

_check_namespace(globals())
