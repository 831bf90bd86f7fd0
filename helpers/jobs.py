"""Jobs of many ranks: a folder of per-rank traces analysed rank by rank, then reduced across ranks.

``helpers.load`` on a folder builds one events table of every rank, so its memory grows with the
whole job. Here each rank is read and analysed on its own (in a process pool by default, one after
another with ``workers=1``, or on a Dask distributed cluster given its scheduler's address), and what
comes back is a small :class:`RankSummary` per rank (its per-step communication figures and its own
findings), never the events. :func:`reduce_ranks` turns the summaries into the cross-rank report:
the same compute spread, exposed communication and slowest/fastest ranks that
:func:`helpers.diagnose` computes on the in-memory folder, plus the stragglers. Memory is bounded by
the ranks in flight at a time (one per worker), not by the job.

    report = analyse_job("traces/")          # or: python -m helpers ranks traces/ [--workers N]
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import thresholds as th
from .errors import TraceError
from .model import build_events, check_step_pattern, finish
from .procs import worker_pool
from .readers.budget import Budget

#: Columns of a rank's per-step communication figures, as :func:`helpers.metrics.comm_stats` names them.
COMM_COLUMNS = ("step", "window_us", "collective_us", "compute_us", "exposed_us")

Progress = Callable[[int, int], None]  # (ranks done, ranks in all)


@dataclass
class RankSummary:
    """What one rank's analysis hands back: figures, not events (a few KB whatever the trace)."""

    rank: int
    source: str
    format: str
    events: int
    has_gpu: bool
    comm: dict[str, np.ndarray]  # COMM_COLUMNS -> one value per analysis window (step)
    findings: list[tuple[str, float, str]] = field(default_factory=list)  # (pattern, cost, summary), costliest first
    diagnosed: bool = True  # False: only its figures were taken (a job of more than DIAGNOSED_RANKS ranks)
    path: dict[str, Any] = field(default_factory=dict)  # its critical path: step_ms, ms a step by cause, each fix's step
    world_size: int = 0  # the job's size as this rank's trace gives it (0: not given), readers.job_world_size
    process: tuple[int, float, float] | None = None  # a file naming no rank: its host pid and span, readers.process_span
    marked: bool = True  # whether its trace marks steps (the step pattern's ranges, or ProfilerStep) before any are inferred

    @property
    def steps(self) -> int:
        return int((self.comm["step"] >= 0).sum())


def job_files(folder: str | os.PathLike) -> list[Path]:
    """The trace files of a folder of per-rank traces, in the order :func:`helpers.load` reads them."""
    from .readers import trace_files

    d = Path(folder)
    try:
        if not d.is_dir():
            raise TraceError(f"{d}: not a folder; pass the folder that holds one trace per rank")
    except OSError as exc:
        raise TraceError(f"{d}: the folder cannot be examined ({exc.strerror}); check its permissions") from None
    return trace_files(d)


#: ``diagnose FOLDER`` reads a folder as one timeline up to this many ranks and bytes of trace text together;
#: past either it reads it rank by rank (:func:`rank_by_rank`). One timeline holds every event at once (about
#: twice the text in memory) and its diagnosis walks the ranks one after another on one core; rank by rank,
#: memory is a rank per core and the ranks are diagnosed in parallel.
TIMELINE_RANKS = 64
TIMELINE_BYTES = 512 << 20


def rank_by_rank(folder: str | os.PathLike) -> str | None:
    """Why ``diagnose`` reads ``folder`` rank by rank (a phrase: its ranks or its size, beyond what is read as one
    timeline), or None when
    it is a file or a job small enough to read as one timeline. Sizes are the files' own (a gzipped file's
    size as recorded in it)."""
    from .readers import _gzip_size_hint

    try:
        if not Path(folder).is_dir():
            return None
    except (OSError, ValueError):
        return None
    files = job_files(folder)
    if len(files) > TIMELINE_RANKS:
        return f"{len(files):,} ranks, more than the {TIMELINE_RANKS} diagnosed as one timeline"
    total = 0
    for f in files:
        try:
            size = f.stat().st_size
        except OSError:
            return None  # the reader says what is wrong with it
        total += _gzip_size_hint(f, size) if f.name.endswith(".gz") else size
    return (f"{total / 2**20:,.0f} MB of traces, more than the {TIMELINE_BYTES >> 20} MB held as one timeline"
            if total > TIMELINE_BYTES else None)


def _rank_of(path: Path, meta: dict[str, Any], index: int) -> int:
    """The rank a file holds, as the folder reader decides it: the trace's own distributed info, else
    ``rank N`` in the file name, else the file's place in the sorted folder."""
    from .readers import rank_in_name

    rank = meta.get("distributed", {}).get("rank")
    if rank is None:
        named = rank_in_name(path)
        rank = index if named is None else named
    return int(rank)


def analyse_rank(path: str | os.PathLike, index: int = 0, step_pattern: str | None = None,
                 max_bytes: int | None = None, max_events: int | None = None, findings: bool = True, *,
                 budget: Budget | None = None) -> RankSummary:
    """Read one rank's trace and analyse it alone: its per-step communication figures and its findings.

    ``index`` is the file's place in its folder (the rank when the file says none). Runs in a worker
    process or on a cluster worker, so it takes and returns only small, picklable values. ``budget``
    counts what is read against the job's limits together (:mod:`helpers.readers.budget`). Without
    ``findings`` the rank's own diagnosis is left out (its figures only).
    """
    return _analyse_read(_read_rank(path, index, max_bytes, max_events, budget), step_pattern, findings)


def _read_rank(path: str | os.PathLike, index: int, max_bytes: int | None, max_events: int | None,
               budget: Budget | None) -> tuple:
    """One rank's file read: (path, its columns labelled with its rank, metadata, format, rank)."""
    from .readers import MAX_BYTES, MAX_EVENTS, read_file

    p = Path(path)
    columns, meta, fmt = read_file(p, MAX_BYTES if max_bytes is None else max_bytes,
                                   MAX_EVENTS if max_events is None else max_events, table=False, budget=budget)
    if isinstance(columns, pd.DataFrame):
        columns = {c: columns[c].to_numpy() for c in columns.columns}
    columns = {c: v for c, v in columns.items() if c not in ("step", "end_us")}  # labelled again below
    rank = _rank_of(p, meta, index)
    columns["rank"] = np.full(len(columns["name"]), rank, dtype=np.int64)  # as the folder reader labels a file
    return p, columns, meta, fmt, rank


def _analyse_read(read: tuple, step_pattern: str | None, findings: bool) -> RankSummary:
    from . import metrics
    from .diagnosis import diagnose
    from .readers import job_world_size, process_span

    p, columns, meta, fmt, rank = read
    process = process_span(p, meta, columns)
    trace = finish(build_events(columns), str(p), fmt, {k: v for k, v in meta.items() if k != "origin_us"}, step_pattern)
    marked = bool(len(trace.metadata["steps"]))
    trace = metrics.stepped(trace)  # its steps: the steady state's repeats where none is marked, as diagnose takes
    cs = metrics.comm_stats(trace)
    comm = {c: cs[c].to_numpy(dtype=np.int64 if c == "step" else np.float64) for c in COMM_COLUMNS}
    world = job_world_size([meta])
    if not findings:
        return RankSummary(rank, str(p), fmt, len(trace.events), trace.has_gpu, comm, [], diagnosed=False,
                           world_size=world, process=process, marked=marked)
    result = diagnose(trace)
    found = [(f.pattern, float(f.cost), f.summary) for f in result]
    sg = result.signals
    path = {k: sg[k] for k in ("step_ms", "path_ms_per_step", "step_ms_if_fixed") if k in sg}  # type: ignore[literal-required]
    from .critical import rank_steps

    path["steps"] = rank_steps(trace, rank)  # what the job's path needs of this rank, step by step (small)
    return RankSummary(rank, str(p), fmt, len(trace.events), trace.has_gpu, comm, found, diagnosed=True, path=path,
                       world_size=world, process=process, marked=marked)


def analyse_figures(args: list[tuple], budget: Budget | None = None) -> list[RankSummary]:
    """The figures of a few ranks (no diagnosis), as :func:`analyse_rank` gives each with ``findings=False``,
    worked out on one table of them all: a rank's figures are its own rows' (every metric here takes one rank at a
    time), and a table, its steps and the figures' frames cost about 5 ms a rank however few its events, which
    a job of 10,000 tiny ranks paid 10,000 times. ``args`` are :func:`analyse_rank`'s. Ranks without step
    markers (whose steps are the steady state's repeats, found rank by rank), large ranks and a rank claimed
    twice are analysed on their own. Memory: a large rank is analysed as soon as it is read (as one rank alone
    would be), and small ones are held to :data:`JOIN_HELD_BYTES` together before their table is made."""
    step_pattern = args[0][2] if args else None
    out: list[RankSummary | None] = [None] * len(args)
    held: list[tuple[int, tuple]] = []
    held_bytes = 0
    for i, a in enumerate(args):
        read = _read_rank(a[0], a[1], a[3], a[4], budget)
        size = _joinable_bytes(read[1])
        if size is None:
            out[i] = _analyse_read(read, step_pattern, False)
            continue
        held.append((i, read))
        held_bytes += size
        if held_bytes >= JOIN_HELD_BYTES:
            _figures_of_held(held, step_pattern, out)
            held, held_bytes = [], 0
    _figures_of_held(held, step_pattern, out)
    return out  # type: ignore[return-value]


def _figures_of_held(held: list[tuple[int, tuple]], step_pattern: str | None, out: list[RankSummary | None]) -> None:
    where = [i for i, _ in held]
    reads = dict(held)
    if len({reads[i][4] for i in where}) < len(where):
        where = []  # two files claim one rank: the job's reduction refuses it; each is read as itself until then
    kinds: dict[frozenset, list[int]] = {}  # ranks read from different formats (their columns differ) apart
    for i in where:
        kinds.setdefault(frozenset(reads[i][1]), []).append(i)
    for group in kinds.values():
        if len(group) > 1:
            _figures_together([reads[i] for i in group], step_pattern, group, out)
    for i, read in held:
        if out[i] is None:
            out[i] = _analyse_read(read, step_pattern, False)


#: Ranks of up to this many events, and of columns of up to JOIN_BYTES, share a table for their figures
#: (:func:`analyse_figures`); a larger rank's own work outweighs the table's fixed costs, and a shared table's masks
#: would read every rank's rows for each. The ranks held for one table hold at most JOIN_HELD_BYTES together (a
#: folder of small files that inflate to large ones is not held whole).
JOIN_EVENTS = 10_000
JOIN_BYTES = 2 << 20
JOIN_HELD_BYTES = 16 << 20


def _joinable_bytes(columns: dict[str, Any]) -> int | None:
    """The bytes of a rank's columns when they can share a table with others (some events, not too many nor too
    large, with finite start times), else None."""
    start = np.asarray(columns["start_us"], dtype=np.float64)
    if not 0 < len(start) <= JOIN_EVENTS or not bool(np.isfinite(start).all()):
        return None
    total = 0
    for values in columns.values():
        if isinstance(values, pd.Categorical):
            total += values.codes.nbytes + sum(len(c) if isinstance(c, str) else 64 for c in values.categories)
        else:
            values = np.asarray(values)
            total += values.nbytes
            if values.dtype == object:  # the text itself, beside the references
                total += sum(len(v) if isinstance(v, str) else 64 for v in values)
        if total > JOIN_BYTES:
            return None
    return total


def _figures_together(reads: list[tuple], step_pattern: str | None, where: list[int],
                      out: list[RankSummary | None]) -> None:
    """Fill ``out[where[k]]`` with the figures of ``reads[k]`` from one table of them all; a rank without steps
    of its own is left for its own analysis."""
    from . import metrics
    from .model import GPU_WORK_KINDS, kind_in
    from .readers import _concat, job_world_size, process_span

    tables = []
    for _, columns, _, _, _ in reads:
        cols = dict(columns)
        start = np.asarray(cols["start_us"], dtype=np.float64)
        # each rank's own zero, as its own table has it (build_events below then takes off 0.0: the same numbers)
        cols["start_us"] = start - start.min()
        tables.append(cols)
    events = build_events({c: _concat([t[c] for t in tables]) for c in tables[0]})
    try:
        trace = finish(events, "", reads[0][3], {}, step_pattern)
    except TraceError:  # a step pattern's time bound, met on the ranks' names together: each rank on its own decides
        return
    stepped = set(trace.metadata["steps"]["rank"].tolist())
    if len(stepped) < len(reads):  # ranks without steps of their own: the rest together again, without them
        keep = [k for k, r in enumerate(reads) if r[4] in stepped]
        if len(keep) > 1:
            _figures_together([reads[k] for k in keep], step_pattern, [where[k] for k in keep], out)
        return
    cs = metrics.comm_stats(trace)
    ev = trace.events
    rank = ev["rank"].to_numpy()
    # as Trace.has_gpu asks of a rank's own table: some row on a device, and some row of GPU work (not the same row)
    gpu = (set(np.unique(rank[ev["device"].to_numpy() >= 0]).tolist())
           & set(np.unique(rank[kind_in(ev, GPU_WORK_KINDS)]).tolist()))
    counts = dict(zip(*np.unique(rank, return_counts=True)))
    by_rank = cs.groupby("rank").indices
    empty = np.zeros(0, dtype=np.int64)
    for k, (p, _, meta, fmt, r) in enumerate(reads):
        rows = by_rank.get(r, empty)
        comm = {c: cs[c].to_numpy(dtype=np.int64 if c == "step" else np.float64)[rows] for c in COMM_COLUMNS}
        out[where[k]] = RankSummary(r, str(p), fmt, int(counts.get(r, 0)), r in gpu, comm, [], diagnosed=False,
                                    world_size=job_world_size([meta]), process=process_span(p, meta, reads[k][1]))


def default_workers(n_files: int) -> int:
    """One process per usable core, at most one per file."""
    from .readers import usable_cores

    return max(1, min(n_files, usable_cores()))


#: A worker count past this is refused as a mistake rather than capped (no machine has a million cores).
MAX_WORKERS = 1_000_000


def worker_count(workers: object, n_files: int) -> int:
    """The processes to use for ``n_files`` ranks when ``workers`` were asked for (None: the default): at most
    one per file and one per usable core, since more only share the same cores; a count that is not a whole
    number of at least 1, or beyond any machine (:data:`MAX_WORKERS`), is refused."""
    from .readers import usable_cores

    if workers is None:
        return default_workers(n_files)
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)):
        raise TraceError(f"workers={workers!r}: give a whole number of processes, 1 or more")
    if workers < 1:
        raise TraceError(f"workers={workers}: give 1 or more")
    if workers > MAX_WORKERS:
        shown = str(int(workers))
        shown = shown if len(shown) <= 12 else f"{shown[:6]}...({len(shown)} digits)"
        raise TraceError(f"{shown} worker processes: not a count any machine runs; give one from 1 to {MAX_WORKERS:,} "
                         f"(more than one per core or per file is never used; this machine has {usable_cores()} cores)")
    return max(1, min(int(workers), n_files, usable_cores()))


def analyse_job(folder: str | os.PathLike, *, workers: int | None = None, scheduler: str | None = None,
                step_pattern: str | None = None, max_bytes: int | None = None, max_events: int | None = None,
                progress: Progress | None = None) -> dict[str, Any]:
    """Analyse every rank of ``folder`` on its own and reduce them into the cross-rank report.

    ``workers``: processes (default one per core; 1 = one rank after another in this process; never more
    than one per file or per core). ``scheduler``: the address of a Dask distributed scheduler
    (``tcp://host:8786``) to run the ranks on instead; its workers need this package installed and the
    folder at the same path. ``progress(done, total)`` is called as ranks finish.

    Limits: without ``max_bytes`` / ``max_events`` each rank's file is held to the readers' defaults (memory
    here is one rank per worker, so a job may be larger than one trace may be); given, they hold for the
    ranks together, as for ``helpers.load`` of the folder.
    """
    from .readers import limit

    step_pattern = check_step_pattern(step_pattern)
    files = job_files(folder)
    total = None
    if max_bytes is not None or max_events is not None:
        max_bytes = None if max_bytes is None else limit(max_bytes, "max_bytes")
        max_events = None if max_events is None else limit(max_events, "max_events")
        total = (Path(folder), _NO_LIMIT if max_bytes is None else max_bytes, _NO_LIMIT if max_events is None else max_events)
        if max_bytes is not None:
            _refuse_job_size(Path(folder), files, max_bytes)
    every = len(files) <= DIAGNOSED_RANKS
    args = [(str(f), i, step_pattern, max_bytes, max_events, every) for i, f in enumerate(files)]
    n = 1 if scheduler is not None else worker_count(workers, len(files))

    def run(todo: list[tuple], budget: tuple | None, shown: Progress | None) -> list[RankSummary]:
        if scheduler is not None:
            return _on_dask(scheduler, todo, shown)
        return _on_pool(n, todo, shown, budget) if n > 1 else _serial(todo, shown, budget)

    steps = len(files) if every else len(files) + DIAGNOSED_RANKS
    summaries = run(args, total, progress and (lambda done, _: progress(done, steps)))
    if scheduler is not None and total is not None:
        _refuse_job_events(total, sum(s.events for s in summaries))
    _refuse_unmatched_pattern(Path(folder), summaries, step_pattern)
    if not every:  # the ranks worth a diagnosis of their own, read again for it (their bytes were counted once)
        chosen = ranks_to_diagnose(summaries, DIAGNOSED_RANKS)
        redone = run([(*args[i][:5], True) for i in chosen], None,
                     progress and (lambda done, _: progress(len(files) + done, len(files) + len(chosen))))
        for i, s in zip(chosen, redone):
            summaries[i] = s
    report = reduce_ranks(summaries)
    report["folder"] = str(folder)
    return report


#: A job of more ranks than this is diagnosed rank by rank for this many of them (the stragglers, the ranks
#: that compute most and least and wait most, and an even spread of the rest: :func:`ranks_to_diagnose`);
#: the others give their figures only. A diagnosis costs a rank 20-40 ms however small it is, so 10,000
#: tiny ranks would spend minutes in it; their figures take a few milliseconds each.
DIAGNOSED_RANKS = 256


def ranks_to_diagnose(summaries: list[RankSummary], k: int) -> list[int]:
    """Which of ``summaries`` (their positions, at most ``k``) get a diagnosis of their own: every straggler (by
    compute per step against the median rank's, as :func:`reduce_ranks` finds them), the eight that compute
    most, least and wait most, then ranks evenly spread across the order of their compute."""
    compute = np.array([float(np.mean(s.comm["compute_us"])) if len(s.comm["compute_us"]) else 0.0 for s in summaries])
    exposed = np.array([float(np.mean(s.comm["exposed_us"])) if len(s.comm["exposed_us"]) else 0.0 for s in summaries])
    rank = np.array([s.rank for s in summaries])
    by_compute = np.lexsort((rank, -compute))  # ties in the order the report's tables list them: by rank
    median = float(np.median(compute)) if len(compute) else 0.0
    stragglers = [int(i) for i in by_compute if median > 0 and compute[i] > median * (1 + th.STRAGGLER_EXCESS)]
    picks = [*stragglers, *by_compute[:8].tolist(), *np.lexsort((rank, compute))[:8].tolist(),
             *np.lexsort((rank, -exposed))[:8].tolist(),
             *by_compute[np.linspace(0, len(by_compute) - 1, k).round().astype(int)].tolist()]
    chosen: dict[int, None] = {}
    for i in picks:
        if len(chosen) >= k:
            break
        chosen.setdefault(int(i))
    return sorted(chosen)


_NO_LIMIT = 2**62  # a total not limited (only the limits given hold for the ranks together)


def _refuse_unmatched_pattern(folder: Path, summaries: list[RankSummary], pattern: str | None) -> None:
    """A step pattern that names no range of any rank is refused, as ``helpers.load`` of the folder refuses it
    (readers._refuse_unmatched_pattern): every rank's figures would be its inferred steps' without a word."""
    with_events = [s for s in summaries if s.events]
    if pattern is None or not with_events or any(s.marked for s in with_events):
        return
    raise TraceError(f"{folder}: the step pattern {pattern[:60]!r} matches no range of any rank's trace; give a "
                     "pattern of the ranges that mark a step, or leave it out to have the steps found")


def _refuse_job_size(folder: Path, files: list[Path], max_bytes: int) -> None:
    """The job's uncompressed files together over ``max_bytes`` are refused before any is read."""
    from .readers import _refuse_folder_size, _sizes

    _refuse_folder_size(folder, files, _sizes(folder, files), max_bytes)


def _refuse_job_events(total: tuple, events: int) -> None:
    folder, max_bytes, max_events = total
    Budget(folder, max_bytes, max_events).add_events(events)


def _serial(args: list[tuple], progress: Progress | None, total: tuple | None = None) -> list[RankSummary]:
    budget = Budget(*total) if total is not None else None
    out: list[RankSummary] = []
    for batch in _batches(args):
        for summary in _analyse_some(batch, budget):  # (a batch to diagnose is analysed as its ranks are asked for)
            out.append(summary)
            if progress:
                progress(len(out), len(args))
    return out


#: The job's shared counts in a worker process (set by :func:`_job_process`), or None.
_JOB_TOTAL: tuple | None = None


def _job_process(total: tuple | None) -> None:
    """Set up a worker: the job's limits and shared counts."""
    global _JOB_TOTAL
    _JOB_TOTAL = total


def _analyse_batch(batch: list[tuple]) -> list[RankSummary]:
    """A worker's task: a few ranks, one after another (small ranks go in batches, so a job of thousands of
    tiny files does not pay a round trip to the worker for each)."""
    return list(_analyse_some(batch, Budget(*_JOB_TOTAL) if _JOB_TOTAL is not None else None))


def _analyse_some(batch: list[tuple], budget: Budget | None) -> Iterator[RankSummary]:
    """A few ranks: those to diagnose one by one, those for their figures only together (:func:`analyse_figures`)."""
    if len(batch) > 1 and not any(a[5] for a in batch):
        yield from analyse_figures(batch, budget)
        return
    for a in batch:
        yield analyse_rank(*a, budget=budget)


#: A worker's task holds ranks until their files add up to this many bytes (or _BATCH_RANKS of them).
_BATCH_BYTES = 4 << 20
_BATCH_RANKS = 64


def _batches(args: list[tuple]) -> list[list[tuple]]:
    out: list[list[tuple]] = []
    size = _BATCH_BYTES
    for a in args:
        try:
            n = os.stat(a[0]).st_size
        except OSError:
            n = _BATCH_BYTES  # the read reports it
        if size + n > _BATCH_BYTES or len(out[-1]) >= _BATCH_RANKS:
            out.append([])
            size = 0
        out[-1].append(a)
        size += n
    return out


def _on_pool(workers: int, args: list[tuple], progress: Progress | None, total: tuple | None = None) -> list[RankSummary]:
    """At most ``2 * workers`` tasks queued at a time, so a job of thousands of files holds a few ranks'
    worth of pending work, and a failed rank stops the job without reading the rest. The limits given
    hold for the ranks together: the workers share their counts."""
    import multiprocessing
    from concurrent.futures.process import BrokenProcessPool

    ctx = multiprocessing.get_context()
    shared = (*total, (ctx.Value("q", 0), ctx.Value("q", 0))) if total is not None else None
    batches = _batches(args)
    results: dict[int, list[RankSummary]] = {}
    done_ranks = 0
    todo = iter(enumerate(batches))
    failed = _FirstFailure()
    try:
        with worker_pool(workers, initializer=_job_process, initargs=(shared,)) as pool:
            running = {}
            for i, b in todo:
                running[pool.submit(_analyse_batch, b)] = i
                if len(running) >= 2 * workers:
                    break
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = running.pop(fut)
                    try:
                        results[i] = fut.result()
                    except TraceError as exc:
                        failed.note(i, exc)
                        continue
                    done_ranks += len(results[i])
                    if progress:
                        progress(done_ranks, len(args))
                    nxt = next(todo, None) if not failed else None
                    if nxt is not None:
                        running[pool.submit(_analyse_batch, nxt[1])] = nxt[0]
                running = {f: i for f, i in running.items() if failed.could_change(i)}
            failed.raise_it()  # inside the pool: the batches still running after it are stopped
    except BrokenProcessPool:
        raise TraceError("a worker process analysing the ranks ended without an answer (killed, most likely for want "
                         "of memory); run with fewer processes (--workers 1)") from None
    return [s for i in range(len(batches)) for s in results[i]]


class _FirstFailure:
    """The failure a job reports: that of the first rank in the folder's order that failed, whichever failed first in
    time, so a folder with several bad files names the same one on every run. Once one has failed, only the ranks
    before it can change which, and only those are waited for."""

    def __init__(self) -> None:
        self.index: int | None = None
        self.error: TraceError | None = None

    def __bool__(self) -> bool:
        return self.index is not None

    def note(self, index: int, error: TraceError) -> None:
        if self.index is None or index < self.index:
            self.index, self.error = index, error

    def could_change(self, index: int) -> bool:
        """Whether the rank (or batch) at ``index`` is still worth waiting for."""
        return self.index is None or index < self.index

    def raise_it(self) -> None:
        if self.error is not None:
            raise self.error


def _on_dask(address: str, args: list[tuple], progress: Progress | None, timeout: float = 30) -> list[RankSummary]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise TraceError("--scheduler needs Dask's distributed scheduler: pip install 'dask[distributed]'") from None
    _probe_scheduler(address)
    with _quiet_dask():  # Dask logs its reconnection attempts on stderr: the command says what happened in one line
        try:
            client = Client(address, timeout=timeout)  # the default client while it runs: as_completed needs one
        except (OSError, TimeoutError, ValueError) as exc:
            raise TraceError(f"{address}: no Dask scheduler answers there ({exc}); check the address "
                             "(tcp://HOST:8786) and that the scheduler is running") from None
        except Exception as exc:  # something else answers there (a web server, a proxy), or Dask lacks the protocol
            raise TraceError(f"{address}: Dask could not talk to a scheduler there ({type(exc).__name__}: "
                             f"{str(exc)[:120]}); check the address and port, and that a Dask scheduler listens there") from None
        try:
            return _run_on(client, address, args, progress, as_completed)
        finally:
            client.close(timeout=SCHEDULER_CONNECT_S)


#: Seconds a scheduler may go without a worker (none joined yet, or all have left) before the ranks are given up:
#: tasks on a scheduler with no workers wait for one forever.
SCHEDULER_NO_WORKERS_S = 30.0


def _run_on(client, address: str, args: list[tuple], progress: Progress | None, as_completed) -> list[RankSummary]:
    """The ranks on a connected scheduler: each result as it comes, the workers checked while none comes."""
    import concurrent.futures

    from distributed.comm import CommClosedError

    lost = f"{address}: the connection to the scheduler was lost before every rank was analysed"
    try:
        futures = [client.submit(analyse_rank, *a, key=f"helpers-rank-{i}-{os.getpid()}", pure=False)
                   for i, a in enumerate(args)]
        index = {f.key: i for i, f in enumerate(futures)}
        results: dict[int, RankSummary] = {}
        pending = as_completed(futures, timeout=None)
        idle_since = None
        failed = _FirstFailure()

        def outstanding() -> bool:  # a rank the answer still depends on: any before the first failure in order
            return any(i not in results for i in range(len(args) if failed.index is None else failed.index))

        while outstanding():
            batch = _next_done(pending, 1.0)
            if not batch:  # nothing finished this second: are there workers to finish anything?
                if client.status != "running":
                    raise TraceError(f"{lost}; check that the scheduler is still running")
                try:
                    workers = client.scheduler_info(n_workers=-1).get("workers")
                except (OSError, TimeoutError) as exc:  # asking the scheduler itself failed: it is gone
                    raise TraceError(f"{lost} ({type(exc).__name__}); check that the scheduler is still running") from None
                if workers:
                    idle_since = None
                else:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since >= SCHEDULER_NO_WORKERS_S:
                        raise TraceError(f"{address}: the scheduler has had no workers for {SCHEDULER_NO_WORKERS_S:g} s, "
                                         f"so {len(args) - len(results)} rank(s) could not be analysed; start workers "
                                         f"(dask worker {address}) or run without --scheduler")
                continue
            for fut in batch:
                try:
                    results[index[fut.key]] = fut.result()  # a worker's TraceError comes here as itself
                except TraceError as exc:
                    failed.note(index[fut.key], exc)
                fut.release()
                if progress and not failed:
                    progress(len(results), len(args))
        failed.raise_it()
        return [results[i] for i in range(len(args))]
    except (concurrent.futures.CancelledError, CommClosedError) as exc:  # the scheduler went away, or its link
        # (a worker's own error, an OSError reading a rank say, is raised as itself by fut.result() above)
        raise TraceError(f"{lost} ({type(exc).__name__}); check that the scheduler is still running") from None


def _next_done(pending, wait_s: float) -> list:
    """The futures ``as_completed`` has finished within ``wait_s`` seconds (empty when none)."""
    deadline = time.monotonic() + wait_s
    while True:
        batch = pending.next_batch(block=False)
        if batch or pending.is_empty() or time.monotonic() >= deadline:
            return batch
        time.sleep(0.05)


@contextmanager
def _quiet_dask():
    import logging

    loggers = [logging.getLogger(n) for n in ("distributed", "distributed.client", "distributed.comm", "tornado")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


#: Seconds to wait for a TCP connection to the scheduler before saying none answers (Dask itself retries
#: for its whole time-out, 30 s, even when the port refuses at once), and then for its first bytes.
SCHEDULER_CONNECT_S = 5.0


def _probe_scheduler(address: str) -> None:
    """Refuse at once an address where nothing listens (Dask would retry for its whole time-out)."""
    import socket
    from urllib.parse import urlsplit

    scheme = address.split("://", 1)[0] if "://" in address else "tcp"
    if scheme not in ("tcp", "tls"):
        return  # ucx://, inproc://, ...: Dask's own connection says what is wrong
    try:
        parts = urlsplit(address if "://" in address else f"tcp://{address}")
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise TraceError(f"{address}: not a scheduler address ({exc}); write it as tcp://HOST:8786") from None
    if not host or port is None:
        raise TraceError(f"{address}: not a scheduler address (a host and a port are needed); write it as tcp://HOST:8786")
    try:
        with socket.create_connection((host, port), timeout=SCHEDULER_CONNECT_S) as conn:
            if scheme == "tcp":  # a Dask scheduler speaks first (its handshake); Dask waits for it without a bound
                try:
                    said = conn.recv(1)
                except TimeoutError:
                    raise TraceError(f"{address}: something accepts connections there but says nothing within "
                                     f"{SCHEDULER_CONNECT_S:g} s, as a Dask scheduler would at once; check the address "
                                     "and port") from None
                if not said:
                    raise TraceError(f"{address}: something accepts connections there and closes them at once; no Dask "
                                     "scheduler answers there: check the address and port") from None
    except socket.gaierror as exc:
        raise TraceError(f"{address}: the host {host} is not known ({exc.strerror}); check the address") from None
    except TimeoutError:
        raise TraceError(f"{address}: no answer within {SCHEDULER_CONNECT_S:g} s; check the address, the port "
                         "and any firewall between here and the scheduler") from None
    except OSError as exc:
        raise TraceError(f"{address}: no Dask scheduler answers there ({exc.strerror or exc}); check the address "
                         "(tcp://HOST:8786) and that the scheduler is running") from None


def reduce_ranks(summaries: list[RankSummary]) -> dict[str, Any]:
    """The cross-rank report from per-rank summaries.

    ``compute_spread``, ``slowest_rank``/``fastest_rank``, ``comm_exposed_share``,
    ``collective_ms_per_step`` and ``exposed_ms_per_step`` are computed as
    :func:`helpers.diagnosis.signals` computes them on the in-memory folder (same figures);
    ``per_rank`` has a row per rank (mean per step) and ``stragglers`` the ranks whose compute per
    step exceeds the median rank's by :data:`helpers.thresholds.STRAGGLER_EXCESS`.
    """
    from .readers import refuse_one_process_at_different_times

    seen: dict[int, str] = {}
    for s in summaries:
        if s.rank in seen:
            raise TraceError(f"two files claim rank {s.rank} ({Path(seen[s.rank]).name} and {Path(s.source).name}); "
                             "keep one trace per rank in the folder")
        seen[s.rank] = s.source
    if summaries:
        refuse_one_process_at_different_times(Path(summaries[0].source).parent,
                                              [(Path(s.source).name, s.process) for s in summaries])
    cs = pd.DataFrame({c: np.concatenate([s.comm[c] for s in summaries]) if summaries else [] for c in COMM_COLUMNS})
    cs.insert(0, "rank", np.concatenate([np.full(len(s.comm["step"]), s.rank) for s in summaries]) if summaries else [])
    per_rank = (cs.groupby("rank")[["window_us", "compute_us", "exposed_us", "collective_us"]].mean()
                if len(cs) else pd.DataFrame(columns=["window_us", "compute_us", "exposed_us", "collective_us"]))
    by = {s.rank: s for s in summaries}
    rows = []
    for r, v in per_rank.iterrows():
        s = by[int(r)]
        top = s.findings[0] if s.findings else ("", 0.0, "")
        rows.append({"rank": int(r), "events": s.events, "steps": s.steps, "step_ms": v["window_us"] / 1e3,
                     "compute_ms": v["compute_us"] / 1e3, "collective_ms": v["collective_us"] / 1e3,
                     "exposed_ms": v["exposed_us"] / 1e3,
                     "exposed_share": v["exposed_us"] / v["window_us"] if v["window_us"] > 0 else 0.0,
                     "top_finding": top[0], "top_cost": top[1], "diagnosed": s.diagnosed})
    table = pd.DataFrame(rows, columns=["rank", "events", "steps", "step_ms", "compute_ms", "collective_ms", "exposed_ms",
                                        "exposed_share", "top_finding", "top_cost", "diagnosed"])
    report: dict[str, Any] = {"ranks": len(summaries), "diagnosed": sum(s.diagnosed for s in summaries),
                              "events": int(sum(s.events for s in summaries)),
                              "has_gpu": any(s.has_gpu for s in summaries), "per_rank": table,
                              "compute_spread": 0.0, "stragglers": [], "has_collectives": False}
    declared = max((s.world_size for s in summaries), default=0)
    if declared > len(summaries):  # a part of the job: its figures are of these ranks only (render.part_of_job_text)
        report["job_world_size"] = declared
    comp = per_rank["compute_us"]
    if len(per_rank) >= 2:  # as metrics.rank_imbalance
        report["compute_spread"] = float((comp.max() - comp.min()) / comp.max()) if comp.max() > 0 else 0.0
        report["slowest_rank"], report["fastest_rank"] = int(comp.idxmax()), int(comp.idxmin())
        median = float(comp.median())
        if median > 0:
            report["stragglers"] = [int(r) for r in comp.index[comp > median * (1 + th.STRAGGLER_EXCESS)]]
    if len(cs) and cs["collective_us"].sum() > 0:  # as diagnosis.signals
        per_step = cs.groupby("step")[["collective_us", "exposed_us"]].mean()
        report.update({"has_collectives": True,
                       "comm_exposed_share": float(cs["exposed_us"].sum() / cs["window_us"].sum()),
                       "collective_ms_per_step": float(per_step["collective_us"].mean() / 1e3),
                       "exposed_ms_per_step": float(per_step["exposed_us"].mean() / 1e3)})
    steps = [s.path.get("step_ms") for s in summaries if s.path.get("step_ms")]
    if steps:  # the job's step is its slowest rank's; a fix's, the slowest rank's once each rank has it
        report["step_ms"] = max(steps)
        fixed = [s.path.get("step_ms_if_fixed", {}).get("communication") for s in summaries if s.diagnosed]
        if fixed and all(f is not None for f in fixed):
            report["step_ms_if_collectives_overlapped"] = max(fixed)
    from .critical import job_path

    job = job_path({s.rank: s.path.get("steps", []) for s in summaries})
    report["job_path"] = job.to_dict() if job is not None else None
    report["findings"] = _job_findings(report)
    return report


def _job_findings(r: dict[str, Any]) -> list[str]:
    """The job-level patterns, held to the diagnosis's own rules: uneven load across ranks, else communication
    whose overlap with the compute saves more of the job's step than noise."""
    if not r["has_collectives"]:
        return []
    if r["ranks"] >= 2 and r["compute_spread"] >= th.IMBALANCE_SPREAD:
        return ["load_imbalance"]
    step, after = r.get("step_ms"), r.get("step_ms_if_collectives_overlapped")
    if step and after is not None and r["comm_exposed_share"] > 0:
        return ["communication"] if (step - after) / step >= th.GAIN_FLOOR_SHARE else []
    return []


def stderr_progress(label: str = "ranks") -> Progress | None:
    """A one-line progress bar on stderr, or None when stderr is not a terminal (logs and pipes get nothing)."""
    stream = sys.stderr
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None

    def show(done: int, total: int) -> None:
        width = 30
        fill = width * done // max(total, 1)
        end = "\n" if done >= total else ""
        stream.write(f"\r{label} {done}/{total} [{'#' * fill}{'.' * (width - fill)}]{end}")
        stream.flush()

    return show


__all__ = ["COMM_COLUMNS", "RankSummary", "analyse_figures", "analyse_job", "analyse_rank", "default_workers", "job_files",
           "reduce_ranks", "stderr_progress"]
