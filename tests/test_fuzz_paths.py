"""Fuzzing paths: any file name a file system takes, as the input or the output of every command.

Names are bytes (so not only UTF-8: Latin-1 leftovers, lone continuation bytes), with spaces, newlines,
quotes, ``%``/``#``/``?``, a leading ``-``, any suffix, up to and past the 255-byte limit; outputs also
land under a symbolic link to itself, a dangling link, a missing folder, an existing folder. The promise:
status 0, or one line on stderr and status 2; never a traceback; the input unchanged and nothing but
the output written; whatever is printed is printable text.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synth import two_step_loop, write_json, write_sqlite

from helpers.cli import main

pytestmark = pytest.mark.skipif(os.name != "posix" or os.path.supports_unicode_filenames,
                                reason="byte file names (POSIX)")

SUFFIXES = ["", ".json", ".json.gz", ".sqlite", ".png", ".svg", ".pdf", ".nsys-rep", ".txt", ".JSON", ".Png"]
piece = st.one_of(
    st.binary(min_size=1, max_size=24),
    st.text(min_size=1, max_size=12).map(os.fsencode),
    st.sampled_from([b"\xff", b"\xc3\xa9", b"caf\xe9", b"-rf", b" ", b"a\nb", b"%41", b"#x", b"?", b"'\"", b"\\",
                     b"x" * 250, b"y" * 300, b"\xe2\x80\xae", b"trace", b"rank3"]),
).map(lambda b: b.replace(b"/", b"_").replace(b"\0", b"_")).filter(lambda b: b not in (b".", b".."))
names = st.tuples(piece, st.sampled_from(SUFFIXES)).map(lambda t: t[0] + t[1].encode())
places = st.sampled_from(["plain", "plain", "plain", "loop", "dangling", "missing", "folder", "input"])


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("src")
    return {".json": write_json(two_step_loop(), d / "t.json"), ".sqlite": write_sqlite(two_step_loop(), d / "t.sqlite")}


def _output(root: Path, place: str, name: bytes, input_path: str) -> str:
    base = os.fsencode(root) + b"/out"
    os.mkdir(base)
    if place == "loop":
        os.symlink(b"loop", base + b"/loop")
        return os.fsdecode(base + b"/loop/" + name)
    if place == "missing":
        return os.fsdecode(base + b"/no such folder/" + name)
    try:
        if place == "dangling":
            os.symlink(b"nowhere/x", base + b"/" + name)
        if place == "folder":
            os.mkdir(base + b"/" + name)
    except OSError:  # a name the file system refuses (too long): then it is a plain output name
        pass
    if place == "input":
        return input_path
    return os.fsdecode(base + b"/" + name)


def _check(capsys, argv: list[str], root: Path, keep: dict[bytes, bytes]) -> None:
    status = main(argv)
    out, err = capsys.readouterr()
    assert status in (0, 2), (argv, status, err)
    if status == 2:
        assert err.startswith("error: ") and err.count("\n") == 1, (argv, err)
    else:
        assert err == "", (argv, err)
    for text in (out, err):
        text.encode("utf-8")  # printable: no lone surrogate reaches a terminal
    for path, data in keep.items():
        with open(path, "rb") as fh:
            assert fh.read() == data, "an input changed"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=names, out_name=names, place=places, kind=st.sampled_from([".json", ".sqlite"]),
       command=st.sampled_from(["summary", "diagnose", "diagnose --json", "export", "plot", "compare"]))
def test_any_file_name_as_input_and_output(sources, tmp_path_factory, capsys, name, out_name, place, kind, command):
    root = tmp_path_factory.mktemp("p")
    os.mkdir(os.fsencode(root) + b"/in")
    src = os.fsencode(root) + b"/in/" + name
    try:
        shutil.copyfile(sources[kind], src)
    except OSError:  # a name the file system refuses (too long): the command must say so itself
        pass
    trace = os.fsdecode(src)
    keep = {src: Path(os.fsdecode(src)).read_bytes()} if os.path.isfile(src) else {}
    out = _output(root, place, out_name, trace)
    argv = {"summary": ["summary", trace], "diagnose": ["diagnose", trace], "diagnose --json": ["diagnose", trace, "--json"],
            "export": ["export", trace, "-o", out], "plot": ["plot", trace, "-o", out],
            "compare": ["compare", trace, trace, "-o", out]}[command]
    _check(capsys, argv, root, keep)


@pytest.mark.parametrize("command", ["export", "plot", "compare"])
def test_an_output_under_a_symlink_to_itself(sources, tmp_path, capsys, command):
    (tmp_path / "loop").symlink_to("loop")
    src = str(sources[".json"])
    out = str(tmp_path / "loop" / ("x.json" if command == "export" else "x.png"))
    argv = {"export": ["export", src, "-o", out], "plot": ["plot", src, "-o", out], "compare": ["compare", src, src, "-o", out]}
    assert main(argv[command]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and "itself" in err and err.count("\n") == 1, err


def test_an_input_that_is_a_symlink_to_itself(tmp_path, capsys):
    (tmp_path / "loop").symlink_to("loop")
    for path in (tmp_path / "loop", tmp_path / "loop" / "t.json"):
        assert main(["summary", str(path)]) == 2
        err = capsys.readouterr().err
        assert "symbolic link" in err and "no such file" not in err, err


@pytest.mark.parametrize("command", ["plot", "compare", "export", "diagnose"])
def test_a_file_name_that_is_not_utf8(sources, tmp_path, capsys, command):
    name = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9 \xff.json")
    shutil.copyfile(sources[".json"], name)
    out = os.fsdecode(os.fsencode(tmp_path) + (b"/out\xff.json" if command == "export" else b"/out\xff.png"))
    argv = {"plot": ["plot", name, "-o", out], "compare": ["compare", name, name, "-o", out],
            "export": ["export", name, "-o", out], "diagnose": ["diagnose", name, "--json"]}[command]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "\\xff" in captured.out and "\udcff" not in captured.out
    if command != "diagnose":
        assert os.path.isfile(out)
