"""The capture checked before it is judged: what in a trace's recording can mislead the diagnosis, and what to
capture instead.

:func:`check_capture` reads the trace over the steps the diagnosis keeps (:func:`helpers.steady_state`) and returns
:class:`CaptureIssue` records, each with the figure measured, what it means for the verdict and what to capture
instead. The ones that leave no loop to judge (most of the kept steps compiling, a stream capture whose launches
were recorded into a graph and not run) are the ``capture_window`` pattern's rules in the catalogue (their signals
come from :func:`capture_signals`); the others are notes the diagnosis carries beside its findings
(``Diagnosis.capture``): GPU work the trace lost or cannot place (launches without their kernels, kernels before
their launch call), ranges that do not nest on their thread, and steps of very different lengths.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from . import metrics as m
from . import thresholds as th
from .model import GPU_WORK_KINDS, Trace, kind_in

#: CUDA / HIP calls that start or end a stream capture (``torch.cuda.graph``, CUDA Graph trees): launches between
#: them are recorded into a graph, not run.
STREAM_CAPTURE_CALL = re.compile(r"^(?:cu|cuda|hip)(?:StreamBeginCapture|StreamEndCapture|GraphInstantiate)")


@dataclass(frozen=True)
class CaptureIssue:
    """One thing about how the trace was recorded that bears on the verdict."""

    name: str  # launches_without_kernels, kernels_before_launch, unbalanced_ranges, varying_steps
    figure: float  # what was measured (a share, or a count)
    says: str  # what the capture shows, and what it means for the figures
    capture_instead: str  # how to record a trace that supports a verdict

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_capture_call(name: str) -> bool:
    return bool(STREAM_CAPTURE_CALL.match(name))


def capture_signals(trace: Trace) -> dict[str, float]:
    """The figures the ``capture_window`` rules about the kept steps read: ``compile_capture_share`` (the kept
    steps' critical path in compilation), ``launches_without_kernels`` (share of kernel launches with no GPU work
    recorded) and ``stream_capture_calls`` (stream-capture calls in the trace)."""
    from .critical import critical_path

    ev = trace.events
    out: dict[str, float] = {}
    cp = critical_path(trace)
    if cp.step_ms > 0:
        out["compile_capture_share"] = cp.ms_per_step.get("compile", 0.0) / cp.step_ms
    launch = _kernel_launches(trace)
    if launch.any():
        out["launches_without_kernels"] = float((launch & ~_has_gpu_work(trace)).sum() / launch.sum())
    out["stream_capture_calls"] = float((kind_in(ev, ("runtime",)) & m.name_mask(trace, "stream_capture",
                                                                                            _is_capture_call)).sum())
    return out


def _kernel_launches(trace: Trace) -> np.ndarray:
    ev = trace.events
    return (kind_in(ev, ("runtime",)) & (ev["correlation"].to_numpy() >= 0)
            & m.name_mask(trace, "kernel_launch_call", lambda n: n.startswith(
                ("cudaLaunch", "cuLaunch", "hipLaunch", "hipExtLaunch", "hipModuleLaunch", "hipExtModuleLaunch"))))


def _has_gpu_work(trace: Trace) -> np.ndarray:
    """For every event: does a GPU op of its rank carry its correlation id? (Kept with the trace.)"""
    memo = m._memo(trace)
    if "has_gpu_work" not in memo:
        ev = trace.events
        corr, rank = ev["correlation"].to_numpy(), ev["rank"].to_numpy()
        dev = (ev["device"].to_numpy() >= 0) & kind_in(ev, GPU_WORK_KINDS) & (corr >= 0)
        out = np.zeros(len(ev), dtype=bool)
        at = np.flatnonzero(corr >= 0)
        if dev.any() and at.size:
            # one key per (rank, correlation id): the rank's index among the ranks above the id's bits
            ranks, r_code = np.unique(rank[at], return_inverse=True)
            top = int(corr[at].max()) + 1
            if len(ranks) * top < 2**62:
                key = r_code.astype(np.int64) * top + corr[at]
                on_gpu = dev[at]
                out[at] = np.isin(key, key[on_gpu])
            else:  # ids too large to pack: pairs in a set
                keys = set(zip(rank[dev].tolist(), corr[dev].tolist()))
                out[at] = [k in keys for k in zip(rank[at].tolist(), corr[at].tolist())]
        memo["has_gpu_work"] = out
    return memo["has_gpu_work"]


def check_capture(trace: Trace) -> list[CaptureIssue]:
    """What in the recording of ``trace`` (over its kept steps) can mislead the figures, and what to capture instead."""
    out: list[CaptureIssue] = []
    if trace.has_gpu:
        launch = _kernel_launches(trace)
        if launch.any():
            lost = launch & ~_has_gpu_work(trace)
            share = float(lost.sum() / launch.sum())
            if share >= th.CAPTURE_LOST_LAUNCH_SHARE:
                out.append(CaptureIssue(
                    "launches_without_kernels", share,
                    f"{share:.0%} of the kernel launches have no kernel recorded: the profiler lost GPU records (its "
                    "buffers filled) or the GPU ran them outside the capture, so the GPU figures miss that work",
                    "record fewer steps at a time (torch.profiler's schedule active=2-3; nsys --duration), or raise "
                    "the activity buffers (nsys --cuda-event-trace / CUPTI buffer size)"))
        before = _kernels_before_launch(trace)
        if before >= th.CAPTURE_LOST_LAUNCH_SHARE:
            out.append(CaptureIssue(
                "kernels_before_launch", before,
                f"{before:.0%} of the kernels start before the call that launched them: the host's and the GPU's clocks "
                "disagree, so waits between them (launch gaps, syncs) cannot be measured exactly",
                "record again with the profiler's clock alignment on (a recent PyTorch or nsys), on one machine"))
    unbalanced = _crossing_ranges(trace)
    if unbalanced:
        out.append(CaptureIssue(
            "unbalanced_ranges", float(unbalanced),
            f"{unbalanced} ranges on one thread overlap without nesting: a range was pushed and popped out of order "
            "(an NVTX push without its pop, a record_function left open), so phase names may mislabel time",
            "close every range on the thread that opened it (context managers: with record_function(...) / "
            "nvtx.range)"))
    st = m.windows(trace)
    st = st[st["step"] >= 0]
    if len(st) >= th.STEADY_MIN_REPEATS:
        d = st.groupby("step")["dur_us"].max().to_numpy()
        spread = float(np.std(d) / np.mean(d)) if np.mean(d) > 0 else 0.0
        if spread >= th.CAPTURE_STEP_SPREAD and not _waits_make_the_spread(trace):
            out.append(CaptureIssue(
                "varying_steps", spread,
                f"the steps' lengths vary by {spread:.0%} (coefficient of variation; {d.min() / 1e3:.3g}-{d.max() / 1e3:.3g} "
                "ms): the figures are means over steps that do different work",
                "mark the steps that do the same work (ProfilerStep#N around each training step), or read the longest "
                "step on its own (plot --step N)"))
    return out


def _waits_make_the_spread(trace: Trace) -> bool:
    """The steps do the same work and wait for their data for different times (a loader's workers falling behind
    in bursts): with the waits taken out their lengths no longer vary. Then the spread is the data stall itself,
    which the diagnosis names and costs, not steps of different work."""
    b = m.step_breakdown(trace)
    if b.empty or not (b["data_wait_us"] > 0).any():
        return False
    work = (b["step_us"] - b["data_wait_us"]).groupby(b["step"]).max().to_numpy()
    return bool(np.mean(work) > 0 and np.std(work) / np.mean(work) < th.CAPTURE_STEP_SPREAD)


def _kernels_before_launch(trace: Trace) -> float:
    from .metrics.kernels import first_of_keys

    ev = trace.events
    rank, corr, start = ev["rank"].to_numpy(), ev["correlation"].to_numpy(), ev["start_us"].to_numpy()
    calls = np.flatnonzero(kind_in(ev, ("runtime",)) & (corr >= 0))
    k = np.flatnonzero((ev["device"].to_numpy() >= 0) & kind_in(ev, ("kernel", "collective")) & (corr >= 0))
    if not calls.size or not k.size:
        return 0.0
    first = first_of_keys(rank[calls], corr[calls], rank[k], corr[k])  # each kernel's first call of its id
    found = first >= 0
    if not found.any():
        return 0.0
    return float((start[k[found]] < start[calls[first[found]]] - th.CAPTURE_CLOCK_TOLERANCE_US).mean())


def _crossing_ranges(trace: Trace) -> int:
    """Ranges of one thread that overlap without one inside the other (a push and pop out of order)."""
    ev = trace.events
    ann = ev[kind_in(ev, ("annotation",)) & (ev["device"].to_numpy() < 0)]
    tol = th.CAPTURE_CLOCK_TOLERANCE_US
    n = 0
    for _, g in ann.groupby(["rank", "tid"]):
        g = g.sort_values(["start_us", "end_us"], ascending=[True, False])
        stack: list[float] = []
        for s, e in zip(g["start_us"].tolist(), g["end_us"].tolist()):
            while stack and stack[-1] <= s + tol:  # ranges that ended before this one starts
                stack.pop()
            if stack and e > stack[-1] + tol:  # starts inside the innermost open range, ends after it
                n += 1
                continue
            stack.append(e)
    return n


__all__ = ["STREAM_CAPTURE_CALL", "CaptureIssue", "capture_signals", "check_capture"]
