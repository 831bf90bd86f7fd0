"""Attribution and cost that follow the timeline: what the launches cost whatever the kernels' size,
copies in both directions, communication kernels that are not NCCL's. Synthetic traces in
tests/synth.py's style, each with the answer it must get."""

from __future__ import annotations

from synth import Ev, write_json

import helpers
from helpers import diagnosis as dg

US = 1000  # ns per microsecond


def launch_bound_loop(steps: int = 4, kernels: int = 200, kernel_us: int = 25, launch_us: int = 40) -> list[Ev]:
    """Each step launches ``kernels`` kernels of ``kernel_us`` one by one; each launch call takes
    ``launch_us``, longer than the kernel, so the GPU idles between kernels while the host launches."""
    out: list[Ev] = []
    t, c = 0, 0
    for i in range(steps):
        start = t
        for _ in range(kernels):
            c += 1
            out.append(Ev("runtime", "cudaLaunchKernel", t, t + (launch_us - 2) * US, correlation=c))
            out.append(Ev("kernel", "elementwise", t + launch_us * US, t + (launch_us + kernel_us) * US, correlation=c))
            t += launch_us * US
        t += (kernel_us + 5) * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", start, t))
    return out


def offload_loop(steps: int = 4) -> list[Ev]:
    """Activation offloading: each step computes 1 ms, copies 3 ms device-to-host from pageable memory,
    computes 0.5 ms, copies 3 ms back host-to-device; nothing computes beside the copies."""
    out: list[Ev] = []
    t, c = 0, 0
    for i in range(steps):
        start = t
        for kind, name, dur in (("kernel", "fwd", 1000), ("memcpy", "D2H", 3000), ("kernel", "bwd", 500), ("memcpy", "H2D", 3000)):
            c += 1
            call = "cudaLaunchKernel" if kind == "kernel" else "cudaMemcpy"
            out.append(Ev("runtime", call, t, t + 5 * US if kind == "kernel" else t + (dur + 12) * US, correlation=c))
            if kind == "kernel":
                out.append(Ev("kernel", name, t + 10 * US, t + (10 + dur) * US, correlation=c))
            else:
                out.append(Ev("memcpy", "", t + 10 * US, t + (10 + dur) * US, correlation=c, bytes=6_000_000, copy=name,
                              host_mem="pageable"))
            t += (dur + 15) * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", start, t))
    return out


def expert_parallel_loop(steps: int = 4) -> list[Ev]:
    """A MoE layer's expert-parallel all-to-all (DeepEP's dispatch and combine kernels) that no compute
    overlaps: 2 ms of compute, 3 ms dispatch, 1 ms experts, 3 ms combine a step, queued by the host at once and
    waited for at the step's end (the loss read)."""
    out: list[Ev] = []
    t, c = 0, 0
    parts = (("void attention_kernel<128>(float*)", 2000), ("void deep_ep::intranode::dispatch<8, 768>(int4*)", 3000),
             ("void expert_gemm<64>(float*)", 1000), ("void deep_ep::intranode::combine<8>(int4*)", 3000))
    for i in range(steps):
        start = t
        g = t + 10 * US
        for name, dur in parts:
            c += 1
            out.append(Ev("runtime", "cudaLaunchKernel", t, t + 5 * US, correlation=c))
            out.append(Ev("kernel", name, g, g + dur * US, correlation=c))
            g += (dur + 2) * US
            t += 10 * US
        c += 1
        out.append(Ev("runtime", "cudaStreamSynchronize", t, g + 5 * US, correlation=c))
        t = g + 12 * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", start, t))
    return out


def _load(events, tmp_path):
    return helpers.load(write_json(events, tmp_path / "t.json"))


def test_launch_bound_with_25us_kernels_is_found(tmp_path):
    # 37% idle, all of it while the host launches; the median kernel (25 us) is above the old 20 us gate
    result = dg.diagnose(_load(launch_bound_loop(), tmp_path))
    sg = result.signals
    assert sg["launch_median_kernel_us"] > 20 and sg["launch_share_of_idle"] > 0.95
    assert result[0].pattern == "launch_overhead" and 0.3 < result[0].cost < 0.45


def test_launch_overhead_needs_the_idle_to_be_on_launches(tmp_path):
    # the same kernels launched ahead (each launch call short): the GPU runs back to back, nothing to find
    result = dg.diagnose(_load(launch_bound_loop(launch_us=25), tmp_path))
    assert "launch_overhead" not in [f.pattern for f in result]


def test_device_to_host_copies_count_in_the_copy_cost(tmp_path):
    result = dg.diagnose(_load(offload_loop(), tmp_path))
    f = result[0]
    sg = result.signals
    # 6 of 7.5 ms a step are pageable copies, half of them device-to-host
    assert f.pattern == "h2d_copy" and f.cost > 0.7, (f.pattern, f.cost)
    assert sg["h2d_exposed_share"] < 0.45 < sg["copy_exposed_share"]
    assert sg["d2h_ms_per_step"] > 2.9 and "device-to-host" in f.summary


def test_expert_parallel_all_to_all_is_communication(tmp_path):
    trace = _load(expert_parallel_loop(), tmp_path)
    ev = trace.events
    kinds = dict(zip(ev["name"], ev["kind"]))
    assert kinds["void deep_ep::intranode::dispatch<8, 768>(int4*)"] == "collective"
    assert kinds["void expert_gemm<64>(float*)"] == "kernel"
    result = dg.diagnose(trace)
    assert result[0].pattern == "communication" and result[0].cost > 0.5, [(f.pattern, f.cost) for f in result]


# --- captures that are not a training loop ---------------------------------------------------------
def startup_capture(teardown: bool = False, steps: int = 4) -> list[Ev]:
    """A 10 s capture whose first CUDA call (a cudaMalloc) holds 8 s of context creation before
    ``steps`` warm steps; with ``teardown`` the same 8 s are 2,000 cuModuleUnload calls at exit instead."""
    out: list[Ev] = []
    t = 0
    if not teardown:
        out.append(Ev("runtime", "cudaMalloc", 0, 8_000_000 * US))
        t = 8_000_000 * US
    out += [Ev(e.kind, e.name, e.start_ns + t, e.end_ns + t, correlation=e.correlation) for e in launch_bound_loop(steps)]
    if teardown:
        t = out[-1].end_ns + 10 * US
        for _ in range(2000):
            out.append(Ev("runtime", "cuModuleUnload", t, t + 4000 * US))
            t += 4000 * US
    return out


def cold_iteration() -> list[Ev]:
    """One marked iteration of 4 kernels, 3 ms of host time around 40 us of GPU work."""
    out = [Ev("annotation", "ProfilerStep#0", 0, 3000 * US)]
    for i in range(4):
        t = (200 + 700 * i) * US
        out.append(Ev("runtime", "cudaLaunchKernel", t, t + 600 * US, correlation=i + 1))
        out.append(Ev("kernel", "add", t + 610 * US, t + 620 * US, correlation=i + 1))
    return out


def gpu_not_recorded() -> list[Ev]:
    """Host ops and CUDA launches of a GPU model, with the profiler's CUDA activity left off."""
    out: list[Ev] = []
    for i in range(40):
        t = i * 100 * US
        out.append(Ev("cpu_op", "aten::cudnn_convolution", t, t + 50 * US))
        out.append(Ev("runtime", "cudaLaunchKernel", t + 10 * US, t + 15 * US, correlation=i + 1))
    return out


def test_startup_capture_is_named_with_warm_up_fix(tmp_path):
    """8 s of context creation and one marked step: no loop was kept, so the whole capture is judged."""
    f = dg.diagnose(_load(startup_capture(steps=1), tmp_path))[0]
    assert f.pattern == "capture_window" and f.evidence["reason"] == "startup" and "start-up" in f.summary
    assert "warmup" in f.fix and f.evidence["startup_share"] > 0.75


def test_startup_before_a_kept_loop_is_judged_on_the_loop(tmp_path):
    """The same 8 s before four steps: start-up is judged on the steps the diagnosis keeps (none of it is in them),
    so the loop gets its own finding and the start-up is said to be left out."""
    result = dg.diagnose(_load(startup_capture(), tmp_path))
    assert result[0].pattern == "launch_overhead" and result.signals["startup_share"] > 0.75
    assert result.signals["startup_judged_share"] < 0.01
    assert result.steady.left_out and "before the first step marker" in result.steady.left_out[0].why


def test_teardown_capture_is_named_teardown(tmp_path):
    f = dg.diagnose(_load(startup_capture(teardown=True, steps=1), tmp_path))[0]
    assert f.pattern == "capture_window" and f.evidence["reason"] == "startup" and "teardown" in f.summary


def test_cold_single_iteration_is_not_launch_overhead(tmp_path):
    result = dg.diagnose(_load(cold_iteration(), tmp_path))
    assert [f.pattern for f in result] == ["capture_window"] and result[0].evidence["reason"] == "cold"


def test_warm_loop_of_few_kernels_per_step_is_still_diagnosed(tmp_path):
    # four steps of one kernel each is a loop (host_bound), not a cold start: the cold rule needs <= 2 steps
    from synth import host_bound_loop

    assert dg.diagnose(_load(host_bound_loop(), tmp_path))[0].pattern == "host_bound"


def test_gpu_activity_missing_says_add_profileractivity_cuda(tmp_path):
    trace = _load(gpu_not_recorded(), tmp_path)
    assert not trace.has_gpu
    f = dg.diagnose(trace)[0]
    assert f.pattern == "capture_window" and f.evidence["reason"] == "gpu_not_recorded"
    assert "ProfilerActivity.CUDA" in f.fix and "not recorded" in f.summary


def _host_job_with_collectives(prefix: str) -> list[Ev]:
    """A rank's host side only: steps of plain ops and one collective range each, ``<prefix>:all_reduce``."""
    out: list[Ev] = []
    for i in range(8):
        t = i * 1000 * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", t, t + 1000 * US))
        out.append(Ev("cpu_op", "aten::addmm", t, t + 600 * US))
        out.append(Ev("annotation", f"{prefix}:all_reduce", t + 600 * US, t + 900 * US))
    return out


def test_nccl_collectives_without_gpu_rows_are_a_gpu_left_unrecorded(tmp_path):
    # NCCL runs only on GPUs: a rank that issues nccl: collectives and has no GPU row lost its GPU activity.
    # The same job on gloo is a CPU job and is diagnosed as one.
    nccl = dg.diagnose(_load(_host_job_with_collectives("nccl"), tmp_path))
    assert nccl and nccl[0].pattern == "capture_window" and nccl[0].evidence["reason"] == "gpu_not_recorded"
    assert nccl[0].evidence["gpu_calls_without_gpu"] == 8  # one nccl:all_reduce a step, nothing else GPU-only
    (tmp_path / "gloo").mkdir()
    gloo = dg.diagnose(_load(_host_job_with_collectives("gloo"), tmp_path / "gloo"))
    assert "capture_window" not in [f.pattern for f in gloo]


def test_record_stream_without_gpu_rows_is_a_gpu_left_unrecorded(tmp_path):
    # Tensor.record_stream exists only for tensors on a device with streams.
    ev = _host_job_with_collectives("gloo") + [Ev("cpu_op", "aten::record_stream", i * 1000 * US, i * 1000 * US + 5 * US)
                                               for i in range(3)]
    f = dg.diagnose(_load(ev, tmp_path))[0]
    assert f.pattern == "capture_window" and f.evidence["gpu_calls_without_gpu"] == 3
