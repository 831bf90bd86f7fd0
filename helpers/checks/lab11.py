"""Lab 11: from a stall to its line of code (hidden syncs in library code), or to the environment.

The learner attributes each sync of a profile to the Python function that called it (from the call stacks a
``with_stack=True`` profile records), writes the Nsight Systems command that records a backtrace at each
synchronizing CUDA call, rewrites the loop without the library's syncing calls (the same training, judged first), and
writes the environment checklist. Each function runs on the learner's own capture and on inputs made by the check.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

import pandas as pd

from .. import metrics as m
from ..model import Trace
from . import behaviour
from ._core import CheckFailed, _check, _close, _record, course_bar, own_capture_problem, run_learner
from .lab03 import SYNCS_PER_STEP_MAX  # the same bar: syncs a step a fixed loop may keep

run_learner = behaviour.watching(run_learner, "function (lab 11)")  # the course's answers refused wherever they run

__all__ = ["sync_rows", "check_sync_sites", "check_backtrace_command", "check_callsites_fixed",
           "check_environment_pitfalls", "PITFALLS"]

ITEM = "callsites"
#: Lab 11's own work: their attribution of syncs to code (on their capture and one made by the check), their nsys
#: command, their fixed loop (trained next to the loop as written, then captured), and their checklist.
# The credit this lab's exercises earn is declared in helpers.checks.exercise.EXERCISES.


def _fail(name: str, message: str) -> None:
    _record(ITEM, name, False)
    raise CheckFailed(message)


def _learners(fn: Any, what: str, name: str) -> None:
    from .lab09 import _course_names

    if not callable(fn):
        _fail(name, f"pass your function itself ({what}), not a {type(fn).__name__}")
    if str(getattr(fn, "__module__", "") or "").startswith("helpers."):
        _fail(name, f"{getattr(fn, '__name__', fn)} is the course's own code, not yours: write {what} in a cell")
    borrowed = _course_names(fn, ("_reference_sites", "_reference_pitfalls", "fixed_step"))
    if borrowed:
        _fail(name, f"your function calls the course's own {', '.join(borrowed)}: write {what} yourself")


# --- 1. where each sync comes from ----------------------------------------------------------------------
def sync_rows(trace: Trace) -> pd.DataFrame:
    """The events that sync in the trace's steps, one row each (``rank, tid, name, start_us, end_us, step``):
    on a GPU the synchronizing CUDA calls (a copy to the host and its stream sync count once); on a CPU the
    PyTorch ops that would sync on a GPU (``aten::item``, ``aten::nonzero``, ...; an op inside another counted once;
    the optimizer's own reads of its CPU step counter left out)."""
    ev = trace.events
    if trace.has_gpu:
        rows = ev[m.sync_point_calls(trace) & (ev["step"] >= 0)]
    else:
        ops = ev[(ev["kind"] == "cpu_op") & ev["name"].isin(m.SYNCING_OPS) & (ev["step"] >= 0)]
        ops = ops[~m._inside_ranges(ops, ev, m.OPTIMIZER_RANGE)]
        rows = m.outermost_ops(ops)
    return rows[["rank", "tid", "name", "start_us", "end_us", "step"]].sort_values("start_us").reset_index(drop=True)


def _own_frame(name: str) -> bool:
    """A Python frame of the program or its libraries: not PyTorch's own Python, not a built-in (C) function."""
    return not (name.startswith(("torch/", "<built-in")) or "/torch/" in name or name.startswith("<frozen"))


def _reference_sites(trace: Trace) -> dict[str, float]:
    ev = trace.events
    py = ev[ev["kind"] == "python"]
    n = max(int((m.windows(trace)["step"] >= 0).sum()), 1)
    counts: dict[str, int] = {}
    for _, r in sync_rows(trace).iterrows():
        above = py[(py["rank"] == r["rank"]) & (py["tid"] == r["tid"]) & (py["start_us"] <= r["start_us"])
                   & (py["end_us"] >= r["end_us"])]
        own = above[above["name"].map(_own_frame)]
        site = str(own.sort_values("start_us")["name"].iloc[-1]) if len(own) else "(no Python frame)"
        counts[site] = counts.get(site, 0) + 1
    return {k: v / n for k, v in counts.items()}


def _hidden_step(model, opt, xs, ys, log):  # noqa: ANN001, ANN202 - the check's second loop, of the same shape
    import torch

    from ..workloads import trainkit

    def first_target(t: torch.Tensor) -> int:
        return int(t[0, 0])  # a read in a helper of the loop's own: a sync of another kind

    def step(i: int) -> None:
        x, y = xs[i % len(xs)], ys[i % len(ys)]
        loss = trainkit.masked_cross_entropy(model(x).flatten(0, 1), y.flatten())
        if torch.isnan(loss):  # a branch on a tensor, in the step itself
            raise FloatingPointError("the loss is NaN")
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        log.append(first_target(y))

    return step


def _hidden_capture() -> Trace:
    import tempfile

    import torch

    from ..profiling import capture
    from ..workloads import callsite

    model, opt, xs, ys = callsite.setup(torch.device("cpu"), seed=3, sizes=(2, 16, 16))
    with tempfile.TemporaryDirectory(prefix="lab11-") as tmp:
        return capture(_hidden_step(model, opt, xs, ys, []), steps=2, warmup=1, out_dir=tmp, name="hidden",
                       with_stack=True, cuda=False)


def check_sync_sites(fn: Callable[[Trace], dict], trace: Trace) -> str:
    """The learner's ``fn(trace)``: ``{frame: syncs per step}`` for each sync of :func:`sync_rows`, attributed to the
    innermost Python frame above it that is not PyTorch's own or a built-in; on their own ``with_stack`` capture and
    on a loop the check captures."""
    name = "check_sync_sites"
    _learners(fn, "sync_sites(trace)", name)
    problem = own_capture_problem(trace)
    if problem:
        _fail(name, problem)
    if not (trace.events["kind"] == "python").any():
        _fail(name, "your capture has no Python frames: capture with helpers.capture(..., with_stack=True)")
    for label, t in (("your capture", trace), ("a loop the check captured", _hidden_capture())):
        want = _reference_sites(t)
        got = run_learner(fn, t, name="your sync_sites", returns=dict)
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        if missing or extra:
            return _check(ITEM, name, False,
                          f"on {label}: " + (f"no entry for {missing[:2]}" if missing else "") + ("; " if missing and extra else "")
                          + (f"entries the syncs do not come from: {extra[:2]}" if extra else "")
                          + ". For each row of checks.sync_rows(trace), take the Python events on the same rank and thread "
                          "that contain it, drop PyTorch's own frames ('torch/...') and built-ins ('<built-in ...'), and "
                          "keep the innermost (the one that started last)")
        def number(v: Any) -> float:
            try:
                return float(v)
            except (TypeError, ValueError):
                return float("nan")

        off = [k for k, v in want.items() if not _close(number(got[k]), v, 1e-9, 1e-9)]
        if off:
            k = off[0]
            return _check(ITEM, name, False, f"on {label}: {k}: {got[k]} syncs a step, the trace has {want[k]:g}: count the rows "
                          "and divide by the number of steps")
    return _check(ITEM, name, True, "")


# --- 2. the same question in Nsight Systems -------------------------------------------------------------
def _options(tokens: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.startswith("-") and "=" in t:
            k, v = t.split("=", 1)
            out[k] = v
        elif t.startswith("-") and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
            out[t] = tokens[i + 1]
            i += 1
        elif t.startswith("-"):
            out[t] = ""
        else:
            break
        i += 1
    return out


def check_backtrace_command(command: str | list[str]) -> str:
    """An ``nsys profile`` command that records, at each synchronizing CUDA call, a CPU backtrace and the Python
    backtrace (``--trace`` with cuda, ``--cudabacktrace`` with sync or all, ``--python-backtrace=cuda``, CPU sampling
    left on), of the lab's loop, into a named report."""
    name = "check_backtrace_command"
    try:
        tokens = shlex.split(command) if isinstance(command, str) else [str(t) for t in command]
    except (TypeError, ValueError) as exc:
        return _check(ITEM, name, False, f"backtrace_command must be the command line as a string ({exc})")
    if tokens[:2] != ["nsys", "profile"]:
        return _check(ITEM, name, False, f"the command starts {' '.join(tokens[:2])!r}: it is 'nsys profile ...'")
    try:
        prog = next(i for i, t in enumerate(tokens) if t.startswith("python"))
    except StopIteration:
        return _check(ITEM, name, False, "no program: end the command with python -m helpers.workloads.callsite --variant broken")
    opts = _options(tokens[2:prog])
    program = tokens[prog:]
    trace = opts.get("--trace", opts.get("-t", ""))
    back = opts.get("--cudabacktrace", "")
    sample = opts.get("--sample", opts.get("-s", ""))
    checks = [
        ("cuda" in trace.split(","), "trace CUDA calls: --trace=cuda,nvtx,osrt (a backtrace is taken at a traced CUDA call)"),
        (any(v.split(":")[0] in ("sync", "all") for v in back.split(",") if v),
         "take a backtrace at the synchronizing calls: --cudabacktrace=sync (or all; :N sets the threshold in ns)"),
        (opts.get("--python-backtrace") == "cuda", "add the Python frames to each backtrace: --python-backtrace=cuda"),
        (sample not in ("none", "false"), "leave CPU sampling on (no --sample=none): nsys's CUDA backtraces need it"),
        (bool(opts.get("-o") or opts.get("--output")), "name the report: -o callsite_broken"),
        ("helpers.workloads.callsite" in program, "profile the lab's loop: python -m helpers.workloads.callsite --variant broken"),
    ]
    wrong = [why for ok, why in checks if not ok]
    return _check(ITEM, name, not wrong, "; ".join(wrong))


# --- 3. the loop without the library's syncs ------------------------------------------------------------
def _small_setup():
    import torch

    from ..workloads import callsite

    return callsite.setup(torch.device("cpu"), seed=0, sizes=(4, 24, 32))


def check_callsites_fixed(fn: Callable, before: Trace, after: Trace, max_per_step: float = SYNCS_PER_STEP_MAX) -> str:
    """The learner's ``fn(model, opt, xs, ys, log)`` (returning ``step(i)``) trains as the loop as written does
    (same batches, same parameters after two log periods, the same logged losses), and their capture of it syncs
    at most ``max_per_step`` times a step."""
    from ..workloads import callsite

    name = "check_callsites_fixed"
    max_per_step = course_bar(max_per_step, SYNCS_PER_STEP_MAX, at_least=False)  # a learner's bar is never looser than the course's
    _learners(fn, "my_step(model, opt, xs, ys, log)", name)
    problem = own_capture_problem(after, before)
    if problem:
        _fail(name, problem)
    problem = behaviour.own_step_problem(fn) or behaviour.same_training_problem(
        fn, callsite.broken_step, _small_setup, steps=2 * callsite.LOG_EVERY, log_every=callsite.LOG_EVERY)
    if problem:
        return _check(ITEM, name, False, problem[0].upper() + problem[1:] + ".")
    key = "sync_points_per_step" if after.has_gpu else "syncing_ops_per_step"
    left = m.sync_stats(after)[key]
    if left > max_per_step:
        where = _reference_sites(after) if (after.events["kind"] == "python").any() else {}
        named = "; ".join(f"{k} {v:g} a step" for k, v in sorted(where.items(), key=lambda kv: -kv[1])[:3])
        return _check(ITEM, name, False, f"your capture still syncs {left:.1f} times a step (want <= {max_per_step})"
                      + (f": {named}" if named else " (capture with with_stack=True to see where)")
                      + ". The loss: F.cross_entropy(..., ignore_index=...) instead of boolean indexing; clipping: no "
                      "error_if_nonfinite; the meter: sums kept as tensors, read every LOG_EVERY steps.")
    slower, paced = behaviour.machine_verdict(before, after)  # never slower beyond noise and the machine's slowdown
    if slower:
        return _check(ITEM, name, False, "Your trace shows: " + slower + ".")
    return (_check(ITEM, name, True, "") + f". Syncs a step: {m.sync_stats(before)[key]:.1f} -> {left:.1f}."
            + (f" Step time not slower once the machine's own slowdown is allowed for: {paced}." if paced else ""))


# --- 4. the environment ---------------------------------------------------------------------------------
PITFALLS = ("launch_blocking", "shm_too_small", "oversubscribed", "throttled")
#: Clock reasons that mean the GPU is held back while it works (not idle, not a setting of the application's own).
_SLOWING = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}


def _reference_pitfalls(s: dict) -> set[str]:
    out = set()
    if str(s.get("env", {}).get("CUDA_LAUNCH_BLOCKING", "0")).strip() not in ("", "0"):
        out.add("launch_blocking")
    loader = s.get("loader", {})
    need = loader.get("num_workers", 0) * loader.get("prefetch_factor", 2) * loader.get("batch_bytes", 0)
    if loader.get("num_workers", 0) > 0 and s.get("dev_shm_free_bytes") is not None and s["dev_shm_free_bytes"] < need:
        out.add("shm_too_small")
    if s.get("torch_threads", 1) * s.get("processes_per_node", 1) > s.get("cores", 1):
        out.add("oversubscribed")
    gpu = s.get("gpu")
    if gpu and set(gpu.get("clock_reasons", [])) & _SLOWING:
        out.add("throttled")
    return out


def _snapshot(**over: Any) -> dict:
    base = {"env": {}, "cores": 16, "torch_threads": 8, "processes_per_node": 1, "dev_shm_free_bytes": 32 * 2**30,
            "loader": {"num_workers": 4, "prefetch_factor": 2, "batch_bytes": 50 * 2**20},
            "gpu": {"name": "NVIDIA A100-SXM4-80GB", "sm_clock_mhz": 1410, "max_sm_clock_mhz": 1410, "clock_reasons": []}}
    return {**base, **over}


def _pitfall_cases() -> list[tuple[str, dict]]:
    mib = 2**20
    return [
        ("a clean workstation", _snapshot()),
        ("CUDA_LAUNCH_BLOCKING=1 left in the environment", _snapshot(env={"CUDA_LAUNCH_BLOCKING": "1"})),
        ("CUDA_LAUNCH_BLOCKING=0", _snapshot(env={"CUDA_LAUNCH_BLOCKING": "0"})),
        ("a container's default 64 MiB /dev/shm, 8 workers of 25 MiB batches",
         _snapshot(dev_shm_free_bytes=64 * mib, loader={"num_workers": 8, "prefetch_factor": 2, "batch_bytes": 25 * mib})),
        ("the same /dev/shm, no workers", _snapshot(dev_shm_free_bytes=64 * mib, loader={"num_workers": 0, "prefetch_factor": 2,
                                                                                          "batch_bytes": 25 * mib})),
        ("no /dev/shm at all (macOS)", _snapshot(dev_shm_free_bytes=None)),
        ("8 ranks on a 32-core node, each with torch's default 16 threads", _snapshot(cores=32, torch_threads=16, processes_per_node=8)),
        ("8 ranks, OMP_NUM_THREADS=4", _snapshot(cores=32, torch_threads=4, processes_per_node=8, env={"OMP_NUM_THREADS": "4"})),
        ("a process pinned to 2 cores with 8 threads", _snapshot(cores=2, torch_threads=8)),
        ("a GPU held back by its temperature", _snapshot(gpu={"name": "NVIDIA L4", "sm_clock_mhz": 1200, "max_sm_clock_mhz": 2040,
                                                              "clock_reasons": ["sw_thermal_slowdown"]})),
        ("an idle GPU at a low clock", _snapshot(gpu={"name": "NVIDIA L4", "sm_clock_mhz": 210, "max_sm_clock_mhz": 2040,
                                                      "clock_reasons": ["gpu_idle"]})),
        ("a power-capped GPU and launch blocking", _snapshot(env={"CUDA_LAUNCH_BLOCKING": "1"},
                                                             gpu={"name": "NVIDIA H100 80GB HBM3", "sm_clock_mhz": 1500,
                                                                  "max_sm_clock_mhz": 1980, "clock_reasons": ["sw_power_cap"]})),
        ("no GPU", _snapshot(gpu=None)),
    ]


def check_environment_pitfalls(fn: Callable[[dict], set]) -> str:
    """The learner's ``fn(snapshot)`` (a :func:`helpers.environment.snapshot` dict) returns the set of
    :data:`PITFALLS` the lab's rules find, on thirteen machines described by the check."""
    name = "check_environment_pitfalls"
    _learners(fn, "environment_pitfalls(snapshot)", name)
    for label, s in _pitfall_cases():
        want = _reference_pitfalls(s)
        got = run_learner(fn, s, name="your environment_pitfalls", returns=(set, frozenset, list, tuple))
        try:
            got = set(got)
        except TypeError:
            return _check(ITEM, name, False, "return a set of pitfall names (strings), e.g. {'launch_blocking'}")
        if got != want:
            missed, extra = sorted(want - got), sorted(got - want)
            return _check(ITEM, name, False, f"on {label}: " + (f"missed {missed}" if missed else "")
                          + ("; " if missed and extra else "") + (f"flagged {extra}, which the rules do not" if extra else "")
                          + f" (the snapshot: {s})")
    return _check(ITEM, name, True, "")
