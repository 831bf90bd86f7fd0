"""Lab 08: when the GPU is the bottleneck (precision, torch.compile, Nsight Compute, memory, GPU metrics)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch

from .. import metrics as m
from ..model import Trace
from ..render import plural
from ._core import NUMBER, CheckFailed, _check, _close, _record, learner_trace_problem, own_capture_problem, run_learner

__all__ = [
    "check_gemm_reading", "check_same_training", "check_tensor_cores", "check_precision_speedup",
    "check_graph_breaks", "check_break_fixed", "check_compile_seconds", "check_ncu_reading", "check_clock_ratio",
    "check_activation_saving", "check_alloc_churn", "check_gpu_metrics_reading", "saved_tensor_bytes",
    "ncu_long", "ncu_stalls", "gpu_metrics",
]

#: Lab 08's own work: what the learner wrote and ran (the precision step, the fixed graph break, the
#: checkpointed forward) on both tracks, plus the tensor-core kernels of their own capture on a GPU.
# The credit this lab's exercises earn is declared in helpers.checks.exercise.EXERCISES.


# --- 1. reading the fp32 loop ---------------------------------------------------------------------
def check_gemm_reading(answer: dict, trace: Trace) -> str:
    """``{"top_gemm": part of the longest GEMM kernel's name, "math": "fp32_ffma"|"tensor_core",
    "gemm_share": GEMM time over all kernel time}`` read from ``trace``."""
    g = m.gemm_kernels(trace)
    if g.empty:
        return _check("gpu_bound", "check_gemm_reading", False, "this trace has no GEMM kernel; read the GPU-bound loop's trace")
    top = str(g.iloc[0]["name"])
    shares = m.gemm_math_shares(trace)
    want_math = max(("tensor_core", "fp32_ffma"), key=lambda k: shares[k])
    part = str(answer.get("top_gemm", "")).strip()
    if len(part) < 8 or part not in top:
        return _check("gpu_bound", "check_gemm_reading", False,
                      f"{part!r} is not (a part of at least 8 characters of) the GEMM kernel with the most GPU time. "
                      "Group the kernels by name, sum dur_us, keep the names of matrix products (gemm, xmma, nvjet).")
    if answer.get("math") != want_math:
        return _check("gpu_bound", "check_gemm_reading", False,
                      f"math={answer.get('math')!r}: read the kernel names again. 'sgemm', 'simt', 'ffma' and "
                      "'f32f32_f32f32' mean fp32 fused multiply-adds; 'tensorop', 'tf32', 'bf16', 'nvjet' mean tensor cores.")
    share = float(answer.get("gemm_share", float("nan")))
    return _check("gpu_bound", "check_gemm_reading", _close(share, shares["gemm_of_kernels"], 0.0, 0.05),
                  f"gemm_share={share:.3f} is off: sum the GEMM kernels' dur_us and divide by the sum over all kernels.")


# --- 2. precision ---------------------------------------------------------------------------------
def _guarded_step(step_fn: Callable) -> Callable:
    """``step_fn`` run through the checks' guard (a time limit, one line when it raises), returning one loss."""
    if not callable(step_fn):
        raise CheckFailed(f"pass your step function itself, not a {type(step_fn).__name__}")

    def step(*args: object, **kw: object) -> object:
        loss = run_learner(lambda: step_fn(*args, **kw), name="your step_fn", returns=(torch.Tensor, *NUMBER),
                           note=step_fn)
        if isinstance(loss, torch.Tensor) and loss.numel() != 1:
            raise CheckFailed(f"your step_fn returned a tensor of shape {tuple(loss.shape)}; it should return the "
                              "step's loss, one number")
        return loss

    step.learner = step_fn  # type: ignore[attr-defined] # whose function this is, for the course-code check
    return step


def check_same_training(step_fn: Callable, device: torch.device | str | None = None, steps: int = 4) -> str:
    """The learner's ``step_fn(model, opt, x, y) -> loss`` trains the same model as the course's step in the same
    low precision (:func:`helpers.checks.behaviour.lowp_step_problem`): every Linear of each step runs in bf16
    (or fp16, with a GradScaler), the loss it returns is its own forward's, backward and the optimizer see the
    gradients of that loss (scaled, then unscaled), and from seed 0 its losses and its parameters' change lie
    within the reference's own spread, so a changed learning rate, a skipped step or another optimizer fails."""
    from . import behaviour

    try:
        step = _guarded_step(step_fn)
        device = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
        problem, summary = behaviour.lowp_step_problem(step, device, steps)
    except CheckFailed:
        _record("gpu_bound", "check_same_training", False)
        raise
    _check("gpu_bound", "check_same_training", problem is None, (problem or "")[:1].upper() + (problem or "")[1:])
    return f"passed: check_same_training ({summary})"


def _profile(live: bool):  # noqa: ANN202 - a capability.DeviceProfile
    """The device the step ran on: this GPU, probed (live), or the H200 of the recordings."""
    from .. import capability

    return capability.device_profile() if live else capability.recorded_profile()


def check_tensor_cores(fp32_trace: Trace, fast_trace: Trace) -> str:
    """The fp32 capture's GEMMs run on FFMA pipes and the fixed capture's on tensor cores (by kernel name). On a
    GPU without tensor cores (compute capability under 7.0) the fixed capture's GEMMs must have left fp32."""
    from .. import capability
    from ..thresholds import TENSOR_CORE_GEMM_SHARE

    problem = learner_trace_problem(fast_trace)
    if problem:
        return _check("gpu_bound", "check_tensor_cores", False, problem)
    before, after = m.gemm_math_shares(fp32_trace), m.gemm_math_shares(fast_trace)
    if before["fp32_ffma"] < TENSOR_CORE_GEMM_SHARE:
        return _check("gpu_bound", "check_tensor_cores", False,
                      f"the 'before' capture runs only {before['fp32_ffma']:.0%} of its GEMM time on fp32 FFMA kernels: "
                      "capture it with TF32 off (torch.backends.cuda.matmul.fp32_precision = 'ieee') and no autocast.")
    without = capability.tensor_core_expectation(_profile(torch.cuda.is_available()))
    if without:
        return _check("gpu_bound", "check_tensor_cores", after["fp32_ffma"] <= 1 - TENSOR_CORE_GEMM_SHARE,
                      f"{without}, so the check asks only that your GEMMs left the fp32 FFMA kernels, and "
                      f"{after['fp32_ffma']:.0%} of your capture's GEMM time is still on them: run your step (autocast "
                      "on) inside the capture; metrics.gemm_kernels(trace) lists each GEMM and its math.")
    return _check("gpu_bound", "check_tensor_cores", after["tensor_core"] >= TENSOR_CORE_GEMM_SHARE,
                  f"only {after['tensor_core']:.0%} of your capture's GEMM time is on tensor-core kernels: run your "
                  "step (autocast on) inside the capture; metrics.gemm_kernels(trace) lists each GEMM and its math.")


def check_precision_speedup(fp32_ms: float, fast_ms: float, live: bool, fp32_trace: Trace | None = None) -> str:
    """Step time without a profiler, judged against what the device can show (:mod:`helpers.capability`): the
    probe's low-precision GEMM gain and the GEMM share of the fp32 step (``fp32_trace``) bound the step's gain;
    the step must reach :data:`~helpers.thresholds.PRECISION_GAIN_SHARE` of it. A device that cannot show the
    gain is said to, and the step is left to the structural checks. The message gives the figures."""
    from .. import capability

    name = "check_precision_speedup" + ("" if live else "[recorded]")
    if fp32_trace is None:
        return _check("gpu_bound", name, False, "pass the fp32 loop's capture as fp32_trace=...: the GEMM share of its "
                                                "step says how much of the step precision can shorten")
    if live:
        problem = own_capture_problem(fp32_trace)
        if problem:
            return _check("gpu_bound", name, False, problem)
    from ..thresholds import TENSOR_CORE_GEMM_SHARE

    ffma = m.gemm_math_shares(fp32_trace)["fp32_ffma"]
    if ffma < TENSOR_CORE_GEMM_SHARE:
        return _check("gpu_bound", name, False,
                      f"fp32_trace runs only {ffma:.0%} of its GEMM time on fp32 FFMA kernels: pass the capture of the "
                      "fp32 loop (TF32 off, no autocast), whose GEMM share says how much of the step precision can shorten")
    exp = capability.precision_expectation(_profile(live), capability.gemm_step_share(fp32_trace))
    ok, message = capability.precision_verdict(exp, float(fp32_ms), float(fast_ms))
    _check("gpu_bound", name, ok, message)
    return f"passed: {name}: {message}"


# --- 3. torch.compile -----------------------------------------------------------------------------
def check_graph_breaks(answer: dict, explain_output) -> str:
    """``{"graphs": n, "breaks": n}`` as torch._dynamo.explain counted them."""
    try:
        want = {"graphs": int(explain_output.graph_count), "breaks": int(explain_output.graph_break_count)}
    except (AttributeError, TypeError, ValueError):
        raise CheckFailed(f"explain_output is a {type(explain_output).__name__}: give what torch._dynamo.explain(model)(x) "
                          "returned (it has graph_count and graph_break_count)") from None
    got = {k: answer.get(k) for k in want}
    return _check("gpu_bound", "check_graph_breaks", got == want,
                  f"{got} is not what explain reported: read its graph_count and graph_break_count (a break "
                  "splits forward into one more graph).")


#: Forwards of the learner's model in which its statistic is compared with the course's.
STATISTIC_FORWARDS = 3


def check_break_fixed(model_cls: type, width: int = 64) -> str:
    """The learner's model class compiles to one graph with no break, computes what gpu_bound.Net does, and keeps
    its statistic (:func:`helpers.checks.behaviour.kept_statistic_problem`: the first block's output mean, a
    detached tensor each forward, as gpu_bound.Net with ``item_break=True`` records it as a float)."""
    import torch._dynamo

    from ..workloads import gpu_bound as gb
    from . import behaviour

    name = "check_break_fixed"
    if not isinstance(model_cls, type) or not issubclass(model_cls, torch.nn.Module):
        return _check("gpu_bound", name, False, "pass your model class itself: check_break_fixed(NoBreakNet)")
    if str(getattr(model_cls, "__module__", "")).startswith("helpers."):
        return _check("gpu_bound", name, False,
                      f"{model_cls.__module__}.{model_cls.__qualname__} is the course's own model, not yours: write "
                      "class NoBreakNet(gb.Net) in a cell, with a forward of your own")
    torch.manual_seed(0)
    ref = gb.Net(width, gb.DEPTH, item_break=True)
    torch.manual_seed(0)
    try:
        mine = run_learner(model_cls, width, gb.DEPTH, name=f"{model_cls.__name__}(width, depth)", returns=torch.nn.Module)
    except CheckFailed:
        _record("gpu_bound", name, False)
        raise
    x = torch.randn(4, width, generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    ex = torch._dynamo.explain(mine)(x)
    if ex.graph_break_count:
        return _check("gpu_bound", name, False,
                      f"explain still finds {plural(ex.graph_break_count, 'graph break')}: keep the statistic a tensor "
                      "(no .item(), float(), print of a tensor or branch on one inside forward).")
    xs = [torch.randn(4, width, generator=torch.Generator().manual_seed(1 + k)) for k in range(STATISTIC_FORWARDS)]
    with torch.no_grad():
        want = [ref(xk) for xk in xs]
        with behaviour.course_code_watch("forward without the break") as used:
            outs = [run_learner(mine, xk, name=f"{model_cls.__name__}.forward", returns=torch.Tensor, note=model_cls)
                    for xk in xs]
    borrowed = behaviour.course_code_problem(model_cls, "forward without the break", used)
    if borrowed:
        return _check("gpu_bound", name, False, borrowed[:1].upper() + borrowed[1:] + " (a forward of your own: "
                      "the blocks, the statistic kept as a tensor, the head).")
    if not all(o.shape == w.shape and torch.allclose(o, w, rtol=1e-5, atol=1e-6) for o, w in zip(outs, want)):
        return _check("gpu_bound", name, False,
                      "your model has no break but computes something else than gpu_bound.Net: keep the same "
                      "blocks and head, remove only the host read-back.")
    stats = list(ref.seen[-STATISTIC_FORWARDS:])
    try:  # gradients on, as in training: a statistic that keeps the graph shows here
        problem = behaviour.kept_statistic_problem(
            mine, stats, lambda: [run_learner(mine, xk, name=f"{model_cls.__name__}.forward", note=model_cls) for xk in xs],
            STATISTIC_FORWARDS)
    except CheckFailed:
        _record("gpu_bound", name, False)
        raise
    _check("gpu_bound", name, problem is None, (problem or "")[:1].upper() + (problem or "")[1:] + ".")
    return f"passed: {name} (one graph, the same output, the statistic kept as a tensor each forward)"


def check_compile_seconds(answer: float, cold_trace: Trace) -> str:
    """Seconds of forward compilation in the first-step capture (metrics.compile_time_us), within 10%."""
    want = m.compile_time_us(cold_trace) / 1e6
    return _check("gpu_bound", "check_compile_seconds", _close(float(answer), want, 0.10),
                  f"{answer} s is off: find the host ranges named 'entire_frame_compile' in the first step and add "
                  "their lengths (microseconds in the events table).")


# --- 4. Nsight Compute ----------------------------------------------------------------------------
#: The most bytes of an ncu CSV page or GPU-metrics summary read (the course's are tens of KB).
_NCU_TEXT_LIMIT = 64 << 20


def _text(path: str | Path, what: str) -> str:
    """A learner-named text file, through the one bounded reader that never blocks (a missing one in one line)."""
    from ..errors import TraceError
    from ..outputs import read_regular

    try:
        return read_regular(path, _NCU_TEXT_LIMIT, what).decode("utf-8", errors="replace")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file; check the path") from None
    except TypeError:
        raise TraceError(f"{path!r}: not a path; pass the {what}'s file name") from None


def ncu_long(path: str | Path):
    """An ncu details CSV in long form: ``kernel, section, metric, unit, value`` (value a float where numeric)
    plus the rules' ``rule``/``description`` rows (metric empty)."""
    import csv
    import io

    import pandas as pd

    from ..errors import TraceError

    text = _text(path, "ncu CSV")
    at = text.find('"ID"')
    if at < 0:
        raise TraceError(f"{path}: no ncu CSV header (\"ID\",...); save ncu --csv --page details output there")
    rows = []
    for r in csv.DictReader(io.StringIO(text[at:])):
        raw = (r.get("Metric Value") or "").replace(",", "")
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        rows.append({"kernel": r["Kernel Name"], "section": r["Section Name"], "metric": r["Metric Name"],
                     "unit": r["Metric Unit"], "value": value, "rule": r.get("Rule Name", ""),
                     "description": r.get("Rule Description", "")})
    return pd.DataFrame(rows)


def ncu_stalls(raw_path: str | Path):
    """Warp stall reasons of the first launch on an ncu raw page (``ncu --import R --csv --page raw``): cycles a
    warp spends stalled per issued instruction, by reason, largest first (a pandas Series)."""
    import csv
    import io

    import pandas as pd

    from ..errors import TraceError

    text = _text(raw_path, "ncu raw page")
    rows = [r for r in csv.reader(io.StringIO(text, newline="")) if r]
    at = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
    if at is None or len(rows) < at + 3:
        raise TraceError(f"{raw_path}: not an ncu raw page (ncu --import R --csv --page raw)")
    head, values = rows[at], rows[at + 2]  # the row after the header holds the units
    pre, post = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
    out = {h[len(pre):-len(post)]: float(v.replace(",", "")) for h, v in zip(head, values, strict=False)
           if h.startswith(pre) and h.endswith(post) and v.strip()}
    return pd.Series(out, name="cycles per issued instruction").sort_values(ascending=False)


def _metric(table, name: str) -> float:
    hit = table[table["metric"] == name]
    return float(hit["value"].iloc[0]) if len(hit) else float("nan")


def check_ncu_reading(answer: dict, gemm_table: pd.DataFrame, ln_table: pd.DataFrame) -> str:
    """``{"gemm": limiter, "layernorm": limiter, "gemm_busiest_memory": "L1"|"L2"|"DRAM"}`` from the two reports."""
    from ..thresholds import NCU_LATENCY_BOUND_PCT

    def limiter(t) -> str:
        c, mem = _metric(t, "Compute (SM) Throughput"), _metric(t, "Memory Throughput")
        return "latency" if max(c, mem) < NCU_LATENCY_BOUND_PCT else ("compute" if c >= mem else "memory")

    levels = {"L1": _metric(gemm_table, "L1/TEX Cache Throughput"), "L2": _metric(gemm_table, "L2 Cache Throughput"),
              "DRAM": _metric(gemm_table, "DRAM Throughput")}
    want = {"gemm": limiter(gemm_table), "layernorm": limiter(ln_table), "gemm_busiest_memory": max(levels, key=levels.get)}
    wrong = [k for k in want if str(answer.get(k, "")).strip() != want[k]]
    hints = {"gemm": "compare Compute (SM) Throughput with Memory Throughput in the GEMM's speed of light",
             "layernorm": f"are both of the LayerNorm's throughputs near peak, or both under {NCU_LATENCY_BOUND_PCT:.0f}%?",
             "gemm_busiest_memory": "Memory Throughput is the busiest memory unit; read L1/TEX, L2 and DRAM Throughput apart"}
    return _check("gpu_bound", "check_ncu_reading", not wrong,
                  "not what the reports say for " + "; ".join(f"{k} ({hints[k]})" for k in wrong))


def check_clock_ratio(answer: float, base_table: pd.DataFrame, free_table: pd.DataFrame) -> str:
    """The GEMM's ncu duration at ncu's locked base clock over its duration with --clock-control none (5%)."""
    want = _metric(base_table, "Duration") / _metric(free_table, "Duration")
    return _check("gpu_bound", "check_clock_ratio", _close(float(answer), want, 0.05),
                  f"{answer} is off: divide the Duration of the default run by that of the --clock-control none run "
                  "(same unit in both), and compare their SM Frequency.")


# --- 5. memory ------------------------------------------------------------------------------------
def saved_tensor_bytes(fn: Callable[[], torch.Tensor]) -> int:
    """Bytes of the tensors autograd saves for backward while ``fn()`` runs forward (saved-tensor hooks;
    a checkpointed region saves only its inputs). Device independent: the same count on CPU and GPU."""
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def check_activation_saving(forward_fn: Callable, width: int = 128, batch: int = 256) -> str:
    """The learner's ``forward_fn(model, x)`` (checkpointed) keeps at most half the memory of a plain forward alive
    for backward, counted as memory (:func:`helpers.checks.behaviour.kept_for_backward`: a saved-tensor hook that
    stores the activations elsewhere, save_on_cpu's host copies included, does not lower it), and gives the same
    output and gradients."""
    from . import behaviour

    with behaviour._threads_kept(1):  # small CPU runs: one thread is faster on a busy machine, and adds in one order
        return _activation_saving(forward_fn, width, batch)


def _activation_saving(forward_fn: Callable, width: int, batch: int) -> str:
    from ..thresholds import CHECKPOINT_SAVED_SHARE
    from ..workloads import gpu_bound as gb
    from . import behaviour

    torch.manual_seed(0)
    model = gb.Net(width, gb.DEPTH).train()
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(2), requires_grad=False)
    params = tuple(model.parameters())
    plain, _, out_ref = behaviour.kept_for_backward(lambda: model(x), (x, *params))
    out_ref.square().mean().backward()
    grads_ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    try:  # the dispatch mode and the saved-tensor hooks are per thread: set inside the learner's guarded call
        with behaviour.course_code_watch("checkpointed forward") as used:
            mine, saved, _ = run_learner(lambda: behaviour.kept_for_backward(lambda: forward_fn(model, x), (x, *params)),
                                         name="your forward_fn", note=forward_fn)
            out = run_learner(forward_fn, model, x, name="your forward_fn", returns=torch.Tensor)
    except CheckFailed:
        _record("gpu_bound", "check_activation_saving", False)
        raise
    borrowed = behaviour.course_code_problem(forward_fn, "checkpointed forward", used)
    if borrowed:
        return _check("gpu_bound", "check_activation_saving", False, borrowed[:1].upper() + borrowed[1:]
                      + " (switching on the course's Net(ckpt=True) is its checkpointing, not yours): call "
                      "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) over model.blocks yourself.")
    if out.shape != out_ref.shape or not out.requires_grad:
        return _check("gpu_bound", "check_activation_saving", False,
                      f"your forward returns a tensor of shape {tuple(out.shape)}"
                      f"{'' if out.requires_grad else ' that autograd does not track'}; model(x) returns "
                      f"{tuple(out_ref.shape)}: return the model's output, computed with gradients on")
    out.square().mean().backward()
    same = torch.allclose(out, out_ref, rtol=1e-5, atol=1e-6) and all(
        p.grad is not None and torch.allclose(p.grad, g, rtol=1e-4, atol=1e-6) for p, g in zip(model.parameters(), grads_ref, strict=True))
    if not same:
        return _check("gpu_bound", "check_activation_saving", False,
                      "your forward gives other outputs or gradients than model(x): checkpoint the same blocks in the "
                      "same order (torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)), then the head.")
    problem = behaviour.activation_saving_problem(mine, saved, plain, CHECKPOINT_SAVED_SHARE)
    _check("gpu_bound", "check_activation_saving", problem is None, (problem or "")[:1].upper() + (problem or "")[1:] + ".")
    return (f"passed: check_activation_saving (your forward keeps {mine / 2**20:.1f} MiB for backward against "
            f"{plain / 2**20:.1f} MiB plain)")


def check_alloc_churn(answer: dict, trace: Trace) -> str:
    """``{"cudaMalloc": per step, "cudaFree": per step}`` read from a capture (10%)."""
    want = m.api_calls_per_step(trace)
    ok = all(_close(float(answer.get(k, float("nan"))), v, 0.10, 0.5) for k, v in want.items())
    return _check("gpu_bound", "check_alloc_churn", ok,
                  f"{answer} is off: count the runtime events named cudaMalloc and cudaFree and divide by the "
                  "number of profiled steps (len(trace.steps)).")


# --- 6. GPU metrics -------------------------------------------------------------------------------
def gpu_metrics(path: str | Path) -> dict[str, float]:
    """The per-metric means of a recorded nsys --gpu-metrics-devices summary (data/nsight/*.gpumetrics.json)."""
    from ..errors import TraceError
    from ..outputs import read_state_json

    try:  # bounded and never blocking; too deep a nesting is one line too
        doc = read_state_json(path, _NCU_TEXT_LIMIT, "GPU-metrics summary")
        return {str(k): float(v) for k, v in dict(doc["metrics"]).items()}
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file; check the path") from None
    except (ValueError, TypeError, KeyError, AttributeError):  # JSON that is not a --gpu-metrics summary
        raise TraceError(f"{path}: not a GPU-metrics summary (a JSON object whose 'metrics' maps names to numbers, "
                         "as data/nsight/*.gpumetrics.json)") from None


def check_gpu_metrics_reading(answer: dict, fp32: dict, bf16: dict) -> str:
    """``{"busier": "fp32"|"bf16", "tensor_active": {"fp32": %, "bf16": %}}``: the run whose GPU is busier
    (GR Active) and each run's Tensor Active (1 point)."""
    key = "Tensor Active [Throughput %]"
    busier = "fp32" if fp32["GR Active [Throughput %]"] >= bf16["GR Active [Throughput %]"] else "bf16"
    ta = answer.get("tensor_active", {})
    ok = answer.get("busier") == busier and all(
        _close(float(ta.get(k, float("nan"))), v[key], 0.0, 1.0) for k, v in (("fp32", fp32), ("bf16", bf16)))
    return _check("gpu_bound", "check_gpu_metrics_reading", ok,
                  "not what the summaries say: 'GR Active' is the share of time the GPU has work at all; "
                  "'Tensor Active' the share of cycles its tensor cores compute. Read both for both runs.")
