"""Speed, judged the same way for every fix: never slower beyond the noise the runs themselves show.

A fix is judged on what the trace shows (shares, counts, structure); its step time is judged only one
way: a step that got slower than the loop as first written, beyond the noise band of the two runs
(``helpers.metrics.step_time_band``) and ``thresholds.SPEED_SLOWER_FLOOR``, never passes, on any
machine. Where the machine cannot show a gain (too few cores for the workers asked, or busy), the check
says so and judges the structure, and still refuses a slower step.

A machine that ran slower during the fix's capture than during the first one (another process took the cores for
the whole capture) is no slower fix: :func:`helpers.capture` times a fixed reference workload just before and
just after its profiled steps (:func:`helpers.profiling.pace_probe`) and the stamp keeps both figures. Where the
fix's capture ran measurably slower at both ends than the first capture at either end (:func:`machine_pace`),
the step is judged against the loop as first written scaled by that factor, and the verdict says so
(:func:`speed_verdict`'s note). The probe times the host: on a GPU trace only the share of the step the GPU sat
idle (the host-bound part) gets the factor. Traces without the figures (loaded, older, Nsight) are judged as before.
"""

from __future__ import annotations

import math
import os

from .. import metrics as m
from .. import thresholds as th
from ..model import Trace
from ..stamps import stamp_of


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    except OSError:
        return os.cpu_count() or 1


def too_few_cores(workers: int | None) -> str:
    """Why this machine cannot show the gain of ``workers`` loader processes (they and the training process need
    a core each), or ''."""
    n = cores()
    if workers and n < workers + 1:
        return (f"{workers} loader worker process{'es' if workers > 1 else ''} and the training process share {n} "
                f"core{'s' if n > 1 else ''} here")
    return ""


def _pace_ends(trace: Trace) -> tuple[float, float] | None:
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
    u = m.gpu_utilization(t)
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
    pb, pa = _pace_ends(before), _pace_ends(after)
    if pb is None or pa is None:
        return out
    u = max(_gpu_share(before), _gpu_share(after))
    ratio = min(pa) / max(pb)
    out.update(ratio=ratio, before_ms=max(pb), after_ms=min(pa), gpu_share=u)
    if ratio > th.PACE_MIN_RATIO:
        out["applied"] = 1.0 + (ratio - 1.0) * (1.0 - u)
    return out


def _allowed(band_ms: float, b: float) -> float:
    """The slack a median step ``b`` ms has: the noise band (:func:`helpers.metrics.noise_band_ms`; with too few
    steps for one, ``SPEED_NO_BAND_REL`` of ``b``), at least ``SPEED_SLOWER_FLOOR`` of ``b``."""
    noise = band_ms if math.isfinite(band_ms) else th.SPEED_NO_BAND_REL * b
    return max(noise, th.SPEED_SLOWER_FLOOR * b)


def speed_verdict(before: Trace, after: Trace, workers: int | None = None,
                  drift: float = float("nan")) -> tuple[str, str]:
    """``(problem, note)``: ``problem`` a line when ``after``'s median step is slower than ``before``'s beyond the
    noise band, also after the machine's own slowdown is allowed for, else ''; ``note`` a line when the step was
    slower beyond the band but the machine's slowdown explains it (the verdict passes and says so), else ''.

    The machine's slowdown is the larger of ``drift`` (the same work's time in the two traces,
    :func:`helpers.checks.behaviour.machine_drift`, for fixes that add no process of their own) and the pace probe's
    :func:`machine_pace`; where either is above 1 the loop as first written is judged at that many times its
    steps. Not judged ('', ''; :func:`speed_note` says so) where the machine has too few cores for the ``workers``
    asked."""
    import numpy as np

    if too_few_cores(workers):
        return "", ""
    band = m.step_time_band(before, after)
    b, a = band["before_ms"], band["after_ms"]
    if not (b > 0 and a > 0):  # NaN (no steps) or a zero-length step: no time to compare
        return "", ""
    allowed = _allowed(band["band_ms"], b)
    if a - b <= allowed:
        return "", ""
    pace = machine_pace(before, after)
    drift = float(drift) if math.isfinite(drift) and drift > 1 else 1.0
    factor = max(drift, pace["applied"])
    if factor <= 1:
        return (f"your step is slower: median {b:.1f} -> {a:.1f} ms ({b / a:.2f}x), beyond the noise band (+/- "
                f"{allowed:.1f} ms from both runs' own spread){_pace_words(pace)}; a fix never makes the step slower, on "
                "any machine"), ""
    b_t, a_t = m.step_times(before) * factor, m.step_times(after)
    then = float(np.median(b_t)) if len(b_t) else b * factor  # the loop as first written, at the machine's pace then
    allowed = _allowed(m.report.noise_band_ms(b_t, a_t), then)
    if pace["applied"] >= factor:  # the probe's figure decided: a step follows it only to within PACE_FACTOR_ERROR
        allowed = max(allowed, th.PACE_FACTOR_ERROR * then)
    why = _slowdown_words(drift, pace)
    if a - then <= allowed:
        return "", (f"the machine ran {factor:.2f}x slower during your capture than during the first ({why}): your "
                    f"step, median {b:.1f} -> {a:.1f} ms, was judged against the {then:.1f} ms the loop as first "
                    "written would have taken then")
    return (f"your step is slower: median {b:.1f} -> {a:.1f} ms ({b / a:.2f}x), beyond the noise band (+/- {allowed:.1f} "
            f"ms from both runs' own spread) even with the machine {factor:.2f}x slower during your capture ({why}: "
            f"{then:.1f} ms is what the loop as first written would have taken then); a fix never makes the step "
            "slower, on any machine"), ""


def _slowdown_words(drift: float, pace: dict[str, float]) -> str:
    parts = []
    if drift > 1:
        parts.append(f"the ops both loops run took {drift:.2f}x longer")
    if math.isfinite(pace["ratio"]):
        parts.append(_pace_figures(pace))
    return "; ".join(parts)


def _pace_figures(pace: dict[str, float]) -> str:
    words = (f"helpers.capture's pace probe {pace['before_ms']:.2f} -> {pace['after_ms']:.2f} ms a run, the slower "
             f"end of the first capture against the faster end of yours: {pace['ratio']:.2f}x")
    if pace["applied"] > 1 and pace["gpu_share"] > 0:
        words += (f", applied to the {1 - pace['gpu_share']:.0%} of the step the GPU sat idle: "
                  f"{pace['applied']:.2f}x")
    return words


def _pace_words(pace: dict[str, float]) -> str:
    """The pace probe's figures beside a plain verdict, where both captures have them: the machine was measured
    no slower (beyond the probe's own noise, ``thresholds.PACE_MIN_RATIO``) during the fix's capture."""
    if not math.isfinite(pace["ratio"]):
        return ""
    if pace["ratio"] > th.PACE_MIN_RATIO:  # slower, but the step waits on a GPU the probe cannot see
        return (f", and the machine's host ran slower during your capture ({_pace_figures(pace)}) but the GPU was busy "
                f"{pace['gpu_share']:.0%} of the step: a slower host does not explain a step that waits on the GPU")
    return (f", and the machine was no slower during your capture beyond the probe's own noise "
            f"({_pace_figures(pace)}; up to {th.PACE_MIN_RATIO:g}x is noise)")


def slower_problem(before: Trace, after: Trace, workers: int | None = None) -> str:
    """A line when ``after``'s median step is slower than ``before``'s beyond the noise band and beyond the
    machine's own slowdown measured by the pace probe (:func:`speed_verdict`), else ''. Not judged (''; :func:`speed_note`
    says so) where the machine has too few cores for the ``workers`` asked."""
    return speed_verdict(before, after, workers)[0]


def pace_note(before: Trace, after: Trace, workers: int | None = None, drift: float = float("nan")) -> str:
    """The line a passing verdict carries when the machine's measured slowdown explains a slower step, or ''."""
    return speed_verdict(before, after, workers, drift)[1]


def speed_note(workers: int | None) -> str:
    """The line a verdict carries when the step time was not judged (too few cores for the workers asked)."""
    short = too_few_cores(workers)
    return (f"step time not judged: {short}, so this machine cannot show the loader's gain; the structure is judged, "
            "and the data wait may not grow") if short else ""


def loader_workers(recipe: object) -> int | None:
    """The worker processes of the DataLoader a loop's recipe holds (helpers.provenance.Recipe), or None."""
    import re

    found = [int(m.group(1)) for text in getattr(recipe, "setting", lambda _k: [])("DataLoader")
             for m in [re.search(r"num_workers=(\d+)", text)] if m]
    return max(found) if found else None
