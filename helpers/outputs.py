"""Writing output files without ever clobbering what the user had.

The exact path that will be written is the one checked. The data goes to a private temporary file
in the same folder first and is then linked into place, so a crash leaves no half-written output
and an existing file (or one that appears meanwhile) is never replaced unless ``force`` is given.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from . import interrupts
from .errors import TraceError
from .paths import working_folder

# Names this module uses for its temporary files; refusing them as outputs keeps the two apart.
TEMP_PREFIX = ".helpers-"
TEMP_SUFFIX = ".partial"


def check_output(path: str | os.PathLike, force: bool = False, inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """``path`` if it may be written, else :class:`TraceError` with one line saying why.

    ``inputs`` are the files or folders the same command reads: an output that is one of them, or lies
    inside one of those folders, is refused even with ``force`` (the command would destroy what it reads).
    """
    text = os.fsdecode(path)
    if "\0" in text:  # no file name holds one: os.lstat raised ValueError
        raise TraceError(f"{text!r}: holds a NUL character, which no file name can; give another output name")
    if text.endswith(("/", os.sep)):  # pathlib drops the slash: a file named like the folder would be written
        raise TraceError(f"{text}: ends in '/', so it names a folder; give a file name inside it")
    p = Path(text)
    if p.name.endswith(TEMP_SUFFIX) or p.name.startswith(TEMP_PREFIX):
        raise TraceError(f"{p}: names ending in {TEMP_SUFFIX} or starting with {TEMP_PREFIX} are for temporary "
                         "files; choose another output name")
    parent = p.parent
    if not p.is_absolute() and working_folder() is None:  # '.' is a deleted folder: said so, not "cannot write in ."
        raise TraceError(f"{p}: the current folder no longer exists (it was deleted or moved), so a relative output "
                         "has nowhere to go; cd into a folder that exists, or give the full path")
    problem = folder_problem(parent)
    if problem:
        raise TraceError(f"{p}: {problem}")
    try:
        os.lstat(p)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise TraceError(f"{p}: the name is too long for this file system ({len(os.fsencode(p.name))} bytes); "
                             "choose a shorter output name") from None
    if p.is_symlink() and not force:
        raise TraceError(f"{p}: is a symbolic link; choose another output name, or pass --force to replace the "
                         "link itself (its target is never written)")
    if p.is_dir():
        raise TraceError(f"{p}: is a folder; give a file name for the output, e.g. {p / 'out'}")
    _refuse_special(p)
    for source in inputs:
        if _same_or_inside(p, Path(os.fsdecode(source))):
            raise TraceError(f"{p}: is (or is inside) {source}, an input of this command; write the output "
                             "elsewhere (--force never replaces an input)")
    if p.exists() and not force:
        raise TraceError(f"{p}: already exists; choose another output name, or pass --force to replace it")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TraceError(f"{p}: the folder {parent} is not writable; choose an output in a folder you can write")
    return p


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot hold a new file (it does not exist, is a file, is a symbolic link that points
    back at itself, cannot be reached), in words; None when it can."""
    try:
        info = os.stat(folder)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            if not os.path.lexists(folder):
                return f"the folder {folder} does not exist; create it first (mkdir -p {folder})"
            return f"the folder {folder} is a symbolic link to nothing (its target is gone); fix or remove the link"
        if exc.errno == errno.ELOOP:
            return (f"the folder {folder} is, or goes through, a symbolic link that points back at itself; fix or "
                    "remove the link")
        if exc.errno == errno.ENOTDIR:
            return f"{folder} (or a folder above it) is a file, not a folder; write the output elsewhere"
        if exc.errno == errno.ENAMETOOLONG:
            return "the path is too long for this file system; choose a shorter one"
        return f"the folder {folder} cannot be reached ({exc.strerror}); check the path and its permissions"
    if not stat.S_ISDIR(info.st_mode):
        return f"{folder} is a file, not a folder; write the output elsewhere"
    return None


def write_output(path: str | os.PathLike, write: Callable[[BinaryIO], None], force: bool = False,
                 inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """Call ``write(fh)`` on a private temporary file, then put it at ``path`` (see the module's doc)."""
    p = check_output(path, force, inputs)
    interrupts.sweep_stale(p.parent, TEMP_PREFIX, TEMP_SUFFIX)  # what a command killed with SIGKILL left here
    try:
        with interrupts.deferred():  # a signal cannot fall between making the file and registering it
            fd, tmp_name = tempfile.mkstemp(prefix=interrupts.owned_prefix(TEMP_PREFIX), suffix=TEMP_SUFFIX, dir=p.parent)
            interrupts.register(tmp_name)
    except OSError as exc:
        raise TraceError(f"{p}: cannot write in {p.parent} ({exc.strerror}); choose another output folder") from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.chmod(tmp, 0o666 & ~_umask())
        with interrupts.deferred():  # the result is put in place whole or not at all
            existed = p.exists() or p.is_symlink()
            _commit(tmp, p, force)
            if not existed:  # a file this command made: a signal before the command ends removes it
                interrupts.created(p)
    except OSError as exc:
        raise TraceError(f"{p}: cannot be written ({exc.strerror or exc}); check the free space and permissions") from None
    finally:
        with interrupts.deferred():
            tmp.unlink(missing_ok=True)
            interrupts.unregister(tmp_name)
    return p


def _commit(tmp: Path, p: Path, force: bool) -> None:
    if force:
        os.replace(tmp, p)
        return
    try:
        os.link(tmp, p)  # fails if p appeared meanwhile: never replaces
    except FileExistsError:
        raise TraceError(f"{p}: already exists; choose another output name, or pass --force") from None
    except OSError:  # a file system without hard links: the check above is the best we have
        if p.exists() or p.is_symlink():
            raise TraceError(f"{p}: already exists; choose another output name, or pass --force") from None
        os.replace(tmp, p)


def _refuse_special(p: Path) -> None:
    """A device, pipe or socket is never an output: writing there is not saving a file."""
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise TraceError(f"{p}: is a device, pipe or socket, not a file; give a file name for the output")


def _same_or_inside(out: Path, source: Path) -> bool:
    """Whether writing ``out`` would replace ``source`` or a file in the folder ``source``."""
    try:
        if out.exists() and source.exists() and os.path.samefile(out, source):
            return True
        src = source.resolve()
        target = out.parent.resolve() / out.name
        return src.is_dir() and (target == src or src in target.parents)
    except (OSError, RuntimeError):  # RuntimeError: Python 3.11's resolve() on a symbolic link loop
        return False


#: What a path that is not a regular file is, by its mode (said in the refusal).
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def file_kind(mode: int) -> str:
    """What a file of ``mode`` is, in words ("a named pipe (FIFO)"); "a regular file" for one."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike, what: str = "file", advice: str = "") -> BinaryIO:
    """``path`` opened for reading if it is a regular file, else :class:`TraceError` in one line.

    The one way the toolkit opens a file a user named or may have swapped: opened without blocking
    (``O_NONBLOCK``: opening a named pipe otherwise waits for a writer) and judged on the open descriptor
    (``fstat``), so a path that was a regular file when it was checked and is a FIFO or a device when it is
    opened can neither hang the reader nor feed it endless bytes. The descriptor is then made blocking again
    (reads of a regular file never wait). A path that does not exist raises FileNotFoundError (callers say
    what is missing); any other failure to open is a TraceError.
    """
    p = Path(os.fsdecode(path))
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise TraceError(f"{p}: cannot be opened ({exc.strerror}); check the path and its permissions") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise TraceError(f"{p}: {file_kind(mode)}, not a regular file; "
                             + (advice or f"the {what} must be a plain file: check the path"))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike, limit: int, what: str = "file") -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes, else :class:`TraceError`.

    Opened through :func:`open_regular` (a FIFO, ``/dev/zero`` or a file swapped in after a check can neither
    hang the reader nor fill its memory); at most ``limit + 1`` bytes are ever read.
    """
    p = Path(os.fsdecode(path))
    with open_regular(p, what) as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise TraceError(f"{p}: cannot be read ({exc.strerror}); check its permissions") from None
    if len(data) > limit:
        raise TraceError(f"{p}: over {size_words(limit)}, too big for a {what}")
    return data


def read_state_json(path: str | os.PathLike, limit: int, what: str) -> object:
    """A small JSON file the toolkit keeps (or a user hands it) decoded, through the one bounded reader
    (:func:`read_regular`): a pipe, a device, a file over ``limit``, bytes that are not UTF-8 JSON and JSON
    nested deeper than the parser goes (RecursionError) are each a :class:`TraceError` in one line.
    A missing file raises FileNotFoundError (for the caller: usually "nothing recorded yet")."""
    data = read_regular(path, limit, what)
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # (UnicodeDecodeError is a ValueError)
        why = "nested too deeply" if isinstance(exc, RecursionError) else "not valid UTF-8 JSON"
        raise TraceError(f"{os.fsdecode(path)}: not a readable {what} ({why})") from None


#: The largest file of the course's own data/ folder read as JSON (manifest.json is about 120 KB).
SHIPPED_LIMIT = 16 << 20


def shipped_json(path: str | os.PathLike) -> Any:
    """A JSON file of the course's data/ folder, through the same bounded reader as any state file: a learner's
    checkout is theirs to damage, and a manifest swapped for a pipe or a 3 GB file must not hang or fill memory."""
    try:
        return read_state_json(path, SHIPPED_LIMIT, "course data file")
    except FileNotFoundError:
        raise TraceError(f"{os.fsdecode(path)}: missing; it ships with the repository: re-clone or git checkout "
                         "data/") from None


def size_words(n: float) -> str:
    """A byte count or limit in words that stay true at any size, to three figures: "1,024 MB", "2.5 MB",
    "1.04 MB", "10 bytes" (a limit of 10 bytes was shown as "0 MB", and a file over it as "over 0 MB")."""
    for unit, name in ((2**20, "MB"), (1024, "KB")):
        if n >= unit:
            x = n / unit
            text = f"{x:,.0f}" if x >= 100 else f"{x:,.{1 if x >= 10 else 2}f}".rstrip("0").rstrip(".")
            return f"{text} {name}"
    return f"{int(n):,} byte" + ("" if int(n) == 1 else "s")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
