"""Readers: turn a file or folder into a :class:`helpers.model.Trace`.

The format is recognised from the content (gzip, SQLite and JSON magic), not from the file name.
"""

from __future__ import annotations

import codecs
import contextlib
import itertools
import math
import multiprocessing
import os
import re
import shutil
import stat
import subprocess
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from ..errors import TraceError
from ..interrupts import temporary_dir
from ..model import MAX_RANK, MAX_TIME_US, Trace, assign_steps, build_events, check_step_pattern, find_steps, times_problem
from ..outputs import open_regular, size_words
from ..paths import unreachable, working_folder
from ..procs import Hung, last_line, run_bounded, worker_pool
from . import kineto  # (nsys, and sqlite3 with it, imported where an Nsight Systems file is read)
from .budget import Budget, charge_bytes

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite3", ".db", ".sqlite.gz", ".nsys-rep")
# Limits that keep a hostile or mistaken input from exhausting memory; both can be raised
# (CLI --max-mb / --max-events, API max_bytes= / max_events=). The course's largest benchmark trace,
# 2M events, is about 400 MB of JSON: the defaults admit it with room to spare. The JSON is streamed
# into columns (kineto.parse_stream), so reading costs about 260 bytes an event at the peak (2M events:
# 0.52 GB for diagnose, docs/benchmarks.md); 4M events is about 1.1 GB.
MAX_BYTES = 1 << 30
MAX_EVENTS = 4_000_000
# A folder whose trace files add up to more than this (on disk) is read by several processes at once;
# below it, starting the processes costs more than it saves.
_PARALLEL_FROM_BYTES = 8 << 20
#: Seconds ``nsys export`` may take to turn a report into SQLite before it is stopped (its process group
#: killed, the temporary folder removed): the course's reports export in seconds, and five minutes leaves
#: room for reports of gigabytes; a hung nsys is not waited on.
NSYS_EXPORT_TIMEOUT_S = 300.0
#: ... and seconds it may go without using any CPU (the whole process group's) before it is taken as hung:
#: an export reads, converts and writes, all of it CPU work; a tool waiting on something that never comes
#: (a licence prompt, a lock, a daemon) uses none. See procs.run_bounded.
NSYS_EXPORT_IDLE_S = 10.0
_CHUNK = 4 << 20  # bytes read (or decompressed) at a time


def load(path: str | os.PathLike, step_pattern: str | None = None, *, max_bytes: int = MAX_BYTES,
         max_events: int = MAX_EVENTS) -> Trace:
    """Read a PyTorch-profiler trace, a folder of per-rank traces, or an Nsight Systems export.

    Accepted: ``.json`` / ``.json.gz`` from torch.profiler, ``.sqlite`` (also gzipped) from
    ``nsys export --type sqlite``, and ``.nsys-rep`` when ``nsys`` is on PATH.
    ``step_pattern`` is a regular expression for the annotation ranges that mark training steps
    (default: ``ProfilerStep#N``, else ranges named like ``step 3``). Inputs over ``max_bytes``
    (after decompression) or ``max_events`` are refused. Inputs are only ever read.
    Raises :class:`TraceError` with a one-line explanation for anything it cannot read.
    """
    p = _as_path(path)
    max_bytes, max_events = limit(max_bytes, "max_bytes"), limit(max_events, "max_events")
    step_pattern = check_step_pattern(step_pattern)
    try:
        is_dir = p.is_dir()
        exists = is_dir or p.exists()
    except OSError as exc:
        raise TraceError(f"{p}: cannot be examined ({exc.strerror}); check the path") from None
    if not exists:
        why = unreachable(p)
        if why:
            raise TraceError(f"{p}: {why}")
        folder = working_folder()
        if folder is None and not p.is_absolute():
            raise TraceError(f"{p}: not found, and the current folder no longer exists (it was deleted or moved), so "
                             "no relative path can be found; cd into a folder that exists, or give the full path")
        raise TraceError(f"{p}: no such file or folder; check the path (relative paths start at {folder})")
    from ..stamps import stamp_if_made  # a file a tool of this process made is stamped so (helpers.stamps)

    if is_dir:
        return stamp_if_made(_load_directory(p, step_pattern, max_bytes, max_events))
    events, metadata, fmt = read_file(p, max_bytes, max_events)
    steps = find_steps(events, step_pattern)
    _refuse_unmatched_pattern(p, events, steps, step_pattern)
    assign_steps(events, steps)
    metadata["steps"] = steps
    return stamp_if_made(Trace(events, str(p), fmt, metadata))


def read_file(p: Path, max_bytes: int = MAX_BYTES, max_events: int = MAX_EVENTS, *,
              table: bool = True, budget: Budget | None = None) -> tuple[pd.DataFrame | dict, dict, str]:
    """Read one file into (events, metadata, format name) without step labelling.

    ``table=False`` lets a Kineto file come back as build_events' columns (see kineto.parse_stream).
    ``budget`` counts what is decoded against a folder's limits as well as the file's own (:mod:`.budget`).
    An event whose times are beyond :data:`helpers.model.MAX_TIME_US` is refused, whatever the format.
    """
    events, metadata, fmt = _read_file(p, max_bytes, max_events, table=table, budget=budget)
    origin = metadata.get("origin_us") if isinstance(metadata, dict) else None
    if isinstance(origin, float) and not abs(origin) < MAX_TIME_US and len(events["name"]):
        # the times are kept from the first event's start: a damaged first start (-1e308) put every other event past
        # the limit, and the check below named one of those, not the event whose clock is damaged
        first = int(np.argmin(np.asarray(events["start_us"], dtype="float64")))
        raise TraceError(f"{p}: event {str(np.asarray(events['name'], dtype=object)[first])[:40]!r} has start {origin:.4g} us, "
                         f"beyond {MAX_TIME_US:.3g} us (146 years): its clock is damaged; record or export the trace again")
    _refuse_damaged_times(events, p)
    return events, metadata, fmt


def _refuse_unmatched_pattern(p: Path, events: pd.DataFrame, steps: pd.DataFrame, pattern: str | None) -> None:
    """A step pattern the user gave that names no range of the trace is refused: the figures were silently taken
    over the whole capture as if the trace had no steps ('--steps tran_step', a typo, gave '0 steps')."""
    if pattern is None or len(steps) or not len(events):
        return
    names = pd.unique(events.loc[events["kind"] == "annotation", "name"].astype(str))
    shown = ", ".join(repr(n[:30]) for n in names[:5]) + (", ..." if len(names) > 5 else "")
    raise TraceError(f"{p}: the step pattern {pattern[:60]!r} matches no range of the trace ("
                     + (f"its ranges: {shown}" if len(names) else "it has no annotation ranges")
                     + "); give a pattern of the ranges that mark a step, or leave it out to have the steps found")


def rank_in_name(path: Path) -> int | None:
    """The rank a file's name gives (``rank3.json``, ``trace_rank-12.json.gz``), or None; a number beyond
    any rank is refused."""
    m = _RANK_IN_NAME.search(path.name)
    if m is None:
        return None
    if len(m.group(1)) > 10 or int(m.group(1)) > MAX_RANK:
        raise TraceError(f"{path}: its name says rank {m.group(1)[:24]}, beyond any job's ranks (at most "
                         f"{MAX_RANK:,}); name the file by its real rank (rank3.json)")
    return int(m.group(1))


def _read_file(p: Path, max_bytes: int, max_events: int, *, table: bool,
               budget: Budget | None = None) -> tuple[pd.DataFrame | dict, dict, str]:
    max_bytes, max_events = limit(max_bytes, "max_bytes"), limit(max_events, "max_events")
    try:
        with _open(p) as fh:  # judged on the open file: a path swapped for a FIFO after a check cannot block
            info = os.fstat(fh.fileno())
            head = fh.read(16)
    except OSError as exc:
        raise TraceError(f"{p}: cannot be read ({exc.strerror}); check the path and its permissions") from None
    if p.suffix in (".nsys-rep", ".qdrep"):
        return _read_nsys_report(p, max_bytes, max_events, budget)
    if not head:
        raise TraceError(f"{p}: the file is empty; record the trace again (did the profiled run finish?)")
    if head.startswith(SQLITE_MAGIC):
        from . import nsys

        events, metadata = nsys.read(p, max_events, max_bytes, budget=budget)
        return events, metadata, "nsys-sqlite"
    if head.startswith(GZIP_MAGIC):
        blocks = _gunzip_blocks(p, max_bytes, budget)
        first = _take(blocks, len(SQLITE_MAGIC))
        if not first:
            raise TraceError(f"{p}: the gzip file is whole but holds nothing (it decompresses to 0 bytes: an empty file "
                             "was compressed); record the trace again (did the profiled run finish?)")
        if first.startswith(SQLITE_MAGIC):
            return _read_sqlite_blocks(p, itertools.chain((first,), blocks), max_events, budget)
        size_hint = _gzip_size_hint(p, info.st_size)

        def again() -> Iterator[bytes]:
            return _gunzip_blocks(p, max_bytes, budget)
    else:
        if p.suffix in (".sqlite", ".sqlite3", ".db"):
            raise TraceError(
                f"{p}: named like an SQLite database but is not one; "
                "make it with: nsys export --type sqlite -o OUT.sqlite REPORT.nsys-rep"
            )
        if info.st_size > max_bytes:
            raise TraceError(f"{p}: {size_words(info.st_size)}, over the limit of {size_words(max_bytes)}; "
                             "raise it with --max-mb (API: max_bytes=) if the trace is really this big")
        blocks = _file_blocks(p, max_bytes, budget)  # the limit holds for the bytes read, not only the size stat() gave
        first = _take(blocks, 4)
        size_hint = info.st_size

        def again() -> Iterator[bytes]:
            return _file_blocks(p, max_bytes, budget)
    # JSON: read as a stream of blocks, never whole (kineto.parse_stream); a large one by two processes when
    # the machine has a core free (a folder's ranks are read by processes of their own already).
    events, metadata = kineto.parse_stream(_json_text(first, blocks, p), p, max_events, table=table, budget=budget,
                                           reopen=(lambda: _json_text(b"", again(), p)) if table else None,
                                           size_hint=size_hint)
    return events, metadata, "kineto"


def _open(p: Path) -> BinaryIO:
    """The one way a reader opens a trace file: never blocking, judged on the open descriptor
    (:func:`helpers.outputs.open_regular`); every read of a trace's bytes, first or again, goes through here."""
    try:
        return open_regular(p, "trace", "save the trace to a file and pass that")
    except FileNotFoundError:
        raise TraceError(f"{p}: no longer exists (it was moved or deleted while it was read); check the path") from None


def _json_text(first: bytes, blocks: Iterator[bytes], p: Path) -> Iterator[bytes]:
    """The JSON document's bytes as UTF-8 (``first``: what was already taken of ``blocks``), checked to open
    like a trace: an object, or Chrome's bare array of events."""
    if len(first) < 4:
        first += _take(blocks, 4 - len(first))
    if first[:4] == b"\0\0\0\0":  # no text, in any encoding, starts so: zeros (a file allocated and never written)
        raise TraceError(f"{p}: starts with NUL bytes where a trace's text should be: the file was padded with zeros or "
                         "never fully written (a crash mid-write, a preallocated copy); record or copy it again")
    first, blocks = _as_utf8(first, blocks, p)
    while not first.strip() and (more := _take(blocks, 1)):  # leading whitespace of any length
        first += more
    if first.lstrip()[:1] not in (b"{", b"["):  # an object with traceEvents, or Chrome's bare JSON array
        raise TraceError(
            f"{p}: not a PyTorch-profiler trace (JSON) or an Nsight Systems SQLite export; "
            "pass a *.json / *.json.gz from torch.profiler or a *.sqlite from nsys export"
        )
    return itertools.chain((first,), blocks)


def _gzip_size_hint(p: Path, size: int) -> int:
    """About how many bytes a gzip file expands to: its last member's recorded size (mod 4 GiB), at least the
    compressed size. Only a hint (for how a document is read), never a limit."""
    try:
        with _open(p) as fh:
            fh.seek(max(size - 4, 0))
            tail = fh.read(4)
    except (OSError, TraceError):
        return size
    return max(int.from_bytes(tail, "little"), size) if len(tail) == 4 else size


def _refuse_damaged_times(events: pd.DataFrame, p: Path) -> None:
    problem = times_problem(events)
    if problem:
        raise TraceError(f"{p}: {problem}; record or export the trace again")


def limit(value: object, name: str) -> int:
    """A size limit as a positive whole number; NaN, infinity, zero, negatives and non-numbers are refused,
    so a limit can be raised but never switched off by accident (NaN compares false with everything)."""
    if isinstance(value, (bool, np.timedelta64)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TraceError(f"{name}={value!r}: give a positive number")  # (a timedelta64 is an np.integer)
    if not math.isfinite(value) or value < 1:
        raise TraceError(f"{name}={value!r}: give a positive, finite number (a limit cannot be switched off)")
    return int(value)


def _as_path(path: object) -> Path:
    """``str``, ``bytes`` and ``os.PathLike`` paths; an open file or anything else is refused in one line."""
    if isinstance(path, (str, bytes, os.PathLike)):
        try:
            return Path(os.fsdecode(path))
        except (TypeError, ValueError) as exc:
            raise TraceError(f"{path!r}: not a usable path ({exc})") from None
    if hasattr(path, "read"):
        raise TraceError(f"{path!r}: an open file; pass its path instead (helpers.load(\"trace.json\"))")
    raise TraceError(f"{path!r}: not a path; pass the trace's file or folder name as a string or Path")


def _take(blocks: Iterator[bytes], at_least: int) -> bytes:
    """The next blocks of ``blocks``, joined, until there are ``at_least`` bytes or no more."""
    out = b""
    for block in blocks:
        out += block
        if len(out) >= at_least:
            break
    return out


def _file_blocks(p: Path, max_bytes: int, budget: Budget | None = None) -> Iterator[bytes]:
    """The file's bytes in chunks; a file that grows past ``max_bytes`` while it is read is refused."""
    total = 0
    try:
        with _open(p) as fh:
            while block := fh.read(min(_CHUNK, max_bytes + 1 - total)):
                total += len(block)
                if total > max_bytes:
                    raise TraceError(f"{p}: grew past the limit of {size_words(max_bytes)} while it was read; "
                                     "let the program writing it finish, or raise the limit with --max-mb (API: max_bytes=)")
                charge_bytes(budget, len(block))
                yield block
    except OSError as exc:
        raise TraceError(f"{p}: cannot be read ({exc.strerror}); check its permissions") from None


def _as_utf8(first: bytes, blocks: Iterator[bytes], p: Path) -> tuple[bytes, Iterator[bytes]]:
    """JSON text as UTF-8 without a byte-order mark (editors on Windows write BOMs and UTF-16).

    ``first`` is the stream's first bytes (at least 4 unless the stream is shorter), ``blocks`` the rest.
    """
    if first.startswith(b"\xef\xbb\xbf"):
        return first[3:], blocks
    if first.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")) or (len(first) >= 4 and (
            first[1:4] == b"\x00\x00\x00" or first[:3] == b"\x00\x00\x00")):  # UTF-32 (before UTF-16: its BOM starts so)
        codec = "utf-32" if first.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")) else (
            "utf-32-be" if first[0] == 0 else "utf-32-le")
        utf8 = _utf16_as_utf8(itertools.chain((first,), blocks), codec, p)
        return _take(utf8, 4), utf8
    if first.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(first) > 1 and (first[0] == 0) != (first[1] == 0)):
        codec = "utf-16" if first.startswith((b"\xff\xfe", b"\xfe\xff")) else ("utf-16-be" if first[0] == 0 else "utf-16-le")
        utf8 = _utf16_as_utf8(itertools.chain((first,), blocks), codec, p)
        return _take(utf8, 4), utf8
    return first, blocks


def _utf16_as_utf8(blocks: Iterator[bytes], codec: str, p: Path) -> Iterator[bytes]:
    """UTF-16 (or UTF-32) blocks re-encoded as UTF-8 block by block (a character split between two blocks is kept
    for the next), so a UTF-16 trace streams like any other and is never held whole."""
    decoder = codecs.getincrementaldecoder(codec)()
    try:
        for block in blocks:
            if text := decoder.decode(block):
                yield text.encode("utf-8")
        if text := decoder.decode(b"", final=True):
            yield text.encode("utf-8")
    except UnicodeError:
        raise TraceError(f"{p}: looks like {codec[:6].upper()} text but does not decode as such; save it as UTF-8") from None


def _gunzip_blocks(p: Path, max_bytes: int, budget: Budget | None = None) -> Iterator[bytes]:
    """Decompress in bounded chunks: a gzip bomb stops at ``max_bytes`` instead of filling memory."""
    total = 0
    d = zlib.decompressobj(wbits=31)
    try:
        with _open(p) as fh:
            data = fh.read(_CHUNK)
            while data:
                out = d.decompress(data, min(_CHUNK, max_bytes + 1 - total))  # never 0, which would mean unbounded
                total += len(out)
                if total > max_bytes:
                    raise TraceError(
                        f"{p}: expands to over {size_words(max_bytes)}; if the trace is really this big "
                        "raise the limit with --max-mb (API: max_bytes=)")
                if out:
                    charge_bytes(budget, len(out))
                    yield out
                data = d.unconsumed_tail
                if d.eof:  # another gzip member may follow; what else may is _after_members'
                    data = d.unused_data + fh.read(_CHUNK)
                    if not data.startswith(GZIP_MAGIC):
                        _after_members(p, data, fh)
                        break
                    d = zlib.decompressobj(wbits=31)
                elif not data:
                    data = fh.read(_CHUNK)
        if not d.eof:
            raise EOFError("the compressed data ends early")
    except (EOFError, zlib.error) as exc:
        raise TraceError(
            f"{p}: the gzip data is broken ({exc}); the file was probably cut short: copy or record it again"
        ) from None
    except OSError as exc:
        raise TraceError(f"{p}: cannot be read ({exc.strerror}); check its permissions") from None


def _after_members(p: Path, data: bytes, fh: BinaryIO) -> None:
    """What follows a gzip file's last member (``data``, then the rest of ``fh``), judged as gzip(1) judges it:
    nothing, or zero bytes to the end (tape and block padding), is accepted silently; anything else is refused
    (``gzip -t`` says "decompression OK, trailing garbage ignored" and exits 2, a warning, so a script stops;
    here it is one line, since bytes that are not the trace could be a second file appended by mistake or a
    damaged member, and a trace read without them could be the wrong one). Zeros followed by more gzip
    members are garbage to gzip(1) too."""
    at = fh.tell() - len(data)  # where ``data`` starts in the file
    while data:
        if data.strip(b"\0"):
            at += len(data) - len(data.lstrip(b"\0"))
            raise TraceError(f"{p}: after the end of its gzip data, from byte {at:,} on, come bytes that are not gzip "
                             "(gzip -t calls them trailing garbage): two files joined, or a damaged copy; copy or "
                             "record it again")
        at += len(data)
        data = fh.read(_CHUNK)


def _read_sqlite_blocks(p: Path, blocks: Iterator[bytes], max_events: int = MAX_EVENTS,
                        budget: Budget | None = None) -> tuple[pd.DataFrame, dict, str]:
    """A gzipped SQLite export: decompressed block by block into a private temporary copy (never beside
    the input, never whole in memory), and read from there."""
    from . import nsys

    with _scratch(p, "decompress it") as tmp:  # mode 0700: private to this user
        copy = tmp / "trace.sqlite"
        try:
            with open(copy, "wb") as out:
                for block in blocks:
                    out.write(block)
        except OSError as exc:
            raise TraceError(f"{p}: cannot decompress it into the temporary folder {tmp.parent} ({exc.strerror}); "
                             "free some space there, or point TMPDIR at a disk with room") from None
        events, metadata = _renamed(lambda: nsys.read(copy, max_events, budget=budget, charged=True), copy, p)
    return events, metadata, "nsys-sqlite"


def _read_nsys_report(p: Path, max_bytes: int, max_events: int,
                      budget: Budget | None = None) -> tuple[pd.DataFrame, dict, str]:
    from . import nsys

    exe = shutil.which("nsys")
    if exe is None:
        raise TraceError(
            f"{p}: an Nsight Systems report, and nsys is not on PATH to convert it; "
            f"export it where nsys is installed: nsys export --type sqlite -o {p.with_suffix('.sqlite')} {p}"
        )
    with _scratch(p, "convert it") as tmp:
        out = tmp / "trace.sqlite"
        try:
            r = run_bounded([exe, "export", "--type", "sqlite", "--output", str(out), str(p.absolute())],
                            NSYS_EXPORT_TIMEOUT_S, cwd=tmp, idle_s=NSYS_EXPORT_IDLE_S,
                            watch=lambda: _export_within(p, tmp, max_bytes))  # the limit holds while it is written
        except Hung:
            raise TraceError(f"{p}: nsys export stopped working (no CPU time for {NSYS_EXPORT_IDLE_S:g} s) and was "
                             f"stopped; export it by hand to see why: nsys export --type sqlite {p}") from None
        except subprocess.TimeoutExpired:
            raise TraceError(f"{p}: nsys export did not finish within {NSYS_EXPORT_TIMEOUT_S:g} s and was stopped; "
                             f"export it by hand: nsys export --type sqlite {p}") from None
        except OSError as exc:
            raise TraceError(f"{p}: nsys export failed ({exc}); export it by hand: nsys export --type sqlite {p}") from None
        if r.returncode != 0 or not out.is_file():
            why = last_line(r.stderr, 80) or last_line(r.stdout, 80) or "no output"  # (its words may be on stdout)
            raise TraceError(f"{p}: nsys export failed ({why}); export it by hand: nsys export --type sqlite {p}")
        size = out.stat().st_size  # what is read is the export: the limit is on it, not on the report
        if size > max_bytes:
            raise TraceError(f"{p}: its SQLite export is {size_words(size)}, over the limit of {size_words(max_bytes)}; "
                             "if the report is really this big raise it with --max-mb (API: max_bytes=)")
        events, metadata = _renamed(lambda: nsys.read(out, max_events, max_bytes, budget=budget), out, p)
    return events, metadata, "nsys-sqlite"


def _export_within(p: Path, tmp: Path, max_bytes: int) -> None:
    """TraceError once what ``nsys export`` has written in ``tmp`` is past ``max_bytes``."""
    written = 0
    with contextlib.suppress(OSError), os.scandir(tmp) as it:
        written = sum(e.stat(follow_symlinks=False).st_size for e in it if e.is_file(follow_symlinks=False))
    if written > max_bytes:
        raise TraceError(f"{p}: its SQLite export grew past the limit of {size_words(max_bytes)} and was stopped; "
                         "if the report is really this big raise it with --max-mb (API: max_bytes=)")


@contextlib.contextmanager
def _scratch(p: Path, purpose: str) -> Iterator[Path]:
    """A private temporary folder that no signal leaves behind (:func:`helpers.interrupts.temporary_dir`)."""
    with contextlib.ExitStack() as stack:
        try:
            tmp = stack.enter_context(temporary_dir(prefix="helpers-"))
        except OSError as exc:
            raise TraceError(f"{p}: cannot make a temporary folder to {purpose} in {tempfile.gettempdir()} "
                             f"({exc.strerror}); free some space there, or point TMPDIR at a folder you can write") from None
        yield tmp


def _renamed(read, tmp: Path, original: Path):
    """Run ``read``; errors name the user's file, not the temporary copy."""
    try:
        return read()
    except TraceError as exc:
        raise TraceError(str(exc).replace(str(tmp), str(original))) from None


def _not_a_file(f: Path) -> str | None:
    """Why an entry named like a trace file cannot be read as one (None: a regular file this process may read).
    Only examined, never opened: opening a named pipe waits for a writer."""
    try:
        mode = f.stat().st_mode
    except OSError as exc:
        if f.is_symlink():
            return "a link to nothing (its target is missing or loops)"
        return f"cannot be examined ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None if os.access(f, os.R_OK) else "a file this user may not read"
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def _what_is_there(d: Path) -> str:
    """Where the traces of a folder without any are, when they are close: hidden files named like traces (skipped,
    as an editor's or a sync tool's copies are), or subfolders holding them (a job's traces one level down)."""
    try:
        entries = sorted(itertools.islice(d.iterdir(), 10_000))
        hidden = [f.name for f in entries if f.name.startswith(".") and f.name.endswith(_TRACE_SUFFIXES)]
        below = [f.name for f in entries[:200] if not f.name.startswith(".") and f.is_dir() and
                 any(g.name.endswith(_TRACE_SUFFIXES) for g in itertools.islice(f.iterdir(), 1000))]
    except OSError:
        return ""
    said = []
    if below:
        many = len(below) > 1
        said.append(f"its subfolder{'s' if many else ''} {', '.join(below[:3])}{', ...' if len(below) > 3 else ''} "
                    f"hold{'' if many else 's'} trace files: pass {'one of them' if many else 'that folder'}")
    if hidden:
        many = len(hidden) > 1
        said.append(f"{len(hidden):,} hidden file{'s' if many else ''} named like a trace ({', '.join(hidden[:3])}) "
                    f"{'are' if many else 'is'} skipped: rename {'them' if many else 'it'} without the leading dot")
    return f" ({'; '.join(said)})" if said else ""


def trace_files(d: Path) -> list[Path]:
    """The trace files of folder ``d`` (by name: *.json, *.json.gz, *.sqlite, ...; hidden files and manifest.json
    aside), sorted: every command that reads a folder lists it here. An entry so named that cannot be read as a
    file (a named pipe, socket, folder, device, dangling link or unreadable file) is refused in one line naming
    it, never skipped: a job read without its rank 3 would be diagnosed as a different job."""
    try:
        named = sorted(f for f in d.iterdir()
                       if f.name.endswith(_TRACE_SUFFIXES) and not f.name.startswith(".") and f.name != "manifest.json")
    except OSError as exc:
        raise TraceError(f"{d}: the folder cannot be listed ({exc.strerror}); check its permissions") from None
    bad = [(f, why) for f in named if (why := _not_a_file(f))]
    if bad:
        f, why = bad[0]
        more = (f"; {len(bad) - 1:,} more entries named like traces are not readable files either "
                f"({', '.join(g.name for g, _ in bad[1:4])}{', ...' if len(bad) > 4 else ''})") if len(bad) > 1 else ""
        raise TraceError(f"{d}: {f.name} is named like a rank's trace but is {why}{more}; every such entry is read "
                         "as a rank (skipping one would diagnose a different job): make it a readable file or move "
                         "it out of the folder")
    if not named and not d.is_absolute() and working_folder() is None:  # a deleted folder lists as empty
        raise TraceError(f"{d}: the current folder no longer exists (it was deleted or moved); cd into a folder that "
                         "exists, or give the full path")
    if not named:
        raise TraceError(
            f"{d}: the folder holds no trace files (*.json, *.json.gz, *.pt.trace.json.gz, *.sqlite){_what_is_there(d)}; "
            "point at the folder your profiler wrote into"
        )
    if (d / "manifest.json").is_file() and len(named) > 1:
        # The course's data/ folder: separate recordings, not the ranks of one run.
        names = ", ".join(f.name for f in named[:4]) + (", ..." if len(named) > 4 else "")
        raise TraceError(f"{d}: a folder of {len(named)} separate traces described by manifest.json ({names}), "
                         f"not the ranks of one run; pass one of them, e.g. {named[0]}")
    return named


#: The counters a folder's reading processes share (set in each of them by :func:`_reader_process`).
_SHARED: tuple | None = None


def _reader_process(shared: tuple) -> None:
    """Set up a process that reads a folder's ranks: the folder's shared counts."""
    global _SHARED
    _SHARED = shared


def _read_for_folder(f: Path, max_bytes: int, max_events: int, folder: Path,
                     budget: Budget | None = None) -> tuple[pd.DataFrame | dict, dict, str]:
    if budget is None:  # in a reading process: the folder's counts are the shared ones
        budget = Budget(folder, max_bytes, max_events, _SHARED)
    return read_file(f, max_bytes, max_events, table=False, budget=budget)  # one table is built for all ranks


def usable_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _workers(n_files: int) -> int:
    """Processes to read a folder with: one per file, up to the usable cores. On 2 cores, 2 processes read
    the 8-rank benchmark folder in 2.7-3.2 s against 3.5-3.8 s one after another when the second core
    was free, and 10% slower when it was busy (docs/benchmarks.md): a free second core is the common case."""
    return max(1, min(n_files, usable_cores()))


def _refuse_folder_size(d: Path, files: list[Path], sizes: list[int], max_bytes: int) -> None:
    """The folder's uncompressed files together over ``max_bytes`` are refused before any is read (each
    file counts, hard links to one file too); compressed ones are counted as they expand."""
    plain = sum(size for f, size in zip(files, sizes) if not f.name.endswith(".gz"))
    if plain > max_bytes:
        raise TraceError(f"{d}: its {len(files):,} trace files add up to {size_words(plain)}, over the limit of "
                         f"{size_words(max_bytes)}; if the job is really this big raise it with --max-mb (API: max_bytes=)")


def _read_ranks(d: Path, files: list[Path], max_bytes: int, max_events: int, workers: int) -> list:
    """Every rank's file, in ``workers`` processes (one after another for 1), counted against the folder's limits
    together. A reading process that dies (killed for memory, say) is one line, not a traceback."""
    if workers <= 1:
        budget = Budget(d, max_bytes, max_events)
        return [_read_for_folder(f, max_bytes, max_events, d, budget) for f in files]
    ctx = multiprocessing.get_context()
    shared = (ctx.Value("q", 0), ctx.Value("q", 0))
    try:
        with worker_pool(workers, initializer=_reader_process, initargs=(shared,)) as pool:
            futures = [pool.submit(_read_for_folder, f, max_bytes, max_events, d) for f in files]
            return [fut.result() for fut in futures]
    except BrokenProcessPool:
        raise TraceError(f"{d}: a process reading its ranks ended without an answer (killed, most likely for want of "
                         "memory); read fewer ranks at a time: python -m helpers ranks FOLDER") from None


def _sizes(d: Path, files: list[Path]) -> list[int]:
    try:
        return [f.stat().st_size for f in files]
    except OSError as exc:
        raise TraceError(f"{d}: a trace file in it cannot be examined ({exc.strerror}); check its permissions") from None


def _concat(parts: list) -> np.ndarray | pd.Categorical:
    """One column of every rank: categoricals stay categorical (their codes joined; categories that differ
    from rank to rank are joined into one sorted set)."""
    if all(isinstance(p, pd.Categorical) for p in parts):
        if len({p.dtype for p in parts}) == 1:
            return pd.Categorical.from_codes(np.concatenate([p.codes for p in parts]), dtype=parts[0].dtype)
        return union_categoricals(parts, sort_categories=True)
    return np.concatenate([np.asarray(p, dtype=object) if isinstance(p, pd.Categorical) else p for p in parts])


def _load_directory(d: Path, step_pattern: str | None, max_bytes: int, max_events: int) -> Trace:
    files = trace_files(d)
    sizes = _sizes(d, files)
    _refuse_folder_size(d, files, sizes, max_bytes)
    # Ranks are independent files: parse them in parallel processes (the parse holds the GIL).
    results = _read_ranks(d, files, max_bytes, max_events, _workers(len(files)) if sum(sizes) >= _PARALLEL_FROM_BYTES else 1)
    tables, metadata = [], {"files": [str(f) for f in files], "ranks": {}}
    used_ranks: set[int] = set()
    processes: list[tuple[str, tuple[int, float, float] | None]] = []
    for i, (f, (events, meta, _)) in enumerate(zip(files, results)):
        rank = meta.get("distributed", {}).get("rank")
        if rank is None:
            named = rank_in_name(f)
            rank = i if named is None else named
        processes.append((f.name, process_span(f, meta, events)))
        if rank in used_ranks:
            raise TraceError(
                f"{d}: two files claim rank {rank} (second: {f.name}); keep one trace per rank in the folder"
            )
        used_ranks.add(rank)
        if isinstance(events, pd.DataFrame):
            events = {c: events[c].to_numpy() for c in events.columns if c != "end_us"}
        events["rank"] = np.full(len(events["name"]), rank, dtype=np.int64)
        # Keep each file's absolute clock so ranks line up; build_events re-zeroes below.
        events["start_us"] = events["start_us"] + meta.get("origin_us", 0.0)
        tables.append(events)
        metadata["ranks"][rank] = {k: v for k, v in meta.items() if k != "origin_us"}
        for key in ("device_names", "torch_version"):
            metadata.setdefault(key, meta.get(key))
        for cat, n in (meta.get("other_accelerator_events") or {}).items():  # the whole job's, as one file's
            other = metadata.setdefault("other_accelerator_events", {})
            other[cat] = other.get(cat, 0) + n
    refuse_one_process_at_different_times(d, processes)
    keys = [c for c in tables[0] if c != "step" and all(c in t for t in tables)]  # step is labelled below
    events = build_events({c: _concat([t[c] for t in tables]) for c in keys})
    _refuse_damaged_times(events, d)
    steps = find_steps(events, step_pattern)
    _refuse_unmatched_pattern(d, events, steps, step_pattern)
    assign_steps(events, steps)
    metadata["steps"] = steps
    metadata["world_size"] = len(files)
    declared = job_world_size(metadata["ranks"].values())
    if declared > len(files):  # ranks of the job not in the folder: said wherever the job's figures are shown
        metadata["job_world_size"] = declared
    return Trace(events, str(d), "directory", metadata)


def process_span(f: Path, meta: dict, events: pd.DataFrame | dict) -> tuple[int, float, float] | None:
    """For a file of a folder that names no rank (neither its distributed info nor its file name): the process its
    host events come from (the most common host pid) and the span they cover on the absolute clock. None for a
    file that names its rank, or has no host event with a process id."""
    if meta.get("distributed", {}).get("rank") is not None or rank_in_name(f) is not None:
        return None
    pid, dev = np.asarray(events.get("pid", [])), np.asarray(events.get("device", []))
    if not len(pid) or len(dev) != len(pid) or not (host := dev < 0).any():
        return None
    values, counts = np.unique(pid[host], return_counts=True)
    start = np.asarray(events["start_us"], dtype=float)[host] + float(meta.get("origin_us", 0.0))
    end = start + np.asarray(events["dur_us"], dtype=float)[host]
    return int(values[np.argmax(counts)]), float(np.nanmin(start)), float(np.nanmax(end))


def refuse_one_process_at_different_times(d: Path, spans: list[tuple[str, tuple[int, float, float] | None]]) -> None:
    """Files that name no rank, whose host events come from one process id, one after another in time
    (:func:`process_span`): the successive windows of one process (tensorboard_trace_handler writes a file each
    profiling cycle, HOST_PID.TIMESTAMP.pt.trace.json), not ranks of a job, which are separate processes that run
    at the same time. Read as ranks they were compared for stragglers and imbalance."""
    seen: dict[int, tuple[str, float, float]] = {}
    for name, span in spans:
        if span is None or span[0] <= 0:
            continue
        pid, lo, hi = span
        if pid in seen and (hi <= seen[pid][1] or lo >= seen[pid][2]):
            raise TraceError(
                f"{d}: {seen[pid][0]} and {name} are one process (pid {pid}) recorded at different times, not two "
                "ranks of a job; read each file on its own, or compare two: python -m helpers compare A B")
        seen[pid] = (name, lo, hi)


#: The largest job a trace's own rank metadata is believed about (a world size beyond it is a damaged field).
MAX_DECLARED_WORLD = 1 << 20


def job_world_size(rank_metadata: Iterable[dict]) -> int:
    """The number of ranks the traces say their job had (the profiler's ``distributed.world_size``, the largest any
    rank gives), 0 where none says. A folder holding fewer is a part of the job: its figures are of those ranks only."""
    sizes = [m.get("distributed", {}).get("world_size") for m in rank_metadata if isinstance(m, dict)]
    return max((int(w) for w in sizes if isinstance(w, (int, np.integer)) and not isinstance(w, bool)
                and 0 < w <= MAX_DECLARED_WORLD), default=0)


__all__ = ["load", "read_file"]
