"""Figures the course states about its own recordings: GPU busy under CUDA Graphs, profiler overhead, lab 00's window."""

from __future__ import annotations

import helpers
from helpers import metrics as m
from helpers.course import entry, recorded


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
    assert top.pattern == "gpu_bound" and "79%" in top.summary and "98%" in top.summary
    assert "The GPU is busy 98%" not in top.summary


def test_busy_without_graphs_is_unchanged():
    trace = recorded("sync_stall", "fixed")
    b = m.gpu_busy(trace)
    assert (b["graph_span_us"] == b["busy_us"]).all() and m.graph_spans(trace).empty
