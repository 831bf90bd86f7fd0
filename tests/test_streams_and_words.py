"""The command line's own promises about where its words go: stdout a closed pipe or a full disk,
stderr gone, text a terminal cannot show, a working folder deleted under it, a full $TMPDIR.

Subprocess tests run without PYTHONUNBUFFERED, as a user's shell does: with it set, Python writes each
line at once and the exit-time flush that fails on a closed pipe never happens.
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from synth import two_step_loop, write_json, write_sqlite

from helpers.cli import main

ROOT = Path(__file__).resolve().parents[1]
linux_only = pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return write_json(two_step_loop(), tmp_path_factory.mktemp("t") / "t.json")


def _run(argv: list[str], stdout, stderr=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "helpers", *argv], stdout=stdout, stderr=stderr, env=_env(),
                          timeout=120)


@pytest.mark.parametrize("argv", [["summary", "{t}"], ["--help"]])
def test_stdout_a_closed_pipe_is_quiet(trace, argv):
    read, write = os.pipe()
    os.close(read)  # the reader went away before the command wrote a byte (| head -0)
    try:
        r = _run([a.format(t=trace) for a in argv], stdout=write)
    finally:
        os.close(write)
    assert r.returncode == 0 and r.stderr == b"", r.stderr  # not exit 120 / "Exception ignored ... BrokenPipeError"


@linux_only
def test_stdout_on_a_full_disk_is_one_line(trace):
    with open("/dev/full", "wb") as full:
        r = _run(["summary", str(trace)], stdout=full)
    err = r.stderr.decode()
    assert r.returncode == 2 and err.startswith("error: cannot write to standard output") and err.count("\n") == 1, err


@linux_only
def test_an_error_with_stderr_on_a_full_disk_still_exits_2(tmp_path):
    with open("/dev/full", "wb") as full:
        r = _run(["summary", str(tmp_path / "missing.json")], stdout=subprocess.PIPE, stderr=full)
    assert r.returncode == 2 and r.stdout == b""


class _Broken(io.StringIO):
    """A stdout whose writes fail as a closed pipe's or a full disk's do, at write or only at flush."""

    def __init__(self, error: OSError, at: str) -> None:
        super().__init__()
        self.error, self.at = error, at

    def write(self, text):
        if self.at == "write":
            raise self.error
        return super().write(text)

    def flush(self):
        raise self.error


@pytest.mark.parametrize("at", ["write", "flush"])
@pytest.mark.parametrize("argv", [["summary", "{t}"], ["diagnose", "{t}", "--json"], ["compare", "{t}", "{t}"],
                                  ["doctor", str(ROOT / "labs")], ["selfcheck", str(ROOT / "labs")], ["--help"],
                                  ["plot", "--help"]])
def test_every_command_on_a_broken_stdout(trace, monkeypatch, capsys, argv, at):
    """Each command, its output lost at write or at the flush the exit would have done: status 0 and
    nothing on stderr for a closed pipe, one line and status 2 for a full disk; never an exception."""
    argv = [a.format(t=trace) for a in argv]
    monkeypatch.setattr(sys, "stdout", _Broken(BrokenPipeError(errno.EPIPE, "Broken pipe"), at))
    assert main(argv) == 0 and capsys.readouterr().err == ""
    monkeypatch.setattr(sys, "stdout", _Broken(OSError(errno.ENOSPC, "No space left on device"), at))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write to standard output (No space left") and err.count("\n") == 1, err


def test_text_the_terminal_cannot_show_is_escaped_not_a_traceback(trace, tmp_path):
    odd = tmp_path / "bad\udcff ✓.json"  # a name that is not UTF-8, and a character ASCII lacks
    shutil.copy(trace, odd)
    r = subprocess.run([sys.executable, "-m", "helpers", "summary", str(odd) + "x"], capture_output=True,
                       env={**_env(), "PYTHONIOENCODING": "ascii"}, timeout=120)
    assert r.returncode == 2 and b"Traceback" not in r.stderr and b"bad\\xff \\u2713.jsonx" in r.stderr, r.stderr


def test_a_deleted_working_folder_is_said(tmp_path, monkeypatch, capsys):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert main(["summary", "t.json"]) == 2
    err = capsys.readouterr().err
    assert "current folder no longer exists" in err and "cannot write" not in err and err.count("\n") == 1, err
    import helpers
    from helpers import TraceError

    with pytest.raises(TraceError, match="current folder no longer exists"):
        helpers.load("t.json")


def test_a_full_tmpdir_while_decompressing_an_export_is_said(tmp_path, monkeypatch, capsys):
    from helpers import readers

    sq = write_sqlite(two_step_loop(), tmp_path / "t.sqlite")
    gz = tmp_path / "t.sqlite.gz"
    with open(sq, "rb") as a, gzip.open(gz, "wb") as b:
        shutil.copyfileobj(a, b)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))

    class Full(io.BytesIO):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    real_open = open
    monkeypatch.setattr(readers, "open", lambda p, mode="r", *a, **k: Full() if "w" in mode else real_open(p, mode, *a, **k),
                        raising=False)
    assert main(["summary", str(gz)]) == 2
    err = capsys.readouterr().err
    assert "cannot decompress it into the temporary folder" in err and "No space left" in err and "TMPDIR" in err, err
    assert "cannot write the output" not in err and list(temp.iterdir()) == []


def test_the_command_line_takes_signals_before_the_heavy_imports():
    """``import helpers`` stays light (its names load on first use), so ``python -m helpers`` has its
    signal handlers in place before pandas, numpy and matplotlib load: a Ctrl-C in that second is one line."""
    code = "import sys, helpers; print(sorted(m for m in ('pandas', 'numpy', 'matplotlib', 'torch') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr
    import helpers

    assert callable(helpers.load) and callable(helpers.critical_path) and helpers.metrics.summary
