"""Name classes (what a host call or range means) and the unions of host and GPU time spent on each."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from .. import thresholds as _th
from ..errors import ArgumentError
from ..model import DEFAULT_STEP_PATTERNS, GPU_WORK_KINDS, Trace, kind_in
from ..patterns import IDLE_CAUSES
from ._store import _memo, name_mask, rank_events, rank_rows
from .intervals import intersect, merge_intervals, subtract

# --- what the host is doing -----------------------------------------------------------------
#: CUDA API calls that block the host until the GPU (or a stream) has finished.
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cudaMemcpy2D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol", "cudaMemset",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuMemcpyDtoH", "cuMemcpyHtoD",
    # ROCm's HIP runtime, as its traces name the same calls
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipMemcpy", "hipMemcpyWithStream",
    "hipMemcpy2D", "hipMemcpyToSymbol", "hipMemcpyFromSymbol", "hipMemset", "hipMemcpyDtoH", "hipMemcpyHtoD",
})
#: CUDA API calls that queue work for the GPU.
LAUNCH_PREFIXES = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch", "cudaMemcpyAsync",
                   "cudaMemsetAsync", "cuMemcpyAsync", "cuMemsetAsync",
                   "hipLaunch", "hipExtLaunch", "hipModuleLaunch", "hipExtModuleLaunch", "hipGraphLaunch",
                   "hipMemcpyAsync", "hipMemsetAsync")
#: Host ranges that mean "waiting for the next batch".
DATA_WAIT = re.compile(
    r"enumerate\(DataLoader\)|DataLoaderIter|^(?:data|data[ _]loading|dataloader|load[ _]batch|next[ _]batch|fetch)$",
    re.IGNORECASE,
)
#: Python frames (``with_stack``: ``path/file.py(line): function``) of an input pipeline's own code: a Hugging Face
#: processor (image, video, feature extraction, tokenizer) or a pipeline's ``preprocess`` stage, torchvision's
#: transforms, decoders and datasets, and the image, video and audio decoding libraries. On a thread that launches
#: the GPU's work (or, without GPU rows, runs the model's ops) they are the loop preparing its next input: what
#: ``enumerate(DataLoader)`` marks when the DataLoader does it.
DATA_FRAME = re.compile(
    r"(?:^|/)transformers/(?:models/[^/(]+/)?(?:image_processing|video_processing|feature_extraction|tokenization|"
    r"processing)_[^/(]*\.py\("
    r"|(?:^|/)transformers/pipelines/[^/(]+\.py\(\d+\): preprocess$"
    r"|(?:^|/)torchvision/(?:transforms|io|datasets)/"
    r"|(?:^|/)(?:PIL|av|decord|cv2|librosa|soundfile)/")
#: ... but not their output side: a processor's or tokenizer's decoding and post-processing of the model's output
#: (``batch_decode``, ``_decode``, ``convert_ids_to_tokens``, ``post_process_object_detection``) is the loop's own
#: host work after the step, not its wait for input.
OUTPUT_FRAME = re.compile(r"\): (?:\w*decode\w*|convert_ids_to_tokens|convert_tokens_to_string|\w*post_?process\w*)$")


def _is_data_frame(name: str) -> bool:
    return bool(DATA_FRAME.search(name)) and not OUTPUT_FRAME.search(name)
#: Host ops known to force a device-to-host synchronization.
SYNCING_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero",
               "aten::equal", "aten::masked_select", "aten::unique", "aten::repeat_interleave")
#: Optimizers read their CPU-side step counters with .item(): not a device sync.
OPTIMIZER_RANGE = re.compile(r"^Optimizer\.step#")
#: OS runtime calls (Nsight Systems --trace=osrt) in which a thread sleeps until something else
#: wakes it: a rank waiting for its all-reduce to finish, a loop waiting for a batch or a lock.
BLOCKING_OS_CALLS = frozenset({
    "pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait", "pthread_mutex_lock",
    "pthread_join", "sem_wait", "sem_timedwait", "sem_clockwait", "poll", "ppoll", "select", "pselect",
    "epoll_wait", "epoll_pwait", "read", "recv", "recvfrom", "recvmsg", "waitpid", "wait4",
    "sleep", "usleep", "nanosleep", "clock_nanosleep",
})
#: OS calls in which a training loop's main thread waits for its next batch when DataLoader workers
#: prepare it: the queue's condition variable or semaphore (the pin-memory thread's queue), and the
#: pipe from the worker processes (poll, then read). Sleeps and mutexes are not waiting for data.
DATA_WAIT_OS_CALLS = frozenset({
    "pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait", "sem_wait", "sem_timedwait",
    "sem_clockwait", "poll", "ppoll", "epoll_wait", "epoll_pwait", "read", "recv", "recvfrom", "recvmsg",
})
#: CUDA / HIP calls of a program's start and end: context creation (it happens inside whichever call
#: comes first), device queries, allocations, stream / event creation, module loading and unloading.
STARTUP_CALL = re.compile(r"^(?:cu|cuda|hip)(?:Malloc|Free|HostAlloc|MallocHost|FreeHost|HostRegister|Init|Ctx|DevicePrimaryCtx|"
                           r"SetDevice|GetDeviceCount|GetDeviceProperties|DeviceGetStreamPriorityRange|StreamCreate|"
                           r"EventCreate|ModuleLoad|ModuleUnload|ModuleGetLoadingMode|LibraryLoad|LibraryUnload)")
#: Calls that free device (or pinned host) memory. CUDA synchronizes the device inside them, so once the GPU has work
#: they are syncs not named sync (a loop calling ``torch.cuda.empty_cache()``, or an allocator that frees and
#: reallocates every step); before any GPU work, the first of them creates the CUDA context (PyTorch's cudaFree(0)).
FREE_CALL = re.compile(r"^(?:cu|cuda|hip)(?:Free|MemFree|FreeHost|HostFree|FreeAsync|MemFreeAsync)(?:_v\d+)?$")
#: ... of them, the ones that unload modules (a program ending).
UNLOAD_CALL = re.compile(r"^(?:cu|hip)(?:ModuleUnload|LibraryUnload)")
#: Idle gaps are blamed on one of these causes: the catalogue's idle causes (:data:`helpers.patterns.IDLE_CAUSES`, each
#: with its words and colour there). ``graph``: a gap between two kernels of one CUDA Graph replay, the GPU's own
#: per-node cost, which nothing the host does (it launched the whole graph in one call) can fill.
CAUSES = IDLE_CAUSES

# Constants live in thresholds.py (one home); these names stay importable from here.
SMALL_KERNEL_US = _th.SMALL_KERNEL_US
GAP_AFTER_SYNC_TOLERANCE_US = _th.GAP_AFTER_SYNC_TOLERANCE_US
SYNC_RETURN_US = _th.SYNC_RETURN_US


def gpu_work_union(trace: Trace, rank: int, device: int, kinds=GPU_WORK_KINDS):
    """Union of the GPU's work of ``kinds`` on one device: the course's one definition of GPU busy.

    Busy is the union of kernels, copies and memsets on every stream (and collectives, which run as
    kernels). A CUDA Graph replay counts only through its kernels: the gaps between them are idle
    time on the GPU too (about 800 one-microsecond kernels leave a fifth of a replay's span empty), so
    a replay's first-to-last-kernel span is shown apart (:func:`graph_spans`), never counted as busy.
    An Nsight Systems export made with the default ``--cuda-graph-trace=graph`` holds only whole-graph
    intervals ("CUDA Graph N (whole graph)"); those are its only record of the work and count as they
    are, an upper bound: record with ``--cuda-graph-trace=node`` for the kernels.
    """
    key = ("gpu", rank, device, tuple(kinds))
    memo = _memo(trace)
    if key not in memo:
        ev = trace.events
        ev = rank_events(trace, rank)  # one rank's rows, filtered once per trace
        rows = (ev["device"].to_numpy() == device) & kind_in(ev, kinds)
        memo[key] = merge_intervals(ev["start_us"].to_numpy()[rows], ev["end_us"].to_numpy()[rows])
    return memo[key]


def _is_graph_launch(name: str) -> bool:
    return name.startswith(("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"))


def graph_spans(trace: Trace) -> pd.DataFrame:
    """One row per CUDA Graph launch: its kernels' first start to last end, and how much of that span they fill.

    Columns: rank, device, correlation, start_us, end_us, span_us, kernels, busy_us (the union of its
    kernels), fill (busy_us / span_us). Shown apart from GPU busy, which counts the kernels only.
    """
    cols = ["rank", "device", "correlation", "start_us", "end_us", "span_us", "kernels", "busy_us", "fill"]
    ev = trace.events
    graph = name_mask(trace, "graph_launch", _is_graph_launch)
    if not graph.any():
        return pd.DataFrame(columns=cols)
    calls = ev[graph & kind_in(ev, ("runtime",))]
    k = ev[(ev["kind"] == "kernel") & (ev["device"] >= 0)].merge(calls[["rank", "correlation"]], on=["rank", "correlation"])
    if k.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for (rank, device, corr), g in k.groupby(["rank", "device", "correlation"], sort=True):
        us, ue = merge_intervals(g["start_us"].to_numpy(), g["end_us"].to_numpy())
        s, e, busy = float(us.min()), float(ue.max()), float((ue - us).sum())
        rows.append((int(rank), int(device), int(corr), s, e, e - s, len(g), busy, busy / (e - s) if e > s else float("nan")))
    return pd.DataFrame(rows, columns=cols)


def _is_launch_call(name: str) -> bool:
    return name.startswith(LAUNCH_PREFIXES)


_SYNCING_OP_SET = frozenset(SYNCING_OPS)


#: Asynchronous copy calls: a device-to-host one into pageable memory blocks the host all the same.
#: (ROCm traces name a copy's memory kinds "Host" and "Device" only, so no HIP copy is found pageable; ROCm's
#: ``.cpu()`` uses hipMemcpyWithStream, a sync call by name.)
ASYNC_COPY_CALLS = ("cudaMemcpyAsync", "cuMemcpyAsync", "cuMemcpyDtoHAsync")


def _is_async_copy_call(name: str) -> bool:
    return name.startswith(ASYNC_COPY_CALLS)


def blocking_copy_calls(trace: Trace) -> np.ndarray:
    """For every event: is it an asynchronous copy call whose copy went device-to-host into pageable
    memory? CUDA returns from such a call only once the copy is done, which waits for all the
    stream's earlier work: a hidden sync, whatever its name says. ``.cpu()`` / ``.to("cpu")`` makes one,
    then a stream sync (``.item()`` copies into pinned memory in the course's H200 recordings, PyTorch 2.11,
    and waits in the stream sync instead). Told by the copy the call's correlation id links to, so a trace
    without the GPU's copy rows has none."""
    memo = _memo(trace)
    if "blocking_copy_calls" not in memo:
        ev = trace.events
        kind = ev["kind"].to_numpy()
        calls = (kind == "runtime") & name_mask(trace, "async_copy_call", _is_async_copy_call)
        out = np.zeros(len(ev), dtype=bool)
        if calls.any():
            copies = (kind == "memcpy") & (ev["copy_kind"] == "D2H").to_numpy() & (ev["host_memory"] == "pageable").to_numpy()
            rank, corr = ev["rank"].to_numpy(), ev["correlation"].to_numpy()
            keys = pd.MultiIndex.from_arrays([rank[copies], corr[copies]])
            at = np.flatnonzero(calls & (corr >= 0))
            out[at] = pd.MultiIndex.from_arrays([rank[at], corr[at]]).isin(keys)
        memo["blocking_copy_calls"] = out
    return memo["blocking_copy_calls"]


def is_sync_call(trace: Trace) -> np.ndarray:
    """For every event: is it a host call that waits for the GPU (a sync, a blocking copy)?"""
    memo = _memo(trace)
    if "is_sync_call" not in memo:  # asked by many metrics of one trace: worked out once, each caller given a copy
        named = name_mask(trace, "sync_call", SYNC_CALLS.__contains__) & kind_in(trace.events, ("runtime",))
        memo["is_sync_call"] = named | blocking_copy_calls(trace)
    return memo["is_sync_call"].copy()


def _has_kind(trace: Trace, kind: str) -> bool:
    """Whether any event is of ``kind``, looked at once per trace (each host union asks)."""
    memo = _memo(trace)
    key = ("__has_kind__", kind)
    if key not in memo:
        memo[key] = bool((trace.events["kind"] == kind).any())
    return memo[key]


def _own(full: np.ndarray, at: np.ndarray | None) -> np.ndarray:
    """A whole-table mask at one rank's rows (:func:`rank_rows`; None: the table is the rank's)."""
    return full if at is None else full[at]


def _rank_union(trace: Trace, key: Any, rank: int, mask_fn) -> tuple[np.ndarray, np.ndarray]:
    """The union of the intervals of one rank's rows that ``mask_fn(rows, at)`` picks, kept with the trace under
    ``key``: it is given the rank's rows (:func:`rank_events`) and their positions in the table (whole-table masks
    are taken there), so each rank reads its own rows, not every rank's (a folder of 8 ranks tested all 8 ranks'
    rows for each). Only two columns of the picked rows are taken, not the rows themselves."""
    memo = _memo(trace)
    if key not in memo:
        at = rank_rows(trace, rank)
        ev = rank_events(trace, rank)
        rows = np.asarray(mask_fn(ev, at), dtype=bool)
        memo[key] = merge_intervals(ev["start_us"].to_numpy()[rows], ev["end_us"].to_numpy()[rows])
    return memo[key]


def host_union(trace: Trace, rank: int, cause: str):
    """Union of host time spent on one activity: ``sync``, ``data_wait``, ``collective``, ``launch``."""

    def mask(ev: pd.DataFrame, at: np.ndarray | None) -> np.ndarray:
        # as arrays: a categorical's comparison in pandas costs several times the look-up of its codes
        on_rank = (ev["rank"].to_numpy() == rank) & (ev["device"].to_numpy() < 0)
        if cause == "sync":
            return on_rank & _own(is_sync_call(trace), at)
        if cause == "data_wait":
            ranges = kind_in(ev, ("annotation", "cpu_op")) & _own(name_mask(trace, "data", DATA_WAIT.search), at)
            frames = kind_in(ev, ("python",)) & _own(name_mask(trace, "data_frame", _is_data_frame), at)
            if frames.any():  # only on the threads that run the loop (a decoding thread's frames are beside it)
                frames &= ev["tid"].isin(_loop_threads(trace, rank)).to_numpy()
            return on_rank & (ranges | frames)
        if cause == "collective":
            return on_rank & kind_in(ev, ("collective",))
        if cause == "launch":  # dispatching: framework ops and the launch calls they make
            launches = _own(name_mask(trace, "launch", _is_launch_call), at) & ~_own(blocking_copy_calls(trace), at)  # that one waits
            return on_rank & (kind_in(ev, ("cpu_op",)) | (kind_in(ev, ("runtime",)) & launches))
        if cause == "host_compute":  # framework ops on threads that are not collective threads (of any rank)
            every = trace.events
            coll_threads = every.loc[every["kind"] == "collective", "tid"].unique()
            return on_rank & kind_in(ev, ("cpu_op",)) & ~ev["tid"].isin(coll_threads).to_numpy()
        raise ArgumentError(f"unknown host activity {cause!r}")

    if cause == "host_compute" and not _has_kind(trace, "cpu_op"):
        return _phases_less_waits(trace, rank)
    us, ue = _rank_union(trace, ("host", rank, cause), rank, mask)
    if cause == "data_wait":
        if us.size:
            us, ue = _data_less_device_copies(trace, rank, us, ue)
        if not _has_kind(trace, "cpu_op") and _has_kind(trace, "osrt"):
            memo = _memo(trace)
            key = ("host", rank, "data_wait_os")
            if key not in memo:
                ws, we = _loader_waits(trace, rank)
                memo[key] = merge_intervals(np.r_[us, ws], np.r_[ue, we])
            return memo[key]
        return us, ue
    if cause == "launch" and us.size and _has_kind(trace, "cpu_op"):
        # An op the host sits in while one of its calls waits for the GPU (``.cpu()``, ``.item()``) is
        # not dispatching meanwhile: the wait is the sync's.
        memo = _memo(trace)
        key = ("host", rank, "launch_less_syncs")
        if key not in memo:
            at = rank_rows(trace, rank)
            memo[key] = _less_own_syncs(trace, rank, np.asarray(mask(rank_events(trace, rank), at), dtype=bool), us, ue)
        return memo[key]
    if cause == "launch" and us.size and not _has_kind(trace, "cpu_op"):
        # Nsight-only traces record no framework ops, so the dispatch work between two launch
        # calls is invisible: launch calls closer than the bridge count as one stretch of dispatching,
        # and so does a range dense in launch calls (a model's forward / backward / optimizer).
        memo = _memo(trace)
        key = ("host", rank, "launch_without_ops")
        if key not in memo:
            rs, re_ = _dispatch_ranges(trace, rank, us)
            memo[key] = merge_intervals(np.r_[us, rs], np.r_[ue + _th.LAUNCH_DISPATCH_BRIDGE_US, re_])
        return memo[key]
    return us, ue


def _loop_threads(trace: Trace, rank: int) -> np.ndarray:
    """The threads of ``rank`` that run its loop: those that launch GPU work, or without any, run the model's ops."""
    ev = trace.events
    mine = (ev["rank"].to_numpy() == rank) & (ev["device"].to_numpy() < 0)
    launch = mine & kind_in(ev, ("runtime",)) & name_mask(trace, "launch", _is_launch_call)
    threads = ev["tid"].to_numpy()[launch]
    if threads.size == 0:
        threads = ev["tid"].to_numpy()[mine & kind_in(ev, ("cpu_op",))]
    return np.unique(threads)


def _less_own_syncs(trace: Trace, rank: int, launch: np.ndarray, us: np.ndarray, ue: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The dispatching union (``us, ue``, of the rows ``launch`` of the rank's rows, :func:`rank_events`) less each
    thread's own time inside sync calls: one thread waiting does not stop another from dispatching."""
    ev = rank_events(trace, rank)
    sync = (ev["rank"].to_numpy() == rank) & (ev["device"].to_numpy() < 0) & _own(is_sync_call(trace), rank_rows(trace, rank))
    if not sync.any():
        return us, ue
    tids = ev["tid"].to_numpy()
    start, end = ev["start_us"].to_numpy(), ev["end_us"].to_numpy()
    parts_s, parts_e = [], []
    for tid in np.unique(tids[launch]):
        mine = launch & (tids == tid)
        ls, le = merge_intervals(start[mine], end[mine])
        waits = sync & (tids == tid)
        if waits.any():
            ls, le = subtract(ls, le, *merge_intervals(start[waits], end[waits]))
        parts_s.append(ls)
        parts_e.append(le)
    return merge_intervals(np.concatenate(parts_s), np.concatenate(parts_e)) if parts_s else (us, ue)


def _loader_waits(trace: Trace, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Nsight traces (no framework ops): the time every thread that launches GPU work sits in the OS calls
    of :data:`DATA_WAIT_OS_CALLS` at once (outside its CUDA calls, in which a blocking sync waits in the
    same calls): the process waiting on something outside it, its DataLoader's workers. One thread
    waiting while another works (the autograd engine's thread idle while the main thread runs host
    code) is no data wait."""
    ev = trace.events
    rt = ev[(ev["kind"] == "runtime") & (ev["rank"] == rank) & (ev["device"] < 0)]
    if rt.empty:
        return np.zeros(0), np.zeros(0)
    launchers = rt.loc[name_mask(trace, "launch", _is_launch_call)[rt.index], "tid"].unique()
    out = None
    for tid in launchers:
        ws, we = os_waits(trace, rank, [tid], DATA_WAIT_OS_CALLS)
        inside = ev[(ev["rank"] == rank) & (ev["tid"] == tid) & ev["kind"].isin(("runtime", "collective"))]
        ws, we = subtract(ws, we, *merge_intervals(inside["start_us"].to_numpy(), inside["end_us"].to_numpy()))
        out = (ws, we) if out is None else intersect(*out, ws, we)
        if out[0].size == 0:
            break
    return out if out is not None else (np.zeros(0), np.zeros(0))


#: Framework ops that move a tensor; one that issues a device copy (a memcpy call inside it) is copy work.
COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_", "aten::copy", "aten::_copy_from"})


def _is_memcpy_call(name: str) -> bool:
    return name.startswith(("cudaMemcpy", "cuMemcpy", "hipMemcpy"))


def _data_less_device_copies(trace: Trace, rank: int, us: np.ndarray, ue: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The data ranges' union less the device copies issued inside them.

    A loop's ``data`` phase often ends with ``batch.to(device)``: while that runs the host is copying
    (or, for a blocking copy, waiting for the GPU), not waiting for the next batch, and the time is the
    copy's to fix (pinned memory, ``non_blocking``), not the loader's. A copy op counts as a device copy
    when a memcpy runtime call starts inside it on the same thread; the memcpy calls count themselves
    where the trace has no framework ops (Nsight Systems)."""
    memo = _memo(trace)
    key = ("host", rank, "data_less_copies")
    if key not in memo:
        ev, at = rank_events(trace, rank), rank_rows(trace, rank)  # the rank's own rows
        host = (ev["rank"].to_numpy() == rank) & (ev["device"].to_numpy() < 0)
        calls = ev[host & _own(name_mask(trace, "memcpy_call", _is_memcpy_call), at) & kind_in(ev, ("runtime",))]
        if calls.empty:
            memo[key] = (us, ue)
            return memo[key]
        ops = ev[host & _own(name_mask(trace, "copy_op", COPY_OPS.__contains__), at) & kind_in(ev, ("cpu_op",))]
        cs, ce = [calls["start_us"].to_numpy()], [calls["end_us"].to_numpy()]
        call_starts = {tid: np.sort(g["start_us"].to_numpy()) for tid, g in calls.groupby("tid")}
        for tid, g in ops.groupby("tid"):
            starts = call_starts.get(tid)
            if starts is None:
                continue
            s, e = g["start_us"].to_numpy(), g["end_us"].to_numpy()
            issues = np.searchsorted(starts, e, side="right") > np.searchsorted(starts, s, side="left")
            cs.append(s[issues])
            ce.append(e[issues])
        memo[key] = subtract(us, ue, *merge_intervals(np.concatenate(cs), np.concatenate(ce)))
    return memo[key]


def _phases_less_waits(trace: Trace, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Host compute when the trace records no framework ops (Nsight Systems): the time in the rank's
    own ranges (forward, backward, ...; not steps, data waits or collectives) less the OS calls in
    which those threads slept. A DDP rank waiting for its last buckets sleeps inside ``backward``."""
    memo = _memo(trace)
    key = ("host", rank, "phases_less_waits")
    if key not in memo:
        ann = _own_ranges(trace, rank)
        ps, pe = merge_intervals(ann["start_us"].to_numpy(), ann["end_us"].to_numpy())
        memo[key] = subtract(ps, pe, *os_waits(trace, rank, ann["tid"].unique()))
    return memo[key]


def os_waits(trace: Trace, rank: int, tids, calls=BLOCKING_OS_CALLS) -> tuple[np.ndarray, np.ndarray]:
    """Union of the time the rank's threads ``tids`` spent in the OS calls ``calls`` (``osrt`` events:
    by default those a thread sleeps in until something else wakes it)."""
    ev = trace.events
    waits = ev[(ev["kind"] == "osrt") & (ev["rank"] == rank) & ev["tid"].isin(tids) & ev["name"].isin(calls)]
    return merge_intervals(waits["start_us"].to_numpy(), waits["end_us"].to_numpy())


def _own_ranges(trace: Trace, rank: int) -> pd.DataFrame:
    """The rank's host ranges that are neither steps nor data waits (forward, backward, ...)."""
    ev = trace.events
    ann = ev[(ev["kind"] == "annotation") & (ev["rank"] == rank) & (ev["device"] < 0)]
    names = ann["name"]
    return ann[~names.str.contains("|".join(DEFAULT_STEP_PATTERNS), case=False) & ~names.str.contains(DATA_WAIT)]


def _dispatch_ranges(trace: Trace, rank: int, launch_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Innermost host ranges (not steps, not data waits) with at least LAUNCH_RANGE_PER_MS launch
    calls per millisecond: the host is dispatching GPU work through all of them."""
    ann = _own_ranges(trace, rank)
    if ann.empty:
        return np.zeros(0), np.zeros(0)
    keep_s, keep_e = [], []
    starts = np.sort(launch_starts)
    for _, grp in ann.groupby("tid"):
        s, e = grp["start_us"].to_numpy(), grp["end_us"].to_numpy()
        # innermost: no other range of the thread starts inside it
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        inner = np.r_[s[1:] >= e[:-1], True] if s.size else np.zeros(0, bool)
        n = np.searchsorted(starts, e) - np.searchsorted(starts, s)
        dense = inner & (n >= _th.LAUNCH_RANGE_PER_MS * np.maximum(e - s, 1e-9) / 1e3) & (n > 0)
        keep_s.append(s[dense])
        keep_e.append(e[dense])
    return (np.concatenate(keep_s), np.concatenate(keep_e)) if keep_s else (np.zeros(0), np.zeros(0))
