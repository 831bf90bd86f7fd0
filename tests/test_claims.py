"""Figures the course states about its own recordings: GPU busy under CUDA Graphs, profiler overhead, lab 00's window."""

from __future__ import annotations

import pytest

import helpers
from helpers import metrics as m
from helpers.checks import CheckFailed
from helpers.course import DATA, entry, recorded


def test_graph_replay_span_is_not_busy():
    """A CUDA Graph replay counts through its kernels: lab 02's table says 79% for this trace, not the span's 98%."""
    trace = recorded("launch_overhead", "graphs")
    busy = m.gpu_utilization(trace)
    assert 0.77 <= busy <= 0.80, busy
    assert abs(busy - entry("launch_overhead", "graphs")["gpu_utilization"]) < 0.005
    spans = m.graph_spans(trace)
    assert len(spans) >= 3 and (spans["fill"] < 0.85).all() and (spans["kernels"] > 500).all()
    b = m.gpu_busy(trace)
    assert b["graph_span_us"].sum() / b["window_us"].sum() > 0.95  # the span, shown apart
    top = helpers.diagnose(trace)[0]
    # the GPU paces this loop, so its steps are the replays back to back: their span is (nearly) the whole step
    assert top.pattern == "gpu_bound" and "79%" in top.summary and "CUDA Graph replays span 100%" in top.summary
    assert "The GPU is busy 98%" not in top.summary and "The GPU is busy 100%" not in top.summary


def test_busy_without_graphs_is_unchanged():
    trace = recorded("sync_stall", "fixed")
    b = m.gpu_busy(trace)
    assert (b["graph_span_us"] == b["busy_us"]).all() and m.graph_spans(trace).empty


def test_profiled_vs_timed_figures_the_labs_quote():
    """Lab 00's hygiene section, lab 02 and lab 06 quote these from data/manifest.json and the traces."""
    ratio = {v: entry("launch_overhead", v)["profiled_step_ms"] / entry("launch_overhead", v)["step_ms"]
             for v in ("broken", "foreach", "bigbatch")}
    assert min(ratio.values()) >= 1.8 and max(ratio.values()) <= 2.35, ratio
    broken = entry("launch_overhead", "broken")
    assert round(broken["step_ms"], 1) == 18.6 and round(broken["profiled_step_ms"], 1) == 34.0
    fixed = entry("sync_stall", "fixed")  # an asynchronous loop: the host's step is shorter than the real one
    assert round(fixed["profiled_step_ms"], 1) == 9.6 and round(fixed["step_ms"], 1) == 14.3
    assert round(m.launch_stats(recorded("launch_overhead", "broken"))["median_launch_call_us"], 1) == 7.4
    nsys = helpers.load(DATA / "nsys" / "launch_overhead__broken__h200.sqlite.gz")
    assert round(m.launch_stats(nsys)["median_launch_call_us"], 1) == 5.6


def test_lab00_time_window_must_hold_steps():
    """The syllabus's --delay=10 --duration=30 on lab 00's 10-step script opens after the program ends."""
    from helpers import checks, profiling

    script = ["python", "-m", "helpers.workloads.data_stall", "--variant", "broken", "--steps", "10"]
    short = profiling.nsys_command(script, output="w", capture_range=None, delay_s=10, duration_s=30)
    problems = checks.nsys_command_problems("time window", short)
    assert any("more --steps" in p for p in problems) and any("start-up" in p for p in problems)
    ok = profiling.nsys_command(script[:-1] + ["1500"], output="w", capture_range=None, delay_s=20, duration_s=5)
    assert checks.nsys_command_problems("time window", ok) == []
    with pytest.raises(CheckFailed, match="more --steps"):
        checks.check_nsys_commands({
            "capture range": profiling.nsys_command(script + ["--nsys-range"], output="r"),
            "time window": short,
            "gpu metrics": profiling.nsys_command(script, output="m", capture_range=None, gpu_metrics_device=0)})
