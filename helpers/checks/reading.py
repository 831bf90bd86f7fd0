"""The learner's reading of a timeline, checked against the trace before any diagnosis is shown.

A :class:`Reading` is what a learner says after looking: the pattern, a window on the timeline where
it shows, the figure that proves it and what it costs. :func:`check_reading` verifies each part from
the trace itself and, when a part is wrong, says what the trace shows there instead (never only
"wrong"). Only a passing reading is answered with ``helpers.diagnose``'s findings, as a second opinion.

Windows are in milliseconds on the timeline's time axis: :func:`helpers.plots.timeline` draws time
from the capture's origin (the first profiled step's start, :func:`helpers.plots.time_origin_us`),
whatever window it shows, so a window read off any view of the trace means the same time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import metrics as m
from .. import seal as _seal
from .. import thresholds as th
from ..diagnosis import PATTERNS, Finding, diagnose, locate
from ..model import Trace
from ..patterns import BY_CAUSE, BY_NAME, SIGNALS
from ..render import finding_cost_text
from ._core import CheckFailed, _record, unit_slip

#: The figures that can prove each pattern (names of :func:`helpers.diagnose`'s signals), with how to
#: measure each from the events table: the catalogue's declarations (:data:`helpers.patterns.SIGNALS`), built from
#: the rules' evidence lists, so the two cannot drift.
FIGURE_HOWTO: dict[str, str] = {n: s.description for n, s in SIGNALS.items() if s.proves}
#: How each figure is computed, as the code a learner runs (``t`` a trace, ``metrics`` helpers.metrics, ``helpers``):
#: the check's value of every figure is this, no other definition (tests/test_reading_credit.py holds
#: each expression to the check's figure on every triage trace).
FIGURE_HELPER: dict[str, str] = {n: s.formula for n, s in SIGNALS.items() if s.proves}
#: The cost figures that prove nothing on their own (so they are not in :data:`EVIDENCE`), with their code.
COST_HELPER: dict[str, str] = {n: s.formula for n, s in SIGNALS.items() if not s.proves}


def howto(fig: str) -> str:
    """What figure ``fig`` is and the code that computes it (the labs' figure tables print this)."""
    if fig not in FIGURE_HOWTO or fig not in FIGURE_HELPER:
        from ..errors import ArgumentError

        raise ArgumentError(f"howto(): {fig[:60]!r} is not a figure; the figures: {', '.join(sorted(FIGURE_HELPER))}")
    return f"{FIGURE_HOWTO[fig]}; compute it: {FIGURE_HELPER[fig]}"


def cost_figure(pattern: str, has_gpu: bool) -> str | None:
    """The figure that is ``pattern``'s cost (the share of step time its fix saves at most) on a GPU or a
    CPU-only trace: the signal :func:`helpers.diagnose` ranks it by."""
    for rule in BY_NAME[pattern].rules if pattern in BY_NAME else ():
        if rule.cost != "none" and rule.on in ("any", "gpu" if has_gpu else "cpu"):
            return rule.cost
    return None


def cost_howto(pattern: str, has_gpu: bool = True) -> str:
    """How to compute ``pattern``'s cost, in code (what the check compares a reading's cost with)."""
    fig = cost_figure(pattern, has_gpu)
    return FIGURE_HELPER.get(fig) or COST_HELPER.get(fig, "") if fig else ""


def _figures_for(pattern: str) -> tuple[str, ...]:
    return tuple(n for n in BY_NAME[pattern].evidence if n in FIGURE_HOWTO)


#: pattern -> the figures that prove it (see :data:`FIGURE_HOWTO` for how to measure each).
EVIDENCE: dict[str, tuple[str, ...]] = {p: _figures_for(p) for p in PATTERNS if _figures_for(p)}


@dataclass(frozen=True)
class Reading:
    """What you read off a timeline, before any diagnosis: pattern, where, the proving figure, cost."""

    pattern: str  # one of helpers.diagnosis.PATTERNS (printed by the labs beside checks.EVIDENCE)
    window_ms: tuple[float, float]  # on the timeline's time axis (ms from the capture's origin)
    evidence: dict[str, float] = field(default_factory=dict)  # {figure name (EVIDENCE[pattern]): value measured}
    cost: float = float("nan")  # share of step time a fix would save at most, 0..1


# --- where each pattern shows on the timeline ------------------------------------------------
def _intervals(trace: Trace, pattern: str) -> tuple[np.ndarray, np.ndarray]:
    found = locate(trace, pattern)
    return found.starts, found.ends


def pattern_intervals(trace: Trace, pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """The stretches of the trace (absolute µs, merged) where ``pattern`` shows, over its steps: the pattern's own
    locate function (:func:`helpers.diagnosis.locate`), the one diagnose takes its finding's window from."""
    _seal.gate(trace, "checks.pattern_intervals")
    return _intervals(trace, pattern)


def reading_seal(item: str, label: str | None) -> str:
    """What opens a lab's reading trace: its reading's check, for its item (labs 02 and 03 both read a 'broken loop')."""
    return f"check_reading[{label}] for {item}" if label else f"check_reading for {item}"


def seal_until_read(trace: Trace, item: str, label: str) -> Trace:
    """Seal ``trace`` until ``check_reading(reading, trace, item, label)`` passes: until then helpers.diagnose, its
    signals, pattern_intervals and the reading's cost and window helpers answer that the reading comes first (on
    this trace, a copy of it, the same file loaded again or its events lightly edited; :mod:`helpers.seal`). The seal
    is kept in the working folder (``.seals.json``), so a restarted kernel finds it. Each lab calls it on the trace
    its reading exercise is about; returns the trace."""
    return _seal.seal(trace, reading_seal(item, label))


def _to_us(trace: Trace, window_ms: tuple[float, float]) -> tuple[float, float]:
    from ..plots import time_origin_us  # plots imports matplotlib only when drawing

    origin = time_origin_us(trace)
    return origin + float(window_ms[0]) * 1e3, origin + float(window_ms[1]) * 1e3


def describe_window(trace: Trace, window_ms: tuple[float, float]) -> str:
    """What the lanes show in a window, in words: how busy the GPU is and what the host does meanwhile."""
    trace = m.stepped(trace)  # the window is on the axis of its steps
    ws, we = _to_us(trace, window_ms)
    length = we - ws
    if not length > 0:
        return "the window is empty"
    parts = []
    if trace.has_gpu:
        busy = 0.0
        for rank in trace.ranks:
            for dev in trace.devices:
                us, ue = m.gpu_work_union(trace, rank, dev)
                busy = max(busy, float(m.overlap(us, ue, np.array([ws]), np.array([we])).sum()))
        parts.append(f"the GPU is busy {busy / length:.0%} of it")
        gaps = m.idle_gaps(trace)
        inside = gaps[(gaps["end_us"] > ws) & (gaps["start_us"] < we)]
        if not inside.empty:
            clip = (np.minimum(inside["end_us"], we) - np.maximum(inside["start_us"], ws)).clip(lower=0)
            by = clip.groupby(inside["cause"]).sum().sort_values(ascending=False)
            idle = ", ".join(f"{v / 1e3:.2f} ms with {BY_CAUSE[k].host_is if k in BY_CAUSE else k}"
                             for k, v in by.items() if v > 0)
            if idle:
                parts.append(f"its idle time there: {idle}")
    ev = trace.events
    inw = ev[(ev["end_us"] > ws) & (ev["start_us"] < we)]
    h2d = inw[(inw["kind"] == "memcpy") & (inw["copy_kind"] == "H2D")]
    if not h2d.empty:
        parts.append(f"{len(h2d)} host-to-device copies ({h2d['dur_us'].sum() / 1e3:.2f} ms)")
    coll = inw[inw["kind"] == "collective"]
    if not coll.empty:
        parts.append(f"{len(coll)} collectives ({coll['dur_us'].sum() / 1e3:.2f} ms)")
    n_kernels = int(((inw["kind"] == "kernel") & (inw["device"] >= 0)).sum())
    if trace.has_gpu:
        parts.append(f"{n_kernels} kernels")
    return f"{window_ms[0]:.1f}-{window_ms[1]:.1f} ms: " + "; ".join(parts)


def _outside_one_step(trace: Trace, ws: float, we: float, label: str) -> str | None:
    """Why the window [ws, we] (absolute µs) is not inside one step, or None. A window may reach
    READING_WINDOW_STEP_SLACK of that step's length past either edge (read by eye; an idle stretch
    that carries on across the boundary)."""
    win = m.windows(trace)
    steps = win[win["step"] >= 0] if (win["step"] >= 0).any() else win
    if steps.empty:
        return None
    a, b = steps["start_us"].to_numpy(), steps["end_us"].to_numpy()
    slack = th.READING_WINDOW_STEP_SLACK * (b - a)
    if bool(((ws >= a - slack) & (we <= b + slack)).any()):
        return None
    from ..plots import time_origin_us

    o = time_origin_us(trace)
    shown = ", ".join(f"{(x - o) / 1e3:.1f}-{(y - o) / 1e3:.1f}" for x, y in zip(a[:3], b[:3])) + (", ..." if len(a) > 3 else "")
    return (f"your {label} ({(ws - o) / 1e3:.1f}-{(we - o) / 1e3:.1f} ms) is not inside one step (the steps run {shown} "
            f"ms): point at where it shows within one step; it may reach {th.READING_WINDOW_STEP_SLACK:.0%} of the "
            "step past its edges")


def _step_of(trace: Trace, ws: float, we: float) -> tuple[float, float] | None:
    """The step (absolute µs) the window [ws, we] overlaps most, or None when the trace has no steps."""
    win = m.windows(trace)
    steps = win[win["step"] >= 0] if (win["step"] >= 0).any() else win
    if steps.empty:
        return None
    a, b = steps["start_us"].to_numpy(), steps["end_us"].to_numpy()
    over = np.minimum(b, we) - np.maximum(a, ws)
    i = int(np.argmax(over))
    return float(a[i]), float(b[i])


def window_problem(reading: Reading, trace: Trace, label: str = "window") -> str | None:
    """What is wrong with a reading's window, or None. The window must lie on the pattern:

    - inside one step (READING_WINDOW_STEP_SLACK of it past either edge at most);
    - mostly on the pattern: more than READING_WINDOW_MIN_COVER of it inside the stretches where its pattern shows;
    - pointing at the pattern, not at the step around it: longer than READING_WINDOW_MAX_STEP_SHARE of its step, it
      reaches at most READING_WINDOW_STRETCH_SLACK of the step past the pattern's longest stretch there (gpu_bound,
      whose pattern is the busy step itself, is exempt)."""
    _seal.gate(trace, "checks.reading.window_problem")
    ws, we = _to_us(trace, reading.window_ms)
    outside = _outside_one_step(trace, ws, we, label)
    if outside:
        return outside
    s, e = _intervals(trace, reading.pattern)
    covered = float(m.overlap(s, e, np.array([ws]), np.array([we])).sum()) if s.size else 0.0
    if covered <= th.READING_WINDOW_MIN_COVER * (we - ws):
        return (f"in your {label} {describe_window(trace, reading.window_ms)}; only {covered / (we - ws):.0%} of it "
                f"shows {reading.pattern}: most of a window (more than {th.READING_WINDOW_MIN_COVER:.0%}) must lie on the "
                "stretches where the pattern shows")
    step = _step_of(trace, ws, we)
    if step is None or reading.pattern == "gpu_bound":
        return None
    a, b = step
    length = b - a
    if we - ws <= th.READING_WINDOW_MAX_STEP_SHARE * length:
        return None
    cs, ce = np.clip(s, a, b), np.clip(e, a, b)
    longest = float((ce - cs).max()) if s.size else 0.0
    if we - ws <= longest + th.READING_WINDOW_STRETCH_SLACK * length:
        return None
    from ..plots import time_origin_us

    o = time_origin_us(trace)
    return (f"your {label} ({(ws - o) / 1e3:.1f}-{(we - o) / 1e3:.1f} ms) spans {(we - ws) / length:.0%} of its step "
            f"({(a - o) / 1e3:.1f}-{(b - o) / 1e3:.1f} ms), but the longest stretch of {reading.pattern} in that step is "
            f"{longest / 1e3:.2f} ms: point at the stretch where it shows (the window may reach "
            f"{th.READING_WINDOW_STRETCH_SLACK:.0%} of the step past it), not at the step around it")


# --- the check ---------------------------------------------------------------------------------
def _problems_with_form(reading: Any) -> str | None:
    if not isinstance(reading, Reading):
        return f"expected a checks.Reading(pattern=..., window_ms=(start, end), evidence={{...}}, cost=...), got {type(reading).__name__}"
    if not isinstance(reading.pattern, str) or reading.pattern not in PATTERNS:
        return f"pattern {reading.pattern!r:.60} is not one of {', '.join(PATTERNS)}"
    # each field of the type it holds: text is not a window ("12" would read as (1, 2)), True is not a figure
    window = reading.window_ms
    if not (isinstance(window, (tuple, list, np.ndarray)) and np.ndim(window) == 1 and len(window) == 2
            and all(_number(x) for x in window)):
        return (f"window_ms must be two numbers, (start_ms, end_ms), read off the timeline's time axis; got "
                f"{type(window).__name__} {window!r:.40}")
    a, b = (float(x) for x in window)
    if not (math.isfinite(a) and math.isfinite(b) and a < b):
        return f"window_ms {reading.window_ms} must be (start, end) with start < end"
    if not isinstance(reading.evidence, dict) or not reading.evidence:
        return ("evidence must name at least one figure and its value, e.g. {'" + (EVIDENCE.get(reading.pattern) or ("gpu_bound_busy",))[0]
                + "': 0.4}")
    if not all(isinstance(k, str) for k in reading.evidence):
        return "evidence must name each figure by its name (text), e.g. " + repr((EVIDENCE.get(reading.pattern) or ("",))[0])
    if not all(_number(v) and math.isfinite(float(v)) for v in reading.evidence.values()):
        return "every evidence value must be a number you measured"
    if not (_number(reading.cost) and 0.0 <= float(reading.cost) <= 1.0):
        return f"cost must be a share of step time between 0 and 1, got {reading.cost!r:.40}"
    return None


def _number(value: Any) -> bool:
    """A real number, not True/False (a bool is an int to Python, not a figure anyone measured)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _close_figure(name: str, got: float, want: float) -> bool:
    if name.endswith("_share") or name in ("imbalance_spread", "gpu_bound_busy"):
        return abs(got - want) <= max(th.READING_SHARE_ABS, th.READING_FIGURE_REL * abs(want))
    return abs(got - want) <= max(th.READING_FIGURE_REL * abs(want), 0.05)


def want_cost(pattern: str, trace: Trace, sg: dict[str, Any], fallback: float | None = None) -> float | None:
    """``pattern``'s cost in this trace, as :func:`cost_howto` computes it (``fallback`` when the trace lacks it)."""
    _seal.gate(trace, "checks.reading.want_cost")
    fig = cost_figure(pattern, trace.has_gpu)
    value = sg.get(fig) if fig else None
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else fallback


def cost_tolerance(want: float) -> float:
    """How far a reading's cost may be from the trace's: READING_COST_ABS, or READING_COST_REL of it if larger."""
    return max(th.READING_COST_ABS, th.READING_COST_REL * want)


def cost_problem(reading: Reading, trace: Trace, sg: dict[str, Any], fallback: float | None = None) -> str | None:
    """Why a reading's cost is off, or None (the same rule for every lab: within :func:`cost_tolerance`)."""
    _seal.gate(trace, "checks.reading.cost_problem")
    want = want_cost(reading.pattern, trace, sg, fallback)
    if want is None or abs(reading.cost - want) <= cost_tolerance(want):
        return None
    return (f"a {reading.pattern} cost of {reading.cost:.0%} of step time is off by more than {th.READING_COST_ABS * 100:.0f} "
            f"percentage points (or {th.READING_COST_REL:.0%} of the cost): {reading.pattern}'s cost is the share of step time a fix saves at "
            f"most, {cost_howto(reading.pattern, trace.has_gpu)}")


def _shown_patterns(findings: list[Finding]) -> list[Finding]:
    """The findings a reading may name: the top one, and any other within a factor of its cost."""
    if not findings:
        return []
    top = findings[0].cost
    return [f for f in findings if f is findings[0] or (f.cost >= th.READING_MIN_COST and f.cost >= th.READING_TIE_SHARE * top)]


def check_reading(reading: Reading, trace: Trace, item: str, label: str | None = None) -> str:
    """Check what the learner read off ``trace``: pattern, window, the proving figure, cost.

    Returns the verdict and, only when every part holds, ``helpers.diagnose``'s findings as a second
    opinion; the trace's seal (:func:`seal_until_read` with the same label) opens then. Raises
    :class:`CheckFailed` naming the first part that does not hold and what the trace shows there.
    """
    name = f"check_reading[{label}]" if label else "check_reading"
    with _seal._check_reads():
        verdict = _check_reading(reading, trace, item, name)
    _seal.open_seal(reading_seal(item, label))
    return verdict


def _check_reading(reading: Reading, trace: Trace, item: str, name: str) -> str:
    """check_reading's verdict (run inside the check: the diagnosis of a sealed trace is the check's to read)."""
    form = _problems_with_form(reading)
    if form:
        _record(item, name, False)
        raise CheckFailed(f"Your reading is not complete: {form}.")
    trace = m.stepped(trace)  # the steps diagnose reads it by (found from what repeats where none is marked)
    findings = diagnose(trace)
    shown = _shown_patterns(findings)
    sg = findings.signals  # the figures the diagnosis carries: one computation, the same numbers it judged by
    problems = []
    # 1. the pattern
    if not shown:
        if reading.pattern not in ("gpu_bound",) and reading.pattern in EVIDENCE:
            problems.append(f"nothing in this trace costs enough to call it {reading.pattern}: "
                            + _what_the_trace_shows(sg, trace))
    elif reading.pattern not in [f.pattern for f in shown]:
        problems.append(f"{reading.pattern} is not what holds this loop back. What the trace shows: " + _what_the_trace_shows(sg, trace))
    # 2. the window
    window = window_problem(reading, trace)
    if window:
        problems.append(window)
    # 3. the figure that proves it
    allowed = EVIDENCE.get(reading.pattern, ())
    for fig, value in reading.evidence.items():
        if fig not in allowed:
            problems.append(f"{fig!r} does not prove {reading.pattern}; the figures that do: "
                            + "; ".join(f"{n} ({FIGURE_HOWTO[n]})" for n in allowed))
            continue
        want = sg.get(fig)
        if not isinstance(want, (int, float)) or not math.isfinite(want):
            problems.append(f"this trace has no {fig} ({FIGURE_HOWTO[fig]}): pick a figure the trace shows")
        elif not _close_figure(fig, float(value), float(want)):
            problems.append(f"{fig} = {value:g} does not match the trace{unit_slip(value, want)}; measure it again: "
                            f"{howto(fig)}")
    # 4. the cost: always held to the trace's figure, a finding or none (a gpu_bound cost of 100% on a trace whose GPU is
    # busy 64% of the step has no finding to hold it to, and is still wrong)
    mine = next((f for f in findings if f.pattern == reading.pattern), None)
    cost = cost_problem(reading, trace, sg, mine.cost if mine is not None else None)
    if cost:
        problems.append(cost)
    elif want_cost(reading.pattern, trace, sg, mine.cost if mine is not None else None) is None:
        problems.append(f"this trace has no figure to hold a {reading.pattern} cost to: {reading.pattern} does not show here")
    if problems:
        _record(item, name, False)
        raise CheckFailed("Not yet: " + " | ".join(problems[:3]) + ".")
    _record(item, name, True)
    # each cost named for what it is (what the fix would save): beside a summary's own share of the step (an idle
    # share, 47%) a bare "(45%)" read as a second, contradicting figure for the same thing
    second = "; ".join(f"{f.pattern} ({finding_cost_text(f) or 'no cost'}): {f.summary.rstrip('.')}"
                       for f in findings[:3]) or "nothing stood out"
    return f"passed: {name}. Second opinion, helpers.diagnose: {second}."  # summaries end in '.': one stop, at the end


def _what_the_trace_shows(sg: dict[str, Any], trace: Trace) -> str:
    """The trace's figures in words, without naming a pattern: the learner must still name it."""
    if not sg.get("has_gpu"):
        text = (f"the loop waits for its next batch {sg.get('cpu_data_wait_share', 0):.0%} of each step; "
                f"{sg.get('comm_exposed_share', 0):.0%} of it is exposed communication")
        if len(trace.ranks) > 1 and "imbalance_spread" in sg:  # a multi-rank job: how far apart the ranks compute
            per = m.rank_imbalance(trace)["per_rank"]
            if len(per):
                each = ", ".join(f"rank {int(r)} {c / 1e3:.1f} ms" for r, c in zip(per["rank"], per["compute_us"]))
                text += f"; the ranks compute {each} a step (spread {sg['imbalance_spread']:.0%})"
        return text
    idle = sg.get("gpu_idle_ms_per_step", {})
    words = {c: p.during for c, p in BY_CAUSE.items()}
    busiest = sorted(((v, k) for k, v in idle.items() if v > 0), reverse=True)[:2]
    idle_txt = ", ".join(f"{v:.2f} ms per step {words.get(k, k)}" for v, k in busiest) or "almost never"
    text = (f"the GPU is busy {sg.get('gpu_utilization', 0):.0%} of the step and idles {idle_txt}; "
            f"{sg.get('kernels_per_step', 0):.0f} kernels per step (median {sg.get('launch_median_kernel_us', 0):.1f} us), "
            f"{sg.get('sync_points_per_step', 0):.1f} host syncs per step")
    if "h2d_gb_per_s" in sg:  # their time only: the bandwidth and the memory kind are lab 01 Exercise 4's answer
        text += f", host-to-device copies {sg['h2d_ms_per_step']:.2f} ms per step"
    if "comm_exposed_share" in sg:
        text += f", {sg['comm_exposed_share']:.0%} of step time in exposed collectives, rank compute spread {sg['imbalance_spread']:.0%}"
    return text
