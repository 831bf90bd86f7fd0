"""Lab 05: the workflow capstone."""

from __future__ import annotations

from .. import metrics as m
from ..diagnosis import diagnose
from ..model import Trace
from ._core import CheckFailed, _check, _close, _record, data_wait_share, learner_trace_problem  # noqa: F401
from .lab01 import _data_verdict, _timing_note  # noqa: F401

#: The self-check items this lab earns, per track, and the checks of the learner's work each needs.
CREDIT: dict[str, dict[str, tuple[str, ...]]] = {
    "workflow": {"gpu": ("check_next_steps", "check_capstone"), "cpu": ("check_next_steps", "check_capstone")},
}


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
