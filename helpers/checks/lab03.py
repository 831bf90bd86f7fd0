"""Lab 03: synchronization stall.

The learner states a :class:`~helpers.checks.Reading` of the broken loop (``check_reading``, item
``sync``), then edits the loop itself so it stops waiting for the GPU every step.
:func:`check_sync_scan_clean` scans *their* function's source; :func:`check_sync_fixed` counts the
syncs in *their* trace and names the ops (and ranges) that still sync.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from .. import metrics as m
from .. import syncscan
from ..diagnosis import diagnose
from ..errors import TraceError
from ..model import Trace
from ..render import plural
from ..sources import getsource
from . import behaviour
from ._core import CheckFailed, _check, _close, _record, course_bar, data_wait_share, learner_trace_problem, own_capture_problem  # noqa: F401
from .lab02 import _enclosing_range, _in_steps, _n_steps, model_ops_per_step
from .speed import band_words

#: The self-check items this lab earns, per track, and the checks of the learner's work each needs.
# The credit this lab's exercises earn is declared in helpers.checks.exercise.EXERCISES.

LOG_EVERY = 10  # sync_stall.LOG_EVERY: how often the loop reads its values back (the lab's exercise says so)

#: What each op that syncs looks like in the learner's code.
_LOOKS_LIKE = {"aten::item": ".item() / float() / int() / formatting a GPU tensor",
               "aten::_local_scalar_dense": ".item() / float() / int()",
               "aten::is_nonzero": "`if <tensor>:` / bool(tensor)",
               "aten::to": ".cpu() / .to('cpu')", "aten::_to_copy": ".cpu() / .to('cpu')", "aten::copy_": ".cpu() / .to('cpu')",
               "cudaDeviceSynchronize": "torch.cuda.synchronize()", "cudaStreamSynchronize": "a blocking copy or .item()",
               "aten::nonzero": "torch.nonzero / x[mask]", "aten::masked_select": "x[mask]", "aten::tolist": ".tolist()"}


def _looks(op: str) -> str:
    return _LOOKS_LIKE.get(op, "a read of a GPU value on the host")


def remaining_syncs(trace: Trace) -> dict[str, float]:
    """Per step, what still syncs in ``trace``: ``{"aten::to in 'logging'": 2.0, ...}``.

    On a GPU: each sync call (cudaStreamSynchronize, cudaDeviceSynchronize, ...) by the outermost
    PyTorch op around it and the learner's range. On a CPU-only trace: the ops that would sync on a
    GPU (``aten::item``, ``aten::is_nonzero``, ...), outside ``Optimizer.step``.
    """
    ev = trace.events
    n = _n_steps(trace)
    if trace.has_gpu:
        syncs = _in_steps(trace, ev[m.sync_point_calls(trace)])  # a .cpu() copy and its stream sync: one
        ops = ev[ev["kind"] == "cpu_op"]
        names = []
        for _, s in syncs.iterrows():
            th = ops[(ops["rank"] == s["rank"]) & (ops["tid"] == s["tid"]) & (ops["start_us"] <= s["start_us"])
                     & (ops["end_us"] >= s["end_us"])]
            names.append(str(th.sort_values("start_us")["name"].iloc[0]) if len(th) else str(s["name"]))
        sel = syncs.assign(op=names)
    else:
        sel = _in_steps(trace, ev[(ev["kind"] == "cpu_op") & ev["name"].isin(m.SYNCING_OPS)])
        sel = sel[~m._inside_ranges(sel, ev, m.OPTIMIZER_RANGE)]
        sel = m.outermost_ops(sel)  # `if t:` is aten::is_nonzero calling aten::item: one sync, named once
        sel = sel.assign(op=sel["name"])
    if sel.empty:
        return {}
    where = _enclosing_range(trace, sel)
    label = sel["op"].astype(str) + pd.Series([f" in '{w}'" if w else "" for w in where], index=sel.index)
    return {str(k): float(v) / n for k, v in label.value_counts().items()}


#: Syncs per step a fixed loop may keep (two or three reads every 10 steps): the course's bar, never loosened.
SYNCS_PER_STEP_MAX = 0.3


def check_sync_fixed(before: Trace, after: Trace, max_per_step: float = SYNCS_PER_STEP_MAX) -> str:
    """The learner's trace ``after``: at most ``max_per_step`` syncs per step (two or three reads every 10 steps are fine)
    and no ``sync_stall`` finding. Names what still syncs, and where, when it fails. Last, the step may not be slower
    than ``before`` beyond the noise band of the two captures (:func:`helpers.checks.speed.slower_problem`)."""
    max_per_step = course_bar(max_per_step, SYNCS_PER_STEP_MAX, at_least=False)  # a learner's bar is never looser
    problem = own_capture_problem(after, before)
    if problem:
        _record("sync", "check_sync_fixed", False)
        raise CheckFailed(problem)
    sb, sa = m.sync_stats(before), m.sync_stats(after)
    key = "sync_points_per_step" if after.has_gpu else "syncing_ops_per_step"
    found = [f.pattern for f in diagnose(after)]
    mb, ma = model_ops_per_step(before), model_ops_per_step(after)
    if mb > 0 and ma < 0.9 * mb:
        return _check("sync", "check_sync_fixed", False,
                      f"Your step calls the model's layers {ma:.1f} times per step (aten::linear and friends), the broken loop "
                      f"{mb:.1f}: keep the whole training step (forward, loss, backward, optimizer) and change only how it logs.")
    ok = sa[key] <= max_per_step and "sync_stall" not in found
    what = key.replace("_", " ")
    if ok:
        slower, paced = behaviour.machine_verdict(before, after)  # never slower beyond noise and the machine's slowdown
        if slower:
            return _check("sync", "check_sync_fixed", False, "Your trace shows: " + slower + ".")
        band = m.step_time_band(before, after)  # the medians the comparison table shows
        return _check("sync", "check_sync_fixed", True, "") + (
            f". {what}: {sb[key]:.1f} -> {sa[key]:.1f}; median step time {band['before_ms']:.2f} -> "
            f"{band['after_ms']:.2f} ms under the profiler" + band_words(band["before_ms"], band["after_ms"], paced) + ".")
    left = sorted(remaining_syncs(after).items(), key=lambda kv: -kv[1])[:3]
    named = "; ".join(f"{k} {v:.1f} per step ({_looks(k.split(' in ')[0])})" for k, v in left) or "no single op"
    cpu_note = "" if after.has_gpu else " (a CPU does not wait, but these ops are the ones that would sync on a GPU)"
    extra = f"; findings: {found}" if "sync_stall" in found else ""
    return _check("sync", "check_sync_fixed", False,
                  f"Your trace still has {sa[key]:.1f} {what} (the broken loop: {sb[key]:.1f}; want <= {max_per_step}){extra}. "
                  f"What still syncs{cpu_note}: {named}. Keep the values on the GPU (loss.detach() and the count of correct "
                  "predictions added into tensors) and read them once every N steps.")


def _small_setup():
    """``sync_stall.setup`` on the CPU, small (two layers, 64 rows a batch) so the check runs both loops in a second."""
    import torch

    from ..workloads import sync_stall

    torch.manual_seed(0)
    model = sync_stall.make_model(sync_stall.NOISE, depth=2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(8, 64, sync_stall.NOISE, generator=g)
    return model, opt, xs, torch.randint(0, 10, (8, 64), generator=g)


def check_sync_scan_clean(fn: Callable) -> str:
    """Scan the learner's step function: no call that syncs may run on every step (under ``if i % N == 0:`` is fine).

    First what it does: its own code calls backward and the optimizer (not the course's reference
    step), and run next to the broken loop from the same seed on the CPU it feeds the model the same
    batches, ends with the same parameters and still logs the loop's losses every LOG_EVERY steps."""
    if not callable(fn):
        _record("sync", "check_sync_scan_clean", False)
        raise CheckFailed("pass your step function itself (check_sync_scan_clean(my_fixed_step)); the check scans its source")
    if str(getattr(fn, "__module__", "")).startswith("helpers."):
        _record("sync", "check_sync_scan_clean", False)
        raise CheckFailed(f"{getattr(fn, '__name__', fn)} is the course's own code, not yours: write your step in a cell "
                          "and scan that; the course's functions earn no credit")
    try:
        sites = syncscan.every_step(syncscan.scan(fn))  # first: it refuses a source file that is a pipe or device
        source = getsource(fn)
    except (OSError, TypeError, SyntaxError, TraceError) as exc:
        _record("sync", "check_sync_scan_clean", False)
        raise CheckFailed(f"could not read the source of {getattr(fn, '__name__', fn)!r} ({exc}); define it in a cell") from None
    if "ExerciseNotDone" in source:
        _record("sync", "check_sync_scan_clean", False)
        raise CheckFailed(f"{getattr(fn, '__name__', 'your function')} is not a training step yet: write the step (forward, "
                          "loss.backward(), the optimizer, logging) before scanning it")
    problem = behaviour.own_step_problem(fn)
    if problem is None:
        from ..workloads import sync_stall

        # the same training as the loop as first written: same batches, same parameters after 2 log periods, the log kept
        problem = behaviour.same_training_problem(fn, sync_stall.broken_step, _small_setup,
                                                  steps=2 * LOG_EVERY, log_every=LOG_EVERY)
    if problem:
        _record("sync", "check_sync_scan_clean", False)
        raise CheckFailed((problem[0].upper() + problem[1:] if problem.startswith("the ") else problem) + ".")
    return _check("sync", "check_sync_scan_clean", not sites,
                  f"{plural(len(sites), 'line')} of {getattr(fn, '__name__', 'your function')} still "
                  f"{'syncs' if len(sites) == 1 else 'sync'} on every step: "
                  + "; ".join(f"line {s.line}: `{s.code}` ({s.call}: {s.why})" for s in sites[:3])
                  + ". Keep those values on the GPU, or read them only under `if (i + 1) % N == 0:`.")
