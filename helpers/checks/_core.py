"""What every check shares: the error type, the results file, the self-check items."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from .. import metrics as m
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
DATA = Path(__file__).resolve().parents[2] / "data"


class CheckFailed(AssertionError):
    """A self-check did not pass; the message says what to look at and what to change."""


def _track() -> str:
    from ..course import track  # course imports checks: import late

    return track()


def _record(item: str, check: str, passed: bool) -> None:
    """Note one check's result in ``.selfcheck.json`` (the working folder), with the track it ran on."""
    path = Path(RESULTS_FILE)
    try:
        results = json.loads(path.read_text()) if path.exists() else {}
        if not isinstance(results, dict):
            results = {}
    except (OSError, ValueError):
        results = {}
    previous = results.get(item) if isinstance(results.get(item), dict) else {}
    checks = dict(previous.get("checks", {})) if isinstance(previous.get("checks"), dict) else {}
    checks[check] = bool(passed)
    results[item] = {"checks": checks, "track": _track(), "when": time.strftime("%Y-%m-%d %H:%M")}
    try:
        path.write_text(json.dumps(results, indent=1))
    except OSError:  # a read-only checkout must not break the lab
        pass


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
