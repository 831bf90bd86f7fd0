"""Self-checks for the labs: each verifies something from a trace and says what to fix if not.

A check raises :class:`CheckFailed` (an AssertionError, so nbval fails the cell) with a message
naming what to look at and what to change. Passing and failing results are recorded in
``.selfcheck.json`` in the working folder, which ``python -m helpers selfcheck`` reads.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import time
from collections.abc import Callable
from pathlib import Path

from . import metrics as m
from . import thresholds as th
from .diagnosis import diagnose
from .model import Trace

#: The syllabus's self-check list (first six) and the course's additions.
SELF_CHECK = {
    "tools": ("Explain when to use Nsight Systems vs Nsight Compute vs PyTorch Profiler", "labs/00_tools_and_first_profile.ipynb"),
    "capture": ("Capture a profile with NVTX markers in a training loop", "labs/00_tools_and_first_profile.ipynb"),
    "gaps": ("Read a timeline and identify GPU idle gaps", "labs/00_tools_and_first_profile.ipynb"),
    "data": ("Diagnose data loading stalls from the timeline", "labs/01_data_loading_stall.ipynb"),
    "launch": ("Identify launch overhead and explain fixes (fusion, CUDA Graphs)", "labs/02_launch_overhead.ipynb"),
    "comm": ("Identify communication bottlenecks in distributed training", "labs/04_communication.ipynb"),
    "h2d": ("(course) Spot long host-to-device copies and hide them", "labs/01_data_loading_stall.ipynb"),
    "sync": ("(course) Find and remove hidden synchronizations", "labs/03_sync_stall.ipynb"),
    "imbalance": ("(course) Recognise uneven load across ranks", "labs/04_communication.ipynb"),
    "workflow": ("(course) Run the whole workflow: capture, find, fix, re-profile, compare", "labs/05_workflow_capstone.ipynb"),
    "nsight": ("(course) Read nsys stats/analyze next to the diagnosis; Nsight Compute for a GPU-bound loop",
               "labs/06_nsight_reports.ipynb"),
}
RESULTS_FILE = ".selfcheck.json"


class CheckFailed(AssertionError):
    """A self-check did not pass; the message says what to look at and what to change."""


def _record(item: str, check: str, passed: bool) -> None:
    path = Path(RESULTS_FILE)
    try:
        results = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        results = {}
    previous = results.get(item, {})
    checks = dict(previous.get("checks", {}))
    checks[check] = bool(passed)
    results[item] = {"checks": checks, "passed": all(checks.values()), "when": time.strftime("%Y-%m-%d %H:%M")}
    try:
        path.write_text(json.dumps(results, indent=1))
    except OSError:  # a read-only checkout must not break the lab
        pass


def _check(item: str, name: str, ok: bool, message: str) -> str:
    _record(item, name, ok)
    if not ok:
        raise CheckFailed(message)
    return f"passed: {name}"


def _close(a: float, b: float, rel: float, abs_: float = 0.0) -> bool:
    return math.isfinite(a) and abs(a - b) <= max(rel * abs(b), abs_)


# --- lab 00 ----------------------------------------------------------------------------------
TOOL_ANSWERS = {
    "Which phase of my training step takes the time, and is the GPU ever idle?": "nsys",
    "Why is this one attention kernel slow: is it compute-bound or memory-bound?": "ncu",
    "Which PyTorch operators take the most time, with their input shapes?": "torch",
    "Is the GPU waiting on the DataLoader or on cudaDeviceSynchronize?": "nsys",
    "How many registers and how much shared memory does my kernel use, and what is its achieved occupancy?": "ncu",
    "What is the operator breakdown of forward vs backward in my model, from inside Python?": "torch",
}
_TOOL_WHY = {"nsys": "Nsight Systems shows the whole timeline: CPU threads, CUDA API, kernels, copies, NVTX ranges.",
             "ncu": "Nsight Compute dives into one kernel: its throughput, memory traffic, occupancy and stalls.",
             "torch": "The PyTorch profiler speaks in operators (aten::...), shapes and Python call sites."}


def check_tool_choice(answers: dict[str, str]) -> str:
    """Each question answered with ``"nsys"``, ``"ncu"`` or ``"torch"``."""
    wrong = [q for q, tool in TOOL_ANSWERS.items() if str(answers.get(q, "")).strip().lower() != tool]
    hint = "; ".join(f"{q!r} -> think: {_TOOL_WHY[TOOL_ANSWERS[q]].split(':')[0]}?" for q in wrong[:2])
    return _check("tools", "check_tool_choice", not wrong,
                  f"{len(wrong)} of {len(TOOL_ANSWERS)} tool choices are off. {hint}. Timeline questions -> nsys, "
                  "one kernel's insides -> ncu, operators and shapes -> torch.")


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


def check_gpu_idle_share(fn: Callable[[Trace], float], trace: Trace) -> str:
    """Your ``fn(trace)`` gives the share of step time the GPU is idle, within 2 percentage points."""
    want = 1.0 - m.gpu_utilization(trace)
    got = float(fn(trace))
    return _check("gaps", "check_gpu_idle_share", _close(got, want, 0.0, 0.02),
                  f"Your idle share is {got:.3f}, the trace says {want:.3f}. Merge overlapping GPU events "
                  "(kernel, memcpy, memset, collective) into one busy union first, clip it to the step windows "
                  "(trace.steps), and divide idle time by step time.")


def check_longest_gap(answer_ms: float, trace: Trace) -> str:
    """The longest GPU idle gap inside the profiled steps, read off the timeline (10% tolerance)."""
    gaps = m.idle_gaps(trace)
    want = float(gaps["dur_us"].max() / 1e3) if not gaps.empty else 0.0
    return _check("gaps", "check_longest_gap", _close(float(answer_ms), want, 0.10, 0.05),
                  f"{answer_ms} ms is not the longest gap. Look for the widest white space on the GPU lane "
                  "inside one step (zoom with helpers.plots.timeline(trace, step=...)); it is about "
                  f"{'long' if want > 1 else 'short'}er than a millisecond.")


# --- lab 01 ----------------------------------------------------------------------------------
def check_read_data_wait(answer_ms: float, trace: Trace) -> str:
    """Milliseconds per step the GPU sits idle while the host waits for data (15% tolerance)."""
    n = max(int((m.windows(trace)["step"] >= 0).sum()), 1)
    if trace.has_gpu:
        want = m.idle_by_cause(trace)["data_wait"] / n / 1e3
    else:
        want = m.data_wait(trace)["data_wait_us_per_step"] / 1e3
    return _check("data", "check_read_data_wait", _close(float(answer_ms), want, 0.15, 0.5),
                  f"{answer_ms} ms/step is off. Measure the GPU lane's empty stretch that lines up with "
                  "'enumerate(DataLoader)...' on the ranges lane, per step.")


def _timing_note(b: float | None, a: float | None, min_speedup: float) -> str:
    """The step times as context: one run each cannot tell a slower fix from a busier machine."""
    if not b or not a:
        return ""
    note = f"step time {b:.1f} -> {a:.1f} ms ({b / a:.2f}x)"
    if b < a * min_speedup:
        note += (f", below the {min_speedup}x a quiet machine shows; other work on this machine slows worker "
                 "processes, so the timing is not judged, the structure is")
    return note


def _data_wait_share(t: Trace) -> float:
    """Share of step time lost to data: GPU idle while the host loads (GPU traces), host time in the loader (CPU)."""
    return data_wait_share(t) if t.has_gpu else m.data_wait(t)["data_wait_share"]


def _uses_loader_workers(t: Trace) -> bool:
    """The trace's DataLoader ranges come from worker processes (``_MultiProcessingDataLoaderIter``)."""
    return bool(t.events["name"].str.contains("_MultiProcessingDataLoaderIter", regex=False).any())


def _data_verdict(before: Trace, after: Trace, found: list[str]) -> tuple[bool, str]:
    """Whether the data side is fixed, and a line saying on what evidence.

    The data-wait share is the main evidence. On a busy machine the workers compete with other work
    for the cores and the share may not fall; then the loader's structure (worker processes prefetching)
    decides, and the line says the machine was too busy to judge the wait.
    """
    wb, wa = _data_wait_share(before), _data_wait_share(after)
    line = f"data wait {wb:.0%} -> {wa:.0%} of step time"
    if "data_stall" not in found and wa * th.PASS_DATA_WAIT_DROP <= wb:
        return True, line
    if _uses_loader_workers(after) and wa < wb:
        return True, (line + f" (less than the {th.PASS_DATA_WAIT_DROP}x a quiet machine shows: this machine is too busy "
                      "to judge the wait, so the verdict rests on the loader using worker processes)")
    return False, line


def check_data_stall_fixed(before: Trace, after: Trace, min_speedup: float) -> str:
    """After the fix: no data_stall finding and the data-wait share down by ``PASS_DATA_WAIT_DROP`` x.

    The verdict uses shares of step time, which a busy machine does not change much; the step times
    are reported with it (``min_speedup`` is what a quiet machine shows).
    """
    found = [f.pattern for f in diagnose(after)]
    ok, evidence = _data_verdict(before, after, found)
    note = _timing_note(m.step_time_ms(before), m.step_time_ms(after), min_speedup)
    _check("data", "check_data_stall_fixed", ok,
           f"{evidence.capitalize()} (want {th.PASS_DATA_WAIT_DROP}x less); findings now: {found}. "
           "Give the DataLoader worker processes (num_workers), pin_memory=True, a prefetch_factor and "
           "persistent_workers=True, so batches are ready before the step asks.")
    return f"passed: check_data_stall_fixed ({evidence}; {note})"


def check_read_h2d_bandwidth(answer_gb_per_s: float, trace: Trace) -> str:
    """The H2D copies' bandwidth in GB/s, read off the trace (10% tolerance)."""
    want = (m.h2d_stats(trace) or {"gb_per_s": float("nan")})["gb_per_s"]
    return _check("h2d", "check_read_h2d_bandwidth", _close(float(answer_gb_per_s), want, 0.10),
                  f"{answer_gb_per_s:.1f} GB/s is off. Sum the H2D memcpy events' bytes and durations "
                  "(kind == 'memcpy', copy_kind == 'H2D'): bytes / microseconds / 1000 = GB/s.")


def check_h2d_fixed(before: Trace, after: Trace, min_bandwidth_gain: float = 3.0) -> str:
    """After the fix: host-to-device copies from pinned memory, at least ``min_bandwidth_gain`` x faster."""
    none = {"gb_per_s": float("nan"), "bytes": 0.0, "pageable_byte_share": 0.0}
    hb, ha = m.h2d_stats(before) or none, m.h2d_stats(after) or none
    bw_b, bw_a = hb["gb_per_s"], ha["gb_per_s"]
    pageable = ha["pageable_byte_share"] * ha["bytes"]
    ok = pageable == 0 and bw_a >= min_bandwidth_gain * bw_b and "h2d_copy" not in [f.pattern for f in diagnose(after)]
    return _check("h2d", "check_h2d_fixed", ok,
                  f"H2D bandwidth {bw_b:.1f} -> {bw_a:.1f} GB/s, pageable bytes after: {pageable:.0f}. Pin the host "
                  "batches once (tensor.pin_memory()), copy with .to(device, non_blocking=True), and start the next "
                  "copy on a side stream while this batch computes.")


# --- lab 02 ----------------------------------------------------------------------------------
LAUNCH_FIX_ANSWERS = {"torch.compile": True, "CUDA Graphs": True, "a fused/foreach optimizer": True,
                      "more DataLoader workers": False, "removing torch.cuda.synchronize()": False,
                      "a bigger batch (when the model allows it)": True}


def check_launch_fixes(answers: dict[str, bool]) -> str:
    wrong = [k for k, v in LAUNCH_FIX_ANSWERS.items() if bool(answers.get(k)) != v]
    return _check("launch", "check_launch_fixes", not wrong,
                  f"Rethink: {wrong}. Launch overhead shrinks only if the GPU gets fewer, bigger launches "
                  "per unit of work: fusion, graphs, multi-tensor optimizers, bigger batches.")


def check_launch_diagnosed(trace: Trace) -> str:
    top = diagnose(trace)
    ok = bool(top) and top[0].pattern == "launch_overhead"
    return _check("launch", "check_launch_diagnosed", ok,
                  f"The top finding is {top[0].pattern if top else 'nothing'}; expected launch_overhead on the "
                  "broken loop. Look at kernels per step and their median length.")


def check_launch_fixed(before: Trace, after: Trace, min_speedup: float) -> str:
    """After the fix: step time at least ``min_speedup`` x better (GPU) / fewer ops per step (CPU)."""
    b, a = m.step_time_ms(before), m.step_time_ms(after)
    if before.has_gpu:
        found = [f.pattern for f in diagnose(after)]
        ok = a * min_speedup <= b and "launch_overhead" not in found
        msg = (f"Step time {b:.2f} -> {a:.2f} ms ({b / a:.1f}x, want >= {min_speedup}x); findings now {found}. "
               "Capture the whole step in a CUDA Graph (or compile it) so one launch replays hundreds of kernels.")
    else:
        ops = [m.host_op_stats(t)["top_level_ops_per_step"] for t in (before, after)]
        ok = ops[1] * min_speedup <= ops[0]
        msg = (f"Top-level PyTorch ops per step {ops[0]:.0f} -> {ops[1]:.0f} (want {min_speedup}x fewer). Use a foreach/fused "
               "optimizer so one call updates every parameter instead of one call per parameter.")
    return _check("launch", "check_launch_fixed", ok, msg)


# --- lab 03 ----------------------------------------------------------------------------------
def check_sync_fixed(before: Trace, after: Trace, max_per_step: float = 0.2) -> str:
    """After the fix: at most ``max_per_step`` syncing ops per step (one read every LOG_EVERY steps is fine)."""
    sb, sa = m.sync_stats(before), m.sync_stats(after)
    key = "sync_points_per_step" if after.has_gpu else "syncing_ops_per_step"
    ok = sa[key] <= max_per_step and "sync_stall" not in [f.pattern for f in diagnose(after)]
    return _check("sync", "check_sync_fixed", ok,
                  f"{key.replace('_', ' ')}: {sb[key]:.1f} -> {sa[key]:.1f} (want <= {max_per_step}); still caused by "
                  f"{list(sa['causes'])[:3] or 'aten::item / .cpu() / print'}. Keep losses on the GPU "
                  "(loss.detach() into a running sum) and read them with one .item() every N steps.")


def check_sync_scan_clean(sites: list) -> str:
    return _check("sync", "check_sync_scan_clean", not sites,
                  "The scan still finds: " + "; ".join(f"line {s.line}: {s.code}" for s in sites[:3]) +
                  ". Move those reads out of the per-step path or do them every N steps.")


# --- lab 04 ----------------------------------------------------------------------------------
def check_comm_diagnosed(trace: Trace) -> str:
    found = [f.pattern for f in diagnose(trace)]
    return _check("comm", "check_comm_diagnosed", "communication" in found or "load_imbalance" in found,
                  f"Findings: {found}; expected communication. Compare the gloo/NCCL lane with the compute "
                  "lanes: is all-reduce time hidden under backward or sitting alone?")


def check_read_exposed_comm(answer_ms: float, trace: Trace, rank: int = 0) -> str:
    """Exposed collective time per step on ``rank``, in milliseconds (20% tolerance)."""
    cs = m.comm_stats(trace)
    want = float(cs.loc[cs["rank"] == rank, "exposed_us"].mean() / 1e3)
    return _check("comm", "check_read_exposed_comm", _close(float(answer_ms), want, 0.20, 0.5),
                  f"{answer_ms} ms is off for rank {rank}. Exposed = time on the collective lane during which the "
                  "rank's compute lane (its main CPU thread, or its compute stream on a GPU) is empty, per step.")


def check_comm_fixed(before: Trace, after: Trace, min_gain: float = th.PASS_EXPOSED_COMM_DROP) -> str:
    """After the fix: exposed collective time per unit of compute down by at least ``min_gain`` x.

    A ratio of two times from the same steps, so a slower (busier) machine stretches both alike.
    """
    def exposed_per_compute(t: Trace) -> float:
        cs = m.comm_stats(t)
        return float(cs["exposed_us"].sum() / (cs["compute_us"].sum() or 1.0))

    rb, ra = exposed_per_compute(before), exposed_per_compute(after)
    if ra * min_gain <= rb:
        return _check("comm", "check_comm_fixed", True, "")
    # A busy machine stretches compute and gloo's threads unevenly; DDP's reducer ranges show the
    # buckets' all-reduce is launched from backward, which is the fix, whatever the timing did.
    ddp = bool(after.events["name"].str.contains("reducer::", regex=False).any())
    if ddp and ra < rb:
        _record("comm", "check_comm_fixed", True)
        return (f"passed: check_comm_fixed (exposed per ms of compute {rb:.2f} -> {ra:.2f}, less than the {min_gain}x "
                "a quiet machine shows: this machine is too busy to judge the timing; DDP's reducer all-reduces "
                "buckets during backward)")
    return _check("comm", "check_comm_fixed", False,
                  f"Exposed communication per ms of compute {rb:.2f} -> {ra:.2f} (want {min_gain}x less). Let DDP "
                  "all-reduce buckets while backward still runs (default buckets), or all-reduce less often (no_sync).")


def check_imbalance_diagnosed(trace: Trace) -> str:
    imb = m.rank_imbalance(trace)
    found = [f.pattern for f in diagnose(trace)]
    return _check("imbalance", "check_imbalance_diagnosed", "load_imbalance" in found,
                  f"Findings {found}, compute spread {imb['compute_spread']:.0%}. Compare the ranks' compute lanes "
                  "step by step: which rank arrives last at the all-reduce?")


# --- lab 05 ----------------------------------------------------------------------------------
NEXT_STEPS = {"kernel": "ncu", "cpu": "cpu_profiler", "gap": "gap_fix", "communication": "distributed"}


def check_next_steps(answers: dict[str, str]) -> str:
    wrong = [k for k, v in NEXT_STEPS.items() if answers.get(k) != v]
    return _check("workflow", "check_next_steps", not wrong,
                  f"Rethink {wrong}: a kernel's insides need Nsight Compute; CPU time needs a CPU profiler; "
                  "an empty GPU lane means a sync or launch problem; long collectives need a distributed fix.")


def check_capstone(before: Trace, after: Trace, min_speedup: float) -> str:
    """The mystery loop: no data or sync stall left, data wait down, syncs per step <= 0.2.

    Judged on shares and counts; the step times are reported beside the verdict (``min_speedup`` is
    what a quiet machine shows).
    """
    found = [f.pattern for f in diagnose(after)]
    sa = m.sync_stats(after)
    key = "sync_points_per_step" if after.has_gpu else "syncing_ops_per_step"
    data_ok, evidence = _data_verdict(before, after, found)  # the same data verdict as lab 01's
    ok = data_ok and "sync_stall" not in found and sa[key] <= 0.2
    note = _timing_note(m.step_time_ms(before), m.step_time_ms(after), min_speedup)
    _check("workflow", "check_capstone", ok,
           f"{evidence.capitalize()}, {key.replace('_', ' ')} {sa[key]:.1f}, findings {found}. "
           "Fix the biggest gap first, re-profile, then the next one.")
    return f"passed: check_capstone ({evidence}, {key.replace('_', ' ')} {sa[key]:.1f}; {note})"


# --- Nsight ------------------------------------------------------------------------------------
#: The three nsys command lines lab 00 asks for, and what each must do.
NSYS_TASKS = {
    "capture range": "record only between torch.cuda.profiler.start() and stop() (the workload's --nsys-range)",
    "time window": "skip start-up with a delay, then record for a fixed duration",
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


# --- lab 06: nsys stats / analyze next to helpers.diagnose, and Nsight Compute ---------------------
#: The ``nsys analyze`` rules, and the helpers.diagnose patterns that would make each one matter.
ANALYZE_RULE_PATTERNS = {
    "cuda_memcpy_async": ("h2d_copy",),  # pageable async copies: costly only when the copies are big and exposed
    "cuda_memcpy_sync": ("h2d_copy", "sync_stall"),
    "cuda_memset_sync": ("sync_stall",),
    "cuda_api_sync": ("sync_stall",),  # fires on any cudaDeviceSynchronize / cudaStreamSynchronize
    "gpu_gaps": ("data_stall", "sync_stall", "launch_overhead", "h2d_copy", "communication"),
    "gpu_time_util": ("data_stall", "sync_stall", "launch_overhead", "h2d_copy", "communication"),
}
_ANALYZE_RULE = re.compile(r"^\s*\*\*\s*(?P<title>.+?)\s*\((?P<rule>\w+)\):\s*$")
_NO_PROBLEM = re.compile(r"no problems were (?:detected|found)|there were no problems|skipped|does not contain", re.IGNORECASE)


def analyze_findings(text: str) -> dict[str, str]:
    """The rules that reported something in ``nsys analyze`` output: {rule id: its first lines}."""
    found: dict[str, str] = {}
    rule, body = None, []
    for line in [*text.splitlines(), "** end (end):"]:
        m = _ANALYZE_RULE.match(line)
        if m:
            if rule and body and not _NO_PROBLEM.search(" ".join(body[:3])):
                found[rule] = " ".join(body[:3])[:300]
            rule, body = m.group("rule"), []
        elif rule and line.strip() and not line.startswith("Processing "):
            body.append(line.strip())
    return found


def analyze_rule_matters(rule: str, trace: Trace) -> bool:
    """An analyze warning matters when helpers.diagnose finds the pattern behind it in the same run."""
    found = {f.pattern for f in diagnose(trace)}
    return bool(found & set(ANALYZE_RULE_PATTERNS.get(rule, ())))


def check_analyze_verdicts(verdicts: dict[str, bool], fired: list[str], trace: Trace, label: str) -> str:
    """For each analyze rule that ``fired`` on ``trace``'s report: does it point at this loop's bottleneck?"""
    wrong = [r for r in fired if r not in verdicts or bool(verdicts[r]) != analyze_rule_matters(r, trace)]
    found = [f.pattern for f in diagnose(trace)]
    return _check("nsight", f"check_analyze_verdicts[{label}]", not wrong,
                  f"Rethink {wrong}: a warning matters only if fixing it would shorten this loop's step. "
                  f"Here the step is bound by {found[:2]}; ask whether the sync or copy analyze flags is what "
                  "the GPU waits for (long gaps next to it) or a short, harmless one.")


def _loose_same(answer: str, truth: str) -> bool:
    """``answer`` names ``truth``: a part of it at least 6 characters long (nsys stats cuts long names with '…')."""
    a = answer.replace("…", "").replace("...", "").strip().lower()
    return len(a) >= 6 and a in truth.strip().lower()


def check_stats_reading(answers: dict[str, str], trace: Trace) -> str:
    """The CUDA API call and the kernel with the most total time, as read off ``nsys stats``."""
    ev = trace.events
    want = {}
    for key, kind in (("top_api_call", "runtime"), ("top_kernel", "kernel")):
        sel = ev[ev["kind"] == kind]
        want[key] = str(sel.groupby("name")["dur_us"].sum().idxmax()) if not sel.empty else ""
    wrong = [k for k in want if not _loose_same(str(answers.get(k, "")), want[k])]
    return _check("nsight", "check_stats_reading", not wrong,
                  f"{wrong} do not match the report. Both summaries are sorted by 'Time (%)': the first row "
                  "of cuda_api_sum is the call the host spends most time in, of cuda_gpu_kern_sum the kernel "
                  "the GPU spends most time in (copy the name as printed).")


def kernel_limiter(row: dict | object) -> str:
    """``"compute"``, ``"memory"`` or ``"latency"`` for one ncu launch (a row of helpers.readers.ncu.read_ncu)."""
    from .thresholds import NCU_LATENCY_BOUND_PCT

    compute = float(row["compute_throughput_pct"])  # type: ignore[index]
    memory = float(row["memory_throughput_pct"])  # type: ignore[index]
    if max(compute, memory) < NCU_LATENCY_BOUND_PCT:
        return "latency"
    return "compute" if compute >= memory else "memory"


def check_kernel_limiter(answer: str, ncu_table) -> str:
    """What limits the profiled kernel, from its ncu speed-of-light figures (first launch)."""
    want = kernel_limiter(ncu_table.iloc[0])
    row = ncu_table.iloc[0]
    return _check("nsight", "check_kernel_limiter", str(answer).strip().lower() == want,
                  f"{answer!r} is not what the figures say: compute {row['compute_throughput_pct']:.0f}% and memory "
                  f"{row['memory_throughput_pct']:.0f}% of peak. The higher one limits the kernel if it is near peak; "
                  "if both are well below (under ~60%), the kernel is latency-bound (occupancy, dependencies).")


def data_wait_share(trace: Trace) -> float:
    """Share of the analysed time the GPU idles while the host waits for data (whole capture if it has no steps)."""
    total = float(m.windows(trace)["dur_us"].sum())
    return m.idle_by_cause(trace)["data_wait"] / total if total > 0 else float("nan")


def check_data_wait_share(answer: float, trace: Trace, label: str) -> str:
    """The GPU's data-wait share of the time, read from one trace (3 percentage points)."""
    want = data_wait_share(trace)
    return _check("nsight", f"check_data_wait_share[{label}]", _close(float(answer), want, 0.0, 0.03),
                  f"{answer:.3f} is off for the {label} trace. Take metrics.idle_by_cause(trace)['data_wait'] "
                  "(microseconds the GPU idles while the host is in the DataLoader) over the analysed time, "
                  "metrics.windows(trace)['dur_us'].sum().")
