"""Nsight Systems SQLite export (``nsys export --type sqlite``) -> events table.

Facts relied on (see the Nsight Systems user guide's SQLite schema reference): times are integer
nanoseconds; names are ids into ``StringIds``; runtime names carry ``_vNNNN`` suffixes;
``globalTid`` packs pid and tid; a table exists only if the capture produced rows of its kind.
The events come out in the same shape, names and lanes as the Kineto reader produces, so that
the same run recorded both ways gives the same metrics.
"""

from __future__ import annotations

import os
import re
import sqlite3
import urllib.parse
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import TraceError
from ..model import (
    COPY_DIRECTION,
    DEFAULT_STEP_PATTERNS,
    MAX_RANK,
    build_events,
    host_memory_of,
    is_collective_kernel,
    is_host_collective,
    lane_name,
)
from ..outputs import open_regular, size_words
from .budget import Budget, charge_bytes, charge_events

ACTIVITY_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
    "OSRT_API",
)
COPY_KIND = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
             10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
#: ENUM_CUDA_MEMCPY_OPER 11-13: unified-memory migrations (the pages move on demand, not by a cudaMemcpy).
UNIFIED_COPY_KINDS = frozenset({11, 12, 13})
#: Copies to or from a CUDA array go the same way as the device copy they stand for.
_ARRAY_DIRECTION = {"HtoA": "H2D", "AtoH": "D2H", "AtoA": "D2D", "AtoD": "D2D", "DtoA": "D2D"}
MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 7: "Unknown"}
SYNC_TYPE = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
NVTX_RANGE_TYPES = (59, 60)
NVTX_MARK = 34
#: An NVTX mark that names the process's rank (helpers.workloads.communication writes "rank 1 of 2").
_RANK_MARK = re.compile(r"^rank[ =:#_-]*(\d+)\b", re.IGNORECASE)
_STEP_NAME = re.compile("|".join(DEFAULT_STEP_PATTERNS), re.IGNORECASE)
_VERSION_SUFFIX = re.compile(r"_v\d+$")


_INT64_MAX = 2**63 - 1

# Columns the reader needs, per table: NOT NULL integers in the nsys schema (``end`` of NVTX marks may be NULL).
_REQUIRED_INT = ("start", "end", "deviceId", "streamId")


def readonly_uri(path: Path) -> str:
    """A ``file:`` URI that opens ``path`` strictly read-only.

    The path is percent-quoted so ``#``, ``?`` and ``%`` in a file name are not URI syntax, and
    ``immutable=1`` stops SQLite from creating ``-wal``/``-shm`` files or taking locks beside it.
    """
    # quoted from the name's bytes: a name that is not UTF-8 (surrogate-escaped) is quoted byte for byte
    return "file:" + urllib.parse.quote(os.fsencode(Path(path).absolute())) + "?mode=ro&immutable=1"


def read(path: Path, max_events: int | None = None, max_bytes: int | None = None, *,
         budget: Budget | None = None, charged: bool = False) -> tuple[pd.DataFrame, dict]:
    """Read an export; over ``max_bytes`` on disk or ``max_events`` activity rows is refused with TraceError.
    ``budget`` counts them against a folder's limits too (``charged``: its bytes were counted as they were
    decompressed)."""
    _refuse_live_wal(path)
    try:  # judged on an open descriptor (a path swapped for a FIFO after a check would block SQLite's open) ...
        fh = open_regular(path, "SQLite export", "export the report to a file: nsys export --type sqlite REPORT")
    except FileNotFoundError:
        raise TraceError(f"{path}: no longer exists (moved or deleted while it was read); check the path") from None
    with fh:
        return _read_open(path, fh.fileno(), max_events, max_bytes, budget, charged)


def _by_descriptor(path: Path, fd: int) -> str:
    """... and SQLite opens the file that descriptor holds, wherever it was moved since (Linux names it
    /proc/self/fd/N, a link to the open file: SQLite follows it to the file's current name); elsewhere the path."""
    proc = Path(f"/proc/self/fd/{fd}")
    return str(proc) if proc.exists() else str(path)


def _read_open(path: Path, fd: int, max_events: int | None, max_bytes: int | None, budget: Budget | None,
               charged: bool) -> tuple[pd.DataFrame, dict]:
    size = os.fstat(fd).st_size
    if max_bytes is not None and size > max_bytes:
        raise TraceError(f"{path}: {size_words(size)}, over the limit of {size_words(max_bytes)}; "
                         "raise it with --max-mb (API: max_bytes=) if the export is really this big")
    if not charged:
        charge_bytes(budget, size)
    try:
        con = sqlite3.connect(readonly_uri(Path(_by_descriptor(path, fd))), uri=True)
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if max_events is not None or budget is not None:
                _refuse_too_many_rows(con, tables, path, max_events, budget)
            return _read(con, tables, path)
        finally:
            con.close()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise TraceError(f"{path}: the database is locked by a program writing it ({exc}); "
                             "wait for nsys export to finish, or read a copy of the file") from None
        raise TraceError(f"{path}: the SQLite database cannot be read ({exc}); export it again with nsys export") from None
    except UnicodeDecodeError:  # SQLite's message quotes the damaged schema, which is not text either
        raise TraceError(f"{path}: the SQLite database cannot be read (its schema is damaged: names that are not "
                         "UTF-8 text); export it again with nsys export") from None
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
        msg = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise TraceError(f"{path}: the SQLite database cannot be read ({msg}); export it again with nsys export") from None


_WAL_HEADER = 32  # bytes of a -wal file's header; anything more is committed pages not yet in the database


def _refuse_live_wal(path: Path) -> None:
    """Read-only (immutable) opening ignores a ``-wal`` file: changes committed there would be silently missed."""
    try:
        wal = os.stat(str(path) + "-wal").st_size
    except OSError:
        return
    if wal > _WAL_HEADER:
        raise TraceError(f"{path}: a {path.name}-wal file beside it holds {wal:,} bytes of changes not yet in the "
                         "database; let the program writing it finish (or run: sqlite3 FILE 'PRAGMA wal_checkpoint'), "
                         "then read it again")


def _refuse_too_many_rows(con: sqlite3.Connection, tables: set[str], path: Path, max_events: int | None,
                          budget: Budget | None = None) -> None:
    """Count the activity rows before reading any, so the events limit holds for exports as for JSON."""
    total = 0
    for t in ACTIVITY_TABLES:
        if t in tables:
            rows = con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]
            total += rows
            if max_events is not None and total > max_events:
                raise TraceError(f"{path}: over {max_events:,} events; raise the limit with --max-events "
                                 "(API: max_events=) if the export is really this big")
            charge_events(budget, rows)


def _read(con: sqlite3.Connection, tables: set[str], path: Path) -> tuple[pd.DataFrame, dict]:
    present = [t for t in ACTIVITY_TABLES if t in tables]
    if not present:
        raise TraceError(
            f"{path}: an SQLite database without Nsight Systems activity tables (no kernels, copies, "
            "CUDA API calls or NVTX ranges); capture with nsys profile --trace=cuda,nvtx and export "
            "with nsys export --type sqlite"
        )
    strings = _strings(con, path) if "StringIds" in tables else {}
    parts: list[pd.DataFrame] = []

    def frame(sql: str) -> pd.DataFrame:
        table = sql.split(" FROM ")[1].split()[0]
        have = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
        # Device tables name their process in globalPid (what maps a multi-process job's GPU work to
        # its rank); older exports may lack it, and a single process does not need it.
        if "deviceId" in sql and "globalPid" in have:
            sql = sql.replace(" FROM ", ", globalPid FROM ", 1)
        wanted = [c.strip() for c in sql[len("SELECT "):sql.index(" FROM ")].split(",")]
        missing = [c for c in wanted if c not in have]
        if missing:
            raise TraceError(f"{path}: table {table} lacks the column {missing[0]!r}; "
                             "the export is damaged or not from nsys: export it again with nsys export --type sqlite")
        df = pd.read_sql_query(sql, con)
        _check_columns(df, table, path)
        return df

    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        k = frame("SELECT start, end, deviceId, streamId, correlationId, demangledName, shortName "
                  "FROM CUPTI_ACTIVITY_KIND_KERNEL")
        names = [strings.get(d) or strings.get(s, "?") for d, s in zip(k["demangledName"], k["shortName"])]
        kinds = ["collective" if is_collective_kernel(n) else "kernel" for n in names]
        parts.append(_device_part(k, names, kinds))
    if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables:
        # nsys's default --cuda-graph-trace=graph records each graph replay as one GPU interval (no
        # per-kernel rows); it is GPU work launched by cudaGraphLaunch, so it counts as a kernel.
        g = frame("SELECT start, end, deviceId, streamId, correlationId, graphId FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
        parts.append(_device_part(g, [f"CUDA Graph {int(i)} (whole graph)" for i in g["graphId"]], ["kernel"] * len(g)))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        m = frame("SELECT start, end, deviceId, streamId, correlationId, bytes, copyKind, srcKind, dstKind "
                  "FROM CUPTI_ACTIVITY_KIND_MEMCPY")
        kinds = [_int(c) for c in m["copyKind"]]
        op = [COPY_KIND.get(c, f"Kind{c}") for c in kinds]
        unified = [c in UNIFIED_COPY_KINDS for c in kinds]
        # A migration's ends are managed memory whatever the export put in srcKind/dstKind (often Unknown).
        src = ["Managed" if u else MEM_KIND.get(_int(s), "Unknown") for s, u in zip(m["srcKind"], unified)]
        dst = ["Managed" if u else MEM_KIND.get(_int(s), "Unknown") for s, u in zip(m["dstKind"], unified)]
        names = [f"Unified Memory Memcpy {o} ({s} -> {d})" if u else f"Memcpy {o} ({s} -> {d})"
                 for o, s, d, u in zip(op, src, dst, unified)]
        part = _device_part(m, names, ["memcpy"] * len(m))
        part["bytes"] = m["bytes"].astype("float64")
        part["copy_kind"] = [COPY_DIRECTION.get(o, _ARRAY_DIRECTION.get(o, "")) for o in op]
        part["host_memory"] = [host_memory_of(COPY_DIRECTION.get(o, ""), s, d) for o, s, d in zip(op, src, dst)]
        parts.append(part)
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        s = frame("SELECT start, end, deviceId, streamId, correlationId, bytes, memKind FROM CUPTI_ACTIVITY_KIND_MEMSET")
        names = [f"Memset ({MEM_KIND.get(_int(k), 'Unknown')})" for k in s["memKind"]]
        part = _device_part(s, names, ["memset"] * len(s))
        part["bytes"] = s["bytes"].astype("float64")
        parts.append(part)
    if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in tables:
        y = frame("SELECT start, end, deviceId, streamId, correlationId, syncType FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
        names = [SYNC_TYPE.get(_int(t), "Sync") for t in y["syncType"]]
        parts.append(_device_part(y, names, ["sync"] * len(y)))
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        r = _one_row_per_call(frame("SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME"))
        names = [_VERSION_SUFFIX.sub("", strings.get(n, "?")) for n in r["nameId"]]
        parts.append(_host_part(r, names, "runtime"))
    if "NVTX_EVENTS" in tables:
        n = frame("SELECT start, end, eventType, text, textId, globalTid FROM NVTX_EVENTS "
                  f"WHERE eventType IN {NVTX_RANGE_TYPES} AND end IS NOT NULL")
        names = [t if isinstance(t, str) else strings.get(_int(i), "") for t, i in zip(n["text"], n["textId"])]
        n["correlationId"] = -1
        # gloo collectives marked in NVTX are named as the PyTorch profiler names gloo's work
        kinds = ["collective" if is_host_collective(x) else "annotation" for x in names]
        parts.append(_host_part(n, names, kinds))
    if "OSRT_API" in tables:
        o = frame("SELECT start, end, globalTid, nameId FROM OSRT_API")
        o["correlationId"] = -1
        parts.append(_host_part(o, [strings.get(_int(i), "?") for i in o["nameId"]], "osrt"))
    parts = [p for p in parts if not p.empty]
    if not parts:
        raise TraceError(f"{path}: the Nsight Systems export holds no events; was the capture range empty?")
    table = pd.concat(parts, ignore_index=True)
    if (table["end"] < table["start"]).any():
        raise TraceError(f"{path}: an event ends before it starts; the export is damaged: export it again")
    ranks, processes = _ranks_of_processes(table, _rank_marks(con, tables, strings) if "NVTX_EVENTS" in tables else {})
    if processes:
        # GPU work of an export without globalPid cannot be placed: it stays (as rank 0's)
        table = table[table["proc"].isin([*ranks, -1])].reset_index(drop=True)
    with np.errstate(over="ignore"):  # of the rows kept: the durations go beside the table's own columns
        dur_ns = table["end"].to_numpy(dtype="int64") - table["start"].to_numpy(dtype="int64")
    if (dur_ns < 0).any():  # end >= start, so a negative difference wrapped past 64 bits
        raise TraceError(f"{path}: an event lasts longer than 64-bit nanoseconds can count (292 years); the export's "
                         "times are damaged: export it again")
    table["lane"] = [lane_name(*key) for key in zip(table["kind"], table["device"], table["stream"], table["tid"])]
    origin_us = float(table["start"].min()) / 1000.0
    events = build_events({
        "rank": table["proc"].map(ranks).fillna(0).to_numpy(dtype="int64") if processes else None,
        "kind": table["kind"].to_numpy(), "lane": table["lane"].to_numpy(), "name": table["name"].to_numpy(),
        "start_us": table["start"].to_numpy(dtype="float64") / 1000.0,
        "dur_us": dur_ns.astype("float64") / 1000.0,
        "device": table["device"].to_numpy(), "stream": table["stream"].to_numpy(),
        "pid": table["pid"].to_numpy(), "tid": table["tid"].to_numpy(),
        "correlation": table["correlation"].to_numpy(), "bytes": table["bytes"].to_numpy(),
        "copy_kind": table["copy_kind"].to_numpy(), "host_memory": table["host_memory"].to_numpy(),
    })
    device_names: list[str] = []
    if "TARGET_INFO_GPU" in tables:
        try:
            device_names = [r[0] if isinstance(r[0], str) else "" for r in con.execute("SELECT name FROM TARGET_INFO_GPU ORDER BY id")]
        except sqlite3.OperationalError:  # an odd TARGET_INFO_GPU only costs the device name
            device_names = []
    distributed = {"world_size": len(ranks), "processes": processes} if processes else {}
    return events, {"origin_us": origin_us, "device_names": device_names, "distributed": distributed, "torch_version": ""}


def _one_row_per_call(r: pd.DataFrame) -> pd.DataFrame:
    """Older nsys exports store some runtime calls twice (two eventClass values, one correlation id):
    keep one row per call, the longer, so syncs and blocked time are not counted twice."""
    corr = r["correlationId"]
    has_id = corr.notna() & (corr > 0)  # 0/NULL: a call that launched nothing, never a duplicate
    if not has_id.any():
        return r
    keyed = r[has_id]
    dup = keyed.duplicated(["globalTid", "correlationId"], keep=False)
    if not dup.any():
        return r
    longest = (keyed[dup].assign(_dur=keyed["end"] - keyed["start"])
               .sort_values("_dur", ascending=False, kind="stable")
               .drop_duplicates(["globalTid", "correlationId"]).drop(columns="_dur"))
    return pd.concat([r[~has_id], keyed[~dup], longest]).sort_index()


def _rank_marks(con: sqlite3.Connection, tables: set[str], strings: dict[int, str]) -> dict[int, int]:
    """pid -> rank, from NVTX marks named like ``rank 1`` (one per process)."""
    have = {r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
    if not {"text", "textId", "globalTid", "eventType"} <= have:
        return {}
    marks: dict[int, int] = {}
    for text, text_id, gtid in con.execute(f"SELECT text, textId, globalTid FROM NVTX_EVENTS WHERE eventType = {NVTX_MARK}"):
        name = text if isinstance(text, str) else strings.get(_int(text_id), "")
        m = _RANK_MARK.match(name)
        if m and type(gtid) is int and 0 <= gtid <= _INT64_MAX and len(m.group(1)) <= 10 and int(m.group(1)) <= MAX_RANK:
            marks.setdefault((gtid >> 24) & 0xFFFFFF, int(m.group(1)))
    return marks


def _ranks_of_processes(table: pd.DataFrame, marks: dict[int, int]) -> tuple[dict[int, int], list[dict]]:
    """pid -> rank when the export holds several training processes (a multi-process job), else ({}, []).

    Training processes are the ones with step ranges, or, when no process has them, the ones that
    use the GPU (CUDA calls or GPU work). Their ranks come from ``rank N`` NVTX marks when every one
    has its own, else from pid order (launchers start their ranks in order). The other processes
    (a launcher, DataLoader workers, compile workers) are left out: they belong to no one rank.
    """
    host = table["device"] < 0
    stepped = table.loc[host & (table["kind"] == "annotation") & table["name"].str.contains(_STEP_NAME), "proc"]
    trainers = sorted(set(stepped))
    if not trainers:
        gpu = ~host | (table["kind"] == "runtime")
        trainers = sorted(set(table.loc[gpu & (table["proc"] >= 0), "proc"]))
    if len(trainers) < 2:
        return {}, []
    marked = [marks.get(p) for p in trainers]
    if None not in marked and len(set(marked)) == len(marked):
        ranks = dict(zip(trainers, marked, strict=True))
        how = "NVTX mark"
    else:
        ranks = {p: r for r, p in enumerate(trainers)}
        how = "pid order"
    processes = [{"pid": int(p), "rank": int(r), "rank_from": how} for p, r in sorted(ranks.items(), key=lambda x: x[1])]
    return ranks, processes


def _strings(con: sqlite3.Connection, path: Path) -> dict[int, str]:
    strings: dict[int, str] = {}
    for key, value in con.execute("SELECT id, value FROM StringIds"):
        if type(key) is not int or not isinstance(value, str):
            raise TraceError(f"{path}: StringIds holds a row with id {str(key)[:20]!r} and value {str(value)[:20]!r}, "
                             "not an integer id and a text; the export is damaged: export it again")
        strings[key] = value
    return strings


def _check_columns(df: pd.DataFrame, table: str, path: Path) -> None:
    """Refuse wrong types, values beyond int64 and NULLs (where the schema says NOT NULL) at the boundary."""
    for col in df.columns:
        if col == "text":  # NVTX text: a string or NULL (then textId names it)
            continue
        values = df[col]
        kind = values.dtype.kind
        if kind in "iu":
            if kind == "u" and len(values) and int(values.max()) > _INT64_MAX:
                _bad_value(path, table, col, int(values.idxmax()), values.max())
            continue
        nullable = col not in _REQUIRED_INT and col not in ("globalTid", "copyKind", "syncType", "bytes", "graphId")
        if kind == "f":
            arr = values.to_numpy()
            # 2.0**63 itself (a REAL that would wrap to -2^63) is out: the int64 bound compared as a float is 2^63
            bad = (np.isnan(arr) & (not nullable)) | (~np.isnan(arr) & ((arr != np.round(arr)) | (np.abs(arr) >= 2.0**63)))
        else:
            bad = np.array([not (type(v) is int or (v is None and nullable)) for v in values], dtype=bool)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            _bad_value(path, table, col, i, values.iloc[i])


def _bad_value(path: Path, table: str, col: str, row: int, value: object) -> None:
    value = value.item() if isinstance(value, np.generic) else value
    shown = "NULL" if value is None or (isinstance(value, float) and value != value) else repr(value)[:24]
    raise TraceError(f"{path}: {table}.{col} holds {shown} in row {row + 1} where the schema requires a "
                     "64-bit integer; the export is damaged: export it again with nsys export --type sqlite")


def _int(value: object, default: int = -1) -> int:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return default


def _base(df: pd.DataFrame, names: list[str], kinds: list[str] | str) -> pd.DataFrame:
    n = len(df)
    return pd.DataFrame({
        "start": df["start"].to_numpy(dtype="int64"), "end": df["end"].to_numpy(dtype="int64"),
        "kind": kinds if isinstance(kinds, list) else [kinds] * n, "name": names,
        "device": -1, "stream": -1, "pid": -1, "tid": -1,
        "correlation": df["correlationId"].fillna(-1).to_numpy(dtype="int64") if n else np.empty(0, "int64"),
        "bytes": np.nan, "copy_kind": "", "host_memory": "",
        "proc": -1,  # the process an event belongs to, device events included (not a column of the model)
    })


def _device_part(df: pd.DataFrame, names: list[str], kinds: list[str]) -> pd.DataFrame:
    part = _base(df, names, kinds)
    part["device"] = df["deviceId"].to_numpy(dtype="int64")
    part["stream"] = df["streamId"].to_numpy(dtype="int64")
    if "globalPid" in df:
        gpid = df["globalPid"].fillna(-1).to_numpy(dtype="int64")
        part["proc"] = np.where(gpid >= 0, (gpid >> 24) & 0xFFFFFF, -1)
    return part


def _host_part(df: pd.DataFrame, names: list[str], kind: list[str] | str) -> pd.DataFrame:
    gtid = df["globalTid"].fillna(0).to_numpy(dtype="int64")
    tids = gtid & 0xFFFFFF
    part = _base(df, names, kind)
    part["pid"] = (gtid >> 24) & 0xFFFFFF
    part["tid"] = tids
    part["proc"] = part["pid"]
    return part
