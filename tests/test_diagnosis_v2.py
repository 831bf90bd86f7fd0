"""Diagnosis v2: host-bound loops, idle captures, one cost model that reconciles with summary,
both trace formats agreeing, rules as data, and metric caches that cannot go stale."""

import json

import pytest
from conftest import DATA
from synth import host_bound_loop, idle_capture, two_step_loop, write_json, write_sqlite

import helpers
from helpers import diagnosis as dg
from helpers import metrics as m
from helpers import thresholds as th
from helpers.course import recorded
from helpers.patterns import CATALOGUE

CAUSE_OF = {"data_stall": "data_wait", "sync_stall": "sync", "launch_overhead": "launch", "host_bound": "other"}


def _both(events, tmp_path, name="t"):
    return (helpers.load(write_json(events, tmp_path / f"{name}.json")),
            helpers.load(write_sqlite(events, tmp_path / f"{name}.sqlite")))


@pytest.mark.parametrize("fmt", ["json", "sqlite"])
def test_host_bound_loop_is_named_not_gpu_bound(tmp_path, fmt):
    events = host_bound_loop()
    path = write_json(events, tmp_path / "t.json") if fmt == "json" else write_sqlite(events, tmp_path / "t.sqlite")
    findings = helpers.diagnose(helpers.load(path))
    patterns = [f.pattern for f in findings]
    assert patterns and patterns[0] == "host_bound", patterns
    assert "gpu_bound" not in patterns
    top = findings[0]
    assert "metrics" in top.evidence["host_busy_in"]  # what the host was doing, from the NVTX range
    assert "background thread" in top.fix


def test_sync_before_host_work_costs_only_the_overlap_it_prevents(tmp_path):
    # .item() waits 200 us for the kernel, then 800 us of host work: removing the sync saves at
    # most the 200 us the host was blocked; moving the host work saves the rest.
    findings = {f.pattern: f for f in helpers.diagnose(helpers.load(write_json(host_bound_loop(sync=True), tmp_path / "t.json")))}
    assert "host_bound" in findings
    if "sync_stall" in findings:
        assert findings["sync_stall"].cost < findings["host_bound"].cost


def test_balanced_loop_is_not_host_bound(tmp_path):
    patterns = [f.pattern for f in helpers.diagnose(helpers.load(write_json(host_bound_loop(gpu_us=2000, host_us=20), tmp_path / "t.json")))]
    assert patterns == ["gpu_bound"], patterns


def test_idle_capture_gets_capture_window_and_nothing_else(tmp_path):
    for trace in _both(idle_capture(), tmp_path):
        findings = helpers.diagnose(trace)
        assert [f.pattern for f in findings] == ["capture_window"], [f.pattern for f in findings]
        assert findings[0].cost == 0.0 and "--capture-range" in findings[0].fix
        assert findings[0].evidence["capture_ms"] > 30_000


def test_recorded_gpu_idle_capture_gets_capture_window_and_nothing_else():
    """Recorded on the H200 (data/manifest.json says how): 20 matmuls with 0.5 s of sleep after each, no steps."""
    from helpers.course import recorded

    findings = helpers.diagnose(recorded("idle_capture", "sleepy"))
    assert [f.pattern for f in findings] == ["capture_window"]
    assert findings[0].evidence["capture_ms"] > 5_000 and findings[0].evidence["gpu_utilization"] < 0.05


def test_both_formats_give_the_same_top_finding(tmp_path):
    for i, events in enumerate((host_bound_loop(), host_bound_loop(gpu_us=2000, host_us=20), idle_capture(), two_step_loop())):
        a, b = _both(events, tmp_path, f"t{i}")
        pa, pb = [f.pattern for f in helpers.diagnose(a)], [f.pattern for f in helpers.diagnose(b)]
        assert pa[:1] == pb[:1], (pa, pb)


def _manifest_pairs():
    doc = json.loads((DATA / "manifest.json").read_text())
    runs: dict[str, dict[str, str]] = {}
    for e in doc["traces"] + doc.get("recordings", []):  # the H200 pairs are listed under "recordings"
        if "run" in e:
            runs.setdefault(e["run"], {})[e.get("format", "kineto")] = e["file"]
    return runs


#: Pairs whose two formats do not agree. Agreeing now: data_stall:fixed and sync_stall:fixed since the nsys
#: exports' steady state is found (they have no step ranges, so start-up was judged with the loop);
#: data_stall:fixed and launch_overhead:compile since launch-dense NVTX ranges count as dispatching in
#: traces without framework ops (the compiled step's host time between launches read as host_bound);
#: launch_overhead:graphs and triage t3 since gpu_bound's bar counts a CUDA-Graph replay's span in both formats
#: (the busy figure counts its kernels only: the graph-level nsys export keeps no kernels, only the replay).
#: mystery:fixed since it was recorded again (2026-12-03): its first twin's loader workers did not keep up
#: (data_stall 36%) while the exports of the session before ran beside the recording; exports now run after
#: the last recording. The test fails if any pair disagrees.
KNOWN_DISAGREEMENTS: set[str] = set()


def test_recorded_pairs_agree():
    """Every profiler/nsys pair of one command in data/ gives the same top finding, except the known ones."""
    pairs = {run: sides for run, sides in _manifest_pairs().items() if len(sides) >= 2}
    assert len(pairs) >= 20, f"only {len(pairs)} recorded pairs in data/manifest.json"
    disagree = set()
    for run, sides in pairs.items():
        tops = {fmt: [f.pattern for f in helpers.diagnose(helpers.load(DATA / f))][:1] for fmt, f in sides.items()}
        if len({tuple(t) for t in tops.values()}) != 1:
            disagree.add(run)
    assert disagree == KNOWN_DISAGREEMENTS, (sorted(disagree - KNOWN_DISAGREEMENTS), sorted(KNOWN_DISAGREEMENTS - disagree))


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
    denom = float(m.gpu_busy(trace)["window_us"].sum())
    assert sum(idle.values()) == pytest.approx(sum(m.idle_by_cause(trace).values()))  # same total idle
    for f in findings:
        if f.pattern in CAUSE_OF:  # same causes, same numbers
            assert f.cost == pytest.approx(idle[CAUSE_OF[f.pattern]] / denom, abs=1e-9), f.pattern
        assert "gpu_utilization" in f.evidence


def test_recorded_sync_stall_costs_reconcile():
    # Before v2: summary said sync 7% of idle, diagnose said 32% of the step; now the same number.
    trace = recorded("sync_stall", "broken", "h200")
    f = helpers.diagnose(trace)[0]
    idle = m.summary(trace)["idle_by_cause_us"]
    assert f.pattern == "sync_stall" and idle["sync"] == max(idle.values())


def test_signals_are_named_like_thresholds(tmp_path):
    sg = dg.signals(helpers.load(write_json(host_bound_loop(), tmp_path / "t.json")))
    for pattern in CATALOGUE:
        assert pattern.name in dg.PATTERNS and pattern.fix
        for rule in pattern.rules:
            assert rule.cost in sg or not rule.when(sg) or rule.cost == "none"
    for name in ("data_stall_share", "sync_blocked_share", "launch_idle_share", "launch_median_kernel_us",
                 "host_bound_idle_share", "gpu_bound_busy"):
        assert hasattr(th, name.upper()) or hasattr(th, name.upper().replace("_SHARE", "")) or name.upper() + "_SHARE"
        assert name in sg
    assert th.SMALL_KERNEL_US == m.SMALL_KERNEL_US == 10.0


def test_finding_has_no_share_alias(tmp_path):
    f = helpers.diagnose(helpers.load(write_json(host_bound_loop(), tmp_path / "t.json")))[0]
    assert not hasattr(f, "share") and 0 < f.cost <= 1


def test_cpu_only_data_stall_fix_does_not_say_gpu():
    f = helpers.diagnose(recorded("data_stall", "broken", "cpu"))[0]
    assert f.pattern == "data_stall" and "GPU" not in f.fix


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


def test_recorded_host_bound_traces_when_present():
    """host_bound broken/synced -> host_bound first; fixed -> not host_bound; any format in the manifest.

    GPU recordings only: on the H200 host_bound is GPU idle time the host causes. A CPU-only trace can show
    host-bound work only as host time outside ops, and the CPU recordings of this workload spend 89% of their
    step in the model's own ops, so they are not host-bound there (test_diagnosis_steady checks both)."""
    man = json.loads((DATA / "manifest.json").read_text())["traces"]
    entries = [e for e in man if e["workload"] == "host_bound" and e["tag"] != "cpu"]
    assert entries, "the H200 host_bound recordings are missing from data/manifest.json"
    for e in entries:
        patterns = [f.pattern for f in helpers.diagnose(helpers.load(DATA / e["file"]))]
        if e["variant"] == "fixed":
            assert "host_bound" not in patterns, (e["file"], patterns)
        else:
            assert patterns[:1] == ["host_bound"], (e["file"], patterns)
        assert "gpu_bound" not in patterns
    print(f"{len(entries)} recorded host_bound traces checked")
