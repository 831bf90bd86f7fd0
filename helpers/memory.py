"""Memory as tables: the allocations a profiler trace recorded, and a CUDA memory snapshot.

Two sources, read the same way as the rest of the toolkit (documented tables, nothing computed for you):

- **A PyTorch-profiler trace made with** ``profile_memory=True`` (``helpers.capture(..., profile_memory=True)``):
  every allocation and free of the profiled steps, on the CPU as on a GPU (Kineto's ``[memory]`` events).
  :func:`allocations` returns them in time order; ``bytes`` is positive for an allocation and negative for a free,
  so the memory allocated over time is a running sum. This is the one memory record a CPU has: PyTorch's CPU
  allocator keeps no statistics and no snapshot.
- **A CUDA memory snapshot** (``torch.cuda.memory._record_memory_history()`` then
  ``torch.cuda.memory._dump_snapshot(path)``; what https://pytorch.org/memory_viz draws): the caching allocator's
  segments (memory it holds from CUDA: *reserved*) with their blocks (*allocated* when a tensor lives there), and
  the history of every allocation and free with the Python stack that made it. :func:`load_snapshot` reads one
  without running code from it; :func:`segments`, :func:`blocks`, :func:`snapshot_events` and :func:`phases` turn it
  into tables.
"""

from __future__ import annotations

import gzip
import io
import pickle
import re
from pathlib import Path
from typing import Any

import pandas as pd

from .errors import TraceError
from .outputs import open_regular

#: Largest snapshot read (after decompression): the course's is 1.5 MB; a long history of a big job tens of MB.
SNAPSHOT_LIMIT = 512 << 20
#: Largest profiler trace whose memory events are read (after decompression): a few profiled steps are megabytes.
ALLOCATIONS_LIMIT = 1 << 30


class _DataOnly(pickle.Unpickler):
    """A snapshot is dicts, lists, strings and numbers: refuse anything that would import or call code."""

    def find_class(self, module: str, name: str):  # noqa: ANN201 - pickle's signature
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: a memory snapshot holds only plain data")


def load_snapshot(path: str | Path) -> dict:
    """A memory snapshot (``.pickle`` or ``.pickle.gz``) as a dict, read as plain data only (a pickle that would
    import or run code is refused, so a snapshot from elsewhere is safe to open); a file that is not one is a
    :class:`TraceError` in one line."""
    path = Path(path)
    try:
        with open_regular(path, "memory snapshot") as fh:  # a pipe or device there cannot block or feed it forever
            head = fh.read(2)
            fh.seek(0)
            raw = gzip.GzipFile(fileobj=fh).read(SNAPSHOT_LIMIT + 1) if head == b"\x1f\x8b" else fh.read(SNAPSHOT_LIMIT + 1)
    except (OSError, EOFError) as exc:
        raise TraceError(f"{path}: cannot read it as a memory snapshot ({type(exc).__name__}: {exc})") from None
    if len(raw) > SNAPSHOT_LIMIT:
        raise TraceError(f"{path}: over {SNAPSHOT_LIMIT >> 20} MiB unpacked; not read")
    try:
        snap = _DataOnly(io.BytesIO(raw)).load()
    except Exception as exc:  # noqa: BLE001 - whatever the bytes were, the answer is one line
        raise TraceError(f"{path}: not a memory snapshot ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not isinstance(snap, dict) or not isinstance(snap.get("segments"), list):
        raise TraceError(f"{path}: not a memory snapshot (no 'segments' list; torch.cuda.memory._dump_snapshot writes one)")
    return snap


def segments(snap: dict) -> pd.DataFrame:
    """One row per segment the caching allocator holds from CUDA: ``address, total_size, allocated_size, stream,
    segment_type`` (``large``/``small`` pool), ``blocks``. The sum of ``total_size`` is what
    ``torch.cuda.memory_reserved()`` said when the snapshot was taken."""
    rows = [{"address": int(s.get("address", 0)), "total_size": int(s.get("total_size", 0)),
             "allocated_size": int(s.get("allocated_size", 0)), "stream": int(s.get("stream", 0)),
             "segment_type": str(s.get("segment_type", "")), "blocks": len(s.get("blocks", []))}
            for s in snap.get("segments", [])]
    return pd.DataFrame(rows, columns=["address", "total_size", "allocated_size", "stream", "segment_type", "blocks"])


def blocks(snap: dict) -> pd.DataFrame:
    """One row per block of every segment, in address order within it: ``segment`` (its index in
    :func:`segments`), ``address, size, state`` (``active_allocated``: a tensor lives there; ``inactive``: cached,
    free for reuse; ``active_pending_free``: freed, waiting for a stream), ``offset`` from the segment's start."""
    rows = []
    for i, s in enumerate(snap.get("segments", [])):
        base = int(s.get("address", 0))
        for b in s.get("blocks", []):
            rows.append({"segment": i, "address": int(b.get("address", 0)), "size": int(b.get("size", 0)),
                         "state": str(b.get("state", "")), "offset": int(b.get("address", 0)) - base})
    return pd.DataFrame(rows, columns=["segment", "address", "size", "state", "offset"])


def _frame_text(frames: list[dict], skip: tuple[str, ...]) -> str:
    """The innermost Python frame of a stack (``file.py:line function``), skipping files named in ``skip``."""
    for f in frames or []:
        filename = str(f.get("filename", ""))
        if filename.endswith(".py") and not any(s in filename for s in skip):
            return f"{Path(filename).name}:{f.get('line', 0)} {f.get('name', '')}"
    return ""


#: The ``frame`` of an allocation made by autograd's engine thread (backward's outputs: the gradients), which has
#: no Python frame above it.
AUTOGRAD_ENGINE = "<autograd engine: backward>"


def snapshot_events(snap: dict, device: int = 0) -> pd.DataFrame:
    """The allocator's history on ``device``, oldest first: ``time_us`` (from the first event), ``action``
    (``alloc``, ``free_requested``, ``free_completed``, ``segment_alloc``, ``segment_free``, ``oom``, ...),
    ``addr, size, stream``, and ``frame``: the innermost Python frame that asked (``file.py:line function``;
    :data:`AUTOGRAD_ENGINE` for backward's allocations, which have none; empty when the snapshot kept no stack),
    and ``stack``: every Python frame, innermost first. A tensor's memory is taken at ``alloc`` and can be used
    again from its ``free_completed`` (``free_requested`` is when the program let go of it; the two differ
    when another stream still used it)."""
    traces = snap.get("device_traces") or []
    events = traces[device] if 0 <= device < len(traces) else []
    rows = []
    for e in events:
        frames = e.get("frames") or []
        py = [f"{Path(str(f.get('filename', ''))).name}:{f.get('line', 0)} {f.get('name', '')}"
              for f in frames if str(f.get("filename", "")).endswith(".py")]
        if py:
            frame = py[0]
        elif any("autograd::Engine" in str(f.get("name", "")) for f in frames):
            frame = AUTOGRAD_ENGINE  # backward runs on autograd's own thread: no Python frame above it
        else:
            frame = ""
        rows.append({"time_us": float(e.get("time_us", 0)), "action": str(e.get("action", "")),
                     "addr": int(e.get("addr", 0) or 0), "size": int(e.get("size", 0) or 0),
                     "stream": int(e.get("stream", 0) or 0), "frame": frame, "stack": tuple(py)})
    df = pd.DataFrame(rows, columns=["time_us", "action", "addr", "size", "stream", "frame", "stack"])
    if len(df):
        df["time_us"] -= df["time_us"].iloc[0]
    return df


def phases(snap: dict) -> pd.DataFrame:
    """The ranges the program marked while the history was recorded (``record_function``/NVTX names the snapshot
    kept as ``external_annotations``): ``name, start_us, end_us`` on :func:`snapshot_events`' clock."""
    traces = snap.get("device_traces") or [[]]
    t0 = float(traces[0][0]["time_us"]) if traces and traces[0] else 0.0
    open_at: dict[str, float] = {}
    rows = []
    for a in snap.get("external_annotations") or []:
        name, t = str(a.get("name", "")), float(a.get("time_us", 0)) - t0
        if a.get("stage") == "START":
            open_at[name] = t
        elif a.get("stage") == "END" and name in open_at:
            rows.append({"name": name, "start_us": open_at.pop(name), "end_us": t})
    return pd.DataFrame(rows, columns=["name", "start_us", "end_us"]).sort_values("start_us").reset_index(drop=True)


def record_snapshot(fn: Any, steps: int = 2, warmup: int = 1, max_entries: int = 100_000) -> dict:
    """Run ``fn(i)`` ``warmup`` times, then ``steps`` times while the CUDA allocator records its history, and return
    the snapshot (``torch.cuda.memory._snapshot()``, what ``_dump_snapshot`` would write). GPU only."""
    import torch

    from .errors import NoGPUError

    if not torch.cuda.is_available():
        raise NoGPUError("a CUDA memory snapshot needs a CUDA GPU; the CPU track reads the recorded one")
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=max_entries)
    try:
        for i in range(warmup, warmup + steps):
            fn(i)
        torch.cuda.synchronize()
        return torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)


def figure(allocated: pd.Series, phase_table: pd.DataFrame | None = None, title: str = "memory allocated"):
    """A memory timeline: ``allocated`` (bytes, indexed by microseconds) as a step line in MiB, with the phases
    of ``phase_table`` (:func:`phases`) shaded behind it. Returns a matplotlib Figure."""
    from .lanes import PHASE_COLORS, _plt

    plt = _plt()
    fig, ax = plt.subplots(figsize=(9.5, 3.2), dpi=100)
    if phase_table is not None and len(phase_table):
        top = phase_table[~phase_table["name"].str.contains("#")]  # Optimizer.step#... sits inside "optimizer"
        seen: set[str] = set()
        for _, p in top.iterrows():
            colour = PHASE_COLORS.get(p["name"], "#dddddd")
            ax.axvspan(p["start_us"] / 1e3, p["end_us"] / 1e3, color=colour, alpha=0.25,
                       label=None if p["name"] in seen else p["name"])
            seen.add(p["name"])
    ax.step(allocated.index.to_numpy() / 1e3, allocated.to_numpy() / 2**20, where="post", color="0.15", lw=1.4)
    ax.set_xlabel("ms from the first recorded event")
    ax.set_ylabel("MiB allocated (above the start)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if phase_table is not None and len(phase_table):
        ax.legend(loc="upper left", fontsize=8, ncols=4)
    fig.tight_layout()
    return fig


# --- profiler traces made with profile_memory=True ------------------------------------------------------
def allocations(trace: Any) -> pd.DataFrame:
    """Every allocation and free a ``profile_memory=True`` trace recorded, in time order: ``time_us`` (on the trace's
    own clock, as ``trace.events``' ``start_us``), ``bytes`` (+ allocated, - freed), ``device`` (-1: host memory;
    0, 1, ...: that GPU), ``addr``, and ``total_allocated``: the allocator's own running total on that device
    after the event. ``trace`` is a :class:`helpers.model.Trace` (read from its file) or a path to the trace.
    A trace recorded without ``profile_memory`` has none: the table is empty."""
    source = getattr(trace, "source", None) or trace
    path = Path(str(source))
    try:
        with open_regular(path, "trace") as fh:
            head = fh.read(2)
            fh.seek(0)
            raw = gzip.GzipFile(fileobj=fh).read(ALLOCATIONS_LIMIT + 1) if head == b"\x1f\x8b" else fh.read(ALLOCATIONS_LIMIT + 1)
        if len(raw) > ALLOCATIONS_LIMIT:
            raise TraceError(f"{path}: over {ALLOCATIONS_LIMIT >> 20} MiB unpacked; its memory events are not read")
        import orjson

        doc = orjson.loads(raw)
    except (OSError, EOFError, ValueError, TypeError) as exc:
        raise TraceError(f"{path}: cannot read its memory events ({type(exc).__name__})") from None
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    origin = getattr(trace, "metadata", {}).get("origin_us") if hasattr(trace, "metadata") else None
    if not isinstance(origin, (int, float)):  # a path: the reader's origin, the first timed event's start
        starts = [e["ts"] for e in events if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
        origin = min(starts) if starts else 0.0
    rows = []
    for e in events:
        if not (isinstance(e, dict) and e.get("name") == "[memory]" and isinstance(e.get("args"), dict)):
            continue
        a = e["args"]
        rows.append({"time_us": float(e.get("ts", 0)) - origin, "bytes": int(a.get("Bytes", 0)),
                     "device": int(a.get("Device Id", -1)) if int(a.get("Device Type", 0)) != 0 else -1,
                     "addr": int(a.get("Addr", 0)), "total_allocated": int(a.get("Total Allocated", 0))})
    df = pd.DataFrame(rows, columns=["time_us", "bytes", "device", "addr", "total_allocated"])
    return df.sort_values("time_us", kind="stable").reset_index(drop=True)


# --- an out-of-memory error, as PyTorch words it ------------------------------------------------------
_UNIT = {"B": 1, "bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE = r"([\d.]+)\s*(bytes|B|KiB|MiB|GiB|TiB)"


def _bytes(number: str, unit: str) -> int:
    return int(round(float(number) * _UNIT[unit]))


def parse_oom(text: str) -> dict | None:
    """The figures of a CUDA out-of-memory message, in bytes, or None when ``text`` holds none.

    Reads both wordings PyTorch has used: since 2.1 (``Tried to allocate X. GPU 0 has a total capacity of C of
    which F is free. [Process P has M memory in use.] [Including non-PyTorch memory, this process has T memory in
    use.] Of the allocated memory A is allocated by PyTorch, [with G allocated in private pools ...,] and R is
    reserved by PyTorch but unallocated.``) and before (``Tried to allocate X (GPU 0; C total capacity; A already
    allocated; F free; R reserved in total by PyTorch)``). Returns ``requested, capacity, free, allocated,
    reserved_unallocated, this_process`` (None when the message does not say: before 2.1, or when another line
    names the process by number) and ``processes``: ``{pid: bytes}`` of the processes the message lists.
    """
    t = " ".join(str(text).split())
    req = re.search(r"Tried to allocate " + _SIZE, t)
    if not req:
        return None
    new = re.search(r"total capac\w* of " + _SIZE + r" of which " + _SIZE + r" is free", t)
    if new:
        alloc = re.search(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch", t)
        unalloc = re.search(_SIZE + r" is reserved by PyTorch but unallocated", t)
        mine = re.search(r"this process has " + _SIZE + r" memory in use", t)
        if not (alloc and unalloc):
            return None
        out = {"requested": _bytes(*req.groups()), "capacity": _bytes(*new.groups()[:2]),
               "free": _bytes(*new.groups()[2:]), "allocated": _bytes(*alloc.groups()),
               "reserved_unallocated": _bytes(*unalloc.groups()),
               "this_process": _bytes(*mine.groups()) if mine else None}
    else:
        old = re.search(r"\(GPU \d+; " + _SIZE + r" total capacity; " + _SIZE + r" already allocated; " + _SIZE
                        + r" free; " + _SIZE + r" reserved in total by PyTorch\)", t)
        if not old:
            return None
        g = old.groups()
        reserved = _bytes(*g[6:8])
        out = {"requested": _bytes(*req.groups()), "capacity": _bytes(*g[0:2]), "free": _bytes(*g[4:6]),
               "allocated": _bytes(*g[2:4]), "reserved_unallocated": max(reserved - _bytes(*g[2:4]), 0),
               "this_process": None}
    out["processes"] = {int(pid): _bytes(n, u) for pid, n, u in re.findall(r"Process (\d+) has " + _SIZE + r" memory in use", t)}
    return out
