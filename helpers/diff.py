"""A diff that matches work: the operators and kernels of two traces, matched through the call tree.

Each trace's host operators and ranges form a tree (:func:`helpers.overview.call_tree`); every kernel, copy and
memset hangs under the operator whose launch call queued it. A node is named by its *path*, the operator keys
from the outermost one down (``forward > aten::linear > aten::addmm``), and a GPU event by its operator's path and
its own name. Nodes are matched on their paths: a kernel whose name changed with a library version shows as one
kernel removed and one added under the same operator, whose own time says what the change did. GPU work that no
recorded operator launched hangs under its launch call (``[cudaGraphLaunch]``) or under ``[launch not recorded]`` (work queued before the capture began).

For each node and each trace: calls, host time (the operator's own span, inclusive) and GPU time (the work
launched inside it), as milliseconds a step, with a noise band from the steps' own spread (as
:func:`helpers.metrics.step_time_band`). :func:`work_diff` returns the table, :func:`what_changed` the nodes
that changed most (each followed down while one child explains most of its change), :func:`verdict` the
sentence. Numbers only: :mod:`helpers.render` words them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import metrics as m
from . import thresholds as th
from .metrics.report import slack_ms
from .model import Trace
from .overview import call_tree

SEP = " > "
#: GPU work whose launch call the trace does not hold (queued before the capture began).
UNRECORDED = "[launch not recorded]"
#: A change smaller than this share of the before step time is not worth naming, beyond noise or not.
MATERIAL_SHARE = 0.01
#: A node is followed down to its child while the child carries at least this share of its change.
DESCEND_SHARE = 0.8


def _spread(x: np.ndarray) -> float:
    return float(1.4826 * np.median(np.abs(x - np.median(x)))) if len(x) else 0.0


def _per_step(trace: Trace) -> tuple[pd.DataFrame, int, dict[str, str]]:
    """Host and GPU microseconds per (path, step) of one trace (a rank's average on a trace of several), its
    steps, and each path's kind."""
    trace = m.stepped(trace)
    tree = call_tree(trace)
    ops, gpu = tree["ops"], tree["gpu"]
    win = m.windows(trace)
    steps = sorted(set(win.loc[win["step"] >= 0, "step"].tolist())) or [-1]
    ev_kind = trace.events["kind"].to_numpy()
    kinds: dict[str, str] = {}
    ops = ops[ops["step"].isin(steps) & ~ops["repeat"]]
    for path, row in zip(ops["path"].tolist(), ops["row"].tolist()):
        kinds.setdefault(path, "range" if ev_kind[row] == "annotation" else "op")
    host = ops.groupby(["path", "step"])["dur_us"].sum().rename("host_us")
    calls = ops.groupby(["path", "step"]).size().rename("calls")
    # GPU work: under its op's path, or a pseudo-op named by its launch call
    path_of_op = dict(zip(tree["ops"]["row"].tolist(), tree["ops"]["path"].tolist()))
    names = trace.events["name"].to_numpy(dtype=object)
    g = gpu[gpu["step"].isin(steps)]
    parent = [path_of_op.get(o) if o >= 0 else (f"[{names[c]}]" if c >= 0 else UNRECORDED)
              for o, c in zip(g["op"].tolist(), g["call"].tolist())]
    for p in set(parent):
        if p.startswith("["):
            kinds.setdefault(p, "launch")
    leaf = [f"{p}{SEP}{n}" for p, n in zip(parent, g["name"].tolist())]
    for lf, k in zip(leaf, g["kind"].tolist()):
        kinds.setdefault(lf, k)
    g = g.assign(parent=parent, leaf=leaf)
    leaf_gpu = g.groupby(["leaf", "step"])["dur_us"].sum()
    leaf_calls = g.groupby(["leaf", "step"]).size()
    # the GPU time of a path: every GPU event below it
    by_parent = g.groupby(["parent", "step"])["dur_us"].sum()
    up: dict[tuple[str, int], float] = {}
    for (p, step), us in by_parent.items():
        parts = p.split(SEP)
        for k in range(1, len(parts) + 1):
            key = (SEP.join(parts[:k]), step)
            up[key] = up.get(key, 0.0) + float(us)
    gpu_us = pd.Series(up, dtype=float)
    gpu_us.index = pd.MultiIndex.from_tuples(gpu_us.index, names=["path", "step"]) if len(gpu_us) else pd.MultiIndex.from_tuples([], names=["path", "step"])
    leaf_gpu.index.names = leaf_calls.index.names = ["path", "step"]
    df = pd.concat([host, calls, gpu_us.rename("gpu_us")], axis=1)
    leaves = pd.concat([leaf_calls.rename("calls"), leaf_gpu.rename("gpu_us")], axis=1)
    df = pd.concat([df, leaves]).groupby(level=[0, 1]).sum(min_count=1).fillna(0.0)
    # every path has a row for every step (an op absent from a step took 0 there)
    full = pd.MultiIndex.from_product([df.index.get_level_values(0).unique(), steps], names=["path", "step"])
    df = df.reindex(full, fill_value=0.0)
    return df / max(len(trace.ranks), 1), len(steps), kinds  # a rank's, on a trace of several


@dataclass
class WorkDiff:
    """Two traces' work matched through the call tree (see the module's docstring).

    ``table``: one row per path: ``path, name, depth, kind, status`` (``changed``, ``within noise``, ``same``,
    ``added``, ``removed``), and for ``host`` and ``gpu``: ``<x>_before_ms, <x>_after_ms, <x>_delta_ms,
    <x>_band_ms`` (milliseconds a step), plus ``calls_before, calls_after`` (a step). ``step``: the step-time
    band and verdict (:func:`helpers.metrics.step_time_band`, :func:`helpers.metrics.timing_verdict`), ``slack_ms``
    (:func:`helpers.metrics.slack_ms`) and ``judged`` (:func:`helpers.metrics.judge_step`: the machine's pace).
    """

    table: pd.DataFrame
    step: dict[str, Any]
    steps: tuple[int, int]
    changes: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "steps": list(self.steps), "changes": self.changes,
                "table": self.table.to_dict("records")}


def work_diff(before: Trace, after: Trace) -> WorkDiff:
    """Match the operators and GPU work of ``before`` and ``after`` through their call trees (module docstring)."""
    b, nb, kb = _per_step(before)
    a, na, ka = _per_step(after)
    paths = sorted(set(b.index.get_level_values(0)) | set(a.index.get_level_values(0)))
    rows = []
    band = m.step_time_band(m.stepped(before), m.stepped(after))
    floor_ms = MATERIAL_SHARE * (band["before_ms"] if np.isfinite(band["before_ms"]) else 0.0)
    bg = {p: g for p, g in b.groupby(level=0)}
    ag = {p: g for p, g in a.groupby(level=0)}
    for path in paths:
        row: dict[str, Any] = {"path": path, "name": path.split(SEP)[-1], "depth": path.count(SEP),
                               "kind": kb.get(path) or ka.get(path) or "op"}
        xb, xa = bg.get(path), ag.get(path)
        for col, key in (("host_us", "host"), ("gpu_us", "gpu")):
            vb = xb[col].to_numpy(float) / 1e3 if xb is not None else np.zeros(0)
            va = xa[col].to_numpy(float) / 1e3 if xa is not None else np.zeros(0)
            mb, ma = (float(vb.mean()) if vb.size else 0.0), (float(va.mean()) if va.size else 0.0)
            se = np.hypot(1.2533 * _spread(vb) / np.sqrt(max(vb.size, 1)), 1.2533 * _spread(va) / np.sqrt(max(va.size, 1)))
            row[f"{key}_before_ms"], row[f"{key}_after_ms"] = mb, ma
            row[f"{key}_delta_ms"] = ma - mb
            row[f"{key}_band_ms"] = float(th.NOISE_BAND_SE * se) if min(vb.size, va.size) >= th.NOISE_MIN_STEPS else float("nan")
        row["calls_before"] = float(xb["calls"].mean()) if xb is not None else 0.0
        row["calls_after"] = float(xa["calls"].mean()) if xa is not None else 0.0
        present_b = xb is not None and (xb["calls"].sum() > 0 or xb["gpu_us"].sum() > 0)
        present_a = xa is not None and (xa["calls"].sum() > 0 or xa["gpu_us"].sum() > 0)
        if present_b and not present_a:
            status = "removed"
        elif present_a and not present_b:
            status = "added"
        else:
            beyond = any(abs(row[f"{k}_delta_ms"]) > (row[f"{k}_band_ms"] if np.isfinite(row[f"{k}_band_ms"]) else 0.0)
                         and abs(row[f"{k}_delta_ms"]) >= max(floor_ms, 1e-3) for k in ("host", "gpu"))
            material = any(abs(row[f"{k}_delta_ms"]) >= max(floor_ms, 1e-3) for k in ("host", "gpu"))
            status = "changed" if beyond else "within noise" if material else "same"
        row["status"] = status
        rows.append(row)
    table = pd.DataFrame(rows)
    if not table.empty:
        table["size_ms"] = np.maximum(table["host_delta_ms"].abs(), table["gpu_delta_ms"].abs())
    step = dict(band)
    step["verdict"] = m.timing_verdict(m.stepped(before), m.stepped(after))
    # the slack and the machine's pace the fix checks judge a step by (one source: metrics.pace.judge_step)
    step["slack_ms"] = slack_ms(band["band_ms"], band["before_ms"])  # NaN band: the no-band share
    step["judged"] = m.judge_step(m.stepped(before), m.stepped(after))
    out = WorkDiff(table, step, (nb, na))
    out.changes = what_changed(out)
    return out


def _measure(row: pd.Series) -> str:
    """host or gpu: whichever moved more for this node."""
    return "gpu" if abs(row["gpu_delta_ms"]) > abs(row["host_delta_ms"]) else "host"


def what_changed(diff: WorkDiff, limit: int = 6) -> list[dict[str, Any]]:
    """The nodes whose time changed most, largest first: each top-level node with a material change (beyond its
    noise band, or added, or removed), followed down while one child carries most of its change; a node below an
    already named one is not named again. Each: ``path, name, kind, status, measure`` (host or gpu) and its
    before, after, delta and band (ms a step), ``kernels_before`` / ``kernels_after`` (GPU work right under it)."""
    t = diff.table
    if t.empty:
        return []
    floor_ms = MATERIAL_SHARE * (diff.step["before_ms"] if np.isfinite(diff.step["before_ms"]) else 0.0)
    by_path = t.set_index("path")
    children: dict[str, list[str]] = {}
    for p in t["path"].tolist():
        if SEP in p:
            children.setdefault(p.rsplit(SEP, 1)[0], []).append(p)
    named: list[dict[str, Any]] = []
    ranked = t[(t["status"].isin(("changed", "added", "removed"))) & (t["size_ms"] >= max(floor_ms, 1e-3))
               & t["kind"].isin(("op", "range", "launch"))  # GPU work is named under its operator
               & (t["path"] != UNRECORDED)]  # work queued before the capture: how far ahead the host ran, not work
    ranked = ranked.sort_values(["size_ms", "depth"], ascending=[False, True], kind="stable")
    taken: list[str] = []
    for path in ranked["path"].tolist():
        if any(path == p or path.startswith(p + SEP) or p.startswith(path + SEP) for p in taken):
            continue
        node = path
        while True:  # down to the child that explains the change
            row = by_path.loc[node]
            key = _measure(row)
            kids = [c for c in children.get(node, []) if by_path.loc[c, "kind"] in ("op", "range", "launch")]
            if not kids:
                break
            best = max(kids, key=lambda c: abs(by_path.loc[c, f"{key}_delta_ms"]))
            if abs(by_path.loc[best, f"{key}_delta_ms"]) < DESCEND_SHARE * abs(row[f"{key}_delta_ms"]):
                break
            node = best
        row = by_path.loc[node]
        key = _measure(row)
        leaves = [c for c in children.get(node, []) if by_path.loc[c, "kind"] not in ("op", "range", "launch")]
        kern_b = sorted(((by_path.loc[c, "name"], by_path.loc[c, "gpu_before_ms"]) for c in leaves
                         if by_path.loc[c, "gpu_before_ms"] > 0), key=lambda x: -x[1])[:3]
        kern_a = sorted(((by_path.loc[c, "name"], by_path.loc[c, "gpu_after_ms"]) for c in leaves
                         if by_path.loc[c, "gpu_after_ms"] > 0), key=lambda x: -x[1])[:3]
        named.append({"path": node, "top": path, "name": row["name"], "kind": row["kind"], "status": row["status"],
                      "measure": key, "before_ms": float(row[f"{key}_before_ms"]), "after_ms": float(row[f"{key}_after_ms"]),
                      "delta_ms": float(row[f"{key}_delta_ms"]), "band_ms": float(row[f"{key}_band_ms"]),
                      "calls_before": float(row["calls_before"]), "calls_after": float(row["calls_after"]),
                      "kernels_before": kern_b, "kernels_after": kern_a})
        taken.append(path)
        if len(named) >= limit:
            break
    return named


__all__ = ["SEP", "WorkDiff", "what_changed", "work_diff"]
