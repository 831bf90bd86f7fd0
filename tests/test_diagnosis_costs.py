"""One cost model: a finding's cost is the share of the step its fix saves on the step's critical path
(helpers.what_if of the catalogue's WhatIf), in profiler traces and nsys exports alike; findings are ranked by it."""

import pytest
from conftest import DATA

import helpers
from helpers import metrics as m
from helpers import thresholds as th
from helpers.course import recorded
from helpers.patterns import BY_NAME

RECORDED = [("data_stall", "broken", "h200"), ("h2d_copy", "broken", "h200"), ("launch_overhead", "broken", "h200"),
            ("sync_stall", "broken", "h200"), ("mystery", "broken", "h200"), ("mystery", "data_fixed", "h200"),
            ("mystery", "fixed", "h200"), ("data_stall", "fixed", "h200"), ("communication", "imbalance", "cpu"),
            ("data_stall", "broken", "cpu")]


def _reconciles(trace, findings) -> None:
    cp = helpers.critical_path(trace)
    for f in findings:
        assert 0 <= f.cost <= 1
        if f.pattern in ("gpu_bound", "load_imbalance"):
            continue
        assert f.step_ms == pytest.approx(cp.step_ms)  # the step the critical path measures
        assert f.cost == pytest.approx(1 - f.step_ms_if_fixed / f.step_ms, abs=1e-9), f.pattern
        w = BY_NAME[f.pattern].what_if
        assert f.if_fixed == w.words
        if not w.overlapped and not w.rates:  # the public what-if of the same factors gives the same step
            assert helpers.what_if(trace, dict(w.factors)) == pytest.approx(f.step_ms_if_fixed)
    # ranked by what the fix saves; two fixes whose predicted steps the what-if cannot tell apart keep the order of
    # their trace figures
    for a, b in zip(findings, findings[1:]):
        if "gpu_bound" in (a.pattern, b.pattern) or a.cost >= b.cost:
            continue
        step = a.step_ms
        assert step * (1 - a.cost) <= step * (1 - b.cost) * (1 + th.WHAT_IF_TIE_SHARE) + 1e-9, (a.pattern, b.pattern)
    # the reader never sees a smaller predicted saving above a larger one unexplained: exactly the findings listed
    # above a larger saving say so, naming each
    for i, a in enumerate(findings):
        larger = [b.pattern for b in findings[i + 1:] if "gpu_bound" not in (a.pattern, b.pattern)
                  and a.step_ms_if_fixed is not None and b.step_ms_if_fixed is not None
                  and b.step_ms_if_fixed < a.step_ms_if_fixed]
        assert bool(a.ranked_above) == bool(larger), (a.pattern, a.ranked_above, larger)
        assert all(p in a.ranked_above for p in larger) and ("20% error" in a.ranked_above or not larger)


@pytest.mark.parametrize("key", RECORDED, ids=lambda k: ":".join(k))
def test_costs_are_what_each_fix_saves_on_the_critical_path(key):
    trace = recorded(*key)
    findings = helpers.diagnose(trace)
    _reconciles(trace, findings)
    if trace.has_gpu:
        assert all("gpu_utilization" in f.evidence for f in findings)
    if len(findings) > 1:  # the fixes together: at least what the best of them saves, at most the step
        both = findings.signals["step_ms_if_all_fixed"]
        assert 0 < both <= findings[0].step_ms_if_fixed + 1e-6


def test_recorded_sync_stall_leads_with_the_sync():
    """Its sync fix and its host-work fix save about the same (21% and 27%: within the what-if's error of each
    other), and the GPU idles after the syncs more than for anything else: the sync stall leads, and says why it
    is listed above the larger prediction, in the text and the JSON alike."""
    from helpers import render

    trace = recorded("sync_stall", "broken", "h200")
    findings = helpers.diagnose(trace)
    idle = m.summary(trace)["idle_by_cause_us"]
    assert findings[0].pattern == "sync_stall" and idle["sync"] == max(idle.values())
    assert {"host_bound", "sync_stall"} <= {f.pattern for f in findings}
    top = findings[0]
    assert top.ranked_above.startswith("listed above host_bound") and "sync_stall_share 27%" in top.ranked_above
    assert all(not f.ranked_above for f in findings[1:] if f.pattern == "launch_overhead")
    text = render.diagnose_text("t", findings, True)
    assert "order: listed above host_bound" in text and top.to_dict()["ranked_above"] == top.ranked_above


@pytest.mark.parametrize("name", ["data_stall__fixed", "sync_stall__broken", "host_bound__synced", "mystery__broken",
                                  "launch_overhead__broken"])
def test_nsys_costs_reconcile_with_the_critical_path_over_the_found_steps(name):
    """diagnose and the critical path measure the same steady-state steps of an nsys export."""
    trace = helpers.load(DATA / "nsys" / f"{name}__h200.sqlite.gz")
    findings = helpers.diagnose(trace)
    s = m.summary(trace)
    inferred = findings[0].evidence.get("steps_inferred")  # None when the export marks its steps (NVTX "step N")
    assert s["steps"] == (inferred["steps"] if inferred else len(trace.steps)) >= 2
    assert len(helpers.critical_path(trace).steps) == s["steps"]
    _reconciles(trace, findings)
