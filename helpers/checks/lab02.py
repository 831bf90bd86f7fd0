"""Lab 02: launch overhead.

The learner first states a :class:`~helpers.checks.Reading` of the broken loop (``check_reading``,
item ``launch``), then writes the fix: on a GPU a CUDA Graph capture of the whole training step, on
a CPU a multi-tensor (foreach) optimizer step by hand. :func:`check_launch_fixed` judges the
learner's own trace of that fix and says what *that* trace shows when it falls short.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pandas as pd

from .. import metrics as m
from .. import thresholds as th
from ..diagnosis import diagnose, signals
from ..model import Trace
from . import behaviour
from ._core import CheckFailed, _check, _close, _record, course_bar, data_wait_share, learner_trace_problem, own_capture_problem  # noqa: F401
from .speed import band_words

#: The self-check items this lab earns, per track, and the checks of the learner's work each needs.
# The credit this lab's exercises earn is declared in helpers.checks.exercise.EXERCISES.

#: A graph-captured step may still launch a few kernels of its own (a non-contiguous copy into the
#: static inputs); more than this many ``cudaLaunchKernel`` calls per step means part of the step
#: runs outside the graph (the broken loop makes about 1000).
LEFTOVER_LAUNCHES_PER_STEP = 16
#: Fill kernels (``FillFunctor``: zeros_like, ones_like) inside the replayed graph, per step, above
#: which the graph has recorded one-time state initialisation (Adam's moments created inside the
#: capture because nothing warmed the step up first). The correct capture replays 2 a step (the
#: loss's gradient seed and one more; data/launch_overhead__graphs__h200), the unwarmed one about
#: three per parameter (exp_avg, exp_avg_sq, step: TinyBlocks has 98 parameters).
GRAPH_FILLS_PER_STEP = 20

#: A fixed step must still do the step's work: at least this share of the broken loop's kernels per
#: step (graph-replayed ones count; the recorded graph replays 562 of the broken loop's 1029, its Adam
#: being foreach), or of its ``aten::linear`` calls on a CPU.
MIN_WORK_SHARE = 0.4
_MODEL_OPS = ("aten::linear", "aten::addmm", "aten::mm", "aten::matmul")

_KERNEL_LAUNCH = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel")
_GRAPH_LAUNCH = ("cudaGraphLaunch", "cuGraphLaunch")


def _n_steps(trace: Trace) -> int:
    return max(int((m.windows(trace)["step"] >= 0).sum()), 1)


def _in_steps(trace: Trace, sel: pd.DataFrame) -> pd.DataFrame:
    return sel[sel["step"] >= 0] if (m.windows(trace)["step"] >= 0).any() else sel


def _enclosing_range(trace: Trace, sel: pd.DataFrame) -> pd.Series:
    """For each row: the innermost of the learner's annotation ranges around it (by time, any thread).

    Launches of the backward pass come from autograd's own thread, so ranges are matched by time.
    PyTorch's own ``Name#Name`` ranges and the profiler's step ranges are skipped.
    """
    ev = trace.events
    ann = ev[(ev["kind"] == "annotation") & (ev["device"] < 0)]
    ann = ann[~ann["name"].str.contains("#", regex=False) & ~ann["name"].str.match(r"^(?:ProfilerStep|step \d)")]
    out = pd.Series("", index=sel.index, dtype=object)
    if ann.empty or sel.empty:
        return out
    ann = ann.assign(length=ann["dur_us"]).sort_values("length", ascending=False)  # shorter ones win: written last
    s, e = sel["start_us"].to_numpy(), sel["end_us"].to_numpy()
    labels = out.to_numpy().copy()
    for _, a in ann.iterrows():
        inside = (s >= a["start_us"]) & (e <= a["end_us"]) & (sel["rank"].to_numpy() == a["rank"])
        labels[inside] = a["name"]
    return pd.Series(labels, index=sel.index, dtype=object)


def launch_counts(trace: Trace) -> dict[str, object]:
    """Per step: ``graph_launches`` (cudaGraphLaunch), ``kernel_launches`` (cudaLaunchKernel and friends),
    ``kernels``, ``graph_kernels`` (kernels a graph replay ran), ``graph_fills`` (fill kernels among
    them), and ``launches_by_range`` ({the learner's range: kernel launches per step})."""
    ev = trace.events
    n = _n_steps(trace)
    rt = _in_steps(trace, ev[ev["kind"] == "runtime"])
    kl = rt[rt["name"].str.startswith(_KERNEL_LAUNCH)]
    gl = rt[rt["name"].str.startswith(_GRAPH_LAUNCH)]
    kernels = _in_steps(trace, ev[(ev["kind"] == "kernel") & (ev["device"] >= 0)])
    graph_k = kernels[kernels["correlation"].isin(set(gl["correlation"])) & (kernels["correlation"] >= 0)]
    fills = graph_k[graph_k["name"].str.contains("FillFunctor|fill_kernel", regex=True)]
    by_range = _enclosing_range(trace, kl).replace("", "outside your ranges").value_counts()
    return {"graph_launches": len(gl) / n, "kernel_launches": len(kl) / n, "kernels": len(kernels) / n,
            "graph_kernels": len(graph_k) / n, "graph_fills": len(fills) / n,
            "launches_by_range": {str(k): float(v) / n for k, v in by_range.items()}}


def _top_level_ops(trace: Trace) -> pd.DataFrame:
    """The PyTorch ops in the steps that no other op on the same thread contains (one per Python-level call)."""
    ev = trace.events
    ops = _in_steps(trace, ev[ev["kind"] == "cpu_op"])
    keep = []
    for _, grp in ops.groupby(["rank", "tid"]):
        grp = grp.sort_values(["start_us", "dur_us"], ascending=[True, False])
        ends = grp["end_us"].to_numpy()
        reach = np.maximum.accumulate(np.r_[-np.inf, ends[:-1]])
        keep.append(grp[grp["start_us"].to_numpy() >= reach])
    return pd.concat(keep) if keep else ops.iloc[0:0]


def top_level_ops_by_range(trace: Trace) -> dict[str, float]:
    """Top-level PyTorch ops per step (one per Python-level call), by the learner's range around them."""
    top = _top_level_ops(trace)
    if top.empty:
        return {}
    counts = _enclosing_range(trace, top).replace("", "outside your ranges").value_counts()
    return {str(k): float(v) / _n_steps(trace) for k, v in counts.items()}


def host_us_per_op(trace: Trace) -> float:
    """Mean host time of a top-level PyTorch op in the steps, in microseconds (what each call costs the host)."""
    top = _top_level_ops(trace)
    return float(top["dur_us"].mean()) if len(top) else float("nan")


def model_ops_per_step(trace: Trace) -> float:
    """``aten::linear``/``addmm``/``mm``/``matmul`` calls per step (outermost only): how much of the model a step runs."""
    ev = trace.events
    ops = _in_steps(trace, ev[(ev["kind"] == "cpu_op") & ev["name"].isin(_MODEL_OPS)])
    if ops.empty:
        return 0.0
    outer = 0
    for _, grp in ops.groupby(["rank", "tid"]):
        grp = grp.sort_values(["start_us", "dur_us"], ascending=[True, False])
        reach = np.maximum.accumulate(np.r_[-np.inf, grp["end_us"].to_numpy()[:-1]])
        outer += int((grp["start_us"].to_numpy() >= reach).sum())
    return outer / _n_steps(trace)


def check_launch_diagnosed(trace: Trace) -> str:
    """Not a credit check (it reads a trace, not the learner's work): kept for scripts and tests."""
    top = diagnose(trace)
    ok = bool(top) and top[0].pattern == "launch_overhead"
    return _check("launch", "check_launch_diagnosed", ok,
                  f"The top finding is {top[0].pattern if top else 'nothing'}; expected launch_overhead on the "
                  "broken loop. Look at kernels per step and their median length.")


def _where(by_range: dict[str, float], total: float) -> str:
    parts = sorted(by_range.items(), key=lambda kv: -kv[1])[:2]
    return ", ".join(f"{v:.0f} in your '{k}' range" if k != "outside your ranges" else f"{v:.0f} outside your ranges"
                     for k, v in parts if v >= 1) or f"{total:.0f} in all"


def _gpu_verdict(before: Trace, after: Trace) -> tuple[bool, str]:
    if not after.has_gpu:
        return False, ("your trace has no GPU activity: the step ran on the CPU. Build the model and the static inputs on "
                       "`device` (cuda) and capture the step there.")
    b, a = launch_counts(before), launch_counts(after)
    sg = signals(after)
    idle = float(sg.get("launch_idle_share", float("nan")))
    found = [f.pattern for f in diagnose(after)]
    if a["graph_launches"] < 0.5:
        return False, (f"no cudaGraphLaunch in your trace: all {a['kernels']:.0f} kernels per step are still launched one by "
                       f"one ({a['kernel_launches']:.0f} cudaLaunchKernel calls per step; the broken loop made "
                       f"{b['kernel_launches']:.0f}). Capture the step once with `with torch.cuda.graph(g):` and call "
                       "g.replay() in the step function.")
    if a["kernels"] < MIN_WORK_SHARE * b["kernels"]:
        return False, (f"your step runs {a['kernels']:.0f} kernels per step ({a['graph_kernels']:.0f} of them from a graph), the "
                       f"broken loop {b['kernels']:.0f}: part of the training step is missing. Capture forward, loss, backward "
                       "and opt.step() in the graph, and replay it every step.")
    if a["kernel_launches"] > LEFTOVER_LAUNCHES_PER_STEP:
        top = max(a["launches_by_range"].items(), key=lambda kv: kv[1], default=("", 0.0))
        tail = (f": the {top[0]} step is outside the graph" if top[0] and top[0] != "outside your ranges" and top[1] >= 0.5 * a["kernel_launches"]
                else ": part of the step runs outside the graph")
        return False, (f"graph captured ({a['graph_launches']:.0f} cudaGraphLaunch per step) but {a['kernel_launches']:.0f} "
                       f"cudaLaunchKernel calls per step remain ({_where(a['launches_by_range'], a['kernel_launches'])}){tail}. "
                       "Capture forward, backward and opt.step() together (Adam with capturable=True).")
    if a["graph_fills"] > GRAPH_FILLS_PER_STEP:
        return False, (f"your graph replays {a['graph_fills']:.0f} fill kernels per step (FillFunctor: zeros_like/ones_like) of its "
                       f"{a['graph_kernels']:.0f}: the capture recorded the optimizer creating its state (Adam's moments start as "
                       "zeros), so every replay resets them and the model stops learning properly. Run a few warm-up steps on a "
                       "side stream before capturing, then zero the grads and capture.")
    if "launch_overhead" in found or not idle < th.LAUNCH_IDLE_SHARE:
        return False, (f"the GPU still idles {idle:.0%} of the step while the host launches (findings now {found}); "
                       f"{a['kernel_launches']:.0f} cudaLaunchKernel and {a['graph_launches']:.0f} cudaGraphLaunch per step.")
    return True, (f"{a['graph_launches']:.0f} cudaGraphLaunch and {a['kernel_launches']:.0f} cudaLaunchKernel calls per step "
                  f"(the broken loop: {b['kernel_launches']:.0f} cudaLaunchKernel); the graph replays {a['graph_kernels']:.0f} "
                  f"kernels a step; launch idle {idle:.0%} of the step")


def _cpu_verdict(before: Trace, after: Trace, min_gain: float) -> tuple[bool, str]:
    ob, oa = (m.host_op_stats(t)["top_level_ops_per_step"] for t in (before, after))
    rb, ra = top_level_ops_by_range(before), top_level_ops_by_range(after)
    opt_b, opt_a = rb.get("optimizer", float("nan")), ra.get("optimizer", float("nan"))
    mb, ma = model_ops_per_step(before), model_ops_per_step(after)
    if mb > 0 and ma < 0.9 * mb:
        return False, (f"your step calls the model's layers {ma:.0f} times per step (aten::linear and friends), the broken loop "
                       f"{mb:.0f}: the step must still run the whole forward and backward pass")
    ok = oa * min_gain <= ob
    opt_txt = (f"; in the 'optimizer' range {opt_b:.0f} -> {opt_a:.0f} per step" if np.isfinite(opt_a) and np.isfinite(opt_b)
               else "; your step has no 'optimizer' range (wrap the update in helpers.annotate('optimizer') to see it apart)")
    if ok:
        return True, (f"top-level PyTorch ops per step {ob:.0f} -> {oa:.0f} ({ob / max(oa, 1):.1f}x fewer){opt_txt}; host time "
                      f"per op {host_us_per_op(before):.0f} -> {host_us_per_op(after):.0f} us (reported, not judged: a foreach "
                      "op does more work per call)")
    where = _where(ra, oa)
    optimizer_unchanged = not np.isfinite(opt_a) or not np.isfinite(opt_b) or opt_a * 2 > opt_b
    hint = ("Your optimizer still makes one call per parameter per operation: a foreach op (torch._foreach_mul_, "
            "_foreach_add_, _foreach_addcmul_, _foreach_addcdiv_, ...) takes the list of all parameters in one call"
            if optimizer_unchanged else
            "The optimizer shrank but the rest of the step did not: look at which range still holds most calls")
    return False, (f"top-level PyTorch ops per step {ob:.0f} -> {oa:.0f} (want at most {ob / min_gain:.0f}){opt_txt}; "
                   f"most of them: {where}. {hint}.")


#: Largest difference from torch.optim.Adam (after a few steps on small tensors) a hand-written update may show.
ADAM_TOLERANCE = 1e-5


@functools.lru_cache(maxsize=1)
def _model_case() -> tuple[list, Callable[[int], list]]:
    """TinyBlocks' own parameters and the gradients of the lab's loss on its batches (CPU). Built once a
    process: the check only ever reads them (the learner's update gets clones)."""
    import torch
    import torch.nn.functional as F

    from ..workloads import launch_overhead

    torch.manual_seed(0)
    model = launch_overhead.TinyBlocks()
    data = launch_overhead.make_data(torch.device("cpu"))

    def grads(k: int) -> list:
        model.zero_grad(set_to_none=True)
        x, y = data[k % len(data)]
        F.mse_loss(model(x), y).backward()
        return [p.grad.clone() for p in model.parameters()]

    return list(model.parameters()), grads


def adam_update_problem(update, steps: int = 3, seed: int | None = None) -> tuple[float, str | None]:
    """The learner's ``update(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps)`` next to
    ``torch.optim.Adam``: on the lab model's own parameters with their real gradients, and on random
    shapes from a fresh seed each call. (largest difference, a message naming what is wrong or None)."""
    params, grads = _model_case()
    return behaviour.adam_problem(update, params, grads, ADAM_TOLERANCE, seed=seed, steps=steps)


def adam_update_error(update, steps: int = 3) -> float:
    """How far ``update`` lands from ``torch.optim.Adam`` after ``steps`` steps (largest absolute difference),
    on the lab model's own parameters and on random tensors of random shapes.

    A checker, not a fix: it only runs the learner's function next to PyTorch's own Adam.
    """
    return adam_update_problem(update, steps)[0]


def torch_optimizer_problem(after: Trace) -> str | None:
    """Why the fixed CPU loop's trace is not one of the learner's update: its steps run a torch.optim optimizer's own
    step (the profiler's ``Optimizer.step#Adam.step`` range, which the course's ``foreach`` variant and the broken loop
    show and a loop that calls ``adam_update`` does not). None when no such range is in a step."""
    ev = after.events
    ranges = ev.loc[(ev["step"] >= 0) & ev["name"].astype(str).str.startswith("Optimizer.step#"), "name"]
    if ranges.empty:
        return None
    return (f"your trace's steps run {ranges.iloc[0]} ({len(ranges)} times): torch.optim's own optimizer, as the course's "
            "foreach variant does, not your adam_update. Capture make_foreach_step(device), whose optimizer range calls "
            "your update")


#: On the CPU track, how many times fewer top-level PyTorch ops a step the fixed loop makes at least: the course's
#: bar, never loosened (a learner's own bar may only be stricter).
MIN_OP_GAIN = 1.5


def check_launch_fixed(before: Trace, after: Trace, min_gain: float = MIN_OP_GAIN, update: Callable | None = None) -> str:
    """Judge the learner's fix from their own trace ``after`` (``before``: their capture of the broken loop).

    GPU: a CUDA Graph replays the whole step (cudaGraphLaunch present, at most
    :data:`LEFTOVER_LAUNCHES_PER_STEP` cudaLaunchKernel calls a step, no one-time fills recorded in
    the graph), launch idle below ``thresholds.LAUNCH_IDLE_SHARE`` and no ``launch_overhead``
    finding. CPU: first the learner's ``update`` itself, run here next to ``torch.optim.Adam`` on the
    model's own parameters and on random shapes (:func:`adam_update_problem`); then at least
    ``min_gain`` x fewer top-level PyTorch ops per step. Last, the step may not be slower than ``before`` beyond
    the noise band of the two captures (:func:`helpers.checks.speed.slower_problem`); the speed-up is reported.
    """
    min_gain = course_bar(min_gain, MIN_OP_GAIN, at_least=True)  # a learner's bar is never looser than the course's
    problem = own_capture_problem(after, before)
    if problem is None and not before.has_gpu:
        if not callable(update):
            problem = ("pass your update too: check_launch_fixed(broken, fixed, min_gain=1.5, update=adam_update); the check "
                       "runs it next to torch.optim.Adam: fewer calls only count if they compute the same step")
        else:
            problem = adam_update_problem(update)[1] or torch_optimizer_problem(after)
    if problem:
        _record("launch", "check_launch_fixed", False)
        raise CheckFailed(problem)
    if before.has_gpu:
        ok, msg = _gpu_verdict(before, after)
    else:
        ok, msg = _cpu_verdict(before, after, min_gain)
    band = m.step_time_band(before, after)  # the medians the comparison table shows
    # fewer calls that cost more time are no fix; a machine measured slower during the capture is no slower fix
    slower, paced = behaviour.machine_verdict(before, after) if ok else ("", "")
    ok = ok and not slower
    if slower:
        msg = "your trace shows: " + slower
    timing = (f" Median step time {band['before_ms']:.2f} -> {band['after_ms']:.2f} ms under the profiler"
              + (band_words(band["before_ms"], band["after_ms"], paced) + "." if ok else "."))
    msg = msg.rstrip(".")
    _check("launch", "check_launch_fixed", ok, msg[0].upper() + msg[1:] + "." + timing)
    return "passed: check_launch_fixed. " + msg + "." + timing
