"""Metric caches cannot go stale: results follow reassigned events, and cached masks are keyed by their predicate."""

from synth import two_step_loop, write_json

import helpers
from helpers import metrics as m


def test_reassigned_events_do_not_keep_old_results(tmp_path):
    trace = helpers.load(write_json(two_step_loop(), tmp_path / "t.json"), "step \\d")
    before = m.gpu_utilization(trace)
    ev = trace.events
    trace.events = ev[ev["kind"] != "kernel"].reset_index(drop=True)
    assert m.gpu_utilization(trace) < before


def test_name_mask_is_keyed_by_predicate(tmp_path):
    trace = helpers.load(write_json(two_step_loop(), tmp_path / "t.json"))
    a = m.name_mask(trace, "k", lambda n: n == "gemm_a")
    b = m.name_mask(trace, "k", lambda n: n == "long_k")
    assert a.sum() == 1 and b.sum() == 1 and not (a & b).any()


def test_a_metric_measures_the_trace_it_is_given_and_the_steady_step_is_explicit():
    """The cache never swaps in another trace: on an export without step markers a metric is over the whole
    capture, and the steady state's repeats are what ``stepped`` (and ``helpers.steady_state``, which says
    what it kept) hands back; summary, diagnose and the timeline's axis take that step themselves."""
    from conftest import DATA

    from helpers import plots
    raw = helpers.load(DATA / "nsight" / "data_stall__broken__h200.sqlite.gz")
    assert raw.steps.empty
    whole = m.windows(raw)
    assert list(whole["step"]) == [-1]  # one window: the capture
    steps, report = helpers.steady_state(raw)
    assert steps is m.stepped(raw) and report.source == "inferred" and report.steps == len(steps.steps) >= 3
    assert (m.windows(steps)["step"] >= 0).all()
    assert m.step_time_ms(raw) != m.step_time_ms(steps)  # each over its own windows, nothing cached across
    assert m.summary(raw)["steps"] == report.steps and m.summary(raw)["steps_inferred"]["source"] == "ranges"
    assert helpers.diagnose(raw).steady.steps == report.steps
    assert plots.time_origin_us(raw) == m.time_origin_us(steps) > m.time_origin_us(raw)


def test_every_consumer_of_an_unmarked_export_takes_its_steps():
    """The ranks command, the checks' window words and stretches, and the triage export: each over the
    steady state's steps, the same whether it is handed the raw export or the stepped one."""
    from conftest import DATA

    from helpers import checks, jobs
    from helpers.checks import lab05, reading
    path = DATA / "nsight" / "sync_stall__fixed__h200.sqlite.gz"
    raw = helpers.load(path)
    steps = m.stepped(raw)
    summary = jobs.analyse_rank(path)
    assert len(set(summary.comm["step"].tolist()) - {-1}) == len(steps.steps) >= 3
    window = (1.0, 3.0)
    assert checks.describe_window(raw, window) == checks.describe_window(steps, window)
    for a, b in zip(reading.pattern_intervals(raw, "gpu_bound"), reading.pattern_intervals(steps, "gpu_bound")):
        assert list(a) == list(b)
    t = lab05.triage_trace("t1", "nsys")
    assert not t.steps.empty
