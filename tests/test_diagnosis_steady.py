"""Capture-window sense (issue 13 item 7) and host_bound on CPU-only traces (item 3).

A trace without step markers is measured over its steady state (what repeats: host ranges, else
kernels, else ops), and a capture that is mostly idle gets ``capture_window`` and nothing else.
"""

import json

import numpy as np
import pytest
from conftest import DATA
from synth import Ev, write_json

import helpers
from helpers import metrics as m
from helpers import render
from helpers import thresholds as th
from helpers.course import recorded
from helpers.model import finish


def unmarked(trace, ranges_too=False):
    """The same recorded events without their ProfilerStep ranges (and, with ``ranges_too``, without
    any range), read back as a trace: what a capture without step markers looks like."""
    ev = trace.events
    drop = ev["name"].str.startswith("ProfilerStep#") & ev["kind"].isin(("annotation", "gpu_annotation"))
    if ranges_too:
        drop |= ev["kind"].isin(("annotation", "gpu_annotation"))
    md = {k: v for k, v in trace.metadata.items() if k != "steps"}
    t = finish(ev[~drop].reset_index(drop=True).copy(), trace.source, trace.format, md)
    assert t.steps.empty
    return t


def top(trace):
    return [f.pattern for f in helpers.diagnose(trace)][:1]


# --- period detection ---------------------------------------------------------------------------
def test_find_period_exact_with_prefix_and_noise():
    assert m.find_period(np.array([0, 1, 2, 3] * 5)) == {"period": 4, "start": 0, "repeats": 5, "match": 1.0}
    found = m.find_period(np.array([9, 8] + [0, 1, 2] * 6))  # a start-up prefix, then the loop
    assert (found["period"], found["start"], found["repeats"]) == (3, 2, 6)
    seq = np.tile(np.arange(10), 12)
    seq[57] = 99  # one kernel that differs once (an allocator memset, an algorithm switch)
    found = m.find_period(seq)
    assert found["period"] == 10 and found["repeats"] >= 11 and found["match"] > 0.95
    assert m.find_period(np.array([0, 0, 0, 0, 0]))["period"] == 1
    assert m.find_period(np.arange(50)) is None  # nothing repeats
    assert m.find_period(np.array([0, 1, 0, 1])) is None  # two repeats are not a loop (STEADY_MIN_REPEATS)


def test_find_period_prefers_the_step_over_a_repeated_layer():
    # 12 identical layers then an optimizer kernel, 6 steps: the layer repeats too (11 in 12 match), the step exactly.
    step = [1, 2, 3] * 12 + [7, 8]
    assert m.find_period(np.array(step * 6))["period"] == len(step)


def test_long_kernel_sequences_try_few_candidates():
    rng = np.random.default_rng(0)
    step = list(rng.integers(0, 40, 3000))  # 3000 kernels a step, names from a small set
    found = m.find_period(np.array(step * 5))
    assert found["period"] == 3000 and found["repeats"] == 5


# --- recorded traces with their step markers taken away ------------------------------------------
RANGED = [("data_stall", "broken", "h200"), ("data_stall", "fixed", "h200"), ("sync_stall", "broken", "h200"),
          ("sync_stall", "fixed", "h200"), ("host_bound", "broken", "h200"), ("host_bound", "fixed", "h200"),
          ("launch_overhead", "broken", "h200"), ("mystery", "broken", "h200"), ("h2d_copy", "broken", "h200"),
          ("h2d_copy", "fixed", "h200"), ("data_stall", "broken", "cpu"), ("mystery", "broken", "cpu")]


@pytest.mark.parametrize("key", RANGED, ids=lambda k: ":".join(k))
def test_steady_state_from_ranges_matches_the_marked_steps(key):
    stepped = recorded(*key)
    bare = unmarked(stepped)
    info = m.summary(bare)["steps_inferred"]
    assert info and info["source"] == "ranges", info
    assert top(bare) == top(stepped)
    # within 5%, or within the marked steps' own spread when they vary more than that
    d = stepped.steps["dur_us"]
    spread = float(d.std() / d.mean()) if len(d) > 1 else 0.0
    assert m.step_time_ms(bare) == pytest.approx(m.step_time_ms(stepped), rel=max(0.05, spread))
    findings = helpers.diagnose(bare)
    assert all(f.evidence["steps_inferred"] == info for f in findings)  # every finding says where its steps came from


# Without any range the data waits are invisible, so only loops whose pattern needs no range name.
KERNEL_ONLY = [("sync_stall", "broken", "h200"), ("host_bound", "broken", "h200"), ("launch_overhead", "broken", "h200"),
               ("h2d_copy", "broken", "h200"), ("sync_stall", "fixed", "h200")]


@pytest.mark.parametrize("key", KERNEL_ONLY, ids=lambda k: ":".join(k))
def test_steady_state_from_kernels_when_no_range_is_left(key):
    stepped = recorded(*key)
    bare = unmarked(stepped, ranges_too=True)
    info = m.stepped(bare).metadata["steps_inferred"]
    assert info["source"] == "kernels", info
    assert top(bare) == top(stepped)
    assert m.step_time_ms(bare) == pytest.approx(m.step_time_ms(stepped), rel=0.20)


def _nsys_exports():
    doc = json.loads((DATA / "manifest.json").read_text())
    return sorted(e["file"] for e in doc.get("recordings", []) if e.get("format") == "nsys-sqlite" and e["file"].startswith("nsys/"))


def test_nsys_exports_recorded_under_nsys_range_get_their_steps():
    """Exports recorded before the workloads marked steps (2026-12-02) have no step ranges; each repeats its
    NVTX ranges once per step. Those recorded since carry an NVTX "step N" range per step."""
    files = _nsys_exports()
    assert len(files) >= 20
    marked = 0
    for f in files:
        t = helpers.load(DATA / f)
        if not t.steps.empty:  # recorded with helpers.workloads.common's NVTX step ranges
            marked += 1
            assert len(t.steps) >= 2 and m.summary(t).get("steps_inferred") is None, f
            continue
        info = m.summary(t)["steps_inferred"]
        assert info and info["source"] == "ranges" and info["steps"] >= 2, (f, info)
        text = render.summary_text(m.summary(t))
        assert "none marked" in text and "taken as the steps" in text
    assert marked < len(files)  # both kinds are tested


def test_stepped_trace_is_cached_and_follows_reassigned_events():
    bare = unmarked(recorded("sync_stall", "broken", "h200"))
    assert m.stepped(bare) is m.stepped(bare)
    assert m.stepped(m.stepped(bare)) is m.stepped(bare)
    before = m.step_time_ms(bare)
    ev = bare.events
    bare.events = ev[ev["kind"] != "annotation"].reset_index(drop=True)  # now only kernels can show the loop
    assert m.stepped(bare).metadata["steps_inferred"]["source"] == "kernels"
    assert m.step_time_ms(bare) != before


# --- a mostly idle capture ---------------------------------------------------------------------
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


# --- host_bound on CPU-only traces -------------------------------------------------------------
def _cpu_loop(steps=5, op_us=2000, host_us=6000):
    """CPU-only steps: ``op_us`` of PyTorch ops, then ``host_us`` of Python work in a "metrics" range."""
    us, out, t = 1000, [], 0
    for i in range(steps):
        end = t + (op_us + host_us + 20) * us
        out.append(Ev("annotation", f"ProfilerStep#{i}", t, end))
        out.append(Ev("cpu_op", "aten::linear", t + 10 * us, t + (10 + op_us) * us, device=-1))
        h0 = t + (10 + op_us) * us
        out.append(Ev("annotation", "metrics", h0 + 5 * us, h0 + (host_us - 5) * us))
        t = end
    return out


def test_cpu_only_host_bound_loop_is_named_and_says_what_the_trace_cannot_show(tmp_path):
    trace = helpers.load(write_json(_cpu_loop(), tmp_path / "t.json"))
    assert not trace.has_gpu
    findings = helpers.diagnose(trace)
    assert [f.pattern for f in findings][:1] == ["host_bound"], [f.pattern for f in findings]
    f = findings[0]
    assert f.cost == pytest.approx(f.evidence["cpu_host_other_share"]) and f.cost > th.CPU_HOST_BOUND_SHARE
    assert "metrics" in f.evidence["host_busy_in"]
    assert "CPU-only" in f.summary and "GPU" not in f.fix
    a, b = f.window
    assert b - a > 5000  # the longest stretch outside ops: one step's host work


def test_cpu_only_loop_whose_ops_dominate_is_not_host_bound(tmp_path):
    trace = helpers.load(write_json(_cpu_loop(op_us=6000, host_us=2000), tmp_path / "t.json"))
    assert "host_bound" not in [f.pattern for f in helpers.diagnose(trace)]


def test_recorded_cpu_traces_are_not_called_host_bound():
    """On a CPU the host_bound workload's model ops take ~89% of its step: its bookkeeping, which
    starves an H200, is 11% here, and the CPU trace honestly shows that (thresholds.CPU_HOST_BOUND_SHARE)."""
    for variant in ("broken", "fixed"):
        trace = recorded("host_bound", variant, "cpu")
        patterns = [f.pattern for f in helpers.diagnose(trace)]
        assert "host_bound" not in patterns, (variant, patterns)
    sg = helpers.diagnosis.signals(recorded("host_bound", "broken", "cpu"))
    assert 0.05 < sg["cpu_host_other_share"] < th.CPU_HOST_BOUND_SHARE


def test_steady_state_of_a_long_recorded_kernel_sequence():
    """The benchmark's launch-bound H200 trace (14 steps of 1,053 kernels) without any range."""
    marked = helpers.load(DATA / "bench" / "launch_overhead_long__h200.json.gz")
    bare = unmarked(marked, ranges_too=True)
    info = m.stepped(bare).metadata["steps_inferred"]
    assert (info["source"], info["period_length"]) == ("kernels", 1053) and info["steps"] >= len(marked.steps) - 1
    assert m.step_time_ms(bare) == pytest.approx(m.step_time_ms(marked), rel=0.05)
    assert top(bare) == top(marked) == ["launch_overhead"]


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
    denom = float(m.gpu_busy(trace)["window_us"].sum())
    cause_of = {"data_stall": "data_wait", "sync_stall": "sync", "launch_overhead": "launch", "host_bound": "other"}
    for f in findings:
        if f.pattern in cause_of:
            assert f.cost == pytest.approx(idle[cause_of[f.pattern]] / denom, abs=1e-9), f.pattern
    assert sum(f.cost for f in findings) <= 1.0 + 1e-9


def test_a_range_per_layer_is_grouped_into_steps(tmp_path):
    """NVTX ranges once per layer (4 a step) and an optimizer kernel outside them: the ranges repeat every
    layer, the kernels every step; a step is 4 layer ranges."""
    us, out, t = 1000, [], 0
    for i in range(6):
        for j in range(4):
            s = t + j * 200 * us
            out += [Ev("annotation", "layer", s, s + 150 * us),
                    Ev("runtime", "cudaLaunchKernel", s + 10 * us, s + 15 * us, correlation=1000 + 10 * i + j),
                    Ev("kernel", f"gemm_{j % 2}", s + 20 * us, s + 140 * us, correlation=1000 + 10 * i + j)]
        s = t + 800 * us
        out += [Ev("runtime", "cudaLaunchKernel", s, s + 5 * us, correlation=2000 + i),
                Ev("kernel", "adam", s + 10 * us, s + 60 * us, correlation=2000 + i)]
        t += 1000 * us
    trace = helpers.load(write_json(out, tmp_path / "t.json"))
    info = m.stepped(trace).metadata["steps_inferred"]
    assert (info["source"], info["period_length"]) == ("ranges", 4), info
    assert m.step_time_ms(trace) == pytest.approx(1.0, rel=0.1)


def test_triage_recordings_top_finding_is_the_truth_in_both_formats():
    """The blind-triage loops (docs/instructors/triage_key.json): the costliest true pattern comes first, from the
    profiler trace and from the nsys export (steps found) alike; t3's CUDA-Graph replay is GPU-bound in both."""
    from conftest import TRIAGE_KEY

    doc = json.loads((DATA / "manifest.json").read_text())
    entries = [e for e in doc.get("recordings", []) if e["workload"] == "triage"]
    entries = entries or [e for e in doc["traces"] if e["workload"] == "triage"]
    assert len(entries) >= 10
    for e in entries:
        got = top(helpers.load(DATA / e["file"]))
        truth = TRIAGE_KEY[e["variant"]]["recorded_patterns"]
        assert got == truth[:1], (e["file"], got, truth)
