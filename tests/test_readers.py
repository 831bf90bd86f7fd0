"""Readers: formats give the same table; directories give ranks; bad input gives one clear line."""

import gzip
import json
import sqlite3
import subprocess
import sys

import pandas as pd
import pytest
from conftest import assert_tables_equal
from synth import SCHEMA, two_step_loop, write_json, write_sqlite

import helpers
from helpers import TraceError
from helpers import metrics as m


def _no_cpu_ops():
    return [e for e in two_step_loop() if e.kind != "cpu_op"]


def test_json_gzip_and_sqlite_give_the_same_table(tmp_path):
    events = _no_cpu_ops()
    a = helpers.load(write_json(events, tmp_path / "t.json"))
    b = helpers.load(write_json(events, tmp_path / "t.pt.trace.json.gz", gz=True))
    c = helpers.load(write_sqlite(events, tmp_path / "t.sqlite"))
    assert (a.format, c.format) == ("kineto", "nsys-sqlite")
    assert_tables_equal(a.events, b.events)
    pd.testing.assert_frame_equal(a.events, c.events, check_dtype=False)
    assert c.metadata["device_names"] == ["Synthetic GPU"]


def test_json_and_sqlite_give_the_same_metrics_and_findings(tmp_path):
    events = _no_cpu_ops()
    a = helpers.load(write_json(events, tmp_path / "t.json"))
    c = helpers.load(write_sqlite(events, tmp_path / "t.sqlite"))
    assert m.summary(a) | {"source": "", "format": ""} == m.summary(c) | {"source": "", "format": "", "device_names": a.metadata["device_names"]}
    assert [f.to_dict() for f in helpers.diagnose(a)] == [f.to_dict() for f in helpers.diagnose(c)]
    pd.testing.assert_frame_equal(m.idle_gaps(a), m.idle_gaps(c))


def test_format_is_detected_from_content(tmp_path):
    odd = tmp_path / "trace.data"
    write_sqlite(_no_cpu_ops(), odd)
    assert helpers.load(odd).format == "nsys-sqlite"
    gz_named_json = tmp_path / "x.json"
    gz_named_json.write_bytes(gzip.compress(json.dumps({"traceEvents": []}).encode()))
    assert helpers.load(gz_named_json).format == "kineto"


def test_directory_of_ranks(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    for r in (0, 1):
        write_json(two_step_loop(), d / f"worker{r}.pt.trace.json.gz", gz=True, rank=r, world=2)
    t = helpers.load(d)
    assert t.ranks == [0, 1] and t.format == "directory"
    assert len(t.steps) == 4
    assert t.metadata["world_size"] == 2


def test_rank_from_file_name_when_trace_lacks_it(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    write_json(two_step_loop(), d / "rank3.json")
    assert helpers.load(d).ranks == [3]


def _bad_inputs(tmp_path):
    good = json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": 2.0, "args": {}}]})
    files = {
        "truncated.json": good[: len(good) // 2].encode(),
        "empty.json": b"",
        "broken.json.gz": gzip.compress(good.encode())[:30],
        "noevents.json": b'{"foo": 1}',
        "list.json": b"[1, 2]",
        "missing.json": b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1}]}',
        "negative.json": b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": -5}]}',
        "text.sqlite": b"not a database",
        "report.nsys-rep": b"\x00binary",
        "image.png": b"\x89PNG\r\n",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    con = sqlite3.connect(tmp_path / "noact.sqlite")
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.commit()
    con.close()
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "notraces").mkdir()
    (tmp_path / "notraces" / "readme.txt").write_text("no traces here")
    return [*files, "noact.sqlite", "emptydir", "notraces", "nope.json"]


def test_bad_inputs_give_one_clear_line(tmp_path):
    for name in _bad_inputs(tmp_path):
        with pytest.raises(TraceError) as info:
            helpers.load(tmp_path / name)
        msg = str(info.value)
        assert name in msg and "\n" not in msg, f"{name}: {msg!r}"
        assert ";" in msg, f"{name}: the message should say what to do: {msg!r}"


def test_cli_bad_input_exits_2_with_one_line(tmp_path):
    (tmp_path / "empty.json").write_text("")
    before = (tmp_path / "empty.json").read_bytes()
    r = subprocess.run([sys.executable, "-m", "helpers", "diagnose", str(tmp_path / "empty.json")], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "empty" in r.stderr
    assert (tmp_path / "empty.json").read_bytes() == before


def test_schema_fixture_matches_reference():
    con = sqlite3.connect(":memory:")
    con.executescript(SCHEMA.read_text())
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds"} <= tables


def test_folder_read_in_parallel_processes_gives_the_same_trace(tmp_path, monkeypatch):
    import helpers.readers as readers

    d = tmp_path / "job"
    d.mkdir()
    for r in (0, 1):
        write_json(two_step_loop(), d / f"worker{r}.json", rank=r, world=2)
    serial = helpers.load(d)
    monkeypatch.setattr(readers, "_workers", lambda n: n)
    monkeypatch.setattr(readers, "_PARALLEL_FROM_BYTES", 0)
    assert_tables_equal(helpers.load(d).events, serial.events)
    (d / "worker1.json").write_text("{")  # a bad rank still gives one TraceError from the worker process
    with pytest.raises(TraceError, match="worker1.json"):
        helpers.load(d)


@pytest.mark.parametrize(("spread", "nan_durations"), [(20, False), (20, True), (20_000, False), (20_000, True)])
def test_events_table_rows_are_in_the_total_order_of_start_end_kind_lane_name(spread, nan_durations):
    """build_events sorts numerically and breaks ties by text only across runs of equal starts, or sorts every row by
    every key when most rows tie (a spread of 20 starts: nearly all tie; of 20,000: few do): either way the rows
    must be exactly a stable sort on all five keys, a missing end (NaN) sorting last as pandas puts it."""
    import numpy as np
    import pandas as pd

    from helpers.model import KINDS, build_events

    rng = np.random.default_rng(0)
    n = 3000
    cols = {"name": rng.choice(["b", "a", "c", "aa"], n).astype(object),
            "lane": rng.choice(["CPU 1", "CPU 2", "GPU 0 stream 7"], n).astype(object),
            "kind": rng.choice(list(KINDS[:4]), n).astype(object),
            "start_us": rng.integers(0, spread, n).astype(float) + 5.0,
            "dur_us": rng.integers(0, 3, n).astype(float), "correlation": np.arange(n)}
    if nan_durations:
        cols["dur_us"][rng.random(n) < 0.2] = np.nan
    given = cols["start_us"].copy()
    got = build_events(cols)
    want = pd.DataFrame({**cols, "start_us": cols["start_us"] - cols["start_us"].min()})
    want["end_us"] = want["start_us"] + want["dur_us"]
    want["kind"] = want["kind"].astype(pd.CategoricalDtype(KINDS))
    want = want.sort_values(["start_us", "end_us", "kind", "lane", "name"], kind="stable")
    assert got["correlation"].tolist() == want["correlation"].tolist()
    assert np.array_equal(cols["start_us"], given)  # the caller's arrays are left as they were
