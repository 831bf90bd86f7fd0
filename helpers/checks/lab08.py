"""Lab 08: when the GPU is the bottleneck (precision, torch.compile, Nsight Compute, memory, GPU metrics)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import torch

from .. import metrics as m
from ..model import Trace
from ._core import NUMBER, CheckFailed, _check, _close, _record, learner_trace_problem, own_capture_problem, run_learner

__all__ = [
    "check_gemm_reading", "check_same_training", "check_tensor_cores", "check_precision_speedup",
    "check_graph_breaks", "check_break_fixed", "check_compile_seconds", "check_ncu_reading", "check_clock_ratio",
    "check_activation_saving", "check_alloc_churn", "check_gpu_metrics_reading", "saved_tensor_bytes",
    "ncu_long", "ncu_stalls", "gpu_metrics",
]

#: Lab 08's own work: what the learner wrote and ran (the precision step, the fixed graph break, the
#: checkpointed forward) on both tracks, plus the tensor-core kernels of their own capture on a GPU.
CREDIT: dict[str, dict[str, tuple[str, ...]]] = {
    "gpu_bound": {
        "gpu": ("check_same_training", "check_tensor_cores", "check_break_fixed", "check_activation_saving"),
        "cpu": ("check_same_training", "check_break_fixed", "check_activation_saving"),
    },
}


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
class _ScalerWatch:
    """While active, counts the loss scalings of every ``torch.amp.GradScaler`` and notes each ``update()`` that
    lowered the scale: what a scaler does after gradients that overflowed, the one reason it skips a step."""

    def __init__(self) -> None:
        self.scaled = 0
        self.lowered = 0

    def __enter__(self) -> _ScalerWatch:
        cls = torch.amp.GradScaler
        self._originals = scale, update = cls.scale, cls.update
        watch = self

        def counting_scale(self, outputs):  # noqa: ANN001, ANN202 - GradScaler.scale's own signature
            watch.scaled += 1
            return scale(self, outputs)

        def watching_update(self, new_scale=None):  # noqa: ANN001, ANN202 - GradScaler.update's own signature
            before = self.get_scale() if self.is_enabled() else None
            update(self, new_scale)
            if before is not None and self.get_scale() < before:
                watch.lowered += 1

        cls.scale, cls.update = counting_scale, watching_update
        return self

    def __exit__(self, *exc: object) -> None:
        torch.amp.GradScaler.scale, torch.amp.GradScaler.update = self._originals


def _forward_dtypes(step_fn: Callable, model: torch.nn.Module, opt, x, y) -> tuple[set[torch.dtype], int]:
    """The dtypes the model's Linear layers produced during one call of ``step_fn``, and how many times the
    call scaled a loss with a ``torch.amp.GradScaler`` (fp16 needs one)."""
    seen: set[torch.dtype] = set()
    hooks = [mod.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
             for mod in model.modules() if isinstance(mod, torch.nn.Linear)]
    try:
        with _ScalerWatch() as watch:
            step_fn(model, opt, x, y)
    finally:
        for h in hooks:
            h.remove()
    return seen, watch.scaled


_REFERENCE: dict[tuple[str, int, tuple[int, ...]], tuple[list[float], torch.Tensor]] = {}


def _fp32_reference(device: torch.device, steps: int, skipped: tuple[int, ...] = ()) -> tuple[list[float], torch.Tensor]:
    """The fp32 run from seed 0 (TF32 off), computed once per device, length and set of skipped steps: it never
    changes. ``skipped``: the steps whose optimizer step is left out, as a GradScaler leaves out a step whose
    fp16 gradients overflowed, so that an fp16 step is compared with the same training, step for step."""
    from ..capability import set_tf32, tf32_enabled
    from ..workloads import gpu_bound as gb

    key = (str(device), steps, skipped)
    if key not in _REFERENCE:
        calls = iter(range(steps))

        def step(model, opt, x, y):  # noqa: ANN001, ANN202 - gb.run_steps' step signature
            if next(calls) in skipped:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                return loss.detach()
            return gb.train_step(model, opt, x, y)

        was = tf32_enabled()
        set_tf32(False)  # the reference is true fp32
        try:
            _REFERENCE[key] = gb.run_steps(step, device, steps=steps)
        finally:
            set_tf32(was)
    return _REFERENCE[key]


def _learner_run(step_fn: Callable, device: torch.device, steps: int) -> tuple[list[float], torch.Tensor, tuple[int, ...], tuple[int, ...]]:
    """``gb.run_steps`` of the learner's step, also noting the steps that changed no parameter (Adam moves every
    parameter whose gradient is not zero, and the head's bias always has one) and, of those, the ones a GradScaler
    skipped: it lowered its scale in that step, having found gradients that overflowed."""
    from ..workloads import gpu_bound as gb

    skipped: list[int] = []
    unexplained: list[int] = []
    calls = iter(range(steps))

    def watched(model, opt, x, y):  # noqa: ANN001, ANN202 - gb.run_steps' step signature
        i = next(calls)
        before = model.head.bias.detach().clone()
        lowered = watch.lowered
        loss = step_fn(model, opt, x, y)
        if torch.equal(before, model.head.bias.detach()):
            (skipped if watch.lowered > lowered else unexplained).append(i)
        return loss

    with _ScalerWatch() as watch:
        losses, update = gb.run_steps(watched, device, steps=steps)
    return losses, update, tuple(skipped), tuple(unexplained)


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

    return step


def check_same_training(step_fn: Callable, device: torch.device | str | None = None, steps: int = 4) -> str:
    """The learner's ``step_fn(model, opt, x, y) -> loss`` trains the same model as the fp32 step: from
    seed 0 its losses stay within the bf16 tolerance of the fp32 losses, its parameters change, and its
    matrix products ran in bf16 or fp16."""
    try:
        return _same_training(_guarded_step(step_fn), device, steps)
    except CheckFailed:
        _record("gpu_bound", "check_same_training", False)
        raise


def _same_training(step_fn: Callable, device: torch.device | str | None, steps: int) -> str:
    from ..thresholds import LOWP_LOSS_RTOL, LOWP_UPDATE_RTOL
    from ..workloads import gpu_bound as gb

    device = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, opt, xs, ys = gb.setup(device)
    dtypes, scaled = _forward_dtypes(step_fn, model, opt, xs[0], ys[0])  # the learner's step first: its failure is said at once
    if not dtypes & {torch.bfloat16, torch.float16}:
        return _check("gpu_bound", "check_same_training", False,
                      f"your step's Linear layers produced {sorted(map(str, dtypes))}: the matrix products still run in "
                      "fp32. Put forward and the loss inside torch.autocast(device_type, dtype=...) with bf16 (or fp16 "
                      "and a GradScaler on a GPU without native bf16).")
    if torch.float16 in dtypes and not scaled:
        return _check("gpu_bound", "check_same_training", False,
                      "your step autocasts to fp16 without a GradScaler: fp16's range ends at 65504 and its smallest "
                      "normal number is 6e-5, so small gradients become zero. Scale the loss with a "
                      "torch.amp.GradScaler (scaler.scale(loss).backward(), scaler.step(opt), scaler.update()).")
    got, update, skipped, unexplained = _learner_run(step_fn, device, steps)
    if len(skipped) + len(unexplained) == steps:
        return _check("gpu_bound", "check_same_training", False,
                      f"{steps} calls of your step left every parameter as it was: run backward and opt.step()"
                      + (" (scaler.step(opt) with a GradScaler)." if scaled else "."))
    if unexplained:
        return _check("gpu_bound", "check_same_training", False,
                      f"your step left the parameters unchanged at step(s) {list(unexplained)} of {steps}: call "
                      "opt.step() every step (only a GradScaler may skip a step, when fp16 gradients overflowed; "
                      "it then lowers its scale, and yours did not).")
    ref, ref_update = _fp32_reference(device, steps, skipped)
    same_steps = f" (with the same step(s) {list(skipped)} skipped, as your GradScaler did)" if skipped else ""
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref, strict=True))
    if not (all(map(math.isfinite, got)) and worst <= LOWP_LOSS_RTOL):
        return _check("gpu_bound", "check_same_training", False,
                      f"your losses {[round(v, 4) for v in got]} drift from fp32's {[round(v, 4) for v in ref]}{same_steps} "
                      f"by up to {worst:.1%} (the tolerance is {LOWP_LOSS_RTOL:.0%}): only the matmuls' precision may change.")
    off = float((update - ref_update).norm() / ref_update.norm())
    return _check("gpu_bound", "check_same_training", off <= LOWP_UPDATE_RTOL,
                  f"after {steps} steps your parameters moved {off:.0%} away from where fp32's did{same_steps} (the "
                  f"tolerance is {LOWP_UPDATE_RTOL:.0%}): keep the same optimizer and learning rate, one opt.step() and "
                  "one zero_grad a step (fp16 needs a GradScaler).")


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
    want = {"graphs": int(explain_output.graph_count), "breaks": int(explain_output.graph_break_count)}
    got = {k: answer.get(k) for k in want}
    return _check("gpu_bound", "check_graph_breaks", got == want,
                  f"{got} is not what explain reported: read its graph_count and graph_break_count (a break "
                  "splits forward into one more graph).")


def check_break_fixed(model_cls: type, width: int = 64) -> str:
    """The learner's model class compiles to one graph with no break and computes what gpu_bound.Net does."""
    import torch._dynamo

    from ..workloads import gpu_bound as gb

    torch.manual_seed(0)
    ref = gb.Net(width, gb.DEPTH)
    torch.manual_seed(0)
    mine = model_cls(width, gb.DEPTH)
    x = torch.randn(4, width, generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    ex = torch._dynamo.explain(mine)(x)
    if ex.graph_break_count:
        return _check("gpu_bound", "check_break_fixed", False,
                      f"explain still finds {ex.graph_break_count} graph break(s): keep the statistic a tensor "
                      "(no .item(), float(), print of a tensor or branch on one inside forward).")
    with torch.no_grad():
        same = torch.allclose(mine(x), ref(x), rtol=1e-5, atol=1e-6)
    return _check("gpu_bound", "check_break_fixed", same,
                  "your model has no break but computes something else than gpu_bound.Net: keep the same "
                  "blocks and head, remove only the host read-back.")


def check_compile_seconds(answer: float, cold_trace: Trace) -> str:
    """Seconds of forward compilation in the first-step capture (metrics.compile_time_us), within 10%."""
    want = m.compile_time_us(cold_trace) / 1e6
    return _check("gpu_bound", "check_compile_seconds", _close(float(answer), want, 0.10),
                  f"{answer} s is off: find the host ranges named 'entire_frame_compile' in the first step and add "
                  "their lengths (microseconds in the events table).")


# --- 4. Nsight Compute ----------------------------------------------------------------------------
def ncu_long(path: str | Path):
    """An ncu details CSV in long form: ``kernel, section, metric, unit, value`` (value a float where numeric)
    plus the rules' ``rule``/``description`` rows (metric empty)."""
    import csv
    import io

    import pandas as pd

    from ..errors import TraceError

    text = Path(path).read_text(errors="replace")
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

    import pandas as pd

    from ..errors import TraceError

    with open(raw_path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
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


def check_ncu_reading(answer: dict, gemm_table, ln_table) -> str:
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


def check_clock_ratio(answer: float, base_table, free_table) -> str:
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
    """The learner's ``forward_fn(model, x)`` (checkpointed) saves at most half the activation bytes of a
    plain forward, and gives the same output and gradients."""
    from ..thresholds import CHECKPOINT_SAVED_SHARE
    from ..workloads import gpu_bound as gb

    torch.manual_seed(0)
    model = gb.Net(width, gb.DEPTH).train()
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(2), requires_grad=False)
    plain = saved_tensor_bytes(lambda: model(x))
    out_ref = model(x)
    out_ref.square().mean().backward()
    grads_ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    try:  # the saved-tensor hooks are per thread: they are set inside the learner's guarded call
        mine_bytes = run_learner(lambda: saved_tensor_bytes(lambda: forward_fn(model, x)), name="your forward_fn",
                                 note=forward_fn)
        out = run_learner(forward_fn, model, x, name="your forward_fn", returns=torch.Tensor)
    except CheckFailed:
        _record("gpu_bound", "check_activation_saving", False)
        raise
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
    return _check("gpu_bound", "check_activation_saving", mine_bytes <= CHECKPOINT_SAVED_SHARE * plain,
                  f"your forward saves {mine_bytes / 2**20:.1f} MiB for backward against {plain / 2**20:.1f} MiB plain: "
                  "wrap each block (not only one) in checkpoint so only block inputs are kept.")


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
    return dict(json.loads(Path(path).read_text())["metrics"])


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
