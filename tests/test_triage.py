"""Blind triage (lab 07) and lab 05's own-loop template.

check_triage passes the truthful reading of every trace (both formats), fails the eager misreading of
each decoy with the message that teaches it, fails the stub; credit needs 8 traces; the recorded
truth agrees with the trace except where the check says why; the own-loop cell writes its report
without clobbering.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT

from helpers import checks, diagnose
from helpers import metrics as m
from helpers.checks import lab05
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
        wins = m.windows(trace)
        w = wins.iloc[min(1, len(wins) - 1)]  # an nsys export without step ranges is one window
        window = _ms(trace, w["start_us"], w["end_us"])
    cost = float(sg["gpu_kernel_share"]) if pattern == "gpu_bound" else f.cost
    return checks.Reading(pattern, window, {fig: float(sg[fig])}, cost)


def _readings(trace_id: str, source: str):
    t = lab05.triage_trace(trace_id, source)
    return [_truthful(t, p) for p in lab05.TRIAGE[trace_id].patterns]


@pytest.mark.parametrize("source", lab05.SOURCES)
@pytest.mark.parametrize("trace_id", lab05.TRIAGE_IDS)
def test_truthful_reading_passes(trace_id, source):
    out = checks.check_triage(trace_id, *_readings(trace_id, source), source=source)
    assert out.startswith(f"passed: check_triage[{trace_id}]") and "Second opinion" in out


def test_the_recorded_truth_agrees_with_the_trace_or_the_check_says_why():
    for trace_id, case in lab05.TRIAGE.items():
        truth = lab05.manifest_truth(trace_id)
        assert case.patterns[0] == truth[0], trace_id
        if case.patterns != truth:
            assert case.note and all(p in case.note for p in set(truth) - set(case.patterns)), trace_id
        for source in lab05.SOURCES:
            found = [f.pattern for f in diagnose(lab05.triage_trace(trace_id, source))]
            for p in case.patterns:
                # every pattern the check asks for is one the diagnosis finds, except where the note says why
                assert p in found or (p == "gpu_bound" and "names nothing" in case.note), (trace_id, source, p, found)


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
    if trace_id == "t7":
        return (_truthful(t, "sync_stall"),), "not the costliest"
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
    with pytest.raises(checks.CheckFailed, match="named data_stall twice"):
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

    monkeypatch.setattr(lab05, "_cores_busy", lambda: "load average 3.0 on 2 cores")
    from helpers.model import Trace

    def as_mine(t):  # the recorded pair standing in for the learner's own captures
        from conftest import own_capture as _stamp  # stands in for helpers.capture in this process

        return _stamp(Trace(t.events, "runs/mine/trace.json.gz", t.format, dict(t.metadata)))

    broken, fixed = (as_mine(recorded("mystery", v, "cpu")) for v in ("broken", "fixed"))
    from test_fake_fixes import real_mystery_step  # the check runs the learner's step first

    assert checks.check_capstone(broken, fixed, 1.3, real_mystery_step).startswith("passed")
    with pytest.raises(checks.CheckFailed, match="Data wait"):  # no worker processes: busy or not, not fixed
        checks.check_capstone(broken, broken, 1.3, real_mystery_step)
