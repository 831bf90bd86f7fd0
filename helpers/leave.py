"""How ``python -m helpers`` ends: once its output is out, without Python's teardown.

Freeing a large events table, pandas' and numpy's modules and every other object one by one at interpreter
shutdown cost 0.1-0.15 s of every command on a folder, after the last line was printed. Nothing in that
teardown is needed once the output is flushed and the exit handlers have run, so the process ends there with
``os._exit``. Imported first by ``__main__`` (light: no pandas)."""

from __future__ import annotations

import atexit
import os
import sys
import threading
import typing


def leave(status: object) -> typing.NoReturn:
    """End the process with exit status ``status``. The fast way (``os._exit``) only when it loses nothing:
    the status is a plain exit code, no thread but daemons is left (a worker pool not shut down keeps one, and
    normal exit would wait for it), stdout and stderr flush without an error (a file given with ``-o`` is closed
    by the command itself), and the exit handlers (temporary folders removed, daemon child processes ended,
    logging flushed) have run; else ``SystemExit``, Python's normal exit, which reports a failed flush its way."""
    if not isinstance(status, int) or isinstance(status, bool) or not 0 <= status <= 255 or _threads_left():
        raise SystemExit(status)
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)  # (CPython's; another Python exits normally)
    if run_exit_handlers is None or not _flushed():
        raise SystemExit(status)
    run_exit_handlers()  # what normal exit runs after the threads are joined; it reports its own errors
    if not _flushed():  # an exit handler that printed
        raise SystemExit(status)
    os._exit(status)


def _threads_left() -> bool:
    """Whether a thread other than this one that normal exit would wait for is still running."""
    me = threading.current_thread()
    return me is not threading.main_thread() or any(t is not me and t.is_alive() and not t.daemon
                                                     for t in threading.enumerate())


def _flushed() -> bool:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is None:
            continue
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or failing: normal exit handles and reports it as before
            return False
    return True
