"""SIGKILL (the out-of-memory killer, kill -9) cannot be caught, so a killed command's temporary output stays in
the user's folder and its decompressed copy in $TMPDIR. Each such name carries its maker's host and process id,
and the next command that writes there removes the ones whose process is gone (after a grace period), and only
those: a live command's, another host's, a recent one's or another user's are kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from synth import host_bound_loop, write_json

from helpers import interrupts
from helpers.interrupts import STALE_AFTER_S, owned_prefix, sweep_stale
from helpers.outputs import TEMP_PREFIX, TEMP_SUFFIX, write_output

ROOT = Path(__file__).resolve().parents[1]
posix_only = pytest.mark.skipif(os.name != "posix", reason="needs SIGKILL")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


HOST = owned_prefix("")[:-1].rsplit("-", 1)[0]  # this host's name as temporary names carry it


def _old(path: Path) -> Path:
    t = time.time() - STALE_AFTER_S - 60
    os.utime(path, (t, t), follow_symlinks=False)
    return path


@posix_only
def test_a_killed_writers_partial_file_is_removed_by_the_next_write(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # a writer killed mid-write: its partial file stays
    code = ("import os, signal, sys; sys.path.insert(0, sys.argv[2]); from helpers.outputs import write_output\n"
            "def w(fh):\n    fh.write(b'x' * 1000); fh.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
            "write_output(sys.argv[1], w)")
    r = subprocess.run([sys.executable, "-c", code, str(out / "e.json"), str(ROOT)], timeout=60)
    assert r.returncode == -signal.SIGKILL
    left = [p for p in out.iterdir() if p.name.startswith(TEMP_PREFIX)]
    assert len(left) == 1 and not (out / "e.json").exists()
    write_output(out / "a.json", lambda fh: fh.write(b"{}"))
    assert left[0].exists()  # within the grace period: kept
    _old(left[0])
    write_output(out / "b.json", lambda fh: fh.write(b"{}"))
    assert sorted(p.name for p in out.iterdir()) == ["a.json", "b.json"]


def test_only_a_dead_process_of_this_host_loses_its_files(tmp_path):
    dead = _dead_pid()
    host = HOST
    names = {f"{TEMP_PREFIX}{host}-{dead}-old{TEMP_SUFFIX}": False,  # removed
             f"{TEMP_PREFIX}{host}-{os.getpid()}-alive{TEMP_SUFFIX}": True,
             f"{TEMP_PREFIX}otherhost-{dead}-old{TEMP_SUFFIX}": True,
             f"{TEMP_PREFIX}{host}-{dead}-old.json": True,  # not a temporary name
             f"{TEMP_PREFIX}partial-by-hand{TEMP_SUFFIX}": True}
    for n in names:
        (tmp_path / n).write_bytes(b"x")
        _old(tmp_path / n)
    recent = tmp_path / f"{TEMP_PREFIX}{host}-{dead}-new{TEMP_SUFFIX}"
    recent.write_bytes(b"x")
    names[recent.name] = True
    assert sweep_stale(tmp_path, TEMP_PREFIX, TEMP_SUFFIX) == [n for n, kept in names.items() if not kept]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n, kept in names.items() if kept)


def test_a_killed_readers_temporary_folder_is_removed_from_tmpdir(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = _dead_pid()
    stale = tmp_path / f"helpers-{HOST}-{dead}-abc"
    stale.mkdir()
    (stale / "t.sqlite").write_bytes(b"x" * 100)
    _old(stale)
    with interrupts.temporary_dir() as made:
        assert made.name.startswith(owned_prefix("helpers-"))
    assert list(tmp_path.iterdir()) == []


def test_the_cli_writes_under_an_owned_name(tmp_path, monkeypatch):
    from helpers.cli import main

    t = write_json(host_bound_loop(), tmp_path / "t.json")
    seen = []
    real = tempfile.mkstemp
    monkeypatch.setattr(tempfile, "mkstemp", lambda *a, **k: seen.append(k.get("prefix")) or real(*a, **k))
    assert main(["export", str(t), "-o", str(tmp_path / "e.json")]) == 0
    assert seen == [owned_prefix(TEMP_PREFIX)]


def test_the_seals_files_partial_copy_is_owned_and_swept(tmp_path):
    from helpers import seal

    dead = _dead_pid()
    stale = tmp_path / f".seals-{HOST}-{dead}-x.partial"
    stale.write_text("{}")
    _old(stale)
    seal._reset()
    try:
        seal.open_seal("lab 1 reading")
    finally:
        seal._reset()
    assert sorted(p.name for p in tmp_path.iterdir()) == [seal.SEALS_FILE]
