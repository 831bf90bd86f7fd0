"""Writing output files without ever clobbering what the user had.

The exact path that will be written is the one checked. The data goes to a private temporary file
in the same folder first and is then linked into place, so a crash leaves no half-written output
and an existing file (or one that appears meanwhile) is never replaced unless ``force`` is given.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

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


def read_regular(path: str | os.PathLike, limit: int, what: str = "file") -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes, else :class:`TraceError`.

    Opened without blocking and checked on the open descriptor, so a FIFO, ``/dev/zero`` or a file
    swapped in after a check can neither hang the reader nor fill its memory; at most ``limit + 1``
    bytes are ever read.
    """
    p = Path(os.fsdecode(path))
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise TraceError(f"{p}: cannot be opened ({exc.strerror}); check the path and its permissions") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TraceError(f"{p}: not a regular file (a pipe, device or socket); the {what} must be a plain file")
        chunks, total = [], 0
        while total <= limit:
            block = os.read(fd, min(1 << 20, limit + 1 - total))
            if not block:
                break
            chunks.append(block)
            total += len(block)
    except OSError as exc:
        raise TraceError(f"{p}: cannot be read ({exc.strerror}); check its permissions") from None
    finally:
        os.close(fd)
    if total > limit:
        raise TraceError(f"{p}: over {limit / 2**20:,.1f} MB, too big for a {what}")
    return b"".join(chunks)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
