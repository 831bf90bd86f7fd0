"""The one trace model every reader produces and every metric consumes.

``Trace.events`` is a pandas DataFrame, one row per timed event, with these columns:

=============  =======  =====================================================================
column         dtype    meaning
=============  =======  =====================================================================
rank           int64    distributed rank the event came from (0 for single-process traces)
kind           category one of ``KINDS`` below
lane           text     timeline lane: ``CPU <tid>``, ``CUDA API <tid>``, ``ranges <tid>``,
                        ``OS runtime <tid>``, ``GPU <d> stream <s>``, ``GPU <d> memcpy``
name           text     kernel / op / API / range name (runtime names without ``_vNNNN``)
start_us       float64  start, microseconds since the first event of the trace
dur_us         float64  duration, microseconds (>= 0)
end_us         float64  ``start_us + dur_us``
device         int64    GPU index for device-side events, -1 on the host
stream         int64    CUDA stream for device-side events, -1 on the host
pid            int64    host process id (-1 for device-side events)
tid            int64    host thread id (-1 for device-side events)
correlation    int64    links a CUDA API call to the GPU work it launched (-1 if none)
bytes          float64  bytes moved or set by memcpy / memset; for a gloo collective, what it sends (its tensor's
                         elements x their type's size, when the trace recorded shapes); NaN otherwise
copy_kind      text     ``H2D``, ``D2H``, ``D2D``, ``H2H``, ``P2P`` for memcpy, else ``""``
host_memory    text     ``pageable`` or ``pinned`` for copies touching the host, else ``""``
step           int64    training step the event falls in (-1 outside every step)
=============  =======  =====================================================================

The four *text* columns are pandas categoricals of strings whose categories are the table's distinct
values in sorted order (a trace repeats a few hundred names over millions of rows): comparing, matching
(``.str``), grouping and filtering them costs a look-up per distinct value, not per row, and sorting
by them is alphabetical. To write a value the column does not hold yet, make the column plain text
first: ``events["name"] = events["name"].astype(str)``.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

#: Every value the ``kind`` column can take.
KINDS = (
    "kernel",  # GPU kernel (not a collective)
    "memcpy",  # GPU copy; see copy_kind / host_memory
    "memset",  # GPU memset
    "collective",  # NCCL kernel on the GPU, or a gloo collective on a host thread
    "runtime",  # CUDA runtime or driver API call on a host thread
    "sync",  # CUPTI synchronization record (what the GPU side of a sync waited on)
    "cpu_op",  # PyTorch operator on a host thread
    "annotation",  # user range: record_function, NVTX, ProfilerStep#N, DataLoader
    "gpu_annotation",  # the GPU-side shadow of a user range (Kineto only)
    "python",  # Python function (Kineto with_stack only)
    "osrt",  # OS runtime library call on a host thread: waits, I/O, sleeps (Nsight Systems --trace=osrt only)
)

KIND_DTYPE = pd.CategoricalDtype(KINDS)

#: Kinds that keep a GPU busy.
GPU_WORK_KINDS = ("kernel", "memcpy", "memset", "collective")

COLUMNS: dict[str, str] = {
    "rank": "int64",
    "kind": "category",
    "lane": "category",
    "name": "category",
    "start_us": "float64",
    "dur_us": "float64",
    "end_us": "float64",
    "device": "int64",
    "stream": "int64",
    "pid": "int64",
    "tid": "int64",
    "correlation": "int64",
    "bytes": "float64",
    "copy_kind": "category",
    "host_memory": "category",
    "step": "int64",
}

#: Largest time (start, end or duration, microseconds) the events table holds: 2^62 ns, about 146 years.
#: Times are kept to the nanosecond and written as 64-bit integer nanoseconds (export, nsys); a bound
#: below 2^63 leaves room for start + duration. Beyond it a file's clock is damaged, not a long run.
MAX_TIME_US = 2.0**62 / 1e3
#: Largest rank number (torch.distributed and NCCL number ranks with a C int).
MAX_RANK = 2**31 - 1

#: Annotation names taken as training steps when the caller names no pattern.
DEFAULT_STEP_PATTERNS = (r"^ProfilerStep#\d+$", r"^(?:train[ _-]?)?step[ _#-]?\d*$")

#: Communication kernels: NCCL / RCCL (``ncclDevKernel_*``, older ``ncclKernel_*``), MSCCL++ and
#: NVSHMEM, the expert-parallel all-to-all of MoE layers (DeepEP's ``deep_ep::*::dispatch`` /
#: ``combine``, ``moe_dispatch`` / ``ep_combine``-style names), and custom all-reduce / all-gather
#: kernels (vLLM's ``cross_device_reduce_*``, PyTorch symmetric memory's ``one_shot_all_reduce``).
#: Matched on the kernel's own name, before template arguments, which can name anything.
_COMM_KERNEL = re.compile(
    r"(?:^|\b|_)(?:nccl(?:Dev)?Kernel|rccl|msccl|nvshmem|deep_ep::|cross_device_reduce|all_?reduce|all_?gather|"
    r"reduce_?scatter|all_?to_?all|(?:moe|ep|expert)s?_?(?:dispatch|combine)|(?:dispatch|combine)_?(?:moe|ep|experts?)\b)",
    re.IGNORECASE)

#: CUPTI / Nsight copy directions as the events table spells them.
COPY_DIRECTION = {"HtoD": "H2D", "DtoH": "D2H", "DtoD": "D2D", "HtoH": "H2H", "PtoP": "P2P"}


def host_memory_of(direction: str, src: str, dst: str) -> str:
    """``pageable`` / ``pinned`` for the host side of a copy (src and dst as the tools spell them), else ``""``."""
    host = src if direction in ("H2D", "H2H") else dst if direction == "D2H" else ""
    host = host.lower()
    return host if host in ("pageable", "pinned") else ""


def lane_name(kind: str, device: int, stream: int, tid: int) -> str:
    """The timeline lane of an event; every reader names lanes through this one function."""
    if kind == "memcpy":
        return f"GPU {device} memcpy"
    if device >= 0:
        return f"GPU {device} stream {stream}"
    if kind == "runtime":
        return f"CUDA API {tid}"
    if kind == "annotation":
        return f"ranges {tid}"
    if kind == "osrt":
        return f"OS runtime {tid}"
    return f"CPU {tid}"


def is_collective_kernel(name: str) -> bool:
    """A GPU kernel that moves data between GPUs (see :data:`_COMM_KERNEL` for the names known)."""
    return bool(_COMM_KERNEL.search(re.split(r"[<(]", name, maxsplit=1)[0]))


def is_host_collective(name: str) -> bool:
    """A host range that is a gloo collective from issue to completion: ``gloo:all_reduce`` and the
    like, as the PyTorch profiler names gloo's work (and NVTX-marked collectives are named the same)."""
    return name.startswith("gloo:")


@dataclass
class Trace:
    """A loaded trace: the events table plus what the file said about where it came from."""

    events: pd.DataFrame
    source: str = ""
    format: str = ""  # "kineto", "nsys-sqlite" or "directory"
    metadata: dict[str, Any] = field(default_factory=dict)
    # Derived arrays (interval unions) shared by the metrics; never part of the data itself.
    _memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ranks(self) -> list[int]:
        from .metrics._store import _memo  # the metric store: emptied when the events table changes

        memo = _memo(self)
        if "__ranks__" not in memo:  # asked by every metric that walks the ranks
            memo["__ranks__"] = sorted(int(r) for r in self.events["rank"].unique())
        return list(memo["__ranks__"])

    @property
    def has_gpu(self) -> bool:
        from .metrics._store import _memo  # the metric store: emptied when the events table changes

        memo = _memo(self)
        if "__has_gpu__" not in memo:  # a diagnosis asks about 20 times
            memo["__has_gpu__"] = self._has_gpu()
        return memo["__has_gpu__"]

    def _has_gpu(self) -> bool:
        ev = self.events
        if not (ev["device"].to_numpy() >= 0).any():
            return False
        kind = ev["kind"]
        if isinstance(kind.dtype, pd.CategoricalDtype):  # asked often: a look-up per category, not per row
            cats = kind.cat.categories
            hit = np.zeros(len(cats) + 1, dtype=bool)  # the last slot is the code of a missing kind (-1)
            hit[:len(cats)] = cats.isin(GPU_WORK_KINDS)
            return bool(hit[kind.cat.codes.to_numpy()].any())
        return bool(kind.isin(GPU_WORK_KINDS).any())

    @property
    def devices(self) -> list[int]:
        return sorted(int(d) for d in self.events.loc[self.events["device"] >= 0, "device"].unique())

    @property
    def steps(self) -> pd.DataFrame:
        """One row per (rank, step): ``rank, step, start_us, end_us, dur_us``."""
        steps = self.metadata.get("steps")  # not .get(key, empty_steps()): that builds a frame on every call
        return empty_steps() if steps is None else steps

    @property
    def span_us(self) -> float:
        if self.events.empty:
            return 0.0
        return float(self.events["end_us"].max() - self.events["start_us"].min())

    def window(self, start_us: float, end_us: float) -> Trace:
        """The events that overlap ``[start_us, end_us)``, as a new Trace (same metadata)."""
        from .errors import ArgumentError

        # held here, not by helpers.arguments (which imports this module): pd.NA, text or 10**400 would otherwise be a
        # TypeError or OverflowError from a comparison deep in pandas
        for name, value in (("start_us", start_us), ("end_us", end_us)):
            try:
                ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))
            except (TypeError, ValueError, OverflowError):
                ok = False
            if not ok:
                raise ArgumentError(f"window(): {name}={value!r:.40}: give a finite number (microseconds)")
        if start_us > end_us:
            raise ArgumentError(f"window(): start_us={start_us:g} is after end_us={end_us:g}: give the start first")
        ev = self.events
        keep = (ev["end_us"] > start_us) & (ev["start_us"] < end_us)
        return Trace(ev[keep].reset_index(drop=True), self.source, self.format, dict(self.metadata))

    def __repr__(self) -> str:
        from .errors import TraceError

        try:  # a trace whose fields a user replaced still shows, with what is wrong (Jupyter shows every result)
            check_state(self)
        except TraceError as exc:
            return f"Trace({self.__dict__.get('source')!r:.80}, not usable: {exc})"
        ev = self.events
        return (
            f"Trace({self.source!r}, format={self.format}, events={len(ev)}, ranks={self.ranks}, "
            f"steps={len(self.steps)}, gpu={'yes' if self.has_gpu else 'no'})"
        )


# ``Trace.events`` is what the user assigned (or a reader built), checked against the model whenever it
# changes: the metrics index rows by position and need the model's columns, and a user may drop rows in
# place, filter, sort or build a table by hand. A table that conforms is used as it is (no copy, edits in
# place keep reaching the trace); one whose index is not 0..n-1, or that lacks an optional column, is
# replaced by the same rows with a fresh index and the column's default; one the analysis cannot use at all
# (not a DataFrame, no times, text where times should be) is one TraceError line.
_ESSENTIAL = ("name", "kind", "start_us", "dur_us")


def _identity(ev: Any) -> tuple:
    """What an edit in place or a new table changes: the frame, its axes and its block arrays, by identity."""
    if not isinstance(ev, pd.DataFrame):
        return (id(ev),)
    mgr = ev._mgr
    return (id(ev), *(id(a) for a in mgr.axes), *(id(b.values) for b in mgr.blocks))


def conform(ev: Any) -> pd.DataFrame:
    """``ev`` itself when it is an events table the analysis can use as it is; else the same rows made one
    (see above), or :class:`~helpers.errors.TraceError` saying what is missing."""
    from .errors import TraceError

    if not isinstance(ev, pd.DataFrame):
        raise TraceError(f"trace.events is a {type(ev).__name__}, not the events table (a pandas DataFrame with the "
                         "columns of helpers.model.COLUMNS); load the trace again")
    if isinstance(ev.columns, pd.MultiIndex) or not ev.columns.is_unique:
        twice = sorted({str(c) for c in ev.columns[ev.columns.duplicated()]})
        raise TraceError("trace.events has " + (f"two columns named {twice[0]!r}" if twice else "columns of several levels")
                         + "; the events table needs one column of each name in helpers.model.COLUMNS: load the trace again")
    missing = [c for c in _ESSENTIAL if c not in ev.columns]
    if missing:
        raise TraceError(f"trace.events has no column {missing[0]!r}" + (f" (nor {', '.join(map(repr, missing[1:]))})"
                         if len(missing) > 1 else "") + "; the events table needs the columns of helpers.model.COLUMNS: "
                         "load the trace again, or build the table with helpers.model.build_events")
    out = ev
    index = ev.index
    if not (isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1):
        out = out.reset_index(drop=True)  # rows dropped, filtered or shuffled: positions are what metrics use
    for col, dtype in COLUMNS.items():
        if col not in out.columns or (col in TEXT_COLUMNS and not isinstance(out[col].dtype, pd.CategoricalDtype)):
            if out is ev:
                out = out.copy(deep=False)
            if col in TEXT_COLUMNS:  # held as categoricals of text: the metrics read their codes
                out[col] = _as_text(out[col].to_numpy(dtype=object) if col in out.columns else None, len(out),
                                    _DEFAULTS.get(col, ""))
            else:
                out[col] = (out["start_us"] + out["dur_us"] if col == "end_us" else
                            np.full(len(out), _DEFAULTS[col], dtype=object if dtype == "object" else dtype))
        elif (dtype in ("int64", "float64") and (out[col].dtype.kind not in "iuf" or not isinstance(out[col].dtype, np.dtype))) or (
                dtype == "int64" and out[col].dtype.kind == "f"):
            # (a nullable Float64/Int64 column, as convert_dtypes() makes, is a 'f'/'i' kind too: its pd.NA is NaN here)
            try:
                values = pd.to_numeric(out[col], errors="raise").to_numpy(dtype="float64", na_value=np.nan)
            except (TypeError, ValueError):
                raise TraceError(f"trace.events[{col!r}] holds values that are not numbers (dtype {out[col].dtype}); "
                                 "the analysis needs numbers there: load the trace again") from None
            if dtype == "int64":  # ranks, devices, streams, ids: whole numbers, none missing (NaN is not a rank)
                if not (np.isfinite(values).all() and (values == np.round(values)).all()):
                    raise TraceError(f"trace.events[{col!r}] holds missing or fractional values; it holds whole numbers "
                                     f"(default {_DEFAULTS.get(col, -1)}): fill them, or load the trace again")
                values = values.astype("int64")
            if out is ev:
                out = out.copy(deep=False)
            out[col] = values
    if not isinstance(out["kind"].dtype, pd.CategoricalDtype) or out["kind"].dtype != KIND_DTYPE:
        if out is ev:
            out = out.copy(deep=False)
        out["kind"] = pd.Categorical(out["kind"].astype(object), dtype=KIND_DTYPE)
    unknown = out["kind"].cat.codes.to_numpy() < 0
    if unknown.any():  # a kind the model lacks (or a missing one) would be no lane, no colour, no category
        first = ev["kind"].to_numpy()[np.flatnonzero(unknown)[0]] if len(ev) == len(out) else None
        raise TraceError(f"trace.events['kind'] holds {first!r:.40}, not one of the kinds {', '.join(KINDS)}: "
                         "give each event one of them, or load the trace again")
    return _conform_times(out, ev)


def _conform_times(ev: pd.DataFrame, original: pd.DataFrame) -> pd.DataFrame:
    """The times every figure is made of, as the readers leave them: each event a finite start and a duration of 0
    or more, refused otherwise (a NaN set in, a duration made negative: the table was diagnosed without a word, its
    figures quietly wrong). ``end_us`` is ``start_us + dur_us`` by definition: where an edit left it stale (a
    duration changed alone) the conforming copy takes it from the two, so the table is analysed as it now is."""
    from .errors import TraceError

    start, dur, end = (ev[c].to_numpy(dtype="float64") for c in ("start_us", "dur_us", "end_us"))
    with np.errstate(invalid="ignore", over="ignore"):
        bad = ~(np.isfinite(start) & np.isfinite(dur) & (dur >= 0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            what = ("no start time (NaN)" if np.isnan(start[i]) else "no duration (NaN)" if np.isnan(dur[i]) else
                    f"a start of {start[i]:g} us" if not np.isfinite(start[i]) else f"a duration of {dur[i]:g} us")
            raise TraceError(f"trace.events: row {i} ({str(ev['name'].iloc[i])[:40]!r}) has {what}; every event needs a "
                             "finite start and a duration of 0 or more: fix the row, or load the trace again")
        derived = start + dur
        if np.array_equal(end, derived):
            return ev
    if ev is original:
        ev = ev.copy(deep=False)
    ev["end_us"] = derived
    return ev


#: The steps table's columns (see :func:`empty_steps`) the analysis windows are read from.
STEP_COLUMNS = ("rank", "step", "start_us", "end_us")


#: What the readers put in a trace's metadata besides the steps (key, types, in words): a user may assign any of
#: them, and the analysis reads them as these (metadata['ranks'] = 'x' was a TypeError deep inside).
_METADATA_KINDS = (
    ("ranks", dict, "a dict of each rank's metadata"),
    ("distributed", dict, "a dict (rank, world_size, backend)"),
    ("collective_types", dict, "a dict of counts"),
    ("other_accelerator_events", dict, "a dict of counts"),
    ("device_names", (list, tuple), "a list of device names"),
    ("files", (list, tuple), "a list of file names"),
    ("origin_us", (int, float, np.integer, np.floating), "a number of microseconds"),
    ("world_size", (int, np.integer), "a whole number"),
    ("job_world_size", (int, np.integer), "a whole number"),
    ("torch_version", str, "text"),
)


def _items_fit(key: str, value: Any) -> bool:
    if key == "ranks":
        return all(isinstance(v, dict) for v in value.values())
    if key in ("device_names", "files"):
        return all(v is None or isinstance(v, str) for v in value)
    if key in ("origin_us", "world_size", "job_world_size"):
        return not isinstance(value, bool) and math.isfinite(value)
    return True


def check_state(trace: Trace) -> None:
    """:class:`~helpers.errors.TraceError` in one line when a trace's fields are not what the analysis reads:
    ``metadata`` a dict, its ``steps`` the steps table (finite numbers, each ending after it starts),
    ``steps_inferred`` a dict, ``source`` and ``format`` text, and the events table (:func:`conform`). A user may
    assign any of them; the analysis would otherwise fail deep inside with an AttributeError or KeyError."""
    from .errors import TraceError

    md = trace.__dict__.get("metadata")
    if not isinstance(md, dict):
        raise TraceError(f"trace.metadata is a {type(md).__name__}, not a dict (of 'steps' and what the file said): "
                         "load the trace again")
    steps = md.get("steps")
    if steps is not None:
        if not isinstance(steps, pd.DataFrame):
            raise TraceError(f"trace.metadata['steps'] is a {type(steps).__name__}, not the steps table (a DataFrame of "
                             f"{', '.join(STEP_COLUMNS)}): load the trace again, or drop the key to have the steps found")
        missing = [c for c in STEP_COLUMNS if c not in steps.columns]
        if missing:
            raise TraceError(f"trace.metadata['steps'] has no column {missing[0]!r}; the steps table has "
                             f"{', '.join(STEP_COLUMNS)}: load the trace again")
        if any(steps[c].dtype.kind not in "iuf" for c in STEP_COLUMNS):
            raise TraceError("trace.metadata['steps'] holds values that are not numbers; load the trace again")
        start, end = steps["start_us"].to_numpy(dtype="float64"), steps["end_us"].to_numpy(dtype="float64")
        if not (np.isfinite(start).all() and np.isfinite(end).all() and (end >= start).all()):
            raise TraceError("trace.metadata['steps'] has a step with a missing time or one that ends before it starts; "
                             "load the trace again")
        keys = steps[["rank", "step"]].to_numpy()
        if len(keys) and len(np.unique(keys, axis=0)) < len(keys):  # the windows are looked up by (rank, step)
            raise TraceError("trace.metadata['steps'] numbers a step twice for one rank; each (rank, step) is one "
                             "window: load the trace again, or drop the key to have the steps found")
    for key, kinds, words in _METADATA_KINDS:
        value = md.get(key)
        if value is not None and not (isinstance(value, kinds) and _items_fit(key, value)):
            raise TraceError(f"trace.metadata[{key!r}] is {type(value).__name__} {_short(value, 40)}, not {words}: "
                             "load the trace again, or drop the key")
    inferred = md.get("steps_inferred")
    if inferred is not None and not isinstance(inferred, dict):
        raise TraceError(f"trace.metadata['steps_inferred'] is a {type(inferred).__name__}, not a dict: load the trace again")
    for name in ("source", "format"):
        if not isinstance(trace.__dict__.get(name), (str, os.PathLike) if name == "source" else str):
            raise TraceError(f"trace.{name} is a {type(trace.__dict__.get(name)).__name__}, not text: "
                             f"give trace.{name} a str (the file it came from), or load the trace again")
    if not isinstance(trace.__dict__.get("_memo"), dict):
        trace.__dict__["_memo"] = {}  # the metric store, never the user's: a fresh one
    _ = trace.events  # conforms the events table, or says what is wrong with it


def _events_get(self: Trace) -> pd.DataFrame:
    d = self.__dict__
    ev = d["_events"]
    stamp = _identity(ev)
    if d.get("_events_stamp") != stamp:
        fixed = conform(ev)
        if fixed is not ev:  # the trace takes the conforming copy; the caller's frame is left as it was
            d["_events"] = ev = fixed
            stamp = _identity(ev)
        d["_events_stamp"] = stamp
    return ev


def _events_set(self: Trace, value: pd.DataFrame) -> None:
    self.__dict__["_events"] = value
    self.__dict__.pop("_events_stamp", None)


Trace.events = property(_events_get, _events_set, doc="The events table (see the module's doc); checked "  # type: ignore[assignment]
                        "against the model whenever it is replaced or edited in place.")


def kind_in(events: pd.DataFrame, kinds) -> np.ndarray:
    """``events["kind"].isin(kinds)`` as a boolean array, looked up per category (pandas' isin on a categorical
    hashes every row's code: 15 ms on a million rows, this 1-3 ms)."""
    kind = events["kind"]
    if isinstance(kind.dtype, pd.CategoricalDtype):
        values = kind.array
        if values.dtype is KIND_DTYPE or values.dtype == KIND_DTYPE:  # the model's kinds: their codes compared
            # (a comparison of the int8 codes per kind costs a small part of a look-up table indexed by them)
            codes, wanted = values.codes, _kind_code_set(tuple(kinds))
            if not wanted:
                return np.zeros(codes.size, dtype=bool)
            out = codes == wanted[0]
            for c in wanted[1:]:
                out |= codes == c
            return out
        hit = np.zeros(len(kind.cat.categories) + 1, dtype=bool)  # the last slot: the code of a missing kind (-1)
        hit[:-1] = kind.cat.categories.isin(list(kinds))
        return hit[kind.cat.codes.to_numpy()]
    return kind.isin(list(kinds)).to_numpy()


@functools.lru_cache(maxsize=64)
def _kind_code_set(kinds: tuple) -> tuple[int, ...]:
    """The codes in :data:`KIND_DTYPE` of those of ``kinds`` it has (a missing kind's -1 is none of them)."""
    return tuple(i for i, k in enumerate(KINDS) if k in kinds)


def empty_steps() -> pd.DataFrame:
    return pd.DataFrame(
        {"rank": pd.Series(dtype="int64"), "step": pd.Series(dtype="int64"),
         "start_us": pd.Series(dtype="float64"), "end_us": pd.Series(dtype="float64"),
         "dur_us": pd.Series(dtype="float64")}
    )


_DEFAULTS = {"rank": 0, "lane": "", "device": -1, "stream": -1, "pid": -1, "tid": -1, "correlation": -1, "bytes": np.nan,
             "copy_kind": "", "host_memory": "", "step": -1}


#: The columns held as categoricals of text (see the module's docstring).
TEXT_COLUMNS = ("lane", "name", "copy_kind", "host_memory")


def text_column(codes: np.ndarray, texts: Any) -> pd.Categorical:
    """A text column from integer ``codes`` into ``texts`` (the text of each code; texts may repeat, and
    texts no code points at are left out): the categorical the events table holds, its categories the
    distinct texts in use, sorted. Costs one pass over the codes and a sort of the distinct texts."""
    codes = np.asarray(codes, dtype=np.int64)
    texts = list(texts)
    if not len(codes):
        return pd.Categorical.from_codes(np.zeros(0, dtype=np.int8), categories=pd.Index([], dtype="str"))
    used = np.flatnonzero(np.bincount(codes, minlength=len(texts)))
    used_texts = [texts[i] for i in used.tolist()]
    cats = sorted(set(used_texts))
    position = {t: i for i, t in enumerate(cats)}
    lut = np.zeros(len(texts), dtype=np.int64)
    lut[used] = [position[t] for t in used_texts]
    return pd.Categorical.from_codes(_small_codes(lut, len(cats))[codes], categories=pd.Index(cats, dtype="str"))


def _small_codes(codes: np.ndarray, n_categories: int) -> np.ndarray:
    """Codes in the smallest integer type that holds them, as pandas keeps a categorical's codes."""
    for dtype in (np.int8, np.int16, np.int32):
        if n_categories < np.iinfo(dtype).max:
            return codes.astype(dtype)
    return codes.astype(np.int64)


def _as_text(values: Any, n: int, default: str) -> pd.Categorical:
    """A text column as :func:`text_column`'s categorical, from a categorical or any sequence of strings."""
    if values is None:
        return text_column(np.zeros(n, dtype=np.int64), [default])
    if isinstance(values, pd.Series):
        values = values.array
    if isinstance(values, pd.Categorical):
        return text_column(values.codes, list(values.categories)) if not (values.codes < 0).any() else \
            _as_text(np.asarray(values, dtype=object), n, default)
    arr = np.asarray(values, dtype=object)
    if arr.ndim == 0:
        arr = np.full(n, arr.item(), dtype=object)
    codes, uniques = pd.factorize(arr, use_na_sentinel=False)
    return text_column(codes, [default if u is None or (isinstance(u, float) and u != u) else str(u) for u in uniques])


def build_events(columns: dict[str, Any]) -> pd.DataFrame:
    """Make a schema-conforming events table from column arrays (missing columns get defaults).

    Times are shifted so the earliest event starts at 0, rows are sorted by start time, and
    ``end_us`` is recomputed, so every reader hands back the same shape of table. ``kind`` may come
    as strings or, cheaper for a reader that has them, as a ``pd.Categorical`` of :data:`KIND_DTYPE`;
    the text columns as strings or, cheaper, as categoricals (:func:`text_column`).
    """
    n = len(columns["name"])
    defaults = {
        "rank": 0, "kind": "cpu_op", "lane": "", "device": -1, "stream": -1, "pid": -1, "tid": -1,
        "correlation": -1, "bytes": np.nan, "copy_kind": "", "host_memory": "", "step": -1,
    }
    data: dict[str, Any] = {}
    for col, dtype in COLUMNS.items():
        values = columns.get(col)
        if col == "end_us":
            continue
        if col == "kind":
            if isinstance(values, pd.Categorical) and values.dtype == KIND_DTYPE:
                data[col] = values
            else:
                data[col] = pd.Categorical(np.full(n, "cpu_op", dtype=object) if values is None else
                                           np.asarray(values, dtype=object), dtype=KIND_DTYPE)
            continue
        if col in TEXT_COLUMNS:
            data[col] = _as_text(values, n, defaults.get(col, ""))
            continue
        if values is None:
            values = np.full(n, defaults[col], dtype=dtype)
        data[col] = np.asarray(values, dtype=dtype)
    start = data["start_us"]
    start = start - start.min() if n else start.copy()  # a new array: the caller's stays as it was
    data["start_us"] = start
    data["end_us"] = start + data["dur_us"]
    # A total order, so the same events read from any format come out in the same rows: start, end,
    # kind, lane, name, and the readers' order for full ties.
    order = _row_order(data)
    out = {}
    for col in COLUMNS:
        values = data[col]
        if isinstance(values, pd.Categorical):
            out[col] = pd.Categorical.from_codes(values.codes[order], dtype=values.dtype)
        else:
            out[col] = values[order]
    # A small table's numeric columns go into one block each of ints and floats (a row filter then costs a few
    # array operations, not one per column: 10% of a small trace's diagnosis); a large one's stay as they are
    # (the copy that joins them costs more than it saves).
    return pd.DataFrame(out, copy=None if n <= _JOIN_BLOCKS_UP_TO else False)


#: Rows up to which build_events joins the table's numeric columns into shared blocks.
_JOIN_BLOCKS_UP_TO = 500_000


def _row_order(data: dict[str, Any]) -> np.ndarray:
    """The rows sorted (stably) by start, end, kind, lane, name: one stable sort of the starts, then the
    other keys only across runs of rows that start together, in one sort (few rows in most traces: sorting
    every row by every key cost most of building the table). When most rows tie (a folder of synchronized
    ranks: each event ties with its copies on the other ranks) one sort of every row by the five keys is
    cheaper than picking the runs out."""
    start, end = data["start_us"], data["end_us"]
    kind = data["kind"].codes.copy()  # (a small integer type: sorted by radix)
    kind[kind < 0] = len(KINDS)  # an unknown kind sorts last, as pandas puts missing categories
    order = np.argsort(start, kind="stable")
    if len(order) < 2:
        return order
    tie = _same(start[order])
    n_tied = int(np.count_nonzero(tie))
    if not n_tied:
        return order

    # lane and name categories are sorted, so their codes sort as their texts do; lexsort takes the least
    # significant key first, and is stable
    def keys(rows):
        return data["name"].codes[rows], data["lane"].codes[rows], kind[rows], end[rows]

    if 2 * n_tied > len(order):
        return np.lexsort((*keys(slice(None)), start))
    group = np.concatenate(([0], np.cumsum(~tie)))  # runs of rows that start together, numbered in start order
    in_run = np.zeros(len(order), dtype=bool)
    in_run[1:] |= tie
    in_run[:-1] |= tie
    at = np.flatnonzero(in_run)
    rows = order[at]
    order[at] = rows[np.lexsort((*keys(rows), group[at]))]
    return order


def _same(a: np.ndarray) -> np.ndarray:
    """Whether each element equals the one before it (NaN equal to NaN, as sorting takes them)."""
    return (a[1:] == a[:-1]) | (np.isnan(a[1:]) & np.isnan(a[:-1]))


def times_problem(events: pd.DataFrame | dict[str, Any]) -> str | None:
    """A one-line description of the first event whose time is beyond :data:`MAX_TIME_US` (or not a
    number), or None: the readers refuse such a file instead of wrapping or losing its times. ``events``
    is an events table or :func:`build_events`' columns."""
    start = np.asarray(events["start_us"], dtype="float64")
    dur = np.asarray(events["dur_us"], dtype="float64")
    with np.errstate(over="ignore", invalid="ignore"):
        for label, values in (("start", start), ("dur", dur), ("end", start + dur)):
            bad = ~(np.abs(values) < MAX_TIME_US)  # NaN counts as bad
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                name = str(np.asarray(events["name"], dtype=object)[i])[:40]
                return (f"event {name!r} has {label} {values[i]:.4g} us, beyond {MAX_TIME_US:.3g} us (146 years): "
                        "its clock is damaged")
    return None


#: The longest step pattern taken (a pattern for range names; compiling a longer one takes seconds).
MAX_STEP_PATTERN_CHARS = 10_000


def check_step_pattern(pattern: object, label: str = "step pattern") -> str | None:
    """``pattern`` if it can mark steps (None, or text that compiles as a regular expression), else
    :class:`~helpers.errors.TraceError` with one line naming ``label`` (``--steps`` on the command line)."""
    from .errors import TraceError

    if pattern is None:
        return None
    example = "e.g. 'train_step' or 'step \\d+'"
    if not isinstance(pattern, str):
        raise TraceError(f"{label} {_short(pattern)}: give a regular expression as text, {example}")
    if len(pattern) > MAX_STEP_PATTERN_CHARS:
        raise TraceError(f"{label} of {len(pattern):,} characters: over {MAX_STEP_PATTERN_CHARS:,}; a pattern for "
                         f"range names is short, {example}")
    try:
        re.compile(pattern, re.IGNORECASE)
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        raise TraceError(f"{label} {_short(pattern)}: not a regular expression ({exc or type(exc).__name__}); "
                         f"{example}") from None
    return pattern


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...'"


def find_steps(events: pd.DataFrame, pattern: str | None = None) -> pd.DataFrame:
    """Training-step windows from annotation ranges.

    With no ``pattern``: ``ProfilerStep#N`` ranges when the trace has them, else ranges named
    like ``step 3`` / ``train_step``. Each rank is numbered on its own, from 0. A ``pattern`` (the
    user's) is matched under a time limit (:func:`helpers.procs.search_bounded`): one that would run for
    minutes on a long name is refused in one line instead.
    """
    pattern = check_step_pattern(pattern)
    ann = events[events["kind"] == "annotation"]
    if pattern:
        hits = ann[ann["name"].isin(_names_found(pattern, ann["name"].unique()))]
    else:
        for pat in DEFAULT_STEP_PATTERNS:  # the course's own, which run in linear time on any name
            hits = ann[ann["name"].str.contains(pat, regex=True, case=False)]
            if not hits.empty:
                break
    if hits.empty:
        return empty_steps()
    rank = hits["rank"].to_numpy(dtype=np.int64)
    start, end = hits["start_us"].to_numpy(dtype=np.float64), hits["end_us"].to_numpy(dtype=np.float64)
    order = np.lexsort((start, rank))  # each rank's ranges by start, the ranks in order
    rank, start, end = rank[order], start[order], end[order]
    at = np.arange(len(rank))
    first = np.maximum.accumulate(np.where(np.r_[True, rank[1:] != rank[:-1]], at, 0))  # where each rank's run begins
    return pd.DataFrame({"rank": rank, "step": at - first, "start_us": start, "end_us": end, "dur_us": end - start})


def _names_found(pattern: str, names: np.ndarray) -> list[str]:
    import subprocess

    from .errors import TraceError
    from .procs import PATTERN_TIMEOUT_S, search_bounded

    texts = [n if isinstance(n, str) else str(n) for n in names]
    try:
        found = search_bounded(pattern, texts, re.IGNORECASE)
    except subprocess.TimeoutExpired:
        longest = max((len(t) for t in texts), default=0)
        raise TraceError(  # (kept under ~200 characters: it is read on one terminal line)
            f"step pattern {_short(pattern, 40)} did not finish within {PATTERN_TIMEOUT_S:g} s on {len(texts):,} range "
            f"names (longest {longest:,} characters): nested repeats like (a|a)* backtrack; try e.g. 'step \\d+'") from None
    return [n for n, hit in zip(names, found) if hit]


def assign_steps(events: pd.DataFrame, steps: pd.DataFrame) -> None:
    """Fill ``events.step`` in place: the step whose host window holds the event's start.

    GPU work runs after the host call that launched it, so device events take the step of
    their launching CUDA API call where the correlation id links them.
    """
    n = len(events)
    step = np.full(n, -1, dtype=np.int64)
    if steps.empty or n == 0:
        events["step"] = step
        return
    ranks = events["rank"].to_numpy()
    starts = events["start_us"].to_numpy()
    one_rank = bool((ranks == ranks[0]).all())
    # One pass over the events groups their rows by rank (a mask per rank would read every row per rank).
    rows_of = {ranks[0]: slice(None)} if one_rank else pd.Series(np.arange(n)).groupby(ranks, sort=False).indices
    for rank, st in steps.groupby("rank"):
        rows = rows_of.get(rank)
        if rows is None:
            continue
        st = st.sort_values("start_us")
        s = starts[rows]
        idx = np.searchsorted(st["start_us"].to_numpy(), s, side="right") - 1
        at = np.clip(idx, 0, None)
        inside = (idx >= 0) & (s < st["end_us"].to_numpy()[at])
        step[rows] = np.where(inside, st["step"].to_numpy()[at], -1)
    # Device work inherits the step of the API call that launched it (the last such call when a
    # correlation id repeats on a rank).
    corr = events["correlation"].to_numpy()
    kind = events["kind"]
    api = ((kind == "runtime").to_numpy()) & (corr >= 0)
    dev = (events["device"].to_numpy() >= 0) & (corr >= 0)
    if api.any() and dev.any():
        if one_rank:  # the calls' ids sorted (stably: the last call of an id is its group's last), then looked up
            order = np.argsort(corr[api], kind="stable")
            ids, of = corr[api][order], step[api][order]
            last = np.r_[ids[1:] != ids[:-1], True]
            ids, of = ids[last], of[last]
            want = corr[dev]
            at = np.clip(np.searchsorted(ids, want), 0, len(ids) - 1)
            step[dev] = np.where(ids[at] == want, of[at], step[dev])
        else:
            keys = pd.DataFrame({"rank": ranks[api], "corr": corr[api], "step": step[api]})
            keys = keys.drop_duplicates(["rank", "corr"], keep="last")
            index = pd.MultiIndex.from_arrays([keys["rank"].to_numpy(), keys["corr"].to_numpy()])
            found = index.get_indexer(pd.MultiIndex.from_arrays([ranks[dev], corr[dev]]))
            step[dev] = np.where(found >= 0, keys["step"].to_numpy()[np.clip(found, 0, None)], step[dev])
    events["step"] = step


def finish(events: pd.DataFrame, source: str, fmt: str, metadata: dict[str, Any],
           step_pattern: str | None = None) -> Trace:
    """Find steps, label events with them, and wrap everything in a Trace."""
    steps = find_steps(events, step_pattern)
    assign_steps(events, steps)
    metadata = dict(metadata)
    metadata["steps"] = steps
    return Trace(events, source, fmt, metadata)
