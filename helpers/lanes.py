"""The static timeline: lanes like Nsight Systems', their colours and the figure that draws them.

Both the plots (:mod:`helpers.plots`) and the interactive view (:mod:`helpers.explore`) build on it;
nothing is shown or saved here.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd

from . import metrics as m
from .errors import ArgumentError
from .model import Trace
from .paths import printable
from .patterns import colour as pattern_colour


@runtime_checkable
class Finding(Protocol):
    """What the timeline reads of a finding (:class:`helpers.diagnosis.Finding`, not imported: the diagnosis's
    own modules draw figures through this one, and the import graph keeps no cycle)."""

    pattern: str
    window: tuple[float, float] | None


@runtime_checkable
class Locatable(Protocol):
    """A finding that says where its pattern shows (:meth:`helpers.diagnosis.Finding.where`)."""

    def where(self, trace: Trace) -> tuple[np.ndarray, np.ndarray]: ...


KIND_COLORS = {
    "kernel": "#1f77b4", "collective": "#9467bd", "memset": "#7f7f7f", "runtime": "#2ca02c",
    "cpu_op": "#17becf", "sync": "#d62728",
}
COPY_COLORS = {"H2D": "#ff7f0e", "D2H": "#d62728", "D2D": "#8c564b"}
PHASE_COLORS = {"forward": "#4c72b0", "backward": "#c44e52", "optimizer": "#55a868", "data": "#dd8452",
                "logging": "#8172b3", "step": "#bbbbbb"}
# Not drawn: Python frames and GPU shadows of ranges (noise at this scale), sync records (drawn as the
# CUDA calls that made them), and OS runtime calls (a lane per thread, mostly idle waits: a loader's
# poll spans the whole capture; the metrics read them instead).
HIDDEN_KINDS = ("python", "gpu_annotation", "sync", "osrt")
#: Figure width in pixels (100 dpi). JupyterLab's output area measured 975 px in a 1440-px-wide
#: Chromium window (tools/screenshots.py): a figure this wide is shown unscaled there.
FIGURE_WIDTH_PX = 950
#: A finding's band is drawn at least this wide (pixels): a 0.2 ms window on a 300 ms timeline is under
#: one pixel, which reads as no band at all. The band is centred on the window and gets an outline.
MIN_BAND_PX = 6
#: The kinds' legend sits this many inches below the axes: under the tick labels and the axis label.
LEGEND_DROP_IN = 0.5
#: A legend's title and each of its rows of swatches, in inches at font size 9 (the next legend starts below).
LEGEND_TITLE_IN, LEGEND_ROW_IN = 0.25, 0.2
#: The gid of each legend under a timeline (the kinds', the ranges' phases).
LEGEND_GID = "timeline-legend"


def _plt():
    import matplotlib

    if matplotlib.get_backend().lower() == "agg" or not _in_notebook():
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython

        return get_ipython() is not None
    except ImportError:
        return False


def _lane_order(lane: str) -> tuple:
    # Top to bottom as in Nsight Systems: ranges, CPU threads, CUDA API, GPU streams, copies.
    order = [("ranges", 0), ("CPU", 1), ("CUDA API", 2), ("GPU", 3)]
    for prefix, rank in order:
        if lane.startswith(prefix):
            nums = [int(n) for n in re.findall(r"\d+", lane)]
            return (rank, "memcpy" in lane, nums)
    return (9, False, [])


def _lane_label(lane: str, rank: int, multi_rank: bool) -> str:
    label = lane.replace("ranges", "NVTX / ranges, thread")
    label = re.sub(r"^CPU (\d+)", r"CPU thread \1", label)
    label = re.sub(r"^CUDA API (\d+)", r"CUDA API, thread \1", label)
    label = label.replace("memcpy", "MemCopy")
    return f"rank {rank} · {label}" if multi_rank else label


def _phase_color(name: str) -> str:
    low = name.lower()
    for key, color in PHASE_COLORS.items():
        if low.startswith(key) or key in low.split():
            return color
    if low.startswith("profilerstep"):
        return PHASE_COLORS["step"]
    return OTHER_RANGE_COLOR


def pick_window(trace: Trace, window: tuple[float, float] | None = None, step: int | None = None,
                rank: int | None = None) -> tuple[float, float]:
    """The time window to draw: explicit, one step's, or the whole trace (microseconds). Both a window and a step, or
    a window that misses every event, are refused: the step was ignored, and the figure drawn empty, without a word."""
    if window is not None and step is not None:
        raise ArgumentError(f"a window and step {step} given: draw one or the other (the window was drawn and the step "
                            "ignored)")
    if window is not None:
        t0, t1 = float(window[0]), float(window[1])
        if t0 > t1:  # a reversed window: say so, not an inverted axis
            raise ArgumentError(f"the window ({t0:g}, {t1:g}) ends before it starts: give (start, end) with start before end")
        ev = trace.events
        if len(ev):
            lo, hi = float(ev["start_us"].min()), float(ev["end_us"].max())
            if t1 < lo or t0 > hi:
                origin = time_origin_us(trace)
                raise ArgumentError(f"the window {(t0 - origin) / 1e3:g}:{(t1 - origin) / 1e3:g} ms holds no event: the trace "
                                    f"runs from {(lo - origin) / 1e3:g} to {(hi - origin) / 1e3:g} ms on the timeline's axis")
        return t0, t1
    if trace.events.empty:
        raise ArgumentError(f"{trace.source or 'the trace'}: no events to draw (the events table is empty)")
    win = m.windows(m.stepped(trace))
    if rank is not None:
        win = win[win["rank"] == rank]
    if step is not None:
        row = win[win["step"] == step]
        if row.empty:
            raise ArgumentError(f"step {step} is not in the trace (steps: {sorted(set(win['step']))})")
        return float(row["start_us"].min()), float(row["end_us"].max())
    ev = trace.events
    return float(ev["start_us"].min()), float(ev["end_us"].max())


def time_origin_us(trace: Trace) -> float:
    """The timelines' time zero: the first step's start, the steady state's first kept repeat on a trace
    without step markers (the windows ``diagnose`` reports are on the same axis)."""
    return m.time_origin_us(m.stepped(trace))


def time_origin_text(trace: Trace) -> str:
    """What time 0 of :func:`time_origin_us` is, in words, for the axis (a host that runs ahead puts its own work
    at negative times: the reader needs to know which start 0 is).

    The words are the same whether the host or the GPU started the first step: which of the two it was, and by how
    much the host ran ahead, is a reading of the trace (lab 00's launch queue, lab 07's triage), not the axis's to
    give away. The timeline itself shows it: the host's own work of that step at negative times.
    """
    trace = m.stepped(trace)
    win = m.windows(trace)
    win = win[win["step"] >= 0]
    if win.empty:
        return "0 = the trace's first event (no steps found)"
    first = win.loc[win["start_us"].idxmin()]
    step, rank = int(first["step"]), int(first["rank"])
    if trace.metadata.get("steps_inferred"):
        return f"0 = the start of the first repeat taken as a step (step {step}; the trace marks no steps)"
    ev = trace.events
    marked = trace.steps
    host = marked[(marked["step"] == step) & (marked["rank"] == rank)]
    if host.empty:
        return f"0 = the start of the first profiled step (step {step})"
    host_start = float(host["start_us"].iat[0])
    ranges = ev[(ev["kind"] == "annotation") & (ev["rank"] == rank) & (np.abs(ev["start_us"] - host_start) < 1e-3)]
    what = f"step {step}, {ranges['name'].iat[0]}" if not ranges.empty else f"step {step}"
    return (f"0 = the start of the first profiled step ({what}): on the host, or on the GPU when its work there "
            "starts later (then the host's part of that step lies before 0)")


#: What each range colour stands for, in the legend's order.
PHASE_WORDS = {"forward": "forward", "backward": "backward", "optimizer": "optimizer", "data": "data",
               "logging": "logging", "step": "step (ProfilerStep#N)"}
OTHER_RANGE_COLOR = "#937860"


def phase_legend(names) -> list[list[str]]:
    """``[words, colour]`` for each range colour the names get (:func:`_phase_color`), in a fixed order."""
    used = {_phase_color(n) for n in names}
    out = [[PHASE_WORDS[k], c] for k, c in PHASE_COLORS.items() if c in used]
    if OTHER_RANGE_COLOR in used:
        out.append(["other ranges", OTHER_RANGE_COLOR])
    return out


def _lanes_in(trace: Trace, t0: float, t1: float, ranks: Sequence[int] | None) -> tuple[list[tuple[int, str]], dict]:
    """The (rank, lane) pairs with events drawn in ``[t0, t1)``, in drawing order, and each pair's rows.

    Vectorised over the events table (a 2M-event trace has 1.2M rows): one factorisation of the
    lanes, no Python loop over events.
    """
    ev = trace.events
    keep = (ev["end_us"].to_numpy() > t0) & (ev["start_us"].to_numpy() < t1) & ~ev["kind"].isin(HIDDEN_KINDS).to_numpy()
    if ranks is not None:
        keep &= ev["rank"].isin(list(ranks)).to_numpy()
    rows = np.flatnonzero(keep)
    lane_code, lane_names = pd.factorize(ev["lane"].to_numpy(dtype=object)[rows])
    rank_code, rank_values = pd.factorize(ev["rank"].to_numpy()[rows])
    pair_code, pairs = pd.factorize(rank_code.astype(np.int64) * max(len(lane_names), 1) + lane_code)
    order = np.argsort(pair_code, kind="stable")  # each pair's rows stay in table order
    split = np.split(rows[order], np.cumsum(np.bincount(pair_code, minlength=len(pairs)))[:-1])
    on_lanes = {(int(rank_values[k // len(lane_names)]), str(lane_names[k % len(lane_names)])): of_pair
                for k, of_pair in zip(pairs.tolist(), split)}
    return sorted(on_lanes, key=lambda rl: (rl[0], _lane_order(rl[1]))), on_lanes


def _colour_keys(ev: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """What colours each event, as a number into the returned names: a copy's direction, else its kind
    (-1: nothing to colour by, not drawn)."""
    code, names = pd.factorize(ev["kind"])  # a categorical: numbered from its codes, no string hashing
    names = [str(k) for k in names]
    if "memcpy" in names:
        code = code.copy()  # never write into an array pandas may share with the table
        copies = np.flatnonzero(code == names.index("memcpy"))
        copy_code, copy_names = pd.factorize(ev["copy_kind"].to_numpy(dtype=object)[copies])
        code[copies] = np.where(copy_code >= 0, copy_code + len(names), -1)
        names += [str(k) for k in copy_names]
    return code, names


def timeline(trace: Trace, window: tuple[float, float] | None = None, step: int | None = None,
             findings: Sequence[Finding] = (), ranks: Sequence[int] | None = None, title: str | None = None,
             width_px: int = FIGURE_WIDTH_PX, ax=None, max_lanes: int = 24, x_origin: float | None = None,
             window_ms: tuple[float, float] | None = None):
    """Draw lanes like Nsight Systems: ranges, CPU threads, CUDA API, GPU streams and copies.

    Intervals closer than one pixel are merged, so 100k events draw as fast as a few thousand.
    Findings are shaded where they show. The x axis is milliseconds from :func:`time_origin_us`
    (``x_origin`` overrides it); ``window_ms`` zooms to a stretch of that axis, ``window`` takes
    absolute microseconds as the events table holds them.
    """
    if not 100 <= width_px <= 20_000:
        raise ArgumentError(f"timeline(): width_px={width_px}: give the figure's width in pixels, 100 to 20,000")
    if max_lanes < 1:
        raise ArgumentError(f"timeline(): max_lanes={max_lanes}: give 1 or more")
    if ax is not None and not (hasattr(ax, "figure") and hasattr(ax, "add_collection")):
        raise ArgumentError(f"timeline(): ax={ax!r:.40}: give a matplotlib Axes to draw on, or leave it out")
    plt = _plt()
    trace = m.stepped(trace)  # its steps, and so its axis, are those diagnose reports on
    axis_origin = time_origin_us(trace) if x_origin is None else x_origin
    if window_ms is not None:
        window = (axis_origin + float(window_ms[0]) * 1e3, axis_origin + float(window_ms[1]) * 1e3)
    t0, t1 = pick_window(trace, window, step)
    origin = axis_origin
    lanes, on_lanes = _lanes_in(trace, t0, t1, ranks)
    # a GPU lane stays on a window where its GPU did nothing: an idle GPU is what such a window is drawn to show
    ev_all = trace.events
    full0, full1 = (float(ev_all["start_us"].min()), float(ev_all["end_us"].max())) if len(ev_all) else (t0, t1)
    everywhere, _ = _lanes_in(trace, full0, full1, ranks if ranks is not None else sorted({r for r, _ in lanes}) or None)
    missing = [rl for rl in everywhere if rl[1].startswith("GPU") and rl not in on_lanes]
    if missing:
        on_lanes = {**on_lanes, **{rl: np.zeros(0, dtype=np.int64) for rl in missing}}
        lanes = sorted(lanes + missing, key=lambda rl: (rl[0], _lane_order(rl[1])))
    multi = len({r for r, _ in lanes}) > 1
    if len(lanes) > max_lanes:  # keep GPU and range lanes, drop the busiest-less CPU threads
        keep = sorted(lanes, key=lambda rl: (not rl[1].startswith(("GPU", "ranges", "CUDA")), -len(on_lanes[rl])))[:max_lanes]
        lanes = sorted(keep, key=lambda rl: (rl[0], _lane_order(rl[1])))
    made_figure = ax is None
    if ax is None:
        fig, ax = plt.subplots(figsize=(width_px / 100, 0.42 * max(len(lanes), 3) + 1.2), dpi=100)
    else:
        fig = ax.figure
    px_us = (t1 - t0) / width_px
    ev = trace.events
    start, end = ev["start_us"].to_numpy(), ev["end_us"].to_numpy()
    colour_code, colour_names = _colour_keys(ev)
    shown = set()
    range_names: set[str] = set()
    for y, (rank, lane) in enumerate(lanes):
        rows = on_lanes[(rank, lane)]
        if lane.startswith("ranges"):
            range_names |= _draw_ranges(ax, ev.iloc[rows], y, origin, px_us, (t0, t1))
            continue
        codes = colour_code[rows]
        for key, c in sorted((colour_names[c], c) for c in np.unique(codes[codes >= 0]).tolist()):
            of_key = rows[codes == c]
            shown.add(key)
            color = COPY_COLORS.get(key, KIND_COLORS.get(key, "#999999"))
            # Intervals closer than a pixel merge into one bar: a lane is at most ~width_px bars.
            s, e = m.merge_intervals(start[of_key], end[of_key] + px_us)
            ax.broken_barh(list(zip((s - origin) / 1e3, np.maximum(e - px_us - s, px_us) / 1e3)), (y - 0.4, 0.8),
                           facecolors=color, edgecolors="none")
    outside = []
    for f in findings:
        spans = _finding_spans(trace, f, t0, t1, px_us)
        color = pattern_colour(f.pattern, "red")
        if spans:  # where the pattern shows in this window (its cause's idle gaps), lighter: one collection
            ax.broken_barh([((s - origin) / 1e3, max(e - s, px_us) / 1e3) for s, e in spans], (-1.0, len(lanes) + 0.5),
                           facecolors=color, alpha=0.1, zorder=0, edgecolors="none")
        if spans and not (f.window and f.window[1] > t0 and f.window[0] < t1):
            ax.text((spans[0][0] - origin) / 1e3, -0.9, f" {f.pattern}", fontsize=9, color=color, va="bottom", clip_on=True)
        if not f.window:
            continue
        fs, fe = max(f.window[0], t0), min(f.window[1], t1)
        if fe <= fs:  # listed under the title instead of drawn off-axis (which would widen the figure)
            where = f"{(f.window[0] - origin) / 1e3:.1f}-{(f.window[1] - origin) / 1e3:.1f} ms"
            outside.append(f"{f.pattern} at {where}" + (" (shaded here where it shows)" if spans else ""))
            continue
        if fe - fs < MIN_BAND_PX * px_us:  # too thin to see: widen it around its middle, and outline it
            mid = (fs + fe) / 2
            fs, fe = mid - MIN_BAND_PX * px_us / 2, mid + MIN_BAND_PX * px_us / 2
            ax.axvspan((fs - origin) / 1e3, (fe - origin) / 1e3, facecolor="none", edgecolor=color, linewidth=1.0,
                       alpha=0.8, zorder=0)
        ax.axvspan((fs - origin) / 1e3, (fe - origin) / 1e3, color=color, alpha=0.15, zorder=0)
        ax.text((fs - origin) / 1e3, -0.9, f" {f.pattern}", fontsize=9, color=color, va="bottom", clip_on=True)
    ax.set_yticks(range(len(lanes)), [_lane_label(ln, r, multi) for r, ln in lanes], fontsize=10)
    from matplotlib.patches import Patch

    handles = [Patch(color=COPY_COLORS.get(k, KIND_COLORS.get(k, "#999999")), label=str(k))
               for k in sorted(shown)]
    # The ranges lane's colours are a key of their own (a phase, not a kind), named like the kinds' below the axis:
    # without it the reader sees orange "data" bars and orange H2D copies and cannot tell the two keys apart.
    phase_handles = [Patch(color=c, label=words) for words, c in phase_legend(range_names)]
    label_lines = textwrap.fill("time (ms); " + time_origin_text(trace), 110).count("\n") if x_origin is None else 0
    drop = LEGEND_DROP_IN + 0.15 * label_lines
    from matplotlib.legend import Legend
    from matplotlib.transforms import ScaledTranslation

    for group, title_words in ((handles, "colour = kind (memcpy: direction)"),
                               (phase_handles, "NVTX / ranges lane: colour = phase")):
        if not group:
            continue
        # below the axis label (a fixed distance in inches, whatever the figure's height), inside its width
        ncol = min(len(group), 8 if group is handles else 4)  # a phase's words are longer than a kind's
        legend = Legend(ax, group, [h.get_label() for h in group], loc="upper left", bbox_to_anchor=(0, 0),
                        bbox_transform=ax.transAxes + ScaledTranslation(0, -drop, fig.dpi_scale_trans),
                        ncol=ncol, fontsize=9, frameon=False, title=title_words, title_fontsize=9, alignment="left")
        legend.set_gid(LEGEND_GID)
        ax.add_artist(legend)  # two legends on one axes: ax.legend() keeps only the last
        legend.set_clip_on(False)  # add_artist clips to the axes: the layout would then leave the legend no room
        drop += LEGEND_TITLE_IN + LEGEND_ROW_IN * -(-len(group) // ncol)
    if made_figure:  # the lanes keep their height: the figure grows by what the legends take under the axis
        fig.set_figheight(max(fig.get_figheight(), 0.42 * max(len(lanes), 3) + 0.45 + drop))
    ax.set_ylim(len(lanes) - 0.5, -1.0)
    lo, hi = (t0 - origin) / 1e3, (t1 - origin) / 1e3
    ax.set_xlim(lo, hi if hi > lo else lo + 1e-3)  # a window of no length (zero-duration events) gets 1 us
    xlabel = textwrap.fill("time (ms); " + time_origin_text(trace), 110) if x_origin is None else "time (ms)"
    ax.set_xlabel(xlabel, fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    title = title if title is not None else trace_name(trace)
    if outside:
        note = textwrap.shorten("findings' windows outside this one: " + "; ".join(outside), 200)
        title += "\n" + textwrap.fill(note, 92)
    ax.set_title(printable(title), fontsize=11, loc="left", parse_math=False)  # a file name is text, not TeX
    _tidy(fig)
    if (handles or phase_handles) and len(fig.axes) == 1:  # room under the axes for the legends (tight_layout counts only the label)
        height = fig.get_size_inches()[1]
        fig.subplots_adjust(bottom=max(fig.subplotpars.bottom, (drop + 0.05) / height))
    return fig


def _finding_spans(trace: Trace, f: Finding, t0: float, t1: float, px_us: float) -> list[tuple[float, float]]:
    """Where a finding shows in ``[t0, t1)``, merged closer than a pixel: its own stretches where it says them
    (:class:`Locatable`: every pattern's locate function), else its pattern's idle gaps (:func:`_pattern_spans`)."""
    if not isinstance(f, Locatable):
        return _pattern_spans(trace, f.pattern, t0, t1, px_us)
    s, e = (np.asarray(x, dtype=float) for x in f.where(trace))
    inside = (e > t0) & (s < t1)
    if not inside.any():
        return []
    s, e = m.merge_intervals(np.clip(s[inside], t0, t1), np.clip(e[inside], t0, t1) + px_us)
    return list(zip(s.tolist(), (e - px_us).tolist()))


def _pattern_spans(trace: Trace, pattern: str, t0: float, t1: float, px_us: float) -> list[tuple[float, float]]:
    """Where a pattern with an idle cause (:attr:`helpers.patterns.Pattern.cause`) shows in ``[t0, t1)``: the GPU's
    idle gaps blamed on that cause, merged closer than a pixel; none for a pattern without one or a CPU trace."""
    from .patterns import BY_NAME

    p = BY_NAME.get(pattern)
    if p is None or p.cause not in m.CAUSES or p.cause == "graph" or not trace.has_gpu:
        return []
    gaps = m.idle_gaps(trace)
    g = gaps[(gaps["cause"] == p.cause) & (gaps["end_us"] > t0) & (gaps["start_us"] < t1)]
    if g.empty:
        return []
    s, e = m.merge_intervals(np.clip(g["start_us"].to_numpy(), t0, t1), np.clip(g["end_us"].to_numpy(), t0, t1) + px_us)
    return list(zip(s.tolist(), (e - px_us).tolist()))


def trace_name(trace: Trace) -> str:
    """A name that tells traces apart: the file's, or its folder's when the file has the generic name."""
    path = Path(str(trace.source))
    name = path.name
    for suffix in (".gz", ".json", ".sqlite", ".pt.trace"):
        name = name.removesuffix(suffix)
    return printable(path.parent.name if name in ("trace", "") and path.parent.name else name)


#: The gid of a range's name drawn on its bar (see _tidy).
RANGE_LABEL = "range-label"
#: The gid of the ranges lane's bars (one collection per lane).
RANGES_GID = "ranges"


def _draw_ranges(ax, ranges: pd.DataFrame, y: int, origin: float, px_us: float,
                 visible: tuple[float, float] = (-np.inf, np.inf)) -> set[str]:
    """Nested annotation ranges: deeper ranges drawn thinner on top, labels where they fit; the names of
    those drawn (their colours are the legend's). A label is centred on the ``visible`` part of its range (the
    window): centred on the whole range, a 1 us window's label lay thousands of axis widths away, and the
    renderer failed on it (FreeType's "raster overflow")."""
    from matplotlib.collections import PolyCollection

    ranges = ranges.sort_values(["start_us", "dur_us"], ascending=[True, False])
    depth_end: list[float] = []
    step_above: list[bool] = []  # each open range: a step's (ProfilerStep#N, "step N")
    bars, colors = [], []
    drawn: set[str] = set()
    for s, e, name in zip(ranges["start_us"].tolist(), ranges["end_us"].tolist(), ranges["name"].tolist()):
        while depth_end and depth_end[-1] <= s:
            depth_end.pop()
            step_above.pop()
        depth = len(depth_end)
        is_step = _phase_color(name) == PHASE_COLORS["step"]
        # the phases are the first level that is not a step's: depth 1 under a ProfilerStep range, depth 0 in an
        # Nsight export, whose NVTX phases no step range encloses (labelled at depth 1 only, they never were)
        phase_level = not is_step and depth == sum(step_above)
        depth_end.append(e)
        step_above.append(is_step)
        if depth > 2 or (e - s) < px_us:
            continue
        h = 0.8 - 0.25 * depth
        x0, y0 = (s - origin) / 1e3, y - h / 2
        x1, y1 = x0 + (e - s) / 1e3, y0 + h  # the corners broken_barh would compute
        bars.append([(x0, y0), (x0, y1), (x1, y1), (x1, y0)])
        colors.append(_phase_color(name))
        drawn.add(name)
        vs, ve = max(s, visible[0]), min(e, visible[1])
        if (ve - vs) / px_us > 7 * len(name) and phase_level:  # label the phases, not their insides
            label = ax.text((vs + ve) / 2e3 - origin / 1e3, y, printable(name), ha="center", va="center", fontsize=9,
                            color="black", clip_on=True, gid=RANGE_LABEL, parse_math=False)
            label.range_ms = (x0, x1)  # _tidy drops the label if, once laid out, it is wider than this
    if bars:  # one collection, drawn bar by bar in the same order (a collection per bar took 2 ms each)
        ax.add_collection(PolyCollection(np.array(bars), facecolors=colors, edgecolors="white", linewidth=0.3,
                                         alpha=0.9, gid=RANGES_GID))
    return drawn


def _tidy(fig) -> None:
    """tight_layout, without its warning when long lane labels leave it no room (the figure is still fine);
    then drop each range label wider than its range, which would spill over the next phase's bar (the
    estimate that placed it counts the figure's width, not the narrower axes')."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout()
    renderer = None
    for ax in fig.axes:
        for label in [t for t in ax.texts if t.get_gid() == RANGE_LABEL]:
            renderer = renderer or fig.canvas.get_renderer()
            (a, _), (b, _) = ax.transData.transform([(label.range_ms[0], 0), (label.range_ms[1], 0)])
            if label.get_window_extent(renderer).width + 4 > b - a:
                label.remove()
