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
            "python": "python_function", "sync": "cuda_sync"}
_BATCH = 50_000  # events formatted and written at a time


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
        name_json = np.array([_quote(str(x)) for x in names], dtype=object)
        device = ev["device"].to_numpy()
        kind = ev["kind"].astype(str).to_numpy(dtype=object)
        kind_code, kinds = pd.factorize(kind + np.where(device >= 0, "+", "-"))
        cat_json = np.array([_quote(_category(k[:-1], 0 if k[-1] == "+" else -1)) for k in kinds], dtype=object)
        nbytes = ev["bytes"].to_numpy(dtype=np.float64)
        has_bytes = np.isfinite(nbytes)  # NaN (no bytes) is left out of args
        # Each args shape has its own template, filled by str.format in C, batch by batch, in table order.
        shape = (device >= 0) * 4 + (ev["correlation"].to_numpy() >= 0) * 2 + has_bytes
        base = (cat_json[kind_code], name_json[name_code], ev["rank"].to_numpy(), tids,
                np.round(ev["start_us"].to_numpy(), 3), np.round(ev["dur_us"].to_numpy(), 3), ev["step"].to_numpy())
        optional = ((4, (device, ev["stream"].to_numpy()), ',"device":{},"stream":{}'),
                    (2, (ev["correlation"].to_numpy(),), ',"correlation":{}'),
                    (1, (nbytes,), ',"bytes":{!r}'))
        for lo in range(0, n, _BATCH):
            hi = min(lo + _BATCH, n)
            out = np.empty(hi - lo, dtype=object)
            batch_shape = shape[lo:hi]
            for sh in np.unique(batch_shape).tolist():
                idx = np.flatnonzero(batch_shape == sh) + lo
                cols = list(base)
                template = '{{"ph":"X","cat":{},"name":{},"pid":{},"tid":{},"ts":{!r},"dur":{!r},"args":{{"step":{}'
                for bit, extra, text in optional:
                    if sh & bit:
                        cols += extra
                        template += text
                template += "}}}}"
                out[idx - lo] = list(map(template.format, *(c[idx].tolist() for c in cols)))
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
