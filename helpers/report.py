"""``python -m helpers report TRACE|FOLDER [AFTER] -o report.html``: one self-contained HTML file.

What PyTorch's TensorBoard profiler plugin showed (it is being removed: kineto RFC #1248), and this toolkit's
own findings, in one page that opens from disk in any current browser, offline, and can be mailed:

* the step overview: each step split into TensorBoard's categories (kernel, memcpy, memset, communication,
  CUDA runtime, DataLoader, CPU, other; :func:`helpers.overview.step_categories`) and the GPU's idle time by
  what the host was doing (:func:`helpers.metrics.step_breakdown`), each with its denominator named;
* the diagnosis: each finding with its evidence, cost and fix, its window a click away on the timeline; the
  critical path's time by cause;
* the operator and kernel tables (sortable; input shapes where the trace recorded them);
* the interactive timeline: the widget's front end (``static/explore.js``) answered in the page from data laid
  out ahead of time (:mod:`helpers.timeline_data`), with the critical path as an overlay track;
* for a folder of ranks: a rank x step heatmap of step and compute time, and the stragglers;
* with two inputs: the matched diff (:mod:`helpers.diff`): verdict with its noise band, what changed most,
  every operator and kernel before and after, and both timelines side by side with their views linked.

Nothing is fetched: the styles, the scripts and the data are in the file. Layers as everywhere: the numbers
come from :mod:`helpers.metrics`, :mod:`helpers.overview`, :mod:`helpers.diff` and the diagnosis; this module
only lays them out.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import metrics as m
from . import render
from . import thresholds as th
from .diagnosis import diagnose
from .lanes import KIND_COLORS, trace_name
from .model import Trace
from .overview import CATEGORIES, CATEGORY_WORDS, kernel_table, op_table, step_categories
from .paths import printable
from .timeline_data import DETAIL_EVENTS, timeline_payload
from .tracks import critical_path_overlay

STATIC = Path(__file__).parent / "static"
#: Rows shown in the operator and kernel tables (the rest are counted, not listed).
TABLE_ROWS = 400
#: Colours of the step categories (TensorBoard's order).
CATEGORY_COLOURS = {"kernel": KIND_COLORS["kernel"], "memcpy": "#ff7f0e", "memset": "#7f7f7f",
                    "communication": "#9467bd", "runtime": "#2ca02c", "dataloader": "#dd8452", "cpu": "#17becf",
                    "other": "#d9d9d9"}
Progress = Callable[[int, int], None]

_e = html.escape


def _num(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    v = float(v)
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) < 1:
        return f"{v:.{digits}g}"
    text = f"{v:.{max(digits - len(str(int(abs(v)))), 0)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _pct(v: float) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{v:.0%}" if v >= 0.01 or v == 0 else f"{v:.1%}"


def _json_script(obj: Any, element_id: str, kind: str = "application/json") -> str:
    # every '<' as \u003c (JSON reads it back the same): '</script>' would end the element, and '<!--<script>' in a
    # name (a trace's names are anyone's text) puts the HTML parser in a state where the real '</script>' does not end
    # it, so the page's code became data and nothing was drawn
    text = json.dumps(render.clean(obj), separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="{kind}" id="{element_id}">{text}</script>'


# --- figures drawn as inline SVG -------------------------------------------------------------------------
def _bar(parts: list[tuple[str, float, str]], total: float, width: int = 1000, height: int = 24) -> str:
    """One horizontal bar split into ``(label, value, colour)`` parts, each a share of ``total``; titles on hover."""
    if not total or total <= 0:
        return ""
    out, x = [], 0.0
    for label, value, colour in parts:
        w = width * max(value, 0.0) / total
        if w <= 0:
            continue
        out.append(f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="{height}" fill="{colour}">'
                   f"<title>{_e(label)}: {_num(value / 1e3)} ms ({_pct(value / total)})</title></rect>")
        if w > 46:
            out.append(f'<text x="{x + w / 2:.1f}" y="{height / 2 + 4:.1f}" text-anchor="middle" class="svg-label">'
                       f"{_pct(value / total)}</text>")
        x += w
    return (f'<svg class="bar" viewBox="0 0 {width} {height}" width="100%" preserveAspectRatio="xMinYMid meet" '
            f'role="img">{"".join(out)}</svg>')


def _legend(items: list[tuple[str, str]]) -> str:
    return '<div class="legend">' + "".join(f'<span><i style="background:{c}"></i>{_e(n)}</span>' for n, c in items) + "</div>"


def _heatmap(values: pd.DataFrame, label: str, marks: set[int], windows: dict[tuple[int, int], tuple[float, float]],
             timeline: int) -> str:
    """Ranks down, steps across, one cell each (``values``: index rank, columns step, ms); darker is longer.
    A click on a cell shows that rank's step on the timeline."""
    if values.empty:
        return ""
    lo, hi = float(np.nanmin(values.to_numpy())), float(np.nanmax(values.to_numpy()))
    cw = max(14, min(48, 760 // max(len(values.columns), 1)))
    ch, left, top = 18, 70, 20
    cells = []
    for i, rank in enumerate(values.index.tolist()):
        y = top + i * ch
        cells.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end" class="svg-axis'
                     f'{" straggler" if rank in marks else ""}">rank {rank}</text>')
        for j, step in enumerate(values.columns.tolist()):
            v = values.loc[rank, step]
            if not np.isfinite(v):
                continue
            t = (v - lo) / (hi - lo) if hi > lo else 0.5
            colour = f"rgb({int(255 - 200 * t)},{int(245 - 180 * t)},{int(235 - 80 * t)})"
            a, b = windows.get((rank, step), (float("nan"), float("nan")))
            cells.append(f'<rect x="{left + j * cw}" y="{y}" width="{cw - 1}" height="{ch - 1}" fill="{colour}" '
                         f'class="cell" data-timeline="{timeline}" data-window="{a:.6f},{b:.6f}" data-rank="{rank}">'
                         f"<title>rank {rank}, step {step}: {label} {_num(v)} ms</title></rect>")
    for j, step in enumerate(values.columns.tolist()):
        if len(values.columns) <= 40 or j % max(1, len(values.columns) // 20) == 0:
            cells.append(f'<text x="{left + j * cw + cw / 2}" y="{top - 6}" text-anchor="middle" class="svg-axis">{step}</text>')
    h = top + ch * len(values.index) + 6
    w = left + cw * len(values.columns) + 10
    scale = f'<div class="scale">{_e(label)}: {_num(lo)} ms <span class="ramp"></span> {_num(hi)} ms (darker is longer)</div>'
    return f'<svg class="heatmap" width="{w}" height="{h}" role="img">{"".join(cells)}</svg>{scale}'


# --- tables --------------------------------------------------------------------------------------------
def _table(df: pd.DataFrame, columns: list[tuple[str, str, str]], table_id: str, limit: int = TABLE_ROWS,
           row_class: Callable[[pd.Series], str] | None = None) -> str:
    """A sortable table: ``columns`` are ``(column, heading, format)``, format ``name`` (text, cut with the whole in
    its title), ``text``, ``num`` or ``pct``. Click a heading to sort; numbers sort as numbers."""
    head = "".join(f'<th data-type="{"text" if f in ("name", "text") else "num"}">{_e(h)}</th>' for _, h, f in columns)
    rows = []
    for _, r in df.head(limit).iterrows():
        cells = []
        for col, _, f in columns:
            v = r[col]
            if f == "name":
                s = str(v)
                shown = s if len(s) <= 90 else s[:60] + "…" + s[-28:]
                cells.append(f'<td class="name" title="{_e(s)}">{_e(shown)}</td>')
            elif f == "text":
                cells.append(f"<td>{_e(str(v))}</td>")
            else:
                x = float(v) if v is not None and not (isinstance(v, float) and math.isnan(v)) else float("nan")
                shown = _pct(x) if f == "pct" else _num(x)
                cells.append(f'<td class="num" data-v="{x if math.isfinite(x) else ""}">{shown}</td>')
        cls = f' class="{row_class(r)}"' if row_class else ""
        rows.append(f"<tr{cls}>{''.join(cells)}</tr>")
    more = f'<p class="note">{len(df) - limit:,} more rows not listed.</p>' if len(df) > limit else ""
    return (f'<table class="sortable" id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>{more}")


# --- the sections ----------------------------------------------------------------------------------------
def _figures(trace: Trace, summary: dict[str, Any]) -> str:
    """The headline figures, each with what it is a share of."""
    ranks = summary["ranks"]
    rows = [("events", _num(summary["events"])),
            ("ranks", "none (no events)" if not ranks else f"1 (rank {ranks[0]})" if len(ranks) == 1
             else f"{len(ranks)} ({ranks[0]}–{ranks[-1]})"),
            ("devices", render.device_line(summary["device_names"]) or ("none recorded" if not summary["has_gpu"] else "GPU")),
            ("steps", f"{summary['steps']}" + (f" ({render.steady_text(summary['steps_inferred'])})"
                                               if summary.get("steps_inferred") else " (marked)"))]
    band = m.step_times(trace)
    if summary["step_time_ms"] is not None:
        rows.append(("step time", f"{_num(summary['step_time_ms'])} ms mean"
                     + (f", {_num(float(np.median(band)))} ms median, {_num(float(band.min()))}–{_num(float(band.max()))} ms"
                        if len(band) else "")))
    if summary["has_gpu"]:
        rows.append(("GPU busy", f"{_pct(summary['gpu_utilization'])} of step time"))
        busy = m.gpu_busy(trace)
        if not busy.empty and len(busy.groupby(["rank", "device"])) > 1:  # each GPU's own share
            per = busy.groupby(["rank", "device"])[["busy_us", "window_us"]].sum()
            shares = [f"rank {r} GPU {d} {_pct(b / w if w else float('nan'))}" for (r, d), (b, w) in per.iterrows()]
            rows.append(("each GPU busy", ", ".join(shares[:16]) + (f", … ({len(shares)} GPUs)" if len(shares) > 16 else "")))
        k = summary["kernels"]
        rows.append(("kernels", f"{_num(k['per_step'])} a step, median {_num(k['median_us'])} µs, "
                                f"{_pct(k['share_under_10us'])} under 10 µs"))
        s = summary["sync"]
        rows.append(("syncs", f"{_num(s['sync_points_per_step'])} a step, host blocked {_num(s['blocked_us_per_step'] / 1e3)} ms a step"))
    rows.append(("DataLoader wait", f"{_num(summary['data_wait_us_per_step'] / 1e3)} ms a step "
                                    f"({_pct(summary['data_wait_share'])} of step time, the host's own wait)"))
    if "communication" in summary:
        c = summary["communication"]
        rows.append(("communication", f"{_num(c['collective_us_per_step'] / 1e3)} ms a step, "
                                      f"{_num(c['exposed_us_per_step'] / 1e3)} ms of it exposed ({_pct(c['exposed_share'])} of step time)"))
    return '<table class="figures">' + "".join(f"<tr><th>{_e(a)}</th><td>{b}</td></tr>" for a, b in rows) + "</table>"


def _overview(trace: Trace) -> str:
    cats = step_categories(trace)
    out = []
    if cats.empty:
        return '<p class="note">No steps to split.</p>'
    mean = cats[[f"{c}_us" for c in CATEGORIES]].mean()
    step_us = float(cats["step_us"].mean())
    out.append("<h3>Where a step's time goes (TensorBoard's categories)</h3>")
    out.append(f'<p class="note">Each instant of a step goes to the first of these that runs then, in this order; what '
               f"none covers is <i>other</i>. Shares of the mean step, {_num(step_us / 1e3)} ms"
               + (f", over {len(cats)} (rank, step) windows" if cats["rank"].nunique() > 1 else f", over {len(cats)} steps") + ".</p>")
    parts = [(CATEGORY_WORDS[c], float(mean[f"{c}_us"]), CATEGORY_COLOURS[c]) for c in CATEGORIES]
    out.append(_bar(parts, step_us))
    out.append(_legend([(CATEGORY_WORDS[c], CATEGORY_COLOURS[c]) for c in CATEGORIES]))
    table = cats.copy()
    table["step_ms"] = table["step_us"] / 1e3
    cols = [("rank", "rank", "num")] if table["rank"].nunique() > 1 else []
    cols += [("step", "step", "num"), ("step_ms", "step (ms)", "num")]
    for c in CATEGORIES:
        table[f"{c}_ms"] = table[f"{c}_us"] / 1e3
        cols.append((f"{c}_ms", f"{CATEGORY_WORDS[c]} (ms)", "num"))
    out.append('<details><summary>each step</summary>' + _table(table, cols, "categories", limit=200) + "</details>")
    if trace.has_gpu:
        br = m.step_breakdown(trace)
        if not br.empty:
            causes = [c for c in m.CAUSES if f"{c}_us" in br]
            mean_b = br[["gpu_busy_us", *(f"{c}_us" for c in causes)]].mean()
            from .patterns import CAUSE

            words = {"gpu_busy": ("GPU busy", KIND_COLORS["kernel"])}
            words.update({c: (f"idle: {CAUSE[c].label}", CAUSE[c].colour) for c in causes})
            parts = [(words["gpu_busy"][0], float(mean_b["gpu_busy_us"]), words["gpu_busy"][1])]
            parts += [(words[c][0], float(mean_b[f"{c}_us"]), words[c][1]) for c in causes]
            out.append("<h3>The GPU's time: busy, or idle while the host was …</h3>")
            out.append(f'<p class="note">Each rank\'s first GPU; each idle gap goes to what the host was doing meanwhile '
                       f"(the cause a fix would remove). Shares of the mean step, {_num(float(br['step_us'].mean()) / 1e3)} ms: "
                       "the same denominator as the diagnosis's costs.</p>")
            out.append(_bar(parts, float(br["step_us"].mean())))
            out.append(_legend([(w, c) for (w, v, c) in parts if v > 0]))
    return "".join(out)


def _diagnosis(trace: Trace, findings, timeline: int) -> str:
    out = []
    steady = render.steady_state_text(findings.steady) if hasattr(findings, "steady") else ""
    if steady:
        out.append(f'<p class="note">{_e(steady)}</p>')
    origin = m.time_origin_us(m.stepped(trace))
    if not findings:
        out.append("<p>Nothing stands out" + ("." if trace.has_gpu else " (a CPU-only trace: host-side checks only).") + "</p>")
    for i, f in enumerate(findings, 1):
        cost = render.finding_cost_text(f)
        out.append(f'<div class="finding"><h3>{i}. {_e(f.pattern)}{" — " + _e(cost) if cost else ""}</h3><p>{_e(f.summary)}</p>')
        if render.what_if_text(f):
            out.append(f'<p class="what-if">{_e(render.what_if_text(f))}</p>')
        if getattr(f, "ranked_above", ""):  # a near-tie the trace's own figure decided (helpers.diagnosis._ranked)
            out.append(f'<p class="what-if">order: {_e(f.ranked_above)}</p>')
        out.append('<ul class="evidence">')
        for k, v in f.evidence.items():
            if k == "steps_inferred" and isinstance(v, dict):
                v = render.steady_text(v)
            out.append(f"<li><code>{_e(str(k))}</code>: {_e(render.figure_text(v))}</li>")
        out.append("</ul>")
        if f.window:
            a, b = (f.window[0] - origin) / 1e3, (f.window[1] - origin) / 1e3
            out.append(f'<p>where: {_e(render.window_text(a, b))} <button class="show" data-timeline="{timeline}" '
                       f'data-window="{a:.6f},{b:.6f}">show on the timeline</button></p>')
        if f.fix:
            out.append(f'<p class="fix"><b>fix:</b> {_e(f.fix)}</p>')
        out.append("</div>")
    out.append(_critical(trace))
    return "".join(out)


def _critical(trace: Trace) -> str:
    """The critical path's milliseconds a step by cause, when it can be found."""
    from .critical import critical_path
    from .patterns import CAUSE

    path = critical_path(m.stepped(trace))
    ms = {c: v for c, v in path.ms_per_step.items() if v > 0}
    if not ms or not math.isfinite(path.step_ms):
        return ""
    parts = [(f"{c}: {CAUSE[c].label}" if c in CAUSE else c, v * 1e3, CAUSE[c].colour if c in CAUSE else "#999") for c, v in ms.items()]
    who = f" (rank {path.rank}, the one with the longest steps)" if len(trace.ranks) > 1 else ""
    return ("<h3>What the step waited on (critical path)</h3>"
            f'<p class="note">Every microsecond of the mean step{who}, {_num(path.step_ms)} ms, on the one thing it waited '
            "for; the timeline's top track draws the path.</p>" + _bar(parts, path.step_ms * 1e3)
            + _legend([(p[0], p[2]) for p in parts]))


def _ranks(trace: Trace, timeline: int) -> str:
    cs = m.comm_stats(m.stepped(trace))
    cs = cs[cs["step"] >= 0]
    if cs.empty or cs["rank"].nunique() < 2:
        return ""
    win = m.windows(m.stepped(trace))
    origin = m.time_origin_us(m.stepped(trace))
    windows = {(int(r), int(s)): ((a - origin) / 1e3, (b - origin) / 1e3)
               for r, s, a, b in zip(win["rank"], win["step"], win["start_us"], win["end_us"])}
    per_rank = cs.groupby("rank")[["window_us", "compute_us", "exposed_us", "collective_us"]].mean()
    comp = per_rank["compute_us"]
    median = float(comp.median())
    stragglers = [int(r) for r in comp.index[comp > median * (1 + th.STRAGGLER_EXCESS)]] if median > 0 else []
    step_ms = cs.pivot(index="rank", columns="step", values="window_us") / 1e3
    comp_ms = cs.pivot(index="rank", columns="step", values="compute_us") / 1e3
    out = ["<p>"]
    if stragglers:
        out.append(f"<b>Stragglers:</b> rank{'s' if len(stragglers) > 1 else ''} {', '.join(map(str, stragglers))}: "
                   f"compute a step more than {_pct(th.STRAGGLER_EXCESS)} above the median rank's ({_num(median / 1e3)} ms); "
                   "the others wait for them in the collectives.")
    else:
        out.append(f"No straggler: no rank computes more than {_pct(th.STRAGGLER_EXCESS)} above the median rank "
                   f"({_num(median / 1e3)} ms a step).")
    spread = float((comp.max() - comp.min()) / comp.max()) if comp.max() > 0 else 0.0
    out.append(f" Compute spread across ranks {_pct(spread)} (slowest rank {int(comp.idxmax())}, fastest {int(comp.idxmin())}).</p>")
    out.append(_job_path(trace))
    out.append('<p class="note">A click on a cell shows that rank\'s step on the timeline.</p>')
    out.append("<h3>Step time, rank by step</h3>" + _heatmap(step_ms, "step time", set(stragglers), windows, timeline))
    out.append("<h3>Compute time, rank by step</h3>" + _heatmap(comp_ms, "compute", set(stragglers), windows, timeline))
    table = per_rank.reset_index()
    for c in ("window", "compute", "exposed", "collective"):
        table[f"{c}_ms"] = table[f"{c}_us"] / 1e3
    out.append(_table(table, [("rank", "rank", "num"), ("window_ms", "step (ms)", "num"), ("compute_ms", "compute (ms)", "num"),
                              ("collective_ms", "collectives (ms)", "num"), ("exposed_ms", "exposed (ms)", "num")], "ranks",
                      row_class=lambda r: "straggler" if int(r["rank"]) in stragglers else ""))
    return "".join(out)


def _job_path(trace: Trace) -> str:
    """Which rank bound each step, and what the job saves (:func:`helpers.critical.job_path`), when it is known."""
    from .critical import critical_path

    job = getattr(critical_path(m.stepped(trace)), "job", None)
    if job is None or job.steps.empty:
        return ""
    out = ["<h3>Which rank held each step back (the job's critical path)</h3><ul>"]
    for b in job.bounds:
        if b["kind"] == "straggler":
            out.append(f"<li>rank {b['rank']} bounds {b['steps_bound']} of {len(job.steps)} steps (its path mostly "
                       f"{_e(b['cause'])}): were its own work the next slowest rank's, the job would save "
                       f"{_num(b['saving_ms'])} ms a step</li>")
        else:
            out.append(f"<li>collective {b['index'] + 1} of the step (<code>{_e(render.cut_name(b['name'], 80))}</code>): "
                       f"overlapping it with compute would save {_num(b['saving_ms'])} ms a step</li>")
    if not job.bounds:
        out.append("<li>no rank and no collective bounds the job by more than the noise floor</li>")
    out.append("</ul>")
    steps = job.steps.assign(job_ms=job.steps["job_ms"], own_ms=job.steps["own_ms"])
    out.append("<details><summary>each step</summary>" + _table(
        steps, [("step", "step", "num"), ("job_ms", "step (ms)", "num"), ("rank", "bound by rank", "num"),
                ("cause", "its path mostly", "text"), ("own_ms", "its own work (ms)", "num"),
                ("median_own_ms", "median rank's (ms)", "num")], "job-path", limit=200) + "</details>")
    return "".join(out)


def _tables(trace: Trace, shapes: dict[str, list[tuple[str, int]]] | None, prefix: str) -> str:
    ops = op_table(trace, shapes)
    kern = kernel_table(trace)
    per = " (a rank's, on average)" if len(trace.ranks) > 1 else ""
    out = [f"<h3>Operators and ranges</h3><p class=\"note\">Milliseconds and calls a step{per}. host: the op's own span "
           "(inclusive; an op inside one of the same name counts once), self: less the ops inside it; GPU: the kernels, "
           "copies and memsets launched inside it (self: by the op itself). Click a heading to sort.</p>"]
    cols = [("name", "name", "name"), ("kind", "kind", "text"), ("calls", "calls", "num"), ("host_ms", "host (ms)", "num"),
            ("self_ms", "host self (ms)", "num"), ("gpu_ms", "GPU (ms)", "num"), ("gpu_self_ms", "GPU self (ms)", "num"),
            ("kernels", "GPU events", "num")]
    if "shapes" in ops:
        cols.append(("shapes", "input shapes (most frequent)", "text"))
    out.append(_table(ops, cols, f"{prefix}ops") if len(ops) else '<p class="note">No operators recorded.</p>')
    out.append(f"<h3>Kernels, copies and memsets</h3><p class=\"note\">Calls and milliseconds a step{per}; share of all "
               "GPU work's time; op: the operator whose launch queued most of them.</p>")
    out.append(_table(kern, [("name", "name", "name"), ("kind", "kind", "text"), ("calls", "calls", "num"),
                             ("total_ms", "total (ms)", "num"), ("mean_us", "mean (µs)", "num"), ("min_us", "min (µs)", "num"),
                             ("max_us", "max (µs)", "num"), ("share", "share", "pct"), ("op", "op", "name")], f"{prefix}kernels")
               if len(kern) else '<p class="note">No GPU work recorded.</p>')
    return "".join(out)


def _diff(diff) -> tuple[str, str]:
    """The diff's verdict and what changed most; and the whole matched table (collapsed), apart."""
    out = [f"<p class=\"verdict\">{_e(render.verdict_text(diff.step, diff.steps))}</p>"]
    if diff.changes:
        out.append("<h3>What changed most</h3><p class=\"note\">Operators matched through the call tree (each kernel under "
                   "the operator whose launch queued it); host: the op's own time, GPU: the work launched inside it; "
                   "ms a step; band: the noise band of that figure from the steps' own spread.</p><ol class=\"changes\">")
        for c in diff.changes:
            band = f"± {_num(c['band_ms'])} ms" if math.isfinite(c["band_ms"]) else "no band (too few steps)"
            kern = ""
            if c["kernels_before"] != c["kernels_after"]:
                kb = "; ".join(f"{_e(render.cut_name(k, 80))} {_num(v)} ms" for k, v in c["kernels_before"]) or "none"
                ka = "; ".join(f"{_e(render.cut_name(k, 80))} {_num(v)} ms" for k, v in c["kernels_after"]) or "none"
                kern = f'<div class="kernels">kernels before: {kb}<br>kernels after: {ka}</div>'
            out.append(f"<li><b>{_e(c['status'])}</b>: <code>{_e(c['path'])}</code> ({_e(c['kind'])}): {c['measure']} "
                       f"{_num(c['before_ms'])} → {_num(c['after_ms'])} ms ({c['delta_ms']:+.3g}, {band}){kern}</li>")
        out.append("</ol>")
    else:
        out.append("<p>No operator or kernel changed beyond its own noise band.</p>")
    head, out = "".join(out), []
    t = diff.table.copy()
    if not t.empty:
        t = t.sort_values("size_ms", ascending=False, kind="stable")
        t["indent"] = t["depth"]
        status_counts = t["status"].value_counts().to_dict()
        buttons = "".join(f'<button class="filter" data-status="{s}">{s} ({status_counts.get(s, 0)})</button>'
                          for s in ("changed", "added", "removed", "within noise", "same"))
        out.append(f"<details><summary><h3>Every operator and kernel, matched ({len(t):,})</h3></summary>"
                   f'<p class="note">Show: <button class="filter on" data-status="">all ({len(t)})</button> {buttons}</p>')
        out.append(_table(t, [("path", "path (operators from the outermost down)", "name"), ("kind", "kind", "text"),
                              ("status", "status", "text"), ("host_before_ms", "host before", "num"),
                              ("host_after_ms", "host after", "num"), ("host_delta_ms", "host Δ", "num"),
                              ("gpu_before_ms", "GPU before", "num"), ("gpu_after_ms", "GPU after", "num"),
                              ("gpu_delta_ms", "GPU Δ", "num"), ("calls_before", "calls before", "num"),
                              ("calls_after", "calls after", "num")], "diff", limit=600,
                          row_class=lambda r: "st-" + str(r["status"]).replace(" ", "-")) + "</details>")
    return head, "".join(out)


def _pair(before_name: str, after_name: str, metas: list[dict[str, Any]]) -> str:
    return ('<h3>Both timelines</h3><p class="note"><label><input type="checkbox" id="link-views" checked> link the '
            "views</label>: zoom or pan one and the other shows the same milliseconds from its own time 0.</p>"
            + '<div class="pair">' + _timeline_host(0, f"before, {_e(before_name)}: " + _e(_detail_note(metas[0])))
            + _timeline_host(1, f"after, {_e(after_name)}: " + _e(_detail_note(metas[1]))) + "</div>")


def _dims_text(dims: Any) -> str:
    """``Input Dims`` as the profiler writes them, as text: ``[32, 3, 224, 224], [64, 3, 7, 7]``."""
    if not isinstance(dims, list):
        return ""
    parts = [f"[{', '.join(str(x) for x in d)}]" if isinstance(d, list) else str(d) for d in dims]
    text = ", ".join(p for p in parts if p not in ("[]", "None", ""))
    return text if len(text) <= 120 else text[:117] + "..."


def input_shapes(path: str | os.PathLike, max_bytes: int) -> dict[str, list[tuple[str, int]]]:
    """The input shapes a Kineto trace recorded per operator name (``record_shapes=True``), most frequent first;
    empty for another format, a folder, a trace without shapes, or without msgspec. The events table keeps no
    shapes, so this reads the file's operators once more (only their names and ``Input Dims``)."""
    p = Path(path)
    if p.is_dir() or not re.search(r"\.json(\.gz)?$", p.name):
        return {}
    try:
        import gzip

        import msgspec
    except ImportError:
        return {}

    # only the fields read; types given directly (this module's annotations are strings msgspec cannot resolve here)
    args_t = msgspec.defstruct("Args", [("dims", Any, None)], rename={"dims": "Input Dims"})
    event_t = msgspec.defstruct("Event", [("cat", Any, None), ("name", Any, None), ("args", args_t | None, None)])
    doc_t = msgspec.defstruct("Doc", [("traceEvents", list[event_t], msgspec.field(default_factory=list))])

    from .outputs import read_regular

    try:
        data = read_regular(p, max_bytes, "trace")
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        if b'"Input Dims"' not in data:
            return {}
        doc = msgspec.json.decode(data, type=doc_t)
    except Exception:  # shapes are extra: a file the reader took but this cannot is left without them
        return {}
    counts: dict[str, dict[str, int]] = {}
    for e in doc.traceEvents:
        if e.cat != "cpu_op" or e.args is None or not isinstance(e.name, str):
            continue
        text = _dims_text(e.args.dims)
        if text:
            c = counts.setdefault(e.name, {})
            c[text] = c.get(text, 0) + 1
    return {n: sorted(c.items(), key=lambda kv: -kv[1]) for n, c in counts.items()}


# --- the page ------------------------------------------------------------------------------------------
def _page(title: str, body: str, timelines: list[dict[str, Any]]) -> str:
    css = (STATIC / "explore.css").read_text() + "\n" + (STATIC / "report.css").read_text()
    js = (STATIC / "explore.js").read_text() + "\n" + (STATIC / "report.js").read_text()
    metas = [t["meta"] for t in timelines]
    blobs = "".join(f'<script type="application/octet-stream" id="gtl-blob-{i}">{t["blob"]}</script>' for i, t in enumerate(timelines))
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{_e(title)}</title>"
            f"<style>{css}</style></head><body>{body}{_json_script(metas, 'gtl-timelines')}{blobs}"
            f"<script type=\"module\">{js}</script></body></html>\n")


def _section(sid: str, title: str, body: str, open_: bool = True) -> str:
    return f'<section id="{sid}"><h2>{_e(title)}</h2>{body}</section>' if open_ else \
        f'<section id="{sid}"><details><summary><h2>{_e(title)}</h2></summary>{body}</details></section>'


def _section_links(sections: list[str]) -> list[tuple[str, str]]:
    """``(id, title)`` of each section's HTML, for the contents line."""
    return [m_.groups() for m_ in (re.search(r'<section id="([^"]+)">(?:<details><summary>)?<h2>([^<]+)</h2>', x)
                                   for x in sections) if m_]


def _nav(links: list[tuple[str, str]]) -> str:
    return '<nav class="contents">' + " · ".join(f'<a href="#{_e(i)}">{_e(t)}</a>' for i, t in links) + "</nav>"


def _timeline_host(i: int, caption: str = "") -> str:
    return (f'<div class="timeline-host" data-timeline="{i}"><p class="loading">Drawing the timeline… (it needs '
            "JavaScript and a browser from 2023 or later)</p></div>" + (f'<p class="note">{caption}</p>' if caption else ""))


def _detail_note(meta: dict[str, Any]) -> str:
    size = f"{meta['events']:,} events stored one by one"
    if meta["detail_ms"]:
        a, b = meta["detail_ms"]
        size += (f", those of {a:.1f}–{b:.1f} ms (the trace has more than the report keeps: --detail-events); elsewhere "
                 f"the lanes are drawn from columns of {meta['levels'][-1]['px_ms'] * 1e3:.2g} µs at the finest")
    if meta["lanes_left_out"]:
        size += f"; {meta['lanes_left_out']} lanes with the fewest events left out"
    return size + "."


def build(inputs: Sequence[Trace], *, shapes: Sequence[dict] = (), detail_events: int = DETAIL_EVENTS,
          progress: Progress | None = None, command: str = "") -> str:
    """The report's HTML for one trace (or folder of ranks), or two (before, after) with their diff."""
    stages = 3 + 3 * len(inputs)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(min(done, stages), stages)

    traces = [m.stepped(t) for t in inputs]
    names = [trace_name(t) for t in traces]
    title = f"Trace report: {names[-1]}" if len(traces) == 1 else f"Trace report: {names[0]} → {names[1]}"
    timelines = []
    parts_by_trace = []
    for i, (tr, nm) in enumerate(zip(traces, names)):
        findings = diagnose(tr)
        tick()
        summary = m.summary(tr)
        centre = findings[0].window[0] if findings and findings[0].window else None
        overlay = critical_path_overlay(tr)
        multi = len(tr.ranks) > 1
        timelines.append(timeline_payload(tr, nm, detail_events=detail_events, centre_us=centre,
                                          overlays=[overlay] if overlay else [],
                                          collapsed_ranks=[r for r in tr.ranks[1:]] if multi else []))
        tick()
        sections = [
            _section(f"figures-{i}", "The trace", _figures(tr, summary)),
            _section(f"overview-{i}", "Step overview", _overview(tr)),
            _section(f"diagnosis-{i}", "Diagnosis", _diagnosis(tr, findings, i)),
        ]
        if len(traces) == 1:
            sections.append(_section(f"timeline-{i}", "Timeline", _timeline_host(i, _detail_note(timelines[-1]["meta"]))))
        if multi:
            sections.append(_section(f"ranks-{i}", "Ranks", _ranks(tr, i)))
        sections.append(_section(f"tables-{i}", "Operators and kernels",
                                 _tables(tr, shapes[i] if i < len(shapes) else None, f"t{i}-")))
        parts_by_trace.append(sections)
        tick()
    body = [f"<header><h1>{_e(title)}</h1><p class=\"note\">Made {_dt.date.today().isoformat()} by "
            f"<code>{_e(command or 'python -m helpers report')}</code> from "
            + " and ".join(f"<code>{_e(str(t.source))}</code> ({_e(t.format)})" for t in traces)
            + ". Times are milliseconds; every figure is taken over the steps (the diagnosis's steady state).</p></header>"]
    if len(traces) == 2:
        from .diff import work_diff

        d = work_diff(traces[0], traces[1])
        tick()
        head, table = _diff(d)
        body.append(_section("diff", f"What changed: {names[0]} → {names[1]}",
                             head + _pair(names[0], names[1], [t["meta"] for t in timelines]) + table))
        body.insert(1, _nav([("diff", "what changed"), ("after", f"after: {names[1]}"), ("before", f"before: {names[0]}")]))
        body.append(f'<div class="trace-block" id="after"><h1 class="side">After: {_e(names[1])}</h1>'
                    + _nav(_section_links(parts_by_trace[1])) + "".join(parts_by_trace[1]) + "</div>")
        body.append(f'<div class="trace-block" id="before"><details><summary><h1 class="side">Before: {_e(names[0])}</h1></summary>'
                    + "".join(parts_by_trace[0]) + "</details></div>")
    else:
        tick()
        body.append(_nav(_section_links(parts_by_trace[0])) + "".join(parts_by_trace[0]))
    tick()
    page = _page(title, "".join(body), timelines)
    tick()
    return printable(page)  # a file name's undecodable bytes as \xNN: the page is UTF-8


def save(traces: Sequence[Trace], path: str | os.PathLike, force: bool = False, detail_events: int = DETAIL_EVENTS) -> Path:
    """Write the report of one trace (or two: before, after) to ``path`` (an ``.html`` file), as
    ``python -m helpers report`` does; an existing file is kept unless ``force`` (:class:`~helpers.errors.TraceError`
    says so in one line). Returns the path written. For a notebook: ``report.save([before, after], "fix.html")``."""
    from .errors import TraceError
    from .outputs import check_output, write_output

    traces = list(traces)
    if not 1 <= len(traces) <= 2 or not all(isinstance(t, Trace) for t in traces):
        raise TraceError("report.save takes one trace, or two (before, after), as helpers.load or helpers.capture give them")
    out = Path(os.fspath(path))
    if out.suffix.lower() not in (".html", ".htm"):
        raise TraceError(f"{out}: a report is an HTML file; give a name ending in .html")
    out = check_output(out, force, [str(t.source) for t in traces if t.source and Path(str(t.source)).exists()])
    page = build(traces, detail_events=detail_events, command="helpers.report.save")
    return write_output(out, lambda fh: fh.write(page.encode("utf-8")), force)


__all__ = ["build", "input_shapes", "save"]
