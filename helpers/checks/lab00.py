"""Lab 00: tool choice, NVTX phases, GPU idle gaps, nsys command lines."""

from __future__ import annotations

import importlib
import math
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import metrics as m
from .. import seal as _seal
from .. import thresholds as _th
from ..errors import ArgumentError, TraceError
from ..model import Trace
from ..outputs import read_regular
from ..render import plural
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
from ._sealed import digest

#: The self-check items this lab earns, per track, and the checks of the learner's work each needs.
# The credit this lab's exercises earn is declared in helpers.checks.exercise.EXERCISES.


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
_TOOL_KEY = {  # _sealed.digest("tool", question, tool): the answers as salted digests only
    'Which phase of my training step takes the time, and is the GPU ever idle?': '3f1765626c4ca144db7f',
    'Why is this one attention kernel slow: is it compute-bound or memory-bound?': '040a7d43b7cbd922042a',
    'Which PyTorch operators take the most time, with their input shapes?': '3eed9f21a2214551de9e',
    'Is the GPU waiting on the DataLoader or on cudaDeviceSynchronize?': 'f9a86dfbe3239a97c911',
    'How many registers and how much shared memory does my kernel use, and what is its achieved occupancy?': '1b25c00c03807c6e949d',
    'What is the operator breakdown of forward vs backward in my model, from inside Python?': 'f6fdb5b166998e01d453',
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


def check_tool_choice(answers: dict[str, str]) -> str:
    """Each question of :data:`TOOL_QUESTIONS` answered with ``"nsys"``, ``"ncu"`` or ``"torch"``."""
    if not isinstance(answers, dict):
        return _check("tools", "check_tool_choice", False, "Return a dict: {question: 'nsys' | 'ncu' | 'torch'}.")
    # the learner's answer, normalised, against the stored digest: no function here says which tool is right
    wrong = [q for q in TOOL_QUESTIONS if digest("tool", q, str(answers.get(q, "")).strip().lower()) != _TOOL_KEY[q]]
    hint = "; ".join(f"{q!r} needs {_TOOL_NEEDS[q]}" for q in wrong[:2])
    return _check("tools", "check_tool_choice", not wrong,
                  f"{len(wrong)} of {len(TOOL_QUESTIONS)} tool choices are off. {hint}. Which tool shows that?")


def check_annotated_phases(trace: Trace, phases: tuple[str, ...] = ("forward", "backward", "optimizer")) -> str:
    """Every profiled step holds a range for each phase (NVTX and record_function, via helpers.annotate), and each
    range holds its phase's work: the forward and the optimizer PyTorch ops, the backward autograd's. The course's
    three phases are always asked for (``phases`` may add more, never drop one): empty ranges around no training, or
    no phases asked for, annotate nothing."""
    phases = tuple(dict.fromkeys((*PHASES, *(str(p).lower() for p in phases))))
    steps = trace.steps
    if steps.empty:
        return _check("capture", "check_annotated_phases", False,
                      "No steps found: profile with helpers.capture (it calls prof.step() after every step), "
                      "or name your step ranges 'step N'.")
    ev = trace.events
    ann = ev[ev["kind"] == "annotation"]
    ops = ev[(ev["kind"] == "cpu_op") & (ev["device"] < 0)]
    missing: dict[str, list[int]] = {}
    empty: dict[str, list[int]] = {}
    for _, st in steps.iterrows():
        inside = ann[(ann["rank"] == st["rank"]) & (ann["start_us"] >= st["start_us"]) & (ann["end_us"] <= st["end_us"])]
        names = inside["name"].str.lower()
        for p in phases:
            if p not in set(names):
                missing.setdefault(p, []).append(int(st["step"]))
        for p in PHASES:
            ranges = inside[names == p]
            if len(ranges) and not any(_phase_work(ops[ops["rank"] == st["rank"]], p, r) for _, r in ranges.iterrows()):
                empty.setdefault(p, []).append(int(st["step"]))
    if missing:
        return _check("capture", "check_annotated_phases", False,
                      f"Missing phase ranges: {_phase_words(missing, len(steps))}. Wrap each phase of train_step in "
                      "`with annotate(\"forward\"):` etc. so it shows on the NVTX / ranges lane.")
    return _check("capture", "check_annotated_phases", not empty,
                  f"Phase ranges that hold none of their phase's work: {_phase_words(empty, len(steps))}. Each range must "
                  "hold its phase of the training step (the model's forward and the loss; loss.backward(); opt.step() "
                  "and zero_grad), so that the lane shows where the step's time goes.")


def _phase_words(where: dict[str, list[int]], n_steps: int) -> str:
    """``{"forward": [0, 1, 2]}`` in words: each phase and the profiled steps its range is wrong in, all of them
    said once ("'forward', in every one of the 5 profiled steps") instead of an item per step."""
    def steps(nums: list[int]) -> str:
        if len(nums) == n_steps:
            return f"in every one of the {n_steps} profiled steps" if n_steps > 1 else "in the profiled step"
        shown = ", ".join(map(str, nums[:4])) + (", ..." if len(nums) > 4 else "")
        return f"in step{'s' if len(nums) > 1 else ''} {shown}"

    return "; ".join(f"'{p}', {steps(nums)}" for p, nums in where.items())


#: The phases of a training step every annotated capture shows (check_annotated_phases).
PHASES = ("forward", "backward", "optimizer")


def _phase_work(ops: Any, phase: str, rng: Any) -> bool:
    """Whether the range ``rng`` of ``phase`` holds that phase's work: PyTorch ops running during it (any thread:
    backward runs on autograd's), for the backward the autograd engine's."""
    during = ops[(ops["start_us"] >= rng["start_us"]) & (ops["start_us"] < rng["end_us"])]
    if phase == "backward":
        return bool(during["name"].astype(str).str.startswith("autograd::engine::evaluate_function").any())
    return not during.empty


def _idle_share_mistakes(trace: Trace) -> dict[str, float]:
    """The idle shares the common mistakes give on ``trace``, to name the one a learner made."""
    ev = trace.events
    steps = float(trace.steps["dur_us"].sum()) if not trace.steps.empty else float(m.windows(trace)["dur_us"].sum())
    gpu = ev[(ev["device"] >= 0) & ev["kind"].isin(("kernel", "memcpy", "memset", "collective")) & (ev["step"] >= 0)]
    util = m.gpu_utilization(trace)
    out = {"taking the busy share instead of the idle share": util}
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


def _side(got: float, want: float) -> str:
    """Which side of the right figure a wrong one lies on, without the figure."""
    return "above" if got > want else "below"


#: What opens the trace of lab 00's gap exercises (exercise 4's idle share, exercise 5's longest gap): both passed.
GAPS_SEAL = "check_gpu_idle_share and check_longest_gap"


def seal_gaps(trace: Trace) -> Trace:
    """Seal the trace of lab 00's gap exercises until both pass: until then the metrics that would give their answers
    in one call (``metrics.idle_gaps``, ``gpu_utilization``, ``gpu_busy``, ``idle_by_cause``, ``idle_cost_by_cause``),
    called from your code, and ``helpers.diagnose`` answer that the exercise comes first, on this trace, a copy of
    it, or the same file loaded again (:mod:`helpers.seal`). Returns the trace."""
    return _seal.seal(trace, GAPS_SEAL, scope="figures")


def check_gpu_idle_share(fn: Callable[[Trace], float], trace: Trace) -> str:
    """Your ``fn(trace)`` gives the share of step time the GPU is idle, within 2 percentage points."""
    want = 1.0 - m.gpu_utilization(trace)
    got = _guarded_figure(fn, trace)
    ok = _close(got, want, 0.0, 0.02)
    why = ""
    if not ok:
        near = [name for name, v in _idle_share_mistakes(trace).items() if _close(got, v, 0.0, 0.01) and not _close(v, want, 0.0, 0.02)]
        why = f" Your figure is what {near[0]} gives on this trace." if near else ""
        lead = f"Your idle share is {got:.3f}, {_side(got, want)} the trace's (more than 2 points off)."
        figure = got
    else:  # one stream hides some mistakes: try the function on a recorded trace whose GPU work overlaps
        from ..course import recorded

        other = recorded("h2d_copy", "fixed")  # copies on a side stream under the compute stream's kernels
        want2, got2 = 1.0 - m.gpu_utilization(other), _guarded_figure(fn, other)
        lead, figure = f"Your idle share is {got:.3f}, right on this trace.", got2
        if not _close(got2, want2, 0.0, 0.02):
            ok = False
            near = [name for name, v in _idle_share_mistakes(other).items() if _close(got2, v, 0.0, 0.01)]
            lead = (f"Your idle share is right on this trace ({got:.3f}), but on a trace whose copies overlap its "
                    f"kernels (h2d_copy, fixed) your function gives {got2:.3f}, {_side(got2, want2)} the share that "
                    "trace has" + (f": that is what {near[0]} gives." if near else "."))
    if not 0.0 <= figure <= 1.0:  # a share of time: an idle time counted past the steps' own, or a busy time over it
        why += (f" A share of step time lies between 0 and 1, and {figure:.3f} does not: "
                + ("more busy time was counted than the steps last (overlapping events counted twice, or events "
                   "outside the steps)." if figure < 0 else "more idle time was counted than the steps last."))
    # The right figure is never printed: the learner's function has to find it (a printed value can be pasted).
    verdict = _check("gaps", "check_gpu_idle_share", ok,
                     f"{lead}{why} Merge overlapping GPU events "
                     "(kernel, memcpy, memset, collective) into one busy union, clip it to the step windows "
                     "(trace.steps), and divide the idle time by the steps' time.")
    _seal.open_seal("check_gpu_idle_share")
    return verdict


def check_longest_gap(answer_ms: float, trace: Trace) -> str:
    """The longest GPU idle gap inside the profiled steps, read off the timeline (10% tolerance)."""
    gaps = m.idle_gaps(trace)
    want = float(gaps["dur_us"].max() / 1e3) if not gaps.empty else 0.0
    answer = float(answer_ms)
    longer = int((gaps["dur_us"] / 1e3 > answer * 1.1).sum()) if not gaps.empty else 0
    slip = unit_slip(answer, want)
    seen = (slip.strip(" ()") if slip else f"{plural(longer, 'gap')} on the GPU lanes {'is' if longer == 1 else 'are'} longer than {answer:g} ms" if longer else
            f"no GPU gap in the steps is as long as {answer:g} ms: you may be measuring a stretch that holds a kernel")
    verdict = _check("gaps", "check_longest_gap", _close(answer, want, 0.10, 0.05),
                     f"{answer:g} ms is not the longest gap: {seen}. Zoom into each step "
                     "(plots.timeline(trace, step=k)) and measure the widest white stretch on the GPU lane.")
    _seal.open_seal("check_longest_gap")
    return verdict


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
        raise ArgumentError(f"it starts with {' '.join(tokens[:2])!r:.80}, not 'nsys profile'")
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
        source = read_regular(mod.__file__ or "", 1 << 20, "workload source").decode("utf-8", "replace")
    except (ImportError, OSError, TraceError):
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
        needed = math.ceil((delay_s + duration_s - _th.NSYS_WINDOW_STARTUP_MIN_S) / step_s) - warmup
        problems.append(f"the window ends at {delay_s + duration_s:g} s, but the script may be over long before: its "
                        f"{plural(steps + warmup, 'step')} of {step_s * 1e3:.1f} ms (the fastest recorded {name}:{variant} "
                        f"step) take {(steps + warmup) * step_s:.1f} s, so on a machine that starts in "
                        f"{_th.NSYS_WINDOW_STARTUP_MIN_S:g} s (start-up varies from about that to "
                        f"{_th.NSYS_WINDOW_STARTUP_MAX_S:g} s) it ends {ends_s:.1f} s after launch. For the window to hold "
                        f"steps on any of those machines, run the script with --steps {needed} or more, or end the "
                        "window sooner")
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
                  f"{plural(len(problems), 'problem')}: " + "; ".join(problems[:3]) +
                  ". helpers.profiling.nsys_command(program, output=..., capture_range=..., delay_s=..., "
                  "duration_s=..., gpu_metrics_device=...) builds them.")


# --- writing the profiler call yourself ---------------------------------------------------------
#: The column of ``key_averages().table()`` that each ``sort_by`` key sorts (torch names the GPU
#: columns after the device: "Self CUDA"; ``*_cuda_*`` and ``*_device_*`` keys are the same attribute).
TABLE_COLUMNS = {
    "self_cpu_time_total": "Self CPU", "cpu_time_total": "CPU total", "cpu_time": "CPU time avg",
    "self_cuda_time_total": "Self CUDA", "cuda_time_total": "CUDA total", "cuda_time": "CUDA time avg",
    "self_device_time_total": "Self CUDA", "device_time_total": "CUDA total", "device_time": "CUDA time avg",
    "count": "# of Calls",
}
_UNIT_US = {"s": 1e6, "ms": 1e3, "us": 1.0, "ns": 1e-3}


def _table_value(text: str) -> float:
    """A table cell as a number: '1.234ms' -> 1234.0 (µs), '12.5%' -> 12.5, '72' -> 72.0; NaN if neither."""
    found = re.fullmatch(r"(-?[\d.]+)\s*(s|ms|us|ns|%)?", text.strip())
    if not found:
        return float("nan")
    value = float(found.group(1))
    return value * _UNIT_US.get(found.group(2) or "", 1.0)


def parse_profiler_table(table: str) -> tuple[list[str], list[dict[str, str]]]:
    """The headers and rows (header -> cell text) of a ``prof.key_averages().table(...)`` string.

    The columns are cut where the table's first ruler of dashes has its runs, as torch lays them out.
    Raises ValueError when ``table`` is not such a table.
    """
    lines = str(table).splitlines()
    rulers = [i for i, line in enumerate(lines) if line.strip() and set(line.strip()) <= {"-", " "}]
    if len(rulers) < 2:
        raise ArgumentError("it has no ruler lines of dashes")
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[rulers[0]])]
    cut = lambda line: [line[a:b].strip() for a, b in spans]  # noqa: E731
    headers = cut(lines[rulers[0] + 1])
    if "Name" not in headers:
        raise ValueError("it has no Name column")
    end = rulers[2] if len(rulers) > 2 else len(lines)
    rows = [dict(zip(headers, cut(line))) for line in lines[rulers[1] + 1:end] if line.strip()]
    return headers, rows


def _sorted_by(rows: list[dict[str, str]], column: str) -> bool:
    values = [_table_value(r.get(column, "")) for r in rows]
    return all(v == v for v in values) and all(a >= b for a, b in zip(values, values[1:]))


def _schedule_phases(prof: object, limit: int = 64) -> tuple[int, int, int] | None:
    """(wait, warmup, active) of a profiler's schedule, read by asking it for each step's action; None
    when the profiler has no schedule (it records every step from start to end)."""
    from torch.profiler import ProfilerAction

    fn = getattr(prof, "schedule", None)
    if fn is None or getattr(fn, "__name__", "") == "_default_schedule_fn":
        return None
    # a schedule is any callable the learner passed: it runs under the same guard as their functions
    actions = run_learner(lambda: [fn(k) for k in range(limit)], name="your profiler's schedule", note=False)
    recording = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
    first = next((k for k, a in enumerate(actions) if a != ProfilerAction.NONE), limit)
    warm = 0
    while first + warm < limit and actions[first + warm] == ProfilerAction.WARMUP:
        warm += 1
    active = 0
    while first + warm + active < limit and actions[first + warm + active] in recording:
        active += 1
        if actions[first + warm + active - 1] == ProfilerAction.RECORD_AND_SAVE:
            break
    return first, warm, active


def _newest_trace(trace_dir: Path) -> Path | None:
    files = [p for p in trace_dir.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))] if trace_dir.is_dir() else []
    return max(files, key=lambda p: p.stat().st_mtime_ns) if files else None


#: The most bytes of the learner's own short capture read (a few profiled steps write a few MB).
_OWN_TRACE_LIMIT = 256 << 20


def _read_json_trace(path: Path) -> dict:
    import gzip
    import json

    from ..outputs import open_regular, size_words

    try:  # opened the one safe way (a pipe in the trace folder cannot block the check) and read bounded
        with open_regular(path, "trace") as raw:
            data = (gzip.GzipFile(fileobj=raw) if path.name.endswith(".gz") else raw).read(_OWN_TRACE_LIMIT + 1)
        if len(data) > _OWN_TRACE_LIMIT:
            raise ValueError(f"over {size_words(_OWN_TRACE_LIMIT)}, far more than a few profiled steps write")
        doc = json.loads(data)
    except TraceError as exc:
        raise ValueError(str(exc).split(": ", 1)[-1]) from None
    except (RecursionError, EOFError) as exc:
        raise ValueError(type(exc).__name__) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError("it has no traceEvents list")
    return doc


def check_my_profiler(prof: object, table: str, trace_dir: str | Path, *, wait: int = 1, warmup: int = 1,
                      active: int = 3, sort_by: str = "self_cpu_time_total", row_limit: int = 10) -> str:
    """Your own ``torch.profiler.profile`` run: its trace, written by ``on_trace_ready`` into ``trace_dir`` by
    this kernel, holds the ``active`` steps only, with shapes (and kernels, on a GPU); ``table`` is its
    ``key_averages().table(sort_by=sort_by, row_limit=row_limit)``."""
    import os

    import torch

    name = "check_my_profiler"
    if not isinstance(prof, torch.profiler.profile):
        return _check("capture", name, False, f"The first value must be your profiler (the `prof` of `with profile(...) as prof:`), "
                      f"not a {type(prof).__name__}.")
    want = (wait, warmup, active)
    phases = _schedule_phases(prof)
    steps_run = int(getattr(prof, "step_num", 0))
    if phases is not None and phases != want:
        return _check("capture", name, False,
                      f"Your schedule is wait={phases[0]}, warmup={phases[1]}, active={phases[2]}; the exercise asks for "
                      f"schedule(wait={wait}, warmup={warmup}, active={active}): wait skips the loop's own first step, "
                      "warmup runs the profiler and throws its start-up away, active is what the trace keeps.")
    if phases is None:
        return _check("capture", name, False,
                      "Your profiler has no schedule: it records from the start of the `with` block to its end, every step "
                      "with the first one's one-off costs and the profiler's own start-up, and marks no ProfilerStep ranges. "
                      f"Pass schedule=schedule(wait={wait}, warmup={warmup}, active={active}) and call prof.step() after each step.")
    if not isinstance(trace_dir, (str, os.PathLike)):
        return _check("capture", name, False, f"The third value must be the folder your on_trace_ready writes into "
                      f"(the trace_dir you were given), not a {type(trace_dir).__name__}.")
    trace_dir = Path(trace_dir)
    newest = _newest_trace(trace_dir)
    if newest is None:
        if getattr(prof, "on_trace_ready", None) is None:
            why = ("your profiler has no on_trace_ready, so it kept the trace in memory and wrote nothing: pass "
                   "on_trace_ready=tensorboard_trace_handler(str(trace_dir))")
        elif steps_run < sum(phases):
            why = (f"the schedule never finished its active phase: it hands the trace to on_trace_ready after "
                   f"{sum(phases)} calls of prof.step() (wait + warmup + active) and your loop made {steps_run}; "
                   "call prof.step() once after every step")
        else:
            why = "on_trace_ready wrote somewhere else: give it the trace_dir you were passed"
        return _check("capture", name, False, f"No trace file in {trace_dir}: {why}.")
    try:
        doc = _read_json_trace(newest)
    except (OSError, ValueError) as exc:
        return _check("capture", name, False, f"{newest.name} is not a Chrome-trace JSON file ({exc}); let "
                      "tensorboard_trace_handler or prof.export_chrome_trace write it.")
    events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
    pids = {e.get("pid") for e in events if isinstance(e.get("pid"), int)}
    if os.getpid() not in pids:
        return _check("capture", name, False,
                      f"{newest.name} was written by another process (pid {sorted(pids)[:2]}), not this kernel "
                      f"(pid {os.getpid()}): run your profiler here, into the trace_dir you were given.")
    steps = {e.get("name") for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    if steps_run < sum(phases):  # the profiler's exit saved a cut-short cycle (its last range holds no whole step)
        reached = ("never reached its active phase, so the trace holds no step" if steps_run <= wait + warmup else
                   f"ended {sum(phases) - steps_run} step(s) before its active phase did")
        return _check("capture", name, False,
                      f"Your loop called prof.step() {steps_run} times and the schedule needs {sum(phases)} (wait {wait} + "
                      f"warmup {warmup} + active {active}): it {reached}. Run {sum(phases)} steps, prof.step() after each.")
    if len(steps) != active:
        return _check("capture", name, False,
                      f"{newest.name} holds {len(steps)} ProfilerStep ranges, the schedule's active phase {active}: call "
                      "prof.step() once after each step, and run wait + warmup + active steps (one cycle).")
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    if not any("Input Dims" in (e.get("args") or {}) for e in ops):
        return _check("capture", name, False, "The trace has no input shapes: pass record_shapes=True, so each "
                      "operator carries the shapes it ran on (the table can then group by them).")
    if torch.cuda.is_available() and not any(e.get("cat") == "kernel" for e in events):
        return _check("capture", name, False, "The trace has no GPU kernels: on a GPU, list ProfilerActivity.CUDA "
                      "in activities too, or you see only the host's side of each launch.")
    column = TABLE_COLUMNS.get(sort_by, sort_by)
    try:
        headers, rows = parse_profiler_table(table)
    except ValueError as exc:
        return _check("capture", name, False, f"The second value must be the text of prof.key_averages().table(...) "
                      f"({exc}); return the string, do not print it.")
    if column not in headers:
        return _check("capture", name, False, f"Your table has no {column!r} column (it has {', '.join(headers[1:5])}, ...): "
                      f"sort_by={sort_by!r} sorts by it; on a GPU list ProfilerActivity.CUDA for the CUDA columns.")
    names = {e.get("name") for e in events if e.get("cat") in ("cpu_op", "user_annotation")}
    if len(rows) != row_limit and not (len(rows) < row_limit and len(rows) >= len(names)):
        return _check("capture", name, False, f"Your table has {len(rows)} rows: row_limit={row_limit} keeps the top {row_limit}.")
    if not _sorted_by(rows, column):
        by_value = sorted(headers[1:], key=lambda c: c.endswith("%"))  # 'CPU total' before 'CPU total %'
        other = next((c for c in by_value if c != column and _sorted_by(rows, c)), None)
        seen = f"it is sorted by {other!r}" if other else "it is not sorted by any of its columns"
        return _check("capture", name, False, f"Your table is not sorted by {column!r}: {seen}. "
                      f"Pass sort_by={sort_by!r} to table().")
    # The table must be this profile's: its rows are events of the trace file (torch cuts long names to
    # "..."), and the calls of its operators are the trace's.
    every = {str(e.get("name")) for e in events}
    unknown = [r["Name"] for r in rows if r["Name"] != "ProfilerStep*" and r["Name"] not in every
               and not (r["Name"].endswith("...") and any(n.startswith(r["Name"][:-3]) for n in every))]
    counted = [(r, sum(1 for e in ops if e.get("name") == r["Name"])) for r in rows if r["Name"] in names]
    mismatched = [r["Name"] for r, n in counted if "# of Calls" in r and _table_value(r["# of Calls"]) != n and n]
    if unknown or len(mismatched) > len(counted) // 2:
        return _check("capture", name, False, "Your table's operators and call counts are not those of the trace in "
                      f"{trace_dir.name}: make the table from the same profiler, after its loop (prof.key_averages()).")
    return _check("capture", name, True, "")


# --- the launch queue ------------------------------------------------------------------------------
#: The two readings of the launch-to-start offset lab 00 asks for.
QUEUE_READINGS = {
    "empty": "each kernel starts right after its launch call, so the GPU waits on the host: launch-bound when the host's time is launches",
    "deep": "kernels start milliseconds after their launch calls: the host runs far ahead and the GPU is the bottleneck",
}


def _queue_mistakes(trace: Trace) -> dict[str, float]:
    """The offsets the common mistakes give on ``trace``, to name the one a learner made."""
    ev = trace.events
    calls = ev[(ev["kind"] == "runtime") & ev["name"].str.startswith(("cudaLaunch", "cuLaunch"))]
    kernels = ev[ev["kind"].isin(("kernel", "collective")) & (ev["correlation"] >= 0)]
    pairs = kernels[["rank", "correlation", "start_us"]].merge(
        calls[["rank", "correlation", "start_us", "end_us"]].drop_duplicates(["rank", "correlation"]),
        on=["rank", "correlation"], suffixes=("_kernel", "_call"))
    if pairs.empty:
        return {}
    return {"measuring from the launch call's end, not its start": float((pairs["start_us_kernel"] - pairs["end_us"]).median())}


def _queue_kind(trace: Trace) -> str | None:
    """'empty' or 'deep' as the trace's median launch-to-start offset reads; None in between (or no pairs)."""
    offset = m.launch_stats(trace)["median_launch_to_start_us"]
    return "empty" if offset < _th.LAUNCH_QUEUE_EMPTY_US else "deep" if offset > _th.LAUNCH_QUEUE_DEEP_US else None


def queue_traces() -> dict[str, Trace]:
    """Exercise 7's two H200 recordings under neutral labels: which queue each one has is the exercise's reading."""
    from ..course import recorded

    return {"A": recorded("launch_overhead", "broken"), "B": recorded("gpu_bound", "fp32")}


def check_launch_queue(fn: Callable[[Trace], float], readings: dict[str, str], traces: dict[str, Trace]) -> str:
    """Your ``fn(trace)`` gives the median launch-to-start offset (µs) of each trace within 10%, and
    ``readings[label]`` says what it means: ``"empty"`` or ``"deep"`` (:data:`QUEUE_READINGS`)."""
    name = "check_launch_queue"
    given = isinstance(traces, dict) and all(isinstance(t, Trace) for t in traces.values())
    if not (given and {"empty", "deep"} <= {_queue_kind(t) for t in traces.values()}):
        # fewer traces (or the same one twice) would let one reading pass for the exercise's two
        return _check("gaps", name, False, "Pass queue_traces as the cell above built it ({label: trace}): both of "
                      "its traces, one queue of each kind, so that your function and your readings are judged on both.")
    problems = []
    for label, trace in traces.items():
        want = m.launch_stats(trace)["median_launch_to_start_us"]
        try:
            got = learner_number(fn, trace, name="launch_to_start_us")
        except CheckFailed:
            _record("gaps", name, False)
            raise
        if not _close(got, want, 0.10, 1.0):
            near = [what for what, v in _queue_mistakes(trace).items() if _close(got, v, 0.02, 0.2) and not _close(v, want, 0.10, 1.0)]
            slip = unit_slip(got, want)
            hint = f": that is {near[0]}" if near else (slip if slip else "")
            problems.append(f"trace {label}: your function gives {got:.4g} µs, not the median offset the trace has{hint}")
    if problems:
        return _check("gaps", name, False, "; ".join(problems) + ". Pair each kernel with its launch call by (rank, "
                      "correlation), take kernel start_us minus call start_us, and the median over all kernels.")
    if not isinstance(readings, dict):
        return _check("gaps", name, False, "queue_reading must be a dict: {trace label: 'empty' | 'deep'}.")
    for label, trace in traces.items():
        offset = m.launch_stats(trace)["median_launch_to_start_us"]
        truth = _queue_kind(trace)
        said = str(readings.get(label, "")).strip().lower()
        if said not in QUEUE_READINGS:
            problems.append(f"trace {label}: say 'empty' or 'deep', not {readings.get(label)!r}")
        elif truth is not None and said != truth:
            problems.append(f"trace {label}: a median offset of {offset:,.0f} µs is not an {said!r} queue ({said!r}: "
                            f"{QUEUE_READINGS[said]}); compare the offset with a launch call's own length, a few µs")
    return _check("gaps", name, not problems, "; ".join(problems) + ".")
