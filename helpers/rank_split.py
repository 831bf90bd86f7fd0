"""A job's diagnosis on two cores: most of its ranks' own figures worked out in a forked process.

Most of a multi-rank diagnosis is each rank's own: its critical-path graph, built, walked and replayed for every
fix of the catalogue, and its GPU's idle gaps. None of it can be worked out from a rank's file alone (the job's
time zero, the steps and job-wide figures such as the pinned-copy bandwidth are the whole job's, and the path's
stretches point at rows of the job's table), but all of it can once those are in memory: :func:`split` forks a
process that inherits them and works out the later ranks while this one works out the first ones and the job-wide
figures that need no rank's path. What it sends back goes into the trace's store under the very keys this process
would have filled (``("critical_rank_path", rank)``, ``("critical_rank_mean", rank, fix)``,
``("rank_idle_gaps", rank, 0.0)``), and the job-wide figures are put together from them in rank order, so every
figure is the one a single process gets, bit for bit. A replay the diagnosis asks for later (every finding's fix at
once) is asked of the forked process for its ranks while this one replays its own. Should it fail, its ranks are
worked out here.

On the 8-rank benchmark folder (832,000 events, a quiet machine) the diagnosis took 0.61-0.68 s split against
0.75-0.94 s in one process; copy-on-write page faults after the fork and the serial rest of the diagnosis keep the
gain well under half (docs/benchmarks.md, "Issue 32's 8-rank folder with its ranks split").
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from . import critical as cr
from . import metrics as m
from .errors import TraceError
from .metrics import gpu as _gpu
from .model import Trace
from .outputs import read_regular

#: Events (all ranks together) from which a job's ranks are split across two processes: below it the fork, the
#: results sent back and the start-up of a second process cost more than half the ranks' work saves.
SPLIT_FROM_EVENTS = 200_000
#: None: split where it pays (:func:`pays`); True: always with two ranks or more, False: never (tests compare both).
FORCE: bool | None = None


#: Eighths of a job's ranks this process works out itself (at least one); the forked process takes the rest. On the
#: 8-rank benchmark folder (6 December 2026, 01:01 UTC, quiet) half of them finished 0.61-0.68 s against 0.65-0.76 s with three
#: eighths: what the forked process sends is unpickled here while nothing else runs.
_HERE = 4
#: The store's per-rank entries (first item of the key; the rank second) the forked process sends back beside its
#: share: what the rest of the diagnosis reads of every rank (their unions of host activity and GPU work, windows).
_KEPT = frozenset({"host", "gpu", "windows", "_devices_of"})


def pays(trace: Trace) -> bool:
    """Whether a second process is worth starting for ``trace``: Linux's ``fork`` (the process inherits the table
    as it is), two usable cores, two ranks or more, :data:`SPLIT_FROM_EVENTS` events, and a core free now."""
    if FORCE is False or len(trace.ranks) < 2 or not _can_fork():
        return False
    if "critical_graphs" in m._memo(trace):  # the ranks' graphs are built already: little is left to split
        return False
    return FORCE is True or (len(trace.events) >= SPLIT_FROM_EVENTS and _core_free())


def _core_free() -> bool:
    """Whether another core is idle now: the processes running on the machine (``/proc/loadavg``'s count of runnable
    ones, this one included; the least of three looks a millisecond apart, so a moment's kernel work does not count)
    are fewer than its usable cores. On a busy machine the forked process takes its core's time from this one: with
    the load at 4-5 on 2 cores the split diagnosis took 1.2-3.5 s of wall time against 1.0-3.0 s in one process
    (its own CPU 0.8-1.0 s against 1.0-1.1 s; docs/benchmarks.md). The 1-minute load average lags by a minute."""
    try:
        cores = len(os.sched_getaffinity(0))
        running = []
        for i in range(3):
            if i:
                time.sleep(0.001)
            loadavg = read_regular("/proc/loadavg", 4096, "the load average").decode("ascii")
            running.append(int(loadavg.split()[3].split("/")[0]))
    except (OSError, ValueError, IndexError, TraceError):
        return False
    return min(running) < cores


def _can_fork() -> bool:
    if not sys.platform.startswith("linux") or "fork" not in multiprocessing.get_all_start_methods():
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):  # pragma: no cover - Linux has it
        return False


@contextlib.contextmanager
def split(trace: Trace, fixes: list[tuple], meanwhile: Callable[[], object] = lambda: None) -> Iterator[None]:
    """While the block runs, the later ranks of ``trace`` (a stepped trace: the one the diagnosis measures) are worked
    out by a forked process: their paths, their mean steps under each of ``fixes`` (:func:`helpers.critical._fix_key`)
    and their idle gaps. This process works out its own ranks' and then ``meanwhile()`` (job-wide figures that need
    no rank's path or gaps) before the block starts. Nothing happens where it does not pay (:func:`pays`)."""
    if not pays(trace):
        yield
        return
    memo = m._memo(trace)
    ranks = list(trace.ranks)
    # The later ranks: this process reaches its own first (in rank order), and has the job-wide figures to work out
    # beside them.
    theirs = ranks[max(1, len(ranks) * _HERE // 8):]
    _before_fork(trace, fixes)
    remote = _Remote.start(trace, theirs, fixes)
    if remote is None:
        yield
        return
    memo[cr._REMOTE] = remote
    try:
        # This process's half, worked out now, while the other one works out its half: the figures below find both.
        graphs = cr._graphs(trace)  # (this process's ranks only, now that the others are the forked process's)
        for key, value in _share(trace, {r: graphs.get(r) for r in ranks if r not in remote.ranks}, fixes).items():
            memo[key] = value
        meanwhile()
        yield
    finally:
        remote.close()
        # the forked process's ranks have no graph here: the next figure that needs one builds them all again
        for key in [k for k in memo if k == cr._REMOTE or k == "critical_graphs"
                    or (isinstance(k, tuple) and k[:1] == ("critical_graph_here",))]:
            del memo[key]


def _before_fork(trace: Trace, fixes: list[tuple]) -> None:
    """The whole table's masks and job-wide figures both processes read, worked out once, before the fork."""
    cr._table_masks(trace, trace.ranks[0])
    m.windows(trace)
    if trace.has_gpu:
        _gpu._replays(trace)
        if any(rate == "pinned" for fix in fixes for _, rate in fix[2]):
            cr.pinned_gb_per_s(trace)


def _share(trace: Trace, graphs: dict[int, Any], fixes: list[tuple]) -> dict[tuple, Any]:
    """The ranks' own figures, under the store's keys: each rank's path, mean step under each fix, idle gaps."""
    out: dict[tuple, Any] = {}
    for rank, g in graphs.items():
        out[("critical_rank_path", rank)] = None if g is None else cr._rank_path(g)
        for key in fixes:
            out[("critical_rank_mean", rank, key)] = None if g is None else cr._rank_mean(trace, g, key)
        if trace.has_gpu:
            out[("rank_idle_gaps", rank, 0.0)] = _gpu._rank_idle_gaps(trace, rank, 0.0)
    return out


class _Remote:
    """The forked process, as this one sees it: the ranks it works out, and the replays asked of it."""

    def __init__(self, trace: Trace, ranks: list[int], fixes: list[tuple], pid: int, conn: Any) -> None:
        self.trace, self.ranks, self.fixes = trace, frozenset(ranks), set(fixes)
        self.pid, self.conn = pid, conn
        self.waiting = 1  # messages owed: its share, then one per replay asked
        self.asked: set[tuple] = set()

    @classmethod
    def start(cls, trace: Trace, ranks: list[int], fixes: list[tuple]) -> _Remote | None:
        ctx = multiprocessing.get_context("fork")
        here, there = ctx.Pipe(duplex=True)
        try:
            pid = os.fork()
        except OSError:  # no process to be had (a limit on processes, memory): one process does it all
            here.close()
            there.close()
            return None
        if pid == 0:  # pragma: no cover - the forked process (coverage does not follow it)
            here.close()
            _serve(trace, ranks, fixes, there)
        there.close()
        return cls(trace, ranks, fixes, pid, here)

    def ask(self, key: tuple) -> None:
        """Ask for the forked process's ranks' mean steps under ``key`` (unless sent with its share, or asked)."""
        if self.conn is None or key in self.fixes or key in self.asked:
            return
        try:
            self.conn.send(key)
        except (OSError, ValueError):
            self._lost()
            return
        self.asked.add(key)
        self.waiting += 1

    def receive(self) -> None:
        """Everything the forked process owes, put in the store (nothing, where it failed: its ranks are then
        worked out here)."""
        memo = m._memo(self.trace)
        while self.waiting and self.conn is not None:
            try:
                entries = self.conn.recv()
            except Exception:  # the pipe broke or its message did not unpickle: its ranks are worked out here
                self._lost()
                return
            if entries is None:  # it met an error of its own
                self._lost()
                return
            self.waiting -= 1
            for key, value in entries.items():
                if key not in memo:  # (one worked out here meanwhile is the same: it stays, as handed out)
                    memo[key] = value

    def _lost(self) -> None:
        self.waiting = 0
        self.close()

    def close(self) -> None:
        working = self.waiting > 0  # it still owes something: this process stopped early (an error, a signal)
        if self.conn is not None:
            with contextlib.suppress(OSError, ValueError):
                self.conn.send(None)
            self.conn.close()
            self.conn = None
        if self.pid:
            pid, self.pid = self.pid, 0
            with contextlib.suppress(ChildProcessError, ProcessLookupError):
                if working:
                    os.kill(pid, signal.SIGKILL)
                if not os.waitpid(pid, os.WNOHANG)[0]:
                    # Told to stop, it ends in moments; its exit (a large address space to unmap) is waited for by a
                    # thread, not here: 0.05 s of this process's time on the benchmark folder.
                    threading.Thread(target=_reap, args=(pid,), daemon=True).start()


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, 0)


def _serve(trace: Trace, ranks: list[int], fixes: list[tuple], conn: Any) -> None:  # pragma: no cover - forked
    """The forked process: its ranks' share sent back, then each replay asked of it, until told to stop. It ends
    with ``os._exit``: nothing of the parent's (buffered output, exit handlers, temporary files) is its to finish."""
    status = 0
    try:
        gc.disable()  # a short life: collections would only walk the parent's objects
        for sig in (signal.SIGINT, signal.SIGHUP):  # a terminal's signals go to the whole group: the parent stops it
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        memo = m._memo(trace)
        before = set(memo)
        stepped = m.stepped(trace)
        graphs = {rank: cr._build(stepped, rank) for rank in ranks}
        share = _share(trace, graphs, fixes)
        # what its ranks' graphs and gaps read that the rest of the diagnosis reads again (their host activity, GPU
        # work, windows): sent too, so the parent does not work it out a second time
        share.update({k: memo[k] for k in memo if k not in before and isinstance(k, tuple) and len(k) > 1
                      and k[0] in _KEPT and k[1] in ranks})
        conn.send(share)
        while (key := conn.recv()) is not None:
            conn.send({("critical_rank_mean", rank, key): None if g is None else cr._rank_mean(trace, g, key)
                       for rank, g in graphs.items()})
    except EOFError:
        pass
    except BaseException:  # noqa: BLE001 - whatever it met, the parent works its ranks out itself
        status = 1
        with contextlib.suppress(BaseException):
            conn.send(None)
    finally:
        os._exit(status)
