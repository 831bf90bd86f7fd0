"""The provenance of every input of an exercise's check: where each trace and table was made.

:func:`problems` is the engine's first stage (:func:`helpers.checks.exercise.judge`). For each trace an
exercise takes (its record's :class:`~helpers.checks.exercise.Takes`), it asks what the record asks:

- ``capture`` / ``communication.run``: made by that tool in this kernel (its stamp, :mod:`helpers.stamps`,
  over the events as they are); a trace the learner must have written the loop of (``mine``) runs code of
  theirs, not only the course's, and is not a capture of the same step as the exercise's "before"; any
  other runs the exercise's workload (``of``: a capture of another loop cannot stand in).
- ``run_ncu``: a table :func:`helpers.profiling.run_ncu` returned in this kernel.
- ``shipped``: the very recording the lab loads, by the digest of its events (or table): a made-up table
  or trace, or another recording, is refused.

Each refusal is one line naming what is missing. A trace that passes is noted in the signing state (its
events digest is signed with the result).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..model import Trace
from ..stamps import _code_digest, events_digest, stamp_of, step_codes, table_digest, table_stamp_of

#: How a trace an exercise takes must have been made (:mod:`helpers.checks.provenance` judges each).
MADE = {
    "capture": "helpers.capture(...) in this notebook",
    "communication.run": "communication.run(..., profile_dir=...) in this notebook, loaded with helpers.load",
    "run_ncu": "helpers.profiling.run_ncu(...) in this notebook",
    "shipped": "the course's recording that the lab loads (compared by digest)",
}

#: Workload modules every loop may use (the command line and timing, the training-utilities library): running them
#: says nothing about which lab's loop a step is.
SHARED = frozenset({"common", "trainkit"})


def problems(exercise: Any, arguments: dict[str, Any]) -> str | None:
    """What is wrong with where ``exercise``'s inputs in ``arguments`` came from, or None."""
    from . import _proof

    notes: list[str] = []
    for takes in exercise.takes:
        if takes.what not in ("trace", "traces", "table") or not takes.made:
            continue
        value = arguments.get(takes.name)
        for label, one in _each(takes, value):
            problem = _problem(exercise, takes, label, one, arguments)
            if problem:
                return problem
            if isinstance(one, Trace):
                notes.append(events_digest(one))
    for digest in notes:
        _proof.SIGNER.note_trace(digest)
    return None


#: At most this many runs of a ``traces`` input are read (the checks refuse more than they ask for).
MAX_RUNS = 1000


def _each(takes: Any, value: Any) -> list[tuple[str, Any]]:
    """The traces (or tables) in one argument, each with the words that name it in a message."""
    if value is None:
        return []  # not given: the check says what it needs (the CPU track's after=None, for one)
    if takes.what != "traces":
        return [(takes.name, value)]
    if isinstance(value, dict):  # {label: trace}
        return [(f"{takes.name}[{k!r}]", v) for k, v in value.items() if isinstance(v, Trace)]
    if not isinstance(value, (list, tuple)):  # a one-pass iterator (read once, by the check, under its time limit),
        return []  # a DataFrame or something else: the check reads it and says what it is
    rows = list(value)[: MAX_RUNS + 1]
    out = []
    for i, row in enumerate(rows):
        trace = row.get("trace") if isinstance(row, dict) else None
        if isinstance(trace, Trace):
            out.append((f"{takes.name}[{i}]['trace']", trace))
    return out


def _name(value: Any, label: str) -> str:
    source = getattr(value, "source", None)
    if not source:
        return label
    path = Path(source)
    # a capture's file is always trace.json.gz: its folder carries the name the learner gave it
    return f"{label} ({path.parent.name if path.name == 'trace.json.gz' and path.parent.name else path.name})"


def _problem(ex: Any, takes: Any, label: str, value: Any, arguments: dict[str, Any]) -> str | None:
    if takes.what == "table":
        return _table_problem(ex, takes, label, value)
    if not isinstance(value, Trace):
        return None  # the check's own argument tests say what a trace is
    how = stamp_of(value)
    made_here = [m for m in takes.made if m != "shipped"]
    if how is not None and how.get("by") in made_here:
        return _workload_problem(ex, takes, label, value, how, arguments)
    if "shipped" in takes.made and takes.shipped and _shipped_match(value, takes.shipped):
        return None
    ways = " or ".join(MADE[m] for m in takes.made)
    what = _name(value, label)
    if how is not None:  # made here, by another tool
        return (f"{what} was made by {how.get('by')} here; this exercise takes {ways}: "
                f"{ex.check} earns nothing from it")
    if made_here and "shipped" not in takes.made:
        from ._core import shipped

        if shipped(value):
            return (f"{Path(value.source).name} is a trace the course recorded, not yours ({label}): this exercise "
                    f"takes {ways}; a recorded trace earns no credit")
        return (f"{what} was not made in this notebook: it was loaded from a file (a course recording, even copied "
                f"to another folder, or another kernel's capture) or built in memory, or its events changed since. "
                f"This exercise takes {ways}; make it here and pass what that returns")
    shipped = ", ".join(takes.shipped)
    return (f"{what} is not the trace this exercise reads (the course's {shipped}"
            + (f", or {ways.split(' or ')[0]} of the {takes.of} loop" if made_here and takes.of else "")
            + "): another recording, a copy with its events changed, or a trace made up in memory earns nothing; "
            "pass the trace the lab loads")


def _workload_problem(ex: Any, takes: Any, label: str, trace: Trace, how: dict, arguments: dict[str, Any]) -> str | None:
    what = _name(trace, label)
    if takes.mine:
        if not how.get("learner"):
            runs = ", ".join(how.get("workloads") or []) or "no loop of yours"
            return (f"{what} runs only the course's code ({runs}), none of yours: the fix is a step you write; "
                    f"capture that step (your function) and pass its trace")
        for other in ex.takes:
            if other.name != takes.name and other.what == "trace" and not other.mine:
                mate = stamp_of(arguments.get(other.name))
                if mate is not None and mate.get("step") == how.get("step"):
                    return (f"{what} is a capture of the same step as {other.name}: capture your fixed step for "
                            f"{takes.name}")
        loops = sorted(set(how.get("workloads") or []) - SHARED)
        if takes.of and loops and takes.of not in loops:  # it runs another lab's loop, not a fix of this one
            return (f"{what} runs the course's {', '.join(loops)} loop, not a fix of the {takes.of} loop this exercise "
                    f"is about: capture your fix of the lab's loop for {takes.name}")
        return _tie_problem(ex, takes, what, how, arguments)
    if takes.of and takes.of not in (how.get("workloads") or []):
        runs = ", ".join(how.get("workloads") or []) or "a loop of your own"
        return (f"{what} is a capture of another loop ({runs}), not of the {takes.of} loop this exercise is about: "
                f"capture the lab's {takes.of} step (helpers.workloads.{takes.of}) for {takes.name}")
    return None


#: ``"<check>:<input>"`` -> the step digests (:func:`helpers.stamps.step_codes`) of the functions that check passed
#: in this kernel: a later exercise's trace (``Takes.step_of``) must be a capture of one of them.
JUDGED: dict[str, set[str]] = {}
#: The same keys -> the names of those functions, for the words of a refusal.
JUDGED_NAMES: dict[str, set[str]] = {}


def note_judged(ex: Any, arguments: dict[str, Any]) -> None:
    """Note the learner functions ``ex``'s check just passed (its function inputs) as judged in this kernel."""
    for takes in ex.takes:
        fn = arguments.get(takes.name)
        if takes.what == "function" and callable(fn):
            JUDGED.setdefault(f"{ex.check}:{takes.name}", set()).update(step_codes(fn))
            name = getattr(fn, "__name__", None)
            if isinstance(name, str) and name.isidentifier():
                JUDGED_NAMES.setdefault(f"{ex.check}:{takes.name}", set()).add(name)


def _captured_words(how: dict) -> str:
    """Which step a capture ran, in words, from its stamp: the learner's function that made it, or the course's loop."""
    name = how.get("entry_name")
    if isinstance(name, str) and name:
        outer = name.split(".<locals>.")[0]
        return f"it timed {outer}'s step" if outer != name else f"it timed {name}"
    if not how.get("entry"):
        loops = sorted(set(how.get("workloads") or []) - SHARED)
        return f"it timed the course's {', '.join(loops)} loop" if loops else "it timed no function of yours"
    return ""


def _tie_problem(ex: Any, takes: Any, what: str, how: dict, arguments: dict[str, Any]) -> str | None:
    """Whether the learner's loop the trace timed is the one the check judges: a capture of the step the judged
    function returns (``takes.step_of``), running the judged functions (``takes.runs``). A good function passed to
    the check beside a capture of another loop (one that skips the optimizer, the logging or the data) earns nothing."""
    if takes.step_of:
        source, _, name = takes.step_of.partition(":")
        if name:  # a function another exercise's check passed in this kernel
            codes = JUDGED.get(takes.step_of, set())
            if not codes:
                return (f"{what}: run {source}(your step function) first, in this notebook: this check times the "
                        f"step that check judged, so capture the step that function returns for {takes.name}")
            names = sorted(JUDGED_NAMES.get(takes.step_of, set()))
            call = names[-1] if len(names) == 1 else "my_step"
            judged = f"{call}, the function {source} passed," if len(names) == 1 else f"a function {source} passed"
        else:
            fn = arguments.get(source)
            if not callable(fn):
                return None  # the check asks for its function itself, in its own words
            codes = step_codes(fn)
            judged, call = f"{getattr(fn, '__name__', source)}, the {source} you passed,", getattr(fn, "__name__", source)
        if how.get("entry") not in codes:
            outer = str(how.get("entry_name") or "").split(".<locals>.")[0]
            if name and outer and outer in JUDGED_NAMES.get(takes.step_of, set()):  # the same name, edited since
                return (f"{what} is a capture of {outer}'s step as its cell defines it now, which {source} has not "
                        f"passed (it passed an earlier {outer}): run {source}({outer}) on this one first, then capture "
                        "it again")
            if not name and outer and outer == call:  # the function passed has been redefined since the capture
                return (f"{what} is a capture of the step an earlier {outer} returned: its cell has been run again or "
                        f"edited since that capture, so the {source} you passed is another function. Capture its step "
                        f"again (helpers.capture({call}(...))), then run this check")
            timed = _captured_words(how)
            return (f"{what} is a capture of another step than the one this check judges"
                    + (f" ({timed})" if timed else "") + f": capture the step that {judged} returns, as it returns "
                    f"it: helpers.capture({call}(...)). {source if name else 'The check'} "
                    f"{'ran' if name else 'runs'} that function to see it trains as the loop as first written, so the "
                    "capture it times must be of that very step")
    for name in takes.runs:
        fn = arguments.get(name)
        if callable(fn) and _source_digest(fn) not in (how.get("learner") or []):
            return (f"{what} is a capture of a loop that never calls {getattr(fn, '__name__', name)}, the {name} you "
                    f"passed: capture the loop that runs it, so the function the check judges is the one it times")
    return None


def same_data_problem(before: Any, after: Any) -> str | None:
    """What feeds the fix's capture ``after`` that did not feed the loop as first written (``before``), from the loaders
    each capture's step holds (:func:`helpers.stamps.describe_step`'s ``loaders``): every loader of ``before`` must have
    one in ``after`` of the same class, over a dataset of the same class, length and settings, in batches of the same
    size (its worker processes, pinned memory and prefetching are the fix). A loop fed from a list of cached batches,
    a smaller or cheaper dataset or smaller batches times less work; None when it is fed the same."""
    how_b, how_a = stamp_of(before), stamp_of(after)
    if how_b is None or how_a is None:
        return None  # provenance has judged where each came from; a capture of the lab's loop holds its loaders
    def fed(sig: dict) -> tuple:
        return (sig.get("type"), sig.get("dataset"), sig.get("length"), json.dumps(sig.get("settings"), sort_keys=True),
                sig.get("batch_size"))

    loaders_a = [s for s in how_a.get("loaders") or [] if isinstance(s, dict)]
    theirs = [fed(s) for s in loaders_a]
    for sig in how_b.get("loaders") or []:
        if isinstance(sig, dict) and fed(sig) not in theirs:
            # the loader of the fix to compare with: one over the same dataset class if there is one
            mine = next((s for s in loaders_a if s.get("dataset") == sig.get("dataset")), loaders_a[0] if loaders_a else None)
            if mine is None:
                now, was = "no loader at all (batches from a list or a cache)", _fed_words(sig, sig)
            else:
                now, was = _fed_words(mine, sig), _fed_words(sig, mine)
            return (f"your capture's loop is fed from {now}; the loop as first written from {was}. A fix changes how "
                    "the batches are made (worker processes, pinned memory, prefetching), not which samples they hold or "
                    "how many: capture your loader over the lab's dataset, with the lab's batch size")
    return None


def _short(name: Any) -> str:
    return str(name or "?").rsplit(".", 1)[-1]


def _fed_words(sig: dict, other: dict) -> str:
    """One loader in words (``sig``), naming beside its class and its dataset's only what differs from ``other``'s:
    its dataset's length or settings (when the two datasets are of one class) and its batch size."""
    words = f"a {_short(sig.get('type'))} over {_short(sig.get('dataset'))}"
    if sig is other:  # nothing to tell it from: all it has
        words += f" of {sig.get('length')} samples"
    elif sig.get("dataset") == other.get("dataset"):
        mine, theirs = sig.get("settings") or {}, other.get("settings") or {}
        if not isinstance(mine, dict) or not isinstance(theirs, dict):
            mine, theirs = {}, {}
        differ = [f"{k}={mine[k]!r}" for k in sorted(mine) if k != "length" and mine.get(k) != theirs.get(k)]
        if sig.get("length") != other.get("length"):
            differ.insert(0, f"of {sig.get('length')} samples")
        elif differ:
            differ[0] = "with " + differ[0]
        if differ:
            words += " " + ", ".join(differ)
    if sig is other or sig.get("batch_size") != other.get("batch_size"):
        words += f" in batches of {sig.get('batch_size')}"
    return words


def same_setup_problem(before: Any, after: Any) -> str | None:
    """What the loop as first written's step (``before``) holds that the fix's capture's step (``after``) does not:
    each tensor of its shape and dtype, its model of its parameter count, its optimizer of its learning rate
    (:func:`helpers.stamps.describe_step`'s ``holds``). A fix timed on smaller batches, a smaller model or another
    learning rate does other work than the loop it is compared with; None when it holds them all."""
    from collections import Counter

    how_b, how_a = stamp_of(before), stamp_of(after)
    if how_b is None or how_a is None:
        return None
    mine = Counter(h for h in how_a.get("holds") or [] if isinstance(h, str))
    missing = Counter(h for h in how_b.get("holds") or [] if isinstance(h, str)) - mine
    if not missing:
        return None
    want = sorted(missing)[:3]
    near = sorted(h for h in mine if h.split(" ", 1)[0] in {w.split(" ", 1)[0] for w in want})[:3]
    return (f"your capture's step is not set up as the loop as first written's: that one holds {' and '.join(want)}, "
            f"yours {' and '.join(near) or 'none of that kind'}. Time your fix on the lab's setup (the same batches, "
            "model, optimizer and learning rate), so that the two captures compare the same work")


def _source_digest(fn: Any) -> str:
    """The digest :func:`helpers.stamps.describe_step` lists a learner function reached by a step under."""
    import types

    inner = fn
    while isinstance(inner, types.MethodType):
        inner = inner.__func__
    code = getattr(inner, "__code__", None)
    return _code_digest(code) if code is not None else ""


def _table_problem(ex: Any, takes: Any, label: str, table: Any) -> str | None:
    how = table_stamp_of(table)
    if how is not None and how.get("by") in takes.made:
        return None
    if "shipped" in takes.made and takes.shipped:
        digest = table_digest(table)
        if digest is not None and any(digest == _shipped_table_digest(key) for key in takes.shipped):
            return None
    return (f"{label} is neither a table run_ncu returned in this notebook nor the course's shipped "
            f"{', '.join(takes.shipped)} table as read_ncu reads it: a table typed in or edited earns nothing; pass the "
            "table the lab's cell made")


def _shipped_match(trace: Trace, keys: tuple[str, ...]) -> bool:
    try:
        digest = events_digest(trace)
    except Exception:  # noqa: BLE001 - events that cannot be digested match nothing
        return False
    return any(digest == _shipped_digest(key) for key in keys)


def _shipped_path(key: str) -> Path:
    from ..course import DATA, entry, nsight_entry

    parts = key.split(":")
    if parts[0] == "nsys":
        return DATA / nsight_entry(parts[1], parts[2])["file"]
    if parts[0] == "ncu":
        return DATA / nsight_entry(parts[1], parts[2])["ncu_csv"]
    return DATA / entry(*parts)["file"]


@lru_cache(maxsize=64)
def _shipped_digest(key: str) -> str | None:
    """The events digest of the recording ``key`` names (``workload:variant[:tag]``, ``nsys:workload:variant``)."""
    from ..errors import TraceError
    from ..readers import load

    try:
        return events_digest(load(_shipped_path(key)))
    except (TraceError, OSError, KeyError):
        return None


@lru_cache(maxsize=8)
def _shipped_table_digest(key: str) -> str | None:
    from ..errors import TraceError
    from ..readers.ncu import read_ncu

    try:
        return table_digest(read_ncu(_shipped_path(key)))
    except (TraceError, OSError, KeyError):
        return None
