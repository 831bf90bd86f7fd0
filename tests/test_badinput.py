"""The bad-input corpus: every kind of bad input a user can give, each with the message it must give.

The promise, for every input through the CLI: one line on stderr, exit status 2, no traceback, and
no byte of the input or any file beside it changed; through the API: a TraceError.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import zlib
from pathlib import Path

import pytest
from synth import two_step_loop, write_json, write_sqlite

import helpers
from helpers import TraceError
from helpers.cli import main
from helpers.readers.nsys import ACTIVITY_TABLES

GOOD = {"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 5,
     "args": {"correlation": 7}},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 20,
     "args": {"device": 0, "stream": 7, "correlation": 7}},
]}


def _doc(**event_changes) -> bytes:
    doc = json.loads(json.dumps(GOOD))
    doc["traceEvents"][1].update(event_changes)
    return json.dumps(doc).encode()


def _bomb(size: int) -> bytes:
    c = zlib.compressobj(9, wbits=31)
    block = b" " * (1 << 20)
    parts = [c.compress(b'{"traceEvents": [') ] + [c.compress(block) for _ in range(size >> 20)]
    return b"".join(parts) + c.flush()


# name -> (bytes, a fragment the one-line message must hold)
JSON_CASES = {
    "pid_beyond_int64.json": (_doc(pid=2**64), "beyond 64-bit"),
    "tid_beyond_int64.json": (_doc(tid=-(2**70)), "beyond 64-bit"),
    "correlation_beyond_int64.json": (_doc(args={"correlation": 10**30}), "args.correlation"),
    "float_pid_huge.json": (_doc(pid=1e300), "beyond 64-bit"),
    "truncated.json": (json.dumps(GOOD).encode()[:40], "not valid JSON"),
    "empty.json": (b"", "empty"),
    "no_trace_events.json": (b'{"foo": 1}', "traceEvents"),
    "a_list.json": (b"[1, 2]", "not a PyTorch-profiler trace"),
    "binary.json": (b"\x89PNG\r\n\x1a\n", "not a PyTorch-profiler trace"),
    "broken.json.gz": (gzip.compress(json.dumps(GOOD).encode())[:30], "gzip data is broken"),
    "bomb.json.gz": (_bomb(40 << 20), "expands to over"),
    "too_many_events.json": (json.dumps({"traceEvents": [{}] * 50}).encode(), "over the limit"),
    "negative.json": (_doc(dur=-5), "negative"),
    "text_sqlite.sqlite": (b"not a database", "not one"),
    "report.nsys-rep": (b"\x00binary", "nsys export --type sqlite"),
    "bad_utf16.json": (b"\xff\xfe{\x00\x00", "UTF-16"),
}
# Limits low enough that the corpus stays small: a 40 MB bomb against a 16 MB limit, 50 events against 10.
LIMITS = ["--max-mb", "16", "--max-events", "10"]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and not p.is_fifo()}


def _cli_fails_cleanly(capsys, argv: list[str], fragment: str, folder: Path) -> str:
    before = _snapshot(folder)
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert fragment in err, err
    assert _snapshot(folder) == before, "an input or a file beside it changed"
    return err


@pytest.mark.parametrize("name", sorted(JSON_CASES))
def test_json_corpus(tmp_path, capsys, name):
    data, fragment = JSON_CASES[name]
    (tmp_path / name).write_bytes(data)
    _cli_fails_cleanly(capsys, ["summary", str(tmp_path / name), *LIMITS], fragment, tmp_path)
    with pytest.raises(TraceError, match=None):
        helpers.load(tmp_path / name, max_bytes=16 << 20, max_events=10)


def _sqlite(tmp_path: Path, name: str = "t.sqlite") -> Path:
    events = [e for e in two_step_loop() if e.kind != "cpu_op"]
    return write_sqlite(events, tmp_path / name)


SQL_CASES = {  # statement that damages a good export -> message fragment
    "stringids_null": ("UPDATE StringIds SET value = NULL WHERE id = (SELECT MIN(id) FROM StringIds)", "StringIds"),
    "kernel_device_null": ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = NULL", "CUPTI_ACTIVITY_KIND_KERNEL.deviceId"),
    "kernel_stream_text": ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = 'x'", "CUPTI_ACTIVITY_KIND_KERNEL.streamId"),
    "kernel_end_null": ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = NULL", "CUPTI_ACTIVITY_KIND_KERNEL.end"),
    "kernel_start_real": ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 0.5", "CUPTI_ACTIVITY_KIND_KERNEL.start"),
    "memcpy_kind_null": ("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET copyKind = NULL", "CUPTI_ACTIVITY_KIND_MEMCPY.copyKind"),
    "runtime_end_text": ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = 'late'", "CUPTI_ACTIVITY_KIND_RUNTIME.end"),
    "runtime_gtid_null": ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = NULL", "globalTid"),
    "missing_column": ("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN streamId", "lacks the column 'streamId'"),
    "no_activity": ("".join(f"DROP TABLE IF EXISTS {t};" for t in ACTIVITY_TABLES), "activity tables"),
    "no_events": ("".join(f"DELETE FROM {t};" for t in ACTIVITY_TABLES), "holds no events"),
}


@pytest.mark.parametrize("case", sorted(SQL_CASES))
def test_sqlite_corpus(tmp_path, capsys, case):
    sql, fragment = SQL_CASES[case]
    db = _sqlite(tmp_path)
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    if "MEMCPY" in sql and "CUPTI_ACTIVITY_KIND_MEMCPY" not in tables:
        pytest.skip("the synthetic loop has no copies")
    if sql.startswith("UPDATE "):  # real exports break the DDL's NOT NULL too: drop the constraints first
        t = sql.split()[1]
        con.executescript(f"CREATE TABLE loose AS SELECT * FROM {t}; DROP TABLE {t}; ALTER TABLE loose RENAME TO {t};")
    con.executescript(sql)
    con.commit()
    con.close()
    _cli_fails_cleanly(capsys, ["summary", str(db)], fragment, tmp_path)
    with pytest.raises(TraceError):
        helpers.load(db)


@pytest.mark.parametrize("name", ["x#y.sqlite", "v.sqlite#decoy.sqlite", "pct%41.sqlite", "q?mode=rw.sqlite",
                                  "with space.sqlite", "new\nline.sqlite"])
def test_sqlite_names_are_not_uri_syntax(tmp_path, name):
    db = _sqlite(tmp_path, name)
    for decoy in ("x", "v.sqlite", "pctA.sqlite", "q"):
        assert not (tmp_path / decoy).exists()
    before = _snapshot(tmp_path)
    assert helpers.load(db).format == "nsys-sqlite"
    assert _snapshot(tmp_path) == before


def test_wal_database_gets_no_new_files_and_locked_one_reads(tmp_path):
    db = _sqlite(tmp_path, "wal.sqlite")
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.close()
    before = _snapshot(tmp_path)
    assert helpers.load(db).format == "nsys-sqlite"
    assert _snapshot(tmp_path) == before  # no -wal / -shm left beside it
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")  # a writer holds the database
    try:
        helpers.load(db)  # immutable: reads without taking locks, or says it is locked in one line
    except TraceError as exc:
        assert "locked" in str(exc)
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_streams_and_devices_are_refused_before_reading(tmp_path, capsys):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    _cli_fails_cleanly(capsys, ["summary", str(fifo)], "not a regular file", tmp_path)  # would hang if opened
    _cli_fails_cleanly(capsys, ["summary", "/dev/zero"], "not a regular file", tmp_path)


def test_valid_encodings_are_accepted(tmp_path):
    text = json.dumps(GOOD)
    variants = {"bom.json": b"\xef\xbb\xbf" + text.encode(), "utf16.json": text.encode("utf-16"),
                "utf16le.json": text.encode("utf-16-le"), "spaces.json": b" \n" * 400 + text.encode(),
                "two_members.json.gz": gzip.compress(text.encode()[:20]) + gzip.compress(text.encode()[20:])}
    for name, data in variants.items():
        (tmp_path / name).write_bytes(data)
        assert len(helpers.load(tmp_path / name).events) == 3, name


def test_gzipped_sqlite_is_read_from_a_private_copy(tmp_path):
    db = _sqlite(tmp_path)
    gz = tmp_path / "t.sqlite.gz"
    gz.write_bytes(gzip.compress(db.read_bytes()))
    db.unlink()
    before = _snapshot(tmp_path)
    assert helpers.load(gz).format == "nsys-sqlite"
    assert _snapshot(tmp_path) == before


def test_runtime_events_without_gpu_events(tmp_path):
    doc = json.loads(json.dumps(GOOD))
    doc["traceEvents"].pop()  # no kernel: CUDA API calls only
    (tmp_path / "t.json").write_text(json.dumps(doc))
    assert len(helpers.load(tmp_path / "t.json").events) == 2


def test_bad_step_pattern_and_unlistable_folder(tmp_path, capsys):
    write_json(two_step_loop(), tmp_path / "t.json")
    _cli_fails_cleanly(capsys, ["summary", str(tmp_path / "t.json"), "--steps", "("], "--steps", tmp_path)
    with pytest.raises(TraceError, match="regular expression"):
        helpers.load(tmp_path / "t.json", "(")
    if os.geteuid() != 0:  # root reads any folder
        locked = tmp_path / "locked"
        locked.mkdir(mode=0)
        with pytest.raises(TraceError, match="cannot be listed"):
            helpers.load(locked)


def test_course_data_folder_is_explained(capsys):
    data = Path(__file__).resolve().parents[1] / "data"
    assert main(["summary", str(data)]) == 2
    err = capsys.readouterr().err
    assert "separate traces" in err and err.count("\n") == 1


# Outputs: the exact path is checked; existing files, temporary names and symlinks need --force.
TRACE = str(Path(__file__).resolve().parents[1] / "data" / "data_stall__broken__cpu.json.gz")


def test_outputs_never_clobber(tmp_path, capsys):
    (tmp_path / "report.png").write_bytes(b"mine")
    _cli_fails_cleanly(capsys, ["plot", TRACE, "-o", str(tmp_path / "report")], "already exists", tmp_path)
    (tmp_path / "new.json.partial").write_bytes(b"mine too")
    _cli_fails_cleanly(capsys, ["export", TRACE, "-o", str(tmp_path / "new.json.partial")], "temporary", tmp_path)
    assert main(["export", TRACE, "-o", str(tmp_path / "new.json")]) == 0
    assert (tmp_path / "new.json.partial").read_bytes() == b"mine too"
    capsys.readouterr()
    _cli_fails_cleanly(capsys, ["export", TRACE, "-o", str(tmp_path / "new.json")], "already exists", tmp_path)
    (tmp_path / "dangling").symlink_to(tmp_path / "target.json")
    _cli_fails_cleanly(capsys, ["export", TRACE, "-o", str(tmp_path / "dangling")], "symbolic link", tmp_path)
    _cli_fails_cleanly(capsys, ["plot", TRACE, "-o", str(tmp_path / "t.json")], "cannot draw", tmp_path)
    (tmp_path / "link.png").symlink_to(tmp_path / "target.png")
    _cli_fails_cleanly(capsys, ["plot", TRACE, "-o", str(tmp_path / "link.png")], "symbolic link", tmp_path)
    assert not (tmp_path / "target.json").exists() and not (tmp_path / "target.png").exists()
    _cli_fails_cleanly(capsys, ["plot", TRACE, "-o", str(tmp_path / "no" / "such" / "t.png")], "does not exist", tmp_path)
    _cli_fails_cleanly(capsys, ["export", TRACE, "-o", "/proc/t.json"], "/proc", tmp_path)
    assert not list(tmp_path.glob(".helpers-*"))  # no temporary file left behind


def test_force_replaces_the_file_not_a_symlinks_target(tmp_path, capsys):
    (tmp_path / "target.json").write_bytes(b"keep")
    (tmp_path / "link.json").symlink_to(tmp_path / "target.json")
    assert main(["export", TRACE, "-o", str(tmp_path / "link.json"), "--force"]) == 0
    assert not (tmp_path / "link.json").is_symlink() and (tmp_path / "target.json").read_bytes() == b"keep"
    assert helpers.load(tmp_path / "link.json").format == "kineto"


def test_stdout_on_a_full_disk(tmp_path):
    import subprocess
    import sys

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "helpers", "summary", TRACE], stdout=full, stderr=subprocess.PIPE,
                           text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "space" in r.stderr
