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
