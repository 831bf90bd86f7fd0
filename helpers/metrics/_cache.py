"""The metric cache: results stored on the trace, emptied when its events table is replaced."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd

from ..model import Trace


def _memo(trace: Trace) -> dict[Any, Any]:
    """The trace's metric cache, emptied when ``trace.events`` was reassigned since it was filled.

    The cache holds the very events frame it was computed from and compares by identity, so a
    reassigned table can never be served old results (an id() could be reused, the object cannot).
    """
    memo = trace._memo
    if memo.get("__events__") is not trace.events:
        memo.clear()
        memo["__events__"] = trace.events
    return memo


def _cached(fn):
    """Compute a metric once per trace (summary and diagnose both ask); callers get a copy.

    A trace without step markers is measured over its steady state's repeats when one is found
    (:func:`helpers.metrics.steady.stepped`), so every cached metric sees the same steps.
    """

    @functools.wraps(fn)
    def wrapper(trace: Trace, *args, **kwargs):
        from .steady import stepped  # steady builds on this module

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


def name_mask(trace: Trace, key: str, predicate) -> np.ndarray:
    """``predicate(name)`` for every event, evaluated once per distinct name (traces repeat names a lot).

    Cached under ``key`` *and* the predicate itself, so two callers that reuse a key with
    different predicates get their own answers (``key`` only names the entry for readers).
    """
    memo = _memo(trace)
    if "name_codes" not in memo:
        memo["name_codes"] = pd.factorize(trace.events["name"])
    slot = ("name", key, predicate)
    if slot not in memo:
        codes, uniques = memo["name_codes"]
        hits = np.fromiter((bool(predicate(u)) for u in uniques), dtype=bool, count=len(uniques))
        memo[slot] = hits[codes] if len(codes) else np.zeros(0, dtype=bool)
    return memo[slot]
