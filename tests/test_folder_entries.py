"""A folder of ranks whose entries named like traces are not readable files (a named pipe, a socket, a folder, a
dangling link, a file without read permission): every command that reads a folder refuses it in one line naming
the entry, without opening it (a named pipe's open waits for a writer), rather than diagnosing the job without
that rank."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

import helpers
from helpers.cli import main
from helpers.errors import TraceError
from helpers.jobs import job_files

sys.path.insert(0, str(Path(__file__).parent))
from synth import host_bound_loop, write_json  # noqa: E402

posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs, sockets and symbolic links")


def _job(tmp_path: Path) -> Path:
    d = tmp_path / "job"
    d.mkdir()
    for r in range(3):
        write_json(host_bound_loop(), d / f"rank{r}.json", rank=r, world=4)
    return d


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _folder(p: Path) -> None:
    p.mkdir()


def _dangling(p: Path) -> None:
    p.symlink_to(p.parent / "gone.json")


def _loop(p: Path) -> None:
    p.symlink_to(p.name)


def _socket(p: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(p))
    except OSError as exc:  # a path too long for a socket's address
        pytest.skip(f"cannot bind a socket here: {exc}")
    finally:
        s.close()


MAKERS = {"named pipe": _fifo, "folder": _folder, "link to nothing": _dangling, "looping link": _loop, "socket": _socket}
WORDS = {"named pipe": "named pipe", "folder": "a folder", "link to nothing": "link to nothing",
         "looping link": "link to nothing", "socket": "a socket"}
COMMANDS = [["summary"], ["diagnose"], ["ranks"], ["report", "-o", "{out}/r.html"], ["export", "-o", "{out}/e.csv"],
            ["plot", "-o", "{out}/p.png"]]


@posix_only
@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_every_folder_reader_names_an_entry_that_is_not_a_file(tmp_path, capsys, kind):
    d = _job(tmp_path)
    MAKERS[kind](d / "rank3.json")
    out = tmp_path / "out"
    out.mkdir()
    for argv in COMMANDS:
        argv = [argv[0], str(d), *(a.format(out=out) for a in argv[1:])]
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err and "rank3.json" in err and WORDS[kind] in err, (argv, err)
    assert list(out.iterdir()) == []  # nothing written
    for call in (lambda: helpers.load(d), lambda: job_files(d)):
        with pytest.raises(TraceError, match=f"rank3.json is named like a rank's trace but is .*{WORDS[kind]}"):
            call()


@posix_only
def test_several_bad_entries_are_one_line_that_counts_them(tmp_path, capsys):
    d = _job(tmp_path)
    for i, make in enumerate(MAKERS.values()):
        make(d / f"rank{3 + i}.json")
    assert main(["ranks", str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "4 more entries named like traces" in err and "rank3.json" in err


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads any file")
def test_a_rank_this_user_may_not_read_is_named(tmp_path, capsys):
    d = _job(tmp_path)
    (d / "rank1.json").chmod(0)
    assert main(["diagnose", str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert "rank1.json" in err and "may not read" in err


@posix_only
def test_entries_not_named_like_traces_are_left_alone(tmp_path, capsys):
    # a pipe or folder beside the ranks with another name (or hidden) is not a rank: the job still reads
    d = _job(tmp_path)
    os.mkfifo(d / "notes.txt")
    (d / "logs").mkdir()
    os.mkfifo(d / ".rank9.json")
    assert main(["ranks", str(d)]) == 0
    assert "3 ranks" in capsys.readouterr().out
