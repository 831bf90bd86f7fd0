"""One cost model: a finding's cost is its cause's share of the idle time summary reports, never more than
the step, in profiler traces and nsys exports alike."""

import pytest
from conftest import DATA

import helpers
from helpers import metrics as m
from helpers.course import recorded

CAUSE_OF = {"data_stall": "data_wait", "sync_stall": "sync", "launch_overhead": "launch", "host_bound": "other"}


RECORDED = [("data_stall", "broken", "h200"), ("h2d_copy", "broken", "h200"), ("launch_overhead", "broken", "h200"),
            ("sync_stall", "broken", "h200"), ("mystery", "broken", "h200"), ("mystery", "data_fixed", "h200"),
            ("mystery", "fixed", "h200"), ("data_stall", "fixed", "h200"), ("communication", "imbalance", "cpu"),
            ("data_stall", "broken", "cpu")]


@pytest.mark.parametrize("key", RECORDED, ids=lambda k: ":".join(k))
def test_costs_never_exceed_the_step_and_reconcile_with_summary(key):
    trace = recorded(*key)
    findings = helpers.diagnose(trace)
    assert sum(f.cost for f in findings) <= 1.0 + 1e-9
    assert [f.cost for f in findings] == sorted((f.cost for f in findings), reverse=True)
    if not trace.has_gpu:
        return
    s = m.summary(trace)
    idle = s["idle_by_cause_us"]
    denom = float(m.gpu_busy(m.stepped(trace))["window_us"].sum())  # over the steps diagnose found
    assert sum(idle.values()) == pytest.approx(sum(m.idle_by_cause(trace).values()))  # same total idle
    for f in findings:
        if f.pattern in CAUSE_OF:  # same causes, same numbers
            assert f.cost == pytest.approx(idle[CAUSE_OF[f.pattern]] / denom, abs=1e-9), f.pattern
        assert "gpu_utilization" in f.evidence


def test_recorded_sync_stall_costs_reconcile():
    # summary's idle causes and diagnose's costs are one model: the sync stall leads both.
    trace = recorded("sync_stall", "broken", "h200")
    f = helpers.diagnose(trace)[0]
    idle = m.summary(trace)["idle_by_cause_us"]
    assert f.pattern == "sync_stall" and idle["sync"] == max(idle.values())


@pytest.mark.parametrize("name", ["data_stall__fixed", "sync_stall__broken", "host_bound__synced", "mystery__broken",
                                  "launch_overhead__broken"])
def test_nsys_costs_reconcile_with_summary_over_the_found_steps(name):
    """summary and diagnose measure the same steady-state steps, so their idle causes are the same numbers."""
    trace = helpers.load(DATA / "nsys" / f"{name}__h200.sqlite.gz")
    findings = helpers.diagnose(trace)
    s = m.summary(trace)
    inferred = findings[0].evidence.get("steps_inferred")  # None when the export marks its steps (NVTX "step N")
    assert s["steps"] == (inferred["steps"] if inferred else len(trace.steps)) >= 2
    idle = s["idle_by_cause_us"]
    denom = float(m.gpu_busy(m.stepped(trace))["window_us"].sum())  # over the steps diagnose found
    cause_of = {"data_stall": "data_wait", "sync_stall": "sync", "launch_overhead": "launch", "host_bound": "other"}
    for f in findings:
        if f.pattern in cause_of:
            assert f.cost == pytest.approx(idle[cause_of[f.pattern]] / denom, abs=1e-9), f.pattern
    assert sum(f.cost for f in findings) <= 1.0 + 1e-9
