"""Metrics: pure functions of a :class:`~helpers.model.Trace`, one module per topic.

Times are microseconds unless a name says otherwise. Each function returns a number, a dict or a
DataFrame of numbers, and neither prints, plots nor words a result (:mod:`helpers.render` does).
Analysis windows are the training steps the trace has (``ProfilerStep#N`` or a named step range),
else the whole trace: a metric measures the trace it is given, as it is. On a trace without step
markers, finding the steady state's repeats is a step of its own, taken first and reported:
``stepped(trace)`` (:mod:`.steady`), or :func:`helpers.steady_state`, which also says what it kept.
``summary``, ``comparison`` and the diagnosis take that step themselves.

=================  ==================================================================
module             what it holds
=================  ==================================================================
``intervals``      union, overlap, gaps and intersection of time intervals
``_cache``         the per-trace metric cache (emptied when ``trace.events`` changes)
``activity``       name classes (syncs, launches, data waits) and host / GPU unions
``windows``        the analysis windows
``steady``         steady-state steps of a trace without step markers
``gpu``            GPU busy / idle time, idle gaps and the cause each is blamed on
``kernels``        kernel counts and durations, launch statistics
``copies``         memcpy statistics
``syncs``          host syncs, their causes, ops dispatched per step
``data``           data-loading waits
``comm``           collectives, exposed communication, rank imbalance
``precision``      GEMM kernels by math unit (FFMA vs tensor cores), compile time, Triton kernels
``report``         step breakdown, ``summary``, ``comparison``
=================  ==================================================================

``from helpers import metrics as m; m.<name>`` works for every name below.
"""

from __future__ import annotations

from ._cache import _cached
from ._store import _memo, name_mask, rank_events
from .activity import (
                       CAUSES,
                       DATA_WAIT,
                       GAP_AFTER_SYNC_TOLERANCE_US,
                       LAUNCH_PREFIXES,
                       OPTIMIZER_RANGE,
                       SMALL_KERNEL_US,
                       SYNC_CALLS,
                       SYNC_RETURN_US,
                       SYNCING_OPS,
                       blocking_copy_calls,
                       gpu_work_union,
                       graph_spans,
                       host_union,
                       is_sync_call,
)
from .comm import comm_stats, rank_imbalance
from .copies import copy_stats, h2d_stats, host_copy_stats
from .data import data_wait
from .gpu import blocked_while_computing, gpu_busy, gpu_utilization, idle_by_cause, idle_cost_by_cause, idle_gaps, stream_busy
from .intervals import covered_before, gaps_in, intersect, merge_intervals, overlap
from .kernels import kernel_stats, launch_stats
from .pace import judge_step, machine_pace
from .precision import api_calls_per_step, compile_time_us, gemm_kernels, gemm_math, gemm_math_shares, triton_kernels
from .report import comparison, step_breakdown, step_time_band, step_time_ms, step_times, summary, timing_verdict, typical_steps
from .steady import capture_stats, find_period, steady_steps, stepped
from .stretch import window_stats
from .syncs import _inside_ranges, host_op_stats, outermost_ops, sync_point_calls, sync_stats
from .windows import time_origin_us, unrecorded_gpu_lead, windows

__all__ = [
    "CAUSES", "window_stats", "DATA_WAIT", "GAP_AFTER_SYNC_TOLERANCE_US", "LAUNCH_PREFIXES", "OPTIMIZER_RANGE", "SMALL_KERNEL_US",
    "SYNCING_OPS", "SYNC_CALLS", "blocked_while_computing", "SYNC_RETURN_US", "_cached", "_inside_ranges", "_memo", "outermost_ops", "capture_stats", "comm_stats", "comparison", "copy_stats",
    "covered_before", "time_origin_us", "data_wait", "gaps_in", "gpu_busy", "gpu_utilization", "gpu_work_union", "graph_spans", "h2d_stats",
    "host_copy_stats",
    "find_period", "host_op_stats", "host_union", "idle_by_cause", "idle_cost_by_cause", "idle_gaps", "intersect", "is_sync_call", "blocking_copy_calls",
    "kernel_stats", "launch_stats", "merge_intervals", "name_mask", "rank_events", "overlap", "rank_imbalance", "step_breakdown",
    "steady_steps", "judge_step", "machine_pace", "step_time_band", "step_time_ms", "step_times", "stepped", "timing_verdict", "typical_steps", "stream_busy", "summary", "sync_point_calls", "sync_stats", "unrecorded_gpu_lead", "windows",
    "api_calls_per_step", "compile_time_us", "gemm_kernels", "gemm_math", "gemm_math_shares", "triton_kernels",
]

# Every public metric holds its arguments to its type hints: metrics.summary(pd.NA) is one TraceError line.
from ..arguments import check_namespace as _check_namespace  # noqa: E402

_check_namespace(globals(), __all__)
