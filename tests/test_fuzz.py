"""Fuzzing the readers: whatever the bytes, the only exception is TraceError."""

import json
import sqlite3

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import helpers
from helpers import TraceError
from helpers.readers.nsys import ACTIVITY_TABLES

values = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.integers(-(2**80), 2**80) | st.floats(allow_nan=True) | st.text(max_size=8),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                      max_leaves=6)
event = st.fixed_dictionaries({}, optional={
    "ph": st.sampled_from(["X", "i", "s", "f", "M"]) | values,
    "cat": st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cpu_op", "user_annotation",
                            "gpu_user_annotation", "cuda_sync", "python_function"]) | values,
    "name": st.sampled_from(["k", "ProfilerStep#1", "Memcpy HtoD (Pageable -> Device)", "cudaStreamSynchronize",
                             "gloo:all_reduce", "ncclDevKernel_AllReduce"]) | values,
    "ts": st.floats(allow_nan=True, allow_infinity=True) | values,
    "dur": st.floats(allow_nan=True, allow_infinity=True) | values,
    "pid": values, "tid": values,
    "args": st.fixed_dictionaries({}, optional={"device": values, "stream": values, "correlation": values, "bytes": values}) | values,
})


def _load_ok_or_trace_error(path):
    try:
        t = helpers.load(path)
    except TraceError:
        return
    helpers.diagnose(t)  # whatever loads must also analyse


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(event, max_size=8), st.dictionaries(st.sampled_from(["distributedInfo", "deviceProperties"]), values, max_size=2))
def test_json_events(tmp_path_factory, events, extra):
    p = tmp_path_factory.mktemp("fz") / "t.json"
    p.write_text(json.dumps({"traceEvents": events, **extra}, allow_nan=True))
    _load_ok_or_trace_error(p)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=64), st.sampled_from(["t.json", "t.json.gz", "t.sqlite", "t.bin"]))
def test_random_bytes(tmp_path_factory, data, name):
    p = tmp_path_factory.mktemp("fz") / name
    p.write_bytes(data)
    _load_ok_or_trace_error(p)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(min_size=1, max_size=40))
def test_sqlite_header_then_garbage(tmp_path_factory, tail):
    p = tmp_path_factory.mktemp("fz") / "t.sqlite"
    p.write_bytes(b"SQLite format 3\x00" + tail)
    _load_ok_or_trace_error(p)


# SQLite cells of any type, including the ones the nsys DDL forbids (NULL where NOT NULL, text, reals).
cell = st.none() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=True) | st.text(max_size=6) | st.binary(max_size=4)
_COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "deviceId", "streamId", "correlationId", "demangledName", "shortName"],
    "CUPTI_ACTIVITY_KIND_MEMCPY": ["start", "end", "deviceId", "streamId", "correlationId", "bytes", "copyKind",
                                   "srcKind", "dstKind"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "globalTid", "correlationId", "nameId"],
    "NVTX_EVENTS": ["start", "end", "eventType", "text", "textId", "globalTid"],
    "StringIds": ["id", "value"],
    "TARGET_INFO_GPU": ["id", "name"],
}
table_rows = st.fixed_dictionaries({}, optional={
    t: st.tuples(st.sets(st.sampled_from(cols)), st.lists(st.lists(cell, min_size=len(cols), max_size=len(cols)), max_size=4))
    for t, cols in _COLUMNS.items()})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table_rows)
def test_sqlite_tables(tmp_path_factory, tables):
    """Tables without types or constraints, some columns dropped, cells of any type."""
    p = tmp_path_factory.mktemp("fz") / "t.sqlite"
    con = sqlite3.connect(p)
    for table, (dropped, rows) in tables.items():
        cols = [c for c in _COLUMNS[table] if c not in dropped or table not in ACTIVITY_TABLES] or _COLUMNS[table][:1]
        con.execute(f"CREATE TABLE {table} ({', '.join(cols)})")
        con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(cols))})",
                        [[r[_COLUMNS[table].index(c)] for c in cols] for r in rows])
    con.commit()
    con.close()
    _load_ok_or_trace_error(p)
