"""The capture checked before it is judged (helpers.capture_check, the capture_window rules about the kept steps)
and the mechanisms of issue 30's misses: syncs that are not named sync, compilation, a loop that varies, one long
kernel, copy engines that are not a busy GPU, host overhead split among causes, and the noise floor."""

from __future__ import annotations

import pytest
from synth import Ev, write_json

import helpers
from helpers import diagnosis as dg
from helpers import thresholds as th

US = 1000


def _load(tmp_path, events, name="t.json"):
    return helpers.load(write_json(events, tmp_path / name))


def _steps(n, body, step_us):
    out = []
    for i in range(n):
        t = i * step_us * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", t, t + step_us * US))
        out += body(i, t)
    return out


def test_a_free_after_gpu_work_is_a_sync_and_the_first_one_is_start_up(tmp_path):
    """torch.cuda.empty_cache() every step: cudaFree waits for the kernel and then frees for 3 ms. The loop's
    figures name a sync stall (not a start-up capture); a cudaFree before any launch is the context's creation."""
    def body(i, t):
        return [Ev("runtime", "cudaLaunchKernel", t + 10 * US, t + 15 * US, correlation=10 + i),
                Ev("kernel", "gemm", t + 20 * US, t + 1020 * US, correlation=10 + i),
                Ev("runtime", "cudaFree", t + 30 * US, t + 4030 * US, correlation=100 + i)]
    events = [Ev("runtime", "cudaFree", 0, 50 * US)] + [Ev(e.kind, e.name, e.start_ns + 100 * US, e.end_ns + 100 * US,
                                                            correlation=e.correlation) for e in _steps(5, body, 4100)]
    result = dg.diagnose(_load(tmp_path, events))
    assert result[0].pattern == "sync_stall", [(f.pattern, f.cost) for f in result]
    assert result[0].cost > 0.7  # the frees' 3 ms of each 4.1 ms step go with the syncs
    from helpers.critical import freeing_after_gpu_work

    tr = _load(tmp_path, events, "again.json")
    frees = tr.events["name"] == "cudaFree"
    assert freeing_after_gpu_work(tr)[frees.to_numpy()].tolist() == [False] + [True] * 5


def test_thousands_of_small_blocking_copies_are_syncs(tmp_path):
    """A loop that polls a flag: 40 tiny kernels a step, each followed by a 4-byte cudaMemcpy that waits for it."""
    def body(i, t):
        out = []
        for k in range(40):
            s = t + k * 50 * US
            c = 1000 * i + 2 * k
            out += [Ev("runtime", "cudaLaunchKernel", s, s + 5 * US, correlation=c),
                    Ev("kernel", "check_flag", s + 8 * US, s + 20 * US, correlation=c),
                    Ev("runtime", "cudaMemcpy", s + 6 * US, s + 30 * US, correlation=c + 1),
                    Ev("memcpy", "", s + 22 * US, s + 24 * US, correlation=c + 1, bytes=4, copy="D2H", host_mem="pageable")]
        return out
    trace = _load(tmp_path, _steps(5, body, 2000))
    assert "sync_stall" in [f.pattern for f in dg.diagnose(trace)]
    assert helpers.critical_path(trace).waits_per_step == 40


def test_a_capture_of_compilation_says_so(tmp_path):
    """The first step compiles for 900 ms (torch.compile's ranges), the next three run in 1 ms: a compile warm-up."""
    def body(i, t):
        out = [Ev("runtime", "cudaLaunchKernel", t + 10 * US, t + 15 * US, correlation=i + 1),
               Ev("kernel", "triton_poi_fused_add_0", t + 20 * US, t + 500 * US, correlation=i + 1)]
        if i == 0:
            out.append(Ev("annotation", "entire_frame_compile", t + 30 * US, t + 900_000 * US))
        return out
    events = []
    t = 0
    for i, dur in enumerate([901_000, 1000, 1000, 1000]):
        events.append(Ev("annotation", f"ProfilerStep#{i}", t * US, (t + dur) * US))
        events += [Ev(e.kind, e.name, e.start_ns + t * US, e.end_ns + t * US, correlation=e.correlation) for e in body(i, 0)]
        t += dur
    f = dg.diagnose(_load(tmp_path, events))[0]
    assert f.pattern == "capture_window" and f.evidence["reason"] == "compilation"
    assert f.evidence["compile_capture_share"] > 0.9 and "compiled step a few times" in f.fix


def test_compilation_inside_steady_steps_is_its_own_finding(tmp_path):
    """A model that recompiles every step for 0.4 ms of its 2 ms: the compilation pattern, its fix saving that."""
    def body(i, t):
        return [Ev("annotation", "_compile.compile_inner (dynamo_timed)", t + 10 * US, t + 410 * US),
                Ev("runtime", "cudaLaunchKernel", t + 420 * US, t + 425 * US, correlation=i + 1),
                Ev("kernel", "gemm", t + 430 * US, t + 1990 * US, correlation=i + 1),
                Ev("runtime", "cudaStreamSynchronize", t + 430 * US, t + 1995 * US, correlation=100 + i)]
    result = dg.diagnose(_load(tmp_path, _steps(5, body, 2000)))
    f = next(f for f in result if f.pattern == "compilation")
    assert f.cost == pytest.approx(0.4 / 2.0, abs=0.02) and f.if_fixed.startswith("the compilation")


def test_a_stream_capture_is_a_graph_being_built(tmp_path):
    """cudaStreamBeginCapture, 100 launches that run nothing, cudaStreamEndCapture: no loop to judge."""
    events = [Ev("runtime", "cudaStreamBeginCapture", 0, 5 * US)]
    for k in range(100):
        events.append(Ev("runtime", "cudaLaunchKernel", (10 + 20 * k) * US, (15 + 20 * k) * US, correlation=k + 1))
    events += [Ev("runtime", "cudaStreamEndCapture", 2100 * US, 2110 * US),
               Ev("runtime", "cudaGraphLaunch", 2200 * US, 2210 * US, correlation=500),
               Ev("kernel", "k0", 2220 * US, 2230 * US, correlation=500)]
    f = dg.diagnose(_load(tmp_path, events))[0]
    assert f.pattern == "capture_window" and f.evidence["reason"] == "graph_capture"
    assert f.evidence["launches_without_kernels"] > 0.9


def test_lost_records_varying_steps_and_crossing_ranges_are_noted(tmp_path):
    def body(i, t):
        dur = 1000 if i % 2 else 6000  # steps alternate 1 and 6 ms of GPU work
        out = [Ev("runtime", "cudaLaunchKernel", t + 10 * US, t + 15 * US, correlation=10 * i + 1),
               Ev("kernel", "gemm", t + 20 * US, t + (20 + dur) * US, correlation=10 * i + 1),
               Ev("runtime", "cudaLaunchKernel", t + 16 * US, t + 18 * US, correlation=10 * i + 2),  # its kernel lost
               Ev("runtime", "cudaStreamSynchronize", t + 19 * US, t + (30 + dur) * US, correlation=10 * i + 3),
               Ev("annotation", "forward", t + 5 * US, t + 500 * US),
               Ev("annotation", "backward", t + 400 * US, t + 900 * US)]  # starts inside forward, ends after it
        return out
    events = []
    t = 0
    for i in range(6):
        dur = 1100 if i % 2 else 6100
        events.append(Ev("annotation", f"ProfilerStep#{i}", t * US, (t + dur) * US))
        events += [Ev(e.kind, e.name, e.start_ns + t * US, e.end_ns + t * US, correlation=e.correlation) for e in body(i, 0)]
        t += dur
    result = dg.diagnose(_load(tmp_path, events))
    notes = {c.name: c for c in result.capture}
    assert notes["launches_without_kernels"].figure == pytest.approx(0.5)
    assert notes["varying_steps"].figure > th.CAPTURE_STEP_SPREAD
    assert notes["unbalanced_ranges"].figure == 6
    from helpers import render

    text = render.diagnose_text("t", result, True)
    assert "capture instead:" in text and result.to_dict()["capture"][0]["capture_instead"]


def test_one_long_kernel_after_set_up_copies_is_the_work(tmp_path):
    """No step markers: five copies that repeat, then one 120 ms kernel. The repeats are not the loop (they hold
    no GPU work to speak of): the whole program is judged, and its kernel is the bottleneck."""
    events = []
    for k in range(6):
        t = k * 300 * US
        events += [Ev("runtime", "cudaMemcpyAsync", t, t + 20 * US, correlation=k + 1),
                   Ev("memcpy", "", t + 25 * US, t + 225 * US, correlation=k + 1, bytes=8_000_000, copy="H2D", host_mem="pinned")]
    events += [Ev("runtime", "cudaLaunchKernel", 2000 * US, 2010 * US, correlation=50),
               Ev("kernel", "solver_kernel", 2020 * US, 122_020 * US, correlation=50),
               Ev("runtime", "cudaDeviceSynchronize", 2015 * US, 122_030 * US, correlation=51)]
    result = dg.diagnose(_load(tmp_path, events))
    assert result.steady.source == "capture"
    assert result[0].pattern == "gpu_bound" and result[0].cost > 0.95


def test_a_loop_that_varies_is_judged_from_its_first_cuda_call(tmp_path):
    """No markers and no repeat: 235 ms of host start-up before the first CUDA call are not the loop's."""
    events = [Ev("cpu_op", "aten::randn", 0, 235_000 * US)]
    t = 236_000
    for k, dur in enumerate([3000, 700, 9000, 1500, 400, 5000, 2200, 800, 6100, 300] * 4):
        events += [Ev("runtime", "cudaLaunchKernel", t * US, (t + 5) * US, correlation=k + 1),
                   Ev("kernel", f"k{k}", (t + 10) * US, (t + 10 + dur) * US, correlation=k + 1)]
        t += dur + 20 + 37 * (k % 7)
    result = dg.diagnose(_load(tmp_path, events))
    st = result.steady
    assert st.kept_us[0] >= 236_000 and "before the first CUDA call" in st.left_out[0].why
    assert result[0].pattern == "gpu_bound"


def test_copy_engines_are_not_a_busy_gpu(tmp_path):
    """A PCIe-bound loop: kernels run 9% of the step, copies the rest: h2d_copy, and no gpu_bound beside it."""
    def body(i, t):
        return [Ev("runtime", "cudaMemcpyAsync", t + 5 * US, t + 900 * US, correlation=10 + i),
                Ev("memcpy", "", t + 10 * US, t + 905 * US, correlation=10 + i, bytes=6_000_000, copy="H2D", host_mem="pageable"),
                Ev("runtime", "cudaLaunchKernel", t + 901 * US, t + 905 * US, correlation=20 + i),
                Ev("kernel", "relu", t + 906 * US, t + 996 * US, correlation=20 + i)]
    result = dg.diagnose(_load(tmp_path, _steps(5, body, 1000)))
    assert result.signals["gpu_bound_busy"] > 0.95 and result.signals["gpu_kernel_share"] < 0.1
    assert [f.pattern for f in result][:1] == ["h2d_copy"] and "gpu_bound" not in [f.pattern for f in result]


def test_host_overhead_split_three_ways_is_all_reported(tmp_path):
    """Launching 0.53 ms, host code 0.42 ms, data 0.34 ms a step beside 0.3 ms of GPU work: each its own finding with
    what its fix saves, ranked, and the three together; none hidden behind a share gate."""
    def body(i, t):
        out = [Ev("annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, t + 340 * US)]
        s = t // US + 340
        for k in range(10):  # 10 ops of 53 us, each launching a 30 us kernel
            c = 1000 * i + k
            out += [Ev("cpu_op", "aten::add", (s + 53 * k) * US, (s + 53 * k + 50) * US),
                    Ev("runtime", "cudaLaunchKernel", (s + 53 * k + 10) * US, (s + 53 * k + 15) * US, correlation=c),
                    Ev("kernel", "add_kernel", (s + 53 * k + 20) * US, (s + 53 * k + 50) * US, correlation=c)]
        out.append(Ev("annotation", "metrics", (s + 540) * US, (s + 960) * US))  # NumPy bookkeeping, no op
        return out
    result = dg.diagnose(_load(tmp_path, _steps(5, body, 1300)))
    found = {f.pattern: f for f in result}
    assert {"launch_overhead", "host_bound", "data_stall"} <= set(found)
    assert all(f.cost >= th.GAIN_FLOOR_SHARE for f in result)
    assert result.signals["step_ms_if_all_fixed"] < min(f.step_ms_if_fixed for f in result)


def test_a_saving_under_the_noise_floor_is_no_finding(tmp_path):
    """3 us of Python between kernels of 100 us each: launching costs 3% of the step, under the floor."""
    def body(i, t):
        out = []
        for k in range(9):
            c = 100 * i + k
            s = t // US + k * 100
            out += [Ev("runtime", "cudaLaunchKernel", (s + 1) * US, (s + 4) * US, correlation=c),
                    Ev("kernel", "conv", (s + 5) * US, (s + 102) * US, correlation=c)]
        return out
    result = dg.diagnose(_load(tmp_path, _steps(5, body, 905)))
    assert [f.pattern for f in result] == ["gpu_bound"]
    assert 0 < result.signals["gains"]["launch_overhead"] < th.GAIN_FLOOR_SHARE


def test_steps_that_differ_only_in_their_wait_for_data_are_not_noted_as_different_work(tmp_path):
    """A loader's workers falling behind in bursts: every step runs the same 3 ms of GPU work, but waits 0.2 ms or
    12 ms for its batch. The lengths vary (a coefficient of variation near 1) because of the waits alone, which the
    data_stall finding costs; a note that the steps "do different work" would send the reader to the wrong fix."""
    events, t = [], 0
    for i in range(8):
        wait = 12_000 if i % 2 else 200
        dur = wait + 3_300
        events += [Ev("annotation", f"ProfilerStep#{i}", t * US, (t + dur) * US),
                   Ev("annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t * US,
                      (t + wait) * US),
                   Ev("runtime", "cudaLaunchKernel", (t + wait + 10) * US, (t + wait + 15) * US, correlation=i + 1),
                   Ev("kernel", "conv", (t + wait + 20) * US, (t + wait + 3_020) * US, correlation=i + 1),
                   Ev("runtime", "cudaDeviceSynchronize", (t + wait + 16) * US, (t + wait + 3_030) * US, correlation=100 + i)]
        t += dur
    result = dg.diagnose(_load(tmp_path, events))
    assert result[0].pattern == "data_stall"
    assert "varying_steps" not in {c.name for c in result.capture}
