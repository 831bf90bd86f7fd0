"""The metric cache: results stored on the trace (:mod:`._store`), measured over its steady-state steps."""

from __future__ import annotations

import functools

import pandas as pd

from ..model import Trace
from ._store import _memo
from .steady import stepped


def _cached(fn):
    """Compute a metric once per trace (summary and diagnose both ask); callers get a copy.

    A trace without step markers is measured over its steady state's repeats when one is found
    (:func:`helpers.metrics.steady.stepped`), so every cached metric sees the same steps.
    """

    @functools.wraps(fn)
    def wrapper(trace: Trace, *args, **kwargs):
        trace = stepped(trace)
        key = (fn.__name__, *args, *sorted(kwargs.items()))
        memo = _memo(trace)
        if key not in memo:
            memo[key] = fn(trace, *args, **kwargs)
        value = memo[key]
        if isinstance(value, pd.DataFrame):
            return value.copy()
        if isinstance(value, dict):
            return {k: (v.copy() if isinstance(v, (pd.DataFrame, dict)) else v) for k, v in value.items()}
        return value

    return wrapper
