"""Lab 05: the workflow capstone, and lab 07's blind triage (studied between lab 04 and lab 05).

The triage checks judge the learner's :class:`~helpers.checks.Reading` of ten unlabelled H200
traces (``data/``, ``workload == "triage"``) from the trace itself (:func:`check_reading`), compare
its patterns with the answer key and, when the reading falls for one of the decoys, say what the
eager reading missed, in that trace's own figures. The key is in the package only as salted digests
and texts sealed with the right answer (``_triage_key``, written by tools/seal_answers.py from the
instructors' copy), so nothing here names a trace's answer or hands it out without a reading.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import metrics as m
from .. import seal as _seal
from .. import thresholds as th
from ..diagnosis import diagnose, signals
from ..model import Trace
from ..outputs import shipped_json
from . import _core, _proof, behaviour
from ._core import RESULTS_FILE, CheckFailed, _check, _close, _record, data_wait_share, learner_trace_problem, own_capture_problem  # noqa: F401
from ._sealed import digest, unseal
from .lab01 import _data_verdict, _data_wait_share, _timing_note, _uses_loader_workers  # noqa: F401
from .reading import (
    EVIDENCE,
    FIGURE_HOWTO,
    Reading,
    _close_figure,
    _problems_with_form,
    _to_us,
    check_reading,
    cost_problem,
    howto,
    want_cost,
    window_problem,
)
from .speed import speed_note, speed_verdict

#: The self-check items this lab earns, per track, and the checks of the learner's work each needs:
#: the triage of at least :data:`TRIAGE_NEEDED` traces (lab 07) and the capstone fix (lab 05).
# The credit this lab's exercises earn is declared in helpers.checks.exercise.EXERCISES.
TRIAGE_NEEDED = 8


# --- lab 05 ----------------------------------------------------------------------------------
def check_capstone(before: Trace, after: Trace, min_speedup: float, make_step=None) -> str:
    """The mystery loop: first what the learner's ``make_step(device)`` does (run here on the CPU: new
    batches of the dataset's rows every step, the model's weights updated); then no data or sync stall
    left, data wait down, syncs per step <= 0.2; last, the step never slower beyond the noise band.

    Judged on shares and counts. Where the machine cannot show the loader's gain (measured: too few cores
    for the learner's loader workers and the training process, a load average that fills every core) and
    the data-wait share falls less than a quiet machine shows, the loader's structure decides and the
    verdict says so; a wait that grew or stayed never passes, nor a step slower beyond the noise band, on
    any machine. The step times are reported beside the verdict (``min_speedup`` is what a quiet machine shows).
    """
    refused = own_capture_problem(after, before)
    if refused is None and not callable(make_step):
        refused = ("pass your step function too: check_capstone(before, after, MIN_SPEEDUP, my_mystery_step); the check "
                   "runs it to see that the loop still trains on the dataset's batches")
    made: list = []
    if refused is None:
        refused = behaviour.capstone_problem(make_step, made=made)
        refused = refused and refused[0].upper() + refused[1:] + "."
    if refused:
        return _check("workflow", "check_capstone", False, refused)
    workers = max((n for n in made if n is not None), default=None)  # the learner's loader(s), as their step made them
    found = [f.pattern for f in diagnose(after)]
    sa = m.sync_stats(after)
    key = "sync_points_per_step" if after.has_gpu else "syncing_ops_per_step"
    data_ok, evidence = _data_verdict(before, after, found, workers=workers)  # the same data verdict as lab 01's
    wb, wa = _data_wait_share(before), _data_wait_share(after)
    busy = _core._cores_busy(workers)
    if not data_ok and _uses_loader_workers(after) and busy and wa <= wb:
        # No spare core, measured (the load average, or too few cores for the workers): worker processes cannot
        # lower the wait share as far, only the loader's structure can be judged. Said so, never hidden; a wait
        # that grew never passes (on a machine with cores to spare it must fall PASS_DATA_WAIT_DROP x).
        data_ok = True
        evidence += (f" (not {th.PASS_DATA_WAIT_DROP:g}x lower: this machine cannot show the loader's gain, {busy}; so "
                     "the verdict rests on the batches coming from worker processes, with the wait no larger than before)")
    slower, paced = speed_verdict(before, after, workers)  # on any machine that has a core for each process
    ok = data_ok and "sync_stall" not in found and sa[key] <= 0.2 and not slower
    note = _timing_note(before, after, min_speedup, workers)
    _check("workflow", "check_capstone", ok,
           (f"{slower[0].upper()}{slower[1:]}. " if slower else "")
           + f"{evidence[0].upper()}{evidence[1:]}; {key.replace('_', ' ')} {sa[key]:.1f}; findings {found}. "
           "Fix the biggest gap first, re-profile, then the next one.")
    return (f"passed: check_capstone ({evidence}; {key.replace('_', ' ')} {sa[key]:.1f}; "
            f"{'; '.join(filter(None, (note, paced, speed_note(workers))))})")


# --- lab 07: blind triage --------------------------------------------------------------------
TRIAGE_IDS = ("t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9", "t10")
SOURCES = ("profiler", "nsys")


def triage_trace(trace_id: str, source: str = "profiler") -> Trace:
    """Triage trace ``trace_id`` (``"t1"`` ... ``"t10"``) over its steps: the PyTorch-profiler trace, or its Nsight
    Systems export (which marks none: its steps are the steady state's repeats, :func:`helpers.steady_state`)."""
    from ..course import DATA, recorded  # the course reads the manifest: only when a check needs a recording
    from ..readers import load

    _known(trace_id, source)
    if source == "profiler":
        return m.stepped(recorded("triage", trace_id))  # marked: the trace itself
    doc = shipped_json(DATA / "manifest.json")  # the H200 nsys pairs are listed under "recordings"
    for e in doc.get("recordings", []):
        if e.get("workload") == "triage" and e.get("variant") == trace_id and e.get("format") == "nsys-sqlite":
            return m.stepped(load(DATA / e["file"]))
    raise CheckFailed(f"no Nsight Systems export of triage trace {trace_id} in data/manifest.json; use source='profiler'")


def _known(trace_id: Any, source: str = "profiler") -> None:
    if trace_id not in TRIAGE_IDS:
        raise CheckFailed(f"{trace_id!r} is not a triage trace; the ids are {', '.join(TRIAGE_IDS)}")
    if source not in SOURCES:
        raise CheckFailed(f"source {source!r}: choose 'profiler' (the trace the lab draws) or 'nsys' (its Nsight Systems export)")


# What the eager reading of each decoy misses, in the trace's own figures ----------------------
def _steps(trace: Trace) -> int:
    return max(int((m.windows(trace)["step"] >= 0).sum()), 1)


def _busiest_range(trace: Trace, *causes: str) -> str:
    """The host range (NVTX / annotation, not a step marker) that overlaps the GPU's idle time most (the idle gaps
    blamed on one of ``causes``, if given)."""
    ev = trace.events
    g = m.idle_gaps(trace)
    if causes:
        g = g[g["cause"].isin(causes)]
    ann = ev[(ev["kind"] == "annotation") & ~ev["name"].str.startswith("ProfilerStep") & (ev["device"] < 0)]
    if g.empty or ann.empty:
        return "?"
    gs, ge = m.merge_intervals(g["start_us"].to_numpy(), g["end_us"].to_numpy())
    best = max(((float(m.overlap(gs, ge, grp["start_us"].to_numpy(), grp["end_us"].to_numpy()).sum()), name)
                for name, grp in ann.groupby("name")), default=(0.0, "?"))
    return best[1]


def _calls_per_step(trace: Trace, name: str) -> float:
    ev = trace.events
    return float(((ev["kind"] == "runtime") & (ev["name"] == name)).sum()) / _steps(trace)


def _streams(trace: Trace, kind: str) -> list[int]:
    ev = trace.events
    sel = ev[(ev["kind"] == kind) & (ev["device"] >= 0)]
    return sorted(int(s) for s in sel["stream"].dropna().unique())


def _harmless_sync(trace: Trace, sg: dict, reading: Reading) -> str:
    return (f"the host does wait in syncs ({sg['sync_points_per_step']:.1f} a step, {sg['host_blocked_ms_per_step']:.1f} ms "
            f"a step blocked), but it waits for a GPU that is busy {sg['gpu_utilization']:.0%} of the step: after a sync "
            f"returns the GPU idles only {sg['sync_stall_share']:.1%} of the step. A sync costs the GPU time it leaves idle, "
            "not the time the host spends waiting in it")


def _two_streams(trace: Trace, sg: dict, reading: Reading) -> str:
    ws, we = _to_us(trace, reading.window_ms)
    ev = trace.events
    k = ev[(ev["kind"] == "kernel") & (ev["device"] >= 0)]
    busy = {}
    for s, grp in k.groupby("stream"):
        us, ue = m.merge_intervals(grp["start_us"].to_numpy(), grp["end_us"].to_numpy())
        busy[int(s)] = float(m.overlap(us, ue, np.array([ws]), np.array([we])).sum()) / max(we - ws, 1e-9)
    order = sorted(busy, key=busy.get)
    idle_s, busy_s = (order[0], order[-1]) if len(order) > 1 else (order[0], order[0])
    return (f"white space on stream {idle_s} is not idle: stream {busy_s} runs kernels {busy[busy_s]:.0%} of your window "
            f"(stream {idle_s} {busy[idle_s]:.0%}). Counting every stream the GPU is busy {sg['gpu_utilization']:.0%} of the "
            "step. White space means idle only on a single stream: with several, read the union of their lanes")


def _overlapped_copies(trace: Trace, sg: dict, reading: Reading) -> str:
    cs, ks = _streams(trace, "memcpy"), _streams(trace, "kernel")
    return (f"the copies are there ({sg.get('h2d_ms_per_step', 0):.2f} ms a step, {sg.get('h2d_gb_per_s', 0):.0f} GB/s, "
            f"{sg.get('h2d_pageable_share', 0):.0%} of the bytes pageable), but they run on stream {', '.join(map(str, cs))} "
            f"while kernels run on stream {', '.join(map(str, ks))}: {sg.get('h2d_overlap', 0):.0%} of the copy time has a kernel "
            f"beside it, and only {sg.get('h2d_exposed_share', 0):.1%} of the step is a copy with nothing beside it. A copy "
            "costs only the time no kernel hides it")


def _host_code(trace: Trace, sg: dict, reading: Reading) -> str:
    return (f"the GPU idles {1 - sg['gpu_utilization']:.0%} of the step, but not while the host is in the DataLoader "
            f"({sg['host_data_wait_ms_per_step']:.2f} ms a step there) nor while it launches (the GPU idles "
            f"{sg['launch_idle_share']:.0%} of the step then, {sg['kernels_per_step']:.0f} kernels a step): the host is in its "
            f"own code, the '{_busiest_range(trace)}' range on the host lane (NumPy/Python work, not loading, not launching)")


def _graph_replay(trace: Trace, sg: dict, reading: Reading) -> str:
    return (f"{sg['kernels_per_step']:.0f} kernels a step, median {sg['launch_median_kernel_us']:.1f} us, yet the host "
            f"makes {_calls_per_step(trace, 'cudaGraphLaunch'):.0f} cudaGraphLaunch call a step and "
            f"{_calls_per_step(trace, 'cudaLaunchKernel'):.0f} cudaLaunchKernel calls: the kernels are replayed from one "
            f"CUDA Graph, and the GPU idles only {sg['launch_idle_share']:.0%} of the step while the host launches. Small "
            "kernels are launch overhead only when each one costs the host a launch")


def _not_the_costliest(trace: Trace, sg: dict, reading: Reading) -> str:
    idle = m.idle_cost_by_cause(trace)
    total = float(m.windows(trace)["dur_us"].sum())
    return (f"{reading.pattern} is here, but it is not the costliest problem: the GPU idles "
            f"{idle.get('data_wait', 0) / total:.0%} of the step while the host is in the '{_busiest_range(trace, 'data_wait')}' "
            f"range and {idle.get('sync', 0) / total:.0%} after syncs. Name the costliest first, then the next")


def _blocked_little(trace: Trace, sg: dict, reading: Reading) -> str:
    return (f"a sync returns once a step and the GPU idles after it, but the host was blocked in it only "
            f"{sg['host_blocked_ms_per_step']:.3f} ms a step ({sg['sync_blocked_share']:.2%} of the step): the "
            f"{sg['gpu_idle_ms_per_step'].get('sync', 0) + sg['gpu_idle_ms_per_step'].get('other', 0):.1f} ms "
            f"of idle GPU after it the host spends in its own code (the '{_busiest_range(trace, 'sync', 'other')}' range). Removing the "
            "sync saves at most the time the host waits in it")


def _copies_not_kernels(trace: Trace, sg: dict, reading: Reading) -> str:
    return (f"the GPU lane looks busy {sg['gpu_utilization']:.0%} of the step, but kernels run only "
            f"{sg['gpu_kernel_share']:.0%} of it: the rest is host-to-device copies ({sg.get('h2d_ms_per_step', 0):.2f} ms a "
            f"step at {sg.get('h2d_gb_per_s', 0):.1f} GB/s). Busy with copies is not busy computing")


Lesson = Callable[[Trace, dict, Reading], str]

#: What an eager misreading is told, by name (the sealed key says which reading of which trace gets which).
LESSONS: dict[str, Lesson] = {f.__name__: f for f in (_harmless_sync, _two_streams, _overlapped_copies, _host_code,
                                                     _graph_replay, _not_the_costliest, _blocked_little,
                                                     _copies_not_kernels)}


def _sealed_case(trace_id: str) -> dict:
    from ._triage_key import SEALED

    return SEALED[trace_id]


def _lesson_for(trace_id: str, misread: str) -> Lesson | None:
    """The lesson a reading that names ``misread`` gets on ``trace_id``, or None."""
    blob = _sealed_case(trace_id)["lessons"].get(digest(trace_id, "misread", misread))
    name = unseal(blob, trace_id, "misread", misread) if blob else None
    return LESSONS.get(name) if name else None


def _triage_passed() -> set[str]:
    from ..errors import TraceError
    from ..outputs import read_state_json

    try:  # the one bounded reader of state files: a FIFO here cannot block, a deep nesting cannot recurse
        results = read_state_json(RESULTS_FILE, _core.RESULTS_LIMIT, "self-check results file")
        checks = _proof.SIGNER.own_checks("workflow", results.get("workflow"))  # in selfcheck --run: what this kernel signed
    except (OSError, TraceError, AttributeError):
        return set()
    return {k[len("check_triage["):-1] for k, v in checks.items() if k.startswith("check_triage[") and v is True}


def _cost_of(trace: Trace, pattern: str, sg: dict) -> float | None:
    """``pattern``'s cost in ``trace`` as the lab computes it (checks.reading.cost_howto); None if it is not there."""
    f = next((f for f in diagnose(trace) if f.pattern == pattern), None)
    if f is None and pattern != "gpu_bound":
        return None
    return want_cost(pattern, trace, sg, f.cost if f else None)


def _part_problems(reading: Reading, trace: Trace, sg: dict) -> list[str]:
    """Window, figure and cost of a reading whose pattern is already settled (check_reading's tests)."""
    problems = []
    window = window_problem(reading, trace, f"{reading.pattern} window")
    if window:
        problems.append(window)
    for fig, value in reading.evidence.items():
        want = sg.get(fig)
        if fig not in EVIDENCE.get(reading.pattern, ()):
            problems.append(f"{fig!r} does not prove {reading.pattern}; the figures that do: "
                            + "; ".join(f"{n} ({FIGURE_HOWTO[n]})" for n in EVIDENCE.get(reading.pattern, ())))
        elif not isinstance(want, (int, float)) or not math.isfinite(want):
            problems.append(f"this trace has no {fig} ({FIGURE_HOWTO[fig]}): pick a figure the trace shows")
        elif not _close_figure(fig, float(value), float(want)):
            problems.append(f"{fig} = {value:g} does not match the trace; measure it again: {howto(fig)}")
    cost = cost_problem(reading, trace, sg, _cost_of(trace, reading.pattern, sg))
    if cost:
        problems.append(cost)
    return problems


def check_triage(trace_id: str, reading: Reading | list[Reading], *more: Reading, source: str = "profiler") -> str:
    """Your reading of triage trace ``trace_id``: the costliest problem first, then any other it has.

    ``reading`` is one :class:`Reading`, or a list of them (the costliest first) for a loop with more
    than one problem; further readings may also follow as arguments.

    Each reading is verified from the trace (:func:`check_reading` for the first: pattern, window,
    figure, cost); the patterns named must be the trace's problems; a reading that falls for the
    trace's decoy is told what the eager reading missed. ``source="nsys"`` checks against the
    Nsight Systems export of the same command (its own time axis). Credit: :data:`TRIAGE_NEEDED`
    traces passed.
    """
    _known(trace_id, source)
    name = f"check_triage[{trace_id}]"
    with _seal._check_reads():  # the check reads the sealed trace; the learner's helpers open once it passes
        verdict = _check_triage(trace_id, name, reading, *more, source=source)
    _seal.open_seal(name)
    return verdict


def _check_triage(trace_id: str, name: str, reading: Reading | list[Reading], *more: Reading, source: str) -> str:
    case = _sealed_case(trace_id)
    trace = triage_trace(trace_id, source)
    readings = (*(reading if isinstance(reading, (list, tuple)) else (reading,)), *more)
    if not readings:
        readings = (None,)

    def fail(message: str) -> None:
        _record("workflow", name, False)
        _record("workflow", "check_triage", len(_triage_passed()) >= TRIAGE_NEEDED)
        raise CheckFailed(f"Not yet ({trace_id}): {message}.")

    for r in readings:
        form = _problems_with_form(r)
        if form:
            fail(f"your reading is not complete: {form}")
    sg = signals(trace)
    first = readings[0]
    first_right = digest(trace_id, "first", first.pattern) == case["first"]
    if not first_right:
        lesson = _lesson_for(trace_id, first.pattern)
        if lesson:
            fail(lesson(trace, sg, first))
    try:
        verdict = check_reading(first, trace, "workflow", f"triage {trace_id}")
    except CheckFailed as exc:
        fail(str(exc).removeprefix("Not yet: ").rstrip("."))
    if not first_right:  # check_reading took it (a near-tie): something else costs more
        mine = _cost_of(trace, first.pattern, sg)
        fail(f"{first.pattern} shows in this trace" + (f" ({mine:.0%} of step time)" if mine is not None else "")
             + ", but it is not the costliest problem: measure what else leaves the GPU idle, and name the costliest first")
    if first.pattern == "gpu_bound" and not any(f.pattern == "gpu_bound" for f in diagnose(trace)):
        problems = _part_problems(first, trace, sg)  # check_reading had no finding to hold the cost to
        if problems:
            fail(" | ".join(problems[:3]))
    after = json.loads(unseal(case["after"], trace_id, "first", first.pattern) or "{}")
    others = set(after.get("more", ()))
    named = [first.pattern]
    for r in readings[1:]:
        if r.pattern in named:
            fail(f"you named {r.pattern} twice: one reading a problem")
        if digest(trace_id, "also", r.pattern) not in others:
            lesson = _lesson_for(trace_id, r.pattern)
            fail(lesson(trace, sg, r) if lesson else
                 f"nothing else in this trace costs enough to call it {r.pattern}: what holds it back is what your first reading names")
        problems = _part_problems(r, trace, sg)
        if problems:
            fail(" | ".join(problems[:3]))
        named.append(r.pattern)
    if len(named) - 1 < len(others):
        fail(after.get("second") or f"this trace has another problem after {first.pattern}: look again")
    shown = json.loads(unseal(case["passed"], trace_id, "all", first.pattern, *sorted(named[1:])) or "{}")
    _record("workflow", name, True)
    done = _triage_passed()
    _record("workflow", "check_triage", len(done) >= TRIAGE_NEEDED)
    second = verdict.split("Second opinion, ", 1)[-1] if "Second opinion" in verdict else ""
    extra = f" The look-alike in this trace: {shown['decoy']}." if shown.get("decoy") else ""
    extra += f" Note: {shown['note']}" if shown.get("note") else ""
    return (f"passed: {name} ({len(done)} of {len(TRIAGE_IDS)} traces triaged; the workflow item needs {TRIAGE_NEEDED}). "
            f"Second opinion, {second}{extra}")


def triage_lesson(trace_id: str, misread: str, source: str = "profiler") -> str:
    """What a reading that names ``misread`` on ``trace_id`` is told when it is one of the trace's eager
    misreadings (for the instructor pack and the tests), else ''. It never says what the right reading is."""
    _known(trace_id, source)
    lesson = _lesson_for(trace_id, misread)
    if lesson is None:
        return ""
    trace = triage_trace(trace_id, source)
    origin_window = (0.0, float(m.windows(trace)["dur_us"].iloc[0]) / 1e3)
    with _seal._check_reads():  # a misreading's lesson, which names no answer
        return lesson(trace, signals(trace), Reading(misread, origin_window, {"gpu_bound_busy": 0.5}, 0.5))
