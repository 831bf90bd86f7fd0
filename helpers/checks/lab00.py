"""Lab 00: tool choice, NVTX phases, GPU idle gaps, nsys command lines."""

from __future__ import annotations

import hashlib
import importlib
import re
import shlex
from collections.abc import Callable
from pathlib import Path

from .. import metrics as m
from .. import thresholds as _th
from ..model import Trace
from ._core import (  # noqa: F401
    CheckFailed,
    _check,
    _close,
    _record,
    data_wait_share,
    learner_number,
    learner_trace_problem,
    run_learner,
    unit_slip,
)

#: The self-check items this lab earns, per track, and the checks of the learner's work each needs.
CREDIT: dict[str, dict[str, tuple[str, ...]]] = {
    "tools": {"gpu": ("check_tool_choice",), "cpu": ("check_tool_choice",)},
    "capture": {"gpu": ("check_annotated_phases", "check_nsys_commands"), "cpu": ("check_annotated_phases", "check_nsys_commands")},
    "gaps": {"gpu": ("check_gpu_idle_share", "check_longest_gap"), "cpu": ("check_gpu_idle_share", "check_longest_gap")},
}


# --- lab 00 ----------------------------------------------------------------------------------
#: The tool-choice questions. Their answers are kept as digests, so the lab holds no importable answer key.
TOOL_QUESTIONS: tuple[str, ...] = (
    'Which phase of my training step takes the time, and is the GPU ever idle?',
    'Why is this one attention kernel slow: is it compute-bound or memory-bound?',
    'Which PyTorch operators take the most time, with their input shapes?',
    'Is the GPU waiting on the DataLoader or on cudaDeviceSynchronize?',
    'How many registers and how much shared memory does my kernel use, and what is its achieved occupancy?',
    'What is the operator breakdown of forward vs backward in my model, from inside Python?',
)
_TOOL_KEY = {  # sha256(f"{question}|{tool}")[:16]
    'Which phase of my training step takes the time, and is the GPU ever idle?': '085898e03224abb0',
    'Why is this one attention kernel slow: is it compute-bound or memory-bound?': '2a54e8b8375ade83',
    'Which PyTorch operators take the most time, with their input shapes?': '9e4fdd13386fbc75',
    'Is the GPU waiting on the DataLoader or on cudaDeviceSynchronize?': 'd5d3119cbf408c32',
    'How many registers and how much shared memory does my kernel use, and what is its achieved occupancy?': 'c1ba1e6f9d3d54bc',
    'What is the operator breakdown of forward vs backward in my model, from inside Python?': '580ff5f5804d9a3a',
}
#: What each question needs to see (the failure message's hint; it names no tool).
_TOOL_NEEDS = {
    'Which phase of my training step takes the time, and is the GPU ever idle?': 'a timeline of the host and the GPU together',
    'Why is this one attention kernel slow: is it compute-bound or memory-bound?': "the inside of one kernel: its throughput against the hardware's limits",
    'Which PyTorch operators take the most time, with their input shapes?': "the framework's own view: operators and their shapes",
    'Is the GPU waiting on the DataLoader or on cudaDeviceSynchronize?': "the host's threads and CUDA calls lined up with the GPU's work",
    'How many registers and how much shared memory does my kernel use, and what is its achieved occupancy?': "one kernel's resources and occupancy, read from hardware counters",
    'What is the operator breakdown of forward vs backward in my model, from inside Python?': 'operators seen from inside Python, by phase',
}


def _tool_is_right(question: str, answer: object) -> bool:
    tool = str(answer).strip().lower()
    return hashlib.sha256(f"{question}|{tool}".encode()).hexdigest()[:16] == _TOOL_KEY[question]


def check_tool_choice(answers: dict[str, str]) -> str:
    """Each question of :data:`TOOL_QUESTIONS` answered with ``"nsys"``, ``"ncu"`` or ``"torch"``."""
    if not isinstance(answers, dict):
        return _check("tools", "check_tool_choice", False, "Return a dict: {question: 'nsys' | 'ncu' | 'torch'}.")
    wrong = [q for q in TOOL_QUESTIONS if not _tool_is_right(q, answers.get(q, ""))]
    hint = "; ".join(f"{q!r} needs {_TOOL_NEEDS[q]}" for q in wrong[:2])
    return _check("tools", "check_tool_choice", not wrong,
                  f"{len(wrong)} of {len(TOOL_QUESTIONS)} tool choices are off. {hint}. Which tool shows that?")


def check_annotated_phases(trace: Trace, phases: tuple[str, ...] = ("forward", "backward", "optimizer")) -> str:
    """Every profiled step holds a range for each phase (NVTX and record_function, via helpers.annotate)."""
    steps = trace.steps
    if steps.empty:
        return _check("capture", "check_annotated_phases", False,
                      "No steps found: profile with helpers.capture (it calls prof.step() after every step), "
                      "or name your step ranges 'step N'.")
    ann = trace.events[trace.events["kind"] == "annotation"]
    missing = []
    for _, st in steps.iterrows():
        inside = ann[(ann["rank"] == st["rank"]) & (ann["start_us"] >= st["start_us"]) & (ann["end_us"] <= st["end_us"])]
        names = set(inside["name"].str.lower())
        missing += [f"step {st['step']}: {p}" for p in phases if p not in names]
    return _check("capture", "check_annotated_phases", not missing,
                  f"Missing phase ranges ({', '.join(missing[:4])}). Wrap each phase of train_step in "
                  "`with annotate(\"forward\"):` etc. so it shows on the NVTX / ranges lane.")


def _idle_share_mistakes(trace: Trace) -> dict[str, float]:
    """The idle shares the common mistakes give on ``trace``, to name the one a learner made."""
    ev = trace.events
    steps = float(trace.steps["dur_us"].sum()) if not trace.steps.empty else float(m.windows(trace)["dur_us"].sum())
    gpu = ev[(ev["device"] >= 0) & ev["kind"].isin(("kernel", "memcpy", "memset", "collective")) & (ev["step"] >= 0)]
    util = m.gpu_utilization(trace)
    out = {"the busy share, not the idle share": util}
    if steps > 0:
        out["summing GPU events without merging overlaps"] = 1.0 - float(gpu["dur_us"].sum()) / steps
    span = trace.span_us
    if span > 0:
        us, ue = m.merge_intervals(gpu["start_us"].to_numpy(), gpu["end_us"].to_numpy())
        out["dividing by the whole capture instead of the steps"] = 1.0 - float((ue - us).sum()) / span
    return out


def _guarded_figure(fn: Callable[[Trace], float], trace: Trace) -> float:
    try:
        return learner_number(fn, trace, name="your function")
    except CheckFailed:
        _record("gaps", "check_gpu_idle_share", False)
        raise


def check_gpu_idle_share(fn: Callable[[Trace], float], trace: Trace) -> str:
    """Your ``fn(trace)`` gives the share of step time the GPU is idle, within 2 percentage points."""
    want = 1.0 - m.gpu_utilization(trace)
    got = _guarded_figure(fn, trace)
    ok = _close(got, want, 0.0, 0.02)
    why = ""
    if not ok:
        near = [name for name, v in _idle_share_mistakes(trace).items() if _close(got, v, 0.0, 0.01) and not _close(v, want, 0.0, 0.02)]
        why = f" Your figure is what {near[0]} gives on this trace." if near else ""
    else:  # one stream hides some mistakes: try the function on a recorded trace whose GPU work overlaps
        from ..course import recorded

        other = recorded("h2d_copy", "fixed")  # copies on a side stream under the compute stream's kernels
        want2, got2 = 1.0 - m.gpu_utilization(other), _guarded_figure(fn, other)
        if not _close(got2, want2, 0.0, 0.02):
            ok = False
            near = [name for name, v in _idle_share_mistakes(other).items() if _close(got2, v, 0.0, 0.01)]
            why = (f" On this trace it is right, but on a trace whose copies overlap its kernels (h2d_copy, fixed) your "
                   f"function gives {got2:.3f} against {want2:.3f}" + (f": that is {near[0]}." if near else "."))
    return _check("gaps", "check_gpu_idle_share", ok,
                  f"Your idle share is {got:.3f}, the trace says {want:.3f}.{why} Merge overlapping GPU events "
                  "(kernel, memcpy, memset, collective) into one busy union, clip it to the step windows "
                  "(trace.steps), and divide the idle time by the steps' time.")


def check_longest_gap(answer_ms: float, trace: Trace) -> str:
    """The longest GPU idle gap inside the profiled steps, read off the timeline (10% tolerance)."""
    gaps = m.idle_gaps(trace)
    want = float(gaps["dur_us"].max() / 1e3) if not gaps.empty else 0.0
    answer = float(answer_ms)
    longer = int((gaps["dur_us"] / 1e3 > answer * 1.1).sum()) if not gaps.empty else 0
    slip = unit_slip(answer, want)
    seen = (slip.strip(" ()") if slip else f"{longer} gaps on the GPU lanes are longer than {answer:g} ms" if longer else
            f"no GPU gap in the steps is as long as {answer:g} ms: you may be measuring a stretch that holds a kernel")
    return _check("gaps", "check_longest_gap", _close(answer, want, 0.10, 0.05),
                  f"{answer:g} ms is not the longest gap: {seen}. Zoom into each step "
                  "(plots.timeline(trace, step=k)) and measure the widest white stretch on the GPU lane.")


# --- Nsight ------------------------------------------------------------------------------------
#: The three nsys command lines lab 00 asks for, and what each must do.
NSYS_TASKS = {
    "capture range": "record only between torch.cuda.profiler.start() and stop() (the workload's --nsys-range)",
    "time window": "skip start-up with a delay, then record for a fixed duration that ends while steps still run",
    "gpu metrics": "sample the GPU's hardware counters on device 0 as well",
}


def parse_nsys_profile(command: list[str] | str) -> tuple[dict[str, str], list[str]]:
    """Split an ``nsys profile`` command into ({option: value}, program); raises ValueError if it is not one.

    Every ``nsys profile`` option takes a value (``--stats=true``, ``-o name``), so an option token
    without ``=`` consumes the next token; the first other token starts the program.
    """
    tokens = shlex.split(command) if isinstance(command, str) else [str(t) for t in command]
    if tokens[:2] != ["nsys", "profile"]:
        raise ValueError(f"it starts with {' '.join(tokens[:2])!r}, not 'nsys profile'")
    options: dict[str, str] = {}
    i = 2
    while i < len(tokens) and tokens[i].startswith("-"):
        name, eq, value = tokens[i].partition("=")
        if not eq:
            if i + 1 >= len(tokens):
                raise ValueError(f"{name} has no value")
            value, i = tokens[i + 1], i + 1
        options[_NSYS_ALIASES.get(name, name)] = value
        i += 1
    return options, tokens[i:]


_NSYS_ALIASES = {"-t": "--trace", "-o": "--output", "-y": "--delay", "-d": "--duration", "-c": "--capture-range",
                 "-s": "--sample", "-f": "--force-overwrite", "--gpu-metrics-device": "--gpu-metrics-devices"}


def _seconds(value: str | None) -> float:
    try:
        return float(value) if value is not None else float("nan")
    except ValueError:
        return float("nan")


def _workload_of(program: list[str]) -> tuple[str, str, int, int] | None:
    """(workload, variant, steps, warmup) of ``python -m helpers.workloads.W ...``; None for another program."""
    if "-m" not in program or program.index("-m") + 1 >= len(program):
        return None
    module = program[program.index("-m") + 1]
    if not module.startswith("helpers.workloads."):
        return None
    name = module.rsplit(".", 1)[1]
    try:
        mod = importlib.import_module(module)
        source = Path(mod.__file__ or "").read_text()
    except (ImportError, OSError):
        return None
    found = re.search(r"default_steps=(\d+)", source)
    args = dict(zip(program[:-1], program[1:]))
    variants = getattr(mod, "VARIANTS", ("broken",))
    try:
        steps = int(args.get("--steps", found.group(1) if found else 20))
        warmup = int(args.get("--warmup", 3))
    except ValueError:
        return None
    return name, args.get("--variant", variants[0]), steps, warmup


def window_problems(delay_s: float, duration_s: float, program: list[str]) -> list[str]:
    """Whether an nsys time window holds steps of a course workload: start after its start-up, end before it ends.

    The program's length is its steps (``--steps`` plus ``--warmup``) at the fastest step time recorded for
    its workload and variant (data/manifest.json), after the shortest start-up; the start-up bound is the
    longest measured (helpers/thresholds.py, ``NSYS_WINDOW_*``). Another program's length is unknown: [].
    """
    from ..course import manifest

    found = _workload_of(program)
    if found is None:
        return []
    name, variant, steps, warmup = found
    times = [e["step_ms"] for e in manifest() if e["workload"] == name and e["variant"] == variant
             and e.get("tag") in ("h200", "cpu") and e.get("step_ms")]
    if not times:
        return []
    step_s = min(times) / 1e3
    ends_s = _th.NSYS_WINDOW_STARTUP_MIN_S + (steps + warmup) * step_s
    problems = []
    if delay_s < _th.NSYS_WINDOW_STARTUP_MAX_S:
        problems.append(f"--delay={delay_s:g} may start inside start-up: the script's imports and set-up took up to "
                        f"{_th.NSYS_WINDOW_STARTUP_MAX_S:g} s before its first step on the machines we measured")
    if delay_s + duration_s > ends_s:
        problems.append(f"the window ends at {delay_s + duration_s:g} s, but {steps + warmup} steps of {step_s * 1e3:.1f} ms "
                        f"(the fastest recorded {name}:{variant} step) can be done {ends_s:.1f} s after launch: give the "
                        "script more --steps, or a shorter window, so the window holds steps and nothing else")
    return problems


def nsys_command_problems(task: str, command: list[str] | str) -> list[str]:
    """What is wrong with ``command`` as the lab-00 answer to ``task`` (one of :data:`NSYS_TASKS`); [] if nothing."""
    try:
        opts, program = parse_nsys_profile(command)
    except ValueError as exc:
        return [str(exc)]
    problems = []
    traced = set(opts.get("--trace", "").split(","))
    if not {"cuda", "nvtx"} <= traced:
        problems.append(f"--trace={opts.get('--trace', '')} misses {sorted({'cuda', 'nvtx'} - traced)} "
                        "(kernels and CUDA calls need cuda, your phase ranges nvtx)")
    if "--output" not in opts:
        problems.append("no -o NAME: the report would get a default name you then have to hunt for")
    if not program or not program[0].startswith("python"):
        problems.append("the profiled program (python -m helpers.workloads...) is missing after the options")
    ranged = "--capture-range" in opts
    if task == "capture range":
        if opts.get("--capture-range") != "cudaProfilerApi":
            problems.append("no --capture-range=cudaProfilerApi: nsys would record start-up too")
        elif opts.get("--capture-range-end", "stop-shutdown") not in ("stop", "stop-shutdown"):
            problems.append("--capture-range-end should be stop (one range, ended at torch.cuda.profiler.stop())")
        if "--nsys-range" not in program:
            problems.append("the workload needs --nsys-range, or it never calls torch.cuda.profiler.start()/stop()")
    elif task == "time window":
        delay, duration = _seconds(opts.get("--delay")), _seconds(opts.get("--duration"))
        if not delay > 0:
            problems.append("no --delay=SECONDS (> 0): start-up (imports, cuDNN autotuning, warm-up) would be recorded")
        if not duration > 0:
            problems.append("no --duration=SECONDS (> 0): nsys would record until the program ends")
        if delay > 0 and duration > 0:
            problems += window_problems(delay, duration, program)
        if ranged:
            problems.append("a time window needs no --capture-range (with one, the delay counts from the range)")
    elif task == "gpu metrics":
        if opts.get("--gpu-metrics-devices") not in ("0", "all"):
            problems.append("no --gpu-metrics-devices=0: GPU metrics are sampled only on the devices named")
    else:
        problems.append(f"unknown task {task!r}; tasks are {list(NSYS_TASKS)}")
    return problems


def check_nsys_commands(commands: dict[str, list[str] | str]) -> str:
    """Each of lab 00's nsys tasks (:data:`NSYS_TASKS`) answered with a command line that does it."""
    problems = [f"{task}: {p}" for task in NSYS_TASKS
                for p in (nsys_command_problems(task, commands[task]) if task in commands else ["missing"])]
    return _check("capture", "check_nsys_commands", not problems,
                  f"{len(problems)} problem(s): " + "; ".join(problems[:3]) +
                  ". helpers.profiling.nsys_command(program, output=..., capture_range=..., delay_s=..., "
                  "duration_s=..., gpu_metrics_device=...) builds them.")
