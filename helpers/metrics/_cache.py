"""The metric cache: results stored on the trace (:mod:`._store`), one per metric and arguments.

A metric is measured over the trace it is given, as it is. Choosing the steps the figures are taken over
(the steady state's repeats, on a trace without step markers) is a step of its own, which the reports,
the diagnosis and the figures take first and say they took: :func:`helpers.metrics.steady.stepped`,
reported by :func:`helpers.diagnosis.steady_state`."""

from __future__ import annotations

import functools

from ..model import Trace
from ._store import _memo, handed_out


def _cached(fn):
    """Compute a metric once per trace (summary and diagnose both ask); callers get a copy."""

    @functools.wraps(fn)
    def wrapper(trace: Trace, *args, **kwargs):
        key = (fn.__name__, *args, *sorted(kwargs.items()))
        memo = _memo(trace)
        if key not in memo:
            memo[key] = fn(trace, *args, **kwargs)
        return handed_out(memo[key])  # a copy the caller may edit; the stored result stays as computed

    return wrapper
