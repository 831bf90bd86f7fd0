"""Lab 09: how fast could it go? FLOPs by hand, the roofline, MFU, tensor-core shapes, attention.

The learner's functions (the matmul FLOPs of a step, a roofline point, a padded classifier head, attention
through ``scaled_dot_product_attention``) are run on cases the learner has not seen and compared with a
reference here, exactly where arithmetic is exact and within a stated tolerance where it is not. Readings
of a trace (the kernels' achieved rates, the head's share, the attention's memory) are recomputed from the
trace the learner read; those of a recording the course shipped earn no credit.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .. import metrics as m
from .. import thresholds as th
from ..model import Trace
from ..render import plain_kernel_name
from ..sources import getsource
from . import _core
from . import behaviour as _behaviour
from ._core import NUMBER, CheckFailed, _check, _close, _record, own_capture_problem, run_learner, shipped, unit_slip

run_learner = _behaviour.watching(run_learner, "function (lab 9)")  # the course's answers refused wherever they run

__all__ = [
    "check_matmul_flops", "check_roofline_point", "check_kernel_points", "check_mfu", "check_shape_miss",
    "check_padded_head", "check_attention_reading", "check_sdpa_attention",
]

#: Lab 09's own work: the functions the learner wrote (run on cases they have not seen), the padded head and the
#: attention they wrote, and their reading of the attention's memory from their own capture; on a GPU also the
#: roofline points of their own kernels.
# The credit this lab's exercises earn is declared in helpers.checks.exercise.EXERCISES.

ITEM = "kernels"


def _fail(name: str, message: str) -> None:
    _record(ITEM, name, False)
    raise CheckFailed(message)


def _course_names(fn: Callable, names: tuple[str, ...]) -> list[str]:
    """Which of the course's own functions ``names`` the learner's function refers to (its syntax tree: comments
    and strings do not count)."""
    try:
        tree = ast.parse(textwrap.dedent(getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return []
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return sorted(used & set(names))


def _learners(fn: Any, what: str, name: str) -> None:
    """Refuse a function that is not the learner's: not callable, the course's own code, or a wrapper around this
    module's references."""
    if not callable(fn):
        _fail(name, f"pass your function itself ({what}), not a {type(fn).__name__}")
    if str(getattr(fn, "__module__", "") or "").startswith("helpers."):
        _fail(name, f"{getattr(fn, '__name__', fn)} is the course's own code, not yours: write {what} in a cell")
    ours = tuple(n for n, obj in globals().items() if n.startswith("_") and inspect.isfunction(obj))
    borrowed = _course_names(fn, ours)
    if borrowed:
        _fail(name, f"your function calls the check's own {', '.join(borrowed)}: write {what} yourself")


# --- 1. FLOPs by hand -----------------------------------------------------------------------------------
def _reference_matmul_flops(model: nn.Module, x: torch.Tensor) -> int:
    """Three products a Linear call (forward, the input's gradient, the weight's gradient), 2 * tokens * in * out
    FLOPs each, for every call of every nn.Linear in one forward of ``model`` on ``x``."""
    total = 0

    def hook(mod: nn.Module, args: tuple, _out: Any) -> None:
        nonlocal total
        inp = args[0]
        tokens = inp.numel() // mod.in_features
        total += 3 * 2 * tokens * mod.in_features * mod.out_features

    handles = [mod.register_forward_hook(hook) for mod in model.modules() if isinstance(mod, nn.Linear)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return total


class _Tied(nn.Module):
    """One Linear called twice: each call is a product of its own."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.shared = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.shared(torch.relu(self.shared(self.norm(x)))))


class _Sequence(nn.Module):
    """Tokens in a (batch, sequence, width) input: every position goes through the Linear."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


def _flop_cases() -> list[tuple[str, nn.Module, torch.Tensor]]:
    """Models the learner has not seen, built on PyTorch's meta device (shapes only: big models cost nothing)."""
    from ..workloads import gpu_bound as gb

    meta = torch.device("meta")
    with meta:
        return [
            ("an MLP of width 96, depth 3, batch 40", gb.Net(96, 3), torch.empty(40, 96)),
            ("the lab's full-size model (width 4096, depth 6, batch 2048)", gb.Net(gb.WIDTH, gb.DEPTH),
             torch.empty(gb.BATCH, gb.WIDTH)),
            ("a (batch 4, sequence 300, width 64) input through a 64 -> 256 -> 64 block", _Sequence(64, 256),
             torch.empty(4, 300, 64)),
            ("a Linear called twice in one forward, then a head without bias", _Tied(48), torch.empty(10, 48)),
        ]


def _autograd_flops(model: nn.Module, x: torch.Tensor) -> int:
    """The matrix FLOPs autograd really runs for one forward and backward (torch's FlopCounterMode)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    for p in model.parameters():
        p.grad = None
    return int(counter.get_total_flops())


def check_matmul_flops(fn: Callable[[nn.Module, torch.Tensor], float]) -> str:
    """The learner's ``fn(model, x)``: the matmul FLOPs of one training step, exactly, on four models of other
    shapes (one with a sequence dimension, one with a Linear called twice)."""
    name = "check_matmul_flops"
    _learners(fn, "matmul_flops(model, x)", name)
    for label, model, x in _flop_cases():
        want = _reference_matmul_flops(model, x)
        got = run_learner(fn, model, x, name="your matmul_flops", returns=NUMBER)
        if not _close(float(got), float(want), 1e-9):
            hint = ""
            if _close(float(got), want / 3, 1e-9):
                hint = " That is forward only: backward makes two more products of the same size."
            elif _close(float(got), want / 2, 1e-9):
                hint = " Count 2 FLOPs per multiply-add (a multiply and an add)."
            elif x.dim() == 3 and _close(float(got), want / x.shape[1], 1e-9):
                hint = " Every position of the sequence goes through the Linear: tokens = x.numel() // in_features."
            elif _close(float(got), float(_autograd_flops(model, x)), 1e-9):
                hint = (" That is what autograd runs (FlopCounterMode's count): it skips the first layer's input gradient. "
                        "The convention counts three products for every Linear call.")
            elif isinstance(model, _Tied):
                hint = (" A Linear called twice makes its products twice: count the calls in a forward (forward hooks), "
                        "not the modules.")
            return _check(ITEM, name, False,
                          f"on {label}: your function gives {float(got):,.0f} FLOPs, not {want:,.0f}.{hint}"
                          f"{unit_slip(got, want)}")
    return _check(ITEM, name, True, "")


# --- 2. the roofline ------------------------------------------------------------------------------------
def _reference_point(flops: float, bytes_moved: float, seconds: float, peak_flops: float, peak_bw: float) -> dict:
    intensity = flops / bytes_moved
    attainable = min(peak_flops, intensity * peak_bw)
    achieved = flops / seconds
    return {"intensity": intensity, "achieved_flops": achieved, "achieved_bytes_per_s": bytes_moved / seconds,
            "attainable_flops": attainable, "bound": "compute" if intensity >= peak_flops / peak_bw else "memory",
            "share_of_roof": achieved / attainable}


#: Cases for the roofline function: a compute-bound GEMM, a memory-bound copy, a point exactly at the ridge,
#: a kernel slower than either roof would make it.
_POINT_CASES = (
    ("a 4096^3 bf16 GEMM in 0.16 ms on an A100", 2 * 4096**3, 3 * 4096**2 * 2, 0.16e-3, 312e12, 2.039e12),
    ("an fp32 add of two 64M-element tensors in 0.25 ms on an H100", 64 * 2**20, 3 * 256 * 2**20, 0.25e-3, 989.5e12, 3.35e12),
    ("a kernel exactly at the ridge", 6e9, 1e9, 1e-3, 60e12, 10e12),
    ("a slow elementwise kernel on a T4", 1e8, 8e8, 5e-3, 65e12, 0.32e12),
)


def _slip(got: float, want: float) -> str:
    """:func:`unit_slip`, and a rate given in tera or giga per second."""
    for factor, words in ((1e12, "tera"), (1e9, "giga")):
        if _close(got * factor, want, 1e-3):
            return f" (your figure is in {words}; return rates per second: FLOP/s and bytes/s)"
    return unit_slip(got, want)


def check_roofline_point(fn: Callable[..., dict]) -> str:
    """The learner's ``fn(flops, bytes_moved, seconds, peak_flops, peak_bytes_per_s)`` returns the point's
    intensity, achieved FLOP/s and bytes/s, attainable FLOP/s, bound and share of the roof (1e-6)."""
    name = "check_roofline_point"
    _learners(fn, "roofline_point(...)", name)
    keys = ("intensity", "achieved_flops", "achieved_bytes_per_s", "attainable_flops", "bound", "share_of_roof")
    for label, *args in _POINT_CASES:
        want = _reference_point(*args)
        got = run_learner(fn, *args, name="your roofline_point", returns=dict)
        missing = [k for k in keys if k not in got]
        if missing:
            return _check(ITEM, name, False, f"your roofline_point returns no {', '.join(missing)}: return a dict with "
                          f"{', '.join(keys)}")
        for k in keys:
            if k == "bound":
                if got[k] != want[k]:
                    ridge = args[3] / args[4]
                    return _check(ITEM, name, False,
                                  f"on {label}: bound={got[k]!r}, but its intensity {want['intensity']:.3g} FLOP/byte is "
                                  f"{'at or above' if want[k] == 'compute' else 'below'} the ridge, peak FLOP/s over "
                                  f"bandwidth = {ridge:.3g} FLOP/byte, so it is {want[k]!r}-bound")
                continue
            try:
                value = float(got[k])
            except (TypeError, ValueError):
                value = float("nan")
            if not _close(value, float(want[k]), 1e-6, 1e-12):
                hints = {"intensity": "FLOPs over bytes moved",
                         "achieved_flops": "FLOPs over seconds",
                         "achieved_bytes_per_s": "bytes over seconds",
                         "attainable_flops": "the lower of the compute roof and intensity x bandwidth",
                         "share_of_roof": "achieved FLOP/s over attainable FLOP/s"}
                return _check(ITEM, name, False, f"on {label}: {k}={got[k]!r}, expected {want[k]:.6g} ({hints[k]})"
                              f"{_slip(value, want[k])}")
    return _check(ITEM, name, True, "")


# --- 3. the learner's own kernels on the roofline -------------------------------------------------------
def _gemm_bytes(m_: int, n: int, k: int, element_bytes: int) -> int:
    """The least memory traffic of an (m x k) @ (k x n) product: each operand read once, the result written once."""
    return (m_ * k + k * n + m_ * n) * element_bytes


#: FLOPs the course counts per element of GELU (erf's polynomial and the products around it: about 10). The exact
#: count moves the point a little; it stays far left of any GPU's ridge.
GELU_FLOPS_PER_ELEMENT = 10


def _gelu_flops(elements: int) -> int:
    return GELU_FLOPS_PER_ELEMENT * elements


def _mean_us(trace: Trace, pick: Callable[[str], bool]) -> tuple[str, float]:
    ev = trace.events
    k = ev[ev["kind"] == "kernel"]
    by = k.groupby("name", observed=True)["dur_us"].agg(["sum", "mean"])
    by = by[[pick(str(n)) for n in by.index]]
    if by.empty:
        return "", float("nan")
    top = by["sum"].idxmax()
    return str(top), float(by.loc[top, "mean"])


def _kernel_points(trace: Trace, peaks: Any) -> dict:
    from ..workloads import gpu_bound as gb

    gemm_name, gemm_us = _mean_us(trace, lambda n: m.gemm_math(n) is not None)
    gelu_name, gelu_us = _mean_us(trace, lambda n: "gelu" in n.lower() and "backward" not in n.lower())
    elements = gb.BATCH * gb.WIDTH
    gemm = _reference_point(2 * gb.BATCH * gb.WIDTH * gb.WIDTH, _gemm_bytes(gb.BATCH, gb.WIDTH, gb.WIDTH, 2), gemm_us / 1e6,
                            peaks.tensor_flops, peaks.bytes_per_s)
    gelu = _reference_point(_gelu_flops(elements), elements * 4 * 2, gelu_us / 1e6, peaks.tensor_flops, peaks.bytes_per_s)
    return {"gemm": gemm, "gelu": gelu, "names": (gemm_name, gelu_name), "us": (gemm_us, gelu_us)}


def check_kernel_points(points: dict, trace: Trace, peaks: Any) -> str:
    """``{"gemm": roofline point, "gelu": roofline point}`` of the bf16 step's longest GEMM kernel and its GELU
    forward kernel, from their mean durations in ``trace`` against ``peaks`` (:class:`helpers.roofline.Peaks`).
    A recording the course shipped is checked but earns nothing; the learner's own capture earns the item."""
    name = "check_kernel_points"
    recorded = shipped(trace)
    if not recorded:
        problem = own_capture_problem(trace)
        if problem:
            _fail(name, problem)
    from ..roofline import RECORDED, device_peaks

    if peaks is None:
        _fail(name, "no peaks for this device: pass helpers.roofline.Peaks(...) with its datasheet figures")
    if recorded and peaks != RECORDED:
        _fail(name, f"the recording was made on an NVIDIA H200: judge it against helpers.roofline.RECORDED, not {peaks.name}")
    if not recorded and torch.cuda.is_available():
        here = device_peaks(torch.cuda.get_device_name(0))
        if here is not None and peaks != here:
            _fail(name, f"your capture ran on {torch.cuda.get_device_name(0)}: judge it against "
                  f"helpers.roofline.device_peaks(torch.cuda.get_device_name(0)) ({here.name}), not {peaks.name}")
    if m.gemm_math_shares(trace)["tensor_core"] < th.TENSOR_CORE_GEMM_SHARE:
        _fail(name, "this trace's matrix products do not run on tensor cores: capture the bf16 step "
              "(helpers.workloads.gpu_bound.make_step('bf16', device)), as section 1 does")
    want = _kernel_points(trace, peaks)
    if not all(math.isfinite(u) for u in want["us"]):
        _fail(name, "this trace has no GEMM or no GELU forward kernel: capture the bf16 step of helpers.workloads.gpu_bound")
    check_name = name + ("[recorded]" if recorded else "")
    if not isinstance(points, dict):
        return _check(ITEM, check_name, False, "points must be a dict {'gemm': ..., 'gelu': ...} of roofline_point results")
    for which, (kernel, us) in zip(("gemm", "gelu"), zip(want["names"], want["us"])):
        got = points.get(which)
        if not isinstance(got, dict):
            return _check(ITEM, check_name, False, f"points[{which!r}] must be the dict your roofline_point returned")
        for key in ("achieved_flops", "intensity", "share_of_roof"):
            try:
                value = float(got.get(key, float("nan")))
            except (TypeError, ValueError):
                value = float("nan")
            if not _close(value, want[which][key], th.KERNEL_READING_RTOL):
                what = ("2 x 2048 x 4096 x 4096 FLOPs and each bf16 operand once (2 bytes an element)" if which == "gemm"
                        else f"{GELU_FLOPS_PER_ELEMENT} FLOPs and 8 bytes (fp32 in, fp32 out) per element of 2048 x 4096")
                side = "above" if value > want[which][key] else "below" if value < want[which][key] else "off from"
                return _check(ITEM, check_name, False,  # never the trace's figure: it could be pasted
                              f"{which}: {key}={value:.4g} is {side} what the trace gives: use the mean duration of "
                              f"{kernel[:60]!r} ({us:.1f} us a launch; the GEMM with the most total time), {what}"
                              f"{_slip(value, want[which][key])}")
        if got.get("bound") != want[which]["bound"]:
            return _check(ITEM, check_name, False, f"{which}: bound={got.get('bound')!r}; its intensity says "
                          f"{want[which]['bound']!r}")
    out = _check(ITEM, check_name, True, "")
    return out + (f" ({_recorded_points_note()})" if recorded else "")


def _recorded_points_note() -> str:
    """What a pass on the shipped recording means for the self-check item, from the exercises' own declaration."""
    from .exercise import EXERCISES

    mine = [e for e in EXERCISES if e.function == "check_kernel_points"]
    elsewhere = [e.function for e in EXERCISES if e.item == ITEM and "cpu" in e.tracks and e.function != "check_kernel_points"]
    gpu_only = all(e.tracks == ("gpu",) for e in mine)
    return ("practice on the course's recording: your points are right, and a recording the course shipped earns no "
            "credit. These kernel points earn credit only from your "
            "own bf16 capture" + (", on a CUDA GPU (the GPU track): the CPU track cannot earn them and does not need "
                                  "them" if gpu_only else "")
            + f"; there the '{ITEM}' item comes from {', '.join(elsewhere)}")


def check_mfu(answer: dict, step_ms: dict, peaks: Any) -> str:
    """``{"bf16": MFU, "fp32": MFU}``: the full-size step's matmul FLOPs over its measured seconds over the bf16
    tensor-core peak (both against the same peak: what the device could do with this model), 2%."""
    from ..workloads import gpu_bound as gb

    name = "check_mfu"
    with torch.device("meta"):
        flops = _reference_matmul_flops(gb.Net(gb.WIDTH, gb.DEPTH), torch.empty(gb.BATCH, gb.WIDTH))
    if not isinstance(answer, dict):
        return _check(ITEM, name, False, "mfu must be a dict {'bf16': ..., 'fp32': ...}")
    try:
        step_s = {v: float(step_ms[v]) / 1e3 for v in ("bf16", "fp32")}
    except (KeyError, TypeError, ValueError):
        return _check(ITEM, name, False, "step_ms must be {'fp32': ms, 'bf16': ms}, the step times section 1 measured")
    for variant in ("bf16", "fp32"):
        want = flops / step_s[variant] / peaks.tensor_flops
        try:
            got = float(answer.get(variant, float("nan")))
        except (TypeError, ValueError):
            got = float("nan")
        if not _close(got, want, 0.02):
            against = ""
            if _close(got, flops / (float(step_ms[variant]) / 1e3) / peaks.flops("fp32"), 0.02):
                against = " You divided by the fp32 peak: MFU is against what the device could do, its bf16 tensor-core peak."
            return _check(ITEM, name, False, f"{variant}: {got:.4g} is {'above' if got > want else 'below'} the step's "
                          "MFU (not shown: it could be pasted): matmul FLOPs of a step "
                          f"({flops:.4g}) / step seconds ({float(step_ms[variant]) / 1e3:.4g}) / bf16 peak FLOP/s.{against}"
                          f"{unit_slip(got, want)}")
    return _check(ITEM, name, True, "")


# --- 4. shapes that miss the tensor cores ---------------------------------------------------------------
def _head_kernels(trace: Trace) -> tuple[list[str], float]:
    """The GEMM kernels launched once a step (the 4096 -> 10 head's three products, where the body's run once per
    layer a step) and their share of all kernel time."""
    ev = trace.events
    k = ev[ev["kind"] == "kernel"]
    by = k.groupby("name", observed=True)["dur_us"].agg(["count", "sum"])
    gemm = by[[m.gemm_math(str(n)) is not None for n in by.index]]
    most = float(gemm["count"].max()) if len(gemm) else 0.0
    head = gemm[gemm["count"] < most / 3]
    total = float(k["dur_us"].sum())
    return [str(n) for n in head.index], (float(head["sum"].sum()) / total if total > 0 else float("nan"))


def check_shape_miss(answer: dict, tf32_trace: Trace, bf16_trace: Trace) -> str:
    """``{"ffma_kernel": part of the name of the TF32 run's GEMM on FFMA pipes, "dim": the layer size that is no
    multiple of the alignment, "head_share": the head's GEMMs' share of the bf16 run's kernel time}`` (a reading of
    shipped recordings: checked, earns nothing)."""
    from ..workloads import gpu_bound as gb

    name = "check_shape_miss"
    if not isinstance(answer, dict):
        return _check(ITEM, name, False, "shape_miss must be a dict with ffma_kernel, dim and head_share")
    ffma = [n for n in m.gemm_kernels(tf32_trace)["name"] if m.gemm_math(n) == "fp32_ffma"]
    part = str(answer.get("ffma_kernel", "")).strip()
    # a piece copied from the raw name or from the table's shorter form of it (render.cut_name drops namespaces)
    if len(part) < 8 or not any(part in n or part in plain_kernel_name(n) for n in ffma):
        return _check(ITEM, name, False,
                      f"{part!r} is not (8 characters or more of) the name of a GEMM that ran on FFMA pipes in the TF32 run: "
                      "list metrics.gemm_kernels(tf32_trace) and look for sgemm/simt/ffma among tensor-core names")
    if answer.get("dim") != gb.CLASSES:
        return _check(ITEM, name, False,
                      f"dim={answer.get('dim')!r}: which size of the model is not a multiple of 4 (TF32: 16 bytes) or 8 "
                      "(bf16: 16 bytes)? Look at every Linear's in_features and out_features.")
    _, share = _head_kernels(bf16_trace)
    try:
        got = float(answer.get("head_share", float("nan")))
    except (TypeError, ValueError):
        got = float("nan")
    return _check(ITEM, name, _close(got, share, 0.10, 0.001),
                  f"head_share={got:.4g}, the trace gives {share:.4g}: sum the durations of the GEMM kernels launched once a "
                  "step (the head's three products) over all kernel time" + unit_slip(got, share))


def _logits_module(model: nn.Module, x: torch.Tensor) -> nn.Linear | None:
    """The Linear whose output the model's logits are made from (the last Linear called in forward)."""
    last: list[nn.Linear] = []
    handles = [mod.register_forward_hook(lambda mod, _a, _o: last.append(mod)) for mod in model.modules()
               if isinstance(mod, nn.Linear)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return last[-1] if last else None


def check_padded_head(fn: Callable[[nn.Module, int], nn.Module], multiple: int = 8) -> str:
    """The learner's ``fn(model, multiple)`` returns a model whose last Linear has a multiple of ``multiple`` outputs
    and which computes the same logits and trains the same (Adam, from one seed) as ``model``."""
    from ..workloads import gpu_bound as gb

    name = "check_padded_head"
    _learners(fn, "pad_head(model, multiple)", name)
    width, batch, steps = 32, 16, 3
    for classes in (gb.CLASSES, 13):  # the lab's 10, and a size the learner has not seen
        torch.manual_seed(0)
        ref = gb.Net(width, 2)
        if classes != gb.CLASSES:
            ref.head = nn.Linear(width, classes)
        torch.manual_seed(0)
        base = gb.Net(width, 2)
        if classes != gb.CLASSES:
            base.head = nn.Linear(width, classes)
        g = torch.Generator().manual_seed(1)
        xs = torch.randn(steps + 1, batch, width, generator=g)
        ys = torch.randint(0, classes, (steps + 1, batch), generator=g)
        mine = run_learner(fn, base, multiple, name="your pad_head", returns=nn.Module)
        head = _logits_module(mine, xs[0])
        if head is None or head.out_features % multiple:
            got = "no Linear" if head is None else f"{head.out_features} outputs"
            return _check(ITEM, name, False, f"the last Linear of your model has {got}; pad it to a multiple of {multiple} "
                          f"({-(-classes // multiple) * multiple} for {classes} classes)")
        with torch.no_grad():
            out, want = mine(xs[0]), ref(xs[0])
            head.weight[0] += 1.0  # the logits must be made by the padded Linear: nudge its first row ...
            nudged = mine(xs[0])
            head.weight[0] -= 1.0
        if tuple(out.shape) == tuple(want.shape) and torch.equal(nudged, out):
            return _check(ITEM, name, False, f"your model calls a Linear of {head.out_features} outputs but its logits do "
                          "not come from it: the padded Linear must replace the head, not sit beside it")
        if tuple(out.shape) != tuple(want.shape):
            return _check(ITEM, name, False, f"your model returns logits of shape {tuple(out.shape)}, the original "
                          f"{tuple(want.shape)}: slice the padded outputs back to the real classes in forward")
        if not torch.allclose(out, want, rtol=1e-5, atol=1e-6):
            return _check(ITEM, name, False, "your model's logits differ from the original's: copy the head's weight and "
                          "bias into the first rows of the padded Linear (zeros in the padding) and slice them back")
        opts = [torch.optim.Adam(p.parameters(), lr=gb.LR) for p in (mine, ref)]
        for i in range(steps):
            for model, opt in zip((mine, ref), opts):
                torch.nn.functional.cross_entropy(model(xs[i]), ys[i]).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            after, want_after = mine(xs[steps]), ref(xs[steps])
        if not torch.allclose(after, want_after, rtol=1e-4, atol=1e-5):
            return _check(ITEM, name, False,
                          f"after {steps} Adam steps your model's logits drifted from the original's (by up to "
                          f"{float((after - want_after).abs().max()):.2g}): the padded rows must stay out of the logits "
                          "(slice them away before the loss), so they get no gradient and the real rows train as before")
    return _check(ITEM, name, True, "")


# --- 5. attention ---------------------------------------------------------------------------------------
def _memory_device(trace: Trace, allocations: Any) -> int:
    """The device whose memory a step's reading is about: the GPU's (the one with the most bytes allocated) on a GPU
    trace, the host's (-1) on a CPU one."""
    gpu = allocations[allocations["device"] >= 0]
    if trace.has_gpu and len(gpu):
        return int(gpu[gpu["bytes"] > 0].groupby("device")["bytes"].sum().idxmax())
    return -1


def _peak_above_start(trace: Trace) -> float:
    """The most memory allocated above a step's start, the largest over the trace's steps (NaN: none recorded)."""
    from ..memory import allocations

    a = allocations(trace)
    a = a[a["device"] == _memory_device(trace, a)]
    peaks = []
    for _, s in trace.steps.iterrows():
        inside = a[(a["time_us"] >= s["start_us"]) & (a["time_us"] <= s["end_us"])]
        if len(inside):
            peaks.append(float(inside["bytes"].cumsum().max()))
    return max(peaks) if peaks else float("nan")


def check_attention_reading(answer: dict, trace: Trace, shape: tuple[int, int, int, int], element_bytes: int) -> str:
    """``shape`` is (batch, T, heads, head_dim). ``{"scores_bytes": one T x T score matrix of every batch row and head, "peak_bytes": the most memory allocated
    above a step's start in the learner's own profile_memory capture, "matrices": peak over scores}`` (5%)."""
    name = "check_attention_reading"
    problem = own_capture_problem(trace)
    if problem:
        _fail(name, problem)
    names = set(trace.events["name"].astype(str))
    if not any("softmax" in n.lower() for n in names) or any("scaled_dot_product" in n for n in names):
        _fail(name, "this capture is not of the eager attention (its softmax op or kernel is missing, or it ran "
              "scaled_dot_product_attention): capture attention.make_step('eager', DEVICE)")
    peak = _peak_above_start(trace)
    if not math.isfinite(peak):
        _fail(name, "your capture recorded no allocations inside its steps: capture with profile_memory=True")
    b, t, h, _d = shape
    scores = b * h * t * t * element_bytes
    if not isinstance(answer, dict):
        return _check(ITEM, name, False, "attention_reading must be a dict with scores_bytes, peak_bytes and matrices")
    got = {k: answer.get(k) for k in ("scores_bytes", "peak_bytes", "matrices")}
    try:
        s, p, r = (float(got[k]) for k in ("scores_bytes", "peak_bytes", "matrices"))
    except (TypeError, ValueError):
        return _check(ITEM, name, False, f"{got}: each must be a number")
    if not _close(s, scores, 1e-9):
        return _check(ITEM, name, False, f"scores_bytes={s:,.0f}: batch x heads x T x T elements of {element_bytes} "
                      f"bytes is {scores:,.0f}" + unit_slip(s, scores))
    if not _close(p, peak, 0.05):
        return _check(ITEM, name, False, f"peak_bytes={p:,.0f}, your capture gives {peak:,.0f}: within each step, add up "
                      "the allocations' bytes in time order (frees are negative) and take the largest running total; the "
                      "largest over the steps; only the allocations on the step's device (mem['device']: -1 the host, "
                      "0 the first GPU)" + unit_slip(p, peak))
    return _check(ITEM, name, _close(r, peak / scores, 0.05),
                  f"matrices={r:.3g}: peak_bytes over scores_bytes is {peak / scores:.3g}")


def _attention_cases() -> list[tuple[str, tuple[int, int, int, int]]]:
    """(batch, T, heads, head_dim) shapes the learner has not seen: one position; T and head_dim that are no
    multiple of 8 or 16; more heads than batch rows (a layout mix-up of T and heads shows)."""
    return [("batch 1, T 1, 1 head", (1, 1, 1, 16)), ("batch 2, T 37, 3 heads, head dim 24", (2, 37, 3, 24)),
            ("batch 3, T 129, 2 heads, head dim 80", (3, 129, 2, 80))]


def _peak_during(fn: Callable[[], Any], device: torch.device, scratch: str | None = None) -> float:
    """Most memory allocated above the start while ``fn()`` runs (a CUDA device: the allocator's peak; the CPU: the
    profiler's memory events, the only record the CPU allocator gives, written into the folder ``scratch``, which the
    caller owns and removes)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return float(torch.cuda.max_memory_allocated(device) - start)
    import contextlib
    from pathlib import Path

    from torch.profiler import ProfilerActivity, profile

    from ..memory import allocations
    from ..profiling import quiet_profiler_logs

    with (contextlib.nullcontext(scratch) if scratch else _core.scratch_dir("lab09-mem-")) as tmp, quiet_profiler_logs():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
        path = Path(tmp) / "t.json"
        prof.export_chrome_trace(str(path))
        a = allocations(path)
    return float(a["bytes"].cumsum().max()) if len(a) else 0.0


#: The course's attention code, which the learner's function may not call.
_ATTENTION_REFERENCE = ("attend_eager", "make_step", "make_step_with")


def check_sdpa_attention(fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
                         device: torch.device | str | None = None) -> str:
    """The learner's causal attention ``fn(q, k, v)`` on ``(batch, T, heads, head_dim)`` inputs: the eager
    reference's output and gradients on shapes the learner has not seen, and at a long sequence less memory than
    one T x T score matrix."""
    from ..workloads import attention

    name = "check_sdpa_attention"
    _learners(fn, "my_attention(q, k, v)", name)
    borrowed = _course_names(fn, _ATTENTION_REFERENCE)
    if borrowed:
        _fail(name, f"your function calls the course's own {', '.join(borrowed)}: write the attention call yourself")
    device = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    low = attention.dtype_for(device) != torch.float32
    out_tol = {"rtol": 2e-2, "atol": 2e-2} if low else {"rtol": 1e-4, "atol": 1e-5}
    grad_tol = {"rtol": 5e-2, "atol": 5e-2} if low else {"rtol": 1e-3, "atol": 1e-4}
    for label, size in _attention_cases():
        q, k, v = attention.make_qkv(device, seed=sum(size), size=size)
        out = run_learner(fn, q, k, v, name="your attention function", returns=torch.Tensor)
        ref_in = [x.detach().float().requires_grad_(True) for x in (q, k, v)]
        want = attention.attend_eager(*ref_in)  # in fp32 from the same inputs
        if tuple(out.shape) != tuple(want.shape):
            return _check(ITEM, name, False, f"on {label}: your output has shape {tuple(out.shape)}, not "
                          f"{tuple(want.shape)} (batch, T, heads, head dim): give it back in the layout q, k and v came in")
        if not torch.allclose(out.float(), want.detach(), **out_tol):
            off = float((out.detach().float() - want.detach()).abs().max())
            hint = ("scaled_dot_product_attention works per head on (batch, heads, T, head_dim): transpose(1, 2) going in "
                    "and coming out; the mask is causal (each position sees itself and earlier ones); the scale "
                    "1/sqrt(head dim) is applied once (the function applies it itself)")
            return _check(ITEM, name, False, f"on {label}: your output differs from causal attention by up to {off:.3g}: {hint}")
        if not out.requires_grad:
            return _check(ITEM, name, False, f"on {label}: autograd does not track your output: compute it from q, k and v "
                          "with gradients on (no .detach(), no torch.no_grad())")
        grads = torch.autograd.grad(out.float().square().sum(), (q, k, v), allow_unused=True)
        want_grads = torch.autograd.grad(want.square().sum(), ref_in)
        if any(g is None for g in grads) or not all(torch.allclose(g.float(), w, **grad_tol) for g, w in zip(grads, want_grads)):
            return _check(ITEM, name, False, f"on {label}: your function's gradients with respect to q, k and v differ from "
                          "causal attention's: compute the output from q, k and v themselves, with autograd on")
    b, t, h, d = (1, 2048, 2, 64) if device.type == "cpu" else (2, 4096, 8, 64)
    q, k, v = attention.make_qkv(device, seed=3, requires_grad=False, size=(b, t, h, d))
    scores = b * h * t * t * q.element_size()
    with _core.scratch_dir("lab09-mem-") as scratch:  # made and removed here: a call that never returns leaves nothing
        peak = run_learner(lambda: _peak_during(lambda: fn(q, k, v), device, scratch), name="your attention function",
                           note=fn)
    return _check(ITEM, name, peak < scores,
                  f"at T={t} your function allocates {peak / 2**20:.1f} MiB at its peak, at least one T x T score matrix "
                  f"({scores / 2**20:.1f} MiB): it still makes the scores; torch.nn.functional.scaled_dot_product_attention "
                  "with is_causal=True computes the same without ever writing them to memory")
