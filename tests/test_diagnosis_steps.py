"""Steps without markers: CUDA/HIP Graph replays, decode loops, single-iteration captures, and the last
step's window. Synthetic traces in tests/synth.py's style, each with the answer it must get."""

from __future__ import annotations

import pytest
from synth import Ev, write_json

import helpers
from helpers import diagnosis as dg
from helpers import metrics as m

US = 1000  # ns per microsecond
LAYER = ("rmsnorm", "qkv_gemm", "attention", "o_gemm", "mlp_gemm")


def _load(events, tmp_path, name="t.json"):
    return helpers.load(write_json(events, tmp_path / name))


def graph_decode_loop(steps: int = 6, layers: int = 8, kernel_us: int = 100, host_us: int = 300) -> list[Ev]:
    """Each decode step: a little host work, then one cudaGraphLaunch that replays ``layers`` identical
    layers of kernels back to back, then a blocking copy of the sampled tokens. Every kernel of a step
    shares the one launch's correlation id, and the layer is what repeats among the kernels."""
    out: list[Ev] = []
    t, c = 0, 0
    for _ in range(steps):
        t += host_us * US
        c += 1
        launch = c
        out.append(Ev("runtime", "cudaGraphLaunch", t, t + 20 * US, correlation=launch))
        g = t + 30 * US
        for _ in range(layers):
            for name in LAYER:
                out.append(Ev("kernel", name, g, g + kernel_us * US, correlation=launch))
                g += (kernel_us + 2) * US
        c += 1
        out.append(Ev("runtime", "cudaMemcpy", t + 25 * US, g + 20 * US, correlation=c))
        out.append(Ev("memcpy", "", g + 5 * US, g + 15 * US, correlation=c, bytes=256, copy="D2H", host_mem="pageable"))
        t = g + 20 * US
    return out


def eager_decode_loop(steps: int = 6, layers: int = 6) -> list[Ev]:
    """A decode loop launched kernel by kernel: ``layers`` identical layers, then the step's own head
    and sampling kernels, so the layer repeats nearly as well as the step does."""
    out: list[Ev] = []
    t, c = 0, 0
    for _ in range(steps):
        for name in [*LAYER * layers, "lm_head_gemm", "argmax"]:
            c += 1
            out.append(Ev("runtime", "cudaLaunchKernel", t, t + 5 * US, correlation=c))
            out.append(Ev("kernel", name, t + 8 * US, t + 58 * US, correlation=c))
            t += 60 * US
        t += 200 * US
    return out


def test_graph_replays_are_steps_not_zero_length_layers(tmp_path):
    trace = _load(graph_decode_loop(), tmp_path)
    st = m.stepped(trace).steps
    assert len(st) >= 3 and (st["dur_us"] > 0).all()  # one step per replay, never several of zero length
    step_us = (300 + 20 + 10 + 8 * 5 * 102) * 1.0  # host work + launch + queue + 40 kernels + the copy
    assert m.step_time_ms(m.stepped(trace)) == pytest.approx(step_us / 1e3, rel=0.05)
    times = m.step_times(m.stepped(trace))
    assert max(times) < 1.2 * min(times)  # the last window is a step too, not the capture's tail


def test_graph_decode_loop_diagnosis_follows_the_replays(tmp_path):
    result = dg.diagnose(_load(graph_decode_loop(), tmp_path))
    assert result.steady.source == "inferred" and result.steady.steps >= 3
    # the GPU runs 4.1 ms of each 4.4 ms step: GPU-bound, not the 0-length-step artefact
    assert result[0].pattern == "gpu_bound" and result[0].cost > 0.85


def test_one_replay_holding_all_repeats_is_one_iteration(tmp_path):
    events = graph_decode_loop(steps=1, layers=12)
    st = m.stepped(_load(events, tmp_path)).steps
    assert st.empty  # the twelve layers of one replay are no steady state of steps
    trace = _load(events, tmp_path, "one.json")
    assert m.step_time_ms(trace) == pytest.approx(m.windows(trace)["dur_us"].sum() / 1e3)


def test_eager_decode_loop_steps_are_decode_steps(tmp_path):
    trace = _load(eager_decode_loop(), tmp_path)
    info = m.stepped(trace).metadata["steps_inferred"]
    assert info["source"] == "kernels" and info["period_length"] == 5 * 6 + 2  # the step, not the layer
    assert m.step_time_ms(m.stepped(trace)) == pytest.approx((32 * 60 + 200) / 1e3, rel=0.05)


def test_single_iteration_capture_ends_with_its_gpu_work(tmp_path):
    # one marked step: the host launches for 1 ms, the GPU runs the work for 8 ms
    events = [Ev("annotation", "ProfilerStep#0", 0, 1000 * US)]
    for i in range(8):
        events += [Ev("runtime", "cudaLaunchKernel", (10 + 100 * i) * US, (15 + 100 * i) * US, correlation=i + 1),
                   Ev("kernel", "gemm", (20 + 1000 * i) * US, (1020 + 1000 * i) * US, correlation=i + 1)]
    trace = _load(events, tmp_path)
    assert m.windows(trace)["end_us"].max() == pytest.approx(8020)
    assert m.step_time_ms(trace) == pytest.approx(8.02)
    assert dg.diagnose(trace)[0].pattern == "gpu_bound"


def host_ahead_loop(steps: int = 5, ahead: int = 2, step_us: int = 16_000) -> list[Ev]:
    """A GPU-bound loop whose host runs ``ahead`` steps ahead of the GPU: every host step is 16 ms (the
    queue throttles it), each step's 16 ms of kernels runs ``ahead`` steps after the host launched it."""
    out: list[Ev] = []
    for i in range(steps):
        s = i * step_us
        out.append(Ev("annotation", f"ProfilerStep#{i}", s * US, (s + step_us) * US))
        for j in range(4):
            c = 10 * i + j + 1
            out.append(Ev("runtime", "cudaLaunchKernel", (s + 100 + 10 * j) * US, (s + 105 + 10 * j) * US, correlation=c))
            g = (i + ahead) * step_us + 4000 * j
            out.append(Ev("kernel", "gemm", g * US, (g + 4000) * US, correlation=c))
    # the work of the steps before the capture keeps the GPU busy at its start
    for k in range(ahead):
        out.append(Ev("kernel", "gemm", k * step_us * US, (k + 1) * step_us * US, correlation=-1))
    return out


def test_last_step_window_does_not_absorb_the_gpu_tail(tmp_path):
    trace = _load(host_ahead_loop(), tmp_path)
    times = m.step_times(trace)
    # each step is 16 ms on the host and on the GPU; the GPU's queue of two more steps after the last
    # host step belongs to earlier steps (stretching to it reported the last step as 48 ms)
    assert times.tolist() == pytest.approx([16.0] * 5)
    assert m.step_time_ms(trace) == pytest.approx(16.0)
    assert dg.diagnose(trace)[0].pattern == "gpu_bound"


def test_capture_starting_with_unrecorded_gpu_work_is_left_out_and_said(tmp_path):
    # the profiler starts while the GPU still runs the previous step: the first copy, queued at 0.5 ms,
    # starts at 8 ms; then 10 ms of back-to-back kernels (what the published vLLM graph capture shows)
    events = [Ev("runtime", "cudaMemcpyAsync", 500 * US, 510 * US, correlation=1),
              Ev("memcpy", "", 8000 * US, 8010 * US, correlation=1, bytes=1024, copy="D2D"),
              Ev("runtime", "cudaGraphLaunch", 1000 * US, 1500 * US, correlation=2)]
    events += [Ev("kernel", f"layer_{i % 7}", (8010 + 100 * i) * US, (8110 + 100 * i) * US, correlation=2) for i in range(100)]
    result = dg.diagnose(_load(events, tmp_path))
    assert result.steady.kept_us[0] == pytest.approx(8000 - 500)  # the reader starts time at the first event
    assert "did not record" in result.steady.left_out[0].why
    assert result[0].pattern == "gpu_bound" and result[0].cost > 0.95
    # a GPU idle at the start (work queued and started within microseconds) is left as it is
    idle = [Ev(e.kind, e.name, e.start_ns - 7485 * US, e.end_ns - 7485 * US, correlation=e.correlation, bytes=e.bytes,
               copy=e.copy) if e.kind in ("memcpy", "kernel") else e for e in events]
    assert m.unrecorded_gpu_lead(_load(idle, tmp_path, "idle.json"), 0) is None
