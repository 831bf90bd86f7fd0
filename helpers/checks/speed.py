"""Speed, judged the same way for every fix: never slower beyond the noise the runs themselves show.

A fix is judged on what the trace shows (shares, counts, structure); its step time is judged only one
way: a step that got slower than the loop as first written, beyond the noise band of the two runs
(``helpers.metrics.step_time_band``) and ``thresholds.SPEED_SLOWER_FLOOR``, never passes, on any
machine. Where the machine cannot show a gain (too few cores for the workers asked, or busy), the check
says so and judges the structure, and still refuses a slower step.
"""

from __future__ import annotations

import math
import os

from .. import metrics as m
from .. import thresholds as th
from ..model import Trace


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


def slower_problem(before: Trace, after: Trace, workers: int | None = None) -> str:
    """A line when ``after``'s median step is slower than ``before``'s beyond the noise band, else ''. Not
    judged (''; :func:`speed_note` says so) where the machine has too few cores for the ``workers`` asked."""
    if too_few_cores(workers):
        return ""
    band = m.step_time_band(before, after)
    b, a = band["before_ms"], band["after_ms"]
    if not (b > 0 and a > 0):  # NaN (no steps) or a zero-length step: no time to compare
        return ""
    noise = band["band_ms"] if math.isfinite(band["band_ms"]) else th.SPEED_NO_BAND_REL * b
    allowed = max(noise, th.SPEED_SLOWER_FLOOR * b)
    if a - b <= allowed:
        return ""
    return (f"your step is slower: median {b:.1f} -> {a:.1f} ms ({b / a:.2f}x), beyond the noise band (+/- {allowed:.1f} ms "
            "from both runs' own spread); a fix never makes the step slower, on any machine")


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
