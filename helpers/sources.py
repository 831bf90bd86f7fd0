"""The source of a learner's function, read the one safe way.

``inspect.getsource`` reads a function's file by name through :mod:`linecache` (``tokenize.open``), after a stat
that does not look at the file's kind: a file that is a named pipe blocks the check for ever, and a file swapped for
one after a check does the same. Here the file is read through :func:`helpers.outputs.read_regular` (never
blocking, bounded, judged on the open descriptor) and handed to ``inspect`` as the lines of that one read; a
notebook cell's source, which IPython keeps in ``linecache`` itself, is read from there as before.
"""

from __future__ import annotations

import inspect
import io
import linecache
import os
import tokenize
from typing import Any

from .errors import TraceError
from .outputs import read_regular

#: The largest source file read for a function's source (the course's modules are tens of KB).
SOURCE_LIMIT = 16 << 20


def getsourcelines(obj: Any) -> tuple[list[str], int]:
    """``inspect.getsourcelines(obj)`` with the file read safely; OSError (as inspect raises) where it cannot be."""
    file = inspect.getsourcefile(obj) or inspect.getfile(obj)  # TypeError for a built-in, as inspect's
    held = linecache.cache.get(file) if file else None
    if not file or (held is not None and held[1] is None) or not os.path.exists(file):
        return inspect.getsourcelines(obj)  # a cell IPython registered (no file), or nothing on disk to open
    try:
        data = read_regular(file, SOURCE_LIMIT, "source file")
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        lines = data.decode(encoding).splitlines(keepends=True)
    except (TraceError, SyntaxError, UnicodeDecodeError, LookupError) as exc:
        raise OSError(f"its source file cannot be read ({exc})") from None
    linecache.cache[file] = (len(data), None, lines, file)  # for inspect's look-up only, no mtime: never re-read
    try:
        return inspect.getsourcelines(obj)
    finally:
        if held is None:
            linecache.cache.pop(file, None)
        else:
            linecache.cache[file] = held


def getsource(obj: Any) -> str:
    """``inspect.getsource(obj)`` with the file read safely (:func:`getsourcelines`)."""
    return "".join(getsourcelines(obj)[0])
