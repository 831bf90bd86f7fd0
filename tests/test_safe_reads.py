"""Every file the toolkit reads on a user's behalf is opened one way (helpers.outputs.open_regular: without
blocking, judged on the open descriptor), so a path that was a regular file when it was checked and is a named
pipe when it is opened cannot hang a command; state files are read through one bounded JSON reader; the
readers say what damaged bytes are (NUL padding, an empty gzip, bytes after the gzip data) and size limits
are worded truly at any size."""

from __future__ import annotations

import ast
import gzip
import json
import os
import re
import threading
from pathlib import Path

import pytest
from synth import two_step_loop, write_json, write_sqlite

import helpers
from helpers import outputs, readers
from helpers.cli import main
from helpers.errors import TraceError

ROOT = Path(__file__).resolve().parents[1]
posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")


def _never_blocks(fn, fifo: Path, timeout: float = 20.0):
    """Run ``fn()`` in a thread; if it is still waiting on ``fifo`` after ``timeout`` s, open the pipe's other
    end (which lets a blocked open return) and fail. Returns what fn returned or raised."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # a reader is blocked in open(): this releases it
        os.close(fd)
        t.join(10)
        pytest.fail(f"blocked opening the named pipe {fifo.name}")
    return box


# --- the race: regular at check time, a FIFO at open time ---------------------------------------------------

def _fifo_in_place_of(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


@posix_only
@pytest.mark.parametrize("name", ["t.json", "t.json.gz", "t.sqlite", "t.sqlite.gz", "t.db"])
def test_a_trace_that_is_a_fifo_when_opened_is_refused_without_blocking(tmp_path, name):
    fifo = _fifo_in_place_of(tmp_path / name)
    box = _never_blocks(lambda: readers.read_file(fifo), fifo)
    assert isinstance(box.get("error"), TraceError) and "named pipe" in str(box["error"]), box


@posix_only
def test_a_folder_rank_swapped_for_a_fifo_after_the_listing_is_refused_without_blocking(tmp_path, monkeypatch):
    job = tmp_path / "job"
    job.mkdir()
    write_json(two_step_loop(), job / "rank0.json")
    write_json(two_step_loop(), job / "rank1.json")
    real = readers._not_a_file

    def checked_then_swapped(f: Path):  # the listing saw a regular file; then the file became a pipe
        why = real(f)
        if f.name == "rank1.json":
            _fifo_in_place_of(f)
        return why

    monkeypatch.setattr(readers, "_not_a_file", checked_then_swapped)
    box = _never_blocks(lambda: helpers.load(job), job / "rank1.json")
    assert isinstance(box.get("error"), TraceError) and "named pipe" in str(box["error"]), box


@posix_only
def test_an_export_swapped_for_a_fifo_after_the_format_check_never_reaches_sqlite(tmp_path, monkeypatch):
    """SQLite opens by name: the reader hands it the descriptor it checked, so a swap after the check reads
    the file that was checked (moved) or fails in one line, and never opens the pipe."""
    from helpers.readers import nsys

    src = write_sqlite(two_step_loop(), tmp_path / "t.sqlite")
    real_open = outputs.open_regular

    def open_then_swap(path, *args, **kwargs):
        fh = real_open(path, *args, **kwargs)
        os.rename(path, tmp_path / "moved.sqlite")
        os.mkfifo(path)
        return fh

    monkeypatch.setattr(nsys, "open_regular", open_then_swap)
    box = _never_blocks(lambda: nsys.read(src), src)
    assert "error" not in box, box
    assert len(box["value"][0]) > 0  # the checked file's events, read where it was moved


@posix_only
@pytest.mark.parametrize("reader", ["memory.allocations", "memory.load_snapshot", "stamps.file_digest",
                                    "lab08 ncu csv", "lab08 ncu raw", "lab08 gpu metrics", "state json"])
def test_every_user_path_reader_refuses_a_fifo_without_blocking(tmp_path, reader):
    from helpers import memory, stamps
    from helpers.checks import lab08

    fifo = _fifo_in_place_of(tmp_path / "f.json")
    call = {"memory.allocations": lambda: memory.allocations(fifo), "memory.load_snapshot": lambda: memory.load_snapshot(fifo),
            "stamps.file_digest": lambda: stamps.file_digest(fifo), "lab08 ncu csv": lambda: lab08.ncu_long(fifo),
            "lab08 ncu raw": lambda: lab08.ncu_stalls(fifo), "lab08 gpu metrics": lambda: lab08.gpu_metrics(fifo),
            "state json": lambda: outputs.read_state_json(fifo, 1 << 20, "state file")}[reader]
    box = _never_blocks(call, fifo)
    assert box.get("value") is None if reader == "stamps.file_digest" else isinstance(box.get("error"), TraceError), box


# --- the class, closed for code to come: no other way of opening a file for reading in the toolkit -----------

#: Where a file is opened for reading otherwise, and why that is safe: files of /proc, the workloads' own
#: result files (written by the child processes they start, in a private folder), and the modules that open
#: through helpers.outputs themselves.
_ALLOWED_OPENS = {
    ("helpers/procs.py", "_group_cpu_s"), ("helpers/checks/_core.py", "_children"), ("helpers/doctor.py", "_read"),
    ("helpers/profiling.py", "save_trace"),  # the profiler's own export, written a line before
}
_ALLOWED_FILES = ("helpers/workloads/", "helpers/plots", "helpers/report.py", "helpers/outputs.py", "helpers/sources.py")


def _reading_opens(tree: ast.AST) -> list[tuple[str, int]]:
    """(enclosing function, line) of every call that opens a file for reading by name."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, fn: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
            if isinstance(child, ast.Call):
                f = child.func
                mode = child.args[1] if len(child.args) > 1 else next((k.value for k in child.keywords if k.arg == "mode"), None)
                writes = isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax")
                by_name = isinstance(f, ast.Name) and f.id == "open"
                by_path = isinstance(f, ast.Attribute) and f.attr in ("read_text", "read_bytes")
                by_module = (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in
                             {("gzip", "open"), ("io", "open"), ("codecs", "open"), ("tokenize", "open"), ("sqlite3", "connect"),
                              ("inspect", "getsource"), ("inspect", "getsourcelines"), ("inspect", "findsource")})
                if (by_name or by_module) and not writes or by_path:
                    found.append((fn, child.lineno))
            visit(child, name)

    visit(tree, "<module>")
    return found


def test_files_are_opened_for_reading_only_through_the_safe_reader():
    stray = []
    for path in sorted((ROOT / "helpers").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(_ALLOWED_FILES):
            continue
        for fn, line in _reading_opens(ast.parse(path.read_text(encoding="utf-8"))):
            if (rel, fn) not in _ALLOWED_OPENS and not (rel == "helpers/readers/nsys.py" and fn == "_read_open"):
                stray.append(f"{rel}:{line} in {fn}")
    assert not stray, "open these through helpers.outputs.open_regular / read_regular / read_state_json: " + ", ".join(stray)


@posix_only
@pytest.mark.parametrize("reader", ["sources.getsource", "syncscan.scan", "proof digest", "stamps code text"])
def test_a_functions_source_file_that_is_a_fifo_never_blocks(tmp_path, monkeypatch, reader):
    from helpers import sources, stamps, syncscan
    from helpers.checks import _proof

    src = tmp_path / "step.py"
    src.write_text("def step():\n    return 1\n")
    ns: dict = {}
    exec(compile(src.read_text(), str(src), "exec"), ns)
    _fifo_in_place_of(src)  # after the function was defined: its file is now a pipe
    monkeypatch.setattr(syncscan.os.path, "isfile", lambda p: True)  # as if the check had run before the swap
    call = {"sources.getsource": lambda: sources.getsource(ns["step"]), "syncscan.scan": lambda: syncscan.scan(ns["step"]),
            "proof digest": lambda: _proof._source_digest(ns["step"]),
            "stamps code text": lambda: stamps._code_text(ns["step"])}[reader]
    box = _never_blocks(call, src)
    if reader in ("proof digest", "stamps code text"):  # no source to read: they fall back to the code object
        assert "value" in box, box
    else:
        assert isinstance(box.get("error"), (OSError, TraceError)), box


def test_a_functions_source_is_read_as_inspect_reads_it(tmp_path):
    import inspect

    from helpers import sources

    src = tmp_path / "m.py"
    src.write_text("# -*- coding: latin-1 -*-\nX = 1\n\n\ndef f(a):\n    return 'caf\xe9'\n", encoding="latin-1")
    ns: dict = {}
    exec(compile(src.read_bytes(), str(src), "exec"), ns)
    assert sources.getsourcelines(ns["f"]) == inspect.getsourcelines(ns["f"])
    assert sources.getsource(helpers.load) == inspect.getsource(helpers.load)


# --- what damaged bytes are, in words ---------------------------------------------------------------------

def _doc() -> bytes:
    return json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1, "cat": "cpu_op"}]
                      * 3}).encode()


@pytest.mark.parametrize("where", ["after a whole document", "instead of the end", "in the middle", "at the start",
                                   "the whole file"])
@pytest.mark.parametrize("gz", [False, True])
def test_nul_bytes_are_named_not_called_an_early_end(tmp_path, where, gz):
    doc = _doc()
    data = {"after a whole document": doc + b"\0" * 300, "instead of the end": doc[:40] + b"\0" * 300,
            "in the middle": doc[:40] + b"\0" * 64 + doc[104:], "at the start": b"\0" * 64 + doc,
            "the whole file": b"\0" * 8192}[where]
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(TraceError, match="NUL bytes") as e:
        helpers.load(p)
    assert "ends early" not in str(e.value) and "UTF-" not in str(e.value)


def test_an_empty_gzip_says_it_holds_nothing(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(b""))
    with pytest.raises(TraceError, match="decompresses to 0 bytes"):
        helpers.load(p)


@pytest.mark.parametrize("tail, accepted", [(b"\0" * 5000, True), (b"", True), (b"garbage", False),
                                            (b"\0" * 10 + b"x", False), (b"\0" * 10 + gzip.compress(b" "), False),
                                            (b"\x1f", False)])
def test_what_follows_the_gzip_data_is_judged_as_gzip_judges_it(tmp_path, tail, accepted):
    """gzip(1) ignores zero bytes to the end silently and warns, exit 2, about anything else ("trailing garbage")."""
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(_doc()) + tail)
    if accepted:
        assert len(helpers.load(p).events) == 3
    else:
        with pytest.raises(TraceError, match="trailing garbage"):
            helpers.load(p)


def test_two_gzip_members_are_one_stream(tmp_path):
    doc = _doc()
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(doc[:30]) + gzip.compress(doc[30:]))
    assert len(helpers.load(p).events) == 3


# --- limits worded truly at any size ------------------------------------------------------------------------

@pytest.mark.parametrize("mb", ["1e-5", "0.001", "0.5", "1.3"])
def test_a_small_limit_is_quoted_as_it_is(tmp_path, capsys, mb):
    src = tmp_path / "t.json"
    src.write_bytes(_doc() + b" " * (2 << 20))
    assert main(["summary", str(src), "--max-mb", mb]) == 2
    err = capsys.readouterr().err
    limit_words = re.search(r"over the limit of ([\d.,]+) (bytes|KB|MB)", err)
    assert limit_words, err
    value = float(limit_words.group(1).replace(",", "")) * {"bytes": 1, "KB": 1024, "MB": 2**20}[limit_words.group(2)]
    assert value == pytest.approx(float(mb) * 2**20, rel=0.01, abs=1), err  # never "0 MB"


def test_size_words_never_rounds_a_size_to_zero_or_to_its_limit():
    for n in (1, 10, 1023, 1024, 1500, 2**20 - 1, 2**20, int(1.04 * 2**20), 10 * 2**20 + 1, 2**30, 5 * 2**40):
        words = outputs.size_words(n)
        number, unit = words.split(" ")
        shown = float(number.replace(",", "")) * {"bytes": 1, "byte": 1, "KB": 1024, "MB": 2**20}[unit]
        assert shown > 0 and shown == pytest.approx(n, rel=0.006), (n, words)
    assert outputs.size_words(int(1.04 * 2**20)) != outputs.size_words(2**20)


def test_no_reader_formats_a_size_as_whole_megabytes_by_hand():
    for path in (ROOT / "helpers" / "readers").glob("*.py"):
        assert "2**20:,.0f" not in path.read_text(), f"{path.name}: use outputs.size_words"


# --- state files: one bounded reader ------------------------------------------------------------------------

def test_a_results_file_nested_past_the_parser_does_not_break_a_check(tmp_path, monkeypatch):
    from helpers.checks import _core

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_core, "_track", lambda: "cpu")
    Path(_core.RESULTS_FILE).write_text("[" * 100_000 + "]" * 100_000)
    _core._record("gaps", "check_x", True)  # was RecursionError
    assert json.loads(Path(_core.RESULTS_FILE).read_text())["gaps"]["checks"] == {"check_x": True}


@posix_only
def test_a_results_file_that_is_a_fifo_does_not_block_the_triage_lab(tmp_path, monkeypatch):
    from helpers.checks import _core, lab05

    monkeypatch.chdir(tmp_path)
    fifo = _fifo_in_place_of(tmp_path / _core.RESULTS_FILE)
    box = _never_blocks(lab05._triage_passed, fifo)
    assert box.get("value") == set(), box


@pytest.mark.parametrize("text", ["[" * 100_000, "\xff\xfe", "{" * 50_000 + "}" * 50_000])
def test_the_state_reader_says_what_is_wrong_in_one_line(tmp_path, text):
    p = tmp_path / "s.json"
    p.write_text(text, encoding="utf-8", errors="surrogateescape")
    with pytest.raises(TraceError) as e:
        outputs.read_state_json(p, 1 << 20, "state file")
    assert "\n" not in str(e.value) and "state file" in str(e.value)
