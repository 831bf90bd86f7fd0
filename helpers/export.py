"""Write any Trace as Chrome-trace JSON that Perfetto UI and chrome://tracing open."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import BinaryIO

from .model import Trace
from .outputs import write_output

try:  # orjson serialises a large trace several times faster than json
    import orjson

    def _dumps(doc: dict) -> bytes:
        return orjson.dumps(doc)
except ImportError:  # pragma: no cover - exercised only without orjson
    def _dumps(doc: dict) -> bytes:
        return json.dumps(doc).encode()

# Kineto's category names, so that an exported trace reads back through helpers.load.
CATEGORY = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset", "runtime": "cuda_runtime",
            "cpu_op": "cpu_op", "annotation": "user_annotation", "gpu_annotation": "gpu_user_annotation",
            "python": "python_function", "sync": "cuda_sync"}


def _category(kind: str, device: int) -> str:
    if kind == "collective":  # NCCL kernels on a GPU; gloo ranges (named gloo:...) on the host
        return "kernel" if device >= 0 else "user_annotation"
    return CATEGORY[kind]


def to_chrome_trace(trace: Trace) -> dict:
    """The trace as a Chrome-trace document: one process per rank, one thread per lane."""
    events: list[dict] = []
    lanes = sorted({(int(r), ln) for r, ln in zip(trace.events["rank"], trace.events["lane"])})
    lane_id = {rl: i + 1 for i, rl in enumerate(lanes)}
    for rank in sorted({r for r, _ in lanes}):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
    for (rank, lane), tid in lane_id.items():
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": lane}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid, "args": {"sort_index": tid}})
    ev = trace.events
    for row in zip(ev["rank"], ev["lane"], ev["kind"], ev["name"], ev["start_us"], ev["dur_us"], ev["correlation"],
                   ev["bytes"], ev["step"], ev["device"], ev["stream"]):
        rank, lane, kind, name, start, dur, corr, nbytes, step, device, stream = row
        args = {"step": int(step)}
        if device >= 0:
            args.update(device=int(device), stream=int(stream))
        if corr >= 0:
            args["correlation"] = int(corr)
        if nbytes == nbytes:  # not NaN
            args["bytes"] = float(nbytes)
        events.append({"ph": "X", "cat": _category(kind, int(device)), "name": name, "pid": int(rank), "tid": lane_id[(int(rank), lane)],
                       "ts": round(float(start), 3), "dur": round(float(dur), 3), "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "metadata": {"source": trace.source, "format": trace.format}}


def export(trace: Trace, path: str | os.PathLike, force: bool = False) -> Path:
    """Write the trace to ``path`` (``.json`` or ``.json.gz``).

    Refuses an existing file, a symlink or a temporary name with :class:`TraceError` unless ``force``.
    """
    doc = _dumps(to_chrome_trace(trace))

    def write(fh: BinaryIO) -> None:
        if Path(path).name.endswith(".gz"):
            with gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=6) as gz:
                gz.write(doc)
        else:
            fh.write(doc)

    return write_output(path, write, force)
