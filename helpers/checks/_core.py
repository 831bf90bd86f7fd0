"""What every check shares: the error type, the results file, the self-check items."""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import metrics as m
from ..errors import CheckFailed
from ..model import Trace

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
}
RESULTS_FILE = ".selfcheck.json"
RESULTS_LIMIT = 1 << 20  # the eleven items' results are about 2 KB; anything far bigger is not this file
DATA = Path(__file__).resolve().parents[2] / "data"




def _track() -> str:
    from ..course import track  # torch is imported only when a track is asked for

    return track()


def _record(item: str, check: str, passed: bool) -> None:
    """Note one check's result in ``.selfcheck.json`` (the working folder), with the track it ran on.

    The file is read only if it is a small regular file and replaced, never written through: a
    symlink, pipe or device there is refused in one line instead of hanging or writing elsewhere.
    """
    from ..errors import TraceError
    from ..outputs import read_regular, write_output

    path = Path(RESULTS_FILE)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise CheckFailed(f"{path.absolute()}: is a symbolic link, folder, pipe or device, not the results file; "
                          "remove it so the checks can record their results")
    try:
        results = json.loads(read_regular(path, RESULTS_LIMIT, "self-check results file"))
        if not isinstance(results, dict):
            results = {}
    except FileNotFoundError:
        results = {}
    except TraceError as exc:
        if not path.is_file():
            raise CheckFailed(str(exc)) from None
        results = {}
    except ValueError:
        results = {}
    previous = results.get(item) if isinstance(results.get(item), dict) else {}
    checks = dict(previous.get("checks", {})) if isinstance(previous.get("checks"), dict) else {}
    checks[check] = bool(passed)
    results[item] = {"checks": checks, "track": _track(), "when": time.strftime("%Y-%m-%d %H:%M")}
    data = json.dumps(results, indent=1).encode()
    try:
        write_output(path, lambda fh: fh.write(data), force=True)
    except TraceError:  # a read-only checkout must not break the lab
        pass


#: Seconds a learner's function may run inside a check: the lab's functions read one trace and take well
#: under a second on the course's traces (lab 00's idle share: about 0.1 s on the largest shipped trace).
LEARNER_TIMEOUT_S = 60.0


def run_learner(fn: Any, *args: Any, name: str = "your function", returns: type | tuple[type, ...] | None = None,
                timeout: float = LEARNER_TIMEOUT_S) -> Any:
    """Call the learner's ``fn(*args)`` the one guarded way: every :class:`Trace` argument is handed over as
    a copy (an edit in place cannot change what the check measures), the call has ``timeout`` seconds, and
    an exception or a result that is not ``returns`` is a :class:`CheckFailed` saying so in one line."""
    import threading

    if not callable(fn):
        raise CheckFailed(f"{name} must be a function; you passed {type(fn).__name__}")
    args = tuple(_private_copy(a) for a in args)
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # reported to the learner below, whatever it was
            box["error"] = exc

    worker = threading.Thread(target=call, daemon=True, name="learner-function")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():  # a thread cannot be stopped: it is left to finish on its own, unobserved
        raise CheckFailed(f"{name} did not return within {timeout:.0f} s; look for a loop that never ends or a wait")
    if "error" in box:
        exc = box["error"]
        if isinstance(exc, (CheckFailed, NotImplementedError)):  # a stub's "not done yet" stays what it is
            raise exc
        text = " ".join(str(exc).split())[:160]
        raise CheckFailed(f"{name} raised {type(exc).__name__}: {text}; fix it and run the check again") from None
    value = box.get("value")
    if returns is not None and (isinstance(value, bool) or not isinstance(value, returns)):
        want = " or ".join(t.__name__ for t in (returns if isinstance(returns, tuple) else (returns,)))
        raise CheckFailed(f"{name} returned {type(value).__name__} ({str(value)[:40]}); it should return a {want}")
    return value


def _private_copy(value: Any) -> Any:
    if isinstance(value, Trace):
        return replace(value, events=value.events.copy(), metadata=copy.deepcopy(value.metadata), _memo={})
    return value


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
    return ""


def data_wait_share(trace: Trace) -> float:
    """Share of the analysed time the GPU idles while the host waits for data (whole capture if it has no steps)."""
    total = float(m.windows(trace)["dur_us"].sum())
    return m.idle_by_cause(trace)["data_wait"] / total if total > 0 else float("nan")
