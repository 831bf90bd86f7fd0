"""A before/after's step time judged the one way the course judges it: against the runs' own noise and the
machine's measured pace (numbers only; :mod:`helpers.checks.speed` and :mod:`helpers.render` word them).

The fix checks and ``python -m helpers compare`` both read :func:`judge_step`, so a verdict in a lab and the
same pair's compare output never disagree on what is noise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import thresholds as th
from ..model import Trace
from ..stamps import stamp_of
from .gpu import gpu_utilization
from .report import noise_band_ms, slack_ms, step_time_band, step_times


def pace_ends(trace: Trace) -> tuple[float, float] | None:
    """The pace probe's two figures (ms a run, just before and just after the profiled steps) that
    :func:`helpers.capture` recorded in ``trace``'s stamp, or None (no stamp of this process, no figures)."""
    how = stamp_of(trace)
    ends = how.get("pace_ms") if how else None
    if not isinstance(ends, (list, tuple)) or len(ends) != 2:
        return None
    try:
        pre, post = float(ends[0]), float(ends[1])
    except (TypeError, ValueError):
        return None
    return (pre, post) if all(math.isfinite(x) and x > 0 for x in (pre, post)) else None


def _gpu_share(t: Trace) -> float:
    if not t.has_gpu:
        return 0.0
    u = gpu_utilization(t)
    return min(max(u, 0.0), 1.0) if math.isfinite(u) else 0.0


def machine_pace(before: Trace, after: Trace) -> dict[str, float]:
    """How much slower the machine ran during ``after``'s capture than during ``before``'s, from the pace probe
    both captures recorded: ``ratio``, the fastest of ``after``'s two figures over the slowest of ``before``'s
    (slower at both ends of the fix's capture than at either end of the first: a disturbance that lasted the
    capture, and one the fix's own leftover work after its last step, a loader's workers still prefetching, cannot
    make, since the figure before its first step counts too); ``applied``, the factor the step is judged against:
    1 unless ``ratio`` exceeds the probe's own noise (``thresholds.PACE_MIN_RATIO``), and on a GPU trace only the
    host's share of the step takes it (``1 + (ratio - 1) x (1 - u)``, ``u`` the larger GPU utilization of the
    two: a GPU-bound step waits on the GPU, which a CPU probe says nothing about); ``before_ms``, ``after_ms``
    (the figures compared) and ``gpu_share`` (``u``). All NaN (``applied`` 1) where either trace has no figures."""
    out = {"ratio": float("nan"), "applied": 1.0, "before_ms": float("nan"), "after_ms": float("nan"),
           "gpu_share": float("nan")}
    pb, pa = pace_ends(before), pace_ends(after)
    if pb is None or pa is None:
        return out
    u = max(_gpu_share(before), _gpu_share(after))
    ratio = min(pa) / max(pb)
    out.update(ratio=ratio, before_ms=max(pb), after_ms=min(pa), gpu_share=u)
    if ratio > th.PACE_MIN_RATIO:
        out["applied"] = 1.0 + (ratio - 1.0) * (1.0 - u)
    return out


def judge_step(before: Trace, after: Trace, drift: float = float("nan")) -> dict[str, Any]:
    """``after``'s median step against ``before``'s, as every fix check judges it.

    Keys: ``before_ms, after_ms, band_ms`` (:func:`step_time_band`); ``allowed_ms``, the slack a slower step has
    (:func:`slack_ms`); ``pace`` (:func:`machine_pace`); where the step is slower beyond that slack and the machine
    measurably slower (``drift``, the same work's time in the two traces, or the pace probe): ``factor``, the
    machine's slowdown, ``then_ms``, the loop as first written at that pace, and ``allowed_ms`` the slack around it
    (at least ``PACE_FACTOR_ERROR`` of it where the probe decided); ``slower`` (True: slower beyond all of it) and
    ``explained`` (True: slower beyond the slack, but not beyond the machine's own slowdown). ``judged`` is False
    where either trace has no step time to compare."""
    band = step_time_band(before, after)
    b, a = band["before_ms"], band["after_ms"]
    out: dict[str, Any] = {"before_ms": b, "after_ms": a, "band_ms": band["band_ms"], "allowed_ms": float("nan"),
                           "factor": 1.0, "then_ms": b, "slower": False, "explained": False, "judged": False,
                           "pace": machine_pace(before, after)}
    if not (b > 0 and a > 0):  # NaN (no steps) or a zero-length step: no time to compare
        return out
    out["judged"] = True
    out["allowed_ms"] = allowed = slack_ms(band["band_ms"], b)
    if a - b <= allowed:
        return out
    pace = out["pace"]
    drift = float(drift) if math.isfinite(drift) and drift > 1 else 1.0
    factor = max(drift, pace["applied"])
    out["drift"] = drift
    if factor <= 1:
        out["slower"] = True
        return out
    b_t, a_t = step_times(before) * factor, step_times(after)
    then = float(np.median(b_t)) if len(b_t) else b * factor  # the loop as first written, at the machine's pace then
    allowed = slack_ms(noise_band_ms(b_t, a_t), then)
    # a step follows the machine's measured slowdown only roughly, whichever measured it (the probe's mix of ops, or
    # the ops both loops run, which are not all of a fixed step): within PACE_FACTOR_ERROR of it
    allowed = max(allowed, th.PACE_FACTOR_ERROR * then)
    out.update(factor=factor, then_ms=then, allowed_ms=allowed, slower=a - then > allowed, explained=a - then <= allowed)
    return out


__all__ = ["judge_step", "machine_pace", "pace_ends", "slack_ms"]
