"""Readings that need reading: sealed traces (helpers.seal), the window on the pattern, the cost always checked."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import DATA, ROOT, TRIAGE_KEY

from helpers import checks, diagnose, seal
from helpers.checks import reading as rd
from helpers.checks import triage_trace
from helpers.course import recorded
from helpers.diagnosis import locate, signals
from helpers.errors import TraceError
from helpers.plots import time_origin_us
from helpers.readers import load

pytestmark = pytest.mark.sealed


def _helpers(t, pattern: str = "data_stall"):
    """Every helper that would write a reading for the learner, called on ``t``."""
    yield "diagnose", lambda: diagnose(t)
    yield "signals", lambda: signals(t)
    yield "locate", lambda: locate(t, pattern)
    yield "pattern_intervals", lambda: checks.pattern_intervals(t, pattern)
    yield "want_cost", lambda: rd.want_cost(pattern, t, {})
    r = checks.Reading(pattern, (0.0, 1.0), {"data_stall_share": 0.5}, 0.5)
    yield "cost_problem", lambda: rd.cost_problem(r, t, {})
    yield "window_problem", lambda: rd.window_problem(r, t)


def _refused(t, label: str) -> None:
    for name, call in _helpers(t):
        with pytest.raises(seal.SealedTrace) as exc:
            call()
        msg = str(exc.value)
        assert "\n" not in msg and "waits for your reading" in msg and label in msg, (name, msg)
        assert isinstance(exc.value, TraceError)  # one line in Jupyter and on the command line, exit 2


def _edits(t):
    """The obvious ways round a seal keyed on the object or the file."""
    ev = t.events
    yield "the same file loaded again", load(t.source)
    yield "a copy of the trace", copy.deepcopy(t)
    renamed = ev.copy()
    renamed["name"] = "x"
    yield "every event renamed", dataclasses.replace(t, events=renamed)
    shifted = ev.copy()
    shifted["start_us"] += 12_345.6
    shifted["end_us"] += 12_345.6
    yield "every event shifted in time", dataclasses.replace(t, events=shifted)
    yield "every 20th event dropped", dataclasses.replace(t, events=ev.iloc[np.arange(len(ev)) % 20 != 0].reset_index(drop=True))


@pytest.mark.parametrize("trace_id", [f"t{k}" for k in range(1, 11)])
def test_diagnose_and_the_reading_helpers_refuse_a_triage_trace_and_its_copies(trace_id):
    """The shortcut: diagnose, signals, pattern_intervals and want_cost wrote a passing reading of all ten triage
    traces. Each now answers in one line that the reading comes first, on the trace and its obvious stand-ins."""
    t = triage_trace(trace_id)
    _refused(t, f"check_triage[{trace_id}]")
    for what, edited in _edits(t):
        with pytest.raises(seal.SealedTrace):
            diagnose(edited)
        assert seal.sealed_by(edited) == f"check_triage[{trace_id}]", what
    _refused(recorded("triage", trace_id), f"check_triage[{trace_id}]")
    _refused(triage_trace(trace_id, "nsys"), f"check_triage[{trace_id}]")  # its Nsight Systems export too


def _triage_reading(trace_id: str) -> list[checks.Reading]:
    """The instructors' reading of a triage trace, measured as a careful learner does (inside a check: the oracle)."""
    t = triage_trace(trace_id)
    out = []
    with seal._check_reads():
        found = diagnose(t)
        sg = found.signals
        o = time_origin_us(m_stepped(t))
        for pattern in TRIAGE_KEY[trace_id]["patterns"]:
            f = next(f for f in found if f.pattern == pattern)
            fig = checks.EVIDENCE[pattern][0]
            cost = rd.want_cost(pattern, t, sg, f.cost)
            out.append(checks.Reading(pattern, ((f.window[0] - o) / 1e3, (f.window[1] - o) / 1e3), {fig: float(sg[fig])}, cost))
    return out


def m_stepped(t):
    from helpers import metrics

    return metrics.stepped(t)


def test_a_passing_triage_reading_opens_that_trace_only():
    with pytest.raises(seal.SealedTrace):
        diagnose(triage_trace("t4"))
    assert checks.check_triage("t4", _triage_reading("t4")).startswith("passed")
    assert [f.pattern for f in diagnose(triage_trace("t4"))]  # the second opinion, now open
    assert checks.pattern_intervals(recorded("triage", "t4"), "data_stall")[0].size
    with pytest.raises(seal.SealedTrace):
        diagnose(triage_trace("t8"))


def test_a_failing_triage_reading_keeps_the_seal():
    wrong = checks.Reading("sync_stall", (91.2, 118.1), {"sync_points_per_step": 1.0}, 0.5)
    with pytest.raises(checks.CheckFailed):
        checks.check_triage("t4", wrong)
    with pytest.raises(seal.SealedTrace):
        diagnose(triage_trace("t4"))


def test_a_labs_trace_is_sealed_until_its_reading_passes():
    t = rd.seal_until_read(recorded("data_stall", "broken"), "data", "data")
    _refused(recorded("data_stall", "broken"), "check_reading[data] for data")  # loaded again: still sealed
    for _what, edited in _edits(t):
        with pytest.raises(seal.SealedTrace):
            signals(edited)
    with seal._check_reads():
        f = diagnose(t)[0]
        sg = signals(t)
    o = time_origin_us(m_stepped(t))
    reading = checks.Reading("data_stall", ((f.window[0] - o) / 1e3, (f.window[1] - o) / 1e3),
                             {"data_stall_share": float(sg["data_stall_share"])}, float(sg["data_stall_share"]))
    with pytest.raises(checks.CheckFailed):  # a wrong reading opens nothing
        checks.check_reading(dataclasses.replace(reading, cost=0.1), t, "data", "data")
    with pytest.raises(seal.SealedTrace):
        diagnose(t)
    out = checks.check_reading(reading, t, "data", "data")
    assert out.startswith("passed") and "Second opinion" in out
    assert diagnose(recorded("data_stall", "broken"))  # open now, as the lab's second opinion


def test_a_restarted_kernel_finds_the_labs_trace_still_sealed_and_a_passed_reading_still_passed():
    """The seal is kept in the working folder: a new process that skips the cell that seals the trace still finds it
    sealed; another lab's reading of the same label (labs 02 and 03 both read a 'broken loop') opens nothing here."""
    rd.seal_until_read(recorded("sync_stall", "broken"), "sync", "broken loop")
    seal._reset()  # what a restarted kernel knows: nothing in memory
    with pytest.raises(seal.SealedTrace, match="broken loop"):
        diagnose(recorded("sync_stall", "broken"))
    seal.open_seal(rd.reading_seal("launch", "broken loop"))  # lab 02's reading passed in the same folder
    with pytest.raises(seal.SealedTrace):
        diagnose(recorded("sync_stall", "broken"))
    seal.open_seal(rd.reading_seal("sync", "broken loop"))
    seal._reset()
    assert diagnose(recorded("sync_stall", "broken"))  # passed, and kept passed
    rd.seal_until_read(recorded("sync_stall", "broken"), "sync", "broken loop")  # the lab's cell run again
    assert diagnose(recorded("sync_stall", "broken"))


def test_a_users_own_traces_are_never_sealed():
    """Nothing but the triage recordings is sealed unless a lab seals it: every other recording in data/ (other
    people's loops as far as the seal can tell) diagnoses as before, in the API and on the command line."""
    doc = json.loads((DATA / "manifest.json").read_text())
    files = sorted({e["file"] for section in ("traces", "recordings") for e in doc[section]
                    if isinstance(e, dict) and "file" in e and e.get("workload") not in ("triage", "published")
                    and not e["file"].endswith(".pickle.gz")})
    read = 0
    for f in files:
        try:
            t = load(DATA / f)
        except TraceError:  # a memory snapshot or a measurement file beside the traces
            continue
        read += 1
        assert seal.sealed_by(t) is None, f
        held = max(seal.share_held(t, s.sketch) for s in seal._recorded_seals())
        assert held < seal.MATCH, (f, held)
    assert read > 40
    out = subprocess.run([sys.executable, "-m", "helpers", "diagnose", str(DATA / "data_stall__broken__h200.json.gz")],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and "data_stall" in out.stdout
    cli = subprocess.run([sys.executable, "-m", "helpers", "diagnose", str(DATA / "triage__t4__h200.json.gz")],
                         capture_output=True, text=True, cwd=ROOT)
    assert cli.returncode == 2 and "waits for your reading" in cli.stderr and cli.stderr.count("\n") == 1


def test_the_triage_seals_are_those_of_the_recordings_in_data():
    out = subprocess.run([sys.executable, "tools/seal_traces.py", "--check"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


# --- the window lies on the pattern ------------------------------------------------------------
LAB_READINGS = [("data_stall", "broken", "h200", "data_stall"), ("h2d_copy", "broken", "h200", "h2d_copy"),
                ("launch_overhead", "broken", "h200", "launch_overhead"), ("sync_stall", "broken", "h200", "sync_stall"),
                ("communication", "manual", "cpu", "communication"), ("communication", "imbalance", "cpu", "load_imbalance"),
                ("mystery", "broken", "h200", "data_stall"), ("host_bound", "broken", "h200", "host_bound")]


def _right_but_window(t, pattern: str, window_ms) -> checks.Reading:
    with seal._check_reads():
        sg = signals(t)
        f = next((f for f in diagnose(t) if f.pattern == pattern), None)
        fig = next(n for n in checks.EVIDENCE[pattern] if isinstance(sg.get(n), (int, float)))
        return checks.Reading(pattern, window_ms, {fig: float(sg[fig])}, rd.want_cost(pattern, t, sg, f.cost if f else None))


@pytest.mark.parametrize("workload,variant,tag,pattern", LAB_READINGS)
def test_a_whole_step_around_the_pattern_is_not_a_window_on_it(workload, variant, tag, pattern):
    """'The second step, start to end' with the right pattern, figure and cost: refused on every lab trace, with what
    the window shows and where the pattern's stretch is."""
    t = m_stepped(recorded(workload, variant, tag))
    o = time_origin_us(t)
    second = t.steps.sort_values("start_us").iloc[1]
    whole = ((second.start_us - o) / 1e3, (second.end_us - o) / 1e3)
    with pytest.raises(checks.CheckFailed, match="not at the step around it|most of a window"):
        checks.check_reading(_right_but_window(t, pattern, whole), t, "data", "a shortcut")  # a label no lab has: judged, never signed


@pytest.mark.parametrize("workload,variant,tag,pattern", LAB_READINGS)
def test_a_window_on_the_patterns_longest_stretch_passes(workload, variant, tag, pattern):
    t = m_stepped(recorded(workload, variant, tag))
    o = time_origin_us(t)
    with seal._check_reads():
        s, e = checks.pattern_intervals(t, pattern)
    i = int(np.argmax(e - s))
    r = _right_but_window(t, pattern, ((s[i] - o) / 1e3, (e[i] - o) / 1e3))
    assert rd.window_problem(r, t) is None


def test_the_cost_is_checked_when_the_diagnosis_has_no_finding(monkeypatch):
    """A gpu_bound cost of 100% on a trace whose GPU is busy 64% of the step, with no finding to hold it to."""
    from helpers.diagnosis import Diagnosis

    t = m_stepped(recorded("host_bound", "fixed"))
    with seal._check_reads():
        real = diagnose(t)
        busy = float(signals(t)["gpu_bound_busy"])
        cost = rd.want_cost("gpu_bound", t, real.signals)
    assert 0.6 < busy < 0.7 and cost is not None
    monkeypatch.setattr(rd, "diagnose", lambda trace: Diagnosis([], real.signals, real.steady))
    o = time_origin_us(t)
    second = t.steps.sort_values("start_us").iloc[1]
    window = ((second.start_us - o) / 1e3, (second.end_us - o) / 1e3)
    with pytest.raises(checks.CheckFailed, match=r"gpu_bound cost of 100% of step time is off .*the share of step time a fix saves"):
        checks.check_reading(checks.Reading("gpu_bound", window, {"gpu_bound_busy": busy}, 1.0), t, "data", "a shortcut")
    assert checks.check_reading(checks.Reading("gpu_bound", window, {"gpu_bound_busy": busy}, cost), t, "data",
                                "a shortcut").startswith("passed")


# --- lab 00: the gap exercises need reading -----------------------------------------------------
def test_lab00_gap_helpers_answer_that_the_exercise_comes_first():
    from helpers import metrics, plots

    t = checks.seal_gaps(recorded("sync_stall", "broken"))
    for trace in (t, recorded("sync_stall", "broken"), copy.deepcopy(t)):
        for call in (metrics.idle_gaps, metrics.gpu_utilization, metrics.gpu_busy, metrics.idle_by_cause,
                     metrics.idle_cost_by_cause, diagnose):
            with pytest.raises(seal.SealedTrace, match="check_longest_gap"):
                call(trace)
    plots.gap_histogram(t)  # the course's own views still draw it: the learner reads them
    plots.timeline(t, step=1)
    assert metrics.idle_gaps(recorded("data_stall", "broken")).size  # any other trace: as ever
    # Exercise 4: one helper call is refused on the lab's trace, in one line naming what to do
    with pytest.raises(checks.CheckFailed, match="read it off the timeline|compute it from trace.events"):
        checks.check_gpu_idle_share(lambda tr: 1 - metrics.gpu_utilization(tr), t)
    # Exercise 5: read, then checked; a reading within 10% passes, and the helpers open once both passed
    with seal._check_reads():
        longest = float(metrics.idle_gaps(t)["dur_us"].max() / 1e3)
    assert checks.check_longest_gap(round(longest * 1.05, 1), t).startswith("passed")
    with pytest.raises(seal.SealedTrace):
        metrics.idle_gaps(t)  # exercise 4 not passed yet

    def idle_share(tr):
        ev = tr.events
        gpu = ev[ev["kind"].isin(["kernel", "memcpy", "memset", "collective"]) & (ev["device"] >= 0)]
        s, e = metrics.merge_intervals(gpu["start_us"].to_numpy(), gpu["end_us"].to_numpy())
        w = metrics.windows(tr)
        busy = float(metrics.overlap(s, e, w["start_us"].to_numpy(), w["end_us"].to_numpy()).sum())
        return 1 - busy / float(w["dur_us"].sum())

    assert checks.check_gpu_idle_share(idle_share, t).startswith("passed")
    assert metrics.idle_gaps(t).size and diagnose(t)


def test_every_labs_reading_trace_is_sealed_before_it_is_read():
    """Each solution that checks a reading of a trace seals that trace under the same label first (the lab's text says
    so), so helpers.diagnose cannot write the reading the exercise asks for."""
    found = 0
    for nb in sorted((ROOT / "solutions").glob("*.ipynb")):
        code = ["".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
        text = "\n".join(code)
        for trace, item, label in re.findall(r'check_reading\(\w+, (\w+), "(\w+)", "([^"]+)"\)', text):
            found += 1
            sealed = text.find(f'seal_until_read({trace}, "{item}", "{label}")')
            assert 0 <= sealed < text.find('check_reading(', sealed), (nb.name, trace, label)
        md = "\n".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "markdown")
        if "check_reading(" in text:
            assert "The reading comes first" in md and "The window lies on the pattern" in md, nb.name
    assert found >= 7


def test_lab00s_figure_seal_stays_in_its_kernel():
    """Labs share the working folder: lab 00's gap seal on the sync-stall recording must not hold the metrics lab 03
    measures that recording with (a restarted kernel, here: the memory forgotten, the folder's file read)."""
    from helpers import metrics

    checks.seal_gaps(recorded("sync_stall", "broken"))
    seal._reset()
    assert 0 < metrics.gpu_utilization(recorded("sync_stall", "broken")) < 1
