"""Child processes with time limits that hold: the NVIDIA tools (nsys, ncu), a user's regular
expression, and the process pools that read folders of ranks.

``subprocess.run(..., timeout=)`` kills only the process it started: a tool that is a wrapper
script (nsys is one) leaves its own children running, they keep the output pipes open, and the
wait for the pipes' end then lasts as long as they do. Here the tool runs in a process group of
its own; once the tool itself has exited, its output pipes get a short grace and then the rest of
its group is killed; a group that has used no CPU for ``idle_s`` seconds is taken as hung; and on a
time-out (or an interrupt) the whole group is killed before anything else.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

from . import interrupts

#: Seconds a tool's output pipes may stay open after the tool itself has exited (a child it left running
#: holds them): what it wrote before exiting is in the pipes already.
PIPE_GRACE_S = 1.0
_POLL_S = 0.25


class Hung(subprocess.TimeoutExpired):
    """The process group used no CPU time for ``idle_s`` seconds: waiting on something that never comes."""


#: Bytes of each output pipe kept by default (the last ones): a tool that floods its pipe (300 MB of noise) is
#: read to the end, so it never blocks on a full pipe, but costs this much memory, not what it wrote.
KEEP_BYTES = 1 << 20


def run_bounded(command: Sequence[str], timeout_s: float, *, stdout: int | None = subprocess.PIPE,
                env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None,
                stdin_bytes: bytes | None = None, idle_s: float | None = None, keep_bytes: int | None = KEEP_BYTES,
                watch: Callable[[], None] | None = None) -> subprocess.CompletedProcess:
    """Run ``command`` (text output, stderr captured) for at most ``timeout_s`` seconds.

    ``stdin_bytes`` is written to its standard input (else it reads nothing). With ``idle_s``, a
    process group that has used no CPU for that long is stopped too (Linux; elsewhere only the time-out
    holds) and :class:`Hung` raised. Of each captured pipe the last ``keep_bytes`` are kept (None: all).
    ``watch()`` is called a few times a second while the command runs: whatever it raises stops the
    command (its whole group) and is raised here (a file the tool writes grown past a limit, say).
    Raises :class:`subprocess.TimeoutExpired` once the command and every process it started are gone;
    :class:`OSError` when it cannot be started.
    """
    proc = subprocess.Popen(list(command), stdout=stdout, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL if stdin_bytes is None else subprocess.PIPE, env=env, cwd=cwd,
                            start_new_session=hasattr(os, "killpg"))
    started = time.monotonic()
    pipes = [_Drain(pipe, keep_bytes) if pipe is not None else None for pipe in (proc.stdout, proc.stderr)]
    feeding = [_Feed(proc.stdin, stdin_bytes)] if stdin_bytes is not None else []
    threads = [t for t in pipes + feeding if t is not None]
    exited_at: float | None = None
    cpu, cpu_seen_at, cpu_checked_at = -1.0, started, started
    try:
        while True:
            now = time.monotonic()
            step = min(_POLL_S, max(0.01, started + timeout_s - now))
            if proc.poll() is None:
                try:
                    proc.wait(timeout=step)
                except subprocess.TimeoutExpired:
                    pass
            else:  # the tool is done: its pipes end when the last process holding them does
                for t in threads:
                    t.join(timeout=step / len(threads))
            now = time.monotonic()
            if proc.poll() is not None:
                if not any(t.is_alive() for t in threads):
                    break
                exited_at = exited_at or now
                if now - exited_at >= PIPE_GRACE_S:  # a child it left holds the pipes: what was written is read
                    _signal_group(proc)
                    _join(threads)
                    break
            if now - started >= timeout_s:
                raise subprocess.TimeoutExpired(proc.args, timeout_s)
            if watch is not None:
                watch()
            if idle_s is not None and exited_at is None and now - cpu_checked_at >= 1.0:
                cpu_checked_at = now
                used = _group_cpu_s(proc.pid)
                if used is None or used > cpu:
                    cpu, cpu_seen_at = (used if used is not None else cpu), now
                elif now - cpu_seen_at >= idle_s:
                    raise Hung(proc.args, idle_s)
    except BaseException:  # a timeout, a watch's refusal or Ctrl-C: nothing of the tool may outlive the call
        _signal_group(proc)
        _join(threads)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL ignored: nothing more to do
            pass
        raise
    out, err = (d.data() if d is not None else None for d in pipes)
    return subprocess.CompletedProcess(proc.args, proc.returncode, _text(out), _text(err))


class _Drain(threading.Thread):
    """Reads a pipe to its end, keeping the last ``keep`` bytes (None: all)."""

    def __init__(self, pipe, keep: int | None) -> None:
        super().__init__(daemon=True)
        self._pipe, self._keep, self._buf = pipe, keep, bytearray()
        self.start()

    def run(self) -> None:
        try:
            while chunk := self._pipe.read1(1 << 16):
                self._buf += chunk
                if self._keep is not None and len(self._buf) > 2 * self._keep:
                    del self._buf[:-self._keep]
        except (OSError, ValueError):
            pass
        finally:
            _close_quietly(self._pipe)

    def data(self) -> bytes:
        if self._keep is not None and len(self._buf) > self._keep:
            del self._buf[:-self._keep]
        return bytes(self._buf)


class _Feed(threading.Thread):
    """Writes ``data`` to a pipe and closes it (a reader that stops early is not an error)."""

    def __init__(self, pipe, data: bytes) -> None:
        super().__init__(daemon=True)
        self._pipe, self._data = pipe, data
        self.start()

    def run(self) -> None:
        try:
            self._pipe.write(self._data)
        except (OSError, ValueError):
            pass
        finally:
            _close_quietly(self._pipe)


def _close_quietly(pipe) -> None:
    """Close one end of a child's pipe; the other end gone already is not an error."""
    try:
        pipe.close()
    except OSError:
        pass


def _join(threads: list[threading.Thread], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))


_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.)")  # a terminal's colour, title, ...


def last_line(text: str | None, limit: int = 120) -> str:
    """A tool's last words as one short line a terminal shows as text: its last line with anything printable,
    bytes that were not text and control characters (escape sequences, carriage returns) dropped, cut to
    ``limit`` characters; empty when it said nothing."""
    for line in reversed((text or "").splitlines()):
        line = _ESCAPE.sub("", line.replace("\ufffd", ""))
        shown = " ".join("".join(c if c.isprintable() else " " for c in line).split())
        if shown:
            return shown if len(shown) <= limit else shown[:limit] + "..."
    return ""


def _text(data: bytes | None) -> str | None:
    return data.decode("utf-8", "replace") if data is not None else None


def _group_cpu_s(pgid: int) -> float | None:
    """CPU seconds (user + system) used so far by the live processes of a process group; None where
    /proc cannot tell (not Linux)."""
    if not os.path.isdir("/proc/self"):
        return None
    total, ticks = 0.0, os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 12 and int(fields[2]) == pgid:  # fields after the name: state ppid pgrp ...
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def _signal_group(proc: subprocess.Popen) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)  # the group the tool leads: its children too
        else:  # pragma: no cover - Windows has no process groups to kill
            proc.kill()
    except (ProcessLookupError, PermissionError):
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


def _worker_start(initializer=None, initargs: tuple = ()) -> None:
    interrupts._state.update(active=1, deferring=0, count=0, first=None, pending=None)
    for sig in interrupts.SIGNALS:
        signal.signal(sig, _worker_signal)
    if initializer is not None:
        initializer(*initargs)


@contextmanager
def worker_pool(workers: int, *, initializer=None, initargs: tuple = ()) -> Iterator[ProcessPoolExecutor]:
    """A process pool that stops with its command, whenever and however it is stopped.

    A worker given Ctrl-C, SIGTERM or SIGHUP (a terminal's Ctrl-C reaches every process of the group)
    while it runs a call raises :class:`helpers.errors.Interrupted` inside it, so the call's own cleanup
    runs (a decompressed copy is removed) and the exception comes back to the parent as the call's
    result; a worker waiting for work carries on waiting (no traceback per process). When the parent is
    stopped, or a call fails, the calls not started are cancelled, the busy workers are stopped (SIGTERM,
    raised in their call as above) and every worker is waited for, so none outlives the command.
    ``initializer(*initargs)`` runs in each worker as it starts (shared counters it keeps, say).
    """
    pool = _Pool(max_workers=workers, initializer=_worker_start, initargs=(initializer, initargs))
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


#: Seconds a regular expression a user gave (``--steps``) may take over a trace's distinct names before it
#: is stopped: Python's engine backtracks, and a pattern whose repeats can match the same text in many
#: ways (``(a|a)*``, ``.*.*.*x``) takes exponential or high-polynomial time on a long name. Matching a
#: million distinct names against an ordinary pattern takes well under a second.
PATTERN_TIMEOUT_S = 5.0
#: The child that does the matching: isolated (-I) and without site packages (-S), so it starts in ~20 ms.
_MATCHER = (
    "import json, re, sys\n"
    "doc = json.loads(sys.stdin.buffer.read())\n"
    "rx = re.compile(doc['pattern'], doc['flags'])\n"
    "sys.stdout.write(''.join('1' if rx.search(n) else '0' for n in doc['names']))\n"
)
_searched: dict[tuple[str, int], dict[str, bool]] = {}  # (pattern, flags) -> name -> found, this process's


def search_bounded(pattern: str, names: Sequence[str], flags: int = 0, timeout_s: float | None = None) -> list[bool]:
    """``re.search(pattern, name, flags)`` for each name, under a time limit that holds.

    The matching runs in a child process killed after ``timeout_s`` (default :data:`PATTERN_TIMEOUT_S`,
    plus a second per 32 MB of names), so no pattern can hang the caller: a regex engine cannot be
    interrupted from another thread, and a child process can. Raises :class:`subprocess.TimeoutExpired`
    when the limit is reached. Answers are remembered per process (ranks of one job share their names).
    """
    known = _searched.setdefault((pattern, flags), {})
    todo = sorted({n for n in names if n not in known})
    if todo:
        payload = json.dumps({"pattern": pattern, "flags": flags, "names": todo}).encode("ascii")
        limit = (PATTERN_TIMEOUT_S if timeout_s is None else timeout_s) + len(payload) / (32 << 20)
        if not sys.executable:  # an embedded interpreter with no program to start: match here, unbounded
            rx = re.compile(pattern, flags)
            found = "".join("1" if rx.search(n) else "0" for n in todo)
        else:
            r = run_bounded([sys.executable, "-I", "-S", "-c", _MATCHER], limit, stdin_bytes=payload, keep_bytes=None)
            found = r.stdout
            if r.returncode != 0 or len(found) != len(todo):
                raise RuntimeError(f"the pattern matcher failed: {(r.stderr.strip().splitlines() or ['no output'])[-1]}")
        if len(known) > 200_000:  # a bound on what is remembered, not on what is matched
            known.clear()
        known.update(zip(todo, (c == "1" for c in found)))
    return [known[n] for n in names]
