"""Running the NVIDIA tools (nsys, ncu) as child processes with a time limit that holds.

``subprocess.run(..., timeout=)`` kills only the process it started: a tool that is a wrapper
script (nsys is one) leaves its own children running, they keep the output pipes open, and the
wait for the pipes' end then lasts as long as they do. Here the tool runs in a process group of
its own, and on a timeout (or an interrupt) the whole group is killed before anything else.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

from . import interrupts


def run_bounded(command: Sequence[str], timeout_s: float, *, stdout: int | None = subprocess.PIPE,
                env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run ``command`` (text output, stderr captured) for at most ``timeout_s`` seconds.

    Raises :class:`subprocess.TimeoutExpired` once the command and every process it started are gone;
    :class:`OSError` when it cannot be started.
    """
    proc = subprocess.Popen(list(command), stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            start_new_session=hasattr(os, "killpg"))
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:  # a timeout or Ctrl-C: nothing of the tool may outlive the call
        _kill_group(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)  # the group the tool leads: its children too
        else:  # pragma: no cover - Windows has no process groups to kill
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=5)  # the pipes close once the group is gone
    except (subprocess.TimeoutExpired, ValueError, OSError):
        pass


class _Pool(ProcessPoolExecutor):
    """Runs every call through :func:`_call`, so a worker knows whether it is busy when a signal lands."""

    def submit(self, fn, /, *args, **kwargs):
        return super().submit(_call, fn, *args, **kwargs)


_busy = False


def _call(fn, *args, **kwargs):
    global _busy
    _busy = True
    interrupts._state.update(count=0, first=None, pending=None)
    try:
        return fn(*args, **kwargs)
    finally:
        _busy = False


def _worker_signal(signum: int, frame) -> None:
    # Waiting for work, or sending a result back: left alone (exiting mid-send would leave the parent
    # waiting for the rest of a message forever); the parent's shutdown ends the worker.
    if _busy:
        interrupts._handler(signum, frame)  # in a call: raised there, so its with/finally blocks clean up


def _worker_start() -> None:
    interrupts._state.update(active=1, deferring=0, count=0, first=None, pending=None)
    for sig in interrupts.SIGNALS:
        signal.signal(sig, _worker_signal)


@contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A process pool that stops with its command, whenever and however it is stopped.

    A worker given Ctrl-C, SIGTERM or SIGHUP (a terminal's Ctrl-C reaches every process of the group)
    while it runs a call raises :class:`helpers.errors.Interrupted` inside it, so the call's own cleanup
    runs (a decompressed copy is removed) and the exception comes back to the parent as the call's
    result; a worker waiting for work carries on waiting (no traceback per process). When the parent is
    stopped, or a call fails, the calls not started are cancelled, the busy workers are stopped (SIGTERM,
    raised in their call as above) and every worker is waited for, so none outlives the command.
    """
    pool = _Pool(max_workers=workers, initializer=_worker_start)
    try:
        yield pool
    except BaseException:
        with interrupts.deferred():
            _stop(pool)
        raise
    pool.shutdown(wait=True)


def _stop(pool: ProcessPoolExecutor, grace_s: float = 10.0) -> None:
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)  # no new calls; each worker is sent its sentinel
    for proc in processes:
        try:
            proc.terminate()  # SIGTERM: raised inside a busy worker's call (see _worker_signal)
        except (OSError, ValueError, AttributeError):
            pass
    killed = False
    for proc in processes:
        try:
            proc.join(timeout=grace_s)
            if proc.is_alive():  # deaf to SIGTERM (stuck in C code): it must not outlive the command
                proc.kill()
                proc.join(timeout=5)
                killed = True
        except (OSError, ValueError, AttributeError, AssertionError):
            pass
    if not killed:  # (a worker killed while sending could leave the pool's reader waiting forever)
        pool.shutdown(wait=True)
