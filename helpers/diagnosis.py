"""Diagnosis: name the bottleneck patterns a trace shows, with evidence and the fix.

A trace without step markers is judged over its steady state (:mod:`helpers.metrics.steady`: what
repeats, e.g. the NVTX ranges of an Nsight export), and each finding's evidence says so
(``steps_inferred``). Patterns follow the course syllabus's table: data loading stall, launch overhead, sync stall,
long host-to-device copies, a host-bound loop, communication bottleneck, uneven load across
ranks, ``gpu_bound`` only when the GPU itself is busy (then the next tool is Nsight Compute), and
``capture_window`` when the capture is mostly idle and has no steps. :func:`signals` computes every
figure the rules read; :data:`RULES` is the table of patterns (predicate, cost, words, evidence).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import metrics as m
from . import thresholds as th
from .model import Trace

PATTERNS = ("data_stall", "launch_overhead", "sync_stall", "h2d_copy", "host_bound", "communication",
            "load_imbalance", "gpu_bound", "capture_window")

FIXES = {
    "data_stall": "Feed the GPU faster: DataLoader(num_workers>0, pin_memory=True, prefetch_factor, "
                  "persistent_workers=True) and .to(device, non_blocking=True); move heavy per-sample work out of the loop.",
    "launch_overhead": "Launch fewer, bigger kernels: torch.compile (fuses ops), CUDA Graphs (one launch replays "
                       "the whole step), fused/foreach optimizers, or a bigger batch so each kernel does more work.",
    "sync_stall": "Remove syncs from the hot loop: drop torch.cuda.synchronize(), keep losses/metrics on the GPU "
                  "and call .item()/.cpu()/print only every N steps; avoid branching on GPU values.",
    "h2d_copy": "Make copies fast and hidden: pinned host memory (pin_memory=True or tensor.pin_memory()), "
                ".to(device, non_blocking=True), and prefetch the next batch on a side stream while this one computes.",
    "host_bound": "Take the host work off the critical path: do it every N steps, on the GPU (torch ops instead of "
                  "NumPy/Python), in a background thread, or in the DataLoader's workers; profile it with "
                  "with_stack=True (or py-spy) to see which Python code it is.",
    "communication": "Overlap and shrink communication: let DDP bucket gradients and all-reduce during backward "
                     "(tune bucket_cap_mb), compress gradients (bf16/fp16 comm hook), and all-reduce less often (no_sync with accumulation).",
    "load_imbalance": "Give every rank the same work: even shards and batch sizes, the same sequence lengths per rank, "
                      "or a better parallelism strategy; the fast ranks' waiting in all-reduce is the cost.",
    "gpu_bound": "The GPU itself is the bottleneck: profile the top kernels with Nsight Compute "
                 "(ncu --set full -k <kernel>) and make them faster (mixed precision, better shapes, fused kernels).",
    "capture_window": "Scope the capture to the training loop's steady state: torch.profiler.schedule(wait=1, warmup=1, "
                      "active=3) with prof.step() each step, or nsys profile --capture-range=cudaProfilerApi / "
                      "--delay and --duration; mark steps (ProfilerStep#N or an NVTX range) so figures are per step.",
}
#: On a CPU-only trace there is no GPU to feed: the same fix, worded for the loop.
CPU_FIXES = {
    "host_bound": "Take the host work off the loop's critical path: run it every N steps, vectorise it (torch or NumPy "
                  "array ops instead of Python loops), or move it to a background thread or the DataLoader's workers; "
                  "profile it with with_stack=True (or py-spy) to see which Python code it is.",
    "data_stall": "Load batches ahead of the loop: DataLoader(num_workers>0, prefetch_factor, persistent_workers=True) "
                  "so workers prepare the next batch while this one trains; move heavy per-sample work out of the loop.",
}


@dataclass
class Finding:
    """One diagnosed problem."""

    pattern: str  # one of PATTERNS
    cost: float  # share of step time the fix would save at most (findings never add up to more than 1)
    summary: str  # one sentence a learner can read
    evidence: dict[str, Any] = field(default_factory=dict)  # figures read off the trace (incl. gpu_utilization)
    fix: str = ""
    window: tuple[float, float] | None = None  # (start_us, end_us) where it shows most

    @property
    def share(self) -> float:
        """Old name of :attr:`cost`, kept read-only for notebooks and checks written against it."""
        return self.cost

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["window"] = list(self.window) if self.window else None
        return d


# --- signals: every figure a rule reads, named like its threshold -----------------------------
def signals(trace: Trace) -> dict[str, Any]:
    """Every figure the rules use, as plain numbers, named like the thresholds they are held to.

    Shares are of step time summed over (rank, device) pairs. ``*_share`` idle figures come from
    :func:`helpers.metrics.idle_cost_by_cause`, the breakdown ``summary`` prints, so costs reconcile.
    """
    cap = m.capture_stats(trace)  # the whole capture, before any steady state is looked for
    has_markers = not trace.steps.empty
    trace = m.stepped(trace)
    win = m.windows(trace)
    has_steps = bool((win["step"] >= 0).any())
    n_steps = max(int((win["step"] >= 0).sum()), 1)
    sg: dict[str, Any] = {"has_gpu": trace.has_gpu, "has_steps": has_steps, "has_step_markers": has_markers,
                          "steps": n_steps if has_steps else 0,
                          "capture_ms": cap["capture_ms"], "capture_host_share": cap["host_share"],
                          "capture_idle_gpu_share": cap["gpu_share"]}
    if trace.metadata.get("steps_inferred"):
        sg["steps_inferred"] = dict(trace.metadata["steps_inferred"])
    dw = m.data_wait(trace)
    sg["cpu_data_wait_share"] = dw["data_wait_share"]
    sg["host_data_wait_ms_per_step"] = dw["data_wait_us_per_step"] / 1e3
    if trace.has_gpu:
        busy = m.gpu_busy(trace)
        denom = float(busy["window_us"].sum()) or 1.0
        cost = m.idle_cost_by_cause(trace)
        util = m.gpu_utilization(trace)
        sync = m.sync_stats(trace)
        kstats = m.kernel_stats(trace)
        launch = m.launch_stats(trace)
        sg.update({
            # gpu_bound's bar: busy work, or inside a CUDA Graph replay (its gaps are the GPU's own per-kernel
            # cost, which no host change removes); the busy figure itself counts the kernels only.
            "gpu_utilization": util, "gpu_bound_busy": float(busy["graph_span_us"].sum()) / denom,
            "gpu_kernel_share": float(busy["kernel_us"].sum()) / denom,
            "data_stall_share": cost["data_wait"] / denom, "sync_stall_share": cost["sync"] / denom,
            "launch_idle_share": cost["launch"] / denom, "host_bound_idle_share": cost["other"] / denom,
            "collective_idle_share": cost["collective"] / denom,
            "gpu_idle_ms_per_step": {c: v / n_steps / 1e3 for c, v in cost.items()},
            "sync_points_per_step": sync["sync_points_per_step"], "sync_blocked_share": sync["blocked_share"],
            "host_blocked_ms_per_step": sync["blocked_us_per_step"] / 1e3, "sync_gpu_idle_share": 1.0 - util,
            "sync_caused_by": sync["causes"],
            "kernels_per_step": kstats["per_step"], "launch_median_kernel_us": kstats["median_us"],
            "share_kernels_under_10us": kstats["share_under_10us"],
            "median_launch_call_us": launch["median_launch_call_us"],
            "launch_individual_share": launch["individually_launched_share"],
        })
        h2d = m.h2d_stats(trace)
        if h2d:
            sg.update({"h2d_exposed_share": h2d["exposed_us"] / denom, "h2d_pageable_share": h2d["pageable_byte_share"],
                       "h2d_overlap": h2d["overlap_with_compute"], "h2d_gb_per_s": h2d["gb_per_s"],
                       "h2d_ms_per_step": h2d["time_us"] / n_steps / 1e3})
    else:
        # CPU-only: the host is the only device. Its time outside PyTorch ops, data waits and exposed
        # collectives is the loop's own Python / NumPy work (step_breakdown's ``other``).
        b = m.step_breakdown(trace)
        total = float(b["step_us"].sum()) or 1.0
        sg.update({"cpu_host_other_share": float(b["other_us"].sum()) / total,
                   "cpu_op_share": float(b["launch_us"].sum()) / total,
                   "host_other_ms_per_step": float(b["other_us"].mean()) / 1e3 if len(b) else 0.0})
    cs = m.comm_stats(trace)
    if not cs.empty and cs["collective_us"].sum() > 0:
        imb = m.rank_imbalance(trace)
        per_step = cs.groupby("step")[["collective_us", "exposed_us"]].mean()
        sg.update({"comm_exposed_share": float(cs["exposed_us"].sum() / cs["window_us"].sum()),
                   "imbalance_spread": imb["compute_spread"], "ranks": imb["ranks"],
                   "collective_ms_per_step": float(per_step["collective_us"].mean() / 1e3),
                   "exposed_ms_per_step": float(per_step["exposed_us"].mean() / 1e3)})
    return sg


def _get(sg: dict[str, Any], key: str) -> float:
    v = sg.get(key)
    return float(v) if isinstance(v, (int, float)) and v == v else 0.0


# --- rules as data --------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """One pattern: when it fires (a predicate over signals), its cost signal, its words, its evidence."""

    pattern: str
    when: Callable[[dict[str, Any]], bool]
    cost: str  # the signal that is its cost
    say: Callable[[dict[str, Any]], str]
    evidence: tuple[str, ...]
    gpu: bool | None = True  # True: GPU traces only; False: CPU-only traces only; None: both


RULES: tuple[Rule, ...] = (
    Rule("data_stall", lambda s: _get(s, "data_stall_share") >= th.DATA_STALL_SHARE, "data_stall_share",
         lambda s: f"The GPU waits for data: {s['data_stall_share']:.0%} of step time it sits idle while the host loads the next batch.",
         ("data_stall_share", "host_data_wait_ms_per_step", "gpu_idle_ms_per_step")),
    Rule("sync_stall",
         lambda s: (_get(s, "sync_points_per_step") >= th.SYNC_POINTS_PER_STEP and _get(s, "sync_blocked_share") >= th.SYNC_BLOCKED_SHARE
                    and _get(s, "sync_gpu_idle_share") >= th.SYNC_GPU_IDLE_SHARE and _get(s, "sync_stall_share") > 0),
         "sync_stall_share",
         lambda s: (f"{s['sync_points_per_step']:.1f} host syncs per step: the host waits {s['sync_blocked_share']:.0%} of the step "
                    f"for the GPU, and the GPU then idles {s['sync_gpu_idle_share']:.0%} of it waiting for the host; they take "
                    f"turns instead of overlapping (at most {s['sync_stall_share']:.0%} to win back)."),
         ("sync_stall_share", "sync_points_per_step", "host_blocked_ms_per_step", "sync_blocked_share", "sync_caused_by")),
    Rule("launch_overhead",
         lambda s: (_get(s, "launch_idle_share") >= th.LAUNCH_IDLE_SHARE and _get(s, "launch_median_kernel_us") <= th.LAUNCH_MEDIAN_KERNEL_US
                    and _get(s, "launch_individual_share") >= th.LAUNCH_INDIVIDUAL_SHARE),
         "launch_idle_share",
         lambda s: (f"{s['kernels_per_step']:.0f} kernels per step, median {s['launch_median_kernel_us']:.1f} us: the GPU finishes each "
                    f"faster than the host launches the next, so it idles {s['launch_idle_share']:.0%} of the step."),
         ("launch_idle_share", "kernels_per_step", "launch_median_kernel_us", "share_kernels_under_10us",
          "median_launch_call_us", "launch_individual_share")),
    Rule("h2d_copy",
         lambda s: (_get(s, "h2d_exposed_share") >= th.H2D_EXPOSED_SHARE
                    # pinned copies that already overlap compute run at link speed: nothing left to fix
                    and (_get(s, "h2d_pageable_share") >= th.H2D_PAGEABLE_SHARE or _get(s, "h2d_overlap") < th.H2D_MIN_OVERLAP)),
         "h2d_exposed_share",
         lambda s: (f"Host-to-device copies take {s['h2d_ms_per_step']:.2f} ms per step at {s['h2d_gb_per_s']:.1f} GB/s "
                    f"({s['h2d_pageable_share']:.0%} of bytes from pageable memory) and nothing computes meanwhile."),
         ("h2d_exposed_share", "h2d_ms_per_step", "h2d_gb_per_s", "h2d_pageable_share", "h2d_overlap")),
    Rule("host_bound", lambda s: _get(s, "host_bound_idle_share") >= th.HOST_BOUND_IDLE_SHARE, "host_bound_idle_share",
         lambda s: (f"The GPU idles {s['host_bound_idle_share']:.0%} of the step while the host runs code that is neither data "
                    "loading, kernel launching nor a sync (Python, NumPy, logging or metric work between steps)."),
         ("host_bound_idle_share", "gpu_idle_ms_per_step", "host_busy_in")),
    Rule("communication",
         lambda s: _get(s, "comm_exposed_share") >= th.COMM_EXPOSED_SHARE and not _imbalanced(s), "comm_exposed_share",
         lambda s: (f"Collectives take {s['collective_ms_per_step']:.2f} ms per step and {s['comm_exposed_share']:.0%} of step "
                    "time is spent in communication that nothing overlaps."),
         ("comm_exposed_share", "collective_ms_per_step", "exposed_ms_per_step", "ranks"), gpu=None),
    Rule("gpu_bound", lambda s: _get(s, "gpu_bound_busy") >= th.GPU_BOUND_BUSY, "gpu_kernel_share",
         lambda s: (f"The GPU is busy {s['gpu_utilization']:.0%} of the step: it is the bottleneck itself."
                    if s["gpu_bound_busy"] - s["gpu_utilization"] < 0.02 else
                    f"The GPU is busy {s['gpu_utilization']:.0%} of the step with kernels, and CUDA Graph replays span "
                    f"{s['gpu_bound_busy']:.0%} of it: the rest of each replay is the gaps between its "
                    f"{s['kernels_per_step']:.0f} kernels a step, the GPU's own per-kernel cost. No host change removes "
                    "them; fewer, bigger kernels do (fuse them: torch.compile, bigger batches) before Nsight Compute."),
         ("gpu_bound_busy", "gpu_kernel_share", "top_kernels")),
    Rule("host_bound", lambda s: _get(s, "cpu_host_other_share") >= th.CPU_HOST_BOUND_SHARE, "cpu_host_other_share",
         lambda s: (f"The host spends {s['cpu_host_other_share']:.0%} of each step ({s['host_other_ms_per_step']:.1f} ms) outside "
                    f"PyTorch ops, data loading and communication, more than in the model's ops ({s['cpu_op_share']:.0%}): "
                    "Python, NumPy, logging or metric code runs the loop. CPU-only trace: the host is the only device, so "
                    "it shows how long that work takes, not how long a GPU would sit idle for it."),
         ("cpu_host_other_share", "host_other_ms_per_step", "cpu_op_share", "host_busy_in"), gpu=False),
    Rule("data_stall", lambda s: _get(s, "cpu_data_wait_share") >= th.CPU_DATA_WAIT_SHARE, "cpu_data_wait_share",
         lambda s: (f"The loop spends {s['cpu_data_wait_share']:.0%} of each step waiting for the next batch "
                    "(CPU-only trace: no GPU activity recorded)."),
         ("cpu_data_wait_share", "host_data_wait_ms_per_step"), gpu=False),
)


def _imbalanced(s: dict[str, Any]) -> bool:
    return _get(s, "ranks") >= 2 and _get(s, "imbalance_spread") >= th.IMBALANCE_SPREAD


def _capture_is_idle(s: dict[str, Any]) -> bool:
    """No steps marked, and neither the GPU nor the host did much in the capture (a steady state found
    in it does not change that: the capture then holds a little loop in a lot of idle time)."""
    gpu_idle = (not s["has_gpu"]) or _get(s, "capture_idle_gpu_share") < th.CAPTURE_IDLE_GPU_SHARE
    return not s["has_step_markers"] and gpu_idle and s["capture_host_share"] < th.CAPTURE_IDLE_HOST_SHARE


def diagnose(trace: Trace) -> list[Finding]:
    """Findings for a trace, most costly first. An empty list means nothing stood out.

    Costs are shares of step time a fix would save at most; in rank order each is capped at what
    the findings before it leave, so together they never exceed the step.
    """
    sg = signals(trace)
    if _capture_is_idle(sg):
        return [_capture_window(trace, sg)]
    trace = m.stepped(trace)  # the steps signals() measured: the markers', or the steady state's repeats
    if "top_kernels" not in sg and trace.has_gpu:
        top = m.kernel_stats(trace)["top"].head(3)  # the cached call signals() made
        sg["top_kernels"] = top[["name", "total_us", "share"]].to_dict("records")
    sg["host_busy_in"] = _host_ranges_in_other_gaps(trace) if trace.has_gpu else _host_ranges_outside_ops(trace)
    findings: list[Finding] = []
    for rule in RULES:
        if rule.gpu is not None and rule.gpu != trace.has_gpu:
            continue
        if not rule.when(sg):
            continue
        ev = {k: sg[k] for k in rule.evidence if k in sg}
        if trace.has_gpu:
            ev["gpu_utilization"] = sg["gpu_utilization"]
        if "steps_inferred" in sg:
            ev["steps_inferred"] = sg["steps_inferred"]
        fixes = FIXES if trace.has_gpu else {**FIXES, **CPU_FIXES}
        findings.append(Finding(rule.pattern, _get(sg, rule.cost), rule.say(sg), ev, fixes[rule.pattern],
                                _window_for(trace, rule.pattern)))
    findings += _imbalance_findings(trace, sg)
    findings.sort(key=lambda f: -f.cost)
    left = 1.0
    for f in findings:
        f.cost = max(min(f.cost, left), 0.0)
        left -= f.cost
    return findings


def _capture_window(trace: Trace, sg: dict[str, Any]) -> Finding:
    gpu = f"the GPU is busy {sg['capture_idle_gpu_share']:.1%} of it" if trace.has_gpu else "no GPU work is recorded"
    text = (f"The capture spans {sg['capture_ms'] / 1e3:.1f} s without step markers; {gpu} and the host is in recorded "
            f"ops, CUDA calls or ranges {sg['capture_host_share']:.0%} of it: the figures describe an idle capture, not a training loop.")
    window = None
    steady = sg.get("steps_inferred")
    if steady:
        st = m.stepped(trace).steps
        window = (float(st["start_us"].min()), float(st["end_us"].max()))
        if (window[1] - window[0]) / 1e3 < th.CAPTURE_STEADY_SPAN_SHARE * sg["capture_ms"]:
            text += (f" A loop repeats {steady['steps']} times at {window[0] / 1e3:.0f}-{window[1] / 1e3:.0f} ms: "
                     "scope the capture to it.")
        else:
            text += (f" Something repeats {steady['steps']} times across the capture, idle between repeats on host and "
                     "GPU alike (a sleep, I/O or another process): the trace cannot show what the program waited for.")
    ev = {k: sg[k] for k in ("capture_ms", "capture_host_share", "capture_idle_gpu_share", "has_step_markers",
                             "steps_inferred") if k in sg}
    if trace.has_gpu:
        ev["gpu_utilization"] = sg["capture_idle_gpu_share"]
    return Finding("capture_window", 0.0, text, ev, FIXES["capture_window"], window)


def _host_ranges_in_other_gaps(trace: Trace, top: int = 3) -> dict[str, float]:
    """What the host was doing in the GPU gaps no other cause explains: annotation (NVTX / record_function)
    ranges other than steps, with ms of those gaps they cover."""
    gaps = m.idle_gaps(trace)
    gaps = gaps[gaps["cause"] == "other"]
    if gaps.empty:
        return {}
    ev = trace.events
    ann = ev[(ev["kind"] == "annotation") & (ev["device"] < 0)]  # few rows: filter before string matching
    ann = ann[~ann["name"].str.startswith("ProfilerStep#")]
    if ann.empty:
        return {}
    gs, ge = m.merge_intervals(gaps["start_us"].to_numpy(), gaps["end_us"].to_numpy())
    cover = m.overlap(gs, ge, ann["start_us"].to_numpy(), ann["end_us"].to_numpy())
    by = pd.Series(cover, index=ann["name"].to_numpy()).groupby(level=0).sum().sort_values(ascending=False)
    by = by[by > 0].head(top)
    return {str(k)[:60]: float(v / 1e3) for k, v in by.items()}


def _other_host_stretches(trace: Trace) -> tuple[Any, Any]:
    """CPU-only traces: the stretches of the analysis windows in which the host is in no PyTorch op,
    data wait or collective (what step_breakdown counts as ``other``)."""
    starts, ends = [], []
    for rank in trace.ranks:
        parts = [m.host_union(trace, rank, c) for c in ("host_compute", "data_wait", "collective")]
        us, ue = m.merge_intervals(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        win = m.windows(trace, rank)
        for ws, we in zip(win["start_us"], win["end_us"]):
            gs, ge = m.gaps_in(us, ue, float(ws), float(we))
            starts.append(gs)
            ends.append(ge)
    if not starts:
        return np.zeros(0), np.zeros(0)
    return m.merge_intervals(np.concatenate(starts), np.concatenate(ends))


def _host_ranges_outside_ops(trace: Trace, top: int = 3) -> dict[str, float]:
    """CPU-only traces: the annotation ranges (not steps) the host was in outside ops, with ms they cover."""
    gs, ge = _other_host_stretches(trace)
    ev = trace.events
    ann = ev[(ev["kind"] == "annotation") & (ev["device"] < 0)]
    ann = ann[~ann["name"].str.startswith("ProfilerStep#")]
    if ann.empty or gs.size == 0:
        return {}
    cover = m.overlap(gs, ge, ann["start_us"].to_numpy(), ann["end_us"].to_numpy())
    by = pd.Series(cover, index=ann["name"].to_numpy()).groupby(level=0).sum().sort_values(ascending=False)
    by = by[by > 0].head(top)
    return {str(k)[:60]: float(v / 1e3) for k, v in by.items()}


def _window_for(trace: Trace, pattern: str) -> tuple[float, float] | None:
    cause = {"data_stall": "data_wait", "sync_stall": "sync", "launch_overhead": "launch", "host_bound": "other"}.get(pattern)
    if trace.has_gpu and cause:
        gaps = m.idle_gaps(trace)
        return _largest_gap(gaps, cause) or (_longest_sync(trace) if pattern == "sync_stall" else None)
    if pattern == "host_bound" and not trace.has_gpu:
        gs, ge = _other_host_stretches(trace)
        if gs.size:
            i = int(np.argmax(ge - gs))
            return float(gs[i]), float(ge[i])
        return None
    if pattern == "h2d_copy":
        ev = trace.events
        big = ev[(ev["kind"] == "memcpy") & (ev["copy_kind"] == "H2D")]
        if not big.empty:
            row = big.loc[big["dur_us"].idxmax()]
            return float(row["start_us"]), float(row["end_us"])
    if pattern in ("data_stall", "communication"):  # CPU-only or comm: the longest step
        win = m.windows(trace)
        if pattern == "communication":
            cs = m.comm_stats(trace)
            worst = cs.loc[cs["exposed_us"].idxmax()]
            win = m.windows(trace, int(worst["rank"]))
            row = win[win["step"] == worst["step"]].iloc[0]
        else:
            row = win.loc[win["dur_us"].idxmax()]
        return float(row["start_us"]), float(row["end_us"])
    return None


def _largest_gap(gaps, cause: str) -> tuple[float, float] | None:
    g = gaps[gaps["cause"] == cause]
    if g.empty:
        return None
    row = g.loc[g["dur_us"].idxmax()]
    return float(row["start_us"]), float(row["end_us"])


def _longest_sync(trace: Trace) -> tuple[float, float] | None:
    ev = trace.events
    s = ev[m.is_sync_call(trace)]
    if s.empty:
        return None
    row = s.loc[s["dur_us"].idxmax()]
    return float(row["start_us"]), float(row["end_us"])


def _imbalance_findings(trace: Trace, sg: dict[str, Any]) -> list[Finding]:
    """Uneven load across ranks: its cost is the fastest rank's exposed (waiting) collective time."""
    if "comm_exposed_share" not in sg or not _imbalanced(sg):
        return []
    cs = m.comm_stats(trace)
    imb = m.rank_imbalance(trace)
    pr = imb["per_rank"]
    fast = pr[pr["rank"] == imb["fastest_rank"]].iloc[0]
    slow = pr[pr["rank"] == imb["slowest_rank"]].iloc[0]
    worst = cs.loc[cs["exposed_us"].idxmax()]
    win = m.windows(trace, int(worst["rank"]))
    wrow = win[win["step"] == worst["step"]].iloc[0]
    cost = float(fast["exposed_us"] / (cs[cs["rank"] == imb["fastest_rank"]]["window_us"].mean() or 1.0))
    return [Finding(
        "load_imbalance", cost,
        f"Rank {imb['slowest_rank']} computes {slow['compute_us'] / 1e3:.1f} ms per step, rank {imb['fastest_rank']} only "
        f"{fast['compute_us'] / 1e3:.1f} ms ({imb['compute_spread']:.0%} spread): the fast ranks wait in the all-reduce.",
        {"compute_spread": imb["compute_spread"], "slowest_rank": imb["slowest_rank"], "fastest_rank": imb["fastest_rank"],
         "compute_ms_per_step_by_rank": {int(r): float(c / 1e3) for r, c in zip(pr["rank"], pr["compute_us"])},
         "exposed_collective_ms_per_step_by_rank": {int(r): float(c / 1e3) for r, c in zip(pr["rank"], pr["exposed_us"])}},
        FIXES["load_imbalance"], (float(wrow["start_us"]), float(wrow["end_us"])))]


__all__ = ["CPU_FIXES", "FIXES", "Finding", "PATTERNS", "RULES", "Rule", "diagnose", "signals"]
