"""Diagnosis: name the bottleneck patterns a trace shows, with evidence and the fix.

Patterns follow the course syllabus's table: data loading stall, launch overhead, sync stall,
long host-to-device copies, communication bottleneck, uneven load across ranks, and
``gpu_bound`` when no host-side problem is found (then the next tool is Nsight Compute).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from . import metrics as m
from . import thresholds as th
from .model import Trace

PATTERNS = ("data_stall", "launch_overhead", "sync_stall", "h2d_copy", "communication", "load_imbalance", "gpu_bound")

FIXES = {
    "data_stall": "Feed the GPU faster: DataLoader(num_workers>0, pin_memory=True, prefetch_factor, "
                  "persistent_workers=True) and .to(device, non_blocking=True); move heavy per-sample work out of the loop.",
    "launch_overhead": "Launch fewer, bigger kernels: torch.compile (fuses ops), CUDA Graphs (one launch replays "
                       "the whole step), fused/foreach optimizers, or a bigger batch so each kernel does more work.",
    "sync_stall": "Remove syncs from the hot loop: drop torch.cuda.synchronize(), keep losses/metrics on the GPU "
                  "and call .item()/.cpu()/print only every N steps; avoid branching on GPU values.",
    "h2d_copy": "Make copies fast and hidden: pinned host memory (pin_memory=True or tensor.pin_memory()), "
                ".to(device, non_blocking=True), and prefetch the next batch on a side stream while this one computes.",
    "communication": "Overlap and shrink communication: let DDP bucket gradients and all-reduce during backward "
                     "(tune bucket_cap_mb), compress gradients (bf16/fp16 comm hook), and all-reduce less often (no_sync with accumulation).",
    "load_imbalance": "Give every rank the same work: even shards and batch sizes, the same sequence lengths per rank, "
                      "or a better parallelism strategy; the fast ranks' waiting in all-reduce is the cost.",
    "gpu_bound": "The GPU itself is the bottleneck: profile the top kernels with Nsight Compute "
                 "(ncu --set full -k <kernel>) and make them faster (mixed precision, better shapes, fused kernels).",
}


@dataclass
class Finding:
    """One diagnosed problem."""

    pattern: str  # one of PATTERNS
    share: float  # share of step time it costs (gpu_bound: share of step time the GPU is busy)
    summary: str  # one sentence a learner can read
    evidence: dict[str, Any] = field(default_factory=dict)  # figures read off the trace
    fix: str = ""
    window: tuple[float, float] | None = None  # (start_us, end_us) where it shows most

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["window"] = list(self.window) if self.window else None
        return d


def diagnose(trace: Trace) -> list[Finding]:
    """Findings for a trace, most costly first. An empty list means nothing stood out."""
    findings: list[Finding] = []
    win = m.windows(trace)
    total_us = float(win["dur_us"].sum()) or 1.0
    n_steps = max(int((win["step"] >= 0).sum()), 1)
    if trace.has_gpu:
        findings += _gpu_findings(trace, total_us, n_steps)
    else:
        findings += _host_findings(trace, n_steps)
    findings += _comm_findings(trace)
    findings.sort(key=lambda f: (f.pattern == "gpu_bound", -f.share))
    if trace.has_gpu and not any(f.pattern != "gpu_bound" for f in findings) and not any(f.pattern == "gpu_bound" for f in findings):
        findings.append(_gpu_bound(trace, m.gpu_utilization(trace), note="no host-side bottleneck found"))
    return findings


def _largest_gap(gaps, cause: str) -> tuple[float, float] | None:
    g = gaps[gaps["cause"] == cause]
    if g.empty:
        return None
    row = g.loc[g["dur_us"].idxmax()]
    return float(row["start_us"]), float(row["end_us"])


def _devices_total(trace: Trace) -> float:
    """Step time summed over every (rank, device) pair, the denominator of idle shares."""
    busy = m.gpu_busy(trace)
    return float(busy["window_us"].sum()) or 1.0


def _gpu_findings(trace: Trace, total_us: float, n_steps: int) -> list[Finding]:
    out: list[Finding] = []
    gaps = m.idle_gaps(trace)
    denom = _devices_total(trace)
    idle = m.idle_by_cause(trace)
    util = m.gpu_utilization(trace)
    dw = m.data_wait(trace)
    if idle["data_wait"] / denom >= th.DATA_STALL_SHARE:
        out.append(Finding(
            "data_stall", idle["data_wait"] / denom,
            f"The GPU waits for data: {idle['data_wait'] / denom:.0%} of step time it sits idle while the host loads the next batch.",
            {"gpu_idle_waiting_for_data_ms_per_step": idle["data_wait"] / n_steps / 1e3,
             "host_data_wait_ms_per_step": dw["data_wait_us_per_step"] / 1e3,
             "gpu_utilization": util},
            FIXES["data_stall"], _largest_gap(gaps, "data_wait")))
    sync = m.sync_stats(trace)
    idle_share = 1.0 - util
    if (sync["sync_points_per_step"] >= th.SYNC_POINTS_PER_STEP and sync["blocked_share"] >= th.SYNC_BLOCKED_SHARE
            and idle_share >= th.SYNC_GPU_IDLE_SHARE):
        # Host and GPU take turns: the host waits for the GPU, then the GPU waits for the host.
        # At best the overlap restores the shorter of the two.
        cost = min(sync["blocked_share"], idle_share)
        out.append(Finding(
            "sync_stall", cost,
            f"{sync['sync_points_per_step']:.1f} host syncs per step: the host waits {sync['blocked_share']:.0%} of the step "
            f"for the GPU, and the GPU then idles {idle_share:.0%} of it waiting for the host; they take turns instead of overlapping.",
            {"sync_points_per_step": sync["sync_points_per_step"],
             "host_blocked_ms_per_step": sync["blocked_us_per_step"] / 1e3,
             "host_blocked_share": sync["blocked_share"],
             "gpu_idle_after_sync_ms_per_step": idle["sync"] / n_steps / 1e3,
             "caused_by": sync["causes"], "gpu_utilization": util},
            FIXES["sync_stall"], _largest_gap(gaps, "sync") or _longest_sync(trace)))
    kstats = m.kernel_stats(trace)
    launch = m.launch_stats(trace)
    if (idle["launch"] / denom >= th.LAUNCH_IDLE_SHARE and kstats["median_us"] <= th.LAUNCH_MEDIAN_KERNEL_US
            and launch["individually_launched_share"] >= th.LAUNCH_INDIVIDUAL_SHARE):
        out.append(Finding(
            "launch_overhead", idle["launch"] / denom,
            f"{kstats['per_step']:.0f} kernels per step, median {kstats['median_us']:.1f} us: the GPU finishes each faster "
            f"than the host launches the next, so it idles {idle['launch'] / denom:.0%} of the step.",
            {"kernels_per_step": kstats["per_step"], "median_kernel_us": kstats["median_us"],
             "share_kernels_under_10us": kstats["share_under_10us"],
             "median_launch_call_us": launch["median_launch_call_us"],
             "individually_launched_share": launch["individually_launched_share"],
             "gpu_idle_while_dispatching_ms_per_step": idle["launch"] / n_steps / 1e3, "gpu_utilization": util},
            FIXES["launch_overhead"], _largest_gap(gaps, "launch")))
    h2d = m.h2d_stats(trace)
    if h2d:
        t, exposed_us, pageable = h2d["time_us"], h2d["exposed_us"], h2d["pageable_byte_share"]
        # Pinned copies that already overlap compute run at link speed: nothing left to fix here.
        fixable = pageable >= th.H2D_PAGEABLE_SHARE or h2d["overlap_with_compute"] < th.H2D_MIN_OVERLAP
        if exposed_us / denom >= th.H2D_EXPOSED_SHARE and fixable:
            ev = trace.events
            big = ev[(ev["kind"] == "memcpy") & (ev["copy_kind"] == "H2D")]
            row = big.loc[big["dur_us"].idxmax()]
            out.append(Finding(
                "h2d_copy", exposed_us / denom,
                f"Host-to-device copies take {t / n_steps / 1e3:.2f} ms per step at {h2d['gb_per_s']:.1f} GB/s "
                f"({pageable:.0%} of bytes from pageable memory) and nothing computes meanwhile.",
                {"h2d_ms_per_step": t / n_steps / 1e3, "h2d_gb_per_s": h2d["gb_per_s"],
                 "pageable_byte_share": pageable, "overlap_with_compute": h2d["overlap_with_compute"],
                 "gpu_utilization": util},
                FIXES["h2d_copy"], (float(row["start_us"]), float(row["end_us"]))))
    if util >= th.GPU_BOUND_BUSY:
        out.append(_gpu_bound(trace, util))
    return out


def _longest_sync(trace: Trace) -> tuple[float, float] | None:
    ev = trace.events
    s = ev[m.is_sync_call(trace)]
    if s.empty:
        return None
    row = s.loc[s["dur_us"].idxmax()]
    return float(row["start_us"]), float(row["end_us"])


def _gpu_bound(trace: Trace, util: float, note: str = "") -> Finding:
    top = m.kernel_stats(trace, top=3)["top"]
    names = [str(n)[:60] for n in top["name"]]
    text = f"The GPU is busy {util:.0%} of the step" + (f" ({note})" if note else "") + \
        (f"; the longest kernels are {', '.join(names)}." if names else ".")
    return Finding("gpu_bound", float(util), text,
                   {"gpu_utilization": util, "top_kernels": top[["name", "total_us", "share"]].to_dict("records")},
                   FIXES["gpu_bound"], None)


def _host_findings(trace: Trace, n_steps: int) -> list[Finding]:
    dw = m.data_wait(trace)
    if dw["data_wait_share"] < th.CPU_DATA_WAIT_SHARE:
        return []
    win = m.windows(trace)
    longest = win.loc[win["dur_us"].idxmax()]
    return [Finding(
        "data_stall", dw["data_wait_share"],
        f"The loop spends {dw['data_wait_share']:.0%} of each step waiting for the next batch "
        "(CPU-only trace: no GPU activity recorded).",
        {"host_data_wait_ms_per_step": dw["data_wait_us_per_step"] / 1e3, "data_wait_share": dw["data_wait_share"]},
        FIXES["data_stall"], (float(longest["start_us"]), float(longest["end_us"])))]


def _comm_findings(trace: Trace) -> list[Finding]:
    out: list[Finding] = []
    cs = m.comm_stats(trace)
    if cs.empty or cs["collective_us"].sum() <= 0:
        return out
    share = float(cs["exposed_us"].sum() / cs["window_us"].sum())
    imb = m.rank_imbalance(trace)
    per_step = cs.groupby("step")[["collective_us", "exposed_us"]].mean()
    worst = cs.loc[cs["exposed_us"].idxmax()]
    win = m.windows(trace, int(worst["rank"]))
    wrow = win[win["step"] == worst["step"]].iloc[0]
    imbalanced = imb["ranks"] >= 2 and imb["compute_spread"] >= th.IMBALANCE_SPREAD
    if share >= th.COMM_EXPOSED_SHARE and not imbalanced:
        out.append(Finding(
            "communication", share,
            f"Collectives take {per_step['collective_us'].mean() / 1e3:.2f} ms per step and "
            f"{share:.0%} of step time is spent in communication that nothing overlaps.",
            {"collective_ms_per_step": float(per_step["collective_us"].mean() / 1e3),
             "exposed_ms_per_step": float(per_step["exposed_us"].mean() / 1e3), "exposed_share": share,
             "ranks": imb["ranks"]},
            FIXES["communication"], (float(wrow["start_us"]), float(wrow["end_us"]))))
    if imbalanced:
        pr = imb["per_rank"]
        fast = pr[pr["rank"] == imb["fastest_rank"]].iloc[0]
        slow = pr[pr["rank"] == imb["slowest_rank"]].iloc[0]
        out.append(Finding(
            "load_imbalance", float(fast["exposed_us"] / (cs[cs["rank"] == imb["fastest_rank"]]["window_us"].mean() or 1.0)),
            f"Rank {imb['slowest_rank']} computes {slow['compute_us'] / 1e3:.1f} ms per step, rank {imb['fastest_rank']} only "
            f"{fast['compute_us'] / 1e3:.1f} ms ({imb['compute_spread']:.0%} spread): the fast ranks wait in the all-reduce.",
            {"compute_spread": imb["compute_spread"], "slowest_rank": imb["slowest_rank"], "fastest_rank": imb["fastest_rank"],
             "compute_ms_per_step_by_rank": {int(r): float(c / 1e3) for r, c in zip(pr["rank"], pr["compute_us"])},
             "exposed_collective_ms_per_step_by_rank": {int(r): float(c / 1e3) for r, c in zip(pr["rank"], pr["exposed_us"])}},
            FIXES["load_imbalance"], (float(wrow["start_us"]), float(wrow["end_us"]))))
    return out


__all__ = ["FIXES", "Finding", "PATTERNS", "diagnose"]
