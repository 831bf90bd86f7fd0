"""A capture that is mostly idle gets ``capture_window`` and nothing else, pointing at the loop inside it
where there is one: synthetic, recorded on the H200 and captured live on the CPU."""

import pytest
from synth import Ev, idle_capture, write_json, write_sqlite

import helpers
from helpers import thresholds as th


def _both(events, tmp_path, name="t"):
    return (helpers.load(write_json(events, tmp_path / f"{name}.json")),
            helpers.load(write_sqlite(events, tmp_path / f"{name}.sqlite")))


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


def _record_idle_cpu_capture(path):
    """A real torch.profiler capture without step markers: 8 tiny matmuls, 100 ms of sleep after each."""
    torch = pytest.importorskip("torch")
    import time

    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(8):
            (x @ x).sum()
            time.sleep(0.1)
    prof.export_chrome_trace(str(path))
    return path


def test_recorded_idle_capture_gets_capture_window_and_nothing_else(tmp_path):
    trace = helpers.load(_record_idle_cpu_capture(tmp_path / "idle.json"))
    assert trace.steps.empty and not trace.has_gpu
    findings = helpers.diagnose(trace)
    assert [f.pattern for f in findings] == ["capture_window"], [(f.pattern, f.summary) for f in findings]
    f = findings[0]
    assert f.cost == 0.0 and f.evidence["capture_host_share"] < th.CAPTURE_IDLE_HOST_SHARE
    assert f.evidence["capture_ms"] > 700 and "--capture-range" in f.fix and "schedule" in f.fix
    # the loop that repeats in it is found, and the finding points at it
    # what repeats in it is found, and is itself idle between repeats: the finding says so
    assert f.evidence["steps_inferred"]["source"] == "ops" and "idle between repeats" in f.summary
    assert f.window is not None


def test_idle_capture_points_at_the_loop_inside_it(tmp_path):
    """A 40 s capture whose only activity is 2 s of a loop near its end: the finding names where it is."""
    from synth import idle_capture

    events = idle_capture(seconds=40, kernels=4)  # four lone kernels, 10 s apart
    us, t = 1000, 38_000_000 * 1000
    for i in range(12):  # then 12 steps of a small loop, 1 ms apart
        s = t + i * 1000 * us
        events += [Ev("annotation", "forward", s, s + 300 * us), Ev("runtime", "cudaLaunchKernel", s + 10 * us, s + 15 * us, correlation=500 + i),
                   Ev("kernel", "gemm", s + 20 * us, s + 120 * us, correlation=500 + i)]
    findings = helpers.diagnose(helpers.load(write_json(events, tmp_path / "t.json")))
    assert [f.pattern for f in findings] == ["capture_window"]
    f = findings[0]
    assert "scope the capture to it" in f.summary and f.window[0] >= 38_000_000


def _other_accelerator_doc(extra_cat: str) -> dict:
    """Host ops in steps, and the same number of rows in another accelerator's Kineto category."""
    ev = []
    for i in range(6):
        t = i * 1000.0
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t, "dur": 1000.0})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": t, "dur": 300.0})
        ev.append({"ph": "X", "cat": extra_cat, "name": "runFunction", "pid": 1, "tid": 1, "ts": t + 300, "dur": 50.0})
        ev.append({"ph": "X", "cat": extra_cat, "name": "pe_exe", "pid": 2, "tid": 9, "ts": t + 350, "dur": 600.0})
    return {"schemaVersion": 1, "traceEvents": ev}


@pytest.mark.parametrize("cat", ["mtia_runtime", "xpu_runtime", "privateuse1_runtime"])
def test_another_accelerators_rows_are_counted_and_named_not_read_as_a_cpu_loop(tmp_path, cat):
    # The host waits 70% of each step while the accelerator works: read as CPU-only, that is host_bound.
    import json

    path = tmp_path / "t.json"
    path.write_text(json.dumps(_other_accelerator_doc(cat)))
    trace = helpers.load(path)
    assert not trace.has_gpu and trace.metadata["other_accelerator_events"] == {cat: 12}
    assert set(trace.events["kind"].astype(str)) == {"annotation", "cpu_op"}  # the rows are not read as host work
    findings = helpers.diagnose(trace)
    assert [f.pattern for f in findings] == ["capture_window"]
    assert findings[0].evidence["reason"] == "other_accelerator" and cat in findings[0].summary
    assert "Perfetto" in findings[0].fix


def test_another_accelerators_rows_count_across_a_folder_of_ranks(tmp_path):
    import json

    for rank in (0, 1):
        doc = _other_accelerator_doc("mtia_runtime")
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(doc))
    trace = helpers.load(tmp_path)
    assert trace.metadata["other_accelerator_events"] == {"mtia_runtime": 24}
    f = helpers.diagnose(trace)[0]
    assert f.pattern == "capture_window" and f.evidence["reason"] == "other_accelerator"


def test_a_trace_of_only_another_accelerators_rows_is_refused_saying_so(tmp_path):
    import json

    doc = _other_accelerator_doc("mtia_ccp_events")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["cat"] == "mtia_ccp_events"] * 30_000  # chunks of them only
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(helpers.TraceError, match=r"another accelerator's \(mtia_ccp_events \(360,000\)\)"):
        helpers.load(path)
