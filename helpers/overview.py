"""What a step is made of, as tables: the step split into TensorBoard's categories, the call tree that ties each
kernel to the operator that launched it, and the operator and kernel tables built on it.

Numbers only (no words, no drawing): :mod:`helpers.report` renders them, :mod:`helpers.diff` compares them.
Every figure is taken over the trace's steps (:func:`helpers.metrics.stepped`): events whose ``step`` is set.

* :func:`step_categories`: each (rank, step)'s time split the way PyTorch's TensorBoard profiler plugin splits
  its step-time overview: at each instant the first of kernel, memcpy, memset, communication, runtime,
  DataLoader, CPU that is running claims it, and what none claims is "other". The categories add up to the
  step's time.
* :func:`call_tree`: for every host operator or range, its parent (the innermost op or range that holds it on
  the same thread); for every GPU event, the launch call its correlation id names and the innermost op around
  that call. TraceLens and Holistic Trace Analysis match work between traces this way; names of kernels change
  with library versions, the operator that launched them does not.
* :func:`op_table`, :func:`kernel_table`: per name, calls and milliseconds a step, host time (inclusive and
  self) and the GPU time of the kernels launched inside.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from . import metrics as m
from .model import Trace

#: TensorBoard's step-time categories, in the order each claims an instant before the next.
CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu", "other")
CATEGORY_WORDS = {"kernel": "kernel", "memcpy": "memcpy", "memset": "memset", "communication": "communication",
                  "runtime": "CUDA runtime", "dataloader": "DataLoader", "cpu": "CPU (ops)", "other": "other"}
#: Ranges that mark steps: not operators (every op is inside one).
_STEP_RANGE = re.compile(r"^ProfilerStep#\d+$")
#: The part of a record_function name after '#' names the instance (``Optimizer.step#Adam.step``,
#: ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``): the part before it is the operator.
_INSTANCE = re.compile(r"#.*$")


def op_key(name: str) -> str:
    """The name an operator is matched by across traces: a record_function name without its ``#instance``."""
    key = _INSTANCE.sub("", name)
    return key or name


def steps_of(trace: Trace) -> int:
    """How many (rank, step) windows the tables are divided by: each rank's steps, summed over ranks."""
    win = m.windows(trace)
    return max(int((win["step"] >= 0).sum()), 1) if (win["step"] >= 0).any() else max(len(win), 1)


def step_categories(trace: Trace) -> pd.DataFrame:
    """One row per (rank, step): ``rank, step, step_us`` and ``<category>_us`` for each of :data:`CATEGORIES`,
    adding up to ``step_us`` (TensorBoard's step-time overview, see the module's docstring)."""
    trace = m.stepped(trace)
    win = m.windows(trace)
    ev = trace.events
    rows = []
    kind = ev["kind"].to_numpy()
    on_gpu = ev["device"].to_numpy() >= 0
    masks = {"kernel": (kind == "kernel") & on_gpu, "memcpy": kind == "memcpy", "memset": kind == "memset",
             "communication": kind == "collective", "runtime": (kind == "runtime") & ~on_gpu,
             "cpu": (kind == "cpu_op") & ~on_gpu}
    start, end, rank_col = ev["start_us"].to_numpy(), ev["end_us"].to_numpy(), ev["rank"].to_numpy()
    for rank in sorted(set(win["rank"].tolist())):
        w = win[win["rank"] == rank]
        ws, we = w["start_us"].to_numpy(float), w["end_us"].to_numpy(float)
        covered = (np.zeros(0), np.zeros(0))
        got = {}
        for cat in CATEGORIES[:-1]:
            if cat == "dataloader":
                us, ue = m.host_union(trace, rank, "data_wait")
            else:
                sel = masks[cat] & (rank_col == rank)
                us, ue = m.merge_intervals(start[sel], end[sel])
            if covered[0].size and us.size:
                us, ue = _minus(np.asarray(us, float), np.asarray(ue, float), *covered)
            us, ue = np.asarray(us, float), np.asarray(ue, float)
            got[cat] = m.overlap(us, ue, ws, we) if us.size else np.zeros(ws.size)
            covered = m.merge_intervals(np.r_[covered[0], us], np.r_[covered[1], ue])
        for i, (step, s, e) in enumerate(zip(w["step"].tolist(), ws, we)):
            row = {"rank": int(rank), "step": int(step), "step_us": float(e - s)}
            row.update({f"{c}_us": float(got[c][i]) for c in CATEGORIES[:-1]})
            row["other_us"] = max(row["step_us"] - sum(row[f"{c}_us"] for c in CATEGORIES[:-1]), 0.0)
            rows.append(row)
    cols = ["rank", "step", "step_us", *(f"{c}_us" for c in CATEGORIES)]
    return pd.DataFrame(rows, columns=cols)


def _minus(as_: np.ndarray, ae: np.ndarray, bs: np.ndarray, be: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union ``(as_, ae)`` less the union ``(bs, be)`` (each sorted and disjoint), by one vectorised sweep."""
    pts = np.concatenate([as_, ae, bs, be])
    da = np.concatenate([np.ones(as_.size), -np.ones(ae.size), np.zeros(bs.size + be.size)])
    db = np.concatenate([np.zeros(as_.size + ae.size), np.ones(bs.size), -np.ones(be.size)])
    ends_first = np.concatenate([np.ones(as_.size), np.zeros(ae.size), np.ones(bs.size), np.zeros(be.size)])
    order = np.lexsort((ends_first, pts))  # at a tie, ends before starts: touching intervals do not overlap
    p, ca, cb = pts[order], np.cumsum(da[order]), np.cumsum(db[order])
    inside = (ca[:-1] > 0) & (cb[:-1] <= 0) & (p[1:] > p[:-1])
    return m.merge_intervals(p[:-1][inside], p[1:][inside])


def _nest(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Parent position of each interval (sorted by start, longest first) in the nesting on one thread (-1: none)."""
    parent = np.full(start.size, -1, dtype=np.int64)
    stack: list[int] = []
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist())):
        while stack and end[stack[-1]] <= s:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        if e > s or not stack or end[stack[-1]] > s:
            stack.append(i)
    return parent


def call_tree(trace: Trace) -> dict[str, pd.DataFrame]:
    """The host operators and ranges of ``trace`` as a tree, and the GPU work hung on it (see the module's docstring).

    ``ops``: one row per host operator or range (step ranges left out): ``row`` (into ``trace.events``), ``rank,
    tid, name, key`` (:func:`op_key`), ``step, start_us, end_us, dur_us, self_us`` (less its children), ``parent,
    top`` (rows; -1 for none), ``depth``, ``path`` (keys from the top op down, joined by `` > ``; an op inside one
    of the same key is the same node, ``repeat``).
    ``gpu``: one row per GPU event (kernel, copy, memset, collective): ``row, rank, name, kind, step, dur_us,
    call`` (the launch call's row, -1 when none is recorded), ``op`` (the innermost op around the call, -1 when
    none), ``top``. Cached with the trace.
    """
    memo = m._memo(trace)
    if "call_tree" in memo:
        return memo["call_tree"]
    ev = trace.events
    kind = ev["kind"].to_numpy()
    names = ev["name"].to_numpy(dtype=object)
    on_gpu = ev["device"].to_numpy() >= 0
    host = ~on_gpu & ((kind == "cpu_op") | (kind == "annotation"))
    host &= ~np.array([bool(_STEP_RANGE.match(str(n))) for n in names], dtype=bool) if host.any() else host
    rows = np.flatnonzero(host)
    start, end = ev["start_us"].to_numpy(), ev["end_us"].to_numpy()
    rank, tid, step = ev["rank"].to_numpy(), ev["tid"].to_numpy(), ev["step"].to_numpy()
    thread_of = rank.astype(np.int64) * (2**32) + (tid.astype(np.int64) % (2**32))  # one key per (rank, thread)
    parent = np.full(rows.size, -1, dtype=np.int64)
    rows = rows[np.lexsort((-(end[rows] - start[rows]), start[rows], thread_of[rows]))]
    thread = thread_of[rows]
    cuts = np.flatnonzero(np.r_[True, thread[1:] != thread[:-1]]).tolist() + [rows.size]
    for a, b in zip(cuts[:-1], cuts[1:]):
        p = _nest(start[rows[a:b]], end[rows[a:b]])
        parent[a:b] = np.where(p >= 0, p + a, -1)
    depth = np.zeros(rows.size, dtype=np.int64)
    top = np.arange(rows.size)
    for i in range(rows.size):  # parents come before their children
        if parent[i] >= 0:
            depth[i] = depth[parent[i]] + 1
            top[i] = top[parent[i]]
    keys = np.array([op_key(str(n)) for n in names[rows]], dtype=object)
    paths = np.empty(rows.size, dtype=object)
    repeat = np.zeros(rows.size, dtype=bool)  # an op inside one of the same key (autocast's re-dispatch): one node
    for i in range(rows.size):
        if parent[i] < 0:
            paths[i] = keys[i]
        elif keys[i] == keys[parent[i]]:
            paths[i], repeat[i] = paths[parent[i]], True
        else:
            paths[i] = f"{paths[parent[i]]} > {keys[i]}"
    dur = end[rows] - start[rows]
    child = np.bincount(parent[parent >= 0], weights=dur[parent >= 0], minlength=rows.size) if rows.size else np.zeros(0)
    ops = pd.DataFrame({"row": rows, "rank": rank[rows], "tid": tid[rows], "name": names[rows], "key": keys,
                        "step": step[rows], "start_us": start[rows], "end_us": end[rows], "dur_us": dur,
                        "self_us": np.maximum(dur - child, 0.0), "parent": np.where(parent >= 0, rows[np.clip(parent, 0, None)], -1),
                        "top": rows[top] if rows.size else np.zeros(0, dtype=np.int64), "depth": depth, "path": paths,
                        "repeat": repeat})
    # GPU work -> its launch call (correlation, same rank) -> the innermost op around the call
    gpu_rows = np.flatnonzero(on_gpu & np.isin(kind, ("kernel", "memcpy", "memset", "collective")))
    corr = ev["correlation"].to_numpy()
    calls = np.flatnonzero((kind == "runtime") & ~on_gpu & (corr >= 0))
    call_of = np.full(gpu_rows.size, -1, dtype=np.int64)
    if calls.size and gpu_rows.size:
        ck = rank[calls].astype(np.int64) * (2**40) + corr[calls]
        o = np.argsort(ck, kind="stable")
        ck, calls_sorted = ck[o], calls[o]
        gk = rank[gpu_rows].astype(np.int64) * (2**40) + corr[gpu_rows]
        j = np.searchsorted(ck, gk, side="right") - 1  # the last call of that id (an id can repeat)
        ok = (j >= 0) & (corr[gpu_rows] >= 0)
        ok &= ck[np.clip(j, 0, None)] == gk
        call_of = np.where(ok, calls_sorted[np.clip(j, 0, None)], -1)
    op_of = np.full(gpu_rows.size, -1, dtype=np.int64)
    has = np.flatnonzero(call_of >= 0)
    if has.size and rows.size:
        t = start[call_of[has]]
        th = thread_of[call_of[has]]
        cand = np.full(has.size, -1, dtype=np.int64)
        starts_sorted = start[rows]
        lo_all, hi_all = np.searchsorted(thread, th, side="left"), np.searchsorted(thread, th, side="right")
        for key in np.unique(th).tolist():  # per thread: the last op starting at or before the call
            sel = np.flatnonzero(th == key)
            lo, hi = int(lo_all[sel[0]]), int(hi_all[sel[0]])
            if lo < hi:
                k = lo + np.searchsorted(starts_sorted[lo:hi], t[sel], side="right") - 1
                cand[sel] = np.where(k >= lo, k, -1)
        for _ in range(int(depth.max()) + 2 if depth.size else 1):  # then up its parents to one still running
            bad = (cand >= 0) & (end[rows[np.clip(cand, 0, None)]] < t)
            if not bad.any():
                break
            cand = np.where(bad, parent[np.clip(cand, 0, None)], cand)
        op_of[has] = np.where(cand >= 0, rows[np.clip(cand, 0, None)], -1)
    top_of_row = dict(zip(ops["row"].tolist(), ops["top"].tolist()))
    gpu = pd.DataFrame({"row": gpu_rows, "rank": rank[gpu_rows], "name": names[gpu_rows], "kind": kind[gpu_rows].astype(str),
                        "step": step[gpu_rows], "dur_us": end[gpu_rows] - start[gpu_rows], "call": call_of, "op": op_of,
                        "top": [top_of_row.get(o, -1) for o in op_of.tolist()]})
    memo["call_tree"] = {"ops": ops, "gpu": gpu}
    return memo["call_tree"]


def _gpu_time_by_op(tree: dict[str, pd.DataFrame]) -> tuple[pd.Series, pd.Series, pd.Series]:
    """GPU microseconds and kernels per op row: launched by the op itself (self), and inside it (inclusive)."""
    ops, gpu = tree["ops"], tree["gpu"]
    g = gpu[(gpu["op"] >= 0) & (gpu["step"] >= 0)]
    own = g.groupby("op")["dur_us"].sum()
    count = g.groupby("op").size()
    rows = ops["row"].to_numpy()
    pos = pd.Series(np.arange(rows.size), index=rows)
    parent = pos.reindex(ops["parent"].to_numpy()).to_numpy()  # NaN: no parent
    total = np.zeros(rows.size)
    n_total = np.zeros(rows.size)
    total[pos.loc[own.index].to_numpy()] = own.to_numpy()
    n_total[pos.loc[count.index].to_numpy()] = count.to_numpy()
    # a parent sorts before its children (same thread, earlier or equal start, longer): add up from the back
    has = np.flatnonzero(~np.isnan(parent))
    par = parent[has].astype(np.int64)
    for i, p in zip(has[::-1].tolist(), par[::-1].tolist()):
        total[p] += total[i]
        n_total[p] += n_total[i]
    return own, pd.Series(total, index=rows), pd.Series(n_total, index=rows)


def op_table(trace: Trace, shapes: dict[str, list[tuple[str, int]]] | None = None) -> pd.DataFrame:
    """Operators (and user ranges) by name, each figure a step's: ``name, calls, host_ms`` (inclusive),
    ``self_ms``, ``gpu_ms`` (kernels launched inside it), ``gpu_self_ms`` (launched by it directly),
    ``kernels``; sorted by GPU then host time. ``shapes``: the input shapes recorded per name (most frequent
    first), joined into a ``shapes`` column. An op nested in an op of the same name counts once."""
    trace = m.stepped(trace)
    tree = call_tree(trace)
    all_ops = tree["ops"]
    n = steps_of(trace)
    own, total, n_kernels = _gpu_time_by_op(tree)
    codes = pd.factorize(all_ops["name"].to_numpy(dtype=object))[0]
    pos = pd.Series(np.arange(len(all_ops)), index=all_ops["row"].to_numpy())
    parent_pos = pos.reindex(all_ops["parent"].to_numpy()).to_numpy()
    has_parent = ~np.isnan(parent_pos)
    outer = np.ones(len(all_ops), dtype=bool)  # recursion (an op inside one of its name) counts once
    outer[has_parent] = codes[parent_pos[has_parent].astype(np.int64)] != codes[has_parent]
    in_steps = all_ops["step"].to_numpy() >= 0
    ops = all_ops[in_steps]
    outer = outer[in_steps]
    rows = ops["row"].to_numpy()
    kind = np.where(trace.events["kind"].to_numpy()[rows] == "annotation", "range", "op")
    df = pd.DataFrame({"name": ops["name"].to_numpy(dtype=object), "kind": kind,
                       "host": np.where(outer, ops["dur_us"].to_numpy(), 0.0), "self": ops["self_us"].to_numpy(),
                       "gpu": np.where(outer, total.reindex(rows).fillna(0.0).to_numpy(), 0.0),
                       "gpu_self": own.reindex(rows).fillna(0.0).to_numpy(),
                       "kernels": np.where(outer, n_kernels.reindex(rows).fillna(0.0).to_numpy(), 0.0)})
    g = df.groupby(["name", "kind"], sort=False)
    out = pd.DataFrame({"calls": g.size() / n, "host_ms": g["host"].sum() / n / 1e3, "self_ms": g["self"].sum() / n / 1e3,
                        "gpu_ms": g["gpu"].sum() / n / 1e3, "gpu_self_ms": g["gpu_self"].sum() / n / 1e3,
                        "kernels": g["kernels"].sum() / n}).reset_index()
    if shapes:
        out["shapes"] = out["name"].map(lambda k: "; ".join(f"{s} ×{c}" for s, c in shapes.get(k, [])[:3]))
    return out.sort_values(["gpu_ms", "host_ms"], ascending=False, kind="stable").reset_index(drop=True)


def kernel_table(trace: Trace) -> pd.DataFrame:
    """GPU work by name (kernels, copies, memsets, collectives), each figure a step's: ``name, kind, calls, total_ms,
    mean_us, min_us, max_us, share`` (of all GPU work's time), ``op`` (the operator that launched most of them,
    its key; empty when none is recorded)."""
    trace = m.stepped(trace)
    tree = call_tree(trace)
    gpu = tree["gpu"]
    gpu = gpu[gpu["step"] >= 0]
    n = steps_of(trace)
    if gpu.empty:
        return pd.DataFrame(columns=["name", "kind", "calls", "total_ms", "mean_us", "min_us", "max_us", "share", "op"])
    op_name = gpu["op"].map(dict(zip(tree["ops"]["row"], tree["ops"]["key"]))).fillna("")
    g = gpu.assign(op_name=op_name).groupby(["name", "kind"], sort=False)
    out = pd.DataFrame({"calls": g.size() / n, "total_ms": g["dur_us"].sum() / n / 1e3, "mean_us": g["dur_us"].mean(),
                        "min_us": g["dur_us"].min(), "max_us": g["dur_us"].max(),
                        "op": g["op_name"].agg(lambda s: s.value_counts().index[0] if len(s) else "")}).reset_index()
    out["share"] = out["total_ms"] / max(float(out["total_ms"].sum()), 1e-12)
    return out.sort_values("total_ms", ascending=False, kind="stable").reset_index(drop=True)[
        ["name", "kind", "calls", "total_ms", "mean_us", "min_us", "max_us", "share", "op"]]


__all__ = ["CATEGORIES", "CATEGORY_WORDS", "call_tree", "kernel_table", "op_key", "op_table", "step_categories", "steps_of"]
