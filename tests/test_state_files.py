"""The files the toolkit keeps in the learner's working folder (.seals.json, .selfcheck.json) are read and written
as a user's files are: read without blocking and bounded (a named pipe of that name, a huge file, JSON nested past
the parser), never written through a link to another file, replaced whole or not at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import seal
from helpers.cli import main

ROOT = Path(__file__).resolve().parents[1]
posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and symbolic links")


@pytest.fixture(autouse=True)
def _fresh_seals():
    seal._reset()
    yield
    seal._reset()


@posix_only
def test_a_seals_file_that_links_to_a_users_file_is_never_written_through(tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("precious")
    Path(seal.SEALS_FILE).symlink_to(mine)
    seal.open_seal("lab 1 reading")
    assert mine.read_text() == "precious" and Path(seal.SEALS_FILE).is_symlink()
    assert seal.opened("lab 1 reading")  # held in this process


@posix_only
def test_a_seals_file_that_is_a_pipe_neither_blocks_reading_nor_writing(tmp_path):
    # in a child under a time limit: before, reading it (and writing it) waited for the other end for ever
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); os.mkfifo('.seals.json'); from helpers import seal\n"
            "seal.open_seal('x'); print(seal.opened('x'), seal.opened('y'))")
    r = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.split() == ["True", "False"], r.stderr


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"open": ["a"], "pad": "' + "x" * (2 << 20) + '"}',
                                  "\xff not json", '{"seals": 5, "open": {"a": 1}}'])
def test_a_damaged_seals_file_is_ignored_and_replaced_whole(text):
    Path(seal.SEALS_FILE).write_text(text, encoding="utf-8", errors="surrogateescape")
    assert not seal.opened("a")
    seal.open_seal("b")
    assert json.loads(Path(seal.SEALS_FILE).read_text()) == {"seals": [], "open": ["b"]}
    assert sorted(p.name for p in Path(".").iterdir()) == [seal.SEALS_FILE]  # no temporary file left


def test_selfcheck_results_nested_past_the_parser_are_one_line(tmp_path, capsys):
    labs = tmp_path / "labs"
    labs.mkdir()
    (labs / "00_x.ipynb").write_text("{}")
    (labs / ".selfcheck.json").write_text("[" * 100_000 + "]" * 100_000)
    assert main(["selfcheck", str(labs)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "nested too deeply" in err and "delete it" in err
