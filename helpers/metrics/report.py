"""Whole-trace figures: the step-time breakdown, the summary dict, and before/after comparisons (numbers only;
:mod:`helpers.render` words them)."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from .. import thresholds as th
from ..errors import ArgumentError
from ..model import Trace
from ._store import handed_out
from .activity import CAUSES, host_union
from .comm import comm_stats, rank_imbalance
from .copies import copy_stats
from .data import data_wait
from .gpu import gpu_busy, gpu_utilization, idle_cost_by_cause, idle_gaps, stream_busy
from .intervals import intersect, overlap
from .kernels import kernel_stats, launch_stats
from .steady import stepped
from .syncs import sync_stats
from .windows import _devices_of, windows


def step_breakdown(trace: Trace) -> pd.DataFrame:
    """One row per (rank, step): step time split into where it went.

    With GPU events: ``gpu_busy_us`` plus idle time by cause (``sync_us, data_wait_us,
    collective_us, launch_us, graph_us, other_us``), for the rank's first GPU. Without: host time in data
    waits, exposed collectives and dispatching framework ops, and the rest as ``other_us``.
    """
    rows = []
    gaps = idle_gaps(trace)
    busy = gpu_busy(trace)
    comm = comm_stats(trace)
    for rank in trace.ranks:
        win = windows(trace, rank)
        devices = _devices_of(trace, rank)
        if devices:
            d = devices[0]
            b = busy[(busy["rank"] == rank) & (busy["device"] == d)].set_index("step")
            g = gaps[(gaps["rank"] == rank) & (gaps["device"] == d)]
            by = g.groupby(["step", "cause"])["dur_us"].sum() if not g.empty else pd.Series(dtype=float)
            for step, dur in zip(win["step"], win["dur_us"]):
                row = {"rank": rank, "step": int(step), "step_us": dur, "gpu_busy_us": float(b.loc[step, "busy_us"])}
                for c in CAUSES:
                    row[f"{c}_us"] = float(by.get((step, c), 0.0))
                rows.append(row)
        else:
            ws, we = win["start_us"].to_numpy(), win["end_us"].to_numpy()
            ds, de = host_union(trace, rank, "data_wait")
            os_, oe = host_union(trace, rank, "host_compute")
            dw = overlap(ds, de, ws, we)
            # framework ops outside the data waits (the loader's own ops are data loading)
            disp = overlap(os_, oe, ws, we) - overlap(*intersect(os_, oe, ds, de), ws, we)
            cm = comm[comm["rank"] == rank]["exposed_us"].to_numpy()
            for i, (step, dur) in enumerate(zip(win["step"], win["dur_us"])):
                rest = max(dur - dw[i] - cm[i] - disp[i], 0.0)
                rows.append({"rank": rank, "step": int(step), "step_us": dur, "gpu_busy_us": float("nan"),
                             "sync_us": 0.0, "data_wait_us": float(dw[i]), "collective_us": float(cm[i]),
                             "launch_us": float(max(disp[i], 0.0)), "graph_us": 0.0, "other_us": rest})
    cols = ["rank", "step", "step_us", "gpu_busy_us", *(f"{c}_us" for c in CAUSES)]
    return pd.DataFrame(rows, columns=cols) if rows else pd.DataFrame(columns=cols, dtype=float)


def ranks_without_events(trace: Trace) -> list[int]:
    """The ranks a folder held whose file had no events (the reader's ``metadata["ranks"]``): no row of the events
    table names them, so a list of ranks taken from the table would leave them out as if they were never read."""
    held = trace.metadata.get("ranks") if isinstance(trace.metadata, dict) else None
    if not isinstance(held, dict):
        return []
    read = {int(r) for r in held if isinstance(r, (int, np.integer)) and not isinstance(r, bool)}
    return sorted(read - set(trace.ranks))


def summary(trace: Trace) -> dict[str, Any]:
    """Headline figures of a trace as a JSON-friendly dict (no DataFrames), taken over its steps: the marked
    ones, else the steady state's repeats (:func:`stepped`; ``steps_inferred`` says how they were found)."""
    trace = stepped(trace)
    win = windows(trace)
    steps = win[win["step"] >= 0]
    kstats = kernel_stats(trace)
    silent = ranks_without_events(trace)
    out: dict[str, Any] = {
        "source": trace.source,
        "format": trace.format,
        "events": int(len(trace.events)),
        "ranks": sorted(set(trace.ranks) | set(silent)),  # every rank read, those without events too
        **({"ranks_without_events": silent} if silent else {}),
        # a folder holding only part of its job: the job's size as its traces give it (absent when whole)
        **({"job_world_size": int(trace.metadata["job_world_size"])} if trace.metadata.get("job_world_size") else {}),
        "devices": trace.devices,
        "device_names": list(trace.metadata.get("device_names") or []),  # the caller's list, not the trace's
        "device_name_counts": dict(Counter(n for n in (trace.metadata.get("device_names") or []) if n)),
        "has_gpu": trace.has_gpu,
        "steps": int(len(steps)),
        "steps_inferred": trace.metadata.get("steps_inferred"),  # None: the trace marks its steps
        "step_time_ms": step_time_ms(trace),
        **data_wait(trace),
        "sync": {k: v for k, v in sync_stats(trace).items()},
        "kernels": {k: v for k, v in kstats.items() if k != "top"},
        "top_kernels": kstats["top"].to_dict("records"),
    }
    if trace.has_gpu:
        out["gpu_utilization"] = gpu_utilization(trace)
        out["streams"] = stream_busy(trace).to_dict("records")
        out["idle_by_cause_us"] = idle_cost_by_cause(trace)  # the causes and numbers diagnose ranks by
        # as shares of step time over the same denominator diagnose's signals use (each (rank, GPU)'s windows)
        windows_us = float(gpu_busy(trace)["window_us"].sum()) or 1.0
        out["idle_share_by_cause"] = {c: v / windows_us for c, v in out["idle_by_cause_us"].items()}
        out["launch"] = launch_stats(trace)
        out["copies"] = copy_stats(trace).to_dict("records")
    else:
        out["gpu_utilization"] = None  # no GPU activity: GPU figures are not available, host-side figures are
    comm = comm_stats(trace)
    if not comm.empty and comm["collective_us"].sum() > 0:
        out["communication"] = {
            "collective_us_per_step": float(comm.groupby("step")["collective_us"].mean().mean()),
            "exposed_us_per_step": float(comm.groupby("step")["exposed_us"].mean().mean()),
            "exposed_share": float(comm["exposed_us"].sum() / comm["window_us"].sum()),
        }
        imb = rank_imbalance(trace)
        out["communication"]["compute_spread"] = imb["compute_spread"]
    return handed_out(out)  # nothing in it (steps_inferred, the metadata's lists) is the trace's own object


def comparison(before: Trace, after: Trace) -> pd.DataFrame:
    """What changed between two traces: ``metric, before, after, better, noise`` (numbers; ``better`` is
    ``lower`` or ``higher``; ``noise`` the half-width of the band a difference must leave to count, NaN
    where the traces cannot say), each over its own steps (:func:`stepped`). :func:`helpers.render.change_text`
    words the change."""
    for side, t in (("before", before), ("after", after)):
        if not len(t.events):  # every figure of that side would be missing or 0: 'data wait 0.045 -> 0 (better)'
            from ..errors import ArgumentError

            raise ArgumentError(f"{t.source}: the {side} trace holds no events (the profiler recorded nothing), so there is "
                                "nothing to compare it with; record the loop again and compare that")
    before, after = stepped(before), stepped(after)
    rows = []
    band = step_time_band(before, after)
    for label, fn, better in _COMPARED:
        if label.startswith("step time"):
            # the slack a check allows (the band, at least SPEED_SLOWER_FLOOR of the step): the table, the
            # verdict and the fix checks call the same difference noise
            noise = slack_ms(band["band_ms"], band["before_ms"]) if np.isfinite(band["band_ms"]) else float("nan")
            rows.append((label, band["before_ms"], band["after_ms"], better, noise))
            continue
        b, a = fn(before), fn(after)
        if b is None and a is None:
            continue
        rows.append((label, b, a, better, float("nan")))
    return pd.DataFrame(rows, columns=["metric", "before", "after", "better", "noise"])


def step_times(t: Trace) -> np.ndarray:
    """Each step's time in ms (the slowest rank's), in step order; empty without steps."""
    w = windows(t)
    w = w[w["step"] >= 0]
    if w.empty:
        return np.array([])
    return (w.groupby("step")["dur_us"].max() / 1e3).to_numpy(dtype=float)


def typical_steps(t: Trace, count: int = 1) -> list[int]:
    """The ``count`` consecutive steps of ``t`` (step numbers, as :func:`windows` and ``plots.timeline(step=)`` take
    them) whose mean time is nearest the median step's (:func:`step_times`; the earliest such run on a tie): the
    steps a figure of "one step" shows, rather than the first, which often carries a slow start (the course's
    recorded lab-02 loops: the first profiled step 3-12% longer than the median), or one a periodic stall
    lengthens. Fewer than ``count`` steps: all of them; no steps: ``[]``. Among the steps the analysis and the
    timelines read (:func:`stepped`: a trace without markers, its steady state's repeats)."""
    if count < 1:
        raise ArgumentError(f"typical_steps(): count={count}: give 1 or more")
    w = windows(stepped(t))
    w = w[w["step"] >= 0]
    if w.empty:
        return []
    per = w.groupby("step")["dur_us"].max()
    steps, times = per.index.to_numpy(dtype=int), per.to_numpy(dtype=float)
    if len(steps) <= count:
        return [int(s) for s in steps]
    mid = float(np.median(times))
    means = np.convolve(times, np.ones(count) / count, mode="valid")
    first = int(np.argmin(np.abs(means - mid)))  # argmin: the earliest of equals
    return [int(s) for s in steps[first:first + count]]


def _spread(x: np.ndarray) -> float:
    return float(1.4826 * np.median(np.abs(x - np.median(x)))) if len(x) else float("nan")


def noise_band_ms(before_ms: np.ndarray, after_ms: np.ndarray) -> float:
    """The noise band (ms) of the difference of two runs' median steps: ``thresholds.NOISE_BAND_SE`` standard errors
    from each run's own spread; NaN with fewer than ``NOISE_MIN_STEPS`` steps a side."""
    b, a = np.asarray(before_ms, dtype=float), np.asarray(after_ms, dtype=float)
    if min(len(b), len(a)) < th.NOISE_MIN_STEPS:
        return float("nan")
    return float(th.NOISE_BAND_SE * np.hypot(1.2533 * _spread(b) / np.sqrt(len(b)), 1.2533 * _spread(a) / np.sqrt(len(a))))


def slack_ms(band_ms: float, before_ms: float) -> float:
    """How far a median step ``before_ms`` ms may move before it counts as moved: the noise band (:func:`noise_band_ms`;
    with too few steps for one, ``SPEED_NO_BAND_REL`` of the step), at least ``SPEED_SLOWER_FLOOR`` of the step (the
    profiler's own overhead moves a short step by a few percent from capture to capture)."""
    noise = band_ms if math.isfinite(band_ms) else th.SPEED_NO_BAND_REL * before_ms
    return max(noise, th.SPEED_SLOWER_FLOOR * before_ms)


def step_time_band(before: Trace, after: Trace) -> dict[str, float]:
    """Median step times of two traces and the noise band of their difference (``thresholds.NOISE_BAND_SE``
    standard errors, from each run's own spread): ``before_ms, after_ms, band_ms`` (NaN with fewer than
    ``NOISE_MIN_STEPS`` steps a side), ``before_spread, after_spread`` (relative), ``n_before, n_after``.

    The one step time of a before/after: :func:`comparison`'s row and every check's line quote these medians,
    so a table and a verdict on the same pair never disagree."""
    b, a = step_times(before), step_times(after)
    out = {"before_ms": float(np.median(b)) if len(b) else (step_time_ms(before) or float("nan")),
           "after_ms": float(np.median(a)) if len(a) else (step_time_ms(after) or float("nan")),
           "n_before": float(len(b)), "n_after": float(len(a)), "band_ms": noise_band_ms(b, a)}
    # steps of no length (a zero-length range) have no relative spread: NaN, not a division by zero
    out["before_spread"] = _spread(b) / out["before_ms"] if len(b) and out["before_ms"] > 0 else float("nan")
    out["after_spread"] = _spread(a) / out["after_ms"] if len(a) and out["after_ms"] > 0 else float("nan")
    return out


def timing_verdict(before: Trace, after: Trace) -> str:
    """``faster``, ``slower`` (beyond the noise band, at least ``SPEED_SLOWER_FLOOR`` of the step: :func:`slack_ms`,
    the slack the fix checks allow), ``within noise``, ``too noisy`` (a run's steps spread more than
    ``NOISE_BUSY_SPREAD``: the machine is busy) or ``unknown`` (too few steps for a band). The machine's own pace
    is not read here: :func:`helpers.metrics.pace.judge_step` adds it.

    A noisy run leaves the verdict standing where only the run that came out faster is noisy and the difference is
    beyond the band (which its spread already widens): a busy machine only lengthens steps, so a quieter run of it
    would lie further still from the slower one. Noise decides where the slower run is noisy (its slowness may be
    the machine's) or the difference is inside the band."""
    band = step_time_band(before, after)
    noisy_before, noisy_after = (bool(band[k] > th.NOISE_BUSY_SPREAD) for k in ("before_spread", "after_spread"))
    if not np.isfinite(band["band_ms"]):
        return "too noisy" if noisy_before or noisy_after else "unknown"
    diff = band["after_ms"] - band["before_ms"]
    if abs(diff) <= slack_ms(band["band_ms"], band["before_ms"]):
        return "too noisy" if noisy_before or noisy_after else "within noise"
    if noisy_after if diff > 0 else noisy_before:  # the slower run is noisy: the machine may have made it slower
        return "too noisy"
    return "slower" if diff > 0 else "faster"


def step_time_ms(t: Trace) -> float | None:
    """Mean step time: the steps' total span (up to the end of their GPU work) over their number."""
    w = windows(t)
    w = w[w["step"] >= 0] if (w["step"] >= 0).any() else w
    if w.empty:
        return None
    return float(w.groupby("rank")["dur_us"].mean().max() / 1e3)


def _comm(t: Trace, col: str) -> float | None:
    cs = comm_stats(t)
    if cs.empty or cs["collective_us"].sum() <= 0:
        return None
    return float(cs.groupby("step")[col].mean().mean() / 1e3)


_COMPARED = [
    ("step time (ms, median)", step_time_ms, "lower"),
    ("GPU utilization", lambda t: gpu_utilization(t) if t.has_gpu else None, "higher"),
    ("kernels per step", lambda t: kernel_stats(t)["per_step"] if t.has_gpu else None, "lower"),
    ("data wait (ms/step)", lambda t: data_wait(t)["data_wait_us_per_step"] / 1e3, "lower"),
    ("sync points per step", lambda t: sync_stats(t)["sync_points_per_step"] if t.has_gpu else None, "lower"),
    ("host blocked in syncs (ms/step)", lambda t: sync_stats(t)["blocked_us_per_step"] / 1e3 if t.has_gpu else None, "lower"),
    ("exposed communication (ms/step)", lambda t: _comm(t, "exposed_us"), "lower"),
]
