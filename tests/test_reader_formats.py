"""Trace formats users have besides today's Kineto and nsys: older spellings, the legacy profiler, ROCm,
older nsys exports, and files of events the readers do not know (refused, saying what was there)."""

from __future__ import annotations

import gzip
import json
import sqlite3

import pytest
from synth import Ev, kineto_doc, two_step_loop, write_sqlite

from helpers import metrics as m
from helpers.errors import TraceError
from helpers.readers import load

_OLD_CATEGORY = {"kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset", "cuda_runtime": "Runtime",
                 "cpu_op": "Operator"}


def _write(tmp_path, name, doc) -> str:
    p = tmp_path / name
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return str(p)


def test_pytorch_1_8_capitalised_categories_read_like_todays(tmp_path):
    doc = kineto_doc(two_step_loop())
    new = load(_write(tmp_path, "new.json.gz", doc))
    for e in doc["traceEvents"]:
        e["cat"] = _OLD_CATEGORY.get(e["cat"], e["cat"])
    assert {e["cat"] for e in doc["traceEvents"]} >= {"Kernel", "Runtime", "Memcpy"}
    old = load(_write(tmp_path, "old.json.gz", doc))
    assert len(old.events) == len(new.events) > 0
    assert old.events["kind"].value_counts().to_dict() == new.events["kind"].value_counts().to_dict()
    assert m.gpu_utilization(old) == pytest.approx(m.gpu_utilization(new))


def test_chrome_json_array_form_reads_like_the_object_form(tmp_path):
    events = kineto_doc(two_step_loop())["traceEvents"]
    obj = load(_write(tmp_path, "obj.json.gz", {"traceEvents": events}))
    arr = load(_write(tmp_path, "arr.json.gz", events))
    assert len(arr.events) == len(obj.events) > 0
    assert list(arr.events["name"]) == list(obj.events["name"])


def test_legacy_autograd_profiler_export(tmp_path):
    """torch.autograd.profiler's export_chrome_trace: a bare array, no categories, rows told apart by pid."""
    rows = [
        {"name": "aten::addmm", "ph": "X", "ts": 100, "dur": 50, "tid": 1, "pid": "CPU functions", "args": {}},
        {"name": "aten::addmm", "ph": "s", "ts": 100, "tid": 1, "pid": "CPU functions", "id": 1, "cat": "cpu_to_cuda",
         "args": {}},
        {"name": "aten::addmm", "ph": "f", "ts": 160, "tid": 0, "pid": "CUDA functions", "id": 1, "cat": "cpu_to_cuda",
         "args": {}},
        {"name": "aten::addmm", "ph": "X", "ts": 160, "dur": 30, "tid": 0, "pid": "CUDA functions", "args": {}},
        {"name": "aten::relu", "ph": "X", "ts": 200, "dur": 10, "tid": 1, "pid": "CPU functions", "args": {}},
    ]
    p = tmp_path / "legacy.json"
    p.write_text(json.dumps(rows))
    t = load(p)
    assert sorted(t.events["kind"].astype(str)) == ["cpu_op", "cpu_op", "kernel"]
    kernel = t.events[t.events["kind"] == "kernel"].iloc[0]
    assert kernel["device"] == 0 and kernel["dur_us"] == 30
    assert t.has_gpu


def test_rocm_trace_reads_hip_calls_as_launches_and_syncs(tmp_path):
    evs = []
    for i in range(4):
        t0 = i * 1_000_000
        evs += [Ev("runtime", "hipLaunchKernel", t0, t0 + 5_000, correlation=10 + i),
                Ev("kernel", "Cijk_Alik_Bljk_HHS_BH_MT128x128", t0 + 10_000, t0 + 200_000, correlation=10 + i),
                Ev("runtime", "hipDeviceSynchronize", t0 + 6_000, t0 + 200_500)]
    doc = kineto_doc(evs)
    doc["deviceProperties"] = [{"id": 0, "name": "AMD Instinct MI300X"}]
    t = load(_write(tmp_path, "rocm.json.gz", doc))
    assert m.launch_stats(t)["individually_launched_share"] == 1.0
    assert m.is_sync_call(t).sum() == 4


def test_events_none_understood_are_refused_saying_what_was_found(tmp_path):
    rows = [{"ph": "X", "cat": "gpu_op" if i % 3 else "host_task", "name": f"op{i}", "ts": i, "dur": 1, "pid": 1, "tid": 1}
            for i in range(1234)]
    with pytest.raises(TraceError) as err:
        load(_write(tmp_path, "other.json.gz", {"traceEvents": rows}))
    msg = str(err.value)
    assert "1,234 events" in msg and "gpu_op (822)" in msg and "host_task (412)" in msg
    assert "idle" not in msg and "\n" not in msg


def test_an_empty_event_list_is_still_an_empty_trace(tmp_path):
    assert len(load(_write(tmp_path, "empty.json.gz", {"traceEvents": []})).events) == 0


def test_a_profiler_window_that_recorded_nothing_is_an_empty_capture_not_another_format(tmp_path):
    """What torch.profiler writes when its schedule never reached an active step: Kineto's top-level members,
    thread-name metadata and a "Record Window End" instant, and no timed event. It is a PyTorch-profiler trace
    holding nothing, diagnosed as such; the same metadata in a file with none of Kineto's members is still refused."""
    from helpers.diagnosis import diagnose
    meta = [{"name": n, "ph": "M", "ts": 0, "pid": 93917, "tid": 3961819, "args": a}
            for n, a in (("thread_name", {"name": "thread 3961819 ()"}), ("thread_sort_index", {"sort_index": 3961819}))]
    end = {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 1736417948403182}
    window = {"schemaVersion": 1, "traceEvents": [*meta, *meta, end], "traceName": "./log/host_93917.pt.trace.json"}
    trace = load(_write(tmp_path, "window.pt.trace.json.gz", window))
    assert len(trace.events) == 0
    found = diagnose(trace)
    assert found[0].pattern == "capture_window" and found[0].evidence["reason"] == "nothing_recorded"
    with pytest.raises(TraceError, match="not a PyTorch-profiler trace"):
        load(_write(tmp_path, "chrome.json.gz", {"traceEvents": [*meta, end]}))
    timed_unknown = {**window, "traceEvents": [*meta, {"ph": "X", "cat": "gpu_op", "name": "a", "ts": 1, "dur": 1,
                                                       "pid": 1, "tid": 1}]}
    with pytest.raises(TraceError, match="gpu_op"):  # a Kineto document of unknown timed events: still refused
        load(_write(tmp_path, "unknown.json.gz", timed_unknown))


def _runtime_rows(path):
    con = sqlite3.connect(path)
    rows = con.execute("SELECT start, end, eventClass, globalTid, correlationId, nameId, returnValue "
                       "FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchall()
    return con, rows


def test_older_nsys_duplicate_runtime_rows_are_counted_once(tmp_path):
    evs = [Ev("kernel", "k", 1_000_000 * i + 10_000, 1_000_000 * i + 500_000, correlation=i + 1) for i in range(3)]
    evs += [Ev("runtime", "cudaLaunchKernel", 1_000_000 * i, 1_000_000 * i + 5_000, correlation=i + 1) for i in range(3)]
    evs += [Ev("runtime", "cudaStreamSynchronize", 1_000_000 * i + 6_000, 1_000_000 * i + 500_500, correlation=100 + i)
            for i in range(3)]
    clean = write_sqlite(evs, tmp_path / "clean.sqlite")
    twice = write_sqlite(evs, tmp_path / "twice.sqlite")
    con, rows = _runtime_rows(twice)
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME(start, end, eventClass, globalTid, correlationId, nameId, "
                    "returnValue) VALUES (?,?,?,?,?,?,?)", [(s, e, 2, g, c, n, r) for s, e, _, g, c, n, r in rows])
    con.commit()
    con.close()
    a, b = load(clean), load(twice)
    assert len(b.events) == len(a.events)
    assert m.is_sync_call(b).sum() == m.is_sync_call(a).sum() == 3
    assert m.sync_stats(b)["blocked_share"] == pytest.approx(m.sync_stats(a)["blocked_share"])


def test_unified_memory_copies_are_named(tmp_path):
    p = write_sqlite([Ev("kernel", "k", 0, 1000, correlation=1)], tmp_path / "um.sqlite")
    con = sqlite3.connect(p)
    for i, kind in enumerate((11, 12, 13)):
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY(start, end, deviceId, contextId, streamId, correlationId, bytes, "
                    "copyKind, srcKind, dstKind) VALUES (?,?,0,1,7,?,4096,?,7,7)", (2000 + i * 100, 2050 + i * 100, 50 + i, kind))
    con.commit()
    con.close()
    copies = load(p).events.query("kind == 'memcpy'").sort_values("start_us")
    assert list(copies["copy_kind"]) == ["H2D", "D2H", "D2D"]
    assert not copies["name"].str.contains("Unknown").any()
    assert copies["name"].str.startswith("Unified Memory Memcpy").all()


def test_pytorch_1_8_profiler_ranges_are_annotations_and_mark_the_steps(tmp_path):
    """1.8-1.9 wrote ProfilerStep#N and the DataLoader/optimizer ranges as Operator rows."""
    rows = []
    for i in range(3):
        t0 = i * 1000.0
        rows += [{"ph": "X", "cat": "Operator", "name": f"ProfilerStep#{i + 4}", "ts": t0, "dur": 900.0, "pid": 1, "tid": 1},
                 {"ph": "X", "cat": "Operator", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                  "ts": t0 + 1, "dur": 400.0, "pid": 1, "tid": 1},
                 {"ph": "X", "cat": "Operator", "name": "aten::conv2d", "ts": t0 + 500, "dur": 50.0, "pid": 1, "tid": 1},
                 {"ph": "X", "cat": "Kernel", "name": "k", "ts": t0 + 510, "dur": 300.0, "pid": 0, "tid": 7,
                  "args": {"device": 0, "stream": 7}}]
    t = load(_write(tmp_path, "old.json.gz", {"traceEvents": rows}))
    kinds = dict(zip(t.events["name"], t.events["kind"].astype(str)))
    assert kinds["ProfilerStep#4"] == kinds["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"] == "annotation"
    assert kinds["aten::conv2d"] == "cpu_op"
    assert len(t.steps) == 3
