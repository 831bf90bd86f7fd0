"""Blind triage (lab 07) and lab 05's own-loop template.

check_triage passes the truthful reading of every trace (both formats), fails the eager misreading of
each decoy with the message that teaches it, fails the stub; credit needs 8 traces; the recorded
truth agrees with the trace except where the check says why; the own-loop cell writes its report
without clobbering.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import ROOT, TRIAGE_KEY, as_learners

from helpers import checks, diagnose
from helpers import metrics as m
from helpers.checks import _core, lab05
from helpers.checks.reading import want_cost
from helpers.diagnosis import signals
from helpers.plots import time_origin_us
from helpers.selfcheck import item_status


def _ms(trace, a_us: float, b_us: float) -> tuple[float, float]:
    o = time_origin_us(trace)
    return (a_us - o) / 1e3, (b_us - o) / 1e3


def _truthful(trace, pattern: str) -> checks.Reading:
    """The reading a careful learner gives for ``pattern``: where it shows, a figure, its cost."""
    sg = signals(trace)
    fig = checks.EVIDENCE[pattern][0]
    f = next((f for f in diagnose(trace) if f.pattern == pattern), None)
    if f is not None and f.window:
        window = _ms(trace, *f.window)
    else:  # nothing over the diagnosis's bars (triage t3's profiler trace): one step
        wins = m.windows(m.stepped(trace))  # an nsys export without step ranges: the steady state's repeats
        w = wins.iloc[min(1, len(wins) - 1)]
        window = _ms(trace, w["start_us"], w["end_us"])
    # the cost a learner measures (the pattern's cost figure, checks.cost_howto), not diagnose's what-if of the fix
    cost = float(sg["gpu_kernel_share"]) if pattern == "gpu_bound" else want_cost(pattern, trace, sg, f.cost if f else None)
    return checks.Reading(pattern, window, {fig: float(sg[fig])}, cost)


def _readings(trace_id: str, source: str):
    t = lab05.triage_trace(trace_id, source)
    return [_truthful(t, p) for p in TRIAGE_KEY[trace_id]["patterns"]]


@pytest.mark.parametrize("source", lab05.SOURCES)
@pytest.mark.parametrize("trace_id", lab05.TRIAGE_IDS)
def test_truthful_reading_passes(trace_id, source):
    out = checks.check_triage(trace_id, *_readings(trace_id, source), source=source)
    assert out.startswith(f"passed: check_triage[{trace_id}]") and "Second opinion" in out
    # every cost in the second opinion says what it is: a bare "(45%)" beside a summary's "idles 47%" read as two
    # figures for one thing
    opinion = re.split(r" The look-alike| Note:", out.split("Second opinion, helpers.diagnose: ", 1)[1])[0]
    assert not re.search(r"\(\d+%\)", opinion), opinion
    assert "of the step)" in opinion or "nothing stood out" in opinion, opinion
    # a pass shows the learner's lesson, never the key's authoring notes (what the loop was built to show)
    assert "built to show" not in out and "recorded truth" not in out and "recording of 20" not in out, out


def test_the_recorded_truth_agrees_with_the_trace_or_the_check_says_why():
    for trace_id, case in TRIAGE_KEY.items():
        truth, patterns, note = case["recorded_patterns"], case["patterns"], case["note"]
        # the costliest problem is the one the loop was built to show, unless the note says which the trace shows instead
        assert patterns[0] == truth[0] or (note and truth[0] in note and patterns[0] in note), trace_id
        if patterns != truth:
            assert note and all(p in note for p in set(truth) - set(patterns)), trace_id
        for source in lab05.SOURCES:
            found = [f.pattern for f in diagnose(lab05.triage_trace(trace_id, source))]
            for p in patterns:
                # every pattern the check asks for is one the diagnosis finds, except where the note says why
                assert p in found or (p == "gpu_bound" and "names nothing" in note), (trace_id, source, p, found)


def test_the_sealed_key_matches_the_instructors_key_and_opens_only_for_the_answer():
    import subprocess
    import sys

    from helpers.checks._sealed import digest, unseal
    from helpers.checks._triage_key import SEALED

    assert subprocess.run([sys.executable, str(ROOT / "tools" / "seal_answers.py"), "--check"]).returncode == 0
    for trace_id, case in TRIAGE_KEY.items():
        first, *more = case["patterns"]
        sealed = SEALED[trace_id]
        assert sealed["first"] == digest(trace_id, "first", first)
        wrong = next(p for p in checks.EVIDENCE if p not in case["patterns"])
        assert unseal(sealed["after"], trace_id, "first", wrong) is None
        assert json.loads(unseal(sealed["after"], trace_id, "first", first))["more"] == [digest(trace_id, "also", p) for p in more]
        shown = json.loads(unseal(sealed["passed"], trace_id, "all", first, *sorted(more)))
        assert shown == {"decoy": case["decoy"], "note": case.get("lesson", "")}  # the learner's lesson; the key's note is for instructors
        # one lesson entry per pattern: none is missing, so the right one is not the one left out
        from helpers.diagnosis import PATTERNS

        assert set(sealed["lessons"]) == {digest(trace_id, "misread", p) for p in PATTERNS}


def test_no_function_hands_out_a_triage_answer():
    for name in ("TRIAGE", "manifest_truth", "Case"):
        assert not hasattr(lab05, name), name
    assert all(lab05.triage_lesson(t, p) == "" for t, c in TRIAGE_KEY.items() for p in c["patterns"][:1] if "*" not in c["lessons"])


def _step_window(t, k: int = 1):
    wins = m.windows(t)
    w = wins.iloc[min(k, len(wins) - 1)]
    return _ms(t, w["start_us"], w["end_us"])


def _eager(trace_id: str) -> tuple:
    """The eager misreading of each decoy, and the words its message must teach."""
    t = lab05.triage_trace(trace_id)
    sg = signals(t)
    w = _step_window(t)
    if trace_id == "t1":
        sync = t.events[m.is_sync_call(t)].iloc[0]
        return (checks.Reading("sync_stall", _ms(t, sync["start_us"], sync["end_us"]), {"sync_points_per_step": 0.2}, 0.45),), \
            "waits for a GPU that is busy"
    if trace_id == "t2":
        return (checks.Reading("data_stall", w, {"data_stall_share": 0.8}, 0.8),), "not while the host is in the DataLoader"
    if trace_id == "t3":
        return (checks.Reading("launch_overhead", w, {"kernels_per_step": sg["kernels_per_step"]}, 0.2),), "replayed from one CUDA Graph"
    if trace_id == "t5":
        return (checks.Reading("host_bound", w, {"host_bound_idle_share": 0.5}, 0.5),), "white space on stream"
    if trace_id == "t6":
        c = t.events[t.events["kind"] == "memcpy"].iloc[0]
        return (checks.Reading("h2d_copy", _ms(t, c["start_us"], c["end_us"]), {"h2d_ms_per_step": sg["h2d_ms_per_step"]}, 0.3),), \
            "costs only the time no kernel hides it"
    if trace_id == "t7":  # the 'report' range's sync every step: it costs nothing on this recording
        return (checks.Reading("sync_stall", w, {"sync_points_per_step": sg["sync_points_per_step"]}, 0.2),), \
            "not what holds this loop back"
    if trace_id == "t9":
        return (checks.Reading("gpu_bound", w, {"gpu_bound_busy": sg["gpu_bound_busy"]}, 0.97),), "Busy with copies"
    if trace_id == "t10":
        return (_truthful(t, "host_bound"), checks.Reading("sync_stall", w, {"sync_points_per_step": 1.0}, 0.5)), \
            "blocked in it only"
    raise KeyError(trace_id)


@pytest.mark.parametrize("trace_id", ["t1", "t2", "t3", "t5", "t6", "t7", "t9", "t10"])
def test_eager_misreading_of_each_decoy_fails_with_its_lesson(trace_id):
    readings, words = _eager(trace_id)
    with pytest.raises(checks.CheckFailed, match=words):
        checks.check_triage(trace_id, *readings)


def test_two_problems_need_both_readings():
    first = _readings("t7", "profiler")[0]
    with pytest.raises(checks.CheckFailed, match="this loop has two"):
        checks.check_triage("t7", first)
    with pytest.raises(checks.CheckFailed, match=f"named {first.pattern} twice"):
        checks.check_triage("t7", [first, first])
    assert checks.check_triage("t7", _readings("t7", "profiler")).startswith("passed")  # a list, as the lab hands it in


def test_a_wrong_window_or_cost_fails_even_with_the_right_pattern():
    good = _readings("t4", "profiler")[0]
    with pytest.raises(checks.CheckFailed, match="cost of"):
        checks.check_triage("t4", checks.Reading(good.pattern, good.window_ms, good.evidence, 0.05))
    good3 = _readings("t3", "profiler")[0]  # the case with no finding: the check holds the cost itself
    with pytest.raises(checks.CheckFailed, match="cost of"):
        checks.check_triage("t3", checks.Reading("gpu_bound", good3.window_ms, good3.evidence, 0.2))


def test_the_stub_and_bad_input_fail():
    with pytest.raises(checks.CheckFailed, match="not complete"):
        checks.check_triage("t1", None)
    with pytest.raises(checks.CheckFailed, match="not complete"):
        checks.check_triage("t1", checks.Reading("gpu_bound", (0.0, 1.0)))
    with pytest.raises(checks.CheckFailed, match="not a triage trace"):
        checks.check_triage("t99", _readings("t1", "profiler")[0])


def test_credit_needs_eight_traces():
    for k, trace_id in enumerate(lab05.TRIAGE_IDS[:8]):
        checks.check_triage(trace_id, *_readings(trace_id, "profiler"))
        results = json.loads(Path(checks.RESULTS_FILE).read_text())["workflow"]["checks"]
        assert results["check_triage"] is (k == 7), (trace_id, results)
    done, missing = item_status("workflow", json.loads(Path(checks.RESULTS_FILE).read_text())["workflow"])
    assert not done and missing == ["check_reading[mystery]", "check_capstone"]
    with pytest.raises(checks.CheckFailed):  # a wrong reading of a passed trace takes it back
        checks.check_triage("t1", *_eager("t1")[0])
    assert json.loads(Path(checks.RESULTS_FILE).read_text())["workflow"]["checks"]["check_triage"] is False


def _own_loop_cells() -> list[str]:
    nb = json.loads((ROOT / "solutions" / "05_workflow_capstone.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    start = next(i for i, s in enumerate(cells) if s.startswith("# Your own loop"))
    return cells[start:start + 2]


def test_own_loop_template_writes_its_report_without_clobbering(tmp_path):
    import torch

    def tiny(seed: int):
        torch.manual_seed(seed)
        w = torch.randn(32, 32)
        opt = torch.optim.SGD([w.requires_grad_()], lr=0.01)

        def step(i: int) -> None:
            from helpers import annotate

            with annotate("forward"):
                loss = (torch.randn(16, 32) @ w).square().mean()
            with annotate("backward"):
                loss.backward()
            with annotate("optimizer"):
                opt.step()
                opt.zero_grad()
        return step

    template, report = _own_loop_cells()
    assert "my_step_before" in template and "write_output" in report
    env = {"__name__": "own_loop", "device": "cpu", "my_mystery_step": lambda device: tiny(2),
           "mystery": type("Loops", (), {"make_step": staticmethod(lambda variant, device: tiny(1))})}
    exec(template, env)  # the learner's cell as shipped (here its lab loops are tiny CPU steps)
    env.update(STEPS=3, WARMUP=1)
    exec("import helpers\nfrom helpers import metrics, plots", env)
    first = Path(env["REPORT"])
    first.parent.mkdir(parents=True, exist_ok=True)
    first.write_text("the learner's earlier report\n")
    exec(report, env)
    exec(report, env)
    assert first.read_text() == "the learner's earlier report\n"
    written = sorted(p.name for p in first.parent.glob(f"{first.stem}*.md"))
    assert written == [f"{first.stem}-2.md", f"{first.stem}-3.md", first.name], written
    text = (first.parent / f"{first.stem}-2.md").read_text()
    assert "before" in text and "after" in text and "step" in text
    assert (first.parent / f"{first.stem}-2-timelines.png").exists()


def test_capstone_on_a_busy_machine_rests_on_the_loaders_structure(monkeypatch):
    from helpers.course import recorded

    monkeypatch.setattr(_core, "_cores_busy", lambda workers=None: "load average 3.0 on 2 cores")
    from helpers.model import Trace

    def as_mine(t):  # the recorded pair standing in for the learner's own captures
        from conftest import own_capture as _stamp  # stands in for helpers.capture in this process

        return _stamp(Trace(t.events, "runs/mine/trace.json.gz", t.format, dict(t.metadata)))

    broken, fixed = (as_mine(recorded("mystery", v, "cpu")) for v in ("broken", "fixed"))
    from test_fake_fixes import real_mystery_step  # the check runs the learner's step first

    assert checks.check_capstone(broken, fixed, 1.3, real_mystery_step).startswith("passed")
    with pytest.raises(checks.CheckFailed, match="Data wait"):  # no worker processes: busy or not, not fixed
        checks.check_capstone(broken, as_learners(broken), 1.3, real_mystery_step)


# --- lab 07's reading rules, as the lab states them -----------------------------------------------
def test_t7_figures_are_what_the_lab_named_helpers_compute():
    from helpers.checks.reading import FIGURE_HELPER

    t = lab05.triage_trace("t7")
    readings = _readings("t7", "profiler")
    for r in readings:
        fig = checks.EVIDENCE[r.pattern][0]
        value = float(eval(FIGURE_HELPER[fig], {"metrics": m, "t": t}))
        assert value == pytest.approx(signals(t)[fig], rel=1e-9), fig
    first, second = readings
    fig = checks.EVIDENCE[first.pattern][0]
    wrong = checks.Reading(first.pattern, first.window_ms, {fig: first.evidence[fig] * 1.5}, first.cost)
    with pytest.raises(checks.CheckFailed, match=re.escape(FIGURE_HELPER[fig].split(" / ")[0])):
        checks.check_triage("t7", [wrong, second])
    right = checks.Reading(first.pattern, first.window_ms, {fig: round(first.evidence[fig], 3)}, round(first.cost, 2))
    assert checks.check_triage("t7", [right, second]).startswith("passed")


def test_t7_window_over_the_whole_capture_is_refused():
    t = lab05.triage_trace("t7")
    data = _readings("t7", "profiler")[0]
    whole = _ms(t, t.steps["start_us"].min(), t.steps["end_us"].max())
    with pytest.raises(checks.CheckFailed, match="not inside one step"):
        checks.check_triage("t7", [checks.Reading(data.pattern, whole, data.evidence, data.cost), _readings("t7", "profiler")[1]])


def test_t1_cost_must_be_within_the_stated_band():
    good = _readings("t1", "profiler")[0]
    assert good.cost == pytest.approx(0.98, abs=0.01)
    with pytest.raises(checks.CheckFailed, match="cost of 70% of step time is off"):
        checks.check_triage("t1", checks.Reading(good.pattern, good.window_ms, good.evidence, 0.70))
    assert checks.check_triage("t1", checks.Reading(good.pattern, good.window_ms, good.evidence, 0.95)).startswith("passed")


def test_capstone_wait_that_does_not_fall_fails_on_a_machine_with_cores_to_spare(monkeypatch):
    # The structural fallback is for a machine measured to have no core to spare; with cores free, a loader
    # whose wait does not fall does not keep up, workers or not.
    from helpers.checks import lab01
    from helpers.course import recorded
    from helpers.model import Trace

    def as_mine(t):
        from conftest import own_capture as _stamp

        return _stamp(Trace(t.events, "runs/mine/trace.json.gz", t.format, dict(t.metadata)))

    broken, fixed = (as_mine(recorded("mystery", v, "cpu")) for v in ("broken", "fixed"))
    from test_fake_fixes import real_mystery_step

    for mod in (lab01, lab05):  # the same wait before and after: not halved
        monkeypatch.setattr(mod, "_data_wait_share", lambda t: 0.5)
    monkeypatch.setattr(_core, "_cores_busy", lambda workers=None: "")
    with pytest.raises(checks.CheckFailed, match=r"Data wait 50\.0% -> 50\.0%"):
        checks.check_capstone(broken, fixed, 1.3, real_mystery_step)
    monkeypatch.setattr(_core, "_cores_busy", lambda workers=None: "load average 3.0 on 2 cores")
    assert "rests on the batches coming from worker processes" in checks.check_capstone(broken, fixed, 1.3, real_mystery_step)
