"""Write any Trace as Chrome-trace JSON that Perfetto UI and chrome://tracing open.

The document is written as text, a few tens of thousands of events at a time, straight from the events
table's columns: no dict per event is ever built, so exporting a 2M-event trace costs about what
reading it does (tools/benchmark.py, docs/benchmarks.md).
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

from .model import Trace
from .outputs import write_output

try:  # orjson quotes strings faster than json
    import orjson

    def _quote(text: str) -> str:
        return orjson.dumps(text).decode()
except ImportError:  # pragma: no cover - exercised only without orjson
    def _quote(text: str) -> str:
        return json.dumps(text, ensure_ascii=False)

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


def _distinct(*columns: np.ndarray) -> tuple[np.ndarray, list[tuple]]:
    """For each row the number of its distinct combination of ``columns``, and those combinations."""
    codes = pd.DataFrame(dict(enumerate(columns))).groupby(list(range(len(columns))), sort=False).ngroup().to_numpy()
    _, first = np.unique(codes, return_index=True)
    return codes, list(zip(*(c[first].tolist() for c in columns)))


def _fragments(trace: Trace) -> Iterator[str]:
    """The document's text, in pieces: header, metadata events, then the timed events a batch at a time."""
    ev = trace.events
    lanes, tids = _lanes(trace)
    meta: list[dict] = []
    for rank in sorted({r for r, _ in lanes}):
        meta.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
    for tid, (rank, lane) in enumerate(lanes, start=1):
        meta.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": lane}})
        meta.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid, "args": {"sort_index": tid}})
    yield '{"traceEvents":['
    yield ",".join(json.dumps(m, ensure_ascii=False, separators=(",", ":")) for m in meta)
    n = len(ev)
    if n:
        name_code, names = pd.factorize(ev["name"].to_numpy(dtype=object))
        device = ev["device"].to_numpy()
        kind_code, kinds = pd.factorize(ev["kind"].astype(str).to_numpy(dtype=object) + np.where(device >= 0, "+", "-"))
        rank = ev["rank"].to_numpy()
        # What repeats is written once per distinct value: the event's head (category, name, process,
        # thread) and the start of its args (step, device, stream); only times, correlation and bytes
        # are formatted per event.
        head_code, heads = _distinct(kind_code, name_code, rank, tids)
        cat_of = [_quote(_category(k[:-1], 0 if k[-1] == "+" else -1)) for k in kinds]
        head_text = np.array([f'{{"ph":"X","cat":{cat_of[k]},"name":{_quote(str(names[nm]))},"pid":{r},"tid":{t},'
                              for k, nm, r, t in heads], dtype=object)[head_code]
        step = ev["step"].to_numpy()
        stream = ev["stream"].to_numpy()
        args_code, args = _distinct(step, device, stream)
        args_text = np.array([f'"step":{st}' + (f',"device":{d},"stream":{sm}' if d >= 0 else "") for st, d, sm in args],
                             dtype=object)[args_code]
        correlation = ev["correlation"].to_numpy()
        nbytes = ev["bytes"].to_numpy(dtype=np.float64)
        shape = (correlation >= 0) * 2 + np.isfinite(nbytes)  # NaN (no bytes) is left out of args
        # Times to the nanosecond, written as integer microseconds and three decimals (formatting two
        # integers is several times faster than a float's repr, and reads back as the same double).
        ns = [np.rint(ev[c].to_numpy() * 1e3).astype(np.int64) for c in ("start_us", "dur_us")]
        start_int, start_frac = np.divmod(ns[0], 1000)
        dur_int, dur_frac = np.divmod(ns[1], 1000)
        times = '%s"ts":%d.%03d,"dur":%d.%03d,"args":{%s'
        templates = {0: times + "}}", 1: times + ',"bytes":%r}}', 2: times + ',"correlation":%d}}',
                     3: times + ',"correlation":%d,"bytes":%r}}'}
        for lo in range(0, n, _BATCH):
            hi = min(lo + _BATCH, n)
            out = np.empty(hi - lo, dtype=object)
            batch_shape = shape[lo:hi]
            for sh in np.unique(batch_shape).tolist():
                idx = np.flatnonzero(batch_shape == sh) + lo
                cols = [head_text, start_int, start_frac, dur_int, dur_frac, args_text] + ([correlation] if sh & 2 else []) + ([nbytes] if sh & 1 else [])
                out[idx - lo] = list(map(templates[sh].__mod__, zip(*(c[idx].tolist() for c in cols))))
            yield ("," if lo or meta else "") + ",".join(out.tolist())
    tail = json.dumps({"source": trace.source, "format": trace.format}, ensure_ascii=False)
    yield f'],"displayTimeUnit":"ms","metadata":{tail}}}'


def to_chrome_trace(trace: Trace) -> dict:
    """The trace as a Chrome-trace document: one process per rank, one thread per lane."""
    return json.loads("".join(_fragments(trace)))


def export(trace: Trace, path: str | os.PathLike, force: bool = False) -> Path:
    """Write the trace to ``path`` (``.json`` or ``.json.gz``).

    Refuses an existing file, a symlink or a temporary name with :class:`TraceError` unless ``force``.
    """
    def write(fh: BinaryIO) -> None:
        if Path(path).name.endswith(".gz"):
            with gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=6) as gz:
                for text in _fragments(trace):
                    gz.write(text.encode())
        else:
            for text in _fragments(trace):
                fh.write(text.encode())

    return write_output(path, write, force)
