"""Write any Trace as Chrome-trace JSON that Perfetto UI and chrome://tracing open.

Each GPU event is linked to the CUDA API call that launched it by a pair of flow events (``ac2g``, as the
PyTorch profiler writes them), so the viewers draw an arrow from the launch to its kernel.

The document is written 100,000 events at a time, as bytes that numpy builds straight from the events
table's columns: no dict, format call or string per event field is ever made, so formatting the
2M-event trace's 1.2M events takes less time than diagnosing them (tools/benchmark.py,
docs/benchmarks.md).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd

from .arguments import checked
from .errors import TraceError
from .model import Trace, times_problem
from .outputs import write_output
from .paths import printable

try:  # orjson quotes strings faster than json
    import orjson

    def _quote(text: str) -> str:
        return orjson.dumps(printable(text)).decode()  # printable: a lone surrogate is not UTF-8 (paths.printable)
except ImportError:  # pragma: no cover - exercised only without orjson
    def _quote(text: str) -> str:
        return json.dumps(printable(text), ensure_ascii=False)

# Kineto's category names, so that an exported trace reads back through helpers.load.
CATEGORY = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset", "runtime": "cuda_runtime",
            "cpu_op": "cpu_op", "annotation": "user_annotation", "gpu_annotation": "gpu_user_annotation",
            "python": "python_function", "sync": "cuda_sync",
            "osrt": "os_runtime"}  # Kineto has no OS runtime calls: a category of helpers' own, read back as osrt
_BATCH = 100_000  # events formatted and written at a time


def _category(kind: str, device: int) -> str:
    if kind == "collective":  # NCCL kernels on a GPU; gloo ranges (named gloo:...) on the host
        return "kernel" if device >= 0 else "user_annotation"
    return CATEGORY[kind]


def _lanes(trace: Trace) -> tuple[list[tuple[int, str]], np.ndarray]:
    """The distinct (rank, lane) pairs, sorted, and for each event the number (from 1) of its pair."""
    ev = trace.events
    if ev.empty:
        return [], np.zeros(0, dtype=np.int64)
    lane_code, lane_names = pd.factorize(ev["lane"].to_numpy(dtype=object))
    rank_code, rank_values = pd.factorize(ev["rank"].to_numpy())
    group, keys = pd.factorize(rank_code.astype(np.int64) * len(lane_names) + lane_code)
    pairs = [(int(rank_values[k // len(lane_names)]), str(lane_names[k % len(lane_names)])) for k in keys.tolist()]
    order = sorted(range(len(pairs)), key=pairs.__getitem__)
    number = np.empty(len(pairs), dtype=np.int64)
    number[order] = np.arange(1, len(pairs) + 1)
    return [pairs[i] for i in order], number[group]


def _combined(columns: list[np.ndarray]) -> np.ndarray:
    """For each row the number (from 0, in order of first appearance) of its combination of ``columns``
    (integer columns), from one mixed-radix key hashed once instead of a hash per column."""
    key, span = np.zeros(len(columns[0]), dtype=np.int64), 1
    for column in columns:
        low, high = int(column.min()), int(column.max())
        if high - low >= 2**31:  # sparse values (ids, say): number them first
            column, low = pd.factorize(column)[0], 0
            high = int(column.max())
        top = high - low + 1
        if span * top >= 2**62:  # keep the key in range: renumber what we have first
            key = pd.factorize(key)[0]
            span = int(key.max()) + 1
        key = key * top + (column - low)
        span *= top
    return pd.factorize(key)[0]


def _distinct(*columns: np.ndarray) -> tuple[np.ndarray, list[tuple]]:
    """For each row the number of its distinct combination of ``columns``, and those combinations."""
    if not len(columns[0]):
        return np.zeros(0, dtype=np.int64), []
    codes = _combined(list(columns))
    # A combination's first row is where the running highest number grows.
    first = np.flatnonzero(np.r_[True, codes[1:] > np.maximum.accumulate(codes)[:-1]])
    return codes, list(zip(*(c[first].tolist() for c in columns)))


# Rows are built as bytes by numpy, a few vector operations per column instead of a Python format
# per event (that took 1.6 s of the 2M-event trace's export). A row is a list of pieces: constant
# bytes, an entry of a table of byte strings, or an integer's decimal digits. The output is the very
# bytes "%d.%03d" and friends wrote before (tests/test_export.py checks the document).
_POW10 = 10 ** np.arange(19, dtype=np.int64)


def _digit_count(v: np.ndarray) -> np.ndarray:
    """Decimal digits of each value (>= 0)."""
    count = np.ones(len(v), dtype=np.int64)
    top = int(v.max()) if len(v) else 0
    for power in _POW10[1:]:
        if power > top:
            break
        count += v >= power
    return count


def _settled(lengths: np.ndarray | int) -> np.ndarray | int:
    """A piece's lengths, as one number when every row has the same (its rows then need no grouping)."""
    if isinstance(lengths, np.ndarray) and (not len(lengths) or lengths.min() == lengths.max()):
        return int(lengths[0]) if len(lengths) else 0
    return lengths


def _part(lengths: np.ndarray | int, lo: int, hi: int) -> np.ndarray | int:
    return lengths[lo:hi] if isinstance(lengths, np.ndarray) else lengths


class _Table:
    """A piece taken from a table of byte strings by each row's code (an empty entry leaves it out)."""

    def __init__(self, matrix: np.ndarray, codes: np.ndarray, lengths: np.ndarray | int):
        self.matrix, self.codes, self.lengths = matrix, codes, _settled(lengths)

    @classmethod
    def of(cls, entries: list[bytes], codes: np.ndarray) -> _Table:
        matrix = np.zeros((len(entries), max([len(e) for e in entries] + [1])), dtype=np.uint8)
        for i, e in enumerate(entries):
            matrix[i, :len(e)] = np.frombuffer(e, dtype=np.uint8)
        return cls(matrix, codes, np.array([len(e) for e in entries], dtype=np.int64)[codes])

    def batch(self, lo: int, hi: int) -> _Table:
        part = _Table.__new__(_Table)
        part.matrix, part.codes, part.lengths = self.matrix, self.codes[lo:hi], _part(self.lengths, lo, hi)
        return part

    def write(self, out: np.ndarray, col: int, rows: np.ndarray, width: int) -> None:
        # mode="clip" (every code is in range) lets take write into the slice without a buffer
        np.take(self.matrix[:, :width], self.codes[rows], axis=0, out=out[:, col:col + width], mode="clip")


class _Digits:
    """Each row's value (>= 0) in decimal, ``lengths`` digits wide (an array: as many as it has; 0: left out)."""

    def __init__(self, values: np.ndarray, lengths: np.ndarray | int):
        # Unsigned 32-bit division is several times faster than 64-bit: use it where the values fit.
        self.values = values.astype(np.uint32 if not len(values) or values.max() < 2**32 else np.uint64)
        self.lengths = _settled(lengths)

    def batch(self, lo: int, hi: int) -> _Digits:
        part = _Digits.__new__(_Digits)
        part.values = self.values[lo:hi]
        part.lengths = _part(self.lengths, lo, hi)
        return part

    def write(self, out: np.ndarray, col: int, rows: np.ndarray, width: int) -> None:
        v = self.values[rows]
        for j in range(col + width - 1, col - 1, -1):  # the last digit first
            q = v // 10
            out[:, j] = v - q * 10 + 48
            v = q


def _rows(pieces: list, n: int) -> np.ndarray:
    """Each of ``n`` rows of ``pieces`` (bytes, _Table, _Digits) as one bytes object, in an object array.

    Rows whose pieces all have the same lengths are built together: one uint8 matrix with a block of
    columns per piece, each matrix row then one row's bytes.
    """
    lengths = [len(p) if isinstance(p, bytes) else p.lengths for p in pieces]
    group = _combined([ln for ln in lengths if isinstance(ln, np.ndarray)] or [np.zeros(n, dtype=np.int64)])
    # Few groups: a 16-bit key sorts by radix (numpy's stable sort), in one pass.
    order = np.argsort(group.astype(np.uint16) if group.max() < 2**16 else group, kind="stable")
    out = np.empty(n, dtype=object)
    for rows in np.split(order, np.flatnonzero(np.diff(group[order])) + 1):
        widths = [int(ln[rows[0]]) if isinstance(ln, np.ndarray) else ln for ln in lengths]
        mat = np.empty((len(rows), sum(widths)), dtype=np.uint8)
        col = 0
        for piece, width in zip(pieces, widths):
            if width:
                if isinstance(piece, bytes):
                    mat[:, col:col + width] = np.frombuffer(piece, dtype=np.uint8)
                else:
                    piece.write(mat, col, rows, width)
                col += width
        out[rows] = mat.view(f"S{col}").ravel()  # bytes objects; no row ends in a NUL byte, so none is dropped
    return out


def _time_pieces(values_us: np.ndarray, key: bytes) -> list:
    """``key`` then each time as integer microseconds and three decimals (the text of "%d.%03d" of nanoseconds)."""
    whole, frac = np.divmod(np.rint(values_us * 1e3).astype(np.int64), 1000)
    minus = _Table.of([b"", b"-"], (whole < 0).astype(np.int64))  # as "%d" writes a negative number
    return [key, minus, _Digits(np.abs(whole), _digit_count(np.abs(whole))), b".", _Digits(frac, 3)]


def flow_pairs(trace: Trace) -> pd.DataFrame:
    """Each GPU event (kernel, copy, memset, collective) with the CUDA API call that launched it: the row
    numbers of both in ``trace.events``, for the flow arrows a viewer draws from launch to kernel.

    The call is the first runtime event of the same rank with the same correlation id (a graph launch
    links to each kernel it replays); GPU events whose call is not in the trace get no arrow.
    """
    ev = trace.events
    corr, rank = ev["correlation"].to_numpy(), ev["rank"].to_numpy()
    calls = np.flatnonzero((ev["kind"] == "runtime").to_numpy() & (corr >= 0))
    gpu = np.flatnonzero((ev["device"].to_numpy() >= 0) & (corr >= 0))
    if not len(calls) or not len(gpu):
        return pd.DataFrame({"call": np.zeros(0, dtype=np.int64), "gpu": np.zeros(0, dtype=np.int64)})
    first = pd.DataFrame({"rank": rank[calls], "corr": corr[calls], "row": calls}).drop_duplicates(["rank", "corr"])
    index = pd.MultiIndex.from_arrays([first["rank"].to_numpy(), first["corr"].to_numpy()])
    found = index.get_indexer(pd.MultiIndex.from_arrays([rank[gpu], corr[gpu]]))
    linked = found >= 0
    return pd.DataFrame({"call": first["row"].to_numpy()[found[linked]], "gpu": gpu[linked]})


def _flow_fragments(trace: Trace, tids: np.ndarray) -> Iterator[bytes]:
    """Chrome-trace flow events, ``s`` on the launch call and ``f`` (bound to the enclosing slice) on its GPU
    event, named ``ac2g`` as the PyTorch profiler names them: Perfetto UI and chrome://tracing draw each pair
    as an arrow from the CUDA API row to the GPU row. Each pair has its own id, every event ends with a comma."""
    pairs = flow_pairs(trace)
    n = len(pairs)
    if not n:
        return
    ev = trace.events
    starts, rank = ev["start_us"].to_numpy(), ev["rank"].to_numpy()
    ids = np.arange(1, n + 1, dtype=np.int64)
    for phase, rows, tail in ((b"s", pairs["call"].to_numpy(), b"},"), (b"f", pairs["gpu"].to_numpy(), b',"bp":"e"},')):
        r = rank[rows]
        rank_text = _Table.of([b"", b"-"], (r < 0).astype(np.int64))
        pieces = [b'{"ph":"' + phase + b'","cat":"ac2g","name":"ac2g","id":', _Digits(ids, _digit_count(ids)),
                  b',"pid":', rank_text, _Digits(np.abs(r), _digit_count(np.abs(r))),
                  b',"tid":', _Digits(tids[rows], _digit_count(tids[rows])),
                  *_time_pieces(starts[rows], b',"ts":'), tail]
        pieces = [p for p in pieces if isinstance(p, bytes) or not isinstance(p.lengths, int) or p.lengths]
        for lo in range(0, n, _BATCH):
            hi = min(lo + _BATCH, n)
            yield b"".join(_rows([p if isinstance(p, bytes) else p.batch(lo, hi) for p in pieces], hi - lo).tolist())


def _fragments(trace: Trace) -> Iterator[bytes]:
    """The document's bytes, in pieces: header, metadata events, then the timed events a batch at a time."""
    ev = trace.events
    problem = times_problem(ev)  # times are written as 64-bit nanoseconds: beyond that they would wrap
    if problem:
        raise TraceError(f"{trace.source or 'the trace'}: cannot be written: {problem}")
    lanes, tids = _lanes(trace)
    meta: list[dict] = []
    for rank in sorted({r for r, _ in lanes}):
        meta.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
    for tid, (rank, lane) in enumerate(lanes, start=1):
        meta.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": printable(str(lane))}})
        meta.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid, "args": {"sort_index": tid}})
    yield b'{"traceEvents":['
    yield ",".join(json.dumps(m, ensure_ascii=False, separators=(",", ":")) for m in meta).encode()
    n = len(ev)
    if n:
        name_code, names = pd.factorize(ev["name"].to_numpy(dtype=object))
        device = ev["device"].to_numpy()
        kind_of, kind_names = pd.factorize(ev["kind"])  # a categorical: numbered by its codes, no string hashing
        kind_code, kinds = pd.factorize(kind_of * 2 + (device >= 0))
        rank = ev["rank"].to_numpy()
        # What repeats is written once per distinct value: the event's head (category, name, process,
        # thread) and the start of its args (step, device, stream); only times, correlation and bytes
        # are formatted per event.
        head_code, heads = _distinct(kind_code, name_code, rank, tids)
        cat_of = [_quote(_category(str(kind_names[k // 2]), 0 if k % 2 else -1)) for k in kinds.tolist()]
        head_text = np.array([f'{{"ph":"X","cat":{cat_of[k]},"name":{_quote(str(names[nm]))},"pid":{r},"tid":{t},"ts":'.encode()
                              for k, nm, r, t in heads], dtype=object)
        step = ev["step"].to_numpy()
        stream = ev["stream"].to_numpy()
        args_code, args = _distinct(step, device, stream)
        args_text = _Table.of([(f',"args":{{"step":{st}' + (f',"device":{d},"stream":{sm}' if d >= 0 else "")).encode()
                               for st, d, sm in args], args_code)
        correlation = ev["correlation"].to_numpy()
        has_corr = correlation >= 0
        corr_value = np.where(has_corr, correlation, 0)
        nbytes = ev["bytes"].to_numpy(dtype=np.float64)
        has_bytes = np.isfinite(nbytes)  # NaN (no bytes) is left out of args
        bytes_code, bytes_values = pd.factorize(nbytes[has_bytes].view(np.int64))  # by bit pattern: -0.0 stays -0.0
        bytes_codes = np.zeros(n, dtype=np.int64)
        bytes_codes[has_bytes] = bytes_code + 1
        bytes_text = _Table.of([b""] + [b',"bytes":' + repr(v).encode() for v in bytes_values.view(np.float64).tolist()],
                               bytes_codes)
        # Times to the nanosecond, written as integer microseconds and three decimals (the text of
        # "%d.%03d", which reads back as the same double as the float).
        pieces: list = []
        for col, key in (("start_us", b""), ("dur_us", b',"dur":')):
            pieces += _time_pieces(ev[col].to_numpy(), key)
        pieces += [args_text, _Table.of([b"", b',"correlation":'], has_corr.astype(np.int64)),
                   _Digits(corr_value, np.where(has_corr, _digit_count(corr_value), 0)), bytes_text, b"}},"]
        pieces = [p for p in pieces if isinstance(p, bytes) or not isinstance(p.lengths, int) or p.lengths]
        if meta:
            yield b","
        yield from _flow_fragments(trace, tids)  # before the slices: each flow event ends with a comma
        for lo in range(0, n, _BATCH):
            hi = min(lo + _BATCH, n)
            rows = np.empty((hi - lo, 2), dtype=object)
            rows[:, 0] = head_text[head_code[lo:hi]]  # the heads are shared bytes objects: no copy per event
            rows[:, 1] = _rows([p if isinstance(p, bytes) else p.batch(lo, hi) for p in pieces], hi - lo)
            text = b"".join(rows.ravel().tolist())
            yield text if hi < n else text[:-1]  # every row ends with a comma but the last
    tail = json.dumps({"source": printable(str(trace.source)), "format": printable(str(trace.format))}, ensure_ascii=False)
    yield f'],"displayTimeUnit":"ms","metadata":{tail}}}'.encode()


_WRITE_BYTES = 1 << 20


def _write_all(fh: BinaryIO, chunks: Iterator[bytes]) -> None:
    """Write each chunk a megabyte at a time: one write of a batch's 15 MB took the kernel 0.4-0.6 s of
    system time per 193 MB on the development machine, writes of 1 MB 0.05-0.10 s (docs/benchmarks.md)."""
    for chunk in chunks:
        view = memoryview(chunk)
        for i in range(0, len(view), _WRITE_BYTES):
            fh.write(view[i:i + _WRITE_BYTES])


@checked
def to_chrome_trace(trace: Trace) -> dict:
    """The trace as a Chrome-trace document: one process per rank, one thread per lane."""
    return json.loads(b"".join(_fragments(trace)))


@checked
def export(trace: Trace, path: str | os.PathLike, force: bool = False) -> Path:
    """Write the trace to ``path`` (``.json`` or ``.json.gz``).

    Refuses an existing file, a symlink or a temporary name with :class:`TraceError` unless ``force``.
    """
    problem = times_problem(trace.events)  # before the output is created: nothing half-written is left
    if problem:
        raise TraceError(f"{path}: not written: {problem}")

    def write(fh: BinaryIO) -> None:
        if Path(path).name.endswith(".gz"):
            with gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=6) as gz:
                _write_all(gz, _fragments(trace))
        else:
            _write_all(fh, _fragments(trace))

    return write_output(path, write, force, [trace.source] if trace.source else [])


# Every public function here holds its arguments to its type hints (flow_pairs(pd.NA) is one TraceError line).
from .arguments import check_namespace as _check_namespace  # noqa: E402

_check_namespace(globals())
