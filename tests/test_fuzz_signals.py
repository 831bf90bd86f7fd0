"""Fuzzing the moment a signal lands: SIGTERM, SIGHUP or Ctrl-C at any Python call of a command.

The promise, wherever it lands: the command ends with status 0 (it had finished) or 128 + the signal's
number and one line on stderr; no ``.partial`` file, no temporary copy and no half-written output is
left, and the input is unchanged. In-process (a profiler counts Python calls and sends the signal to
this process at the N-th, N drawn by hypothesis), so a failure reproduces; one subprocess test sends
real signals from outside at random moments.
"""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synth import two_step_loop, write_json, write_sqlite

from helpers import interrupts
from helpers.cli import main

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")

SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    src = write_json(two_step_loop(), d / "t.json")
    sq = write_sqlite(two_step_loop(), d / "t.sqlite")
    with open(sq, "rb") as a, gzip.open(d / "t.sqlite.gz", "wb") as b:
        shutil.copyfileobj(a, b)
    return {"json": src, "sqlite_gz": d / "t.sqlite.gz"}


COMMANDS = ["export", "summary_sqlite_gz", "plot"]


@pytest.fixture(scope="module")
def calls(inputs, tmp_path_factory):
    """How many Python calls each command makes under the handlers (counted once), so that the moment
    drawn falls anywhere in its run."""
    counts = {}
    for name in COMMANDS:
        seen = 0

        def profile(frame, event, arg):
            nonlocal seen
            if event == "call" and interrupts._state["active"]:
                seen += 1
        argv, _ = _command(name, inputs, tmp_path_factory.mktemp("count"))
        sys.setprofile(profile)
        try:
            assert main(argv) == 0
        finally:
            sys.setprofile(None)
        counts[name] = seen
    return counts


def _signal_at_call(n: int, sig: int):
    """A profiler that sends ``sig`` to this process at the n-th Python call made while the command's
    handlers are in place (never outside them, where the signal would stop the test run itself)."""
    seen = 0

    def profile(frame, event, arg):
        nonlocal seen
        if event == "call" and interrupts._state["active"]:
            seen += 1
            if seen == n:
                sys.setprofile(None)
                os.kill(os.getpid(), sig)
    return profile


def _run_with_signal(argv: list[str], n: int, sig: int, capsys) -> tuple[int, str]:
    sys.setprofile(_signal_at_call(n, sig))
    try:
        status = main(argv)
    finally:
        sys.setprofile(None)
    return status, capsys.readouterr().err


def _command(name: str, inputs: dict, out: Path) -> tuple[list[str], Path | None]:
    if name == "export":
        return ["export", str(inputs["json"]), "-o", str(out / "x.json")], out / "x.json"
    if name == "plot":
        return ["plot", str(inputs["json"]), "-o", str(out / "x.png")], out / "x.png"
    return ["summary", str(inputs["sqlite_gz"])], None


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(COMMANDS), sig=st.sampled_from(SIGNALS), where=st.floats(0, 1.05))
def test_a_signal_anywhere_leaves_nothing_behind(inputs, calls, tmp_path_factory, monkeypatch, capsys, command, sig, where):
    out = tmp_path_factory.mktemp("out")
    temp = tmp_path_factory.mktemp("tmp")
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    before = {p: p.read_bytes() for p in inputs.values()}
    argv, product = _command(command, inputs, out)
    status, err = _run_with_signal(argv, max(1, int(where * calls[command])), sig, capsys)
    assert status in (0, 128 + sig), (status, err)
    if status:
        assert err.startswith("error: stopped by") and err.count("\n") == 1, err
        assert sorted(out.iterdir()) == [], "an interrupted command left files in the output folder"
    else:
        assert product is None or sorted(out.iterdir()) == [product]
    assert list(temp.iterdir()) == [], "a temporary copy was left behind"
    assert not interrupts._registered
    assert {p: p.read_bytes() for p in inputs.values()} == before


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # buffered, as a user's shell is
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.parametrize("sig", SIGNALS)
def test_real_signals_from_outside_at_random_moments(inputs, tmp_path, sig):
    """What a user's Ctrl-C (to the whole process group) or a scheduler's kill does, at whatever moment."""
    import random

    rng = random.Random(sig)
    for i in range(3):
        out = tmp_path / f"out{i}"
        out.mkdir()
        temp = tmp_path / f"tmp{i}"
        temp.mkdir()
        proc = subprocess.Popen([sys.executable, "-m", "helpers", "export", str(inputs["json"]), "-o", str(out / "x.json")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env={**_env(), "TMPDIR": str(temp)})
        time.sleep(rng.uniform(0.4, 1.5))  # after the interpreter's own start, which no program can guard
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode in (0, 128 + sig) and "Traceback" not in err, (proc.returncode, err)
        if proc.returncode:
            assert err.startswith("error: stopped by") and err.count("\n") == 1, err
        assert [p.name for p in out.iterdir()] in ([], ["x.json"]) and list(temp.iterdir()) == []


def test_a_signal_after_the_output_is_in_place_still_leaves_nothing(inputs, tmp_path, monkeypatch, capsys):
    """The race hypothesis found once: a signal landing after the output was put in place, before the command
    ended. The command says it was stopped, so the output it made goes too (a user's earlier file never does)."""
    from helpers import outputs

    real = outputs._commit

    def then_signalled(*args, **kwargs):
        real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # held until the commit's section ends, then raised

    monkeypatch.setattr(outputs, "_commit", then_signalled)
    argv, _ = _command("export", inputs, tmp_path)
    assert main(argv) == 128 + signal.SIGTERM
    assert capsys.readouterr().err.startswith("error: stopped by")
    assert sorted(tmp_path.iterdir()) == []
