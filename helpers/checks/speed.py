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

import os

from ..metrics.pace import judge_step, machine_pace, pace_ends  # noqa: F401  (machine_pace, pace_ends: re-exported)
from ..model import Trace
from ..render import pace_words, slowdown_words


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


def speed_verdict(before: Trace, after: Trace, workers: int | None = None,
                  drift: float = float("nan")) -> tuple[str, str]:
    """``(problem, note)``: ``problem`` a line when ``after``'s median step is slower than ``before``'s beyond the
    noise band, also after the machine's own slowdown is allowed for, else ''; ``note`` a line when the step was
    slower beyond the band but the machine's slowdown explains it (the verdict passes and says so), else ''.

    The figures are :func:`helpers.metrics.pace.judge_step`'s (``python -m helpers compare`` words the same ones).
    The machine's slowdown is the larger of ``drift`` (the same work's time in the two traces,
    :func:`helpers.checks.behaviour.machine_drift`, for fixes that add no process of their own) and the pace probe's
    :func:`machine_pace`; where either is above 1 the loop as first written is judged at that many times its
    steps. Not judged ('', ''; :func:`speed_note` says so) where the machine has too few cores for the ``workers``
    asked."""
    if too_few_cores(workers):
        return "", ""
    j = judge_step(before, after, drift)
    b, a, allowed, factor, then, pace = j["before_ms"], j["after_ms"], j["allowed_ms"], j["factor"], j["then_ms"], j["pace"]
    if not (j["slower"] or j["explained"]):
        return "", ""
    if factor <= 1:
        return (f"your step is slower: median {b:.1f} -> {a:.1f} ms ({b / a:.2f}x), beyond the noise band (+/- "
                f"{allowed:.1f} ms from both runs' own spread){pace_words(pace)}; a fix never makes the step slower, on "
                "any machine"), ""
    why = slowdown_words(j["drift"], pace)
    if j["explained"]:
        return "", (f"the machine ran {factor:.2f}x slower during your capture than during the first ({why}): your "
                    f"step, median {b:.1f} -> {a:.1f} ms, was judged against the {then:.1f} ms the loop as first "
                    "written would have taken then")
    return (f"your step is slower: median {b:.1f} -> {a:.1f} ms ({b / a:.2f}x), beyond the noise band (+/- {allowed:.1f} "
            f"ms from both runs' own spread) even with the machine {factor:.2f}x slower during your capture ({why}: "
            f"{then:.1f} ms is what the loop as first written would have taken then); a fix never makes the step "
            "slower, on any machine"), ""


def slower_problem(before: Trace, after: Trace, workers: int | None = None) -> str:
    """A line when ``after``'s median step is slower than ``before``'s beyond the noise band and beyond the
    machine's own slowdown measured by the pace probe (:func:`speed_verdict`), else ''. Not judged (''; :func:`speed_note`
    says so) where the machine has too few cores for the ``workers`` asked."""
    return speed_verdict(before, after, workers)[0]


def pace_note(before: Trace, after: Trace, workers: int | None = None, drift: float = float("nan")) -> str:
    """The line a passing verdict carries when the machine's measured slowdown explains a slower step, or ''."""
    return speed_verdict(before, after, workers, drift)[1]


def band_words(before_ms: float, after_ms: float, paced: str = "") -> str:
    """The words a passing verdict puts after its two median step times: a step that reads longer but inside the
    noise band is said to be longer, so "178 -> 241 ms" never sits beside a bare "not slower"."""
    if paced:
        return f" (not slower beyond the noise band once the machine's own slowdown is allowed for: {paced})"
    if after_ms > before_ms:
        return " (longer here, but inside the noise band of the two runs' own spread: not judged slower)"
    return " (not slower beyond the noise band)"


def speed_note(workers: int | None) -> str:
    """The line a verdict carries when the step time was not judged (too few cores for the workers asked)."""
    short = too_few_cores(workers)
    return (f"step time not judged: {short}, so it need not show the loader's gain; the structure is judged, "
            "and the data wait may not grow") if short else ""


def loader_workers(recipe: object) -> int | None:
    """The worker processes of the DataLoader a loop's recipe holds (helpers.provenance.Recipe), or None."""
    import re

    found = [int(m.group(1)) for text in getattr(recipe, "setting", lambda _k: [])("DataLoader")
             for m in [re.search(r"num_workers=(\d+)", text)] if m]
    return max(found) if found else None
