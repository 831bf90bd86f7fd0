"""Print what a learner sees for the common wrong answers, lab by lab, on the course's recorded traces.

    python docs/instructors/wrong_answers.py          # every lab
    python docs/instructors/wrong_answers.py 03 07    # some labs

Each wrong answer is one the tests (tests/test_labNN.py, tests/test_triage.py) hold the checks to;
here it is fed to the real check and the message the learner would read is printed. The readings are
judged on the H200 recordings in data/, which is exactly what the CPU track shows; on the GPU track a
learner's own capture gives its own figures in the same words. Check results are written to a
throw-away folder, never to the learner's .selfcheck.json.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _said(fn, *args, **kw) -> str:
    from helpers import checks

    try:
        return "PASSES (not a wrong answer): " + str(fn(*args, **kw))[:200]
    except checks.CheckFailed as exc:
        return str(exc)


def _ms(trace, start_us: float, end_us: float) -> tuple[float, float]:
    from helpers.plots import time_origin_us

    o = time_origin_us(trace)
    return (start_us - o) / 1e3, (end_us - o) / 1e3


def _queue_offset(trace, since: str) -> float:
    """The median of kernel start minus the launch call's ``since`` column (its start_us or end_us)."""
    ev = trace.events
    calls = ev[(ev["kind"] == "runtime") & ev["name"].str.startswith("cudaLaunch")]
    kernels = ev[(ev["kind"] == "kernel") & (ev["correlation"] >= 0)]
    pairs = kernels.merge(calls.drop_duplicates(["rank", "correlation"]), on=["rank", "correlation"],
                          suffixes=("_kernel", "_call"))
    return float((pairs["start_us_kernel"] - pairs[since]).median())


def _profiler_mistakes() -> list[tuple[str, str]]:
    """Exercise 6's profiler call without a schedule, and without on_trace_ready, on a small model's steps."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    from helpers import checks
    from helpers.profiling import quiet_profiler_logs

    lin, x = torch.nn.Linear(16, 16), torch.randn(8, 16)
    out = []
    for what, kw in (("no schedule", {"on_trace_ready": True}), ("no on_trace_ready", {"schedule": True})):
        folder = Path(tempfile.mkdtemp()) / "trace"
        args = {"schedule": schedule(wait=1, warmup=1, active=3, repeat=1)} if "schedule" in kw else {}
        if "on_trace_ready" in kw:
            args["on_trace_ready"] = tensorboard_trace_handler(str(folder))
        with quiet_profiler_logs(), profile(activities=[ProfilerActivity.CPU], record_shapes=True, **args) as prof:
            for _ in range(5):
                lin(x).relu().sum().backward()
                prof.step()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10)
        out.append((f"profiler call: {what}", _said(checks.check_my_profiler, prof, table, folder)))
    return out


def lab00() -> list[tuple[str, str]]:
    from helpers import checks, metrics
    from helpers.course import recorded

    t = recorded("sync_stall", "broken")
    # The reference answers (lab 00's solution; the checks keep only digests of them).
    swapped = dict(zip(checks.TOOL_QUESTIONS, ("nsys", "ncu", "torch", "nsys", "ncu", "torch")))
    first = next(iter(swapped))
    swapped[first] = "torch"  # the timeline question given to the operator profiler
    longest = float(metrics.idle_gaps(t)["dur_us"].max() / 1e3)
    queue = {"A": recorded("launch_overhead", "broken"), "B": recorded("gpu_bound", "fp32")}
    return [
        ("tool choice: the timeline question answered with the PyTorch profiler", _said(checks.check_tool_choice, swapped)),
        ("idle share: the GPU's busy share handed in instead of its idle share",
         _said(checks.check_gpu_idle_share, metrics.gpu_utilization, t)),
        ("longest gap given in microseconds", _said(checks.check_longest_gap, longest * 1e3, t)),
        ("nsys: a time window with no --duration, and a capture range without --nsys-range",
         _said(checks.check_nsys_commands, {
             "capture range": "nsys profile --trace=cuda,nvtx -o r --capture-range=cudaProfilerApi python -m helpers.workloads.data_stall",
             "time window": "nsys profile --trace=cuda,nvtx -o r --delay=10 python -m helpers.workloads.data_stall",
             "gpu metrics": "nsys profile --trace=cuda,nvtx -o r --gpu-metrics-devices=0 python -m helpers.workloads.data_stall"})),
        ("nsys: the syllabus's --delay=10 --duration=30 on the lab's 10-step script",
         _said(checks.check_nsys_commands, {
             "capture range": "nsys profile --trace=cuda,nvtx -o r --capture-range=cudaProfilerApi --capture-range-end=stop "
                              "python -m helpers.workloads.data_stall --steps 10 --nsys-range",
             "time window": "nsys profile --trace=cuda,nvtx -o w --delay=10 --duration=30 python -m helpers.workloads.data_stall "
                            "--variant broken --steps 10",
             "gpu metrics": "nsys profile --trace=cuda,nvtx -o m --gpu-metrics-devices=0 python -m helpers.workloads.data_stall"})),
        *_profiler_mistakes(),
        ("launch queue: the offset measured from the launch call's end, not its start",
         _said(checks.check_launch_queue, lambda tr: _queue_offset(tr, "end_us_call"), {"A": "empty", "B": "deep"}, queue)),
        ("launch queue: the GEMM loop's milliseconds read as an empty queue",
         _said(checks.check_launch_queue, lambda tr: _queue_offset(tr, "start_us_call"), {"A": "empty", "B": "empty"}, queue)),
    ]


def lab01() -> list[tuple[str, str]]:
    from helpers import checks, diagnose
    from helpers.course import recorded

    out = []
    t = recorded("data_stall", "broken")
    f = next(f for f in diagnose(t) if f.pattern == "data_stall")
    w = _ms(t, *f.window)
    out.append(("first loop read as launch overhead (the tiny kernels after the wait)",
                _said(checks.check_reading, checks.Reading("launch_overhead", w, {"kernels_per_step": 45.0}, 0.1), t, "data", "data")))
    out.append(("first loop: right pattern, cost of one step's wait over the whole capture",
                _said(checks.check_reading, checks.Reading("data_stall", w, {"data_stall_share": 0.85}, f.cost / 5), t, "data", "data")))
    h = recorded("h2d_copy", "broken")
    g = next(f for f in diagnose(h) if f.pattern == "h2d_copy")
    out.append(("second loop read as GPU-bound (the GPU lane looks full)",
                _said(checks.check_reading, checks.Reading("gpu_bound", _ms(h, *g.window), {"gpu_bound_busy": 0.97}, 0.97), h, "h2d", "h2d")))
    out.append(("bandwidth in MB/s instead of GB/s", _said(checks.check_read_h2d_bandwidth, 6689.58, h, "pageable")))
    out.append(("copies said to come from pinned memory", _said(checks.check_read_h2d_bandwidth, 6.69, h, "pinned")))
    out.append(("the course's own fixed trace passed as the learner's fix",
                _said(checks.check_data_stall_fixed, t, recorded("data_stall", "fixed"), 3.0)))
    return out


def lab02() -> list[tuple[str, str]]:
    from helpers import checks, metrics, plots
    from helpers.course import recorded

    t = recorded("launch_overhead", "broken")
    origin, second = plots.time_origin_us(t), t.steps.iloc[1]
    w = ((second.start_us - origin) / 1e3 + 1.0, (second.start_us - origin) / 1e3 + 3.0)
    gaps = metrics.idle_gaps(t)
    share = float(gaps.loc[gaps["cause"] == "launch", "dur_us"].sum() / metrics.windows(t)["dur_us"].sum())
    good = {"launch_idle_share": share}
    return [
        ("white space read as a data stall", _said(checks.check_reading, checks.Reading("data_stall", w, {"data_stall_share": 0.87}, 0.87), t, "launch")),
        ("the GPU's busy share given as the cost", _said(checks.check_reading, checks.Reading("launch_overhead", w, good, 0.04), t, "launch")),
        ("kernels per step counted in one zoom, not the whole step",
         _said(checks.check_reading, checks.Reading("launch_overhead", w, {"kernels_per_step": 200}, share), t, "launch")),
        ("the course's graph recording passed as the learner's own",
         _said(checks.check_launch_fixed, t, recorded("launch_overhead", "graphs"))),
    ]


def lab03() -> list[tuple[str, str]]:
    from helpers import checks, metrics
    from helpers.course import recorded

    t = recorded("sync_stall", "broken")
    gaps = metrics.idle_gaps(t)
    gap = gaps.sort_values("dur_us").iloc[-1]
    w = _ms(t, gap.start_us, gap.end_us)
    ev = t.events
    n_sync = float((metrics.sync_point_calls(t) & (ev["step"] >= 0)).sum() / len(t.steps))
    cost = float(metrics.idle_cost_by_cause(t)["sync"] / t.steps["dur_us"].sum())
    return [
        ("the white stretch in 'prepare batch' read as a data stall",
         _said(checks.check_reading, checks.Reading("data_stall", w, {"host_data_wait_ms_per_step": 5.6}, 0.3), t, "sync")),
        ("a window over the forward pass, where the GPU is busy",
         _said(checks.check_reading, checks.Reading("sync_stall", (w[1] + 0.5, w[1] + 2.5), {"sync_points_per_step": n_sync}, cost), t, "sync")),
        ("the host's blocked share given as the cost",
         _said(checks.check_reading, checks.Reading("sync_stall", w, {"sync_points_per_step": n_sync}, 0.80), t, "sync")),
        ("the course's fixed recording passed as the learner's own", _said(checks.check_sync_fixed, t, recorded("sync_stall", "fixed"))),
    ]


def lab04() -> list[tuple[str, str]]:
    from helpers import checks, diagnose
    from helpers.course import recorded

    out = []
    for variant, pattern, item, wrong in (("manual", "communication", "comm", "data_stall"),
                                          ("imbalance", "load_imbalance", "imbalance", "communication")):
        t = recorded("communication", variant, tag="cpu")
        f = next((f for f in diagnose(t) if f.pattern == pattern), None)
        if f is None:
            continue
        w = _ms(t, *f.window)
        out.append((f"{variant} job read as {wrong}",
                    _said(checks.check_reading, checks.Reading(wrong, w, {checks.EVIDENCE[wrong][0]: 0.5}, f.cost), t, item, item)))
    out.append(("the course's ddp recording passed as the learner's DDP",
                _said(checks.check_comm_fixed, recorded("communication", "manual", tag="cpu"), recorded("communication", "ddp", tag="cpu"))))
    from helpers.checks.lab04 import os_sleep_ms
    from helpers.course import recorded_pair

    nsys_trace = recorded_pair("communication", "manual", tag="h200cpu")["nsys"]
    right = os_sleep_ms(nsys_trace)
    out.append(("Exercise 7: the sleep summed over the steps, not a step",
                _said(checks.check_nsys_sleep, {r: v * 5 for r, v in right.items()}, nsys_trace)))
    out.append(("Exercise 7: the ranks swapped", _said(checks.check_nsys_sleep, {0: right[1], 1: right[0]}, nsys_trace)))
    return out


def lab05() -> list[tuple[str, str]]:
    from helpers import checks, diagnose
    from helpers.course import recorded
    from helpers.diagnosis import signals

    t = recorded("mystery", "broken")
    found = {f.pattern: f for f in diagnose(t)}
    s = found["sync_stall"]
    return [("the syncs named first (they are real, but not the biggest gap)",
             _said(checks.check_reading, checks.Reading("sync_stall", _ms(t, *s.window), {"sync_points_per_step": float(signals(t)["sync_points_per_step"])}, s.cost), t, "workflow", "mystery")),
            ("the data stall named with the GPU's idle share as its cost",
             _said(checks.check_reading, checks.Reading("data_stall", _ms(t, *found["data_stall"].window),
                                                        {"data_stall_share": found["data_stall"].cost}, 0.65), t, "workflow", "mystery")),
            ("fix: only the loader fixed (the H200 recording of that stage)",
             _said(checks.check_capstone, t, recorded("mystery", "data_fixed"), 2.0)),
            ("fix: nothing changed (the CPU recording of the broken loop, twice)",
             _said(checks.check_capstone, recorded("mystery", "broken", "cpu"), recorded("mystery", "broken", "cpu"), 1.3))]


def lab06() -> list[tuple[str, str]]:
    import helpers
    from helpers import checks, course, metrics
    from helpers.readers.ncu import read_ncu

    stall = course.shipped_nsys_export("data_stall", "broken")
    ncu_entry = course.shipped_ncu_entries()[0]  # as the lab picks it
    bound_torch = helpers.load(course.DATA / ncu_entry["torch_twin"])
    bound_fired = checks.analyze_findings(course.nsight_text(ncu_entry["workload"], ncu_entry["variant"], "nsys_analyze"))
    ncu_table = read_ncu(course.DATA / ncu_entry["ncu_csv"])
    return [("stats: the NVTX range with the most time given as the top API call",
             _said(checks.check_stats_reading, {"top_api_call": "data", "top_kernel": "wgrad_alg0_engine"}, stall)),
            ("analyze: every warning on the GPU-bound loop called one that matters",
             _said(checks.check_analyze_verdicts, {r: True for r in bound_fired}, list(bound_fired), bound_torch, "sync_stall:fixed")),
            ("ncu: the kernel called memory-bound", _said(checks.check_kernel_limiter, "memory", ncu_table)),
            ("ncu: the kernel called latency-bound (low occupancy)", _said(checks.check_kernel_limiter, "latency", ncu_table)),
            ("data-wait share: the GPU's whole idle share (data wait and the rest) handed in",
             _said(checks.check_data_wait_share, 1 - metrics.gpu_utilization(stall), stall, "nsys"))]


def lab07() -> list[tuple[str, str]]:
    import json

    from helpers.checks.lab05 import triage_lesson

    key = json.loads((Path(__file__).with_name("triage_key.json")).read_text())["cases"]  # the instructors' key
    return [(f"{tid} misread as {p if p != '*' else 'host_bound (any wrong pattern)'}",
             "Not yet (" + tid + "): " + triage_lesson(tid, p if p != "*" else "host_bound"))
            for tid, case in key.items() for p in case["lessons"]]


def lab08() -> list[tuple[str, str]]:
    import torch
    from torch.utils.checkpoint import checkpoint

    from helpers import checks, course, metrics

    fp32 = course.recorded("gpu_bound", "fp32")
    top = str(metrics.gemm_kernels(fp32).iloc[0]["name"])
    share = metrics.gemm_math_shares(fp32)["gemm_of_kernels"]
    ns = course.DATA / "nsight"
    gemm, ln = (checks.ncu_long(ns / f"gpu_bound__fp32__h200.{k}.ncu.csv") for k in ("gemm", "layernorm"))
    right = {"gemm": "compute", "layernorm": "latency", "gemm_busiest_memory": "L1"}
    churn = course.recorded("gpu_bound", "empty_cache")
    per_step = metrics.api_calls_per_step(churn)
    m32, m16 = (checks.gpu_metrics(ns / f"gpu_bound__{v}__h200.gpumetrics.json") for v in ("fp32", "bf16"))
    tensor = {"fp32": m32["Tensor Active [Throughput %]"], "bf16": m16["Tensor Active [Throughput %]"]}

    def first_block_only(model, x):
        x = checkpoint(model.blocks[0], x, use_reentrant=False)
        for block in model.blocks[1:]:
            x = block(x)
        return model.head(x)

    torch.manual_seed(0)
    return [
        ("the fp32 loop's GEMM called a tensor-core kernel",
         _said(checks.check_gemm_reading, {"top_gemm": top[:30], "math": "tensor_core", "gemm_share": share}, fp32)),
        ("the LayerNorm called memory-bound (it touches memory, so ...)",
         _said(checks.check_ncu_reading, {**right, "layernorm": "memory"}, gemm, ln)),
        ("the GEMM's busiest memory unit read as DRAM (Memory Throughput taken for DRAM)",
         _said(checks.check_ncu_reading, {**right, "gemm_busiest_memory": "DRAM"}, gemm, ln)),
        ("allocator churn given as totals over the capture, not per step",
         _said(checks.check_alloc_churn, {k: v * len(churn.steps) for k, v in per_step.items()}, churn)),
        ("GPU metrics: the bf16 run called the busier one (busy taken for efficient)",
         _said(checks.check_gpu_metrics_reading, {"busier": "bf16", "tensor_active": tensor}, m32, m16)),
        ("checkpointing only the first block", _said(checks.check_activation_saving, first_block_only)),
    ]


def lab09() -> list[tuple[str, str]]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    from helpers import checks, roofline

    def forward_only(model, x):
        total = 0

        def count(layer, args, _out):
            nonlocal total
            total += 2 * (args[0].numel() // layer.in_features) * layer.in_features * layer.out_features

        hooks = [mod.register_forward_hook(count) for mod in model.modules() if isinstance(mod, nn.Linear)]
        with torch.no_grad():
            model(x)
        for h in hooks:
            h.remove()
        return total

    def batch_rows_only(model, x):
        return 3 * forward_only(model, x[..., 0, :] if x.dim() == 3 else x)

    def share_of_peak(flops, nbytes, seconds, peak, bw):
        ai = flops / nbytes
        return {"intensity": ai, "achieved_flops": flops / seconds, "achieved_bytes_per_s": nbytes / seconds,
                "attainable_flops": min(peak, ai * bw), "bound": "compute" if ai >= peak / bw else "memory",
                "share_of_roof": flops / seconds / peak}

    step_ms = {"fp32": 25.782, "bf16": 5.578}
    fp32_peak = {v: 1237453897728 / (ms / 1e3) / roofline.RECORDED.flops("fp32") for v, ms in step_ms.items()}

    def no_slice(model, multiple):
        model.head = nn.Linear(model.head.in_features, 16)
        return model

    def no_transpose(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return [
        ("FLOPs of forward only", _said(checks.check_matmul_flops, forward_only)),
        ("tokens = batch rows, the sequence dimension forgotten", _said(checks.check_matmul_flops, batch_rows_only)),
        ("share of the roof taken against the compute peak on a memory-bound kernel",
         _said(checks.check_roofline_point, share_of_peak)),
        ("MFU against the fp32 peak", _said(checks.check_mfu, fp32_peak, step_ms, roofline.RECORDED)),
        ("the head padded without slicing the logits back", _said(checks.check_padded_head, no_slice)),
        ("SDPA called on (batch, T, heads, head_dim) as it comes", _said(checks.check_sdpa_attention, no_transpose, "cpu")),
    ]


def lab10() -> list[tuple[str, str]]:
    import pandas as pd
    import torch

    from helpers import checks, course, memory

    mib = 2**20
    snap = memory.load_snapshot(course.DATA / "gpu_bound__bf16__h200.memsnap.pickle.gz")

    def pending_as_free(s):
        seg, bl = memory.segments(s), memory.blocks(s)
        free = bl[bl["state"] != "active_allocated"]["size"]
        return {"reserved_mib": seg["total_size"].sum() / mib,
                "allocated_mib": bl.loc[bl["state"] == "active_allocated", "size"].sum() / mib,
                "free_cached_mib": free.sum() / mib, "largest_free_block_mib": free.max() / mib}

    def at_free_requested(events):
        delta = events["size"].where(events["action"] == "alloc", 0) - events["size"].where(events["action"] == "free_requested", 0)
        return pd.Series(delta.cumsum().to_numpy(), index=events["time_us"])

    def keeps_zeroed_grads(model, lr):
        for p in model.parameters():
            opt = torch.optim.Adam([p], lr=lr)

            def hook(param, opt=opt):
                opt.step()
                opt.zero_grad(set_to_none=False)

            p.register_post_accumulate_grad_hook(hook)

    def fragmentation_first(f):
        if f["reserved_unallocated"] >= f["requested"]:
            return "fragmentation"
        this = f["this_process"] if f["this_process"] is not None else f["allocated"] + f["reserved_unallocated"]
        if f["capacity"] - f["free"] - this >= 0.25 * f["capacity"]:
            return "other_processes"
        return "too_big" if f["requested"] > f["free"] + f["reserved_unallocated"] else "too_much"

    peak = checks.lab10._reference_peak(snap)
    return [
        ("a block waiting on another stream counted as free", _said(checks.check_memory_state, pending_as_free)),
        ("memory given back at free_requested", _said(checks.check_allocated_over_time, at_free_requested)),
        ("the peak put in backward (where the activations peak)", _said(checks.check_peak_reading, {**peak, "phase": "backward"}, snap)),
        ("the optimizer in backward with zero_grad(set_to_none=False)", _said(checks.check_optimizer_in_backward, keeps_zeroed_grads)),
        ("fragmentation tried first", _said(checks.check_oom_triage, fragmentation_first)),
    ]


def lab11() -> list[tuple[str, str]]:
    import tempfile

    import torch

    from helpers import checks
    from helpers.profiling import capture
    from helpers.workloads import callsite

    with tempfile.TemporaryDirectory() as tmp:
        broken = capture(callsite.make_step("broken", torch.device("cpu")), steps=2, warmup=1, with_stack=True, out_dir=tmp)

    def outermost(trace):
        ev = trace.events
        frames = ev[ev["kind"] == "python"]
        out = {}
        for _, r in checks.sync_rows(trace).iterrows():
            above = frames[(frames["tid"] == r["tid"]) & (frames["start_us"] <= r["start_us"]) & (frames["end_us"] >= r["end_us"])]
            k = above.sort_values("start_us")["name"].iloc[0]
            out[k] = out.get(k, 0) + 1 / len(trace.steps)
        return out

    def any_blocking_variable(s):  # the rules, except that any CUDA_LAUNCH_BLOCKING counts, "0" too
        found = {"launch_blocking"} if "CUDA_LAUNCH_BLOCKING" in s["env"] else set()
        lo = s["loader"]
        if lo["num_workers"] and s["dev_shm_free_bytes"] is not None and \
                s["dev_shm_free_bytes"] < lo["num_workers"] * lo["prefetch_factor"] * lo["batch_bytes"]:
            found.add("shm_too_small")
        if s["torch_threads"] * s["processes_per_node"] > s["cores"]:
            found.add("oversubscribed")
        if s["gpu"] and {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                         "hw_power_brake_slowdown"} & set(s["gpu"]["clock_reasons"]):
            found.add("throttled")
        return found

    command = ("nsys profile --trace=cuda,nvtx,osrt --cudabacktrace=sync --python-backtrace=cuda --sample=none "
               "-o callsite_broken python -m helpers.workloads.callsite --variant broken")
    return [
        ("each sync put on the outermost frame", _said(checks.check_sync_sites, outermost, broken)),
        ("the backtrace command with CPU sampling off", _said(checks.check_backtrace_command, command)),
        ("CUDA_LAUNCH_BLOCKING=0 flagged", _said(checks.check_environment_pitfalls, any_blocking_variable)),
    ]


LABS = {"00": lab00, "01": lab01, "02": lab02, "03": lab03, "04": lab04, "05": lab05, "06": lab06, "07": lab07,
        "08": lab08, "09": lab09, "10": lab10, "11": lab11}


def main(argv: list[str] | None = None) -> int:
    wanted = (argv if argv is not None else sys.argv[1:]) or list(LABS)
    unknown = [w for w in wanted if w.zfill(2) not in LABS]
    if unknown:
        print(f"error: no lab {', '.join(unknown)}; labs are {', '.join(LABS)}", file=sys.stderr)
        return 2
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="wrong-answers-") as scratch:
        os.chdir(scratch)  # the checks note results in ./.selfcheck.json: keep them out of the learner's folder
        try:
            for lab in wanted:
                print(f"## Lab {lab.zfill(2)}")
                for what, message in LABS[lab.zfill(2)]():
                    print(f"- {what}:\n    {message}")
                print()
        finally:
            os.chdir(here)
    return 0


if __name__ == "__main__":
    sys.exit(main())
