"""Recompute figures the labs, the instructor pages and the README state about the course's recordings.

    python tools/claims.py              # every figure, one group after another
    python tools/claims.py checkpoint   # one group (names below)

Each group reads the shipped recordings in ``data/`` (or runs a few CPU-only lines where the claim is about
PyTorch itself) and prints the figures the text quotes; ``tests/test_claims.py`` asserts the same figures, so
a re-recording that moves one fails a test that names the text to correct. Nothing here needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MIB = 2**20


def device() -> dict:
    """The H200's GEMM TFLOP/s read off lab 08's recordings (data/device_profiles.json) and the GEMM share of
    the fp32 step (what helpers.capability judges the precision fix by)."""
    from helpers import capability
    from helpers.course import recorded

    out = {f"{p}_tflops": round(capability.recorded_gemm_tflops(recorded("gpu_bound", p)), 1) for p in capability.PRECISIONS}
    out["fp32_gemm_step_share"] = round(capability.gemm_step_share(recorded("gpu_bound", "fp32")), 3)
    return out


def checkpoint() -> dict:
    """Lab 08 §5: what checkpointing cost on the H200. GPU work per step (the union of kernels and copies) and the
    GPU's busy share, bf16 vs bf16 + checkpointing, from the profiled steps; step times without a profiler."""
    from helpers import metrics as m
    from helpers.course import DATA, entry, recorded

    out = {}
    for v in ("bf16", "checkpoint"):
        t = recorded("gpu_bound", v)
        busy = m.gpu_busy(t)
        out[f"{v}_gpu_ms_per_step"] = round(float(busy["busy_us"].mean()) / 1e3, 2)
        out[f"{v}_gpu_busy"] = round(float(busy["busy_us"].sum() / busy["window_us"].sum()), 2)
        out[f"{v}_profiled_step_ms"] = round(float(busy["window_us"].mean()) / 1e3, 2)
        out[f"{v}_step_ms_traced_run"] = entry("gpu_bound", v)["step_ms"]
    fresh = {r["variant"]: r for r in json.loads((DATA / "gpu_bound__h200.memory.json").read_text())["variants"]}
    out["bf16_step_ms_fresh"], out["checkpoint_step_ms_fresh"] = fresh["bf16"]["step_ms"], fresh["checkpoint"]["step_ms"]
    out["slowdown_fresh"] = round(fresh["checkpoint"]["step_ms"] / fresh["bf16"]["step_ms"], 1)
    out["gpu_work_growth"] = round(out["checkpoint_gpu_ms_per_step"] / out["bf16_gpu_ms_per_step"] - 1, 2)
    return out


def _saved_bytes(width: int, batches: tuple[int, ...]) -> list[int]:
    """Bytes autograd saves for backward in one bf16-autocast forward of gpu_bound.Net at each batch size (CPU;
    device independent). One model for all of them: building 100M parameters is most of the cost."""
    import torch

    from helpers.checks import saved_tensor_bytes
    from helpers.workloads import gpu_bound as gb

    torch.manual_seed(0)
    net = gb.Net(width, gb.DEPTH)
    out = []
    for batch in batches:
        x = torch.randn(batch, width)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out.append(saved_tensor_bytes(lambda x=x: net(x)))
    return out


def memory() -> dict:
    """Lab 08 §5: the bf16 step's peak above its start (data/gpu_bound__h200.memory.json, MiB: bytes / 2**20)
    against the parameter bytes of gpu_bound.Net at width 4096 (built on the meta device: no memory), and the
    activations autograd keeps at batch 2048, extrapolated from two small batches (saved bytes grow linearly in
    the batch; the bf16 copies of the weights do not)."""
    import torch

    from helpers.course import DATA
    from helpers.workloads import gpu_bound as gb

    with torch.device("meta"):
        params = sum(p.numel() for p in gb.Net(gb.WIDTH, gb.DEPTH).parameters()) * 4
    rec = {r["variant"]: r for r in json.loads((DATA / "gpu_bound__h200.memory.json").read_text())["variants"]}
    small, big = 8, 16
    a, b = _saved_bytes(gb.WIDTH, (small, big))
    per_sample = (b - a) / (big - small)
    activations = a + per_sample * (gb.BATCH - small)
    return {
        "param_mib": round(params / MIB, 1),
        "twice_param_mib": round(2 * params / MIB, 1),
        "peak_above_start_mib": rec["bf16"]["peak_above_start_mb"],
        "peak_above_start_checkpoint_mib": rec["checkpoint"]["peak_above_start_mb"],
        "weights_and_adam_gib": round(3 * params / 2**30, 2),
        "activations_batch2048_gib": round(activations / 2**30, 2),
        "max_memory_allocated_mib": rec["bf16"]["max_memory_allocated_mb"],
    }


def recompiles() -> dict:
    """Lab 08 §3: how many graphs torch.compile builds for one function called with 4 input sizes, with the
    default ``dynamic=None`` (after the first recompile the size becomes dynamic) and with ``dynamic=False``."""
    import torch
    import torch._dynamo

    out = {"torch": torch.__version__}
    for dynamic in (None, False):
        torch._dynamo.reset()
        compiles = 0

        def counting(gm, example_inputs):  # noqa: ANN001, ANN202 - a dynamo backend
            nonlocal compiles
            compiles += 1
            return gm.forward

        fn = torch.compile(lambda x: (x.relu() * 2).sum(), backend=counting, dynamic=dynamic)
        for n in (4, 8, 16, 32):
            fn(torch.randn(n))
        out[f"compiles_dynamic_{dynamic}"] = compiles
    torch._dynamo.reset()
    return out


def ncu() -> dict:
    """Lab 08 §4: the LayerNorm's stall on L1TEX (long scoreboard) as a share of its cycles per issued instruction,
    and the GEMM's issue rate (a warp issuing every N cycles issues in 1/N of them and waits in the rest)."""
    from helpers import checks
    from helpers.course import DATA

    ns = DATA / "nsight"
    stalls = checks.ncu_stalls(ns / "gpu_bound__fp32__h200.layernorm.raw.csv")
    ln = checks.ncu_long(ns / "gpu_bound__fp32__h200.layernorm.ncu.csv")
    gemm = checks.ncu_long(ns / "gpu_bound__fp32__h200.gemm.ncu.csv")

    def metric(t, name):  # noqa: ANN001, ANN202
        return float(t.loc[t["metric"] == name, "value"].iloc[0])

    cpi_ln = metric(ln, "Warp Cycles Per Issued Instruction")
    cpi_gemm = metric(gemm, "Warp Cycles Per Issued Instruction")
    return {
        "layernorm_cycles_per_issue": round(cpi_ln, 1),
        "layernorm_long_scoreboard_cycles": round(float(stalls["long_scoreboard"]), 1),
        "layernorm_long_scoreboard_share": round(float(stalls["long_scoreboard"]) / cpi_ln, 2),
        "layernorm_top_stall": str(stalls.index[0]),
        "gemm_cycles_per_issue": round(cpi_gemm, 1),
        "gemm_warp_issuing_share": round(1 / cpi_gemm, 2),
        "gemm_eligible_warps": round(metric(gemm, "Eligible Warps Per Scheduler"), 1),
    }


def fp16() -> dict:
    """Lab 08 §2: the recorded fp16 + GradScaler losses against fp32's, step by step (relative difference)."""
    from helpers.course import DATA

    losses = json.loads((DATA / "gpu_bound__h200.measure.json").read_text())["losses_seed0"]
    diff = [round((a - b) / b, 3) for a, b in zip(losses["fp16"], losses["fp32"], strict=True)]
    return {"fp16_vs_fp32": diff, "largest_step": max(range(len(diff)), key=lambda i: abs(diff[i])),
            "bf16_worst": round(max(abs(a - b) / b for a, b in zip(losses["bf16"], losses["fp32"], strict=True)), 4)}


def idle() -> dict:
    """README, labs 01 and 06: the data-stall loop's GPU idle share and the share of its step the GPU waits for
    data, in the PyTorch-profiler recording and in its Nsight Systems export (over the steps found in it)."""
    from helpers import metrics as m
    from helpers.checks import data_wait_share
    from helpers.course import recorded, shipped_nsys_export

    out = {}
    for label, t in (("profiler", recorded("data_stall", "broken")), ("nsys", shipped_nsys_export("data_stall", "broken"))):
        t = m.stepped(t)
        out[f"{label}_gpu_idle"] = round(1 - m.gpu_utilization(t), 3)
        out[f"{label}_data_wait"] = round(data_wait_share(t), 3)
        gaps = m.idle_gaps(t)
        long = gaps[gaps["dur_us"] >= 1000]
        out[f"{label}_long_gaps"] = int(len(long))
        out[f"{label}_median_long_gap_ms"] = round(float(long["dur_us"].median()) / 1e3, 1) if len(long) else None
    return out


def launches() -> dict:
    """Lab 02 Q3: launch calls a step in the compile_foreach recording: the runtime's cudaLaunchKernel and
    cudaLaunchKernelExC (eager and cuBLAS kernels) and the driver's cuLaunchKernel (Inductor's Triton kernels),
    and their host time."""
    from helpers.course import recorded

    t = recorded("launch_overhead", "compile_foreach")
    ev, steps = t.events, max(len(t.steps), 1)
    out = {}
    for name in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel"):
        calls = ev[ev["name"] == name]
        out[f"{name}_per_step"] = round(len(calls) / steps, 1)
        out[f"{name}_ms_per_step"] = round(float(calls["dur_us"].sum()) / steps / 1e3, 2)
    names = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel")
    out["all_launch_calls_per_step"] = round(sum(out[f"{n}_per_step"] for n in names), 1)
    out["all_launch_ms_per_step"] = round(sum(out[f"{n}_ms_per_step"] for n in names), 2)
    return out


def pinning() -> dict:
    """Labs 01 and 06: the H2D loop's step time as written, with pinning alone (blocking copies from pinned memory)
    and with pinning plus non-blocking, prefetched copies (data/manifest.json, no profiler)."""
    from helpers.course import entry

    return {v: entry("h2d_copy", v)["step_ms"] for v in ("broken", "pinned_blocking", "fixed")}


def kernels09() -> dict:
    """Lab 09 §5-6: the H200 recordings of tools/record_kernels.py: step times without a profiler, layout
    transposes a step, the attention peaks above a step's start, and the two ncu reports' throughputs."""
    from helpers import checks
    from helpers.course import DATA, entry, recorded

    out: dict = {}
    for w, v in (("shapes", "vocab_50257"), ("shapes", "vocab_50304"), ("shapes", "conv_nchw"),
                 ("shapes", "conv_channels_last"), ("attention", "eager"), ("attention", "sdpa")):
        out[f"{v}_step_ms"] = entry(w, v)["step_ms"]
        if w == "attention":
            out[f"{v}_peak_mib"] = entry(w, v)["peak_above_start_mb"]
        else:
            names = recorded(w, v).events.query("kind == 'kernel'")["name"].astype(str)
            out[f"{v}_transposes"] = round(names.str.contains("nchwToNhwc|nhwcToNchw", case=False).sum()
                                           / len(recorded(w, v).steps), 1)
    for v in ("eager", "sdpa"):
        t = checks.ncu_long(DATA / "nsight" / f"attention__{v}__h200.ncu.csv").drop_duplicates("metric").set_index("metric")
        for key, metric in (("sm", "Compute (SM) Throughput"), ("memory", "Memory Throughput"),
                            ("dram", "DRAM Throughput"), ("occupancy", "Achieved Occupancy")):
            out[f"ncu_{v}_{key}_pct"] = round(float(t.loc[metric, "value"]), 1)
    return out


def memory10() -> dict:
    """Lab 10 §4-6: the H200 recordings of tools/record_memory.py (optimizer peaks at full size, the fragmenting
    buffer both ways, the out-of-memory history up to its failure)."""
    import pandas as pd

    from helpers import memory as mem
    from helpers.course import recording_path

    opt = json.loads(recording_path("memory", "optimizers", "measurements").read_text())
    out: dict = {f"{r['adam']}_peak_mib": r["peak_above_start_mib"] for r in opt["variants"]}
    out.update({f"{r['adam']}_step_ms": r["step_ms"] for r in opt["variants"]})
    frag = json.loads(recording_path("memory", "fragmentation", "measurements").read_text())["runs"]
    out.update({f"expandable_{r['expandable_segments']}_reserved_mib": r["reserved_mib"] for r in frag})
    out.update({f"expandable_{r['expandable_segments']}_cudamalloc": r["cudamalloc_calls"] for r in frag})
    ev = mem.snapshot_events(mem.load_snapshot(recording_path("memory", "oom", "torch-memory-snapshot")))
    failed = ev[ev["action"] == "oom"].iloc[0]
    before = ev[ev.index < failed.name]
    delta = before["size"].where(before["action"] == "alloc", 0) - before["size"].where(before["action"] == "free_completed", 0)
    out["oom_allocated_mib"] = round(float(pd.Series(delta).sum()) / MIB)
    out["oom_request_mib"] = round(int(failed["size"]) / MIB)
    out["oom_frame"] = str(failed["frame"])
    return out


def callsites11() -> dict:
    """Lab 11 §1, §2 and §4: the H200 recordings of tools/record_callsites.py (the sync debug warnings, the nsys
    backtraces by operator, CUDA_LAUNCH_BLOCKING's step time and launch figures)."""
    from helpers import metrics, syncscan
    from helpers.course import recorded, recording_path
    from helpers.readers import load

    out: dict = {"warnings": len(json.loads(recording_path("callsite", "sync_debug", "sync-debug-warnings").read_text())["warnings"])}
    sites = syncscan.backtrace_sites(json.loads(recording_path("callsite", "nsys_backtraces", "nsys-backtrace-summary").read_text()))
    out["backtrace_ops"] = {r.operator: int(r.count) for r in sites.itertuples()}
    blocking = json.loads(recording_path("env", "launch_blocking", "measurements").read_text())["step_ms"]
    out.update({f"{k}_step_ms": v for k, v in blocking.items()})
    for label, t in (("default", recorded("gpu_bound", "bf16")), ("blocking", load(recording_path("env", "launch_blocking", "torch-json")))):
        s = metrics.launch_stats(t)
        out[f"{label}_launch_call_us"] = round(s["median_launch_call_us"], 1)
        out[f"{label}_launch_to_start_us"] = round(s["median_launch_to_start_us"], 1)
        out[f"{label}_busy"] = round(metrics.gpu_utilization(t), 2)
    return out


GROUPS = {f.__name__: f for f in (device, checkpoint, memory, recompiles, ncu, fp16, idle, launches, pinning,
                                  kernels09, memory10, callsites11)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="*", choices=[*GROUPS, []], metavar="GROUP",
                        help=f"which figures: {', '.join(GROUPS)} (default: all)")
    args = parser.parse_args(argv)
    for name in args.groups or GROUPS:
        print(f"{name}: {json.dumps(GROUPS[name]())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
