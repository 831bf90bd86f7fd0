"""The learner's reading of a timeline (checks.Reading) and self-check credit for work done only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import checks, diagnose
from helpers.course import recorded
from helpers.plots import time_origin_us
from helpers.selfcheck import item_status, run_selfcheck


def _truthful(trace, pattern: str | None = None) -> checks.Reading:
    """The reading a careful learner gives: the top finding's pattern, its window, a figure, its cost."""
    f = next(f for f in diagnose(trace) if pattern in (None, f.pattern))
    o = time_origin_us(trace)
    fig = checks.EVIDENCE[f.pattern][0]
    from helpers.checks.reading import want_cost
    from helpers.diagnosis import signals

    sg = signals(trace)
    # the cost a learner measures (the pattern's cost figure, checks.cost_howto), not diagnose's what-if of the fix
    cost = want_cost(f.pattern, trace, sg, f.cost)
    return checks.Reading(f.pattern, ((f.window[0] - o) / 1e3, (f.window[1] - o) / 1e3), {fig: float(sg[fig])}, cost)


@pytest.mark.parametrize("workload,variant", [("data_stall", "broken"), ("sync_stall", "broken"), ("launch_overhead", "broken"),
                                              ("h2d_copy", "broken")])
def test_a_truthful_reading_passes_and_shows_the_second_opinion(workload, variant):
    t = recorded(workload, variant)
    out = checks.check_reading(_truthful(t), t, "data")
    assert out.startswith("passed") and "Second opinion" in out


def test_each_wrong_part_fails_with_what_the_trace_shows():
    t = recorded("data_stall", "broken")
    good = _truthful(t)
    wrong_pattern = checks.Reading("sync_stall", good.window_ms, {"sync_points_per_step": 2.0}, good.cost)
    with pytest.raises(checks.CheckFailed, match="is not what holds this loop back.*GPU is busy"):
        checks.check_reading(wrong_pattern, t, "data")
    # a window over the compute, not the wait (it starts after the fetch's last stretch, 0.2 ms on)
    compute = checks.Reading("data_stall", (good.window_ms[1] + 0.2, good.window_ms[1] + 2.2), good.evidence, good.cost)
    with pytest.raises(checks.CheckFailed, match="in your window .* only 0% of it shows data_stall"):
        checks.check_reading(compute, t, "data")
    whole = checks.Reading("data_stall", (0.0, 10_000.0), good.evidence, good.cost)
    with pytest.raises(checks.CheckFailed, match="point at where it shows"):
        checks.check_reading(whole, t, "data")
    with pytest.raises(checks.CheckFailed, match="does not prove data_stall"):
        checks.check_reading(checks.Reading("data_stall", good.window_ms, {"kernels_per_step": 45}, good.cost), t, "data")
    with pytest.raises(checks.CheckFailed, match="cost of 10%"):
        checks.check_reading(checks.Reading("data_stall", good.window_ms, good.evidence, 0.10), t, "data")
    with pytest.raises(checks.CheckFailed, match="not complete"):
        checks.check_reading("data_stall", t, "data")


def test_credit_needs_every_check_of_the_learners_work():
    assert item_status("tools", None) == (False, ["check_tool_choice"])
    assert item_status("tools", {"checks": {"check_tool_choice": True}, "track": "cpu"})[0]
    # a passing check that only read a shipped trace is not on any item's list
    shipped_only = {"checks": {"check_launch_diagnosed": True}, "track": "cpu"}
    assert not item_status("launch", shipped_only)[0]
    for tracks in checks.CREDIT.values():
        for names in tracks.values():
            assert "check_launch_diagnosed" not in names and "check_imbalance_diagnosed" not in names


def test_fix_checks_refuse_the_courses_own_traces():
    assert checks.shipped(recorded("data_stall", "fixed"))
    assert "recorded, not yours" in checks.learner_trace_problem(recorded("data_stall", "fixed"))


def test_a_malformed_results_file_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / checks.RESULTS_FILE).write_text(json.dumps({"tools": ["not", "a", "dict"]}))
    assert run_selfcheck(tmp_path) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    (tmp_path / checks.RESULTS_FILE).write_text("{oops")
    assert run_selfcheck(tmp_path) == 2


def test_untouched_labs_earn_nothing_from_recorded_results(tmp_path, capsys):
    """Checks run against shipped data only (no exercise done) leave every item unmarked."""
    import os

    os.chdir(tmp_path)
    checks.check_launch_diagnosed(recorded("launch_overhead", "broken"))
    checks.check_imbalance_diagnosed(recorded("communication", "imbalance", "cpu"))
    assert run_selfcheck(Path(".")) == 1
    assert "0/" in capsys.readouterr().out.splitlines()[-1]


def test_every_reading_in_the_solutions_earns_its_item():
    """The name each solution's check_reading(..., item, label) records is on that item's CREDIT list."""
    import re

    from conftest import ROOT

    calls = []
    for nb in sorted((ROOT / "solutions").glob("*.ipynb")):
        src = "".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code")
        calls += [(nb.name, item, label) for item, label in re.findall(r'check_reading\(\w+, \w+, "(\w+)", "([^"]+)"\)', src)]
    assert len(calls) >= 7
    for name, item, label in calls:
        for track in ("gpu", "cpu"):
            assert f"check_reading[{label}]" in checks.CREDIT[item][track], (name, item, label, track)


def test_a_unit_slip_is_named_as_one():
    from helpers import metrics

    t = recorded("sync_stall", "broken")
    longest_ms = float(metrics.idle_gaps(t)["dur_us"].max() / 1e3)
    with pytest.raises(checks.CheckFailed, match="1000 times too big: a unit mixed up"):
        checks.check_longest_gap(longest_ms * 1000, t)  # microseconds given as milliseconds
    with pytest.raises(checks.CheckFailed, match="1000 times too big"):
        checks.check_read_h2d_bandwidth(6.7e3, recorded("h2d_copy", "broken"))
    good = _truthful(recorded("h2d_copy", "broken"), "h2d_copy")
    fig, value = next(iter(good.evidence.items()))
    with pytest.raises(checks.CheckFailed, match="1000 times too"):
        checks.check_reading(checks.Reading(good.pattern, good.window_ms, {fig: value * 1000}, good.cost),
                             recorded("h2d_copy", "broken"), "h2d")
    share = _truthful(recorded("data_stall", "broken"), "data_stall")
    fig, value = next(iter(share.evidence.items()))
    assert 0 < value < 1
    with pytest.raises(checks.CheckFailed, match="100 times too big: a percentage"):  # 84 written for 0.84
        checks.check_reading(checks.Reading(share.pattern, share.window_ms, {fig: value * 100}, share.cost),
                             recorded("data_stall", "broken"), "data")


# --- one definition per figure ------------------------------------------------------------------
def _run(expr: str, t) -> float:
    import helpers
    from helpers import metrics

    return float(eval(expr, {"metrics": metrics, "helpers": helpers, "t": t}))  # the code the lab shows, as a learner runs it


@pytest.mark.parametrize("workload,variant,tag", [("data_stall", "broken", "h200"), ("sync_stall", "broken", "h200"),
                                                  ("h2d_copy", "broken", "h200"), ("data_stall", "broken", "cpu"),
                                                  ("communication", "manual", "cpu")])
def test_every_figure_the_check_compares_is_the_code_the_lab_shows(workload, variant, tag):
    from helpers.checks.reading import COST_HELPER, FIGURE_HELPER
    from helpers.diagnosis import signals

    t = recorded(workload, variant, tag)
    sg = signals(t)
    shown = {**FIGURE_HELPER, **{k: v for k, v in COST_HELPER.items() if v.startswith(("metrics.", "helpers."))}}
    assert set(checks.reading.FIGURE_HOWTO) == set(FIGURE_HELPER)
    compared = [fig for fig in shown if isinstance(sg.get(fig), (int, float))]
    assert compared
    for fig in compared:
        assert _run(shown[fig], t) == pytest.approx(float(sg[fig]), rel=1e-6, abs=1e-9), fig


def test_the_window_must_lie_inside_one_step_and_the_cost_within_the_stated_band():
    t = recorded("data_stall", "broken")
    good = _truthful(t, "data_stall")
    assert checks.check_reading(good, t, "data").startswith("passed")
    o = time_origin_us(t)
    span = ((t.steps["start_us"].min() - o) / 1e3, (t.steps["end_us"].max() - o) / 1e3)
    with pytest.raises(checks.CheckFailed, match="not inside one step"):  # the whole capture
        checks.check_reading(checks.Reading(good.pattern, span, good.evidence, good.cost), t, "data")
    want = good.cost
    for off, passes in ((0.04, True), (0.06 + 0.1 * want, False)):
        r = checks.Reading(good.pattern, good.window_ms, good.evidence, min(1.0, want + off) if want < 0.9 else want - off)
        if passes:
            assert checks.check_reading(r, t, "data").startswith("passed")
        else:
            with pytest.raises(checks.CheckFailed, match=r"cost of .* is off by more than 5 percentage points .*idle_cost_by_cause"):
                checks.check_reading(r, t, "data")
