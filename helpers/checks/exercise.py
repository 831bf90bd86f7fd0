"""The exercises as declared records, and the one engine that judges each of them.

Every check that earns self-check credit is an :class:`Exercise`: which lab and item it belongs to, what it
takes (the learner's functions, answers and traces, and how each trace must have been made), what it is
compared with and the figures it reports. :data:`EXERCISES` holds them all; the credit each item needs
(:data:`helpers.checks.CREDIT`) is derived from them, not kept by hand. Adding an exercise is one record
here plus its tests.

:func:`judge` runs a check of an exercise in a fixed order: first the provenance of every trace it takes
(:mod:`helpers.checks.provenance`: made in this kernel, of this exercise's workload, or the shipped file
the lab loads, by digest), then the check's own behaviour, structure and speed tests. While it runs, the
exercise is open in the signing state (:class:`helpers.checks._proof.Signer`): only a result recorded for
that exercise's item and check is signed, and in a ``selfcheck --run`` only in the notebook of the
exercise's lab.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import CheckFailed
from ..model import Trace
from .provenance import MADE  # noqa: F401 - how a trace may be made, named where it is judged

TRACKS = ("gpu", "cpu")

#: Each lab's notebook, by its number (the file name in labs/ and solutions/).
LABS: dict[str, str] = {
    "00": "00_tools_and_first_profile.ipynb",
    "01": "01_data_loading_stall.ipynb",
    "02": "02_launch_overhead.ipynb",
    "03": "03_sync_stall.ipynb",
    "04": "04_communication.ipynb",
    "05": "05_workflow_capstone.ipynb",
    "06": "06_nsight_reports.ipynb",
    "07": "07_blind_triage.ipynb",
    "08": "08_gpu_bound.ipynb",
    "09": "09_kernel_efficiency.ipynb",
    "10": "10_gpu_memory.ipynb",
    "11": "11_call_sites_and_environment.ipynb",
}

@dataclass(frozen=True)
class Takes:
    """One input of an exercise: the check's parameter ``name``, what it is, and for a trace how it is made.

    ``what``: ``"function"`` (the learner's code, called by the check), ``"answer"`` (a value the learner
    read or computed), ``"trace"``, ``"traces"`` (runs in a list, each with a ``"trace"``) or ``"table"`` (an
    Nsight Compute table). ``made``: the ways a trace or table may have been made (keys of :data:`MADE`);
    ``of``: the workload it must be a trace of (a module of :mod:`helpers.workloads`), ``shipped``: the
    recordings (``workload:variant[:tag]``, ``nsys:workload:variant``, ``ncu:workload:variant``) the lab
    loads for it; ``mine``: a trace of the learner's own loop (their fix), which must run their code.
    """

    name: str
    what: str
    made: tuple[str, ...] = ()
    of: str = ""
    shipped: tuple[str, ...] = ()
    mine: bool = False  # the learner's own loop (a fix, their annotated step): it must run code of theirs
    #: for a ``mine`` trace: the function input of this exercise whose step the trace must be a capture of (the
    #: step it returns, or it: ``helpers.stamps.step_codes``), or ``"<check>:<input>"``, a function that
    #: exercise's check passed in this kernel; the function the check judges is then the loop the trace timed
    step_of: str = ""
    #: for a ``mine`` trace: function inputs of this exercise the traced loop must run (the update, the device copy
    #: the check judges must be the one the timed loop calls)
    runs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Exercise:
    """One exercise that earns self-check credit: the check that judges it and what that check takes."""

    lab: str  # "00" .. "11": the notebook it is done in (LABS)
    item: str  # the self-check item it earns (helpers.checks.SELF_CHECK)
    check: str  # the name its result is recorded under: the check function, "[label]" for a reading
    goal: str  # one line: what the learner does
    takes: tuple[Takes, ...] = ()
    tracks: tuple[str, ...] = TRACKS  # the tracks on which the item needs it
    reference: str = ""  # what the learner's work is compared with
    figures: tuple[str, ...] = ()  # what the verdict reports
    workload: str = ""  # the loop the exercise is about (helpers.workloads.<name>)
    #: its ``after`` capture must still train each step as its ``before`` does, read off the two timelines (the
    #: optimizer's steps, backward's gradients: :func:`helpers.checks.behaviour.trace_training_problem`)
    trains: bool = False
    #: with ``trains``: the optimizer's steps too, not only the gradients (False where a step may rightly skip its update:
    #: fp16's GradScaler skips the optimizer on a step whose gradients overflowed)
    optimizer_steps: bool = True
    #: only its gradients (a fix with an update of its own, no torch optimizer), on CPU traces (a CUDA Graph replays
    #: backward on the GPU, with no autograd event on the host)
    trains_gradients_on_cpu: bool = False
    #: its ``after`` capture's loop must be fed as its ``before``'s is: a loader of the same kind over the same dataset
    #: (class, length, settings), in batches of the same size (:func:`helpers.checks.provenance.same_data_problem`)
    same_data: bool = False
    #: its ``after`` capture's step holds the tensors, model and optimizer its ``before``'s holds, of the same shapes,
    #: sizes and learning rate (:func:`helpers.checks.provenance.same_setup_problem`)
    same_setup: bool = False
    #: its ``after`` capture copies as many bytes to the device a step and runs as many matrix products as its
    #: ``before``'s (:func:`helpers.checks.behaviour.device_work_problem`): for fixes to how work reaches the device
    same_work: bool = False
    #: the parameters that hold the loop as first written's capture and the fix's, which the behaviour stage compares
    compares: tuple[str, str] = ("before", "after")
    order: tuple[str, ...] = field(default=("provenance", "behaviour", "structure", "speed"), repr=False)

    @property
    def function(self) -> str:
        """The check function's name (``check_reading`` for ``check_reading[data]``)."""
        return self.check.split("[", 1)[0]

    @property
    def label(self) -> str | None:
        return self.check[len(self.function) + 1:-1] if "[" in self.check else None

    @property
    def notebook(self) -> str:
        return LABS[self.lab]

    def owns(self, item: str, check: str) -> bool:
        """Whether a result recorded as ``check`` for ``item`` is this exercise's (signed while it is judged):
        its own name, or a part of it (``check_triage[t3]`` of ``check_triage``)."""
        if item != self.item:
            return False
        return check == self.check or ("[" not in self.check and check.startswith(self.check + "["))


def _t(name: str, what: str, *made: str, of: str = "", shipped: tuple[str, ...] = (), mine: bool = False,
       step_of: str = "", runs: tuple[str, ...] = ()) -> Takes:
    return Takes(name, what, tuple(made), of, shipped, mine, step_of, runs)


_FN, _ANS = "function", "answer"

#: Every exercise that earns credit, by lab, in the order the lab does them.
EXERCISES: tuple[Exercise, ...] = (
    # lab 00
    Exercise("00", "tools", "check_tool_choice", "pick the tool for each question", (_t("answers", _ANS),),
             reference="the course's key, as digests", figures=("questions wrong",)),
    Exercise("00", "capture", "check_annotated_phases", "annotate the phases of your training step and capture it",
             (_t("trace", "trace", "capture", mine=True),), figures=("missing phase ranges",)),
    Exercise("00", "capture", "check_nsys_commands", "write the nsys command lines", (_t("commands", _ANS),),
             reference="the recommended nsys options"),
    Exercise("00", "capture", "check_my_profiler", "drive torch.profiler yourself: schedule, table, trace file",
             (_t("prof", _ANS), _t("table", _ANS), _t("trace_dir", _ANS)),
             reference="the trace your profiler wrote", figures=("table rows", "sort key")),
    Exercise("00", "gaps", "check_gpu_idle_share", "measure the GPU's idle share",
             (_t("fn", _FN), _t("trace", "trace", "capture", "shipped", of="sync_stall", shipped=("sync_stall:broken",))),
             reference="metrics.gpu_utilization on the lab's traces"),
    Exercise("00", "gaps", "check_longest_gap", "read the longest GPU gap", (_t("answer_ms", _ANS), _t("trace", "trace", "capture", "shipped", of="sync_stall",
                                                 shipped=("sync_stall:broken",))),
             reference="the trace's longest kernel gap"),
    Exercise("00", "gaps", "check_launch_queue", "measure launch-to-start and read the queue",
             (_t("fn", _FN), _t("readings", _ANS), _t("traces", "traces", "shipped",
                                                        shipped=("launch_overhead:broken", "gpu_bound:fp32"))),
             reference="each kernel's launch-to-start on the two recordings"),
    # lab 01
    Exercise("01", "data", "check_reading[data]", "read the data stall off the timeline",
             (_t("reading", _ANS), _t("trace", "trace", "capture", "shipped", of="data_stall",
                                      shipped=("data_stall:broken", "data_stall:broken:cpu"))),
             reference="the trace's diagnosis", workload="data_stall"),
    Exercise("01", "data", "check_data_stall_fixed", "fix the input pipeline and prove it before/after",
             (_t("before", "trace", "capture", of="data_stall"), _t("after", "trace", "capture", of="data_stall", mine=True, runs=("to_device",)),
              _t("make_loader", _FN), _t("to_device", _FN)),
             reference="the broken loader's batches", figures=("data wait share", "step time"), workload="data_stall",
             trains=True, same_setup=True, same_data=True),
    Exercise("01", "h2d", "check_reading[h2d]", "read the host-to-device copies off the timeline",
             (_t("reading", _ANS), _t("trace", "trace", "capture", "shipped", of="h2d_copy", shipped=("h2d_copy:broken",))),
             reference="the trace's diagnosis", workload="h2d_copy"),
    Exercise("01", "h2d", "check_read_h2d_bandwidth", "read the copies' bandwidth and memory kind",
             (_t("answer_gb_per_s", _ANS), _t("trace", "trace", "capture", "shipped", of="h2d_copy",
                                                shipped=("h2d_copy:broken",))),
             reference="the trace's memcpy events", workload="h2d_copy"),
    Exercise("01", "h2d", "check_h2d_fixed", "pin and overlap the copies, on a GPU",
             (_t("before", "trace", "capture", "shipped", of="h2d_copy", shipped=("h2d_copy:broken",)),
              _t("after", "trace", "capture", of="h2d_copy", mine=True)),
             tracks=("gpu",), figures=("H2D GB/s", "overlap with compute"), workload="h2d_copy", same_work=True,
             same_setup=True),
    # lab 02
    Exercise("02", "launch", "check_reading[broken loop]", "read the launch overhead off the timeline",
             (_t("reading", _ANS), _t("trace", "trace", "capture", "shipped", of="launch_overhead",
                                      shipped=("launch_overhead:broken", "launch_overhead:broken:cpu"))),
             reference="the trace's diagnosis", workload="launch_overhead"),
    Exercise("02", "launch", "check_launch_fixed", "fuse or graph the step and prove it before/after",
             (_t("before", "trace", "capture", of="launch_overhead"), _t("after", "trace", "capture", of="launch_overhead", mine=True, runs=("update",)),
              _t("update", _FN)),
             reference="torch's Adam on the same parameters", figures=("launches per step", "step time"),
             workload="launch_overhead", trains_gradients_on_cpu=True),
    # lab 03
    Exercise("03", "sync", "check_reading[broken loop]", "read the hidden syncs off the timeline",
             (_t("reading", _ANS), _t("trace", "trace", "capture", "shipped", of="sync_stall",
                                      shipped=("sync_stall:broken",))),
             reference="the trace's diagnosis", workload="sync_stall"),
    Exercise("03", "sync", "check_sync_scan_clean", "write a step with no hidden sync", (_t("fn", _FN),),
             reference="the broken step's losses", workload="sync_stall"),
    Exercise("03", "sync", "check_sync_fixed", "prove the fix before/after",
             (_t("before", "trace", "capture", of="sync_stall"),
              _t("after", "trace", "capture", of="sync_stall", mine=True, step_of="check_sync_scan_clean:fn")),
             figures=("syncs per step", "step time"), workload="sync_stall", trains=True, same_setup=True),
    # lab 04
    Exercise("04", "comm", "check_reading[comm]", "read the exposed communication off the timeline",
             (_t("reading", _ANS), _t("trace", "trace", "communication.run", "shipped", of="communication",
                                      shipped=("communication:manual:cpu",))),
             reference="the trace's diagnosis", workload="communication"),
    Exercise("04", "comm", "check_comm_fixed", "overlap the all-reduce with backward",
             (_t("before", "trace", "communication.run", of="communication"),
              _t("after", "trace", "communication.run", of="communication", mine=True)),
             figures=("all-reduces started during backward", "exposed ms"), workload="communication"),
    Exercise("04", "comm", "check_bucket_sweep", "sweep bucket_cap_mb",
             (_t("sweep", "traces", "communication.run", of="communication", mine=True),),
             figures=("all-reduces per step by bucket size",), workload="communication"),
    Exercise("04", "imbalance", "check_reading[imbalance]", "read the uneven ranks off the timeline",
             (_t("reading", _ANS), _t("trace", "trace", "communication.run", "shipped", of="communication",
                                      shipped=("communication:imbalance:cpu",))),
             reference="the trace's diagnosis", workload="communication"),
    Exercise("04", "imbalance", "check_imbalance_fixed", "give every rank the same rows",
             (_t("before", "trace", "communication.run", of="communication"),
              _t("after", "trace", "communication.run", of="communication", mine=True)),
             figures=("compute spread", "rows per rank"), workload="communication"),
    # lab 05 (and the triage of lab 07)
    Exercise("05", "workflow", "check_reading[mystery]", "read the mystery loop off the timeline",
             (_t("reading", _ANS), _t("trace", "trace", "capture", "shipped", of="mystery",
                                      shipped=("mystery:broken", "mystery:broken:cpu"))),
             reference="the trace's diagnosis", workload="mystery"),
    Exercise("07", "workflow", "check_triage", "read eight of the ten unlabelled traces",
             (_t("trace_id", _ANS), _t("reading", _ANS)), reference="the sealed triage key"),
    Exercise("05", "workflow", "check_capstone", "fix the mystery loop and prove it before/after",
             (_t("before", "trace", "capture", of="mystery"), _t("after", "trace", "capture", of="mystery", mine=True, step_of="make_step"),
              _t("make_step", _FN)),
             reference="the mystery loop's training", figures=("data wait share", "syncs per step", "step time"),
             workload="mystery", trains=True, same_setup=True),
    # lab 06
    Exercise("06", "nsight", "check_stats_reading", "read nsys stats' top API call and kernel",
             (_t("answers", _ANS), _t("trace", "trace", "shipped", shipped=("nsys:data_stall:broken",))),
             reference="the shipped Nsight Systems export"),
    Exercise("06", "nsight", "check_kernel_limiter", "say what limits the top kernel from its ncu figures",
             (_t("answer", _ANS), _t("ncu_table", "table", "run_ncu", "shipped", shipped=("ncu:sync_stall:fixed",))),
             reference="the ncu speed-of-light figures"),
    # lab 08
    Exercise("08", "gpu_bound", "check_same_training", "run the step in low precision, same training",
             (_t("step_fn", _FN),), reference="the fp32 step and a reference of the same precision",
             workload="gpu_bound"),
    Exercise("08", "gpu_bound", "check_tensor_cores", "move the GEMMs onto tensor cores, on a GPU",
             (_t("fp32_trace", "trace", "capture", of="gpu_bound"), _t("fast_trace", "trace", "capture", of="gpu_bound", mine=True)),
             tracks=("gpu",), figures=("tensor-core GEMM share",), workload="gpu_bound", trains=True,
             optimizer_steps=False, same_work=True, same_setup=True, compares=("fp32_trace", "fast_trace")),
    Exercise("08", "gpu_bound", "check_break_fixed", "remove the graph break, keep the statistic",
             (_t("model_cls", _FN),), reference="the course's Net", workload="gpu_bound"),
    Exercise("08", "gpu_bound", "check_activation_saving", "checkpoint the activations",
             (_t("forward_fn", _FN),), reference="the plain forward's saved tensors", workload="gpu_bound"),
    # lab 09
    Exercise("09", "kernels", "check_matmul_flops", "count a model's matmul FLOPs", (_t("fn", _FN),)),
    Exercise("09", "kernels", "check_roofline_point", "place a kernel on the roofline", (_t("fn", _FN),)),
    Exercise("09", "kernels", "check_kernel_points", "place your capture's kernels on the roofline, on a GPU",
             (_t("points", _ANS), _t("trace", "trace", "capture", "shipped", of="gpu_bound", shipped=("gpu_bound:bf16",)),
              _t("peaks", _ANS)),
             tracks=("gpu",), workload="gpu_bound"),
    Exercise("09", "kernels", "check_padded_head", "pad the head to a tensor-core shape", (_t("fn", _FN),)),
    Exercise("09", "kernels", "check_attention_reading", "read the attention scores' memory off your capture",
             (_t("answer", _ANS), _t("trace", "trace", "capture", of="attention")), workload="attention"),
    Exercise("09", "kernels", "check_sdpa_attention", "write attention that never holds the scores",
             (_t("fn", _FN),), reference="causal attention"),
    # lab 10
    Exercise("10", "memory", "check_memory_state", "read allocated vs reserved", (_t("fn", _FN),)),
    Exercise("10", "memory", "check_allocated_over_time", "rebuild allocated memory over time", (_t("fn", _FN),)),
    Exercise("10", "memory", "check_transient_bytes", "measure a step's transient bytes", (_t("fn", _FN),)),
    Exercise("10", "memory", "check_optimizer_in_backward", "step the optimizer inside backward", (_t("fn", _FN),),
             reference="plain Adam"),
    Exercise("10", "memory", "check_oom_triage", "name the cause of each OOM message", (_t("fn", _FN),)),
    # lab 11
    Exercise("11", "callsites", "check_sync_sites", "find the lines behind each sync",
             (_t("fn", _FN), _t("trace", "trace", "capture", of="callsite")), workload="callsite"),
    Exercise("11", "callsites", "check_backtrace_command", "write the nsys backtrace command", (_t("command", _ANS),)),
    Exercise("11", "callsites", "check_callsites_fixed", "remove the syncs at their call sites",
             (_t("fn", _FN), _t("before", "trace", "capture", of="callsite"), _t("after", "trace", "capture", of="callsite", mine=True, step_of="fn")),
             figures=("syncs per step",), workload="callsite", trains=True, same_setup=True),
    Exercise("11", "callsites", "check_environment_pitfalls", "name the environment's pitfalls", (_t("fn", _FN),)),
)


def credit(exercises: tuple[Exercise, ...] = EXERCISES) -> dict[str, dict[str, tuple[str, ...]]]:
    """Self-check item -> track -> the checks that must all have passed to earn it, from the records."""
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for ex in exercises:
        per = out.setdefault(ex.item, {t: () for t in TRACKS})
        for track in ex.tracks:
            per[track] = (*per[track], ex.check)
    return out


def by_function(function: str) -> tuple[Exercise, ...]:
    return tuple(ex for ex in EXERCISES if ex.function == function)


def find(item: str, check: str) -> Exercise | None:
    """The exercise a result recorded as ``check`` for ``item`` belongs to, or None (a check that earns nothing)."""
    return next((ex for ex in EXERCISES if ex.owns(item, check)), None)


def _which(function: str, arguments: dict[str, Any], notebook: str | None) -> Exercise:
    """The exercise a call of ``function`` judges: its only record, or for a check with several (a reading,
    one per lab), the one of this notebook's lab (in a selfcheck --run), else the one the call names."""
    candidates = by_function(function)
    if len(candidates) == 1:
        return candidates[0]
    label = arguments.get("label")
    named = [ex for ex in candidates if ex.label == label] if isinstance(label, str) else []
    if not named:  # a label no exercise has (lab 07's triage readings): judged, never signed
        raise _Unknown
    if notebook is not None:
        here = [ex for ex in named if ex.notebook == notebook]
        if here:
            return here[0]
        mine = [ex for ex in candidates if ex.notebook == notebook]
        labs = ", ".join(sorted({f"lab {ex.lab} ({ex.label})" for ex in candidates}))
        raise CheckFailed(f"{function}[{label}] is not an exercise of {notebook}"
                          + (f": this notebook's are {', '.join(repr(ex.label) for ex in mine)}" if mine else "")
                          + f"; its exercises are {labs}, each earned in its own lab's notebook")
    item = arguments.get("item")
    return next((ex for ex in named if ex.item == item), named[0])


class _Unknown(Exception):
    """A call that names no exercise (a reading of a label no lab has): judged, recorded, never signed."""


def _bound(fn: Callable, args: tuple, kwargs: dict) -> inspect.BoundArguments | None:
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return bound


def _read_one_pass_runs(ex: Exercise, arguments: dict[str, Any]) -> None:
    """Read a ``traces`` input given as a one-pass iterator (a generator of runs) into a list, once, under the
    learner-code time limit and at most ``provenance.MAX_RUNS + 1`` runs, so the provenance stage and the check
    judge the same runs: an iterator the stage could not read twice would otherwise skip it."""
    from collections.abc import Iterator

    from . import _core, provenance

    for takes in ex.takes:
        value = arguments.get(takes.name)
        if takes.what == "traces" and isinstance(value, Iterator):
            arguments[takes.name] = _core.run_learner(
                lambda it: list(itertools.islice(it, provenance.MAX_RUNS + 1)), value,
                name=f"reading your {takes.name}", note=False)


def judge(fn: Callable) -> Callable:
    """``fn`` (a check of one or more exercises) run by the engine: the exercise it judges is found from
    its record (the item is the record's, never the caller's), its traces' provenance is judged first
    (:func:`helpers.checks.provenance.problems`), then ``fn`` judges behaviour, structure and speed; while
    it runs the exercise is open in the signing state, so only its own results are signed."""
    from . import _proof

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        from . import _core, _intact, provenance

        # what the check compares is plain (a learner's str subclass that equals every pattern is a str again),
        # however the check was reached: helpers.checks.<name> or its lab module's own name
        args, kwargs = tuple(_core.plain(a) for a in args), {k: _core.plain(v) for k, v in kwargs.items()}
        bound = _bound(fn, args, kwargs)
        arguments = bound.arguments if bound is not None else {}
        try:
            ex = _which(fn.__name__, arguments, _proof.SIGNER.notebook)
        except _Unknown:
            return fn(*args, **kwargs)
        except CheckFailed:
            if "item" in arguments and "label" in arguments:
                _core._record(str(arguments["item"]), f"{fn.__name__}[{arguments['label']}]", False)
            raise
        replaced = _intact.tampered_problem()  # the course's reference, clock and measurements are its own
        if replaced:
            _core._record(ex.item, ex.check, False)
            raise CheckFailed(replaced)
        notebook = _proof.SIGNER.notebook
        if notebook is not None and ex.notebook != notebook:
            _core._record(ex.item, ex.check, False)
            raise CheckFailed(f"{ex.check} is lab {ex.lab}'s exercise, earned in {ex.notebook}; called from {notebook} "
                              "it judges nothing and earns nothing: do it in its lab's notebook")
        if "item" in arguments and arguments["item"] != ex.item:
            _core._record(str(arguments["item"]), ex.check, False)
            raise CheckFailed(f"{ex.check} is lab {ex.lab}'s exercise for the {ex.item!r} item; it cannot earn "
                              f"{arguments['item']!r}: pass item={ex.item!r}")
        if bound is not None:
            _read_one_pass_runs(ex, bound.arguments)
        with _proof.SIGNER.judging(ex):
            problem = provenance.problems(ex, arguments)
            before, after = (arguments.get(name) for name in ex.compares)
            if problem is None and ex.trains:
                from . import behaviour

                problem = behaviour.trace_training_problem(before, after, optimizer=ex.optimizer_steps)
            if problem is None and ex.trains_gradients_on_cpu and isinstance(before, Trace) and not before.has_gpu:
                from . import behaviour

                problem = behaviour.trace_training_problem(before, after, optimizer=False)
            if problem is None and ex.same_work:
                from . import behaviour

                problem = behaviour.device_work_problem(before, after)
            if problem is None and ex.same_data:
                problem = provenance.same_data_problem(before, after)
            if problem is None and ex.same_setup:
                problem = provenance.same_setup_problem(before, after)
            if problem:
                _core._record(ex.item, ex.check, False)
                raise CheckFailed(problem)
            out = fn(*bound.args, **bound.kwargs) if bound is not None else fn(*args, **kwargs)
            if isinstance(out, str) and out.startswith("passed"):
                provenance.note_judged(ex, arguments)  # a later exercise's trace may be a capture of these functions
            return out

    run.__exercises__ = by_function(fn.__name__)  # type: ignore[attr-defined]
    return run


def bind_all(namespace: dict, modules: tuple) -> None:
    """Put every exercise's check under the engine, in ``namespace`` (helpers.checks) and in its lab module."""
    for function in dict.fromkeys(ex.function for ex in EXERCISES):
        for module in modules:
            fn = getattr(module, function, None)
            if fn is not None and not hasattr(fn, "__exercises__"):
                judged = judge(fn)
                setattr(module, function, judged)
                if namespace.get(function) is fn:
                    namespace[function] = judged
        if function in namespace and not hasattr(namespace[function], "__exercises__"):
            namespace[function] = judge(namespace[function])
