"""Lab 04: communication and uneven load across ranks."""

from __future__ import annotations

from .. import metrics as m
from .. import thresholds as th
from ..diagnosis import diagnose
from ..model import Trace
from ._core import CheckFailed, _check, _close, _record, data_wait_share, learner_trace_problem  # noqa: F401

#: The self-check items this lab earns, per track, and the checks of the learner's work each needs.
CREDIT: dict[str, dict[str, tuple[str, ...]]] = {
    "comm": {"gpu": ("check_read_exposed_comm", "check_comm_fixed"), "cpu": ("check_read_exposed_comm", "check_comm_fixed")},
    # the imbalance exercise needs the learner's own fix (issue 9): until it exists the item cannot be earned
    "imbalance": {"gpu": ("check_imbalance_fixed",), "cpu": ("check_imbalance_fixed",)},
}


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
