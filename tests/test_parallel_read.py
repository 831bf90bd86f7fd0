"""A large trace is decoded by two processes (kineto.parse_stream's segments and helper): the table is the same
row for row as one process reads it, and anything unusual (a cut inside an event, a damaged event, the limit, a
helper that dies) is decided by reading again in one process, so what is refused, and how, is the same too."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import threading
from pathlib import Path

import pandas as pd
import pytest
from conftest import assert_tables_equal
from synth import kineto_doc, two_step_loop

import helpers
from helpers.errors import TraceError
from helpers.readers import kineto

DATA = Path(__file__).resolve().parents[1] / "data"
REAL_CORE_TO_SPARE = kineto.core_to_spare

pytestmark = pytest.mark.skipif(not kineto.parallel_decoding(), reason="parallel decoding needs Linux and two cores")


@pytest.fixture
def small_segments(monkeypatch):
    """Every document read in parallel, cut into segments of about 64 KB (so small documents have many)."""
    monkeypatch.setattr(kineto, "PARALLEL_FROM_BYTES", 0)
    monkeypatch.setattr(kineto, "core_to_spare", lambda: True)  # however busy the machine running the tests is
    monkeypatch.setattr(kineto, "_segment_size", lambda size_hint: 64 << 10)
    monkeypatch.setattr(kineto, "_PIECE", 16 << 10)


def one_process(path: Path, **kw):
    """The same read in this process alone."""
    saved = kineto.PARALLEL_FROM_BYTES
    kineto.PARALLEL_FROM_BYTES = 1 << 62
    try:
        return helpers.load(path, **kw)
    finally:
        kineto.PARALLEL_FROM_BYTES = saved


def same(path: Path) -> None:
    a, b = helpers.load(path), one_process(path)
    assert_tables_equal(a.events, b.events)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert {k: v for k, v in a.metadata.items() if k != "steps"} == {k: v for k, v in b.metadata.items() if k != "steps"}


def no_helper_left() -> None:
    assert not multiprocessing.active_children()
    assert not [t for t in threading.enumerate() if t.daemon and t.name.startswith("Thread") and t.is_alive()]


def test_recorded_traces_read_the_same_in_two_processes(small_segments):
    for name in ("launch_overhead__broken__h200.json.gz", "host_bound__broken__h200.json.gz", "sync_stall__broken__h200.json.gz"):
        same(DATA / name)
    no_helper_left()


def test_cuts_inside_events_and_bare_arrays_read_the_same(tmp_path, small_segments):
    doc = kineto_doc(two_step_loop())
    events = doc["traceEvents"] * 300
    for i, e in enumerate(events):  # lists of objects inside events: cuts that are no event's end
        events[i] = {**e, "args": {**e.get("args", {}), "nested": [{"a": i}, {"b": "x}, {\"ph\": \"X\"}"}]}}
    doc["traceEvents"] = events
    p = tmp_path / "nested.json"
    p.write_text(json.dumps(doc))
    same(p)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps([{"ph": "X", "name": f"op{i % 7}", "pid": "CPU functions", "tid": 1, "ts": i, "dur": 1}
                                for i in range(5000)] + [{"ph": "X", "name": "k", "pid": "CUDA functions", "tid": 0,
                                                          "ts": 1, "dur": 1}]))
    same(bare)
    assert set(helpers.load(bare).events["kind"]) == {"cpu_op", "kernel"}
    no_helper_left()


def test_a_damaged_event_or_the_limit_is_refused_as_in_one_process(tmp_path, small_segments):
    doc = kineto_doc(two_step_loop())
    doc["traceEvents"] = doc["traceEvents"] * 400
    late = len(doc["traceEvents"]) - 50
    doc["traceEvents"][late] = {**doc["traceEvents"][late], "dur": -5}
    p = tmp_path / "damaged.json.gz"
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    with pytest.raises(TraceError) as two:
        helpers.load(p)
    with pytest.raises(TraceError) as one:
        one_process(p)
    assert str(two.value) == str(one.value) and f"event #{late}" in str(one.value)
    with pytest.raises(TraceError, match="more than 1,000 events"):
        helpers.load(tmp_path / "damaged.json.gz", max_events=1000)
    no_helper_left()


def test_a_helper_that_dies_leaves_the_read_to_this_process(tmp_path, monkeypatch, small_segments):
    monkeypatch.setattr(kineto, "_helper_main", lambda *args: os._exit(9))
    same(DATA / "launch_overhead__broken__h200.json.gz")
    no_helper_left()


def test_a_bare_array_streams_and_reads_as_whole(monkeypatch):
    """Chrome's array format (the legacy profiler's export: rows told apart by pid) is streamed piece by piece
    like any trace, never parsed whole, and gives what a whole parse gives."""
    monkeypatch.setattr(kineto, "_PIECE", 64)
    rows = [{"ph": "X", "name": f"op{i % 5}", "pid": "CPU functions", "tid": 3, "ts": 10 * i, "dur": 4} for i in range(200)]
    rows += [{"ph": "X", "name": "k", "pid": "CUDA functions", "tid": 1, "ts": 10 * i + 2, "dur": 1,
              "args": {"stream": 9} if i % 2 else {}} for i in range(50)]
    data = json.dumps(rows).encode() + b" \n"
    path = Path("t.json")
    cols = kineto._Columns(path, None)
    whole = cols.finish(kineto._whole(data, path, cols))
    for block in (1, 7, 4096):
        got = kineto.parse_stream((data[i:i + block] for i in range(0, len(data), block)), path)
        pd.testing.assert_frame_equal(got[0], whole[0])
    assert set(whole[0]["kind"]) == {"cpu_op", "kernel"} and set(whole[0]["stream"]) == {-1, 0, 9}
    with pytest.raises(TraceError, match="not valid JSON"):
        kineto.parse_stream(iter([data + b"x"]), path)


def test_a_busy_machine_reads_in_one_process(monkeypatch, small_segments):
    """With no core free (the load average at the core count), no helper is started: it would only add its own
    CPU (fork, copy-on-write faults, columns sent back) to a read it cannot speed up."""
    monkeypatch.setattr(kineto, "core_to_spare", REAL_CORE_TO_SPARE)  # the fixture's stand-in, undone
    monkeypatch.setattr(os, "getloadavg", lambda: (float(len(os.sched_getaffinity(0))), 0.0, 0.0))
    assert not REAL_CORE_TO_SPARE()

    def no_helper(*args, **kwargs):
        raise AssertionError("a helper process was started on a busy machine")

    monkeypatch.setattr(kineto, "_Helper", no_helper)
    path = DATA / "launch_overhead__broken__h200.json.gz"
    assert_tables_equal(helpers.load(path).events, one_process(path).events)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert REAL_CORE_TO_SPARE()
    with pytest.raises(AssertionError, match="helper process was started"):
        helpers.load(path)
