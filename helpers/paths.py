"""Paths and text as a person reads them: printable, whatever bytes a file name holds.

A file name on Linux is bytes; one that is not valid UTF-8 (a name copied from an old Latin-1 system,
or written under ``LC_ALL=C``) reaches Python as text holding lone surrogates (``'bad\\udcff.json'``),
which no terminal, JSON document or font can take. :func:`printable` turns such text into what
``ls -b`` would show (``bad\\xff.json``); the command line passes everything it prints through it, and
the figures pass their titles and labels through it. The path itself is never changed: opening,
comparing and refusing to overwrite files always use the real name.
"""

from __future__ import annotations

import errno
import os
import re

try:  # imported here: once a process has no file descriptor left, an import fails
    import resource
except ImportError:  # pragma: no cover - not on Windows
    pass

_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(m: re.Match) -> str:
    code = ord(m.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every lone surrogate shown as an escape: ``\\xNN`` for an undecodable byte of a file
    name (Python's surrogateescape), ``\\uNNNN`` for one a JSON document spelled out."""
    if text.isascii():
        return text
    return _SURROGATE.sub(_escape, text)


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """:func:`printable`, and every control character but a tab, a line break or a carriage return shown as
    ``\\xNN``: a name in a trace or a file name (``\\x1b]0;...`` retitles the terminal, ``\\x1b[2J`` clears it)
    is printed as text, never obeyed by the terminal."""
    text = printable(text)
    return text if text.isprintable() else _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def shown(path: str | os.PathLike | bytes) -> str:
    """A path as it is printed in a message (see :func:`printable`)."""
    if isinstance(path, bytes):
        return path.decode("utf-8", "backslashreplace")
    return printable(os.fspath(path))


def unreachable(path: str | os.PathLike) -> str | None:
    """Why an existing-looking ``path`` cannot be opened, in words, when the reason is not simply that
    nothing is there: a symbolic link loop, a link to nothing, a file where a folder should be. None
    when ``path`` is reachable or plainly absent."""
    try:
        os.stat(path)
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is, or goes through, a symbolic link that points back at itself; fix or remove the link"
        if exc.errno == errno.ENOENT and os.path.lexists(path):
            return "is a symbolic link to nothing (its target is gone); fix the link or give the file itself"
        if exc.errno == errno.ENOTDIR:
            return "goes through a file as if it were a folder; check the path"
        if exc.errno == errno.ENAMETOOLONG:
            return "is too long a path for this file system"
        if exc.errno in (errno.EACCES, errno.EPERM):
            return f"cannot be reached ({exc.strerror}); check the permissions of the folders on the way"
        return None


def working_folder() -> str | None:
    """The current folder as printed, or None when it is gone (a shell left inside a folder that was deleted)."""
    try:
        return shown(os.getcwd())
    except OSError:
        return None


def _limit(name: str) -> str:
    """A resource limit's soft value as a number ('?' where the platform says none)."""
    try:
        soft = resource.getrlimit(getattr(resource, name))[0]
    except (NameError, AttributeError, OSError, ValueError):
        return "?"
    return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft:,}"


def os_error_text(exc: OSError) -> str:
    """One line for an OSError nothing more specific caught: what failed, on which path, and a next step."""
    what = exc.strerror or str(exc) or type(exc).__name__
    where = ": ".join(shown(f) for f in (exc.filename, exc.filename2) if f is not None)
    if exc.errno == errno.ENOENT and not where:  # os.getcwd() and the like: the current folder is gone
        try:
            os.getcwd()
        except OSError:
            return ("the current folder no longer exists (it was deleted or moved); cd into a folder that exists "
                    "and run the command again")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "free some space there, or point TMPDIR at a disk with room"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = "check the permissions"
    elif exc.errno == errno.ELOOP:
        hint = "a symbolic link there points back at itself; fix or remove it"
    elif exc.errno in (errno.EMFILE, errno.ENFILE):  # a limit of the process or the system, not the path
        hint = f"the limit on open files is {_limit('RLIMIT_NOFILE')}; raise it (ulimit -n 4096) and run again"
    elif exc.errno == errno.EFBIG:
        hint = f"the limit on a file's size is {_limit('RLIMIT_FSIZE')} (bytes); raise it (ulimit -f unlimited) or free space"
    elif exc.errno in (errno.EAGAIN, errno.ENOMEM) and not where:  # fork or a thread refused
        hint = "the system would not start another process or thread (a limit on processes or memory); close " \
               "other programs or raise the limit (ulimit -u), then run again"
    else:
        hint = "check the path"
    return f"{where + ': ' if where else ''}{what}; {hint}"


__all__ = ["os_error_text", "printable", "shown", "unreachable", "working_folder"]
