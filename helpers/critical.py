"""The critical path of each step: what the step waited on, microsecond by microsecond, and what fixing a
cause would buy ("what if").

A rank's steps (the ones the diagnosis keeps: :func:`helpers.steady_state`) are a dependency graph:

* **the host chain**: the rank's CUDA calls, on the threads that launch or wait, in time order, and the
  host time between them. Each stretch of it has causes: a launch or other CUDA call (``launch``), a start-up
  call (``startup``), a sync call (``sync``), and between calls the host's own activity, by what covers it:
  compilation ranges (``compile``), the DataLoader (``data_wait``), a host collective (``collective``),
  framework ops dispatching (``launch``), on a trace without GPU rows the model's ops (``cpu_compute``), else
  its own code (``other``);
* **GPU work**: every kernel (``gemm`` for matrix products, else ``kernel``), copy or memset (``copy``) and
  collective (``collective``), each after the call that launched it (by correlation id), after the work
  before it on its stream, and after the work on another stream it was seen to wait for (it started within
  :data:`~helpers.thresholds.CROSS_STREAM_TOL_US` of that work's end, later than its launch and its stream
  allowed: an event record / wait);
* **waits**: a sync call (explicit syncs, blocking copies, ``.item()``) ends after the GPU work it waited
  for, and so does any other call that returned only once all the GPU work launched before it had finished
  (``cudaFree``'s implicit sync): the call's end depends on that work.

The **critical path** is found walking back from the end of each step to its start: at each node, the dependency
that finished last is the one it waited on; at a step's start the walk goes on from what ended that step (the GPU
op running across the boundary or ending at it, else the host), so where the host and the GPU take about as long,
each step is held by the one that ended it rather than by wherever the later steps' path had reached. Every microsecond of the steps lies on exactly one stretch of the path,
each with one cause; the gap between a launch call and its kernel is ``launch``, a sync's return after the
work it waited for is ``sync``, the GPU's own gap between kernels it runs back to back is ``graph``.

**What if** scales the causes (``{cause: factor}``, 0 = removed) and replays the graph: each node starts when
its last dependency allows, with the latencies the trace measured, and the step is measured again. A sync
scaled to 0 no longer waits (made asynchronous); launches scaled to 0 leave the GPU's own gap between kernels
(one graph replay). With no factors the replay reproduces the trace's steps exactly.

A trace of several ranks: each rank has its own path; :func:`helpers.jobs.job_path` says which rank and which
of its work bound each step of the job, and what a straggler running like the median rank, or a collective
overlapped, would save.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import metrics as m
from . import thresholds as th
from .arguments import checked
from .errors import ArgumentError
from .metrics._store import handed_out
from .metrics.activity import FREE_CALL, STARTUP_CALL, _is_launch_call
from .metrics.precision import FP32_FFMA_NAME, GEMM_NAME, TENSOR_CORE_NAME
from .model import DEFAULT_STEP_PATTERNS, GPU_WORK_KINDS, Trace, kind_in
from .patterns import PATH_CAUSES

_C = {c: i for i, c in enumerate(PATH_CAUSES)}
_NC = len(PATH_CAUSES)

#: Host ranges of compilation: torch.compile's (Dynamo's ``dynamo_timed`` ranges, Inductor's and AOT's compile
#: ranges, the compile of the backward inside the first backward) and Triton's autotuning benchmarks. The ranges
#: a compiled program *runs* in (``Torch-Compiled Region``, ``CompiledFunction``) are not compilation.
COMPILE_RANGE = re.compile(
    r"\(dynamo_timed\)$|^(?:dynamo|entire_frame_compile|entire_backward_compile|inductor_compile|backend_compile|"
    r"fx_codegen_and_compile|CachingAutotuner\.benchmark_all_configs|TritonTemplateCaller\.benchmark|"
    r"autotune_select_algorithm|select_algorithm\.\w+)$"
    # any range naming compilation (nvFuser's KernelExecutor::compileFusion, NVRTC's CompileProgram, XLA's, ...), not
    # the ranges compiled code runs in ("Torch-Compiled Region", CompiledFunction)
    r"|(?i:(?<![a-z/])(?:pre)?compil(?:e|er|ing|ation)(?![a-z/]*d\b|[a-z]*/|d)|(?<![a-z])nvrtc|autotun)")
#: with_stack frames (kind ``python``) of compilation: Inductor's compile workers, code cache and autotuning. Other
#: frames are matched by their code, not their module's path ("vllm/compilation/..." runs compiled code).
COMPILE_FRAME = re.compile(r"torch/_inductor/(?:compile_worker|codecache|async_compile|select_algorithm|autotune)")


_STEP_MARKER = re.compile("|".join(DEFAULT_STEP_PATTERNS), re.IGNORECASE)


def _is_step_marker(name: str) -> bool:
    return bool(_STEP_MARKER.search(name))


def _is_compile_range(name: str) -> bool:
    return bool(COMPILE_RANGE.search(name))


def _is_compile_frame(name: str) -> bool:
    return bool(COMPILE_FRAME.search(name))


# --- interval helpers (vectorised) -------------------------------------------------------------
def _minus(as_: np.ndarray, ae: np.ndarray, bs: np.ndarray, be: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union A less union B (each sorted and disjoint; half-open intervals: touching ones do not overlap): A cut
    by the gaps between B's intervals, each of A's found by two binary searches."""
    if as_.size == 0 or bs.size == 0:
        return as_, ae
    gs, ge = np.r_[-np.inf, be], np.r_[bs, np.inf]  # B's complement, sorted and disjoint
    lo = np.searchsorted(ge, as_, side="right")  # the first gap ending after each of A's starts
    hi = np.searchsorted(gs, ae, side="left")  # ... and the first starting at or after its end
    n = np.maximum(hi - lo, 0)
    if not n.any():
        return np.zeros(0), np.zeros(0)
    a_of = np.repeat(np.arange(as_.size), n)
    j = lo[a_of] + np.arange(a_of.size) - np.repeat(np.cumsum(n) - n, n)
    s, e = np.maximum(as_[a_of], gs[j]), np.minimum(ae[a_of], ge[j])
    keep = e > s
    return m.merge_intervals(s[keep], e[keep])


# --- the graph of one rank ---------------------------------------------------------------------
@dataclass
class _Graph:
    """One rank's dependency graph over its kept steps (real times, microseconds)."""

    rank: int
    c0: float  # where the host chain starts: the host's first kept step (at or before t0)
    t0: float  # the first analysis window's start
    t1: float
    windows: pd.DataFrame  # the rank's analysis windows (steps)
    # host chain: items partition [t0, t1)
    h_start: np.ndarray
    h_end: np.ndarray
    comp: dict[int, np.ndarray]  # cause index -> microseconds of each item spent on it
    h_row: np.ndarray  # event row of the call an item lies in (-1 between calls)
    w_item: np.ndarray  # items that wait on GPU work (binding waits), ascending
    w_op: np.ndarray  # ... the GPU op each waits on
    w_ret: np.ndarray  # ... the return latency after that op's end
    w_base: np.ndarray  # ... the call's own cost when nothing is left to wait for
    w_first: np.ndarray  # ... the first item of its call (a call cut by a step's edge lies in several items)
    # GPU ops, sorted by (stream, start)
    g_start: np.ndarray
    g_end: np.ndarray
    g_cause: np.ndarray  # cause index
    g_stream: np.ndarray  # stream code
    g_row: np.ndarray
    g_launch: np.ndarray  # host item of its launch call (-1: none in the steps)
    g_prev: np.ndarray  # the op before it on its stream (-1)
    g_cross: np.ndarray  # the op on another stream it waited for (-1)
    g_lat: np.ndarray  # (n, 4): after its launch call's start (launch); after its stream predecessor's end, the
    # GPU's own part (graph) and what eager launching adds (launch); after the cross-stream op's end
    g_pin: np.ndarray  # a start it cannot move before (-inf, or its real start when nothing explains it)
    g_bind: np.ndarray  # 0 launch, 1 stream, 2 cross, 3 pinned: which dependency it waited on
    g_pageable: np.ndarray  # copies to or from pageable host memory
    g_hostcopy: np.ndarray  # copies to or from the host
    g_h2d: np.ndarray  # copies from the host
    g_bytes: np.ndarray  # bytes each copy moved (NaN otherwise)
    g_ffma: np.ndarray  # matrix products on the fp32 FFMA pipes
    g_seg: np.ndarray  # the last host item that must be placed before it can be (running max along its stream)
    first_op: int = -1  # the kept steps' first GPU op
    g_kept: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # ops of the kept steps (not work queued before)
    streams: list[np.ndarray] = field(default_factory=list)  # op indices of each stream, in order
    info: dict[str, Any] = field(default_factory=dict)
    w_free: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # waits that no longer wait (their op moved off)
    g_extra_cause: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # cause of a stream gap's rest
    g_hidden: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # ops moved off the path (overlapped)
    memo: dict[Any, Any] = field(default_factory=dict, repr=False)  # what replays share: layout, overlapped graphs

    def __post_init__(self) -> None:
        if self.w_free.size != self.w_item.size:
            self.w_free = np.zeros(self.w_item.size, dtype=bool)


def freeing_after_gpu_work(trace: Trace) -> np.ndarray:
    """For every event: is it a call that frees memory (:data:`helpers.metrics.activity.FREE_CALL`) made after its
    rank's first launch? CUDA synchronizes the device inside it: a sync not named sync (before any work it is the
    context's creation, start-up)."""
    memo = m._memo(trace)
    if "freeing_after_gpu_work" not in memo:
        ev = trace.events
        runtime = kind_in(ev, ("runtime",)) & (ev["device"].to_numpy() < 0)
        free = runtime & m.name_mask(trace, "free_call", FREE_CALL.match)
        out = np.zeros(len(ev), dtype=bool)
        if free.any():
            launch = runtime & m.name_mask(trace, "launch", _is_launch_call)
            ranks, start = ev["rank"].to_numpy(), ev["start_us"].to_numpy()
            for r in np.unique(ranks[free]):
                first = start[launch & (ranks == r)]
                if first.size:
                    out |= free & (ranks == r) & (start > first.min())
        memo["freeing_after_gpu_work"] = out
    return memo["freeing_after_gpu_work"]


def _row_positions(trace: Trace, rank: int) -> np.ndarray:
    return np.flatnonzero(trace.events["rank"].to_numpy() == rank)


def _rows(trace: Trace, rank: int) -> tuple[np.ndarray, np.ndarray | slice]:
    """The rank's row positions, and what selects them from a column: a slice (a view, no copy) when the trace is
    that one rank's."""
    pos = _row_positions(trace, rank)
    return pos, (slice(None) if pos.size == len(trace.events) else pos)


#: The event kinds the graph reads, by a small code (:func:`_kind_codes`; -1: any other).
_KINDS = ("kernel", "memcpy", "memset", "collective", "runtime", "cpu_op", "annotation", "python")
_K = {k: i for i, k in enumerate(_KINDS)}


def _kind_codes(trace: Trace) -> np.ndarray:
    """Every event's kind as its index in :data:`_KINDS` (-1 for others), looked up once per category."""
    memo = m._memo(trace)
    if "critical_kind_codes" not in memo:
        kind = trace.events["kind"]
        if isinstance(kind.dtype, pd.CategoricalDtype):
            table = np.array([_K.get(str(c), -1) for c in kind.cat.categories] + [-1], dtype=np.int8)
            memo["critical_kind_codes"] = table[kind.cat.codes.to_numpy()]
        else:
            codes, uniq = pd.factorize(kind)
            table = np.array([_K.get(str(c), -1) for c in uniq] + [-1], dtype=np.int8)
            memo["critical_kind_codes"] = table[codes]
    return memo["critical_kind_codes"]


def _is_kind(codes: np.ndarray, *kinds: str) -> np.ndarray:
    """Which of ``codes`` (:func:`_kind_codes`) are one of ``kinds``: the int8 codes compared, kind by kind (a
    look-up table indexed by them cost several times as much; any other kind's -1 is none of them)."""
    out = np.zeros(codes.shape, dtype=bool)
    for k in dict.fromkeys(kinds):
        out |= codes == _K[k]
    return out


def _among(values: np.ndarray, few: np.ndarray) -> np.ndarray:
    """``np.isin(values, few)`` for a handful of ``few`` (a rank's launching threads): one comparison each."""
    if few.size > 8:
        return np.isin(values, few)
    out = np.zeros(values.shape, dtype=bool)
    for v in few.tolist():
        out |= values == v
    return out


def _host_cover(trace: Trace, rank: int, gpu: bool) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """What covers the host between its calls, highest priority first, as disjoint unions: (cause, starts, ends)."""
    ev = trace.events
    pos, mine = _rows(trace, rank)
    host = ev["device"].to_numpy()[mine] < 0
    kinds = _kind_codes(trace)[mine]
    start, end = ev["start_us"].to_numpy()[mine], ev["end_us"].to_numpy()[mine]
    comp_mask = host & ((_is_kind(kinds, "annotation", "cpu_op") & m.name_mask(trace, "compile_range", _is_compile_range)[mine])
                        | (_is_kind(kinds, "python") & m.name_mask(trace, "compile_frame", _is_compile_frame)[mine]))
    parts: list[tuple[int, np.ndarray, np.ndarray]] = [(_C["compile"], *m.merge_intervals(start[comp_mask], end[comp_mask]))]
    parts.append((_C["data_wait"], *m.host_union(trace, rank, "data_wait")))
    if gpu:  # a host collective's (gloo's) wait before the framework's dispatching
        parts.append((_C["collective"], *m.host_union(trace, rank, "collective")))
        ops = m.host_union(trace, rank, "launch")
        parts.append((_C["launch"], *ops))
    else:  # the model's ops on a CPU before a collective another thread runs meanwhile (that part is hidden)
        ops = m.host_union(trace, rank, "host_compute")
        parts.append((_C["cpu_compute"], *ops))
        parts.append((_C["collective"], *m.host_union(trace, rank, "collective")))
    # the interpreter between two of the model's ops: a gap shorter than LAUNCH_DISPATCH_BRIDGE_US is dispatching
    # the next one, not code of the program's own
    busy = host & _is_kind(kinds, "cpu_op", "runtime")
    bs, be = m.merge_intervals(start[busy], end[busy])
    if bs.size > 1:
        short = (bs[1:] - be[:-1]) < th.LAUNCH_DISPATCH_BRIDGE_US
        parts.append((_C["launch"] if gpu else _C["cpu_compute"], be[:-1][short], bs[1:][short]))
    out, taken_s, taken_e = [], np.zeros(0), np.zeros(0)
    for cause, s, e in parts:
        s, e = np.asarray(s, float), np.asarray(e, float)
        own = _minus(s, e, taken_s, taken_e)
        out.append((cause, *own))
        taken_s, taken_e = m.merge_intervals(np.r_[taken_s, s], np.r_[taken_e, e])
    return out


def _is_gemm(name: str) -> bool:
    return bool(GEMM_NAME.search(str(name)))


def _is_fp32_ffma(name: str) -> bool:
    return bool(FP32_FFMA_NAME.search(str(name))) and not TENSOR_CORE_NAME.search(str(name))


def _is_graph_launch(name: str) -> bool:
    return str(name).startswith(("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"))


def _gpu_cause(trace: Trace, rows: np.ndarray, kinds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each GPU op's (event ``rows``, kind codes ``kinds``) cause index, and whether it is a matrix product on the
    fp32 FFMA pipes (names matched once per distinct name)."""
    cause = np.full(rows.size, _C["kernel"], dtype=np.int64)
    cause[_is_kind(kinds, "memcpy", "memset")] = _C["copy"]
    cause[_is_kind(kinds, "collective")] = _C["collective"]
    kern = _is_kind(kinds, "kernel")
    gemm = kern & m.name_mask(trace, "gemm_name", _is_gemm)[rows]
    cause[gemm] = _C["gemm"]
    return cause, gemm & m.name_mask(trace, "fp32_ffma_name", _is_fp32_ffma)[rows]


def _overlap_items(us: np.ndarray, ue: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """``m.overlap(us, ue, cuts[:-1], cuts[1:])``: how much of each host item the union covers, each cut looked up
    once (an item ends where the next one starts)."""
    c = m.covered_before(us, ue, cuts)
    return c[1:] - c[:-1]


def _build(trace: Trace, rank: int) -> _Graph | None:
    """The rank's graph over its kept steps; None when the rank has no analysis window."""
    ev = trace.events
    win = m.windows(trace, rank)
    if win.empty:
        return None
    if (win["step"] >= 0).any():
        win = win[win["step"] >= 0]
    win = win.sort_values("start_us").reset_index(drop=True)
    t0, t1 = float(win["start_us"].min()), float(win["end_us"].max())
    # the host chain starts with the host's own first kept step: where the GPU paces the loop, its windows begin
    # later (the GPU still runs earlier work) while the host already launches the steps' work
    st = trace.steps
    own = st[(st["rank"] == rank) & st["step"].isin(win["step"])] if len(st) else st
    c0 = min(t0, float(own["start_us"].min())) if len(own) else t0
    c1 = float(own["end_us"].max()) if len(own) else t1  # ... and ends with its own last kept step
    pos, mine = _rows(trace, rank)
    start, end = ev["start_us"].to_numpy()[mine], ev["end_us"].to_numpy()[mine]
    device = ev["device"].to_numpy()[mine]
    kinds = _kind_codes(trace)[mine]
    corr = ev["correlation"].to_numpy()[mine]
    tids = ev["tid"].to_numpy()[mine]
    host = device < 0

    # --- host calls on the threads that launch or wait ---
    runtime = host & _is_kind(kinds, "runtime")
    is_sync = m.is_sync_call(trace)[mine] & runtime
    frees = freeing_after_gpu_work(trace)[mine]  # a free once the GPU has work is a sync (FREE_CALL)
    is_sync = is_sync | frees
    blocking = m.blocking_copy_calls(trace)[mine]
    is_launch = runtime & m.name_mask(trace, "launch", _is_launch_call)[mine] & ~blocking
    is_startup = runtime & m.name_mask(trace, "startup_call", STARTUP_CALL.match)[mine] & ~is_sync & ~is_launch
    chain_tids = np.unique(tids[is_sync | is_launch])
    call = runtime & _among(tids, chain_tids) & (end > c0) & (start < t1)
    call_idx = np.flatnonzero(call)

    # --- GPU ops of the steps ---
    gpu_kind = (~host) & _is_kind(kinds, *GPU_WORK_KINDS)
    step_col = ev["step"].to_numpy()[mine]
    g_sel = np.flatnonzero(gpu_kind & (end > c0) & ((step_col >= 0) | (start < t1)))
    streams_key = device[g_sel].astype(np.int64) * (1 << 32) + ev["stream"].to_numpy()[mine][g_sel]
    order = np.lexsort((end[g_sel], start[g_sel], streams_key))
    g_sel = g_sel[order]
    skey = streams_key[order]
    g_stream = pd.factorize(skey)[0].astype(np.int64)
    gs, ge = start[g_sel].astype(float), end[g_sel].astype(float)
    g_rows = pos[g_sel]
    g_kinds = kinds[g_sel]
    g_cause, g_ffma = _gpu_cause(trace, g_rows, g_kinds)
    g_memcpy = _is_kind(g_kinds, "memcpy")
    copy_kind = ev["copy_kind"].take(g_rows).to_numpy()
    g_pageable = g_memcpy & (ev["host_memory"].take(g_rows).to_numpy() == "pageable")
    g_hostcopy = g_memcpy & np.isin(copy_kind, ("H2D", "D2H"))
    g_h2d = copy_kind == "H2D"
    g_bytes = ev["bytes"].to_numpy()[g_rows].astype(float)
    n_g = g_sel.size
    has_gpu_rows = n_g > 0

    # --- the host chain's items: cut at every call's start and end and every window's edges; it ends with the
    # host's own last step (where the GPU paces the loop, the rest of the windows is the GPU's), or without step
    # rows of its own, with its last recorded activity ---
    is_ann = _is_kind(kinds, "annotation")
    acts = host & (start < t1) & ~is_ann
    ann = host & is_ann & (start < t1) & ~m.name_mask(trace, "step_marker", _is_step_marker)[mine]
    last_host = float(np.max(np.minimum(end[acts | ann], t1))) if (acts | ann).any() else t1
    t1h = min(c1, t1) if len(own) else (min(max(last_host, c0), t1) if has_gpu_rows else t1)
    cs, ce = np.clip(start[call_idx], c0, t1h), np.clip(end[call_idx], c0, t1h)
    cuts = np.unique(np.concatenate([[c0, min(t0, t1h), t1h], cs, ce, np.clip(win["start_us"].to_numpy(float), c0, t1h),
                                     np.clip(win["end_us"].to_numpy(float), c0, t1h)]))
    if cuts.size < 2:  # a host chain of no length (the GPU's windows only): one empty item
        cuts = np.array([cuts[0], cuts[0]])
    h_start, h_end = cuts[:-1], cuts[1:]
    n_h = h_start.size
    length = h_end - h_start

    def covered(sel: np.ndarray) -> np.ndarray:
        us, ue = m.merge_intervals(start[sel].astype(float), end[sel].astype(float))
        return _overlap_items(us, ue, cuts) > 0.5 * length

    classes = np.full(n_h, -1, dtype=np.int64)  # -1: between calls
    for cls, sel in ((2, call & is_startup), (1, call & ~is_startup & ~is_sync), (0, call & is_sync)):  # priority last
        if sel.any():
            classes[covered(sel)] = cls
    comp: dict[int, np.ndarray] = {}

    def add(cause: int, values: np.ndarray) -> None:
        if values.any():
            comp[cause] = comp.get(cause, 0.0) + values

    has_gpu = n_g > 0
    cover = _host_cover(trace, rank, has_gpu)
    compile_s, compile_e = cover[0][1], cover[0][2]
    in_compile = _overlap_items(compile_s, compile_e, cuts) if compile_s.size else np.zeros(n_h)
    in_compile = np.where(in_compile > 0.5 * length, length, 0.0) if compile_s.size else in_compile
    rest = length - in_compile
    add(_C["compile"], in_compile)
    add(_C["sync"], np.where(classes == 0, rest, 0.0))
    add(_C["launch"], np.where(classes == 1, rest, 0.0))
    add(_C["startup"], np.where(classes == 2, rest, 0.0))
    gap = np.where(classes == -1, rest, 0.0)
    left = gap.copy()
    for cause, s, e in cover[1:]:
        if s.size == 0:
            continue
        part = np.minimum(_overlap_items(s, e, cuts), left) * (gap > 0)
        add(cause, part)
        left = left - part
    add(_C["other"], np.clip(left, 0.0, None))

    # the call each item lies in (the last call starting at or before it, if it covers it)
    h_row = np.full(n_h, -1, dtype=np.int64)
    if call_idx.size:
        o = np.argsort(cs, kind="stable")
        at = np.searchsorted(cs[o], h_start, side="right") - 1
        okk = at >= 0
        cand = call_idx[o][np.clip(at, 0, None)]
        inside = okk & (end[cand] >= h_end - 1e-9) & (classes >= 0)
        h_row[inside] = pos[cand[inside]]

    # --- GPU ops: launch, stream and cross-stream dependencies ---
    g_launch = np.full(n_g, -1, dtype=np.int64)
    launch_time = gs.copy()  # when each op was launched: its call's start (an op with no call: its own start)
    ok_launch, launch_rows = np.zeros(n_g, dtype=bool), np.zeros(0, dtype=np.int64)
    rt_idx = np.flatnonzero(runtime & (corr >= 0))
    if n_g and rt_idx.size:
        keys = pd.Index(corr[rt_idx])
        first = ~keys.duplicated(keep="first")
        keys, lc = keys[first], rt_idx[first]
        found = keys.get_indexer(corr[g_sel])
        ok = (found >= 0) & (corr[g_sel] >= 0)
        launch_time[ok] = start[lc[found[ok]]]
        ok_launch, launch_rows = ok, lc[found[ok]]
        on_chain = ok.copy()
        on_chain[ok] = call[lc[found[ok]]] & (start[lc[found[ok]]] >= c0 - 1e-9) & (start[lc[found[ok]]] < t1h)
        g_launch[on_chain] = np.clip(np.searchsorted(cuts, start[lc[found[on_chain]]], side="right") - 1, 0, n_h - 1)
    in_compile_op = (g_launch >= 0) & (_item_cause_share(comp, _C["compile"], length, g_launch) > 0.5)
    g_cause = np.where(in_compile_op, _C["compile"], g_cause)
    same_prev = np.r_[False, g_stream[1:] == g_stream[:-1]]
    g_prev = np.where(same_prev, np.arange(n_g) - 1, -1)
    r_launch = np.where(g_launch >= 0, h_start[np.clip(g_launch, 0, None)] if n_h else -np.inf, -np.inf)
    r_stream = np.where(g_prev >= 0, ge[np.clip(g_prev, 0, None)] if n_g else -np.inf, -np.inf)
    raw_launch, raw_stream = r_launch, r_stream  # their latencies may be negative (clocks; ops that overlap on a stream)
    r_launch, r_stream = np.minimum(r_launch, gs), np.minimum(r_stream, gs)
    g_cross = np.full(n_g, -1, dtype=np.int64)
    r_cross = np.full(n_g, -np.inf)
    late = np.flatnonzero(np.maximum(r_launch, r_stream) < gs - th.CROSS_STREAM_TOL_US)
    if late.size and np.unique(g_stream).size > 1:
        dev_of = (skey >> 32)
        by_end = np.lexsort((ge, dev_of))
        e_sorted, d_sorted = ge[by_end], dev_of[by_end]
        key = d_sorted * 1e15 + e_sorted  # one search over (device, end)
        at = np.searchsorted(key, dev_of[late] * 1e15 + gs[late] + 1e-6, side="right") - 1
        for k, j in zip(late.tolist(), at.tolist()):  # walk back past the op's own stream (few ops are late)
            while j >= 0 and d_sorted[j] == dev_of[k] and g_stream[by_end[j]] == g_stream[k]:
                j -= 1
            if j < 0 or d_sorted[j] != dev_of[k]:
                continue
            o = int(by_end[j])
            if ge[o] >= gs[k] - th.CROSS_STREAM_TOL_US and ge[o] > max(r_launch[k], r_stream[k]):
                g_cross[k], r_cross[k] = o, min(ge[o], gs[k])
    ready = np.stack([r_launch, r_stream, r_cross], axis=1)
    best = np.argmax(ready, axis=1)
    best_val = ready[np.arange(n_g), best] if n_g else np.zeros(0)
    pinned = ~np.isfinite(best_val)
    g_bind = np.where(pinned, 3, best)
    # the latencies the trace measured on the binding dependency; typical ones on the others
    lat_launch = np.where(np.isfinite(raw_launch), gs - raw_launch, 0.0)
    lat_stream = np.where(np.isfinite(raw_stream), gs - raw_stream, 0.0)
    graph_rows = m.name_mask(trace, "graph_launch", _is_graph_launch)
    in_graph = np.zeros(n_g, dtype=bool)  # an op whose stream predecessor came from the same graph launch
    if n_g and call_idx.size and graph_rows.any():
        graph_corr = np.unique(corr[np.flatnonzero(call & graph_rows[mine])])
        gc = corr[g_sel]
        in_graph = np.isin(gc, graph_corr) & same_prev & np.r_[False, gc[1:] == gc[:-1]]
    a_typ = float(np.median(lat_launch[g_bind == 0])) if (g_bind == 0).any() else 0.0
    # a gap on a stream: the GPU's own part (a graph node's, GRAPH_NODE_GAP_US; all of it inside a graph replay)
    # and what eager launching adds (launch)
    own_gap = np.where(in_graph, lat_stream, np.minimum(lat_stream, th.GRAPH_NODE_GAP_US))
    extra = lat_stream - own_gap
    bound_extra = extra[g_bind == 1]
    extra_typ = float(np.median(bound_extra)) if bound_extra.size else 0.0
    g_lat = np.zeros((n_g, 4))
    g_lat[:, 0] = np.where(g_bind == 0, lat_launch, np.minimum(lat_launch, a_typ))
    g_lat[:, 1] = own_gap
    g_lat[:, 2] = np.where(g_bind == 1, extra, np.minimum(extra, extra_typ))
    # What the rest of a stream gap was: the sync's where the host sat in a sync call through at least half of it (a
    # GPU idle while its host is blocked: nothing else could be queued meanwhile), else eager launching (the op's call
    # still running as the op before it ended), else, the op long queued, the GPU's own wait for something the trace
    # does not show. An op launched before the capture began (its correlation names no call of the trace) is the
    # GPU's own whatever the host does: a GPU running a backlog of steps queued before the capture (a loop whose
    # host runs ahead) while the host sits in a sync, the capture's closing one too, drains it whether or not the
    # host waits. Counted to the sync, the sync what-if removed those gaps: a CUDA-Graph loop with no sync in its
    # steps read a 5.5% sync stall (an H100 recording of 2026-12-05; 3.5% on the H200's).
    g_extra_cause = np.full(n_g, _C["launch"], dtype=np.int64)
    if n_g:
        prev_end = np.where(g_prev >= 0, ge[np.clip(g_prev, 0, None)], -np.inf)
        call_end = np.full(n_g, np.inf)
        if rt_idx.size:
            call_end[ok_launch] = end[launch_rows]
        queued = call_end < prev_end
        gap_s, gap_e = prev_end + own_gap, gs
        sync_sel = call & is_sync
        ss, se = m.merge_intervals(start[sync_sel].astype(float), end[sync_sel].astype(float))
        in_sync = m.overlap(ss, se, np.where(np.isfinite(gap_s), gap_s, gs), gap_e) if ss.size else np.zeros(n_g)
        before_capture = (corr[g_sel] >= 0) & ~ok_launch if rt_idx.size else np.zeros(n_g, dtype=bool)
        g_extra_cause = np.where(before_capture, _C["graph"],
                                 np.where(in_sync >= 0.5 * np.maximum(extra, 1e-9), _C["sync"],
                                          np.where(queued, _C["graph"], _C["launch"])))
    g_lat[:, 3] = np.where(g_bind == 2, np.where(np.isfinite(r_cross), gs - r_cross, 0.0), 0.0)
    g_cross = np.where(g_bind == 2, g_cross, -1)
    g_pin = np.where(pinned, gs, -np.inf)

    # --- waits: sync calls, and calls that ended only once the GPU work before them had ---
    own_op = np.full(call_idx.size, -1, dtype=np.int64)  # the copy or memset each call launched itself
    copies = np.flatnonzero(_is_kind(g_kinds, "memcpy", "memset") & (corr[g_sel] >= 0))
    if copies.size and call_idx.size:
        first_copy = pd.Series(copies, index=corr[g_sel][copies])
        first_copy = first_copy[~first_copy.index.duplicated(keep="first")]
        at = first_copy.index.get_indexer(corr[call_idx])
        own_op = np.where((at >= 0) & (corr[call_idx] >= 0), first_copy.to_numpy()[np.clip(at, 0, None)], -1)
    own_pageable = np.where(own_op >= 0, g_pageable[np.clip(own_op, 0, None)], False) if n_g else own_op >= 0
    w_item, w_op, w_ret, w_base, w_first = _waits(call_idx, is_sync, cs, ce, cuts, gs, ge, launch_time, own_op,
                                                  own_pageable, in_compile, length)

    # the host item each op must wait for before it can be placed: its launch, kept in stream order
    g_seg = np.where(g_launch >= 0, g_launch, -1)
    streams = []
    for s in range(int(g_stream.max()) + 1 if n_g else 0):
        idx = np.flatnonzero(g_stream == s)
        g_seg[idx] = np.maximum.accumulate(g_seg[idx])
        streams.append(idx)
    kept_ops = np.flatnonzero(step_col[g_sel] >= 0)
    first_op = int(kept_ops[np.argmin(gs[kept_ops])]) if kept_ops.size else (int(np.argmin(gs)) if n_g else -1)
    info = {"launch_latency_us": a_typ, "stream_gap_extra_us": extra_typ, "cross_stream_edges": int((g_bind == 2).sum()),
            "waits": int(w_item.size), "host_items": int(n_h), "gpu_ops": int(n_g)}
    return _Graph(rank, c0, t0, t1, win, h_start, h_end, comp, h_row, w_item, w_op, w_ret, w_base, w_first,
                  gs, ge, g_cause, g_stream, pos[g_sel], g_launch, g_prev, g_cross, g_lat, g_pin, g_bind,
                  g_pageable, g_hostcopy, g_h2d, g_bytes, g_ffma, g_seg, first_op, step_col[g_sel] >= 0, streams, info,
                  g_extra_cause=g_extra_cause)


def _work(g: _Graph) -> tuple[np.ndarray, float]:
    """What each cause took over the rank's kept steps, on the path or off it (host items' time, GPU ops'
    durations), and the number of binding waits."""
    tot = np.zeros(_NC)
    for cause, values in g.comp.items():
        tot[cause] += float(values.sum())
    kept = g.g_kept
    np.add.at(tot, g.g_cause[kept], (g.g_end - g.g_start)[kept])
    return tot, float(g.w_item.size)


def _item_cause_share(comp: dict[int, np.ndarray], cause: int, length: np.ndarray, items: np.ndarray) -> np.ndarray:
    if cause not in comp or items.size == 0:
        return np.zeros(items.size)
    i = np.clip(items, 0, None)
    return comp[cause][i] / np.maximum(length[i], 1e-12)


def _waits(call_idx, is_sync, cs, ce, cuts, gs, ge, launch_time, own_op, own_pageable, in_compile, length):
    """The binding waits of the host chain, by item: (item, op waited on, return latency, own cost, first item).

    A call waits on the copy it launched itself when it returned within IMPLICIT_SYNC_RETURN_US of that copy's end
    (a blocking copy; a copy to or from pageable memory that lasted most of the call, whose call returns once the
    last chunk is staged); a named sync
    on the work launched before it that it saw finish last (within SYNC_RETURN_US); any other call when it returned
    within IMPLICIT_SYNC_RETURN_US of the moment all the work launched before it had finished."""
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0, np.int64))
    if call_idx.size == 0 or ge.size == 0:
        return empty
    by_launch = np.argsort(launch_time, kind="stable")
    lt_sorted = launch_time[by_launch]
    run_end = np.maximum.accumulate(ge[by_launch])
    run_arg = by_launch[_running_argmax(ge[by_launch])]
    named = is_sync[call_idx]
    dur = ce - cs
    k = np.searchsorted(lt_sorted, cs, side="left") - 1  # the ops launched before the call began
    have = k >= 0
    last_end = np.where(have, run_end[np.clip(k, 0, None)], -np.inf)
    last_op = np.where(have, run_arg[np.clip(k, 0, None)], -1)
    tol = th.IMPLICIT_SYNC_RETURN_US
    has_own = own_op >= 0
    own_end = np.where(has_own, ge[np.clip(own_op, 0, None)], -np.inf)
    own_start = np.where(has_own, gs[np.clip(own_op, 0, None)], np.inf)
    # the call lasted as long as its copy did: a blocking copy (named), or one to or from pageable memory, which
    # CUDA returns from once the last chunk is staged; a copy that started after the call returned was not waited for
    covered = (np.minimum(ce, own_end) - np.maximum(cs, own_start)) >= 0.5 * dur
    own_ret = ce - own_end
    own_wait = (has_own & (own_end > cs) & (own_start < ce)
                & ((named & (own_ret >= -tol) & (own_ret <= th.SYNC_RETURN_US))
                   | (own_pageable & covered & (np.abs(own_ret) <= tol) & (dur >= th.IMPLICIT_SYNC_MIN_US))))
    # a named sync waits on the work launched before it that it saw finish last (other streams' work may run on)
    seen_op, seen_end = _seen_last(np.flatnonzero(named & ~own_wait), cs, ce, ge, launch_time)
    last_op = np.where(seen_op >= 0, seen_op, last_op)
    ret_last = np.where(seen_op >= 0, ce - seen_end, ce - last_end)
    named_wait = ~own_wait & named & (seen_op >= 0) & (seen_end > cs) & (ret_last >= -1e-6) & (ret_last <= th.SYNC_RETURN_US)
    ret_last = np.where(named, ret_last, ce - last_end)
    implicit = (~own_wait & ~named & have & (last_end > cs) & (ret_last >= -1e-6) & (ret_last <= tol)
                & (dur >= th.IMPLICIT_SYNC_MIN_US))
    op = np.where(own_wait, own_op, last_op)
    ret = np.where(own_wait, ce - own_end, ret_last)
    item = np.clip(np.searchsorted(cuts, ce, side="left") - 1, 0, cuts.size - 2)
    binding = (own_wait | named_wait | implicit) & (in_compile[item] < 0.5 * length[item])
    if not binding.any():
        return empty
    items, ops = item[binding], op[binding]
    firsts = np.clip(np.searchsorted(cuts, cs[binding], side="right") - 1, 0, cuts.size - 2)
    rets = ret[binding]
    base = np.minimum(np.clip(rets, 0.0, None), dur[binding])
    order = np.argsort(items, kind="stable")
    items, ops, rets, base, firsts = items[order], ops[order], rets[order], base[order], firsts[order]
    keep = np.r_[True, items[1:] != items[:-1]]  # one wait per item (two threads' syncs ending together)
    items, ops, rets, base, firsts = items[keep], ops[keep], rets[keep], base[keep], firsts[keep]
    firsts = np.maximum(firsts, np.r_[0, items[:-1] + 1])  # a wait never reaches back over the one before it
    return items, ops.astype(np.int64), rets, base, np.minimum(firsts, items)


def _seen_last(calls: np.ndarray, cs: np.ndarray, ce: np.ndarray, ge: np.ndarray, launch_time: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """For the calls ``calls`` (indices into cs / ce): the GPU op launched before each began that ended last at or
    before its end (-1 where none ended inside it), and that end. Walks back from the call's end through the ops by
    end time, at most 256 of them: those launched later than the call (by other threads) are few."""
    op = np.full(cs.size, -1, dtype=np.int64)
    end = np.full(cs.size, -np.inf)
    if calls.size == 0 or ge.size == 0:
        return op, end
    by_end = np.argsort(ge, kind="stable")
    e_sorted, lt_sorted = ge[by_end], launch_time[by_end]
    at = np.searchsorted(e_sorted, ce[calls] + 1e-6, side="right") - 1
    for k, j in zip(calls.tolist(), at.tolist()):
        stop = max(j - 256, -1)
        while j > stop and e_sorted[j] > cs[k]:
            if lt_sorted[j] < cs[k]:
                op[k], end[k] = int(by_end[j]), float(e_sorted[j])
                break
            j -= 1
    return op, end


def _running_argmax(x: np.ndarray) -> np.ndarray:
    """Index of the running maximum of ``x`` at each position."""
    if x.size == 0:
        return np.zeros(0, dtype=np.int64)
    run = np.maximum.accumulate(x)
    new = np.r_[True, x[1:] >= run[:-1]]
    idx = np.where(new, np.arange(x.size), 0)
    return np.maximum.accumulate(idx)


# --- replay with scaled causes -------------------------------------------------------------------
def _factors(factors: dict[str, float] | None) -> np.ndarray:
    f = np.ones(_NC)
    for cause, value in (factors or {}).items():
        if not isinstance(cause, str) or cause not in _C:
            raise ArgumentError(f"unknown cause {cause!r:.60}; the causes are {', '.join(PATH_CAUSES)}")
        try:
            value = float(value) if not isinstance(value, (bool, str, bytes)) else float("nan")
        except (TypeError, ValueError):
            value = float("nan")
        if not (value >= 0 and np.isfinite(value)):
            raise ArgumentError(f"factor for {cause!r} must be a number >= 0 (0 removes it), got {value!r}")
        f[_C[cause]] = value
    return f


def _gpu_inputs(g: _Graph, f: np.ndarray, op_scale: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """What a replay with causes scaled by ``f`` starts from on the GPU's side: each GPU op's duration, the ops'
    latencies (after the launch, after the stream predecessor, after the cross-stream op), which waits are kept,
    and the waits' scale."""
    d_gpu = (g.g_end - g.g_start) * f[g.g_cause]
    if op_scale is not None:
        d_gpu = d_gpu * op_scale
    fl, fg = f[_C["launch"]], f[_C["graph"]]
    lat = np.stack([g.g_lat[:, 0] * fl, g.g_lat[:, 1] * fg + g.g_lat[:, 2] * f[g.g_extra_cause], g.g_lat[:, 3]], axis=1)
    keep = _kept_waits(g.w_item.size, f[_C["sync"]]) & ~g.w_free
    return d_gpu, lat, keep, max(float(f[_C["sync"]]), 1.0)


def _replay_inputs(g: _Graph, f: np.ndarray, op_scale: np.ndarray | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """:func:`_gpu_inputs` and before them each host item's duration (the items a wait's call spans before the
    wait's own item take none: the call is one wait)."""
    d_host = np.zeros(g.h_start.size)
    for cause, values in g.comp.items():
        d_host += values * f[cause]
    spanned = g.w_item > g.w_first
    if spanned.any():  # a wait's call is one wait, however it is cut: the items before its own take no time
        mark = np.zeros(d_host.size + 1, dtype=np.int64)
        np.add.at(mark, g.w_first[spanned], 1)
        np.add.at(mark, g.w_item[spanned], -1)
        d_host[np.cumsum(mark[:-1]) > 0] = 0.0
    return (d_host, *_gpu_inputs(g, f, op_scale))  # type: ignore[return-value]


def _simulate(g: _Graph, f: np.ndarray, op_scale: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Replay the graph with causes scaled by ``f`` (and GPU ops by ``op_scale``): new host item starts and
    ends, GPU op starts and ends. A graph without cross-stream waits is replayed in one pass over its waits
    (:func:`_simulate_by_segments`), one with them wait by wait (:func:`_simulate_by_waits`); both give the same
    times (up to rounding)."""
    if not (g.g_cross >= 0).any():
        return _simulate_by_segments(g, f, op_scale)
    return _simulate_by_waits(g, f, op_scale)


def _simulate_by_segments(g: _Graph, f: np.ndarray, op_scale: np.ndarray | None = None
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The replay of a graph whose GPU ops wait on no other stream's, with the host's waits the only step taken
    one at a time.

    The waits cut the host chain into segments; segment k starts at T_k and its items at T_k plus the durations
    before them inside it. On a stream, op j ends at e_j = max(e_{j-1} + gap_j, x_j) + d_j, which is
    e_j = P_j + max_{i<=j}(x_i + d_i - P_i) with P the running sum of gaps and durations; x_i is its launch item's
    start plus the launch latency, T_k plus a constant, or a pinned start. So a wait only needs the running
    maximum, over the ops up to the one it waits on, of T_k plus each segment's largest constant: walked chunk by
    chunk (a chunk: ops of one segment up to the next op waited on), a few thousand steps a replay. With the T_k
    known, every time is one vectorised pass; the host's durations before each item, being sums of each cause's
    scaled by its factor, are summed once per cause and graph."""
    T, d_gpu, ge_ = _segment_replay(g, f, op_scale)
    lay = _layout(g)
    seg_of_item = lay["seg_of_item"]
    offset, own = np.zeros(g.h_start.size), np.zeros(g.h_start.size)
    for c in g.comp:
        sums = _cause_sums(g, c)
        offset += f[c] * (sums["before"] - sums["base"][seg_of_item])
        own += f[c] * sums["own"]
    hs = T[seg_of_item] + offset
    he = hs + own
    if g.w_item.size:
        he[g.w_item] = T[1:]
    return hs, he, ge_ - d_gpu, ge_


def _replayed_span(g: _Graph, f: np.ndarray, op_scale: np.ndarray | None = None) -> float:
    """The kept steps' span (:func:`_span`) when the graph is replayed with ``f`` and ``op_scale``: what a what-if
    needs of the replay (the host's first start and last end, the GPU's ends)."""
    if (g.g_cross >= 0).any():
        return _span(g, *_simulate_by_waits(g, f, op_scale))
    T, d_gpu, ge_ = _segment_replay(g, f, op_scale)
    n_h = g.h_start.size
    if not n_h:
        return _span(g, np.zeros(0), np.zeros(0), ge_ - d_gpu, ge_)
    lay = _layout(g)
    last = n_h - 1  # the chain's last item: a wait's (its end the chain's last start) or one of its own time
    if lay["is_wait"][last]:
        last_end = float(T[-1])
    else:
        k = int(lay["seg_of_item"][last])
        sums = [(f[c], _cause_sums(g, c)) for c in g.comp]
        last_end = float(T[k] + sum(x * (s["before"][last] - s["base"][k] + s["own"][last]) for x, s in sums))
    first_start = float(T[0])  # the first item starts its segment
    return _span(g, np.array([first_start]), np.array([last_end]), ge_ - d_gpu, ge_)


def _segment_replay(g: _Graph, f: np.ndarray, op_scale: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_simulate_by_segments`' sequential part: each segment's start ``T`` (the last: the chain after its
    last wait), each GPU op's duration and end."""
    n_h, n_g, n_w = g.h_start.size, g.g_start.size, g.w_item.size
    d_gpu, lat, keep, scale = _gpu_inputs(g, f, op_scale)
    lay = _layout(g)
    on_chain, k_op = lay["on_chain"], lay["k_op"]
    # each launch item's start less its segment's, each segment's length: sums of each cause's, scaled
    off_li, lengths = np.zeros(n_g), np.zeros(n_w + 1)
    for c in g.comp:
        sums = _cause_sums(g, c)
        off_li += f[c] * sums["offset_at_launch"]
        lengths += f[c] * sums["lengths"]
    # each GPU op, on its stream: P, and the constant its launch adds to its segment's start (a) or its pinned start (b)
    steps = lat[:, 1] + d_gpu
    steps[lay["stream_first"]] = d_gpu[lay["stream_first"]]
    P = np.empty(n_g)
    for idx in g.streams:
        P[idx] = np.cumsum(steps[idx])
    a = np.where(on_chain, off_li + lat[:, 0] + d_gpu - P, -np.inf)
    b = np.where(np.isfinite(g.g_pin), g.g_pin + d_gpu - P, -np.inf) if lay["any_pinned"] else np.full(n_g, -np.inf)
    upto = np.minimum(g.w_item, n_h - 1)
    placed = g.g_seg[g.w_op] <= upto if n_w else np.zeros(0, bool)  # its op is placed by then (else: its recorded end)
    walk = keep & placed
    chunks = _chunks(g, lay, walk, a, b)
    T: list[float] = []
    t = float(g.c0)
    ptr = [0] * len(g.streams)
    best = [-np.inf] * len(g.streams)  # the running maximum over the chunks walked
    at: list[dict[int, float]] = [{} for _ in g.streams]  # ... at each op waited on, once walked past
    w_ret, w_base = g.w_ret.tolist(), g.w_base.tolist()
    s_w, p_w = lay["stream_of"][g.w_op].tolist(), lay["pos_of"][g.w_op].tolist()  # where each wait's op lies
    P_w, end_w = P[g.w_op].tolist(), g.g_end[g.w_op].tolist()
    keep_l, walk_l, len_l = keep.tolist(), walk.tolist(), lengths.tolist()
    for k in range(n_w + 1):
        T.append(t)
        t = t + len_l[k]
        if k == n_w:
            break
        if keep_l[k]:
            target = end_w[k]
            if walk_l[k]:
                s, p = s_w[k], p_w[k]
                if p not in at[s]:
                    c_last, c_seg, c_a, c_b = chunks[s]
                    j, r = ptr[s], best[s]
                    while j < len(c_last) and c_last[j] <= p:
                        r = max(r, T[c_seg[j]] + c_a[j], c_b[j])
                        at[s][c_last[j]] = r
                        j += 1
                    ptr[s], best[s] = j, r
                placed_end = P_w[k] + at[s][p]
                if placed_end > -np.inf:  # else nothing placed it (no launch, no op before it): its recorded end
                    target = placed_end
            t = t + scale * max(w_base[k], target + w_ret[k] - t)
        else:  # made asynchronous: the call costs what it does with nothing to wait for
            t = t + w_base[k]
    T_ = np.array(T)
    v = np.maximum(np.where(on_chain, T_[k_op] + a, -np.inf), b)
    ge_ = np.empty(n_g)
    for idx in g.streams:
        ge_[idx] = P[idx] + np.maximum.accumulate(v[idx])
    return T_, d_gpu, ge_


def _cause_sums(g: _Graph, cause: int) -> dict[str, np.ndarray]:
    """One host cause's durations as a replay by segments adds them up: each item's own (none for a wait's items),
    the sum before each item and before each segment, each segment's, and before each GPU op's launch item within
    its segment."""
    key = ("cause_sums", cause)
    if key not in g.memo:
        lay = _layout(g)
        n_h = g.h_start.size
        own = np.where(lay["timed"], g.comp[cause], 0.0)
        run = np.cumsum(own)
        before = run - own
        total = float(run[-1]) if n_h else 0.0
        base = np.r_[before, total][np.minimum(np.r_[0, g.w_item + 1], n_h)]
        g.memo[key] = {"own": own, "before": before, "base": base, "lengths": np.r_[before[g.w_item], total] - base,
                       "offset_at_launch": np.where(lay["on_chain"], before[lay["li"]] - base[lay["k_op"]], 0.0)
                       if n_h else np.zeros(g.g_start.size)}
    return g.memo[key]


def _layout(g: _Graph) -> dict[str, np.ndarray]:
    """What every replay of ``g`` by segments shares: the segment of each host item and of each GPU op's launch,
    each op's stream and place on it, the streams' first ops, the ops launched from the chain."""
    if "layout" not in g.memo:
        n_h, n_g = g.h_start.size, g.g_start.size
        is_wait = np.zeros(n_h, dtype=bool)
        is_wait[g.w_item] = True
        seg_of_item = np.searchsorted(g.w_item, np.arange(n_h), side="left")
        on_chain = (g.g_launch >= 0) & ~np.isfinite(g.g_pin)
        li = np.clip(g.g_launch, 0, None)
        k_op = np.where(on_chain, seg_of_item[li] if n_h else 0, 0)
        stream_of = np.zeros(n_g, dtype=np.int64)
        pos_of = np.zeros(n_g, dtype=np.int64)
        for s, idx in enumerate(g.streams):
            stream_of[idx] = s
            pos_of[idx] = np.arange(idx.size)
        first = np.array([idx[0] for idx in g.streams if idx.size], dtype=np.int64)
        timed = ~is_wait  # an item that takes its own time: not a wait's, nor one of the items its call spans before it
        spanned = g.w_item > g.w_first
        if spanned.any():
            mark = np.zeros(n_h + 1, dtype=np.int64)
            np.add.at(mark, g.w_first[spanned], 1)
            np.add.at(mark, g.w_item[spanned], -1)
            timed &= np.cumsum(mark[:-1]) == 0
        g.memo["layout"] = {"is_wait": is_wait, "timed": timed, "seg_of_item": seg_of_item, "on_chain": on_chain,
                            "li": li, "k_op": k_op, "stream_of": stream_of, "pos_of": pos_of, "stream_first": first,
                            "any_pinned": bool(np.isfinite(g.g_pin).any())}
    return g.memo["layout"]


def _chunks(g: _Graph, lay: dict[str, np.ndarray], walk: np.ndarray, a: np.ndarray, b: np.ndarray
            ) -> list[tuple[list[int], list[int], list[float], list[float]]]:
    """Per stream, the chunks the walk of :func:`_simulate_by_segments` takes: each chunk's last place on the
    stream, its segment, and its ops' largest ``a`` and ``b``. A chunk ends at every op a walked wait waits on and
    wherever the launching segment changes; the cuts depend only on which waits are walked."""
    key = ("chunks", walk.tobytes())
    if key not in g.memo:
        cuts = []
        ops = g.w_op[walk]
        for s, idx in enumerate(g.streams):
            need = np.unique(lay["pos_of"][ops[lay["stream_of"][ops] == s]]) if ops.size else np.zeros(0, np.int64)
            if need.size == 0:
                cuts.append(None)
                continue
            n = int(need[-1]) + 1
            ks = lay["k_op"][idx[:n]]
            cut = np.zeros(n, dtype=bool)
            cut[need] = True  # a chunk ends at each op waited on ...
            cut[:-1] |= ks[1:] != ks[:-1]  # ... and where the launching segment changes
            last = np.flatnonzero(cut)
            cuts.append((idx[:n], last, np.r_[0, last[:-1] + 1], ks[last]))
        g.memo[key] = cuts
    out = []
    for cut in g.memo[key]:
        if cut is None:
            out.append(([], [], [], []))
            continue
        ops, last, first, seg = cut
        out.append((last.tolist(), seg.tolist(), np.maximum.reduceat(a[ops], first).tolist(),
                    np.maximum.reduceat(b[ops], first).tolist()))
    return out


def _simulate_by_waits(g: _Graph, f: np.ndarray, op_scale: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The replay wait by wait: the host's items up to each wait, then the GPU ops launched so far (in stream
    order; ops of several streams that wait on each other in the order they started), then the wait."""
    n_h, n_g = g.h_start.size, g.g_start.size
    d_host, d_gpu, lat, keep, scale = _replay_inputs(g, f, op_scale)
    hs, he = np.empty(n_h), np.empty(n_h)
    gs_, ge_ = np.full(n_g, np.nan), np.full(n_g, np.nan)
    ptr = [0] * len(g.streams)
    seg_of = [g.g_seg[idx] for idx in g.streams]
    t = g.c0
    i0 = 0
    waits = list(zip(g.w_item.tolist(), g.w_op.tolist(), g.w_ret.tolist(), g.w_base.tolist(), keep.tolist()))
    for w, op, ret, base, kept in [*waits, (n_h, -1, 0.0, 0.0, False)]:
        seg = d_host[i0:w]
        if seg.size:
            ends = t + np.cumsum(seg)
            hs[i0:w] = np.r_[t, ends[:-1]]
            he[i0:w] = ends
            t = float(ends[-1])
        if w < n_h:
            hs[w] = t
        _place_gpu(g, min(w, n_h - 1), ptr, seg_of, hs, d_gpu, lat, gs_, ge_)
        if w >= n_h:
            break
        if kept:
            target = ge_[op] if np.isfinite(ge_[op]) else g.g_end[op]
            t = t + scale * max(base, target + ret - t)
        else:  # made asynchronous: the call costs what it does with nothing to wait for
            t = t + base
        he[w] = t
        i0 = w + 1
    return hs, he, gs_, ge_


def _kept_waits(n: int, f: float) -> np.ndarray:
    """Which of ``n`` waits a sync factor keeps: all at 1 (and above, where each wait is scaled), none at 0, and
    in between that share of them, evenly spread (``0.25``: one sync in four, "sync every 4 steps")."""
    if f >= 1:
        return np.ones(n, dtype=bool)
    j = np.arange(n)
    return np.floor((j + 1) * f + 1e-9) > np.floor(j * f + 1e-9)


def _place_gpu(g: _Graph, upto: int, ptr: list[int], seg_of: list[np.ndarray], hs: np.ndarray, d: np.ndarray,
               lat: np.ndarray, gs_: np.ndarray, ge_: np.ndarray) -> None:
    """Place every GPU op whose launch item is at or before ``upto`` (in stream order), iterating over the
    streams while an op waits on another stream's op placed in the same round."""
    blocks = []
    for s in range(len(g.streams)):
        q = int(np.searchsorted(seg_of[s], upto, side="right"))
        if q > ptr[s]:
            blocks.append((s, ptr[s], q))
    if not blocks:
        return
    launch_start = hs  # the item starts placed so far (every launch item of these ops is among them)
    if any((g.g_cross[g.streams[s][p:q]] >= 0).any() for s, p, q in blocks):
        _place_in_order(g, blocks, launch_start, d, lat, gs_, ge_)
    else:
        for s, p, q in blocks:
            _place_stream(g, s, p, q, launch_start, d, lat, gs_, ge_)
    for s, _, q in blocks:
        ptr[s] = q


def _overlapped(g: _Graph, names: tuple[str, ...]) -> _Graph:
    """The graph with the GPU work of ``names`` (causes or :data:`OP_GROUPS`) moved off the path: it runs in order
    on a stream of its own beside the rest, and nothing waits for it (copies prefetched a step ahead on a side
    stream, a collective overlapped with the backward pass). The work after it on its stream follows the work
    before it; the host's own time on such a cause goes to another thread."""
    hid = np.zeros(g.g_start.size, dtype=bool)
    for name in names:
        hid |= _group(g, name)
    causes = tuple(_C[n] for n in names if n in _C)
    comp = {k: v for k, v in g.comp.items() if k not in causes}  # host time of it: another thread's now
    if not hid.any():
        return _Graph(**{**g.__dict__, "comp": comp, "memo": g.memo})  # the same layout: its memo is shared
    n = g.g_start.size
    n_streams = len(g.streams)
    stream = np.where(hid, g.g_stream + n_streams, g.g_stream)
    order = np.lexsort((g.g_start, stream))  # the ops stay in place; only their stream order changes
    prev = np.full(n, -1, dtype=np.int64)
    same = np.r_[False, stream[order][1:] == stream[order][:-1]]
    prev[order[same]] = order[np.flatnonzero(same) - 1]
    streams = [order[stream[order] == k] for k in np.unique(stream)]
    seg = np.where(g.g_launch >= 0, g.g_launch, -1)
    for idx in streams:
        seg[idx] = np.maximum.accumulate(seg[idx])
    cross = np.where(hid[np.clip(g.g_cross, 0, None)] & (g.g_cross >= 0), -1, g.g_cross)
    free = hid[g.w_op] if g.w_op.size else np.zeros(0, bool)  # a wait for work nothing waits for any more
    return _Graph(g.rank, g.c0, g.t0, g.t1, g.windows, g.h_start, g.h_end, comp, g.h_row, g.w_item, g.w_op,
                  g.w_ret, g.w_base, g.w_first, g.g_start, g.g_end, g.g_cause, stream, g.g_row,
                  g.g_launch, prev, cross, g.g_lat, g.g_pin, g.g_bind, g.g_pageable, g.g_hostcopy, g.g_h2d, g.g_bytes, g.g_ffma, seg,
                  g.first_op, g.g_kept, streams, g.info, g.w_free | free, g.g_extra_cause, hid)


def _ready(g: _Graph, idx: np.ndarray, launch_start: np.ndarray, lat: np.ndarray, ge_: np.ndarray) -> np.ndarray:
    """When each op of ``idx`` could start, its stream aside: after its launch call, and the op on another stream
    it waits for."""
    launch = g.g_launch[idx]
    rl = np.where(launch >= 0, launch_start[np.clip(launch, 0, None)], -np.inf) + lat[idx, 0]
    rl = np.where(np.isfinite(g.g_pin[idx]) | (launch < 0), -np.inf, rl)
    cross = g.g_cross[idx]
    cross_end = ge_[np.clip(cross, 0, None)] if cross.size else np.zeros(0)
    rc = np.where(cross >= 0, cross_end + lat[idx, 2], -np.inf)
    return np.maximum(np.maximum(rl, rc), g.g_pin[idx])


def _place_stream(g: _Graph, s: int, p: int, q: int, launch_start: np.ndarray, d: np.ndarray, lat: np.ndarray,
                  gs_: np.ndarray, ge_: np.ndarray) -> None:
    """Ops p..q of stream s, one after another: e_k = max(e_{k-1} + gap_k, ready_k) + d_k, as a running maximum."""
    idx = g.streams[s][p:q]
    x = _ready(g, idx, launch_start, lat, ge_)
    dd, bb = d[idx], lat[idx, 1]
    prev_end = ge_[g.streams[s][p - 1]] if p > 0 else -np.inf
    steps = bb + dd
    steps[0] = (bb[0] if p > 0 else 0.0) + dd[0]
    P = np.cumsum(steps)
    e = P + np.maximum.accumulate(np.r_[prev_end, x + dd - P])[1:]
    ge_[idx] = e
    gs_[idx] = e - dd


def _place_in_order(g: _Graph, blocks: list[tuple[int, int, int]], launch_start: np.ndarray, d: np.ndarray,
                    lat: np.ndarray, gs_: np.ndarray, ge_: np.ndarray) -> None:
    """Ops of several streams that wait on each other: one pass in the order they started in the trace (every
    dependency ended before its dependent started, so that order places each after what it waits for)."""
    idx = np.concatenate([g.streams[s][p:q] for s, p, q in blocks])
    idx = idx[np.argsort(g.g_start[idx], kind="stable")]
    launch = g.g_launch[idx]
    rl = np.where(launch >= 0, launch_start[np.clip(launch, 0, None)], -np.inf) + lat[idx, 0]
    rl = np.where(np.isfinite(g.g_pin[idx]) | (launch < 0), -np.inf, rl)
    base = np.maximum(rl, g.g_pin[idx]).tolist()
    cross, prev = g.g_cross[idx].tolist(), g.g_prev[idx].tolist()
    gap, lc, dur = lat[idx, 1].tolist(), lat[idx, 2].tolist(), d[idx].tolist()
    end = ge_  # filled as we go (ops before these are placed already)
    real_end = g.g_end
    for k, op in enumerate(idx.tolist()):
        t = base[k]
        pr = prev[k]
        if pr >= 0:
            t = max(t, end[pr] + gap[k])
        c = cross[k]
        if c >= 0:  # an op waited for that is not placed yet (launched later) binds at its recorded end
            t = max(t, (end[c] if end[c] == end[c] else real_end[c]) + lc[k])
        end[op] = t + dur[k]
        gs_[op] = t


# --- the path --------------------------------------------------------------------------------------
_PATH_COLUMNS = ["rank", "start_us", "end_us", "dur_us", "cause", "row"]


def _walk(g: _Graph) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The critical path of the rank's kept steps as stretches (``rank, start_us, end_us, dur_us, cause, row``),
    each with one cause and the event row it is (or lies in; -1 for host time between calls), in time order; with
    each stretch's cause as its index in :data:`PATH_CAUSES` and whether it is on the GPU (the frame's ``cause`` and
    ``on``, as arrays a sum by cause compares without testing strings)."""
    pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # start, end, cause, row, gpu
    host_runs: list[tuple[int, int, float]] = []  # (first item, last item, the time the last item is cut at)

    def emit(s, e, c, r, gpu: bool = True) -> None:
        s, e = np.atleast_1d(np.asarray(s, float)), np.atleast_1d(np.asarray(e, float))
        pieces.append((s, e, np.broadcast_to(np.asarray(c, np.int64), s.shape), np.broadcast_to(np.asarray(r, np.int64), s.shape),
                       np.full(s.shape, gpu)))

    n_h, n_g = g.h_start.size, g.g_start.size
    wait_of = dict(zip(g.w_item.tolist(), g.w_op.tolist()))
    run_start = np.maximum.accumulate(np.where((g.g_bind == 1) & (g.g_prev >= 0), 0, np.arange(n_g))) if n_g else np.zeros(0, int)
    last_gpu = int(np.argmax(g.g_end)) if n_g else -1
    host_end = float(g.h_end[-1]) if n_h else g.t0
    if n_g and g.g_end[last_gpu] > host_end - 1e-9:
        node, i, t = "g", last_gpu, float(g.g_end[last_gpu])
    else:
        node, i, t = "h", n_h - 1, host_end
    t_end = t
    # each step is walked back from its own end: at a step's start the walk goes on from what was still running or
    # had just ended there (the GPU's op where it was busy, else the host's item), not from wherever the later
    # step's path had reached (two chains that take as long: the one that ended each step holds it)
    ws = np.sort(g.windows["start_us"].to_numpy(float))
    bounds = ws[(ws > g.t0 + 1e-9) & (ws < t_end - 1e-9)]
    kb = bounds.size - 1
    lower = float(bounds[kb]) if kb >= 0 else g.t0
    first_piece = 0
    stream_starts = [g.g_start[idx] for idx in g.streams] if bounds.size else []
    for _ in range(2 * (n_h + n_g) + 4 * bounds.size + 10):
        if kb >= 0 and t <= lower + 1e-9:
            _clip_below(pieces, first_piece, lower)
            first_piece = len(pieces)
            at = _node_at(g, lower, stream_starts)
            if at is not None:
                node, i, t = at
                if node == "g" and g.g_end[i] < t:  # the GPU's own gap after its op, to the step's start
                    emit(float(g.g_end[i]), t, _C["graph"], g.g_row[i])
                    t = float(g.g_end[i])
            kb -= 1
            lower = float(bounds[kb]) if kb >= 0 else g.t0
            continue
        if t <= g.t0 + 1e-9 or i < 0:
            break
        if node == "h":
            op = wait_of.get(i)
            if op is not None and t >= g.h_end[i] - 1e-9 and g.g_end[op] > g.h_start[i] - 1e-9:
                emit(max(float(g.g_end[op]), g.t0), t, _C["sync"], g.h_row[i], False)  # the sync's return after the work
                node, i, t = "g", op, min(float(g.g_end[op]), t)
                continue
            k = int(np.searchsorted(g.w_item, i, side="left")) - 1  # back to the previous binding wait, or the start
            lo = min(int(g.w_item[k]) + 1 if k >= 0 else 0, i)
            if kb >= 0:  # ... or the step's start
                lo = max(lo, min(int(np.searchsorted(g.h_start, lower - 1e-9, side="left")), i))
            host_runs.append((lo, i, t))
            node, i, t = "h", lo - 1, float(g.h_start[lo])
            continue
        lo = int(run_start[i])  # the run of ops each bound by the op before it on its stream (back to the step's start)
        if kb >= 0 and g.g_start[lo] < lower:
            lo = max(lo, lo + int(np.searchsorted(g.g_start[lo:i + 1], lower, side="right")) - 1)
        idx = np.arange(lo, i + 1)
        emit(g.g_start[idx], np.minimum(g.g_end[idx], np.r_[g.g_start[idx[1:]], t]), g.g_cause[idx], g.g_row[idx])
        if idx.size > 1:  # the gaps between them: the GPU's own part, then what eager launching added
            gap_s, own = g.g_end[idx[:-1]], g.g_lat[idx[1:], 1]
            emit(gap_s, np.minimum(gap_s + own, g.g_start[idx[1:]]), _C["graph"], g.g_row[idx[1:]])
            emit(np.minimum(gap_s + own, g.g_start[idx[1:]]), g.g_start[idx[1:]], g.g_extra_cause[idx[1:]], g.g_row[idx[1:]])
        bind, s0 = int(g.g_bind[lo]), min(float(g.g_start[lo]), t)
        if bind == 0:
            li = int(g.g_launch[lo])
            ready = min(float(g.h_start[li]), s0)
            emit(ready, s0, _C["launch"], g.g_row[lo], False)
            node, i, t = "h", li - 1, ready
            if ready < g.h_start[li] - 1e-9:  # a clock that put the kernel before its call: go on inside the call
                node, i = "h", li
        elif bind == 1:
            prev = int(g.g_prev[lo])
            ready = min(float(g.g_end[prev]), s0)
            mid = min(ready + float(g.g_lat[lo, 1]), s0)
            emit(ready, mid, _C["graph"], g.g_row[lo])
            emit(mid, s0, int(g.g_extra_cause[lo]), g.g_row[lo])
            node, i, t = "g", prev, ready
        elif bind == 2:
            cross = int(g.g_cross[lo])
            ready = min(float(g.g_end[cross]), s0)
            emit(ready, s0, g.g_cause[lo], g.g_row[lo])
            node, i, t = "g", cross, ready
        else:  # nothing recorded explains its start: go on with the host where it started
            node, i, t = "h", int(np.searchsorted(g.h_start, s0, side="right")) - 1, s0
    if host_runs:
        hs_, he_, hc_, hr_ = _lay_out(g, host_runs)
        pieces.append((hs_, he_, hc_, hr_, np.zeros(hs_.shape, dtype=bool)))
    if not pieces:
        return _empty_path(), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    s, e, c, r, on_gpu = (np.concatenate([p[k] for p in pieces]) for k in range(5))
    s = np.maximum(s, g.t0)  # the steps start at the first window's (the host may have begun them before)
    keep = e > s + 1e-9
    s, e, c, r, on_gpu = s[keep], e[keep], c[keep], r[keep], on_gpu[keep]
    order = np.argsort(s, kind="stable")
    s, e, c, r, on_gpu = s[order], e[order], c[order], r[order], on_gpu[order]
    out = pd.DataFrame({"rank": np.full(s.size, g.rank, dtype=np.int64), "start_us": s, "end_us": e, "dur_us": e - s,
                        "cause": np.asarray(PATH_CAUSES, dtype=object)[c], "row": r,
                        "on": _ON[on_gpu.astype(np.intp)]})  # two shared strings, not a new string a stretch
    out.attrs["end_us"] = t_end
    return out, np.where(c < 0, c + len(PATH_CAUSES), c), on_gpu


def _clip_below(pieces: list[tuple[np.ndarray, ...]], first: int, lower: float) -> None:
    """Cut the stretches emitted since ``first`` at ``lower``: the part before it is the earlier step's, walked
    from its own end."""
    for k in range(first, len(pieces)):
        s, e, c, r, on = pieces[k]
        if s.size and float(s.min()) < lower:
            pieces[k] = (np.maximum(s, lower), np.maximum(e, lower), c, r, on)


def _node_at(g: _Graph, t: float, starts: list[np.ndarray] | None = None) -> tuple[str, int, float] | None:
    """Where the walk goes on from at a step's start ``t``: the GPU op running across it or ending at it (within
    :data:`~helpers.thresholds.CROSS_STREAM_TOL_US`, as a GPU op waits on another stream's work that ended that
    soon before it; the latest ending of the streams'), else the host item ending at ``t``; None when there is
    neither (the host's chain ended before ``t`` and the GPU was idle). The GPU wins a tie, as at the steps' end.
    ``starts``: each stream's op starts (kept by the caller)."""
    best, best_end = -1, -np.inf
    for k, idx in enumerate(g.streams):
        p = int(np.searchsorted(starts[k] if starts is not None else g.g_start[idx], t, side="left")) - 1
        if p >= 0 and g.g_end[idx[p]] > best_end:
            best, best_end = int(idx[p]), float(g.g_end[idx[p]])
    if best >= 0 and best_end >= t - th.CROSS_STREAM_TOL_US:
        return "g", best, t
    j = int(np.searchsorted(g.h_end, t - 1e-9, side="left"))
    if j < g.h_end.size and g.h_start[j] < t - 1e-9:
        return "h", j, t
    return None


def _lay_out(g: _Graph, runs: list[tuple[int, int, float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Host items of the path as stretches: each item's causes one after another inside it, in cause order; an
    item entered part-way (the path came to it from GPU work that started inside it) is cut there."""
    items = np.concatenate([np.arange(lo, hi + 1) for lo, hi, _ in runs])
    length = g.h_end - g.h_start
    cut = np.ones(items.size)
    at = np.cumsum([hi - lo + 1 for lo, hi, _ in runs]) - 1
    for pos_, (_, hi, t) in zip(at, runs):
        if t < g.h_end[hi] - 1e-9:
            cut[pos_] = max(t - g.h_start[hi], 0.0) / max(length[hi], 1e-12)
    it, cs, vs = [], [], []
    for cause, values in sorted(g.comp.items()):
        v = values[items] * cut
        nz = v > 0
        it.append(items[nz])
        cs.append(np.full(int(nz.sum()), cause, dtype=np.int64))
        vs.append(v[nz])
    it, cs, vs = np.concatenate(it), np.concatenate(cs), np.concatenate(vs)
    order = np.lexsort((cs, it))
    it, cs, vs = it[order], cs[order], vs[order]
    before = np.cumsum(vs) - vs
    first = np.r_[True, it[1:] != it[:-1]]
    base = np.maximum.accumulate(np.where(first, before, 0.0))
    s = g.h_start[it] + (before - base)
    return s, s + vs, cs, g.h_row[it]


#: A stretch's side, by whether it is the GPU's (index 1).
_ON = np.array(["host", "gpu"], dtype=object)
#: The causes whose stretches on the GPU are its compute on the path (``gpu_compute_ms_per_step``), by index.
_GPU_SIDE = np.array([_C[c] for c in ("gemm", "kernel", "graph", "launch") if c in _C], dtype=np.int64)


def _empty_path() -> pd.DataFrame:
    return pd.DataFrame({"rank": pd.Series(dtype="int64"), "start_us": pd.Series(dtype="float64"),
                         "end_us": pd.Series(dtype="float64"), "dur_us": pd.Series(dtype="float64"),
                         "cause": pd.Series(dtype="object"), "row": pd.Series(dtype="int64"),
                         "on": pd.Series(dtype="object")})


# --- the steps' span before and after a replay -----------------------------------------------------
def _span(g: _Graph, hs: np.ndarray, he: np.ndarray, gs: np.ndarray, ge: np.ndarray) -> float:
    """The kept steps' span: the larger of the host's (its own steps: the chain's start to its end) and the GPU's
    (the first window's start to the end of the last GPU work; where the GPU paces the loop that start moves with
    the steps' first op, since the GPU began the steps when it finished what it ran before). Over the number of
    steps it is the mean step: with the host ahead of its GPU, the GPU's pace."""
    host = (float(he[-1]) - float(hs[0])) if he.size else 0.0
    if g.g_hidden.size:  # an overlapped collective's own time is no bound: on one rank it holds its wait for the others
        ge = np.where(g.g_hidden & (g.g_cause == _C["collective"]), np.nan, ge)
    if not ge.size or np.isnan(ge).all():
        return host
    if g.t0 > g.c0 + 1e-6 and g.first_op >= 0:  # the GPU's windows, behind the host's steps
        start = g.t0 + float(gs[g.first_op] - g.g_start[g.first_op])
    else:
        start = float(hs[0]) if hs.size else g.t0
    return max(host, float(np.nanmax(ge)) - start)


# --- public API ---------------------------------------------------------------------------------------
def _graphs(trace: Trace) -> dict[int, _Graph]:
    """Each rank's graph over the trace's steps (the steady state's where none are marked), kept with the trace;
    while a forked process works out some ranks' figures (:mod:`helpers.rank_split`), this process's ranks only."""
    memo = m._memo(trace)
    if "critical_graphs" not in memo:
        stepped = m.stepped(trace)
        away = _remote_ranks(trace)
        graphs = {}
        for rank in stepped.ranks:
            g = None if rank in away else _build(stepped, rank)
            if g is not None:
                graphs[rank] = g
        memo["critical_graphs"] = (graphs, stepped)
    return memo["critical_graphs"][0]


def _stepped(trace: Trace) -> Trace:
    return m._memo(trace)["critical_graphs"][1] if "critical_graphs" in m._memo(trace) else m.stepped(trace)


# --- one rank's share of the figures: what a forked process may work out for some ranks (helpers.rank_split) ---
#: The memo's key of the object serving the ranks a forked process works out (:mod:`helpers.rank_split`).
_REMOTE = "critical_remote"


def _remote(trace: Trace) -> Any:
    return m._memo(trace).get(_REMOTE)


def _remote_ranks(trace: Trace) -> frozenset[int]:
    r = _remote(trace)
    return r.ranks if r is not None else frozenset()


@dataclass
class _RankPath:
    """One rank's part of :func:`critical_path`: its stretches (with their step), its steps' rows, its mean step's
    span, milliseconds by cause, the GPU's share, its work by cause and waits, and its graph's info."""

    path: pd.DataFrame
    step_rows: list[dict[str, Any]]
    span: float
    total: np.ndarray
    gpu_share: float
    work: tuple[dict[str, float], float]
    info: dict[str, Any]


def _rank_path(g: _Graph) -> _RankPath:
    path, cause_code, on_gpu = _walk(g)
    t_end = float(path.attrs.get("end_us", g.t1))
    win = g.windows
    ws, we = win["start_us"].to_numpy(float), win["end_us"].to_numpy(float).copy()
    if we.size:
        we[-1] = max(we[-1], t_end)  # the last step ends with the last of its work
    step_of = np.searchsorted(ws, path["start_us"].to_numpy(), side="right") - 1
    path["step"] = np.where(step_of >= 0, win["step"].to_numpy()[np.clip(step_of, 0, None)], -1)
    per = np.zeros((len(win), _NC))
    tot = np.zeros(_NC)
    p_start, p_end = path["start_us"].to_numpy(), path["end_us"].to_numpy()
    for ci in range(len(PATH_CAUSES)):
        hit = cause_code == ci  # the walk's cause codes: no string compared a stretch
        if not hit.any():
            continue
        us, ue = m.merge_intervals(p_start[hit], p_end[hit])
        per[:, ci] = m.overlap(us, ue, ws, we)
        tot[ci] = float((ue - us).sum())
    n = max(len(win), 1)
    gpu_side = on_gpu & np.isin(cause_code, _GPU_SIDE)
    w_tot, waits = _work(g)
    step_rows = []
    for k in range(len(win)):
        row = {"rank": g.rank, "step": int(win["step"].iat[k]), "start_us": ws[k], "end_us": we[k], "dur_us": we[k] - ws[k]}
        row.update({f"{c}_ms": per[k, ci] / 1e3 for ci, c in enumerate(PATH_CAUSES)})
        row["bound_by"] = PATH_CAUSES[int(np.argmax(per[k]))] if per[k].any() else ""
        step_rows.append(row)
    return _RankPath(path, step_rows, (t_end - g.t0) / n, tot / n, float(path["dur_us"].to_numpy()[gpu_side].sum()) / n,
                     ({c: float(w_tot[ci] / n / 1e3) for ci, c in enumerate(PATH_CAUSES)}, waits / n), g.info)


def _rank_paths(trace: Trace) -> dict[int, _RankPath]:
    """Every rank's :class:`_RankPath` in the trace's rank order: worked out here, or by a forked process
    (:mod:`helpers.rank_split`), each kept in the store under ``("critical_rank_path", rank)``."""
    out = {}
    for rank in _stepped(trace).ranks:
        rp = _rank_entry(trace, ("critical_rank_path", rank), rank, _rank_path)
        if rp is not None:
            out[rank] = rp
    return out


def _rank_entry(trace: Trace, key: tuple, rank: int, work: Any) -> Any:
    """The store's ``key`` (one rank's share of a figure), else ``work(graph)`` of the rank's graph (None when the rank
    has none): a forked process's rank is taken from what it sent, or worked out here if it sent nothing."""
    memo = m._memo(trace)
    if key not in memo:
        remote = _remote(trace)
        if remote is not None and rank in remote.ranks:
            remote.receive()
        if key in memo:
            return memo[key]
        g = _graph_of(trace, rank)
        memo[key] = None if g is None else work(g)
    return memo[key]


def _table_masks(trace: Trace, rank: int) -> None:
    """The whole table's masks a rank's graph reads (worked out for every rank at once), filled in by working out
    ``rank``'s host activity: :mod:`helpers.rank_split` does it before it forks, so both processes have them."""
    _kind_codes(trace)
    freeing_after_gpu_work(trace)
    m.is_sync_call(trace)
    for key, predicate in (("launch", _is_launch_call), ("startup_call", STARTUP_CALL.match),
                           ("compile_range", _is_compile_range), ("compile_frame", _is_compile_frame),
                           ("step_marker", _is_step_marker), ("gemm_name", _is_gemm), ("fp32_ffma_name", _is_fp32_ffma),
                           ("graph_launch", _is_graph_launch)):
        m.name_mask(trace, key, predicate)
    for cause in ("sync", "data_wait", "collective", "launch") if trace.has_gpu else ("data_wait", "collective", "host_compute"):
        m.host_union(trace, rank, cause)


def _graph_of(trace: Trace, rank: int) -> _Graph | None:
    """One rank's graph: this process's, or (a forked process's rank that it did not answer for) built here."""
    graphs = _graphs(trace)
    if rank in graphs or rank not in _remote_ranks(trace):
        return graphs.get(rank)
    memo = m._memo(trace)
    key = ("critical_graph_here", rank)
    if key not in memo:
        memo[key] = (_build(_stepped(trace), rank),)  # (kept as deep in the store as the trace's other graphs)
    return memo[key][0]


def _fix_key(factors: np.ndarray, overlapped: tuple[str, ...], rates: tuple[tuple[str, str], ...]) -> tuple:
    """A replay's inputs as a key (the cause factors' bytes, the causes moved off the path, the rates)."""
    return (np.asarray(factors, float).tobytes(), tuple(overlapped), tuple(tuple(r) for r in rates))


def _rank_mean(trace: Trace, g: _Graph, key: tuple) -> float:
    """One rank's mean step replayed with :func:`_fix_key` ``key``'s fix (microseconds)."""
    f = np.frombuffer(key[0], dtype=float)
    scale = _op_scale(trace, g, key[2])
    if key[1]:
        g = _overlapped(g, key[1])
    return _replayed_span(g, f, scale) / max(len(g.windows), 1)


def _fixed_means(trace: Trace, key: tuple) -> list[float]:
    """Every rank's mean step with ``key``'s fix, in the trace's rank order; a forked process's ranks not yet
    answered for are asked of it first, so that both processes replay at once."""
    ranks = _stepped(trace).ranks
    remote = _remote(trace)
    if remote is not None:
        remote.ask(key)
    means = [_rank_entry(trace, ("critical_rank_mean", rank, key), rank, lambda g: _rank_mean(trace, g, key))
             for rank in ranks]
    return [v for v in means if v is not None]


@dataclass
class CriticalPath:
    """The critical path of a trace's steps.

    ``stretches``: one row per stretch of the path (``rank, step, start_us, end_us, dur_us, cause, on, name, row``;
    ``on``: ``gpu`` for the GPU's work and its own gaps, ``host`` for the host's time, launch latency and sync returns),
    every microsecond of the steps on exactly one, in time order per rank (``row``: the event it is, or the call
    the host was in; -1 for host time between calls). ``steps``: one row per (rank, step): its time and the
    milliseconds of it on each cause. ``ms_per_step``: milliseconds a step by cause on the path, of the rank whose
    steps are longest (the one ``step_ms``, the mean step, is measured on); they add up to ``step_ms``.
    ``work_ms_per_step``: what each cause took a step on that rank, on the path or hidden beside it, and
    ``waits_per_step`` the host's waits for the GPU that bound it (syncs, blocking copies, implicit syncs).
    """

    stretches: pd.DataFrame
    steps: pd.DataFrame
    step_ms: float
    ms_per_step: dict[str, float]
    rank: int = 0
    work_ms_per_step: dict[str, float] = field(default_factory=dict)
    waits_per_step: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    job: JobPath | None = None  # with several ranks: which rank and work bound each step of the job

    def to_dict(self, stretches: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {"step_ms": self.step_ms, "ms_per_step": dict(self.ms_per_step), "rank": self.rank,
                             "work_ms_per_step": dict(self.work_ms_per_step), "waits_per_step": self.waits_per_step,
                             "steps": self.steps.to_dict("records")}
        if stretches:
            d["stretches"] = self.stretches.to_dict("records")
        if self.job is not None:
            d["job"] = self.job.to_dict()
        return d


@checked
def critical_path(trace: Trace) -> CriticalPath:
    """The critical path of each step of ``trace`` (over the steps :func:`helpers.steady_state` keeps): every
    stretch with one cause, the steps' milliseconds by cause, and the mean step they add up to."""
    memo = m._memo(trace)
    if "critical_path" in memo:
        return handed_out(memo["critical_path"])  # the caller's copy: an edit of it never reaches the store
    paths = _rank_paths(trace)
    stepped = _stepped(trace)
    names = stepped.events["name"]  # taken at the path's rows only: the whole column as objects costs a pass
    frames = [rp.path for rp in paths.values()]
    step_rows = [row for rp in paths.values() for row in rp.step_rows]
    spans = {rank: rp.span for rank, rp in paths.items()}
    totals = {rank: rp.total for rank, rp in paths.items()}
    gpu_share = {rank: rp.gpu_share for rank, rp in paths.items()}
    work = {rank: rp.work for rank, rp in paths.items()}
    stretches = pd.concat(frames, ignore_index=True) if frames else _empty_path().assign(step=pd.Series(dtype="int64"))
    if len(stretches):
        r = stretches["row"].to_numpy()
        stretches["name"] = np.where(r >= 0, names.take(np.clip(r, 0, None)).to_numpy() if len(names) else "", "")
    else:
        stretches["name"] = pd.Series(dtype="object")
    stretches = stretches[["rank", "step", "start_us", "end_us", "dur_us", "cause", "on", "name", "row"]]
    steps = pd.DataFrame(step_rows, columns=["rank", "step", "start_us", "end_us", "dur_us",
                                             *(f"{c}_ms" for c in PATH_CAUSES), "bound_by"])
    if not spans:
        out = CriticalPath(stretches, steps, float("nan"), {c: 0.0 for c in PATH_CAUSES})
    else:
        rank = max(spans, key=lambda r: spans[r])
        ms = {c: float(totals[rank][ci] / 1e3) for ci, c in enumerate(PATH_CAUSES)}
        out = CriticalPath(stretches, steps, float(spans[rank] / 1e3), ms, rank, work[rank][0], work[rank][1],
                           {"ranks": {r: dict(rp.info) for r, rp in paths.items()},
                            "step_ms_by_rank": {r: v / 1e3 for r, v in spans.items()},
                            "work_ms_per_step_by_rank": {r: w[0] for r, w in work.items()},
                            "gpu_compute_ms_per_step": gpu_share[rank] / 1e3,
                            "waits_per_step_by_rank": {r: w[1] for r, w in work.items()}})
    for rank in stepped.ranks:  # each rank's part is in the path now: not kept twice
        memo.pop(("critical_rank_path", rank), None)
    memo["critical_path"] = out  # stored before the job's path, which may ask for it
    if len(paths) > 1:
        out.job = job_path({r: rank_steps(trace, r) for r in paths})
    return handed_out(out)  # the caller's copy: an edit of it never reaches the store


def _predicted_step_ms(trace: Trace, f: np.ndarray, op_scale: dict[int, np.ndarray] | None = None,
                       overlapped: tuple[str, ...] = ()) -> float:
    if op_scale is None:  # a fix of causes alone: the replay fix_step_ms makes of it
        means = _fixed_means(trace, _fix_key(f, overlapped, ()))
        return max(means) / 1e3 if means else float("nan")
    graphs = _graphs(trace)
    means = []
    for rank, g in graphs.items():
        if overlapped:
            g = _overlapped(g, overlapped)
        means.append(_replayed_span(g, f, op_scale.get(rank)) / max(len(g.windows), 1))
    return max(means) / 1e3 if means else float("nan")


# --- what a pattern's fix changes: groups of GPU ops, and the rates they would run at -------------------------
#: Groups of GPU ops a fix acts on besides whole causes: ``host_copies`` (to or from the host), ``h2d_copies``,
#: ``pageable_copies`` (to or from pageable host memory), ``ffma_gemms`` (matrix products on the fp32 FFMA pipes).
OP_GROUPS = ("host_copies", "h2d_copies", "pageable_copies", "ffma_gemms")


def _group(g: _Graph, name: str) -> np.ndarray:
    if name in _C:
        return g.g_cause == _C[name]
    if name == "pageable_copies":
        return g.g_pageable
    if name == "ffma_gemms":
        return g.g_ffma
    if name == "host_copies":
        return g.g_hostcopy
    if name == "h2d_copies":
        return g.g_hostcopy & g.g_h2d
    raise ArgumentError(f"unknown op group {name!r}; the groups are {', '.join(OP_GROUPS)} and the causes")


def pinned_gb_per_s(trace: Trace) -> float:
    """The bandwidth of copies between host and pinned memory: the trace's own, where it has such copies, else the
    course's H200 measurement (:data:`helpers.thresholds.PINNED_COPY_GB_PER_S`)."""
    c = m.copy_stats(m.stepped(trace))
    pinned = c[c["copy_kind"].isin(("H2D", "D2H")) & (c["host_memory"] == "pinned")] if len(c) else c
    if len(pinned) and float(pinned["time_us"].sum()) > 0:
        return float(pinned["bytes"].sum() / (pinned["time_us"].sum() * 1e3))
    return th.PINNED_COPY_GB_PER_S


def lowp_gemm_speedup(trace: Trace) -> tuple[float, str]:
    """How many times faster a matrix product runs in the device's low precision (bf16 where native, else fp16)
    than on its fp32 FFMA pipes, and the device the figure is for: the course's profile whose name the trace's
    device carries (data/device_profiles.json), else the H200's, recorded here."""
    from .capability import reference_profiles

    profiles = reference_profiles()
    names = " ".join(str(n) for n in (trace.metadata.get("device_names") or []) if n).lower()
    chosen = next((p for k, p in profiles.items() if k in names), profiles["h200"])
    gain = chosen.gemm_gain(chosen.lowp)
    return (gain if gain == gain and gain > 1 else th.LOWP_GEMM_SPEEDUP), chosen.name


def _op_scale(trace: Trace, g: _Graph, rates: tuple[tuple[str, str], ...]) -> np.ndarray | None:
    """Per-op duration factors for ``rates``: ``(group, "pinned")`` runs host copies at pinned bandwidth,
    ``(group, "low_precision")`` matrix products at the device's low-precision rate."""
    if not rates:
        return None
    scale = np.ones(g.g_start.size)
    for group, rate in rates:
        sel = _group(g, group)
        if not sel.any():
            continue
        if rate == "pinned":
            b = g.g_bytes[sel]
            dur = np.maximum(g.g_end[sel] - g.g_start[sel], 1e-9)
            own = np.where(b > 0, b / (dur * 1e3), np.nan)  # each copy's GB/s
            scale[sel] = np.where(np.isfinite(own), np.minimum(own / pinned_gb_per_s(trace), 1.0), 1.0)
        elif rate == "low_precision":
            scale[sel] = 1.0 / lowp_gemm_speedup(trace)[0]
        else:
            raise ArgumentError(f"unknown rate {rate!r}: pinned or low_precision")
    return scale


def fix_step_ms(trace: Trace, factors: dict[str, float] | tuple = (), overlapped: tuple[str, ...] = (),
                rates: tuple[tuple[str, str], ...] = ()) -> float:
    """The predicted mean step (ms) when a fix is applied: causes scaled (``factors``), causes or op groups moved
    off the path (``overlapped``), op groups at another rate (``rates``). :func:`what_if` with op groups."""
    try:
        factors = dict(factors)
    except (TypeError, ValueError):
        raise ArgumentError(f"fix_step_ms(): factors={factors!r:.60}: give a dict of cause -> factor") from None
    means = _fixed_means(trace, _fix_key(_factors(factors), tuple(overlapped), tuple(rates)))
    return max(means) / 1e3 if means else float("nan")


@checked
def what_if(trace: Trace, factors: dict[str, float], overlapped: tuple[str, ...] | list[str] = ()) -> float:
    """The predicted mean step (ms) of ``trace`` when each named cause's time is scaled by its factor (0 removes
    it; causes: :data:`helpers.patterns.PATH_CAUSES`), the graph replayed with everything else as measured.
    ``what_if(trace, {})`` is the measured step (:func:`critical_path`'s ``step_ms``).

    ``sync`` is the host's waits for the GPU: a factor below 1 keeps that share of them (evenly spread; 0: every
    sync made asynchronous), above 1 makes each wait that much longer. ``overlapped`` names causes whose work is
    moved off the path: it runs beside the rest (on a stream, or for host work a thread, of its own) and nothing
    waits for it, as copies prefetched on a side stream or a collective overlapped with the backward pass."""
    for c in overlapped:
        if c not in _C:
            raise ArgumentError(f"unknown cause {c!r}; the causes are {', '.join(PATH_CAUSES)}")
    return _predicted_step_ms(trace, _factors(factors), overlapped=tuple(overlapped))



# --- across ranks ----------------------------------------------------------------------------------------
def rank_steps(trace: Trace, rank: int) -> list[dict[str, Any]]:
    """One rank's steps as the job's path needs them (small, picklable: what ``helpers.jobs`` hands back per rank):
    each step's ``step``, ``ms``, milliseconds by cause on the rank's path (``by_cause``), and its collectives in
    order, each ``(name, ms, exposed_ms)``: its time, and the part of it no compute on the rank runs beside."""
    cp = critical_path(trace)
    steps = cp.steps[cp.steps["rank"] == rank]
    if steps.empty:
        return []
    stepped = _stepped(trace)
    on = m.rank_events(stepped, rank)  # the rank's rows, filtered once per trace (not a copy of the table per rank)
    coll = on[on["kind"] == "collective"].sort_values("start_us", kind="stable")
    if len(coll):
        gpu = on["device"].to_numpy() >= 0
        if (coll["device"].to_numpy() >= 0).any():
            comp = on[gpu & kind_in(on, ("kernel",))]
            cs, ce = m.merge_intervals(comp["start_us"].to_numpy(), comp["end_us"].to_numpy())
        else:
            cs, ce = m.host_union(stepped, rank, "host_compute")
        cov = m.overlap(cs, ce, coll["start_us"].to_numpy(), coll["end_us"].to_numpy()) if len(cs) else np.zeros(len(coll))
        exposed = coll["dur_us"].to_numpy() - cov
    out = []
    # the steps' columns as arrays (a row at a time through pandas cost more than the rest of this function)
    number, dur, start, end = (steps[c].to_numpy() for c in ("step", "dur_us", "start_us", "end_us"))
    by = [(c, steps[f"{c}_ms"].to_numpy()) for c in PATH_CAUSES]
    if len(coll):
        c_start, c_name, c_dur = coll["start_us"].to_numpy(), coll["name"].to_numpy(), coll["dur_us"].to_numpy()
    for k in range(len(number)):
        row: dict[str, Any] = {"step": int(number[k]), "ms": float(dur[k]) / 1e3,
                               "by_cause": {c: float(v[k]) for c, v in by if v[k] > 0}}
        if len(coll):
            inside = (c_start >= start[k]) & (c_start < end[k])
            row["collectives"] = [(str(n)[:80], float(d) / 1e3, float(x) / 1e3) for n, d, x in
                                  zip(c_name[inside], c_dur[inside], exposed[inside])]
        else:
            row["collectives"] = []
        out.append(row)
    return out


@dataclass
class JobPath:
    """Which rank, and which of its work, bound each step of a job of several ranks, and what the job saves if a
    straggler ran like the median rank or a collective were overlapped.

    A rank's own work in a step is its step less its collectives' waits for the other ranks (a collective's time
    beyond the same collective's shortest time across the ranks); the rank with the most own work bounds the step
    (every other rank waits for it in the next collective). ``steps``: per step, ``step, job_ms, rank, cause`` (the
    cause that held most of that rank's path), ``own_ms`` and the median rank's ``median_own_ms``. ``bounds``: the
    straggler (``kind`` ``straggler``: the rank that bounds the most steps, what the job saves a step if its own work
    were the next slowest rank's) and each collective by position in the step (``kind`` ``collective``: its time on
    every rank, what overlapping it with compute saves a step), costliest first.
    """

    steps: pd.DataFrame
    bounds: list[dict[str, Any]]
    step_ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"step_ms": self.step_ms, "steps": self.steps.to_dict("records"), "bounds": list(self.bounds)}


def job_path(ranks: dict[int, list[dict[str, Any]]]) -> JobPath | None:
    """The job's path from each rank's :func:`rank_steps` (None with fewer than two ranks that have steps)."""
    ranks = {r: s for r, s in ranks.items() if s}
    if len(ranks) < 2:
        return None
    by_step: dict[int, dict[int, dict[str, Any]]] = {}
    for r, steps in ranks.items():
        for s in steps:
            by_step.setdefault(s["step"], {})[r] = s
    rows, straggler_saving, coll_saving, coll_name = [], {}, {}, {}
    for step, per in sorted(by_step.items()):
        if len(per) < 2:
            continue
        n_coll = min(len(s["collectives"]) for s in per.values())
        shortest = [min(s["collectives"][i][1] for s in per.values()) for i in range(n_coll)]
        own = {r: s["ms"] - sum(s["collectives"][i][1] - shortest[i] for i in range(n_coll)) for r, s in per.items()}
        bound = max(own, key=own.get)
        others = sorted((v for r, v in own.items() if r != bound), reverse=True)
        cause = max(per[bound]["by_cause"].items(), key=lambda kv: kv[1])[0] if per[bound]["by_cause"] else ""
        job_ms = max(s["ms"] for s in per.values())
        rows.append((step, job_ms, bound, cause, own[bound], float(np.median(list(own.values())))))
        straggler_saving.setdefault(bound, []).append(own[bound] - others[0])
        for i in range(n_coll):  # a collective's transfer the bounding rank could not hide: overlapping it saves that
            exposed = per[bound]["collectives"][i][2]
            coll_saving.setdefault(i, []).append(min(shortest[i], max(exposed, 0.0)))
            coll_name[i] = per[bound]["collectives"][i][0]
    if not rows:
        return None
    steps = pd.DataFrame(rows, columns=["step", "job_ms", "rank", "cause", "own_ms", "median_own_ms"])
    n = len(steps)
    bounds: list[dict[str, Any]] = []
    job_ms = float(steps["job_ms"].mean())
    floor = th.GAIN_FLOOR_SHARE * job_ms  # savings under the noise floor are no bound worth naming
    if straggler_saving:
        r = max(straggler_saving, key=lambda k: len(straggler_saving[k]))
        saving = float(sum(straggler_saving[r]) / n)
        if 2 * len(straggler_saving[r]) >= n and saving >= floor:  # one rank bounds most steps, by more than noise
            bounds.append({"kind": "straggler", "rank": int(r), "steps_bound": len(straggler_saving[r]),
                           "saving_ms": saving, "cause": str(steps[steps["rank"] == r]["cause"].mode().iat[0])})
    for i, v in coll_saving.items():
        if float(np.mean(v)) >= floor:
            bounds.append({"kind": "collective", "index": int(i), "name": coll_name[i], "saving_ms": float(np.mean(v))})
    bounds.sort(key=lambda b: -b["saving_ms"])
    return JobPath(steps, bounds, job_ms)


__all__ = ["COMPILE_RANGE", "OP_GROUPS", "CriticalPath", "JobPath", "critical_path", "fix_step_ms", "job_path",
           "lowp_gemm_speedup", "pinned_gb_per_s", "rank_steps", "what_if"]

from .arguments import check_namespace as _check_namespace  # noqa: E402

_check_namespace(globals(), __all__)  # the public functions hold their arguments to their type hints
