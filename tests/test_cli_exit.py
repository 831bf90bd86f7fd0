"""How ``python -m helpers`` ends (helpers.leave): it skips Python's teardown with ``os._exit`` once its output
is out, so nothing may be lost there: a large output to a file or a pipe arrives whole, exit statuses are kept,
exit handlers (temporary folders) still run, a thread normal exit would wait for is still waited for."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from synth import two_step_loop, write_json

from helpers.cli import main

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "data" / "communication__imbalance__cpu"  # a folder of ranks: read by worker processes when large


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # buffered, as a user's shell runs it
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _in_process(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(argv)
    return status, out.getvalue()


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return write_json(two_step_loop(), tmp_path_factory.mktemp("t") / "t.json")


@pytest.mark.parametrize("argv", [["diagnose", "--json", "{t}"], ["diagnose", "{t}"], ["summary", "{t}"],
                                  ["diagnose", "--json", str(FOLDER)]])
def test_output_to_a_file_and_a_pipe_is_whole(trace, tmp_path, argv):
    argv = [a.format(t=trace) for a in argv]
    status, expected = _in_process(argv)
    assert status == 0 and len(expected) > 100
    with open(tmp_path / "out.txt", "wb") as fh:
        r = subprocess.run([sys.executable, "-m", "helpers", *argv], stdout=fh, stderr=subprocess.PIPE, env=_env(), timeout=120)
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == expected
    r = subprocess.run([sys.executable, "-m", "helpers", *argv], capture_output=True, env=_env(), timeout=120)
    assert r.returncode == 0 and r.stdout.decode("utf-8") == expected
    if "--json" in argv:
        json.loads(r.stdout)


def test_bad_input_keeps_status_2_and_its_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "helpers", "summary", str(tmp_path / "missing.json")],
                       capture_output=True, env=_env(), timeout=120)
    assert r.returncode == 2 and r.stdout == b""
    assert r.stderr.decode().startswith("error: ") and r.stderr.count(b"\n") == 1, r.stderr


def _leave(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys, threading, time\nfrom helpers.leave import leave\n" + code],
                          capture_output=True, env=_env(), timeout=60, cwd=tmp_path)


def test_exit_handlers_run_and_their_output_arrives(tmp_path):
    """A registered temporary folder is removed (helpers.interrupts' exit handler), and what an exit handler
    prints is flushed before the process ends."""
    r = _leave(tmp_path, "import atexit, os\nfrom helpers.interrupts import register\nos.mkdir('tmpdir')\n"
                         "register(os.path.abspath('tmpdir'))\natexit.register(print, 'from an exit handler')\n"
                         "print('x' * 200000, end='')\nleave(3)")
    assert r.returncode == 3 and r.stdout == b"x" * 200000 + b"from an exit handler\n", r.stderr
    assert not (tmp_path / "tmpdir").exists()


def test_a_thread_normal_exit_waits_for_is_waited_for(tmp_path):
    r = _leave(tmp_path, "def late():\n    time.sleep(0.3)\n    open('done', 'w').close()\n"
                         "threading.Thread(target=late).start()\nleave(0)")
    assert r.returncode == 0 and (tmp_path / "done").exists(), r.stderr


@pytest.mark.parametrize(("status", "code", "stderr"), [("None", 0, b""), ("'bye'", 1, b"bye\n"), ("300", 300 % 256, b""),
                                                      ("True", 1, b"")])
def test_a_status_that_is_not_a_plain_code_exits_as_system_exit_does(tmp_path, status, code, stderr):
    r = _leave(tmp_path, f"leave({status})")
    assert r.returncode == code and r.stderr == stderr
