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


def test_the_comm_hook_variant_is_named_for_what_it_sends():
    """The recorded hook variant registers PyTorch's fp16 hook, so it is called fp16_hook (it was bf16_hook)."""
    import inspect

    from helpers.workloads import communication

    assert "fp16_hook" in communication.VARIANTS and not any(v.startswith("bf16") for v in communication.VARIANTS)
    src = inspect.getsource(communication)
    assert "default_hooks.fp16_compress_hook" in src and "bf16_compress_hook" not in src.split("def ", 1)[1]
    from helpers.course import manifest

    recorded_variants = {e["variant"] for e in manifest() if e["workload"] == "communication"}
    assert recorded_variants <= set(communication.VARIANTS), recorded_variants - set(communication.VARIANTS)


def test_memory_throughput_is_the_busiest_unit_not_dram():
    """Lab 06 and the deck: the GEMM's "Memory Throughput" 67% is L1/TEX's load, DRAM is at 2.7%."""
    from helpers import course
    from helpers.readers.ncu import read_ncu

    row = read_ncu(DATA / course.shipped_ncu_entries()[0]["ncu_csv"]).iloc[0]
    assert round(row["memory_throughput_pct"]) == 67 and round(row["dram_throughput_pct"], 1) == 2.7
    assert row["l1_throughput_pct"] > row["l2_throughput_pct"] > row["dram_throughput_pct"]
    assert round(row["compute_throughput_pct"]) == 86 and row["compute_throughput_pct"] > row["memory_throughput_pct"]


def test_lab08_precision_fix_is_at_least_3x_and_its_page_quotes_the_recording():
    """The GEMM loop's precision fix, measured on the H200 without a profiler; the instructor page's table agrees."""
    import json
    import re

    from conftest import ROOT

    measured = json.loads((DATA / "gpu_bound__h200.measure.json").read_text())["variants"]
    fp32 = measured["fp32"]["step_ms"]
    assert fp32 / measured["bf16"]["step_ms"] >= 3 and fp32 / measured["tf32"]["step_ms"] >= 3
    page = (ROOT / "docs" / "instructors" / "08_gpu_bound.md").read_text(encoding="utf-8")
    rows = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16 + GradScaler", "compile": "bf16 + compile",
            "compile_ro": "bf16 + compile, reduce-overhead"}
    for variant, label in rows.items():
        m_ = re.search(rf"^\| {re.escape(label)} \| ([\d.]+) \| ([\d.]+)x \|$", page, re.MULTILINE)
        assert m_, label
        step = measured[variant]["step_ms"]
        assert float(m_.group(1)) == round(step, 1) and float(m_.group(2)) == round(fp32 / step, 1), label


def test_instructor_pages_quote_the_recordings_and_one_definition_of_busy():
    """Lab 03's page gives the fixed loop's figures from the manifest; figures.md defines busy once, as the union."""
    from conftest import ROOT

    pages = ROOT / "docs" / "instructors"
    fixed = entry("sync_stall", "fixed")
    lab03 = " ".join((pages / "03_sync_stall.md").read_text(encoding="utf-8").split())
    assert f"fixed {fixed['step_ms']:.1f} ms, GPU busy {fixed['gpu_utilization']:.0%}" in lab03
    assert f"{fixed['profiled_step_ms']:.1f} ms" in lab03
    figures = " ".join((pages / "figures.md").read_text(encoding="utf-8").split())
    assert figures.count("*GPU busy* has one definition") == 1
    assert "union of kernels, copies and memsets on all streams" in figures and "never its first-to-last-kernel span" in figures
    assert "## Lab 08" in figures
