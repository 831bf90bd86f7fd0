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
from ..model import COPY_DIRECTION, build_events, host_memory_of, is_collective_kernel, lane_name

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
_MEMCPY = re.compile(r"Memcpy (\w+) \((\w+) -> (\w+)\)")
_VERSION_SUFFIX = re.compile(r"_v\d+$")


def parse(raw: bytes, path: Path, max_events: int | None = None) -> tuple[pd.DataFrame, dict]:
    """Parse Chrome-trace JSON bytes; more than ``max_events`` trace events is refused with TraceError."""
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
    raw_events = doc["traceEvents"]
    if max_events is not None and len(raw_events) > max_events:
        raise TraceError(f"{path}: {len(raw_events):,} events, over the limit of {max_events:,}; "
                         "profile fewer steps, or raise the limit with --max-events (API: max_events=)")
    kind_of = _CATEGORY_KIND
    evs = [e for e in raw_events
           if type(e) is dict and e.get("ph") == "X" and type(c := e.get("cat")) is str and c in kind_of]
    names = [e.get("name") for e in evs]
    ts = _times(evs, "ts", path)
    dur = _times(evs, "dur", path)
    bad_name = [i for i, n in enumerate(names) if type(n) is not str]
    if bad_name:
        _damaged(path, raw_events, evs[bad_name[0]], "lacks a 'name'")
    if (dur < 0).any() or not np.isfinite(ts).all() or not np.isfinite(dur).all():
        i = int(np.flatnonzero((dur < 0) | ~np.isfinite(ts) | ~np.isfinite(dur))[0])
        _damaged(path, raw_events, evs[i], "has a negative or infinite time")
    kinds = np.array([kind_of[e["cat"]] for e in evs], dtype=object)
    args = [a if type(a := e.get("args")) is dict else {} for e in evs]
    on_device = np.isin(kinds, ("kernel", "memcpy", "memset", "sync", "gpu_annotation"))
    n = len(evs)
    device = np.full(n, -1, dtype=np.int64)
    stream = np.full(n, -1, dtype=np.int64)
    pid = np.full(n, -1, dtype=np.int64)
    tid = np.full(n, -1, dtype=np.int64)
    dev_idx = np.flatnonzero(on_device)
    host_idx = np.flatnonzero(~on_device)
    device[dev_idx] = _ints([args[i].get("device", evs[i].get("pid")) for i in dev_idx], path, "args.device")
    stream[dev_idx] = _ints([args[i].get("stream", evs[i].get("tid")) for i in dev_idx], path, "args.stream")
    pid[host_idx] = _ints([evs[i].get("pid") for i in host_idx], path, "pid")
    tid[host_idx] = _ints([evs[i].get("tid") for i in host_idx], path, "tid")
    correlation = _ints([a.get("correlation", -1) for a in args], path, "args.correlation")
    nbytes = np.full(n, math.nan)
    copy_kind = np.full(n, "", dtype=object)
    host_memory = np.full(n, "", dtype=object)
    names_arr = np.array(names, dtype=object)
    # Work per distinct name, not per event: traces repeat a few hundred names many times.
    for kind, fix in (("kernel", _kernel_kind), ("runtime", _runtime_name), ("annotation", _annotation_kind)):
        idx = np.flatnonzero(kinds == kind)
        if idx.size:
            uniq, inv = np.unique(names_arr[idx], return_inverse=True)
            mapped = [fix(u) for u in uniq]
            if kind == "runtime":
                names_arr[idx] = np.array(mapped, dtype=object)[inv]
            else:
                kinds[idx] = np.array(mapped, dtype=object)[inv]
    for i in np.flatnonzero((kinds == "memcpy") | (kinds == "memset")):
        nbytes[i] = _as_float(args[i].get("bytes"))
    mc = np.flatnonzero(kinds == "memcpy")
    if mc.size:
        uniq, inv = np.unique(names_arr[mc], return_inverse=True)
        parsed = [_memcpy_kind(u) for u in uniq]
        copy_kind[mc] = np.array([p[0] for p in parsed], dtype=object)[inv]
        host_memory[mc] = np.array([p[1] for p in parsed], dtype=object)[inv]
    lanes = _lanes(kinds, device, stream, tid)
    origin = float(ts.min()) if n else 0.0
    events = build_events({
        "kind": kinds, "lane": lanes, "name": names_arr, "start_us": ts, "dur_us": dur, "device": device,
        "stream": stream, "pid": pid, "tid": tid, "correlation": correlation, "bytes": nbytes,
        "copy_kind": copy_kind, "host_memory": host_memory,
    })
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


def _damaged(path: Path, raw_events: list, ev: dict, problem: str) -> None:
    index = next(i for i, e in enumerate(raw_events) if e is ev)
    raise TraceError(f"{path}: event #{index} ({str(ev.get('name'))[:40]!r}) {problem}; the trace is damaged: record it again")


def _numeric_column(values: list) -> np.ndarray | None:
    """``values`` as a 1-D numpy array when numpy can infer one, else None."""
    if not values:
        return np.zeros(0, dtype=np.int64)
    try:
        arr = np.array(values)
    except (ValueError, TypeError, OverflowError):
        return None
    return arr if arr.ndim == 1 else None


def _times(evs: list[dict], key: str, path: Path) -> np.ndarray:
    values = [e.get(key) for e in evs]
    arr = _numeric_column(values)
    if arr is not None and arr.dtype.kind in "fiu":  # numpy inferred a numeric column: the common, fast case
        return arr.astype(np.float64)
    bad = next((e for e, v in zip(evs, values) if type(v) not in (int, float)), evs[0])
    raise TraceError(
        f"{path}: an event ({str(bad.get('name'))[:40]!r}, {bad.get('cat')}) lacks a numeric {key!r}; "
        "the trace is damaged: record it again"
    )


def _ints(values: list, path: Path, field: str) -> np.ndarray:
    arr = _numeric_column(values)
    if arr is not None and arr.dtype.kind in "iu" and arr.dtype.itemsize <= 8 and (arr.dtype.kind == "i" or arr.max(initial=0) < 2**63):
        return arr.astype(np.int64)
    ints = [_as_int(v) for v in values]
    for v in ints:
        if not -(2**63) <= v < 2**63:
            raise TraceError(f"{path}: an event's {field} is {str(v)[:24]}, beyond 64-bit integers; "
                             "the trace is damaged: record it again")
    return np.array(ints, dtype=np.int64)


def _kernel_kind(name: str) -> str:
    return "collective" if is_collective_kernel(name) else "kernel"


def _runtime_name(name: str) -> str:
    return _VERSION_SUFFIX.sub("", name)


def _annotation_kind(name: str) -> str:
    return "collective" if name.startswith("gloo:") else "annotation"


def _memcpy_kind(name: str) -> tuple[str, str]:
    m = _MEMCPY.match(name)
    if not m:
        return "", ""
    direction = COPY_DIRECTION.get(m.group(1), m.group(1))
    return direction, host_memory_of(direction, m.group(2), m.group(3))


def _lanes(kinds: np.ndarray, device: np.ndarray, stream: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Lane names, built once per distinct (kind, device, stream, thread)."""
    cache: dict[tuple, str] = {}
    out = np.empty(len(kinds), dtype=object)
    for i, key in enumerate(zip(kinds.tolist(), device.tolist(), stream.tolist(), tid.tolist())):
        lane = cache.get(key)
        if lane is None:
            lane = cache[key] = lane_name(*key)
        out[i] = lane
    return out


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
