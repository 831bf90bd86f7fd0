"""A hostile corpus built in code: each case is an input or a call that tests one promise.

The promises: bad input is one line and exit 2 at the CLI (only TraceError / CheckFailed from the API);
inputs are never written; memory and time stay bounded; files that are not regular files are refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from synth import Ev, two_step_loop, write_json, write_sqlite

import helpers
from helpers.cli import main
from helpers.errors import TraceError
from helpers.export import export

posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")


def one_line_exit_2(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    return err


# --- inputs are never overwritten -------------------------------------------------------------------------

def test_export_with_force_never_replaces_its_own_input(tmp_path, capsys):
    src = write_json(two_step_loop(), tmp_path / "t.json")
    before = src.read_bytes()
    err = one_line_exit_2(capsys, ["export", str(src), "-o", str(src), "--force"])
    assert "input" in err and src.read_bytes() == before
    link = tmp_path / "link.json"  # the same input reached through another name
    link.symlink_to(src)
    one_line_exit_2(capsys, ["export", str(link), "-o", str(src), "--force"])
    assert src.read_bytes() == before


def test_export_with_force_never_replaces_a_rank_file_of_the_input_folder(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    r0 = write_json(two_step_loop(), run / "rank0.json", rank=0, world=2)
    write_json(two_step_loop(), run / "rank1.json", rank=1, world=2)
    before = r0.read_bytes()
    one_line_exit_2(capsys, ["export", str(run), "-o", str(r0), "--force"])
    one_line_exit_2(capsys, ["export", str(run), "-o", str(run / "new.json"), "--force"])  # a new rank file
    assert r0.read_bytes() == before and not (run / "new.json").exists()


def test_api_export_refuses_the_trace_source(tmp_path):
    src = write_json(two_step_loop(), tmp_path / "t.json")
    with pytest.raises(TraceError, match="input"):
        export(helpers.load(src), src, force=True)


def test_figure_output_that_is_a_folder_is_refused(tmp_path, capsys):
    src = write_json(two_step_loop(), tmp_path / "t.json")
    out = tmp_path / "figs"
    out.mkdir()
    one_line_exit_2(capsys, ["plot", str(src), "-o", str(out)])
    assert not (tmp_path / "figs.png").exists()
    one_line_exit_2(capsys, ["plot", str(src), "-o", str(src), "--force"])  # its own input, named .json: refused


@posix_only
def test_an_output_that_is_a_pipe_or_device_is_refused(tmp_path, capsys):
    # A FIFO stands for a device here (/dev/null itself must never be at risk in a test run).
    src = write_json(two_step_loop(), tmp_path / "t.json")
    fifo = tmp_path / "sink"
    os.mkfifo(fifo)
    one_line_exit_2(capsys, ["plot", str(src), "-o", str(fifo), "--force"])
    assert not (tmp_path / "sink.png").exists()
    one_line_exit_2(capsys, ["export", str(src), "-o", str(fifo), "--force"])
    assert fifo.is_fifo()


@posix_only
def test_selfcheck_results_that_are_a_symlink_are_never_written_through(tmp_path, monkeypatch):
    from helpers.checks import CheckFailed
    from helpers.checks._core import _check

    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    work = tmp_path / "work"
    work.mkdir()
    (work / ".selfcheck.json").symlink_to(victim)
    monkeypatch.chdir(work)
    with pytest.raises(CheckFailed, match="symbolic link") as exc:
        _check("gaps", "check_x", True, "")
    assert "\n" not in str(exc.value)
    assert victim.read_text() == "keep me"


@posix_only
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_selfcheck_results_that_are_a_fifo_or_device_are_refused(tmp_path, monkeypatch, kind):
    from helpers.checks import CheckFailed
    from helpers.checks._core import _check
    from helpers.selfcheck import read_results

    monkeypatch.chdir(tmp_path)
    if kind == "fifo":
        os.mkfifo(".selfcheck.json")
    else:
        Path(".selfcheck.json").symlink_to("/dev/zero")
    with pytest.raises(CheckFailed):
        _check("gaps", "check_x", True, "")
    with pytest.raises(TraceError, match="regular file"):
        read_results(Path(".selfcheck.json"))


def test_selfcheck_records_through_the_safe_path(tmp_path, monkeypatch):
    from helpers.checks._core import _check
    from helpers.selfcheck import read_results

    monkeypatch.chdir(tmp_path)
    assert _check("gaps", "check_x", True, "") == "passed: check_x"
    assert read_results(Path(".selfcheck.json"))["gaps"]["checks"] == {"check_x": True}


# --- files that are not regular files, wherever the toolkit reads one --------------------------------------

@posix_only
def test_fifo_and_dev_zero_as_trace_input(tmp_path, capsys):
    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    one_line_exit_2(capsys, ["summary", str(fifo)])
    one_line_exit_2(capsys, ["summary", "/dev/zero"])


@posix_only
def test_fifo_and_dev_zero_as_ncu_csv(tmp_path):
    from helpers.readers.ncu import read_ncu

    fifo = tmp_path / "k.csv"
    os.mkfifo(fifo)
    for p in (fifo, Path("/dev/zero")):
        with pytest.raises(TraceError, match="regular file"):
            read_ncu(p)


@posix_only
def test_sync_scan_refuses_a_source_file_that_is_a_fifo(tmp_path):
    from helpers import syncscan

    fifo = tmp_path / "step.py"
    os.mkfifo(fifo)
    code = compile("def step():\n    return 1\n", str(fifo), "exec")
    ns: dict = {}
    exec(code, ns)
    with pytest.raises(TraceError, match="regular file"):
        syncscan.scan(ns["step"])
    from helpers.checks import CheckFailed, check_sync_scan_clean

    with pytest.raises(CheckFailed):
        check_sync_scan_clean(ns["step"])


def test_cli_subprocess_refusal_is_one_line(tmp_path):
    src = write_json(two_step_loop(), tmp_path / "t.json")
    r = subprocess.run([sys.executable, "-m", "helpers", "export", str(src), "-o", str(src), "--force"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and not r.stdout



# --- memory stays linear in the input ---------------------------------------------------------------------

def _shared_correlation(n: int) -> list[Ev]:
    """``n`` launch calls and ``n`` kernels that all carry correlation id 7 (a damaged or hostile trace)."""
    out = []
    for i in range(n):
        t = i * 10_000
        out.append(Ev("runtime", "cudaLaunchKernel", t, t + 2_000, correlation=7))
        out.append(Ev("kernel", "k", t + 3_000, t + 8_000, correlation=7))
    return out


@pytest.mark.parametrize("fmt", ["json.gz", "sqlite"])
def test_launch_join_on_one_shared_correlation_id_stays_small(tmp_path, fmt):
    import tracemalloc

    from helpers import metrics

    events = _shared_correlation(10_000)
    path = write_sqlite(events, tmp_path / "t.sqlite") if fmt == "sqlite" else write_json(events, tmp_path / "t.json.gz", gz=True)
    trace = helpers.load(path)
    tracemalloc.start()
    try:
        stats = metrics.launch_stats(trace)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak  # the quadratic join needed 10,000 x 10,000 rows: gigabytes
    assert stats["launch_calls"] >= 1 and stats["median_launch_to_start_us"] >= 0  # (an export may merge repeated rows)


# --- scanning stays linear; limits cannot be switched off -------------------------------------------------

def test_many_decoy_trace_events_keys_are_tried_a_bounded_number_of_times(tmp_path, monkeypatch):
    import gzip

    from helpers.readers import kineto

    decoys = b'{"traceEvents":[]},' * 20_000
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b'{"meta":[' + decoys + b'{}], "traceEvents": []}'))
    calls = []
    real = kineto._try_loads
    monkeypatch.setattr(kineto, "_try_loads", lambda data: calls.append(len(data)) or real(data))
    assert len(helpers.load(path).events) == 0  # read as json.loads reads it, after a bounded number of head parses
    assert len(calls) <= kineto._HEAD_TRIES + 2, len(calls)


def test_a_long_run_of_spaces_in_the_list_is_scanned_a_bounded_number_of_times(tmp_path, monkeypatch):
    import gzip
    import json

    from synth import kineto_doc

    from helpers import readers
    from helpers.readers import kineto

    text = json.dumps(kineto_doc(two_step_loop())).encode()
    at = text.index(b"[", text.index(b'"traceEvents"')) + 1
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text[:at] + b" " * (24 << 20) + text[at:]))
    monkeypatch.setattr(readers, "_CHUNK", 64 << 10)  # 384 blocks of spaces
    monkeypatch.setattr(kineto, "_PIECE", 64 << 10)

    class Counting:
        searches = 0

        def search(self, buf, pos):
            Counting.searches += 1
            return real.search(buf, pos)

    real = kineto._CUT
    monkeypatch.setattr(kineto, "_CUT", Counting())
    trace = helpers.load(path)
    assert len(trace.events) == len(helpers.load(write_json(two_step_loop(), tmp_path / "plain.json")).events)
    assert Counting.searches <= 40, Counting.searches  # once per block (384) before


@pytest.mark.parametrize("name", ["max_bytes", "max_events"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1, 0, "big", None])
def test_limits_cannot_be_switched_off(tmp_path, name, value):
    src = write_json(two_step_loop(), tmp_path / "t.json")
    with pytest.raises(TraceError, match=name):
        helpers.load(src, **{name: value})


def test_path_types(tmp_path):
    src = write_json(two_step_loop(), tmp_path / "t.json")
    assert len(helpers.load(os.fsencode(src)).events) == len(helpers.load(src).events)  # bytes is a path type
    with open(src, "rb") as fh, pytest.raises(TraceError, match="open file"):
        helpers.load(fh)
    with pytest.raises(TraceError, match="not a path"):
        helpers.load(42)


# --- SQLite exports: limits and a live write-ahead log ----------------------------------------------------

def test_sqlite_is_held_to_the_event_and_size_limits(tmp_path, capsys):
    db = write_sqlite(two_step_loop(), tmp_path / "t.sqlite")
    n = len(helpers.load(db).events)
    with pytest.raises(TraceError, match="max-events"):
        helpers.load(db, max_events=3)
    with pytest.raises(TraceError, match="max-mb"):
        helpers.load(db, max_bytes=1024)
    one_line_exit_2(capsys, ["summary", str(db), "--max-events", "3"])
    assert n > 3


def test_a_live_wal_beside_a_database_is_said(tmp_path):
    import sqlite3

    db = write_sqlite(two_step_loop(), tmp_path / "t.sqlite")
    writer = sqlite3.connect(db)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")  # committed, but only in the -wal file
    writer.commit()
    try:
        with pytest.raises(TraceError, match="-wal"):
            helpers.load(db)
    finally:
        writer.close()  # the last connection checkpoints: the database itself now holds the change
    assert not (tmp_path / "t.sqlite-wal").exists()
    assert not (helpers.load(db).events["kind"] == "kernel").any()


# --- learner functions run through one guard -------------------------------------------------------------

@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    from conftest import own_capture  # as if captured here of lab 00's loop: the checks judge it past provenance

    return own_capture(helpers.load(write_json(two_step_loop(), tmp_path_factory.mktemp("t") / "t.json")),
                       of=("sync_stall",), mine=False)


@pytest.mark.parametrize("fn, says", [
    (lambda t: 1 / 0, "raised ZeroDivisionError"),
    (lambda t: int("x"), "raised ValueError"),
    (lambda t: "0.3", "returned str"),
    (lambda t: None, "returned NoneType"),
    (lambda t: True, "returned bool"),
])
def test_a_learner_function_that_raises_or_returns_the_wrong_type(small_trace, monkeypatch, tmp_path, fn, says):
    from helpers.checks import CheckFailed, check_gpu_idle_share

    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckFailed, match=says) as exc:
        check_gpu_idle_share(fn, small_trace)
    assert "\n" not in str(exc.value)


def test_a_learner_function_that_never_returns_is_stopped(monkeypatch, tmp_path):
    import threading

    from helpers.checks import CheckFailed
    from helpers.checks._core import run_learner

    release = threading.Event()
    with pytest.raises(CheckFailed, match="did not return within"):
        run_learner(lambda: release.wait(), timeout=0.2)
    release.set()


def test_a_learner_function_that_edits_the_trace_cannot_pass(small_trace, monkeypatch, tmp_path):
    from helpers import metrics
    from helpers.checks import CheckFailed, check_gpu_idle_share

    monkeypatch.chdir(tmp_path)
    before = small_trace.events.copy()

    def cheat(trace):  # empties the GPU's lanes, so any later measurement of "the" trace says 100% idle
        trace.events.drop(trace.events.index, inplace=True)
        return 1.0

    with pytest.raises(CheckFailed):
        check_gpu_idle_share(cheat, small_trace)
    assert small_trace.events.equals(before) and metrics.gpu_utilization(small_trace) > 0


def test_an_endless_sweep_is_refused_without_filling_memory(monkeypatch, tmp_path):
    import itertools

    from helpers.checks import CheckFailed, check_bucket_sweep

    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckFailed, match="more than"):
        check_bucket_sweep(itertools.repeat({"bucket_cap_mb": 1}))


# --- a user's --steps regex that would backtrack ----------------------------------------------------------

def test_ordinary_steps_regexes_still_work(tmp_path):
    src = write_json(two_step_loop(), tmp_path / "t.json")
    for pattern in (r"step \d+", "train_step|step"):
        assert len(helpers.load(src, pattern).steps) == 2
    with pytest.raises(TraceError, match="matches no range of the trace"):  # this trace names its steps 'step N'
        helpers.load(src, r"ProfilerStep#\d+")


# --- every check that runs a learner's function: a table of hostile functions ----------------------------

class _Odd:
    def __str__(self) -> str:
        raise RuntimeError("no str")


_KINDS = [TypeError, ValueError, OverflowError, ZeroDivisionError, KeyError, IndexError, AttributeError, RuntimeError,
          RecursionError, MemoryError, SystemExit]


def _lab03_maker(behave, at):
    """A step function whose own code trains (the sync scan reads it first) and misbehaves ``at`` make or step."""
    import torch.nn.functional as F

    def my_step_maker(model, opt, xs, ys, log):
        if at == "make":
            return behave()

        def step(i):
            behave()
            loss = F.cross_entropy(model(xs[i % len(xs)]), ys[i % len(ys)])
            loss.backward()
            opt.step()
            opt.zero_grad()

        return step

    return my_step_maker


@pytest.fixture(scope="module")
def own_pairs():
    from test_lab01 import mine

    from helpers.course import recorded

    return {w: (mine(recorded(w, "broken", "cpu")), mine(recorded(w, a, "cpu")))
            for w, a in (("data_stall", "fixed"), ("launch_overhead", "foreach"), ("mystery", "fixed"))}


def _entry_points(own_pairs, small_trace):
    """Each check entry point that calls a learner function, as ``run(behave)``: ``behave`` is what the
    learner's function does in place of its work (raise, sleep, return something)."""
    import torch

    from helpers import checks
    from helpers.checks import lab08
    from helpers.course import recorded

    def real_loader(ds, bs):
        return torch.utils.data.DataLoader(ds, batch_size=bs)

    def endless(behave):
        def gen():
            yield behave()
        return gen()

    d, lo, my = own_pairs["data_stall"], own_pairs["launch_overhead"], own_pairs["mystery"]
    queue = {"A": recorded("launch_overhead", "broken"), "B": recorded("gpu_bound", "fp32")}  # lab 00's two queues
    return {
        "lab00 idle share": lambda behave: checks.check_gpu_idle_share(lambda t: behave(), small_trace),
        "lab00 launch queue": lambda behave: checks.check_launch_queue(lambda t: behave(), {"A": "empty", "B": "deep"}, queue),
        "lab01 make_loader": lambda behave: checks.check_data_stall_fixed(*d, 1.3, lambda ds, bs: behave()),
        "lab01 iterating the loader": lambda behave: checks.check_data_stall_fixed(*d, 1.3, lambda ds, bs: endless(behave)),
        "lab01 to_device": lambda behave: checks.check_data_stall_fixed(*d, 1.3, real_loader, lambda b, dev: behave()),
        "lab02 update": lambda behave: checks.check_launch_fixed(*lo, 1.5, update=lambda *a: behave()),
        "lab03 make": lambda behave: checks.check_sync_scan_clean(_lab03_maker(behave, "make")),
        "lab03 step": lambda behave: checks.check_sync_scan_clean(_lab03_maker(behave, "step")),
        "lab04 sweep": lambda behave: checks.check_bucket_sweep(endless(behave)),
        "lab05 make_step": lambda behave: checks.check_capstone(*my, 1000.0, lambda dev: behave()),
        "lab05 step": lambda behave: checks.check_capstone(*my, 1000.0, lambda dev: (lambda i: behave())),
        "lab08 step_fn": lambda behave: lab08.check_same_training(lambda *a: behave(), "cpu"),
        "lab08 forward_fn": lambda behave: lab08.check_activation_saving(lambda model, x: behave(), width=16, batch=8),
    }


_ENTRIES = ["lab00 idle share", "lab00 launch queue", "lab01 make_loader", "lab01 iterating the loader", "lab01 to_device", "lab02 update",
            "lab03 make", "lab03 step", "lab04 sweep", "lab05 make_step", "lab05 step", "lab08 step_fn",
            "lab08 forward_fn"]


def _refused(run, behave) -> str:
    from helpers.checks import CheckFailed

    with pytest.raises(CheckFailed) as exc:
        run(behave)
    text = str(exc.value)
    assert "\n" not in text and "passed" not in text
    return text


@pytest.mark.parametrize("entry", _ENTRIES)
def test_every_learner_function_that_raises_is_one_line(own_pairs, small_trace, entry):
    # every kind through the cheapest entry; the others share its guard, so three kinds each say they use it
    run = _entry_points(own_pairs, small_trace)[entry]
    for kind in _KINDS if entry == _ENTRIES[0] else (TypeError, OverflowError, SystemExit):
        def behave(kind=kind):
            raise kind("boom")

        assert f"raised {kind.__name__}" in _refused(run, behave), (entry, kind)


@pytest.mark.parametrize("entry", _ENTRIES)
def test_every_learner_function_that_never_returns_is_stopped(own_pairs, small_trace, entry, monkeypatch):
    import threading

    from helpers.checks import _core

    monkeypatch.setattr(_core, "LEARNER_TIMEOUT_S", 0.2)
    release = threading.Event()
    try:
        assert "did not return within 0.2 s" in _refused(_entry_points(own_pairs, small_trace)[entry], release.wait)
    finally:
        release.set()


@pytest.mark.parametrize("entry, value, says", [
    ("lab00 idle share", "0.3", "returned str"),
    ("lab00 idle share", None, "returned NoneType"),
    ("lab00 idle share", 10 ** 400, "not a finite number"),
    ("lab00 idle share", float("nan"), "not a finite number"),
    ("lab00 idle share", _Odd(), "returned _Odd"),
    ("lab00 launch queue", 10 ** 400, "not a finite number"),
    ("lab01 make_loader", 5, "not iterable"),
    ("lab01 to_device", None, "must return the (x, y) pair"),
    ("lab03 make", 5, "must be a function"),
    ("lab04 sweep", 5, "must be a dict"),
    ("lab04 sweep", {"bucket_cap_mb": "abc", "step_ms": 1, "exposed_ms": 1, "trace": None}, "a Trace"),
    ("lab05 make_step", None, "must be a function"),
    ("lab08 step_fn", "loss", "returned str"),
    ("lab08 forward_fn", None, "returned NoneType"),
])
def test_every_learner_function_that_returns_the_wrong_thing_is_one_line(own_pairs, small_trace, entry, value, says):
    assert says in _refused(_entry_points(own_pairs, small_trace)[entry], lambda: value)


def test_endless_loaders_and_sweeps_are_read_a_bounded_way(own_pairs, small_trace, monkeypatch):
    import itertools

    import torch

    from helpers import checks
    from helpers.checks import lab04

    run = _entry_points(own_pairs, small_trace)["lab01 make_loader"]
    batch = (torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))
    assert "more than 128 batches" in _refused(run, lambda: itertools.repeat(batch))
    assert "per image" in _refused(run, lambda: [(torch.zeros(2, 3), torch.zeros(2, 2))])
    # an endless sweep of ever larger rows: at most MAX_SWEEP_ROWS + 1 are read
    from helpers.checks import provenance

    monkeypatch.setattr(lab04, "MAX_SWEEP_ROWS", 5)
    monkeypatch.setattr(provenance, "MAX_RUNS", 5)  # the engine reads a one-pass sweep once, as far as the check would
    pulled = itertools.count()
    rows = ({"bucket_cap_mb": next(pulled), "pad": "x" * 1000 * k} for k in itertools.count())
    assert "more than 5 runs" in _refused(checks.check_bucket_sweep, rows)
    assert next(pulled) == 6
    from conftest import as_learners, own_capture

    job = own_capture(as_learners(small_trace), by="communication.run")  # as if the learner's job made it
    good = {"step_ms": 1.0, "exposed_ms": 1.0, "trace": job}
    for bad in ("abc", 10 ** 400, float("nan"), None, True):
        sweep = [{**good, "bucket_cap_mb": v} for v in (1, 10)] + [{**good, "bucket_cap_mb": bad}]
        assert "bucket_cap_mb" in _refused(checks.check_bucket_sweep, sweep)
    assert "must be a list of dicts" in _refused(checks.check_bucket_sweep, "abc")


def test_a_learner_function_that_edits_the_trace_and_returns_the_right_figure_is_refused(small_trace):
    from helpers import metrics
    from helpers.checks import check_gpu_idle_share

    right = 1.0 - metrics.gpu_utilization(small_trace)
    before = small_trace.events.copy()

    def sort_in_place(trace):
        trace.events.sort_values("dur_us", inplace=True)
        return right

    def new_column(trace):
        trace.events["gap"] = 0.0
        return right

    def replace_events(trace):
        trace.events = trace.events.iloc[:0]
        return right

    def shrink_steps(trace):
        trace.metadata["steps"] = trace.steps.iloc[:1]
        return right

    for cheat in (sort_in_place, new_column, replace_events, shrink_steps):
        assert "changed the trace it was given" in _refused(lambda _, c=cheat: check_gpu_idle_share(c, small_trace), None)
    assert small_trace.events.equals(before)


# --- times beyond 64-bit nanoseconds: refused in one line, never wrapped -----------------------------------

def _sqlite_with(tmp_path, name, *sql):
    import sqlite3

    db = write_sqlite(two_step_loop(), tmp_path / name)
    con = sqlite3.connect(db)
    for statement in sql:
        con.execute(*statement) if isinstance(statement, tuple) else con.execute(statement)
    con.commit()
    con.close()
    return db


def test_times_beyond_64_bit_nanoseconds_are_refused_not_wrapped(tmp_path, capsys):
    import json

    from helpers.model import Trace

    # end - start overflows int64 (and would pass an end < start check as a wrapped -1 ns)
    wrap = _sqlite_with(tmp_path, "wrap.sqlite", ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = ?, end = ? WHERE rowid = 1",
                                                   (-2**63, 2**63 - 1)))
    with pytest.raises(TraceError, match="longer than 64-bit nanoseconds"):
        helpers.load(wrap)
    # a REAL start of 2^63 would become -2^63 as an int64
    real = _sqlite_with(tmp_path, "real.sqlite", "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 9223372036854775808.0 "
                        "WHERE rowid = 1")
    with pytest.raises(TraceError, match=r"start holds 9\.22\d*e\+18 in row 1"):
        helpers.load(real)
    # a 1e20 us kernel in a JSON trace: refused on reading, and export refuses to write it (no file left)
    src = write_json(two_step_loop(), tmp_path / "t.json")
    doc = json.loads(src.read_text())
    doc["traceEvents"][-1]["dur"] = 1e20
    big = tmp_path / "big.json"
    big.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match="146 years"):
        helpers.load(big)
    t = helpers.load(src)
    ev = t.events.copy()
    ev.loc[0, "dur_us"] = 1e20
    ev["end_us"] = ev["start_us"] + ev["dur_us"]
    with pytest.raises(TraceError, match="not written"):
        export(Trace(ev, "", "kineto", dict(t.metadata)), tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()


# --- damaged exports: one line, no traceback ---------------------------------------------------------------

def test_damaged_exports_are_one_line(tmp_path, capsys):
    import dataclasses

    null_graph = _sqlite_with(
        tmp_path, "graph.sqlite", "DROP TABLE IF EXISTS CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
        "CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER, "
        "correlationId INTEGER, globalPid INTEGER, graphId INTEGER)",
        "INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (1000, 2000, 0, 7, 5, 0, NULL)")
    with pytest.raises(TraceError, match="graphId holds NULL"):
        helpers.load(null_graph)
    # the schema's name and text are not UTF-8: SQLite's own error message is not text either
    not_text = _sqlite_with(tmp_path, "schema.sqlite", "PRAGMA writable_schema=ON",
                            "UPDATE sqlite_master SET name = CAST(X'ff41' AS TEXT), "
                            "sql = CAST(X'435245415445205441424c4520ff28' AS TEXT) WHERE name = 'StringIds'")
    with pytest.raises(TraceError, match="cannot be read"):
        helpers.load(not_text)
    # an NVTX "rank N" mark beyond any rank: not a rank (the processes are numbered in pid order)
    loop = two_step_loop()
    second = [dataclasses.replace(e, pid=e.pid + 1) for e in loop]
    marks = [Ev("mark", "rank 99999999999999999999999", 0, 0, pid=loop[0].pid), Ev("mark", "rank 1", 0, 0, pid=loop[0].pid + 1)]
    marked = write_sqlite(loop + second + marks, tmp_path / "marks.sqlite")
    processes = helpers.load(marked).metadata["distributed"]["processes"]
    assert [p["rank_from"] for p in processes] == ["pid order", "pid order"]
    # a file name's rank beyond any rank
    run = tmp_path / "run"
    run.mkdir()
    write_json(two_step_loop(), run / "rank99999999999999999999999.json")
    write_json(two_step_loop(), run / "rank1.json")
    assert "beyond any job's ranks" in one_line_exit_2(capsys, ["summary", str(run)])


# --- a hung nsys is stopped in bounded time, its temporary folder removed ----------------------------------

@posix_only
def test_a_hung_nsys_is_stopped_and_its_temporary_folder_removed(tmp_path, monkeypatch):
    import tempfile
    import time

    from helpers import profiling, readers

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    # a wrapper script whose child keeps the pipes open: killing only the script would still wait for the child
    fake.write_text("#!/bin/sh\ntouch partial.sqlite\nsleep 120\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setattr(readers, "NSYS_EXPORT_TIMEOUT_S", 1.0)
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"not really a report")
    started = time.monotonic()
    with pytest.raises(TraceError, match="did not finish within 1 s"):
        helpers.load(report)
    assert time.monotonic() - started < 30 and list(temp.iterdir()) == []
    started = time.monotonic()
    with pytest.raises(TraceError, match="ran past 1 s"):
        profiling.run_nsys(["nsys", "profile", "-o", str(tmp_path / "r"), "python", "-c", "pass"], timeout_s=1)
    assert time.monotonic() - started < 30


# --- the metric cache follows edits in place ----------------------------------------------------------------

def test_a_cached_metric_is_recomputed_after_the_trace_is_edited_in_place(tmp_path):
    from helpers import metrics

    src = write_json(two_step_loop(), tmp_path / "t.json")
    edits = {
        "loc": lambda ev: ev.loc.__setitem__((ev["kind"] == "kernel", "dur_us"), 0.0),
        "iat": lambda ev: ev.iat.__setitem__((int((ev["kind"] == "kernel").to_numpy().argmax()), ev.columns.get_loc("kind")),
                                             "cpu_op"),
        "drop": lambda ev: ev.drop(ev.index[ev["kind"] == "kernel"], inplace=True),
    }
    for name, edit in edits.items():
        trace = helpers.load(src)
        busy = metrics.gpu_utilization(trace)
        edit(trace.events)
        trace.events["end_us"] = trace.events["start_us"] + trace.events["dur_us"]
        fresh = helpers.load(src)
        edit(fresh.events)
        fresh.events["end_us"] = fresh.events["start_us"] + fresh.events["dur_us"]
        assert metrics.gpu_utilization(trace) == metrics.gpu_utilization(fresh) != busy, name


# --- exit-0 runs print no RuntimeWarning -------------------------------------------------------------------

def test_exit_0_runs_on_zero_length_steps_print_no_warning(tmp_path, capsys):
    import warnings

    # a step range of no length, and a capture whose events all take no time: shares are 0/0
    cases = {"zero_step": [Ev("annotation", "ProfilerStep#0", 0, 0), Ev("kernel", "k", 0, 10, correlation=1)],
             "zero_dur": [Ev("kernel", "k", 5, 5, correlation=1), Ev("runtime", "cudaLaunchKernel", 5, 5, correlation=1)]}
    zero_step = write_json(cases["zero_step"], tmp_path / "zero_step.json")
    zero_dur = write_sqlite(cases["zero_dur"], tmp_path / "zero_dur.sqlite")
    for argv in (["summary", str(zero_step)], ["compare", str(zero_step), str(zero_step)],
                 ["diagnose", str(zero_dur), "--json"], ["plot", str(zero_dur), "-o", str(tmp_path / "zero_dur.png")]):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # any warning fails the run
            warnings.simplefilter("ignore", DeprecationWarning)
            assert main(argv) == 0, argv
        assert "Warning" not in capsys.readouterr().err, argv


# --- duplicate "traceEvents" keys: what json.loads reads, or refused ----------------------------------------

@pytest.mark.parametrize("members, expect", [
    ('"traceEvents": 5, "traceEvents": LIST', "read"),       # json.loads keeps the last: the list, as here
    ('"traceEvents": null, "traceEvents": LIST', "read"),
    ('"traceEvents": LIST, "traceEvents": null', "refused"),  # json.loads would keep null: refused, not guessed
    ('"traceEvents": LIST, "traceEvents": []', "refused"),
    ('"traceEvents": LIST, "traceEvents": 5', "refused"),
    ('"traceEvents": LIST, "x": {"traceEvents": null}', "read"),  # a nested key is not a duplicate
])
def test_duplicate_trace_events_keys_read_as_json_loads_or_refused(tmp_path, members, expect):
    import json

    src = write_json(two_step_loop(), tmp_path / "t.json")
    events = json.dumps(json.loads(src.read_text())["traceEvents"])
    dup = tmp_path / "dup.json"
    dup.write_text("{" + members.replace("LIST", events) + "}")
    if expect == "read":
        assert helpers.load(dup).events.equals(helpers.load(src).events)
    else:
        with pytest.raises(TraceError, match="two 'traceEvents' keys at the top"):
            helpers.load(dup)


# --- limits on the bytes actually read, and memory near the limit ------------------------------------------

def test_a_file_that_grows_while_read_is_held_to_the_limit(tmp_path, monkeypatch):
    import json

    from helpers import readers

    big = tmp_path / "big.json"
    doc = json.loads(write_json(two_step_loop(), tmp_path / "t.json").read_text())
    doc["padding"] = "x" * (3 << 20)
    big.write_text(json.dumps(doc))
    real_fstat = os.fstat

    def stat_as_when_small(fd, *args, **kwargs):  # the size the open file had before the writer went on
        st = real_fstat(fd, *args, **kwargs)
        if not os.path.samestat(st, os.stat(big)):
            return st
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid, 1000,
                               int(st.st_atime), int(st.st_mtime), int(st.st_ctime)))

    monkeypatch.setattr(readers.os, "fstat", stat_as_when_small)
    with pytest.raises(TraceError, match="grew past the limit of 1 MB"):
        helpers.load(big, max_bytes=1 << 20)


def test_a_gzipped_export_near_the_limit_is_not_held_twice_in_memory(tmp_path, monkeypatch):
    import gzip
    import sqlite3
    import tracemalloc

    from helpers import readers

    monkeypatch.setattr(readers, "_CHUNK", 1 << 20)  # blocks of 1 MB: what is held beyond them is the input itself

    db = write_sqlite(two_step_loop(), tmp_path / "t.sqlite")
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE padding (b BLOB)")
    con.execute("INSERT INTO padding VALUES (?)", (os.urandom(12 << 20),))  # incompressible
    con.commit()
    con.close()
    raw = db.read_bytes()
    gz = tmp_path / "t.sqlite.gz"
    gz.write_bytes(gzip.compress(raw, compresslevel=1))
    del raw
    tracemalloc.start()
    try:
        helpers.load(gz, max_bytes=(13 << 20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 1.2 * db.stat().st_size, f"{peak / 2**20:.1f} MB at peak for a {db.stat().st_size / 2**20:.1f} MB export"


# --- bounded waits: a tool that keeps its pipes open, never returns, or a port that refuses -----------------

def _fake_tool(bin_dir: Path, name: str, body: str) -> Path:
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(0o755)
    return tool


@posix_only
def test_an_nsys_whose_child_keeps_stderr_open_is_not_waited_for(tmp_path, monkeypatch):
    """The export is written and nsys exits; a child it left holds stderr for minutes: read at once."""
    import time

    good = write_sqlite(two_step_loop(), tmp_path / "good.sqlite")
    _fake_tool(tmp_path / "bin", "nsys", 'out=""\nwhile [ $# -gt 0 ]; do [ "$1" = "--output" ] && out="$2"; shift; done\n'
               f'cp {good} "$out"\n(sleep 120 >&2 &)\nexit 0\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    report = tmp_path / "r.nsys-rep"
    report.write_bytes(b"a report")
    started = time.monotonic()
    trace = helpers.load(report)
    assert time.monotonic() - started < 20 and len(trace.steps) == 2


@posix_only
def test_an_nsys_that_never_returns_is_taken_as_hung(tmp_path, monkeypatch, capsys):
    import tempfile
    import time

    from helpers import readers

    _fake_tool(tmp_path / "bin", "nsys", "sleep 120\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(readers, "NSYS_EXPORT_IDLE_S", 1.0)  # default 10 s; the time-out (300 s) is never reached
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    report = tmp_path / "r.nsys-rep"
    report.write_bytes(b"a report")
    started = time.monotonic()
    err = one_line_exit_2(capsys, ["summary", str(report)])
    assert "stopped working (no CPU time for 1 s)" in err and time.monotonic() - started < 20
    assert list(temp.iterdir()) == []


@posix_only
def test_doctor_does_not_wait_on_tools_whose_version_hangs(tmp_path, monkeypatch):
    import time

    from helpers import doctor

    for tool in ("nsys", "ncu"):
        _fake_tool(tmp_path / "bin", tool, "sleep 120\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(doctor, "VERSION_IDLE_S", 1.0)
    started = time.monotonic()
    versions = [doctor._tool_version("nsys"), doctor._tool_version("ncu")]
    assert all("did not answer" in v for v in versions) and time.monotonic() - started < 15


def test_a_scheduler_port_that_refuses_is_said_at_once(capsys):
    import socket
    import time

    pytest.importorskip("distributed")
    job = str(Path(__file__).parent.parent / "data" / "communication__ddp__cpu")
    with socket.socket() as s:  # a port nothing listens on: bound, never listened
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        started = time.monotonic()
        err = one_line_exit_2(capsys, ["ranks", job, "--scheduler", f"tcp://127.0.0.1:{port}"])
    assert "no Dask scheduler answers there" in err and time.monotonic() - started < 10
    for address, says in (("tcp://host", "a host and a port"), ("tcp://[::1", "not a scheduler address")):
        assert says in one_line_exit_2(capsys, ["ranks", job, "--scheduler", address])
