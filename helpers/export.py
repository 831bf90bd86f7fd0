"""Write any Trace as Chrome-trace JSON that Perfetto UI and chrome://tracing open."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from .errors import TraceError
from .model import Trace

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


def export(trace: Trace, path: str | os.PathLike) -> Path:
    """Write the trace to ``path`` (``.json`` or ``.json.gz``); refuses to overwrite an existing file."""
    path = Path(path)
    if path.exists():
        raise TraceError(f"{path}: already exists; choose another output name (existing files are never overwritten)")
    doc = json.dumps(to_chrome_trace(trace)).encode()
    tmp = path.with_name(path.name + ".partial")
    with (gzip.open(tmp, "wb") if path.name.endswith(".gz") else open(tmp, "wb")) as fh:
        fh.write(doc)
    tmp.rename(path)
    return path
