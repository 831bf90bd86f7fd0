"""Sealed traces: a reading comes before the diagnosis.

A learner reads a lab's trace (and each of lab 07's triage traces) before any tool names its problem. On a
sealed trace the helpers that would write the reading for them (:func:`helpers.diagnose`,
:func:`helpers.diagnosis.signals`, :func:`helpers.diagnosis.locate`, :func:`helpers.checks.pattern_intervals`
and the reading check's cost and window helpers) answer with one line saying the reading comes first
(:class:`SealedTrace`, a :class:`~helpers.errors.TraceError`: one line in Jupyter and on the command line).
Once the learner's reading of that trace passes its check, the seal opens and the lab shows the diagnosis
as a second opinion.

What a seal is keyed on: the trace's events, not the object or the file. A trace's *fingerprint* is the set of
runs of :data:`K` consecutive events (in time order) told apart by kind and duration (octave bins of
``dur_us``): names, timestamps, ranks and the file it came from play no part. Reloading the same file, a copy of
the trace object, renamed events, events shifted in time or a few events dropped or added keep most runs, so
they stay sealed; a trace whose events are another loop's shares almost none. A trace is sealed when more than
:data:`MATCH` of a seal's sampled runs (:data:`SKETCH` of them, the smallest hashes: a bottom-k sample) occur in it.

What is sealed, and only that: lab 07's triage recordings always (their sketches are kept in
:mod:`helpers._sealed_traces`, written by ``tools/seal_traces.py``; a test holds them to ``data/``), and a lab's
trace once the lab seals it (:func:`seal`), in this process, until its reading passes. A user's own trace is
never sealed: nothing seals a trace but those two, and the command line seals nothing of its own. A lab's reading
seals and the readings passed are kept in the working folder (:data:`SEALS_FILE`, beside ``.selfcheck.json``), so a
restarted kernel that skips the cell sealing the trace still finds it sealed (``selfcheck --run`` leaves the file out
of its scratch copy: each run starts sealed). Lab 00's figure seal is kept in its kernel only: the other labs, which
share the folder, measure the same recording with those metrics.

Lab 00 asks for figures, not a pattern: the GPU's idle share and its longest gap. Its trace is sealed with
``scope="figures"``, which also holds the metrics that give those figures in one call (decorated with
:func:`figure_gate`: ``metrics.idle_gaps``, ``gpu_utilization``, ``gpu_busy``, ``idle_by_cause``,
``idle_cost_by_cause``) when the learner's own code calls them on that trace; the course's plots and checks
call them as ever.
"""

from __future__ import annotations

import contextvars
import functools
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from . import interrupts
from .errors import TraceError
from .outputs import read_state_json

if TYPE_CHECKING:
    from .model import Trace

F = TypeVar("F", bound=Callable[..., Any])
K = 6  # events per run
SKETCH = 128  # sampled runs kept per seal
MATCH = 0.5  # share of a seal's runs a trace must hold to be that seal's trace
_P = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier of the rolling hash (the golden ratio's 64 bits)


class SealedTrace(TraceError):
    """A helper that would write a reading was asked about a trace whose reading has not passed yet."""


@dataclass(frozen=True)
class Seal:
    label: str  # what opens it: the reading's check ("check_reading[data]", "check_triage[t4]"); " and "-joined: all
    sketch: np.ndarray = field(repr=False)  # uint64 hashes: the smallest SKETCH runs of the sealed trace
    scope: str = "reading"  # "reading": diagnose and the reading's helpers; "figures": also the figures it asks for

    @property
    def is_open(self) -> bool:
        opened = _opened()
        return all(part in opened for part in self.label.split(" and "))


_LAB_SEALS: list[Seal] = []  # sealed by a lab in this process (seal())
_FIGURE_SEALS: list[Seal] = []  # those of them that hold figures too (scope "figures")
_OPEN: set[str] = set()  # labels whose reading passed in this process
#: A lab's seals and the readings passed are also kept in the working folder (beside .selfcheck.json), so a kernel
#: restarted without running the cell that seals the trace still finds it sealed, and a reading passed stays passed.
SEALS_FILE = ".seals.json"
#: Bytes of SEALS_FILE read at most: the course's is a few KB; a larger one is not the course's and is ignored.
SEALS_LIMIT = 1 << 20
_FILE: dict[str, Any] = {"key": None, "seals": [], "open": frozenset()}


def _from_file() -> tuple[list[Seal], frozenset[str]]:
    """The seals and passed readings kept in the working folder's SEALS_FILE (none if it is absent or unreadable)."""
    path = Path(SEALS_FILE)
    try:
        st = path.stat()
    except OSError:
        return [], frozenset()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if _FILE["key"] != key:
        try:
            # read without blocking and bounded (a pipe of that name waited forever, a huge file filled memory)
            doc = read_state_json(path, SEALS_LIMIT, "seals file")
            seals = [Seal(str(d["label"]), np.array([int(x, 16) for x in d["sketch"]], dtype=np.uint64),
                          str(d.get("scope", "reading"))) for d in doc.get("seals", [])]
            opened = frozenset(str(x) for x in doc.get("open", []))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, TraceError):
            seals, opened = [], frozenset()
        _FILE.update(key=key, seals=seals, open=opened)
    return _FILE["seals"], _FILE["open"]


def _opened() -> set[str] | frozenset[str]:
    return _OPEN | _from_file()[1] if _OPEN else _from_file()[1]


def _save() -> None:
    """Keep this process's lab seals and passed readings in SEALS_FILE, with those already there."""
    kept, opened = _from_file()
    # Only the readings' seals: lab 00's figure seal holds metrics the other labs' cells use on the same recording
    # (lab 03 reads the trace lab 00's gaps are read on), and every lab shares the working folder.
    seals = {(s.label, s.scope, tuple(f"{int(h):016x}" for h in s.sketch)) for s in (*kept, *_LAB_SEALS)
             if s.scope == "reading"}
    doc = {"seals": [{"label": lab, "scope": sc, "sketch": list(sk)} for lab, sc, sk in sorted(seals)],
           "open": sorted(opened | _OPEN)}
    try:
        if not stat.S_ISREG(os.lstat(SEALS_FILE).st_mode):
            return  # a link, pipe or folder of that name is not ours to write through: the seals hold in this process
    except FileNotFoundError:
        pass
    except OSError:
        return
    tmp = None
    try:  # a new file put in place whole: never written through a link, never left half-written
        interrupts.sweep_stale(".", ".seals-", ".partial")  # what a check killed with SIGKILL left
        with interrupts.deferred():
            fd, tmp = tempfile.mkstemp(prefix=interrupts.owned_prefix(".seals-"), suffix=".partial", dir=".")
            interrupts.register(tmp)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(doc))
        os.replace(tmp, SEALS_FILE)
    except OSError:
        pass  # a read-only folder: the seals hold in this process only
    finally:
        if tmp is not None:
            with interrupts.deferred():
                Path(tmp).unlink(missing_ok=True)
                interrupts.unregister(tmp)
_IN_CHECK: contextvars.ContextVar[bool] = contextvars.ContextVar("in_check", default=False)


def _kind_codes(kind) -> np.ndarray:
    from .model import KINDS

    cat = kind.astype("category") if not hasattr(kind, "cat") else kind
    lookup = np.array([KINDS.index(c) if c in KINDS else len(KINDS) for c in cat.cat.categories] + [len(KINDS) + 1],
                      dtype=np.uint64)
    return lookup[cat.cat.codes.to_numpy()]  # a missing kind's code -1 takes the last slot


def fingerprint(trace: Trace) -> np.ndarray:
    """The trace's runs of :data:`K` events (kind and duration bin, in time order), hashed: sorted unique uint64."""
    from .metrics._store import _memo

    memo = _memo(trace)
    if "seal_fingerprint" in memo:
        return memo["seal_fingerprint"]
    ev = trace.events
    out = np.zeros(0, dtype=np.uint64)
    if len(ev) >= K and {"kind", "start_us", "dur_us"} <= set(ev.columns):
        dur = np.nan_to_num(ev["dur_us"].to_numpy(dtype=float, na_value=0.0), nan=0.0, posinf=0.0, neginf=0.0)
        bins = np.frexp(np.clip(dur, 0.25, 1e15))[1].astype(np.int64) + 15  # floor(log2(dur)) + 16: an octave each
        kinds = _kind_codes(ev["kind"])
        start = np.nan_to_num(ev["start_us"].to_numpy(dtype=float, na_value=0.0), nan=0.0)
        tok = (kinds << np.uint64(16)) | bins.astype(np.uint64)
        if start.size > 1 and not bool((start[1:] >= start[:-1]).all()):  # the readers' tables are in time order
            tok = tok[np.argsort(start, kind="stable")]  # time order (ties as the table has them)
        with np.errstate(over="ignore"):
            h = np.zeros(len(tok) - K + 1, dtype=np.uint64)
            for j in range(K):
                h = h * _P + tok[j:len(tok) - K + 1 + j] + np.uint64(1)
            h ^= h >> np.uint64(29)
            h *= _P
            h ^= h >> np.uint64(32)
        out = np.unique(h)
    memo["seal_fingerprint"] = out
    return out


def sketch(trace: Trace) -> np.ndarray:
    """The :data:`SKETCH` smallest hashes of the trace's fingerprint (what a seal keeps)."""
    return fingerprint(trace)[:SKETCH]


def share_held(trace: Trace, sk: np.ndarray) -> float:
    """The share of a seal's sampled runs that occur in ``trace`` (1.0: the sealed trace itself)."""
    return _share(fingerprint(trace), sk)


def _share(fp: np.ndarray, sk: np.ndarray) -> float:
    if sk.size == 0 or fp.size == 0:
        return 0.0
    at = np.minimum(np.searchsorted(fp, sk), fp.size - 1)  # fp is sorted: k look-ups, not a pass over the trace
    return float((fp[at] == sk).mean())


def _recorded_seals() -> list[Seal]:
    from ._sealed_traces import SKETCHES

    return [Seal(label, np.array([int(x, 16) for x in hexes], dtype=np.uint64)) for label, hexes in SKETCHES.values()]


_RECORDED: list[Seal] = []


def _seals(scope: str = "reading") -> list[Seal]:
    if not _RECORDED:
        _RECORDED.extend(_recorded_seals())
    opened = _opened()  # once for all of them (each seal's is_open would look at the folder's file again)
    return [s for s in (*_RECORDED, *_LAB_SEALS, *_from_file()[0])
            if not all(part in opened for part in s.label.split(" and ")) and (scope == "reading" or s.scope == scope)]


def sealed_by(trace: Trace, scope: str = "reading") -> str | None:
    """The label of the reading that opens ``trace``, or None when it is not sealed (or its reading passed).
    ``scope="figures"``: only the seals that also hold the figures an exercise asks for (lab 00's gaps)."""
    seals = _seals(scope)
    if not seals:
        return None
    try:
        fp = fingerprint(trace)
    except (AttributeError, TypeError, ValueError, KeyError):
        return None  # not a trace's events: the helper itself says what is wrong with it
    if len(fp) == 0:
        return None
    from .metrics._store import _memo, _Same

    # Kept with the trace for these very seals (a diagnosis asks at each of its steps): the answer changes only with
    # the trace's events (which empty the store) or the seals in force (other Seal objects: frozen, compared by identity)
    memo, key, these = _memo(trace), ("__sealed_by__", scope), _Same(tuple(seals))
    held = memo.get(key)
    if held is not None and held[0] == these:
        return held[1]
    label = next((s.label for s in seals if _share(fp, s.sketch) > MATCH), None)  # one fingerprint for every seal
    memo[key] = (these, label)
    return label


def gate(trace: Trace, what: str) -> None:
    """Raise :class:`SealedTrace` when ``trace`` is sealed and this is not a check reading it."""
    if _IN_CHECK.get():
        return
    label = sealed_by(trace)
    if label:
        raise SealedTrace(f"{what} waits for your reading of this trace: read the timeline, state your Reading and "
                          f"pass {label} first; then it opens as a second opinion")


def figure_gate(what: str) -> Callable[[F], F]:
    """Decorate a metric whose figure an exercise asks the learner to read or compute (lab 00's GPU idle share and
    longest gap): called from the learner's code on a trace sealed with ``scope="figures"``, it answers that the
    exercise comes first; called by the course's own code (plots, checks, the diagnosis), it runs as ever."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(trace: Any, *args: Any, **kwargs: Any) -> Any:
            if _FIGURE_SEALS and not _IN_CHECK.get():
                frame = sys._getframe(1)
                while frame is not None and frame.f_globals.get("__name__") == "helpers.arguments":
                    frame = frame.f_back  # the argument check that wraps every public metric
                caller = frame.f_globals.get("__name__", "") if frame is not None else ""
                if caller != "helpers" and not caller.startswith("helpers."):
                    label = sealed_by(trace, "figures")
                    if label:
                        raise SealedTrace(f"{what} on this trace is the exercise's answer: read it off the timeline (or "
                                          f"compute it from trace.events where the exercise says so); it opens once "
                                          f"{label} passed")
            return fn(trace, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return deco


@contextmanager
def _check_reads() -> Iterator[None]:
    """A check reads a sealed trace (its own verdict needs the diagnosis); nothing is shown until it passes."""
    token = _IN_CHECK.set(True)
    try:
        yield
    finally:
        _IN_CHECK.reset(token)


def seal(trace: Trace, label: str, scope: str = "reading") -> Trace:
    """Seal ``trace`` (and any trace whose events are its events) in this process until ``label``'s check passes
    (``"a and b"``: both). ``scope="figures"`` also holds the metrics decorated with :func:`figure_gate`.

    A lab calls this on the trace its reading exercise is about, as it loads or captures it; returns the trace."""
    sk = sketch(trace)
    new = Seal(label, sk, scope)
    if sk.size and not new.is_open and not any(s.label == label and s.scope == scope and np.array_equal(s.sketch, sk)
                                               for s in _LAB_SEALS):
        _LAB_SEALS.append(new)
        if scope == "figures":
            _FIGURE_SEALS.append(new)
        _save()
    return trace


def open_seal(label: str) -> None:
    """``label``'s reading passed: its traces open in this process."""
    if label not in _opened():
        _OPEN.add(label)
        _save()  # kept in the working folder: a restarted kernel finds it passed


def opened(label: str) -> bool:
    return label in _opened()


def _reset() -> None:
    """Forget every lab seal and every opened seal (tests)."""
    _LAB_SEALS.clear()
    _FIGURE_SEALS.clear()
    _OPEN.clear()
    _FILE.update(key=None, seals=[], open=frozenset())



# The seal's functions hold their arguments to their hints like every public function (seal(pd.NA, "x") is one line).
from .arguments import check_namespace as _check_namespace  # noqa: E402

_check_namespace(globals())
