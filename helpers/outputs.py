"""Writing output files without ever clobbering what the user had.

The exact path that will be written is the one checked. The data goes to a private temporary file
in the same folder first and is then linked into place, so a crash leaves no half-written output
and an existing file (or one that appears meanwhile) is never replaced unless ``force`` is given.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .errors import TraceError

# Names this module uses for its temporary files; refusing them as outputs keeps the two apart.
TEMP_PREFIX = ".helpers-"
TEMP_SUFFIX = ".partial"


def check_output(path: str | os.PathLike, force: bool = False) -> Path:
    """``path`` if it may be written, else :class:`TraceError` with one line saying why."""
    p = Path(path)
    if p.name.endswith(TEMP_SUFFIX) or p.name.startswith(TEMP_PREFIX):
        raise TraceError(f"{p}: names ending in {TEMP_SUFFIX} or starting with {TEMP_PREFIX} are for temporary "
                         "files; choose another output name")
    if p.is_symlink() and not force:
        raise TraceError(f"{p}: is a symbolic link; choose another output name, or pass --force to replace the "
                         "link itself (its target is never written)")
    if p.is_dir():
        raise TraceError(f"{p}: is a folder; give a file name for the output, e.g. {p / 'out'}")
    if p.exists() and not force:
        raise TraceError(f"{p}: already exists; choose another output name, or pass --force to replace it")
    parent = p.parent
    if not parent.is_dir():
        raise TraceError(f"{p}: the folder {parent} does not exist; create it first (mkdir -p {parent})")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TraceError(f"{p}: the folder {parent} is not writable; choose an output in a folder you can write")
    return p


def write_output(path: str | os.PathLike, write: Callable[[BinaryIO], None], force: bool = False) -> Path:
    """Call ``write(fh)`` on a private temporary file, then put it at ``path`` (see the module's doc)."""
    p = check_output(path, force)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=p.parent)
    except OSError as exc:
        raise TraceError(f"{p}: cannot write in {p.parent} ({exc.strerror}); choose another output folder") from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.chmod(tmp, 0o666 & ~_umask())
        if force:
            os.replace(tmp, p)
        else:
            try:
                os.link(tmp, p)  # fails if p appeared meanwhile: never replaces
            except FileExistsError:
                raise TraceError(f"{p}: already exists; choose another output name, or pass --force") from None
            except OSError:  # a file system without hard links: the check above is the best we have
                if p.exists() or p.is_symlink():
                    raise TraceError(f"{p}: already exists; choose another output name, or pass --force") from None
                os.replace(tmp, p)
    except OSError as exc:
        raise TraceError(f"{p}: cannot be written ({exc.strerror or exc}); check the free space and permissions") from None
    finally:
        tmp.unlink(missing_ok=True)
    return p


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
