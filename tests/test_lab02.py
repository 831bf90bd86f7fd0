"""Lab 02's checks: the reading, and the fix judged from the learner's own trace.

For each check: the reference passes, the unsolved stub fails, and plausible wrong answers fail with
a message naming what *that* trace shows. Recorded H200 traces (copied out of data/, so they stand in
for a learner's own capture), small live CPU captures and synthetic traces.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from conftest import ROOT, as_learners, shipped_notebook
from synth import Ev, write_json

import helpers
from helpers import checks, diagnose, plots
from helpers.course import recorded
from helpers.diagnosis import signals
from helpers.selfcheck import item_status
from helpers.workloads import launch_overhead

FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int)"


def as_mine(workload: str, variant: str, tag: str, tmp_path: Path):
    """A recorded trace copied out of data/: the checks then treat it as the learner's own capture."""
    src = Path(recorded(workload, variant, tag).source)
    dst = tmp_path / f"mine_{src.name}"
    shutil.copy(src, dst)
    from conftest import own_capture as _stamp  # stands in for helpers.capture in this process

    return _stamp(helpers.load(dst))


# --- synthetic GPU steps --------------------------------------------------------------------
def graph_loop(steps: int = 3, graph_kernels: int = 150, fills: int = 2, leftover: int = 0, leftover_range: str = "optimizer",
               graph: bool = True, eager: int = 0) -> list[Ev]:
    """Steps of: a 'data' range, a 'graph replay' range with one cudaGraphLaunch replaying ``graph_kernels``
    back-to-back 1.5 us kernels (``fills`` of them FillFunctor), then ``leftover`` kernels launched one by one in
    ``leftover_range`` (7 us launch calls, 1 us kernels). ``graph=False``: ``eager`` launches per step, no graph."""
    us = 1000
    out: list[Ev] = []
    t, corr = 0, 1
    for i in range(steps):
        s0 = t
        out.append(Ev("annotation", "data", t, t + 10 * us))
        t += 10 * us
        if graph:
            out.append(Ev("annotation", "graph replay", t, t + 12 * us))
            out.append(Ev("runtime", "cudaGraphLaunch", t + 1 * us, t + 9 * us, correlation=corr))
            k0 = t + 10 * us
            for k in range(graph_kernels):
                name = FILL if k < fills else f"gemm_small_{k % 7}"
                out.append(Ev("kernel", name, k0 + k * 2 * us, k0 + k * 2 * us + 1500, correlation=corr))
            corr += 1
            t = k0 + graph_kernels * 2 * us + 5 * us
        n_one = leftover if graph else eager
        if n_one:
            r0 = t
            for _ in range(n_one):
                out.append(Ev("runtime", "cudaLaunchKernel", t, t + 7 * us, correlation=corr))
                out.append(Ev("kernel", "elementwise_small", t + 8 * us, t + 9 * us, correlation=corr))
                corr += 1
                t += 10 * us
            out.append(Ev("annotation", leftover_range if graph else "forward", r0, t))
        t += 5 * us
        out.insert(0, Ev("annotation", f"ProfilerStep#{i}", s0, t))
    return out


def synth(tmp_path: Path, name: str, events: list[Ev]):
    from conftest import own_capture as _stamp  # stands in for helpers.capture in this process

    return _stamp(helpers.load(write_json(events, tmp_path / f"{name}.json")))


@pytest.fixture
def gpu_broken(tmp_path):
    return synth(tmp_path, "broken", graph_loop(graph=False, eager=600))


# --- exercise 1: the reading -----------------------------------------------------------------
def _reference_reading(trace) -> checks.Reading:
    """What the solution notebook computes: a 2 ms window of the second step, launch idle share, kernels per step."""
    from helpers import metrics

    origin = plots.time_origin_us(trace)
    second = trace.steps.iloc[1]
    zoom = ((second.start_us - origin) / 1e3 + 1.0, (second.start_us - origin) / 1e3 + 3.0)
    gaps = metrics.idle_gaps(trace)
    share = gaps.loc[gaps["cause"] == "launch", "dur_us"].sum() / metrics.windows(trace)["dur_us"].sum()
    return checks.Reading("launch_overhead", zoom, {"launch_idle_share": share,
                                                    "kernels_per_step": metrics.kernel_stats(trace)["per_step"]}, share)


def test_reading_reference_passes_and_wrong_readings_say_what_the_trace_shows():
    t = recorded("launch_overhead", "broken")
    good = _reference_reading(t)
    assert checks.check_reading(good, t, "launch", "broken loop").startswith("passed")
    with pytest.raises(checks.CheckFailed, match="not complete"):  # the unsolved stub leaves no Reading
        checks.check_reading(None, t, "launch", "broken loop")
    # an eager reader calls the white space a data stall
    with pytest.raises(checks.CheckFailed, match="data_stall is not what holds this loop back.*kernels per step"):
        checks.check_reading(checks.Reading("data_stall", good.window_ms, {"data_stall_share": 0.87}, 0.87), t, "launch")
    # the right pattern, but the GPU's busy share given as the cost
    with pytest.raises(checks.CheckFailed, match="cost of 4%"):
        checks.check_reading(checks.Reading("launch_overhead", good.window_ms, good.evidence, 0.04), t, "launch")
    # kernels per step read off one zoom instead of the whole step
    with pytest.raises(checks.CheckFailed, match="kernels_per_step = 200 does not match"):
        checks.check_reading(checks.Reading("launch_overhead", good.window_ms, {"kernels_per_step": 200}, good.cost), t, "launch")


# --- exercise 2: the CUDA Graph, judged from the learner's trace (GPU track) -------------------
def test_recorded_graph_capture_passes_as_the_learners_own(tmp_path):
    broken = as_mine("launch_overhead", "broken", "h200", tmp_path)
    graphs = as_mine("launch_overhead", "graphs", "h200", tmp_path)
    out = checks.check_launch_fixed(broken, graphs)
    assert out.startswith("passed") and "1 cudaGraphLaunch and 0 cudaLaunchKernel" in out and "not slower beyond the noise band" in out


def test_the_courses_own_graph_trace_earns_nothing():
    with pytest.raises(checks.CheckFailed, match="recorded, not yours"):
        checks.check_launch_fixed(recorded("launch_overhead", "broken"), recorded("launch_overhead", "graphs"))


@pytest.mark.parametrize("variant", ["broken", "foreach", "compile"])
def test_no_graph_fails_naming_the_launch_count(tmp_path, variant):
    """The stub left as the broken loop, or a fix that is not a graph (foreach Adam, torch.compile)."""
    broken = as_mine("launch_overhead", "broken", "h200", tmp_path)
    after = as_mine("launch_overhead", variant, "h200", tmp_path)
    per_step = {"broken": 1029, "foreach": 357, "compile": 240}[variant]
    with pytest.raises(checks.CheckFailed, match=f"No cudaGraphLaunch in your trace: all {per_step} kernels per step"):
        checks.check_launch_fixed(broken, after)


def test_optimizer_outside_the_graph_is_named(tmp_path, gpu_broken):
    after = synth(tmp_path, "opt_outside", graph_loop(graph_kernels=300, leftover=412))
    with pytest.raises(checks.CheckFailed, match=r"Graph captured \(1 cudaGraphLaunch per step\) but 412 cudaLaunchKernel "
                                                 r"calls per step remain \(412 in your 'optimizer' range\): the optimizer step "
                                                 "is outside the graph"):
        checks.check_launch_fixed(gpu_broken, after)


def test_graph_captured_without_warmup_shows_its_fill_kernels(tmp_path, gpu_broken):
    """No warm-up: Adam creates its state inside the capture, so each replay zero-fills ~3 tensors per parameter."""
    after = synth(tmp_path, "nowarmup", graph_loop(graph_kernels=600, fills=294))
    with pytest.raises(checks.CheckFailed, match="Your graph replays 294 fill kernels per step.*Run a few warm-up steps"):
        checks.check_launch_fixed(gpu_broken, after)
    ok = synth(tmp_path, "warm", graph_loop(graph_kernels=600, fills=2))
    assert checks.check_launch_fixed(gpu_broken, ok).startswith("passed")


def test_a_graph_of_only_the_forward_pass_is_missing_work(tmp_path, gpu_broken):
    after = synth(tmp_path, "fwd_only", graph_loop(graph_kernels=100))
    with pytest.raises(checks.CheckFailed, match="runs 100 kernels per step .* the broken loop 600: part of the training step is missing"):
        checks.check_launch_fixed(gpu_broken, after)


def test_a_cpu_trace_on_the_gpu_track_says_so(tmp_path, gpu_broken):
    cpu = as_mine("launch_overhead", "foreach", "cpu", tmp_path)
    with pytest.raises(checks.CheckFailed, match="'before' is a GPU trace and your 'after' a CPU-only trace"):
        checks.check_launch_fixed(gpu_broken, cpu)


# --- exercise 3: the hand-written foreach Adam (CPU track), live on this CPU --------------------
def reference_update(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps):
    """The solution notebook's update (the tests need their own copy; the lab never imports one)."""
    torch._foreach_mul_(exp_avgs, beta1)
    torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
    denom = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(exp_avg_sqs), math.sqrt(1 - beta2**step)), eps)
    torch._foreach_addcdiv_(params, exp_avgs, denom, value=-lr / (1 - beta1**step))


def loop_update(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps):
    """Plausible wrong answer: the right maths, one parameter at a time."""
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        p.addcdiv_(m, (v / (1 - beta2**step)).sqrt_().add_(eps), value=-lr / (1 - beta1**step))


def no_bias_correction(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps):
    """Plausible wrong answer: foreach calls, but Adam without its bias corrections."""
    torch._foreach_mul_(exp_avgs, beta1)
    torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
    torch._foreach_addcdiv_(params, exp_avgs, torch._foreach_add(torch._foreach_sqrt(exp_avg_sqs), eps), value=-lr)


def foreach_step(update):
    """The lab's scaffold around the learner's update (solutions/02, make_foreach_step)."""
    torch.manual_seed(0)
    model = launch_overhead.TinyBlocks()
    params = list(model.parameters())
    m1, m2 = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
    data = launch_overhead.make_data(torch.device("cpu"))
    done = {"n": 0}

    def step(i: int) -> None:
        with helpers.annotate("data"):
            x, y = data[i % len(data)]
        with helpers.annotate("forward"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        with helpers.annotate("backward"):
            loss.backward()
        with helpers.annotate("optimizer"):
            done["n"] += 1
            with torch.no_grad():
                update(params, [p.grad for p in params], m1, m2, done["n"], 1e-3, 0.9, 0.999, 1e-8)
            for p in params:
                p.grad = None

    return step


@pytest.fixture(scope="module")
def cpu_broken(tmp_path_factory):
    return helpers.capture(launch_overhead.make_step("broken", torch.device("cpu")), steps=2,
                           out_dir=tmp_path_factory.mktemp("b"), name="broken")


def test_cpu_reference_passes_and_the_python_loop_fails_naming_the_optimizer_range(tmp_path, cpu_broken):
    assert checks.adam_update_error(reference_update) <= checks.lab02.ADAM_TOLERANCE
    fixed = helpers.capture(foreach_step(reference_update), steps=2, out_dir=tmp_path, name="fixed")
    out = checks.check_launch_fixed(cpu_broken, fixed, 1.5, update=reference_update)
    assert out.startswith("passed") and "'optimizer' range" in out
    looped = helpers.capture(foreach_step(loop_update), steps=2, out_dir=tmp_path, name="looped")
    assert checks.adam_update_error(loop_update) <= checks.lab02.ADAM_TOLERANCE  # right maths ...
    with pytest.raises(checks.CheckFailed, match=r"in the 'optimizer' range \d+ -> \d+ per step.*one call per parameter"):
        checks.check_launch_fixed(cpu_broken, looped, 1.5, update=loop_update)  # ... too many calls
    # the unsolved stub: the broken loop itself
    with pytest.raises(checks.CheckFailed, match=r"steps run Optimizer.step#Adam.step .*not your adam_update"):
        checks.check_launch_fixed(cpu_broken, as_learners(cpu_broken), 1.5, update=reference_update)
    with pytest.raises(checks.CheckFailed, match="runs only the course's code .*launch_overhead.*none of yours"):
        checks.check_launch_fixed(cpu_broken, cpu_broken, 1.5, update=reference_update)


def test_cpu_update_with_wrong_maths_fails_with_its_distance_from_adam(tmp_path, cpu_broken):
    err = checks.adam_update_error(no_bias_correction)
    assert err > checks.lab02.ADAM_TOLERANCE
    fixed = helpers.capture(foreach_step(no_bias_correction), steps=2, out_dir=tmp_path, name="nobias")
    with pytest.raises(checks.CheckFailed, match="away from torch.optim.Adam.*bias corrections"):
        checks.check_launch_fixed(cpu_broken, fixed, 1.5, update=no_bias_correction)


def test_a_step_that_skips_the_model_fails(tmp_path, cpu_broken):
    model = launch_overhead.TinyBlocks()

    def half_step(i: int) -> None:  # "fewer ops" by running only a quarter of the blocks
        x = torch.randn(32, 64)
        with helpers.annotate("forward"):
            for b in model.blocks[:6]:
                x = x + b(x)

    after = helpers.capture(half_step, steps=2, out_dir=tmp_path, name="half")
    with pytest.raises(checks.CheckFailed, match="gradients accumulated a step .*the loop as first written|calls the model.s layers 6 times per step"):
        checks.check_launch_fixed(cpu_broken, after, 1.5, update=reference_update)


def test_the_lab_stub_for_the_update_is_not_done():
    nb = json.loads(shipped_notebook("labs/02_launch_overhead.ipynb"))
    cell = next("".join(c["source"]) for c in nb["cells"] if "def adam_update(" in "".join(c["source"]))
    ns: dict = {}
    exec(compile("from helpers import course\nimport torch\n" + cell, "lab02", "exec"), ns)
    with pytest.raises(NotImplementedError, match="Exercise 3 is not done yet"):
        checks.adam_update_error(ns["adam_update"])


# --- credit and the lab's text ----------------------------------------------------------------
def test_credit_is_the_reading_and_the_fix_on_both_tracks():
    want = ("check_reading[broken loop]", "check_launch_fixed")
    assert checks.CREDIT["launch"] == {"gpu": want, "cpu": want}
    assert not hasattr(checks, "LAUNCH_FIX_ANSWERS") and not hasattr(checks, "check_launch_fixes")
    assert not item_status("launch", {"checks": {"check_launch_diagnosed": True}, "track": "cpu"})[0]
    assert not item_status("launch", {"checks": {"check_reading[broken loop]": True}, "track": "gpu"})[0]


def test_the_lab_names_no_pattern_before_the_reading():
    """Titles and prose before the reading's check name no pattern and no fix; no diagnosis is shown (the
    notebook's file name and the workload module's name are the exceptions the course cannot avoid)."""
    nb = json.loads((ROOT / "solutions" / "02_launch_overhead.ipynb").read_text())
    cells = nb["cells"]
    first_check = next(i for i, c in enumerate(cells) if "checks.check_reading(" in "".join(c["source"]))
    prose = "\n".join("".join(c["source"]) for c in cells[:first_check] if c["cell_type"] == "markdown").lower()
    for word in ("launch overhead", "launch-bound", "cuda graph", "foreach adam", "multi-tensor"):
        assert word not in prose, word
    code = "\n".join("".join(c["source"]) for c in cells[:first_check] if c["cell_type"] == "code")
    assert "diagnose(" not in code and "findings" not in code
    everything = "\n".join("".join(c["source"]) for c in cells)
    assert "LAUNCH_FIX_ANSWERS" not in everything and 'make_step("graphs")' not in everything


def test_compile_foreach_variant_keeps_foreach_adam():
    step = launch_overhead.make_eager_step(torch.device("cpu"), foreach=True, compiled=False, fused_adam=False)
    assert callable(step)
    assert "compile_foreach" in launch_overhead.VARIANTS and "graphs_nowarmup" in launch_overhead.VARIANTS
    if not torch.cuda.is_available():
        with pytest.raises(helpers.NoGPUError, match="needs a CUDA GPU"):
            launch_overhead.make_step("graphs_nowarmup", torch.device("cpu"))


def test_recorded_graph_trace_signals_used_by_the_thresholds():
    """The thresholds in lab02 sit between what the recorded traces show."""
    g = recorded("launch_overhead", "graphs")
    counts = checks.launch_counts(g)
    assert counts["graph_fills"] <= 2 < checks.lab02.GRAPH_FILLS_PER_STEP
    assert counts["kernels"] >= checks.lab02.MIN_WORK_SHARE * checks.launch_counts(recorded("launch_overhead", "broken"))["kernels"]
    assert "launch_overhead" not in [f.pattern for f in diagnose(g)] and signals(g)["launch_idle_share"] < 0.2
