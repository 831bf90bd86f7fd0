"""What every check shares: the error type, the results file, the self-check items."""

from __future__ import annotations

import copy
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import metrics as m
from ..errors import CheckFailed
from ..model import Trace
from ..render import plural
from . import _proof

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
    "workflow": ("(course) Run the whole workflow: capture, find, fix, re-profile, compare", "labs/07_blind_triage.ipynb, labs/05_workflow_capstone.ipynb"),
    "nsight": ("(course) Read nsys stats/analyze next to the diagnosis; Nsight Compute for a GPU-bound loop",
               "labs/06_nsight_reports.ipynb"),
    "gpu_bound": ("(course) Speed up a GPU-bound loop: precision, torch.compile, Nsight Compute, memory",
                  "labs/08_gpu_bound.ipynb"),
    "kernels": ("(course) Judge kernels against the device: FLOPs, the roofline, MFU, tensor-core shapes, attention",
                "labs/09_kernel_efficiency.ipynb"),
    "memory": ("(course) Read GPU memory: allocated vs reserved, the timeline and its peak, transients, an OOM",
               "labs/10_gpu_memory.ipynb"),
    "callsites": ("(course) Find the code behind a hidden sync, or the setting in the environment behind a slow timeline",
                  "labs/11_call_sites_and_environment.ipynb"),
}
RESULTS_FILE = ".selfcheck.json"
RESULTS_LIMIT = 1 << 20  # the eleven items' results are about 2 KB; anything far bigger is not this file
DATA = Path(__file__).resolve().parents[2] / "data"




def _track() -> str:
    from ..course import track  # torch is imported only when a track is asked for

    return track()


def _record(item: str, check: str, passed: bool) -> None:
    """Note one check's result in ``.selfcheck.json`` (the working folder), with the track it ran on.

    In a ``selfcheck --run`` kernel the result is also signed (:mod:`helpers.checks._proof`) when it is the
    result of the exercise the engine is judging now; that signature is all ``selfcheck --run`` counts.
    The file is read only if it is a small regular file and replaced, never written through: a
    symlink, pipe or device there is refused in one line instead of hanging or writing elsewhere.
    """
    from ..errors import TraceError
    from ..outputs import read_state_json, write_output

    path = Path(RESULTS_FILE)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise CheckFailed(f"{path.absolute()}: is a symbolic link, folder, pipe or device, not the results file; "
                          "remove it so the checks can record their results")
    try:
        results = read_state_json(path, RESULTS_LIMIT, "self-check results file")  # bounded: size, kind, depth
        if not isinstance(results, dict):
            results = {}
    except FileNotFoundError:
        results = {}
    except TraceError as exc:
        if not path.is_file():
            raise CheckFailed(str(exc)) from None
        results = {}  # not this file's format (damaged, nested too deep): the checks start it again
    previous = results.get(item) if isinstance(results.get(item), dict) else {}
    checks = dict(previous.get("checks", {})) if isinstance(previous.get("checks"), dict) else {}
    checks[check] = bool(passed)
    track = _track()
    signed = dict(previous["signed"]) if isinstance(previous.get("signed"), dict) else {}
    evidence = _proof.SIGNER.take_evidence()
    entry = _proof.SIGNER.entry(item, check, bool(passed), track, evidence)
    if entry is None:
        signed.pop(check, None)  # an older signature no longer speaks for this result
    else:
        signed[check] = entry
    results[item] = {"checks": checks, "track": track, "when": time.strftime("%Y-%m-%d %H:%M")}
    if signed:
        results[item]["signed"] = signed
    data = json.dumps(results, indent=1).encode()
    try:
        write_output(path, lambda fh: fh.write(data), force=True)
    except TraceError:  # a read-only checkout must not break the lab
        pass


#: Seconds a learner's function may run inside a check: the lab's functions read one trace or run a few
#: small CPU steps and take well under a second on the course's inputs (lab 00's idle share: about 0.1 s on
#: the largest shipped trace; lab 03's 2 x LOG_EVERY small steps: about 0.3 s). Read at call time, so a
#: test can lower it.
LEARNER_TIMEOUT_S = 60.0
#: Numbers a learner's function may return where a check wants one figure.
NUMBER = (int, float, np.floating, np.integer)


def run_learner(fn: Any, *args: Any, name: str = "your function", returns: type | tuple[type, ...] | None = None,
                timeout: float | None = None, note: Any = None) -> Any:
    """Call the learner's ``fn(*args)`` the one guarded way: every :class:`Trace` argument is handed over as
    a copy and an edit of that copy is refused (the check measures the trace it was given, and a function
    that changes its input has not just read it), the call has ``timeout`` seconds (default
    :data:`LEARNER_TIMEOUT_S`), and an exception or a result that is not ``returns`` is a
    :class:`CheckFailed` saying so in one line. ``note`` is the learner's function whose source the
    check's result is signed with when ``fn`` is the check's own wrapper around it (False: none)."""
    import threading

    if not callable(fn):
        raise CheckFailed(f"{name} must be a function; you gave it a {type(fn).__name__}")
    if note is not False:
        _proof.note_source(fn if note is None else note)  # signed with the check's result in a selfcheck --run
    limit = LEARNER_TIMEOUT_S if timeout is None else float(timeout)
    copies = tuple(_private_copy(a) for a in args)
    box: dict[str, Any] = {}
    grad = _grad_mode()  # torch's grad mode is per thread: the learner's thread gets the caller's

    def call() -> None:
        _LEARNER.running = True  # what this thread prints is capped (_CappedOutput)
        try:
            if grad is None:
                value = fn(*copies)
            else:
                import torch

                with torch.set_grad_enabled(grad):
                    value = fn(*copies)
            # made plain here, under the time limit: a returned object's own methods (its __eq__, __float__,
            # __str__) never run in the check, where nothing bounds them
            box["value"] = plain(value, f"what {name} returned")
        except BaseException as exc:  # reported to the learner below, whatever it was
            box["error"] = exc
            box["error_text"] = _one_line(exc)  # its __str__ is the learner's code too: read under the limit

    before = _children()
    worker = threading.Thread(target=call, daemon=True, name="learner-function")
    with _capped_output() as dropped:
        worker.start()
        worker.join(limit)
    if dropped[0]:
        print(f"[{dropped[0]:,} more characters your function printed are not shown]", file=sys.stderr)
    if worker.is_alive():  # a thread cannot be stopped: it is left to finish on its own, unobserved
        stopped = _stop_children(before)
        raise CheckFailed(f"{name} did not return within {limit:g} s; look for a loop that never ends or a wait"
                          + (f" (the {plural(stopped, 'process', 'processes')} it started {'were' if stopped > 1 else 'was'} stopped)"
                             if stopped else ""))
    if "error" in box:
        _stop_children(before)  # what a failed call started (a pool, a server) does not outlive it
        exc = box["error"]
        if isinstance(exc, (CheckFailed, NotImplementedError)):  # a stub's "not done yet" stays what it is
            raise exc
        raise CheckFailed(f"{name} raised {type(exc).__name__}: {box['error_text']}; fix it and run the check again") from None
    for original, given in zip(args, copies):
        if isinstance(original, Trace) and _edited(original, given):
            raise CheckFailed(f"{name} changed the trace it was given (its events table or steps): a measurement reads "
                              "the trace and leaves it as it was; work on ev = trace.events.copy() if you need new columns")
    value = box.get("value")
    if returns is not None and (isinstance(value, bool) or not issubclass(type(value), returns)):  # type(): no __class__ disguise
        want = " or ".join(t.__name__ for t in (returns if isinstance(returns, tuple) else (returns,)))
        raise CheckFailed(f"{name} returned {type(value).__name__} ({_one_line(value, 40)}); it should return a {want}")
    return value


#: Characters a learner's function may print during one call of it in a check (a notebook cell holding megabytes
#: of output stalls the browser); the rest is counted and dropped.
PRINT_LIMIT = 100_000
_LEARNER = __import__("threading").local()


class _CappedOutput:
    """``sys.stdout`` / ``sys.stderr`` while a learner's function runs: the learner's thread writes through until
    :data:`PRINT_LIMIT` characters, the rest is counted; every other thread writes as ever."""

    def __init__(self, real: Any, dropped: list[int]) -> None:
        self._real, self._dropped = real, dropped

    def write(self, text: str) -> int:
        if not getattr(_LEARNER, "running", False):
            return self._real.write(text)
        room = PRINT_LIMIT - self._dropped[1]
        shown = text[:max(room, 0)]
        self._dropped[1] += len(text)
        self._dropped[0] += len(text) - len(shown)
        if shown:
            self._real.write(shown)
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _capped_output:
    """Install :class:`_CappedOutput` on stdout and stderr for the call; yields [dropped, written] counts."""

    def __enter__(self) -> list[int]:
        self.counts = [0, 0]
        self.saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _CappedOutput(sys.stdout, self.counts), _CappedOutput(sys.stderr, self.counts)
        return self.counts

    def __exit__(self, *exc: object) -> None:
        if isinstance(sys.stdout, _CappedOutput):  # unless the learner's code replaced them meanwhile
            sys.stdout = self.saved[0]
        if isinstance(sys.stderr, _CappedOutput):
            sys.stderr = self.saved[1]


class scratch_dir:
    """A temporary folder for a check's files, made and removed by the check's own thread: where learner code runs
    in it (a profiler writing its trace there), a call that raises or never returns still leaves no folder behind."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __enter__(self) -> str:
        import tempfile

        self.path = tempfile.mkdtemp(prefix=self.prefix)
        return self.path

    def __exit__(self, *exc: object) -> None:
        import shutil

        shutil.rmtree(self.path, ignore_errors=True)


def _children() -> set[int]:
    """This process's child processes (Linux's /proc; elsewhere none are known and none are stopped)."""
    me = str(os.getpid())
    out = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # after the command name, which may hold spaces
        if len(fields) > 1 and fields[1].decode() == me:
            out.add(int(entry))
    return out


def _stop_children(before: set[int]) -> int:
    """Stop the child processes started since ``before`` was taken (a learner's call that failed or never returned
    leaves no process running); how many there were."""
    import signal

    new = _children() - before
    for pid in new:  # not reaped here: the Popen or pool that started it reads its exit status
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    return len(new)


def course_bar(given: Any, course: float, at_least: bool) -> float:
    """The bar a fix that earns credit is held to: the caller's when it is stricter than the course's, else the
    course's. A bar is an argument (``max_per_step=0.3``), so a learner could pass ``max_per_step=1e9`` or
    ``min_gain=0`` (or NaN, which every comparison fails) and pass a fix that fixed nothing."""
    value = float(given) if isinstance(given, (int, float, np.integer, np.floating)) and not isinstance(given, bool) else math.nan
    if not math.isfinite(value):
        return course
    return max(value, course) if at_least else min(value, course)


def learner_number(fn: Any, *args: Any, name: str = "your function", timeout: float | None = None) -> float:
    """:func:`run_learner` for a function that returns one figure: a finite float, or one line saying what came back."""
    value = run_learner(fn, *args, name=name, returns=NUMBER, timeout=timeout)
    try:
        out = float(value)
    except (OverflowError, ValueError):
        out = float("nan")
    if not math.isfinite(out):
        raise CheckFailed(f"{name} returned {_one_line(value, 40)}, not a finite number: look for a division by zero "
                          "or an empty selection")
    return out


def _one_line(value: Any, width: int = 160) -> str:
    try:
        text = str(value)
    except BaseException:  # noqa: BLE001 - a learner's object whose __str__ fails (or exits) is still reported
        text = f"<{type(value).__name__}>"
    text = " ".join(text[:width * 4].split())  # a megabyte of message is cut before it is split
    return text[:width] + ("..." if len(text) > width else "")


def _grad_mode() -> bool | None:
    torch = sys.modules.get("torch")  # not imported here: a check that never touches torch need not load it
    return None if torch is None else bool(torch.is_grad_enabled())


#: How deep :func:`plain` follows lists and dicts (an answer is a few levels at most; a cycle would be endless).
PLAIN_DEPTH = 16


def plain(value: Any, what: str = "your answer", _depth: int = 0) -> Any:
    """``value`` as plain Python values, the form every check compares: a ``str``, ``int`` or ``float`` subclass
    becomes the exact type (read through the base type, so none of its own methods run), a dict, list, tuple or
    set is rebuilt of plain items, a :class:`~helpers.checks.reading.Reading` of plain fields. A learner's own
    class (defined in the notebook) is refused in one line: its ``__eq__`` could say it equals whatever a check
    compares it with (a pattern name that "equals" every pattern passed a reading naming the wrong one). Library
    objects (numpy, pandas, torch, the course's own) are passed on as they are. Types are read with ``type()``, never
    ``isinstance`` (which believes a ``__class__`` property)."""
    kind = type(value)
    if kind in (str, int, float, bool, type(None), bytes, complex):
        return value
    if _depth > PLAIN_DEPTH:
        raise CheckFailed(f"{what} is nested more than {PLAIN_DEPTH} levels deep (or holds itself): give plain numbers, text, "
                          "lists and dicts")
    if issubclass(kind, bool):
        return bool(int.__int__(value))
    if issubclass(kind, str):
        return str.__str__(value)
    if issubclass(kind, int):
        return int.__int__(value)
    if issubclass(kind, float):
        return float.__float__(value)
    if issubclass(kind, bytes):
        return bytes(memoryview(value))
    if issubclass(kind, dict):
        return {plain(k, what, _depth + 1): plain(v, what, _depth + 1) for k, v in dict.items(value)}
    if issubclass(kind, (list, tuple, set, frozenset)) and not hasattr(kind, "_fields"):
        base = next(b for b in (list, tuple, frozenset, set) if issubclass(kind, b))
        return base(plain(v, what, _depth + 1) for v in base.__iter__(value))
    record = next((k for k in kind.__mro__ if (getattr(k, "__module__", "") or "").startswith("helpers.checks")
                   and "__dataclass_fields__" in vars(k)), None)
    if record is not None:  # a check's record (checks.Reading): rebuilt from its fields as stored, no property runs
        import dataclasses

        stored = getattr(value, "__dict__", {})
        names = [f.name for f in dataclasses.fields(record) if f.init]
        missing = [n for n in names if n not in stored]
        if missing:
            raise CheckFailed(f"{what} is a {kind.__name__} without its own {missing[0]}: build it as "
                              f"checks.{record.__name__}(...)")
        return record(**{n: plain(stored[n], what, _depth + 1) for n in names})
    if _own_class(kind) and not callable(value):
        raise CheckFailed(f"{what} holds a {kind.__name__}, a class of your own: give plain numbers, text, lists and dicts "
                          "(a class of your own can compare equal to anything, so no check can judge it)")
    return value


def _own_class(kind: type) -> bool:
    """A class defined in the notebook (or script) on nothing but ``object``: no library's type behind it."""
    def mine(k: type) -> bool:
        module = getattr(k, "__module__", "") or ""
        return module in ("__main__", "__mp_main__") or module.startswith("__main__.")
    return mine(kind) and all(mine(k) for k in kind.__mro__ if k is not object)


class Verdict(str):
    """A check's verdict ("passed: ...", "not judged on the CPU track: ...") as a notebook shows it: its words
    wrapped between words, as a failed check's are (:func:`helpers.course.shown_lines`), without a string's quotes.
    A plain ``str`` shows as its repr, one line that JupyterLab breaks anywhere, mid-word (word-break: break-all).
    Otherwise the very text: it compares, prints and serialises as the ``str`` it is."""

    __slots__ = ()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython's text/plain for a cell's value
        from ..course import shown_lines

        p.text("\n".join(shown_lines(str(self))))


def plain_arguments(fn: Callable) -> Callable:
    """``fn`` (a check) given :func:`plain` copies of its arguments: what it compares is never a learner's object.
    A verdict it returns in words comes back a :class:`Verdict`, shown wrapped in a notebook."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = fn(*(plain(a) for a in args), **{k: plain(v) for k, v in kwargs.items()})
        return Verdict(out) if type(out) is str else out

    wrapper.__plain__ = True  # type: ignore[attr-defined]
    return wrapper


def _private_copy(value: Any) -> Any:
    if isinstance(value, Trace):
        return replace(value, events=value.events.copy(), metadata=copy.deepcopy(value.metadata), _memo={})
    return value


def _edited(original: Trace, given: Any) -> bool:
    """Whether the learner's copy of ``original`` differs from it (events replaced or changed, steps changed)."""
    try:
        if not isinstance(given, Trace) or not given.events.equals(original.events):
            return True
        if list(given.events.columns) != list(original.events.columns):
            return True
        steps, mine = original.metadata.get("steps"), given.metadata.get("steps")
        if isinstance(steps, pd.DataFrame):
            return not (isinstance(mine, pd.DataFrame) and mine.equals(steps))
        return set(given.metadata) != set(original.metadata)
    except Exception:  # noqa: BLE001 - a copy too damaged to compare is an edit
        return True


def _check(item: str, name: str, ok: bool, message: str) -> str:
    _record(item, name, ok)
    if not ok:
        raise CheckFailed(message)
    return f"passed: {name}"


def shipped(trace: Trace) -> bool:
    """Whether ``trace`` is one the course recorded (a file under ``data/``), not the learner's own capture."""
    if not trace.source:
        return False
    try:
        return Path(trace.source).resolve().is_relative_to(DATA.resolve())
    except (OSError, ValueError):
        return False


def learner_trace_problem(*traces: Trace) -> str | None:
    """A message when a fix check is fed the course's recorded traces instead of the learner's own."""
    mine = [t for t in traces if shipped(t)]
    if not mine:
        return None
    return (f"{Path(mine[0].source).name} is a trace the course recorded, not yours: capture your own loop "
            "(helpers.capture(your_step, ...)) and pass that; a recorded trace earns no credit.")


def own_capture_problem(after: Trace, before: Trace | None = None) -> str | None:
    """A message when ``after`` is not a capture made in this kernel (:func:`helpers.capture`), or is on
    another track than ``before``; None when it is the learner's own."""
    from ..profiling import captured_here  # profiling imports torch: import late

    shipped_msg = learner_trace_problem(after) or (learner_trace_problem(before) if before is not None else None)
    if shipped_msg:
        return shipped_msg
    if not captured_here(after):
        name = Path(after.source).name if after.source else "this trace"
        return (f"{name} was loaded from a file (or captured in another kernel, or its events changed since), not "
                "captured in this notebook: run helpers.capture(your_step, ...) here and pass what it returns; a "
                "loaded trace earns no credit")
    from ..profiling import events_digest

    _proof.note_trace(events_digest(after))
    if before is not None and before.has_gpu != after.has_gpu:
        track = {True: "a GPU trace", False: "a CPU-only trace"}
        return (f"your 'before' is {track[before.has_gpu]} and your 'after' {track[after.has_gpu]}: compare two "
                "captures of the same track, made on this machine")
    return None


def _close(a: float, b: float, rel: float, abs_: float = 0.0) -> bool:
    return math.isfinite(a) and abs(a - b) <= max(rel * abs(b), abs_)


def unit_slip(answer: float, want: float, rel: float = 0.15) -> str:
    """A hint when ``answer`` is ``want`` times 1000 or 1e6 (or divided by them): a unit mixed up, not a misreading."""
    try:
        a, w = float(answer), float(want)
    except (TypeError, ValueError):
        return ""
    if not (math.isfinite(a) and math.isfinite(w)) or a == 0 or w == 0:
        return ""
    for factor, words in ((1e3, "1000"), (1e6, "a million")):
        if _close(a, w * factor, rel) or _close(a * factor, w, rel):
            return (f" (your figure is {words} times {'too big' if abs(a) > abs(w) else 'too small'}: a unit mixed up? "
                    "the events table holds microseconds, the timeline's axis milliseconds, bytes are bytes)")
    if 0 < abs(w) <= 1 and _close(a, w * 100, rel):  # a share written as a percentage (84 for 0.84)
        return " (your figure is 100 times too big: a percentage? a share is a fraction of 1, 0.5 for half)"
    return ""


def data_wait_share(trace: Trace) -> float:
    """Share of the analysed time the GPU idles while the host waits for data: over the trace's steps (the
    steady state's repeats where none is marked, :func:`helpers.steady_state`), else the whole capture."""
    trace = m.stepped(trace)
    total = float(m.windows(trace)["dur_us"].sum())
    return m.idle_by_cause(trace)["data_wait"] / total if total > 0 else float("nan")


# Labs 01 and 05 both ask (called as _core._cores_busy(), so one measurement or test stand-in serves both).
def _cores_busy(workers: int | None = None) -> str:
    """Why this machine cannot show a loader's gain now: its load average fills every core, or it has too few
    cores for the ``workers`` asked and the training process (helpers.checks.speed.too_few_cores); or ''."""
    from .speed import cores, too_few_cores

    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        load = 0.0
    n = cores()
    if n and load >= n:
        return f"load average {load:.1f} on {n} cores"
    return too_few_cores(workers)
