"""PyTorch-profiler (Kineto) Chrome-trace JSON -> events table.

Facts relied on: ``ts``/``dur`` are microseconds; GPU events carry ``args.device`` and
``args.stream``; ``args.correlation`` links a runtime call to its kernel; memcpy names spell the
memory kinds, e.g. ``Memcpy HtoD (Pageable -> Device)``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import TraceError
from ..model import build_events, is_collective_kernel

try:  # orjson parses large traces about 25% faster; plain json works too
    import orjson

    _loads = orjson.loads
    _DecodeError: tuple[type[Exception], ...] = (orjson.JSONDecodeError, ValueError)
except ImportError:  # pragma: no cover - exercised only without orjson
    _loads = json.loads
    _DecodeError = (ValueError,)

_CATEGORY_KIND = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "python_function": "python",
    "cuda_sync": "sync",
}
_DIRECTION = {"HtoD": "H2D", "DtoH": "D2H", "DtoD": "D2D", "HtoH": "H2H", "PtoP": "P2P"}
_MEMCPY = re.compile(r"Memcpy (\w+) \((\w+) -> (\w+)\)")
_VERSION_SUFFIX = re.compile(r"_v\d+$")


def _memory_side(direction: str, src: str, dst: str) -> str:
    host = src if direction in ("H2D", "H2H") else dst if direction == "D2H" else ""
    host = host.lower()
    return host if host in ("pageable", "pinned") else ""


def parse(raw: bytes, path: Path) -> tuple[pd.DataFrame, dict]:
    try:
        doc = _loads(raw)
    except _DecodeError as exc:
        raise TraceError(
            f"{path}: not valid JSON ({str(exc).splitlines()[0][:80]}); the file is probably truncated: "
            "record or copy it again"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(
            f"{path}: JSON without a 'traceEvents' list, so not a PyTorch-profiler trace; "
            "write one with prof.export_chrome_trace(...) or tensorboard_trace_handler"
        )
    cols: dict[str, list] = {k: [] for k in (
        "kind", "lane", "name", "start_us", "dur_us", "device", "stream", "pid", "tid",
        "correlation", "bytes", "copy_kind", "host_memory")}
    kind_of = _CATEGORY_KIND.get
    for i, ev in enumerate(doc["traceEvents"]):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat = ev.get("cat", "")
        kind = kind_of(cat) if isinstance(cat, str) else None
        if kind is None:
            continue
        ts, dur, name = ev.get("ts"), ev.get("dur"), ev.get("name")
        if not _is_number(ts) or not _is_number(dur) or not isinstance(name, str):
            raise TraceError(
                f"{path}: event #{i} ({ev.get('cat')}) lacks a numeric 'ts'/'dur' or a 'name'; "
                "the trace is damaged: record it again"
            )
        if dur < 0 or not math.isfinite(ts) or not math.isfinite(dur):
            raise TraceError(
                f"{path}: event #{i} ({name[:40]!r}) has a negative or infinite time; "
                "the trace is damaged: record it again"
            )
        args = ev.get("args")
        if not isinstance(args, dict):
            args = {}
        corr = args.get("correlation", -1)
        device = stream = -1
        pid = tid = -1
        copy_kind = host_memory = ""
        nbytes = math.nan
        if kind in ("kernel", "memcpy", "memset", "sync", "gpu_annotation"):
            device = _as_int(args.get("device", ev.get("pid")))
            stream = _as_int(args.get("stream", ev.get("tid")))
            if kind == "kernel" and is_collective_kernel(name):
                kind = "collective"
            if kind == "memcpy":
                m = _MEMCPY.match(name)
                if m:
                    copy_kind = _DIRECTION.get(m.group(1), m.group(1))
                    host_memory = _memory_side(copy_kind, m.group(2), m.group(3))
                nbytes = _as_float(args.get("bytes"))
                lane = f"GPU {device} memcpy"
            elif kind == "memset":
                nbytes = _as_float(args.get("bytes"))
                lane = f"GPU {device} stream {stream}"
            else:
                lane = f"GPU {device} stream {stream}"
        else:
            pid, tid = _as_int(ev.get("pid")), _as_int(ev.get("tid"))
            if kind == "runtime":
                name = _VERSION_SUFFIX.sub("", name)
                lane = f"CUDA API {tid}"
            elif kind == "annotation":
                if name.startswith("gloo:"):
                    kind = "collective"
                    lane = f"CPU {tid}"
                else:
                    lane = f"ranges {tid}"
            else:
                lane = f"CPU {tid}"
        cols["kind"].append(kind)
        cols["lane"].append(lane)
        cols["name"].append(name)
        cols["start_us"].append(ts)
        cols["dur_us"].append(dur)
        cols["device"].append(device)
        cols["stream"].append(stream)
        cols["pid"].append(pid)
        cols["tid"].append(tid)
        cols["correlation"].append(_as_int(corr))
        cols["bytes"].append(nbytes)
        cols["copy_kind"].append(copy_kind)
        cols["host_memory"].append(host_memory)
    origin = float(np.min(cols["start_us"])) if cols["start_us"] else 0.0
    events = build_events(cols)
    dist = doc.get("distributedInfo")
    dist = dist if isinstance(dist, dict) else {}
    if not isinstance(dist.get("rank"), int) or isinstance(dist.get("rank"), bool) or dist["rank"] < 0:
        dist.pop("rank", None)
    if "rank" in dist:
        events["rank"] = dist["rank"]
    props = doc.get("deviceProperties")
    props = props if isinstance(props, list) else []
    metadata = {
        "origin_us": origin,
        "device_names": [str(p.get("name", "")) for p in props if isinstance(p, dict)],
        "distributed": {k: dist[k] for k in ("backend", "rank", "world_size") if k in dist},
        "torch_version": str(doc.get("torch_version", "")),
    }
    return events, metadata


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_float(value: object) -> float:
    return float(value) if _is_number(value) else math.nan  # type: ignore[arg-type]


def _as_int(value: object) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    if isinstance(value, str):
        digits = re.search(r"-?\d{1,18}", value)
        return int(digits.group()) if digits else -1
    return -1
