"""Stopping cleanly: a signal becomes one exception, and every temporary file is accounted for.

A command can be stopped at any moment: Ctrl-C (SIGINT), ``kill`` or a batch scheduler's time limit
(SIGTERM), its terminal closing (SIGHUP). Python's defaults either die on the spot (SIGTERM, SIGHUP:
no ``finally`` runs, so a half-written output or a decompressed copy is left behind) or print a
KeyboardInterrupt traceback. Here, while :func:`signals_as_exceptions` is active, each of the three
raises :class:`helpers.errors.Interrupted` in the main thread, so the ``with`` and ``finally`` blocks
between it and the command line run and remove what they made.

That alone leaves two gaps: a signal can land between creating a temporary file and entering the
block that removes it, or inside that block before the removal. So every temporary path the toolkit
makes is created inside :func:`deferred` (the signal waits until the path is registered) and
registered here (:func:`temporary_dir`, :func:`register`); whatever a ``finally`` did not get to is
removed by :func:`remove_registered`, which the command line calls last and :mod:`atexit` calls for
the API. A second signal while that cleanup runs is held back; a third stops at once.

Nothing here is needed for correctness when nothing is interrupted, and none of it runs outside the
main thread (Python delivers signals only there).

SIGKILL (the kernel's out-of-memory killer, ``kill -9``) cannot be caught: what the killed process had made
stays. So every temporary name carries its maker's host and process id (:func:`owned_prefix`), and the next
command that makes one in the same folder removes those whose process is gone (:func:`sweep_stale`).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import Interrupted

#: The signals a command turns into :class:`Interrupted` (those this platform has).
SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))

_registered: dict[str, None] = {}  # temporary paths not yet removed, oldest first (a dict keeps order)
#: Outputs the running command created whole (a new file put in place): a signal before the command ends removes
#: them too, so a stopped command leaves nothing; forgotten (kept) when the command ends any other way.
_products: dict[str, None] = {}
_lock = threading.Lock()
_state: dict = {"active": 0, "deferring": 0, "pending": None, "first": None, "count": 0}


def _handler(signum: int, frame) -> None:
    if _importing(frame):  # raised in an import, it is not ours to catch: the import machinery's locks are
        _send_again(signum)  # corrupted (a KeyError later), or a C extension's import fails and says "bad install"
        return
    _state["count"] += 1
    if _state["first"] is None:
        _state["first"] = signum
    if _state["count"] >= 3:  # asked three times: stop now, even if cleaning up takes long
        os._exit(128 + signum)
    if _state["count"] > 1:  # the first one's cleanup is under way: let it finish
        return
    if _state["deferring"]:  # inside a section that must not be cut in two: raised when it ends
        _state["pending"] = signum
        return
    raise Interrupted(signum)


def _importing(frame) -> bool:
    """Whether ``frame`` runs inside an import: the import machinery itself, or a module's body it runs (numpy
    importing datetime from C, say, where an exception becomes numpy's "your installation is broken" error)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _unraisable(hook_args) -> None:
    """Python swallows an exception raised where nothing can catch it (a weakref or import-lock callback,
    a ``__del__``) and prints "Exception ignored in ...". A signal that landed there is sent again a moment
    later, when the main thread is back in ordinary code; anything else goes to the usual hook."""
    exc = hook_args.exc_value
    if isinstance(exc, Interrupted):
        _state["count"] = max(0, _state["count"] - 1)
        if _state["count"] == 0:
            _state["first"] = None
        _send_again(exc.signum)
        return
    (_state.get("unraisable") or sys.__unraisablehook__)(hook_args)


def _send_again(signum: int) -> None:
    """Deliver ``signum`` to this process again in a moment (from a helper thread), if the handlers are
    still in place then (a command that has finished meanwhile is left alone)."""
    def resend() -> None:
        if _state["active"]:
            os.kill(os.getpid(), signum)

    timer = threading.Timer(0.01, resend)
    timer.daemon = True
    timer.start()


def in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def install() -> dict:
    """Make SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` (main thread only; elsewhere nothing
    changes). Returns the handlers that were there before. ``python -m helpers`` calls this first thing
    and keeps it to the end; :func:`signals_as_exceptions` puts the old handlers back."""
    previous: dict = {}
    if not in_main_thread():
        return previous
    for sig in SIGNALS:
        try:
            previous[sig] = signal.signal(sig, _handler)
        except (OSError, ValueError):  # pragma: no cover - a signal this process may not handle
            pass
    if _state["active"] == 0:
        _state.update(pending=None, first=None, count=0, unraisable=sys.unraisablehook)
        sys.unraisablehook = _unraisable
    _state["active"] += 1
    return previous


def ignore() -> None:
    """Ignore the three signals from now on (a process that has finished and is about to exit)."""
    if in_main_thread():
        for sig in SIGNALS:
            try:
                signal.signal(sig, signal.SIG_IGN)
            except (OSError, ValueError):  # pragma: no cover
                pass


@contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """While active, SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` (see :func:`install`)."""
    previous = install()
    try:
        yield
    except Interrupted:
        raise  # its products stay for stopped() to remove
    except BaseException:
        _products.clear()
        raise
    else:
        _products.clear()
    finally:
        if previous:
            _state["active"] -= 1
            if _state["active"] == 0:
                sys.unraisablehook = _state.get("unraisable") or sys.__unraisablehook__
        for sig, old in previous.items():
            try:
                signal.signal(sig, old if old is not None else signal.SIG_DFL)
            except (OSError, ValueError):  # pragma: no cover
                pass


def stopped(exc: Interrupted) -> int:
    """Say on one line that the command was stopped, remove what it left, and return its exit status
    (128 + the signal's number, as a shell reports a command a signal ended)."""
    _state["count"] = max(_state["count"], 1)  # from here on a signal is the cleanup's to wait for, not raised
    with _lock:
        made = list(reversed(_products))
        _products.clear()
    for path in made:  # outputs this command created whole before the signal landed
        _remove(path)
    remove_registered()
    try:
        import sys

        print(f"error: stopped by {exc.name} before it finished; no partial output or temporary file was left",
              file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):  # stderr gone too (a closed terminal): the status says it
        pass
    return 128 + exc.signum


def received() -> int | None:
    """The first signal received while :func:`signals_as_exceptions` was active, else None."""
    return _state["first"]


@contextmanager
def deferred() -> Iterator[None]:
    """A section a signal must not cut in two (create a file and register it; commit a result): a
    signal that arrives inside it is raised as :class:`Interrupted` when the section ends."""
    _state["deferring"] += 1
    try:
        yield
    finally:
        _state["deferring"] -= 1
        pending = _state["pending"]
        if pending is not None and not _state["deferring"]:
            _state["pending"] = None
            raise Interrupted(pending)


def register(path: str | os.PathLike) -> None:
    """Remember a temporary file or folder until :func:`unregister`; see the module's doc."""
    with _lock:
        _registered[os.fspath(path)] = None


def created(path: str | os.PathLike) -> None:
    """Note a new output the running command has put in place, to remove if a signal stops the command before it
    ends (see :data:`_products`); outside a command (the API, a notebook) nothing is noted."""
    if _state["active"]:
        with _lock:
            _products[os.fspath(path)] = None


def unregister(path: str | os.PathLike) -> None:
    with _lock:
        _registered.pop(os.fspath(path), None)


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        return  # still there: left registered for a later try
    unregister(path)


def remove_registered() -> None:
    """Remove every registered temporary path that its own cleanup did not get to (newest first)."""
    with _lock:
        paths = list(reversed(_registered))
    for path in paths:
        _remove(path)


#: Seconds a dead process's temporary file or folder is left before another command removes it: a process of the
#: same host name in another PID namespace (a container) looks dead from here, and a writer touches its file.
STALE_AFTER_S = 600.0


def _host() -> str:
    name = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname() or "host")[:32]
    return name or "host"


def owned_prefix(prefix: str) -> str:
    """``prefix`` with this host's name and this process's id: what :func:`sweep_stale` reads back."""
    return f"{prefix}{_host()}-{os.getpid()}-"


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, OSError):  # alive (another user's), or no such number: kept
        return False
    return False


def sweep_stale(folder: str | os.PathLike, prefix: str, suffix: str = "") -> list[str]:
    """Remove from ``folder`` what a process of this host killed with SIGKILL left: entries named by
    :func:`owned_prefix` (``prefix``, then ``suffix``) whose process is gone, owned by this user and untouched for
    :data:`STALE_AFTER_S`. Never raises; returns the names removed."""
    pattern = re.compile(re.escape(prefix) + re.escape(_host()) + r"-(\d{1,10})-.*" + re.escape(suffix) + "$", re.S)
    removed: list[str] = []
    try:
        with os.scandir(folder) as entries:
            candidates = [e for e in entries if e.name.startswith(prefix) and pattern.match(e.name)]
        uid = os.getuid() if hasattr(os, "getuid") else None
        for e in candidates[:1000]:  # a bound on the work one command does for others
            st = e.stat(follow_symlinks=False)
            if (uid is not None and st.st_uid != uid) or time.time() - st.st_mtime < STALE_AFTER_S:
                continue
            if not _gone(int(pattern.match(e.name).group(1))):
                continue
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path, ignore_errors=True)
            else:
                os.unlink(e.path)
            removed.append(e.name)
    except OSError:
        pass
    return removed


@contextmanager
def temporary_dir(prefix: str = "helpers-") -> Iterator[Path]:
    """``tempfile.TemporaryDirectory`` that a signal cannot leave behind (see the module's doc); what a killed
    command left in ``$TMPDIR`` is removed first.

    Raises :class:`OSError` when the folder cannot be made (a full or missing ``$TMPDIR``)."""
    sweep_stale(tempfile.gettempdir(), prefix)
    with deferred():
        path = tempfile.mkdtemp(prefix=owned_prefix(prefix))  # mode 0700: private to this user
        register(path)
    try:
        yield Path(path)
    finally:
        with deferred():
            _remove(path)


atexit.register(remove_registered)

__all__ = ["SIGNALS", "Interrupted", "created", "deferred", "ignore", "in_main_thread", "install", "owned_prefix", "received",
           "register", "remove_registered", "signals_as_exceptions", "stopped", "sweep_stale", "temporary_dir", "unregister"]
