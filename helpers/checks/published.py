"""Lab 04, section 4: reading a multi-GPU NCCL job that others recorded and published.

The job is ``data/published__dlrm_8gpu__v100`` (``data/manifest.json``'s ``"recorded_elsewhere"``): one step of
each of eight ranks. The learner's reading is recomputed here from the trace: which stream the NCCL kernels run on,
the rank everyone waited for in the forward pass, the rank that waited longest and for how long, the ranks whose
backward ran long, and how much of the collective time compute hid. It is a reading of a shipped recording: checked,
it earns no self-check item.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .. import metrics as m
from ..model import Trace
from ._core import DATA, CheckFailed, _check, _close, _record, unit_slip

__all__ = ["check_published_job_reading", "PUBLISHED_JOB", "published_job_entry", "rank_table"]

#: The job the section reads.
PUBLISHED_JOB = DATA / "published__dlrm_8gpu__v100"
#: A rank's backward is long when it takes this much more than the median rank's (ranks 4 and 5 of the job took
#: 5.33 ms against 4.37-4.51 ms: 20% over the median; the others are within 2% of it).
SLOW_BACKWARD_EXCESS = 0.10
BACKWARD_RANGE = "## backward ##"


def published_job_entry() -> dict:
    """The job's manifest entry: who recorded it, where it was published, its licence, hardware and files."""
    from ..outputs import shipped_json

    entries = shipped_json(DATA / "manifest.json").get("recorded_elsewhere", [])
    return next(e for e in entries if e["file"].rstrip("/") == PUBLISHED_JOB.name)


def _reference(trace: Trace) -> dict:
    ev = trace.events
    col = ev[ev["kind"] == "collective"].sort_values("start_us")
    first = col.groupby("rank").head(1).set_index("rank")
    late = int(first["start_us"].idxmax())
    waited = int(first["dur_us"].idxmax())
    back = ev[ev["name"] == BACKWARD_RANGE].groupby("rank")["dur_us"].sum()
    slow = sorted(int(r) for r, d in back.items() if d > (1 + SLOW_BACKWARD_EXCESS) * back.median())
    cs = m.comm_stats(trace)
    return {"nccl_stream": int(col["stream"].mode().iloc[0]), "late_rank": late, "waited_longest": waited,
            "wait_ms": float(first.loc[waited, "dur_us"] - first.loc[late, "dur_us"]) / 1e3,
            "slow_backward": slow, "overlap_share": 1.0 - float(cs["exposed_us"].sum()) / float(cs["collective_us"].sum())}


def check_published_job_reading(answer: dict, trace: Trace) -> str:
    """``{"nccl_stream", "late_rank", "waited_longest", "wait_ms", "slow_backward", "overlap_share"}`` read from the
    published job (each recomputed from ``trace``; ms within 5%, the share within 0.02)."""
    name = "check_published_job_reading"
    if not trace.source or Path(trace.source).resolve() != PUBLISHED_JOB.resolve():
        _record("comm", name, False)
        raise CheckFailed("read the published job itself: job = helpers.load(checks.PUBLISHED_JOB)")
    want = _reference(trace)
    if not isinstance(answer, dict):
        return _check("comm", name, False, "job_reading must be a dict with nccl_stream, late_rank, waited_longest, "
                      "wait_ms, slow_backward and overlap_share")
    hints = {
        "nccl_stream": "the stream the collective kernels (ncclKernel_...) run on, the same on every rank",
        "late_rank": "the rank whose first collective kernel starts last: everyone else is already waiting in it",
        "waited_longest": "the rank whose first collective kernel runs longest (it started first and waited)",
        "slow_backward": f"the ranks whose '{BACKWARD_RANGE}' range takes over {SLOW_BACKWARD_EXCESS:.0%} more than the "
                         "median rank's, as a sorted list",
    }
    for key, hint in hints.items():
        got = answer.get(key)
        if key == "slow_backward" and isinstance(got, (list, tuple, set)):
            try:
                got = sorted(int(x) for x in got)
            except (TypeError, ValueError):
                pass  # not ranks: compared as given, and refused with the hint
        if got != want[key]:
            return _check("comm", name, False, f"{key}={answer.get(key)!r}: {hint}")
    try:
        wait, share = float(answer.get("wait_ms", "nan")), float(answer.get("overlap_share", "nan"))
    except (TypeError, ValueError):
        return _check("comm", name, False, "wait_ms and overlap_share must be numbers")
    if not _close(wait, want["wait_ms"], 0.05):
        return _check("comm", name, False, f"wait_ms={wait:.3g}: how much longer the first collective of the rank that "
                      "waited longest ran than the late rank's, in ms" + unit_slip(wait, want["wait_ms"]))
    return _check("comm", name, _close(share, want["overlap_share"], 0.0, 0.02),
                  f"overlap_share={share:.3g}: the share of all collective time that compute hid, 1 - exposed/collective "
                  "summed over the ranks (metrics.comm_stats(job))" + unit_slip(share, want["overlap_share"]))


def rank_table(trace: Trace) -> pd.DataFrame:
    """Per rank: when its step starts (ms from the earliest rank's), its step, compute and collective ms, and the
    collective ms no compute hid (the figures the section starts from; no reading in them)."""
    if trace.steps.empty or trace.events.empty:
        from ..errors import ArgumentError

        raise ArgumentError(f"rank_table(): {trace.source or 'the trace'} has no steps (no ProfilerStep ranges): "
                            "give the published job's trace")
    cs = m.comm_stats(trace).set_index("rank")
    steps = trace.steps.set_index("rank")
    t0 = float(steps["start_us"].min())
    out = pd.DataFrame({"step_starts_ms": (steps["start_us"] - t0) / 1e3, "step_ms": cs["window_us"] / 1e3,
                        "compute_ms": cs["compute_us"] / 1e3, "collective_ms": cs["collective_us"] / 1e3,
                        "exposed_ms": cs["exposed_us"] / 1e3})
    return out.round(2)
