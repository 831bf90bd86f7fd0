"""Limits that hold as classes: every input read as a stream, the limits applied to what is decoded, for a
folder's ranks together (however many processes read them) and for converted reports; worker counts capped
by files and cores. Each refusal is one line and exit status 2, and no input is changed."""

from __future__ import annotations

import codecs
import gzip
import json
import os
import re
from pathlib import Path

import pytest
from synth import kineto_doc, two_step_loop, write_json, write_sqlite

import helpers
from helpers import jobs, procs, readers
from helpers.cli import main
from helpers.errors import TraceError


def one_line_exit_2(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file of ``folder``: size, modification time and bytes (nothing a refusal may change)."""
    return {f.name: (f.stat().st_size, f.stat().st_mtime_ns, f.read_bytes()) for f in sorted(folder.iterdir())}


def ranks_of(tmp_path: Path, n: int, events_per_rank: int) -> Path:
    folder = tmp_path / "job"
    folder.mkdir()
    for r in range(n):
        doc = {"distributedInfo": {"backend": "nccl", "rank": r, "world_size": n},
               "traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
                                "ts": 0, "dur": 1000, "args": {}}]
               + [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10 + i, "dur": 0.5,
                   "args": {"device": 0, "stream": 7, "correlation": i}} for i in range(events_per_rank - 1)]}
        (folder / f"rank{r}.json").write_text(json.dumps(doc))
    return folder


# --- a folder's ranks together ------------------------------------------------------------------------------

def test_max_events_holds_for_a_folders_ranks_together(tmp_path, capsys):
    """20 ranks of 89 events each pass a limit of 1,000 one by one, and are 1,780 together."""
    folder = ranks_of(tmp_path, 20, 89)
    before = snapshot(folder)
    with pytest.raises(TraceError, match="ranks together hold more than 1,000 events"):
        helpers.load(folder, max_events=1000)
    for command in ("summary", "diagnose", "ranks"):
        assert "ranks together hold more than 1,000 events" in one_line_exit_2(capsys, [command, str(folder), "--max-events", "1000"])
    with pytest.raises(TraceError, match="ranks together hold more than 1,000 events"):
        jobs.analyse_job(folder, workers=1, max_events=1000)
    assert helpers.load(folder, max_events=1780).events.shape[0] == 1780  # the limit, not the folder, was the matter
    assert jobs.analyse_job(folder, workers=2, max_events=1780)["events"] == 1780
    assert snapshot(folder) == before


def test_max_mb_holds_for_hard_links_to_one_rank(tmp_path, capsys):
    """Three hard links to one 1.3 MB rank are three ranks of 1.3 MB: 3.9 MB, over 2 MB, refused before any is read."""
    folder = tmp_path / "job"
    folder.mkdir()
    rank = folder / "rank0.json"
    rank.write_text(json.dumps(kineto_doc(two_step_loop())) + " " * 1_300_000)
    os.link(rank, folder / "rank1.json")
    os.link(rank, folder / "rank2.json")
    before = snapshot(folder)
    for command in ("summary", "diagnose", "ranks"):
        err = one_line_exit_2(capsys, [command, str(folder), "--max-mb", "2"])
        assert re.search(r"3 trace files add up to 3\.\d+ MB, over the limit of 2 MB", err), err
    assert snapshot(folder) == before


def test_gzipped_ranks_are_counted_as_they_expand_in_every_reading_process(tmp_path, monkeypatch, capsys):
    """Hard links to a gzipped rank with an event name of 3 MB: each expands to 3 MB, under 10 MB alone; the
    processes reading them share their counts, so the folder stops at 10 MB however they are spread."""
    folder = tmp_path / "job"
    folder.mkdir()
    doc = kineto_doc(two_step_loop())
    doc["traceEvents"][0]["name"] = "n" * (3 << 20)
    rank = folder / "rank0.json.gz"
    rank.write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    for r in range(1, 8):
        os.link(rank, folder / f"rank{r}.json.gz")
    monkeypatch.setattr(readers, "_PARALLEL_FROM_BYTES", 0)  # read in processes, however small the files
    before = snapshot(folder)
    for workers in (1, 2):
        monkeypatch.setattr(readers, "_workers", lambda n, w=workers: min(n, w))
        with pytest.raises(TraceError, match="ranks together expand to over 10 MB"):
            helpers.load(folder, max_bytes=10 << 20)
    assert "ranks together expand to over 10 MB" in one_line_exit_2(capsys, ["ranks", str(folder), "--max-mb", "10"])
    assert snapshot(folder) == before


def test_a_reading_process_that_dies_is_one_line(tmp_path, monkeypatch, capsys):
    """A process reading a rank that is killed (for memory, say) ends the command in one line, not a
    BrokenProcessPool traceback."""
    folder = ranks_of(tmp_path, 3, 10)
    monkeypatch.setattr(readers, "_PARALLEL_FROM_BYTES", 0)

    def killed(*args, **kwargs):
        os._exit(9)

    monkeypatch.setattr(readers, "read_file", killed)
    err = one_line_exit_2(capsys, ["diagnose", str(folder)])
    assert "ended without an answer" in err
    monkeypatch.setattr(jobs, "analyse_rank", killed)
    err = one_line_exit_2(capsys, ["ranks", str(folder), "--workers", "2"])
    assert "ended without an answer" in err


# --- worker counts ------------------------------------------------------------------------------------------

def test_worker_counts_are_capped_by_files_and_cores(tmp_path, monkeypatch, capsys):
    folder = ranks_of(tmp_path, 3, 10)
    started = []

    class Pool(procs._Pool):
        def __init__(self, max_workers=None, **kw):
            started.append(max_workers)
            super().__init__(max_workers=max_workers, **kw)

    monkeypatch.setattr(procs, "_Pool", Pool)
    assert main(["ranks", str(folder), "--workers", "100000"]) == 0
    assert started and max(started) <= min(3, readers.usable_cores())
    capsys.readouterr()
    err = one_line_exit_2(capsys, ["ranks", str(folder), "--workers", "9" * 30])
    assert "not a count any machine runs" in err and len(err) < 300
    for bad in (2.5, True, "3", None.__class__):
        with pytest.raises(TraceError, match="whole number"):
            jobs.analyse_job(folder, workers=bad)
    with pytest.raises(TraceError, match="1 or more"):
        jobs.analyse_job(folder, workers=0)
    assert jobs.worker_count(None, 3) == min(3, readers.usable_cores())
    assert jobs.worker_count(100_000, 1) == 1


# --- UTF-16 as a stream ---------------------------------------------------------------------------------------

def test_utf16_traces_stream_and_read_as_utf8(tmp_path):
    text = json.dumps(kineto_doc(two_step_loop()), ensure_ascii=False).replace('"aten::', '"atén::')
    plain = write_json(two_step_loop(), tmp_path / "plain.json")
    base = helpers.load(plain).events
    for codec, bom in (("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE), ("utf-16-le", b""),
                       ("utf-16-be", b"")):
        p = tmp_path / f"{codec}{'-bom' if bom else ''}.json"
        p.write_bytes(bom + text.encode(codec))
        got = helpers.load(p).events
        assert got["name"].str.replace("atén", "aten").tolist() == base["name"].tolist(), p.name
        gz = p.with_suffix(".json.gz")
        gz.write_bytes(gzip.compress(p.read_bytes()))
        assert helpers.load(gz).events.shape == base.shape
    # block by block: the first UTF-8 block is out before the second UTF-16 block is read
    taken = []

    def blocks():
        for b in (codecs.BOM_UTF16_LE + "[1, 2".encode("utf-16-le"), ", 3]".encode("utf-16-le")):
            taken.append(b)
            yield b

    utf8 = readers._utf16_as_utf8(blocks(), "utf-16", Path("x"))
    assert next(utf8) == b"[1, 2" and len(taken) == 1
    assert list(utf8) == [b", 3]"]


def test_a_gzipped_utf16_trace_is_never_decoded_whole(tmp_path, monkeypatch, capsys):
    """A gzipped UTF-16 trace expanding to 48 MB reaches the parser in blocks of a few MB (decoded whole, it was
    one block of 24 MB, and at 1,000 MB a MemoryError), and is refused in one line when it expands past --max-mb."""
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0, "args": {}}
    one = json.dumps(event).encode("utf-16-le")
    sep = ",\n".encode("utf-16-le")
    n = (48 << 20) // (len(one) + len(sep))
    gz = tmp_path / "wide.json.gz"
    with gzip.open(gz, "wb", compresslevel=1) as fh:
        fh.write(codecs.BOM_UTF16_LE + '{"traceEvents": ['.encode("utf-16-le"))
        for i in range(0, n, 10_000):
            fh.write((sep if i else b"") + sep.join([one] * min(10_000, n - i)))
        fh.write("]}".encode("utf-16-le"))
    before = gz.read_bytes()
    assert "expands to over 32 MB" in one_line_exit_2(capsys, ["summary", str(gz), "--max-mb", "32"])
    blocks = []
    parse = readers.kineto.parse_stream

    def watched(stream, *args, **kwargs):
        def counted():
            for b in stream:
                blocks.append(len(b))
                yield b
        return parse(counted(), *args, **kwargs)

    monkeypatch.setattr(readers.kineto, "parse_stream", watched)
    assert len(helpers.load(gz).events) == n
    assert sum(blocks) > 20 << 20 and max(blocks) <= readers._CHUNK, max(blocks)
    assert gz.read_bytes() == before


# --- converted reports ---------------------------------------------------------------------------------------

def test_the_sqlite_made_from_a_report_obeys_max_mb(tmp_path, monkeypatch, capsys):
    """``.nsys-rep`` is read through the SQLite that nsys export makes of it: that export is what the limit
    holds for (the report may be far smaller than what it expands to)."""
    db = write_sqlite(two_step_loop(), tmp_path / "src.sqlite")
    with open(db, "ab") as fh:
        fh.write(b"\0" * (7 << 19))  # SQLite ignores bytes past its pages: a valid export of 3.5 MB
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    fake.write_text(f"#!/bin/sh\nfor a; do out=$prev; prev=$a; case $out in --output) cp {db} \"$a\";; esac; done\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"a small report")
    assert helpers.load(report).format == "nsys-sqlite"
    err = one_line_exit_2(capsys, ["summary", str(report), "--max-mb", "2"])
    assert re.search(r"run.nsys-rep: its SQLite export is [34](\.\d+)? MB, over the limit of 2 MB", err), err
    assert report.read_bytes() == b"a small report"


def test_an_event_of_more_than_the_event_limit_is_one_line(tmp_path, monkeypatch, capsys):
    """One event of 250 MB (its name), linked as 8 ranks, once ran for minutes in 1.6 GB and ended in a
    BrokenProcessPool traceback: no profiler writes such an event, and it is refused as soon as it is read past
    the event limit, in one line, however the file is read (scaled here: a limit of 1 MB, names of 3 MB)."""
    monkeypatch.setattr(readers.kineto, "_EVENT_LIMIT", 1 << 20)
    events = two_step_loop()
    doc = kineto_doc(events)
    for name in ("n" * (3 << 20), "}, {" * (3 << 18)):  # no cut at all; cuts everywhere, all false
        doc["traceEvents"][1]["name"] = name
        p = write_json(events, tmp_path / "huge.json")
        p.write_text(json.dumps(doc))
        with pytest.raises(TraceError, match="no event ends within 1 MB"):
            helpers.load(p)
        monkeypatch.setattr(readers.kineto, "PARALLEL_FROM_BYTES", 0)  # and read by two processes
        monkeypatch.setattr(readers.kineto, "core_to_spare", lambda: True)
        with pytest.raises(TraceError, match="no event ends within 1 MB"):
            helpers.load(p)
        monkeypatch.setattr(readers.kineto, "PARALLEL_FROM_BYTES", 8 << 20)
    folder = tmp_path / "job"
    folder.mkdir()
    os.link(p, folder / "rank0.json")
    for r in range(1, 8):
        os.link(p, folder / f"rank{r}.json")
    for command in ("diagnose", "ranks", "summary"):
        err = one_line_exit_2(capsys, [command, str(folder)])
        assert "no event ends within 1 MB" in err or "over the limit" in err
    doc["traceEvents"][1]["name"] = "n" * (1 << 19)  # half the limit: an odd event, read
    p.write_text(json.dumps(doc))
    assert len(helpers.load(p).events) == len(events)
