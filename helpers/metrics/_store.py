"""The per-trace store of metric results, emptied when the trace's events table is replaced or edited.

The lowest piece of the metrics: the steady-state step and the metric cache both keep their results here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

# No import of helpers.model here: the model asks this store for its own cached figures (Trace.has_gpu, .ranks),
# so the store takes any object with ``events`` and ``_memo`` (a Trace) and the import graph keeps no cycle.
Trace = Any


def _memo(trace: Trace) -> dict[Any, Any]:
    """The trace's metric cache, emptied when ``trace.events`` was reassigned or edited since it was filled.

    The cache holds the very events frame it was computed from and compares by identity, so a
    reassigned table can never be served old results (an id() could be reused, the object cannot).
    It also holds a shallow copy of that frame: under pandas' copy-on-write (pandas 3, the pinned
    version) any edit in place (``.loc[...] = ``, a new or renamed column, ``drop(inplace=True)``)
    first gives the edited frame new arrays, so the two no longer share their blocks and the cache is
    emptied. The check costs a few identity comparisons, not a pass over the events.
    """
    memo = trace._memo
    if type(memo) is not _Store:  # the dataclass's plain dict, on first use: the store that freezes what it keeps
        memo = trace._memo = _Store(memo)
    events = trace.events
    if memo.get("__events__") is not events or memo.get("__arrays__") != _arrays(events) or \
            memo.get("__metadata__") != _described(trace):
        memo.clear()
        memo["__events__"] = events
        memo["__arrays__"] = _arrays(events)
        memo["__metadata__"] = _described(trace)
        # a view that shares the blocks: while it lives, copy-on-write must copy before any write
        memo["__view__"] = events.copy(deep=False) if isinstance(events, pd.DataFrame) else None
        steps = trace.metadata.get("steps") if isinstance(trace.metadata, dict) else None
        memo["__steps_view__"] = steps.copy(deep=False) if isinstance(steps, pd.DataFrame) else None
    return memo


def stamp(trace: Trace) -> tuple:
    """What the store's results depend on, by identity: compares equal to a later stamp only when neither the events
    table nor the metadata (its steps table included) was replaced or edited in place since."""
    return (_Same((trace.events,)), _arrays(trace.events), _described(trace))


def _described(trace: Trace) -> tuple:
    """The metadata by identity: the dict, its keys, each value, the steps table's arrays, and the trace's source and
    format. Setting a key, replacing the dict or editing the steps in place (the analysis windows come from them)
    changes it; a few identity checks."""
    md = trace.metadata
    named = (trace.__dict__.get("source"), trace.__dict__.get("format"))  # the file it came from: the figures name it
    if not isinstance(md, dict):
        return (_Same((md, *named)),)
    steps = md.get("steps")
    return (tuple(md), _Same((md, *named, *md.values())), _arrays(steps) if isinstance(steps, pd.DataFrame) else None)


class _Store(dict):
    """The metric store: every NumPy array it keeps (alone, or in a tuple or list) is made read-only as it is
    stored. Metrics hand these arrays out as they are (an interval union, an events mask: no copy per call), so
    a caller who writes into one (``m.sync_point_calls(t)[:] = False``) would change what every later figure, the
    diagnosis and the checks read off this trace; now the write fails where it is made."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        _freeze(value)
        super().__setitem__(key, value)


def _freeze(value: Any, depth: int = 0) -> None:
    """Arrays made read-only, alone or in a tuple, list, dict or dataclass (a located pattern's starts and ends)."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif depth >= 3:
        return
    elif isinstance(value, (tuple, list)):
        for v in value:
            _freeze(v, depth + 1)
    elif isinstance(value, dict):
        for v in value.values():
            _freeze(v, depth + 1)
    elif hasattr(type(value), "__dataclass_fields__"):
        for name in type(value).__dataclass_fields__:
            _freeze(getattr(value, name, None), depth + 1)


def handed_out(value: Any, depth: int = 0) -> Any:
    """A stored result as a caller gets it: tables as copies (under copy-on-write, cheap until written), dicts, lists
    and tuples rebuilt, a dataclass's fields likewise; so an edit of what a caller got never reaches the store.
    Arrays are passed as stored (read-only, :class:`_Store`)."""
    import dataclasses

    if isinstance(value, (pd.DataFrame, pd.Series)):
        return value.copy(deep=False)
    if depth > 4:
        return value
    if isinstance(value, dict):
        return {k: handed_out(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [handed_out(v, depth + 1) for v in value]
    if type(value) is tuple:
        return tuple(handed_out(v, depth + 1) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: handed_out(getattr(value, f.name), depth + 1)
                                             for f in dataclasses.fields(value) if f.init})
    return value


class _Same:
    """Compares equal only to itself wrapping the very same objects (identity, never values)."""

    __slots__ = ("objects",)

    def __init__(self, objects: tuple) -> None:
        self.objects = objects

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, _Same) and len(other.objects) == len(self.objects)
                and all(a is b for a, b in zip(self.objects, other.objects)))

    __hash__ = None  # type: ignore[assignment]


def _arrays(events: Any) -> _Same | None:
    """The frame's index, columns and block arrays, by identity: an edit in place replaces one of them."""
    if not isinstance(events, pd.DataFrame):
        return None
    mgr = events._mgr
    return _Same((*mgr.axes, *(b.values for b in mgr.blocks)))


def name_mask(trace: Trace, key: str, predicate: Callable[[str], object]) -> np.ndarray:
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
        if len(codes) and hits.any():
            memo[slot] = hits[codes]
        else:  # no name matches (most predicates, on most traces): no look-up of every row's code
            memo[slot] = np.zeros(len(codes), dtype=bool)
    return memo[slot]


def rank_rows(trace: Trace, rank: int) -> np.ndarray | None:
    """Where one rank's rows are in the table (ascending positions: the rows of :func:`rank_events`, in its order),
    found once per trace; None when every row is the rank's (its table is the trace's own). A metric of one rank
    takes a whole-table mask at these positions instead of testing every rank's rows for each rank."""
    memo = _memo(trace)
    key = ("__rank_rows__", int(rank))
    if key not in memo:
        ranks = trace.events["rank"].to_numpy()
        memo[key] = None if len(ranks) and (ranks == rank).all() else np.flatnonzero(ranks == rank)
    return memo[key]


def rank_events(trace: Trace, rank: int) -> pd.DataFrame:
    """The rows of one rank, filtered once per trace (many metrics look at one rank at a time; the
    filter copies every column). A trace of one rank is its own table. Read it; do not edit it."""
    memo = _memo(trace)
    key = ("__rank__", int(rank))
    if key not in memo:
        ev = trace.events
        ranks = ev["rank"].to_numpy()
        memo[key] = ev if len(ranks) and (ranks == rank).all() else ev[ranks == rank]
    return memo[key]
