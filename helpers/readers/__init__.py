"""Readers: turn a file or folder into a :class:`helpers.model.Trace`.

The format is recognised from the content (gzip, SQLite and JSON magic), not from the file name.
"""

from __future__ import annotations

import gzip
import os
import re
import tempfile
import zlib
from pathlib import Path

import pandas as pd

from ..errors import TraceError
from ..model import Trace, assign_steps, build_events, find_steps
from . import kineto, nsys

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite3", ".db", ".sqlite.gz")


def load(path: str | os.PathLike, step_pattern: str | None = None) -> Trace:
    """Read a PyTorch-profiler trace, a folder of per-rank traces, or an Nsight Systems SQLite export.

    ``step_pattern`` is a regular expression for the annotation ranges that mark training steps
    (default: ``ProfilerStep#N``, else ranges named like ``step 3``).
    Raises :class:`TraceError` with a one-line explanation for anything it cannot read.
    """
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file or folder; check the path (relative paths start at {Path.cwd()})")
    if p.is_dir():
        return _load_directory(p, step_pattern)
    events, metadata, fmt = read_file(p)
    steps = find_steps(events, step_pattern)
    assign_steps(events, steps)
    metadata["steps"] = steps
    return Trace(events, str(p), fmt, metadata)


def read_file(p: Path) -> tuple[pd.DataFrame, dict, str]:
    """Read one file into (events, metadata, format name) without step labelling."""
    try:
        with open(p, "rb") as fh:
            head = fh.read(16)
    except OSError as exc:
        raise TraceError(f"{p}: cannot be opened ({exc.strerror}); check its permissions") from None
    if p.suffix in (".nsys-rep", ".qdrep"):
        raise TraceError(
            f"{p}: this is an Nsight Systems report, which cannot be read directly; "
            f"export it first: nsys export --type sqlite -o {p.with_suffix('.sqlite')} {p}"
        )
    if not head:
        raise TraceError(f"{p}: the file is empty; record the trace again (did the profiled run finish?)")
    if head.startswith(SQLITE_MAGIC):
        events, metadata = nsys.read(p)
        return events, metadata, "nsys-sqlite"
    if head.startswith(GZIP_MAGIC):
        raw = _gunzip(p)
        if raw.startswith(SQLITE_MAGIC):  # a gzipped nsys export (.sqlite.gz); sqlite3 needs a file
            with tempfile.TemporaryDirectory() as tmp:
                copy = Path(tmp) / p.name.removesuffix(".gz")
                copy.write_bytes(raw)
                events, metadata = nsys.read(copy)
            return events, metadata, "nsys-sqlite"
    else:
        if p.suffix in (".sqlite", ".sqlite3", ".db"):
            raise TraceError(
                f"{p}: named like an SQLite database but is not one; "
                "make it with: nsys export --type sqlite -o OUT.sqlite REPORT.nsys-rep"
            )
        raw = p.read_bytes()
    if not raw[:256].lstrip()[:1] == b"{":
        raise TraceError(
            f"{p}: not a PyTorch-profiler trace (JSON) or an Nsight Systems SQLite export; "
            "pass a *.json / *.json.gz from torch.profiler or a *.sqlite from nsys export"
        )
    events, metadata = kineto.parse(raw, p)
    return events, metadata, "kineto"


def _gunzip(p: Path) -> bytes:
    try:
        return gzip.decompress(p.read_bytes())
    except (EOFError, OSError, zlib.error) as exc:
        raise TraceError(
            f"{p}: the gzip data is broken ({exc}); the file was probably cut short: copy or record it again"
        ) from None


def _is_trace_file(f: Path) -> bool:
    return f.is_file() and f.name.endswith(_TRACE_SUFFIXES) and not f.name.startswith(".")


def _load_directory(d: Path, step_pattern: str | None) -> Trace:
    files = sorted(f for f in d.iterdir() if _is_trace_file(f))
    if not files:
        raise TraceError(
            f"{d}: the folder holds no trace files (*.json, *.json.gz, *.pt.trace.json.gz, *.sqlite); "
            "point at the folder your profiler wrote into"
        )
    tables, metadata = [], {"files": [str(f) for f in files], "ranks": {}}
    used_ranks: set[int] = set()
    for i, f in enumerate(files):
        events, meta, _ = read_file(f)
        rank = meta.get("distributed", {}).get("rank")
        if rank is None:
            m = _RANK_IN_NAME.search(f.name)
            rank = int(m.group(1)) if m else i
        if rank in used_ranks:
            raise TraceError(
                f"{d}: two files claim rank {rank} (second: {f.name}); keep one trace per rank in the folder"
            )
        used_ranks.add(rank)
        events["rank"] = rank
        # Keep each file's absolute clock so ranks line up; build_events re-zeroes below.
        events["start_us"] += meta.get("origin_us", 0.0)
        tables.append(events)
        metadata["ranks"][rank] = {k: v for k, v in meta.items() if k != "origin_us"}
        for key in ("device_names", "torch_version"):
            metadata.setdefault(key, meta.get(key))
    combined = pd.concat(tables, ignore_index=True)
    events = build_events({c: combined[c].to_numpy() for c in combined.columns if c != "end_us"})
    steps = find_steps(events, step_pattern)
    assign_steps(events, steps)
    metadata["steps"] = steps
    metadata["world_size"] = len(files)
    return Trace(events, str(d), "directory", metadata)


__all__ = ["load", "read_file"]
