"""Lab 04: data-parallel training across ranks: the all-reduce and the split of work.

The fix checks judge the learner's own traces (``learner_trace_problem`` refuses the course's
recordings) from what the timeline shows structurally: when each all-reduce starts relative to the
rank's backward compute, how many all-reduces a step, what a compression hook's all-reduces send (tensor
type and bytes, as the trace records them), the rows each rank trains on. Times (exposed communication, step time, compute spread) are reported beside
the verdict; with gloo on one core per rank they move with the machine's load.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from .. import metrics as m
from .. import thresholds as th
from ..diagnosis import diagnose
from ..model import Trace
from ._core import CheckFailed, _check, _close, _record, data_wait_share, learner_trace_problem, run_learner, unit_slip  # noqa: F401
from .provenance import MAX_RUNS

#: The self-check items this lab earns, per track, and the checks of the learner's work each needs.
# The credit this lab's exercises earn is declared in helpers.checks.exercise.EXERCISES.

#: A rank's backward compute: the autograd engine's per-node functions (host side, Kineto traces).
_AUTOGRAD = "autograd::engine::evaluate_function"
_ROWS = re.compile(r"^rows (\d+):(\d+) of (\d+)$")
_CASTS = ("aten::_to_copy",)


# --- what the learner's traces show ----------------------------------------------------------
def _collectives(trace: Trace) -> pd.DataFrame:
    ev = trace.events
    return ev[ev["kind"] == "collective"]


def collectives_per_step(trace: Trace) -> float:
    """All-reduces (collective events) per step on one rank, averaged over ranks and steps."""
    coll = _collectives(trace)
    coll = coll[coll["step"] >= 0]
    steps = len(trace.steps) or 1
    return float(len(coll) / steps)


def _host_start(trace: Trace, coll: pd.DataFrame) -> np.ndarray:
    """When the host started each collective: its own start for gloo ranges, the launch call's for NCCL kernels."""
    start = coll["start_us"].to_numpy(dtype=float).copy()
    on_gpu = (coll["device"] >= 0).to_numpy()
    if on_gpu.any():
        ev = trace.events
        rt = ev[(ev["kind"] == "runtime") & (ev["correlation"] >= 0)]
        launch = dict(zip(zip(rt["rank"], rt["correlation"]), rt["start_us"]))
        for i in np.flatnonzero(on_gpu):
            start[i] = launch.get((int(coll["rank"].iloc[i]), int(coll["correlation"].iloc[i])), start[i])
    return start


def overlap_starts(trace: Trace) -> dict[int, dict[str, float]]:
    """Per rank: all-reduces per step, how many start before that step's backward compute has ended, and
    how long after it ends the first all-reduce starts (ms, mean over steps; 0 when one starts before)."""
    ev = trace.events
    coll = _collectives(trace)
    coll = coll[coll["step"] >= 0]
    starts = _host_start(trace, coll)
    auto = ev[(ev["kind"] == "cpu_op") & ev["name"].str.startswith(_AUTOGRAD) & (ev["step"] >= 0)]
    back_end = auto.groupby(["rank", "step"])["end_us"].max()
    out: dict[int, dict[str, float]] = {}
    for rank in trace.ranks:
        mine = (coll["rank"] == rank).to_numpy()
        steps = sorted(set(trace.steps.loc[trace.steps["rank"] == rank, "step"].astype(int)))
        early, total, lags = 0, 0, []
        for step in steps:
            sel = mine & (coll["step"] == step).to_numpy()
            total += int(sel.sum())
            end = back_end.get((rank, step))
            if end is None or not sel.any():
                continue
            s = starts[sel]
            early += int((s < end).sum())
            lags.append(max(0.0, float(s.min() - end)) / 1e3)
        n = len(steps) or 1
        out[rank] = {"per_step": total / n, "early_per_step": early / n,
                     "lag_ms": float(np.mean(lags)) if lags else float("nan")}
    return out


def _exposed_ms(trace: Trace) -> float:
    cs = m.comm_stats(trace)
    return float(cs["exposed_us"].mean() / 1e3) if not cs.empty else 0.0


def _per_rank(trace: Trace) -> pd.DataFrame:
    cs = m.comm_stats(trace)
    return (cs.groupby("rank")[["window_us", "compute_us", "exposed_us", "collective_us"]].mean() / 1e3) if not cs.empty \
        else pd.DataFrame(columns=["window_us", "compute_us", "exposed_us", "collective_us"])


def _step_ms(trace: Trace) -> float:
    w = m.windows(trace)
    return float(w["dur_us"].mean() / 1e3) if not w.empty else float("nan")


def _ranks_word(n: int) -> str:
    return "both ranks" if n == 2 else f"all {n} ranks" if n > 2 else "the rank"


def _refuse(item: str, name: str, *traces: Trace, trained: tuple[Trace, ...] = (), what: str = "job") -> None:
    """Provenance first (the course's recordings refused), then behaviour: each of ``trained`` (the learner's jobs)
    trained as DDP does (:func:`helpers.checks.behaviour.ddp_training_problem`)."""
    from .behaviour import ddp_training_problem

    problem = learner_trace_problem(*traces)
    for t in trained:
        problem = problem or ddp_training_problem(t, what)
    if problem:
        _record(item, name, False)
        raise CheckFailed(problem[:1].upper() + problem[1:])


# --- the checks --------------------------------------------------------------------------------
def check_comm_diagnosed(trace: Trace) -> str:
    """The diagnosis of a trace names communication (reads a trace; earns no credit on its own)."""
    found = [f.pattern for f in diagnose(trace)]
    return _check("comm", "check_comm_diagnosed", "communication" in found or "load_imbalance" in found,
                  f"Findings: {found}; expected communication. Compare the gloo/NCCL lane with the compute "
                  "lanes: is all-reduce time hidden under backward or sitting alone?")


def check_comm_fixed(before: Trace, after: Trace) -> str:
    """Your DDP job's all-reduce starts while backward still computes, on every rank.

    Judged from ``after``'s timeline: each all-reduce's start (on the host) against the end of that
    step's backward compute. Exposed communication and step time before -> after are reported.
    """
    name = "check_comm_fixed"
    _refuse("comm", name, before, after, trained=(after,), what="DDP job")
    ov = overlap_starts(after)
    if not ov or all(v["per_step"] == 0 for v in ov.values()):
        _check("comm", name, False,
               "Your trace has no all-reduce on any rank: the gradients are never averaged, so each rank trains a "
               "model of its own. The module your function returns must all-reduce the gradients during backward.")
    late = [r for r, v in ov.items() if v["per_step"] > 0 and v["early_per_step"] == 0]
    if late:
        lag = np.nanmean([ov[r]["lag_ms"] for r in late])
        who = _ranks_word(len(ov)) if len(late) == len(ov) else f"rank {late[0]}"
        _check("comm", name, False,
               f"The all-reduce still starts after backward ends on {who}: no overlap ({ov[late[0]]['per_step']:.0f} "
               f"all-reduces a step, the first {lag:.1f} ms after backward's last op). The gradients must go out "
               "while backward is still computing the earlier layers.")
    early = min(v["early_per_step"] / v["per_step"] for v in ov.values() if v["per_step"])
    _record("comm", name, True)
    return (f"passed: {name} (on every rank {early:.0%} or more of the {max(v['per_step'] for v in ov.values()):.0f} "
            "all-reduces a step start while backward still computes). Reported, not judged: exposed communication "
            f"{_exposed_ms(before):.1f} -> "
            f"{_exposed_ms(after):.1f} ms a step, step {_step_ms(before):.1f} -> {_step_ms(after):.1f} ms (profiled).")


MAX_SWEEP_ROWS = MAX_RUNS  # the exercise asks for three to six runs; the engine reads a one-pass sweep as far


_SWEEP_KEYS = ("bucket_cap_mb", "step_ms", "exposed_ms", "trace")


def _read_sweep(sweep: Any) -> list:
    """At most ``MAX_SWEEP_ROWS + 1`` runs, each a plain dict: iterating a learner's object runs their code."""
    if isinstance(sweep, pd.DataFrame):
        return sweep.head(MAX_SWEEP_ROWS + 1).to_dict("records")
    rows = list(itertools.islice(iter(sweep), MAX_SWEEP_ROWS + 1))  # an endless iterator must not fill memory
    return [dict(r) if isinstance(r, Mapping) else r for r in rows]


def _number(row: Mapping[str, Any], key: str) -> float:
    value = row[key]
    try:
        out = float(value) if not isinstance(value, (bool, str, bytes)) else float("nan")
    except (TypeError, ValueError, OverflowError):
        out = float("nan")
    if not math.isfinite(out):
        raise CheckFailed(f"a run's {key} is {str(value)[:40]!r} ({type(value).__name__}), not a finite number: put the "
                          "figure itself in each run's dict")
    return out


def _rows_of_sweep(sweep: Any) -> list[dict[str, Any]]:
    if not isinstance(sweep, (pd.DataFrame, Iterable)) or isinstance(sweep, (str, bytes, Mapping)):
        raise CheckFailed("sweep must be a list of dicts (or a DataFrame), one per run: "
                          "{'bucket_cap_mb': ..., 'step_ms': ..., 'exposed_ms': ..., 'trace': ...}")
    rows = run_learner(_read_sweep, sweep, name="reading your sweep", note=False)
    if len(rows) > MAX_SWEEP_ROWS:
        raise CheckFailed(f"sweep has more than {MAX_SWEEP_ROWS} runs; pass the few runs you made, one dict each")
    if not all(isinstance(r, dict) for r in rows):
        odd = next(type(r).__name__ for r in rows if not isinstance(r, dict))
        raise CheckFailed(f"each run of the sweep must be a dict with {', '.join(_SWEEP_KEYS)}; one is a {odd}")
    bad = [k for k in _SWEEP_KEYS if any(k not in r for r in rows)] if rows else list(_SWEEP_KEYS)
    if bad or not all(isinstance(r["trace"], Trace) for r in rows):
        raise CheckFailed(f"each run needs {', '.join(_SWEEP_KEYS)} (the trace as helpers.load returned it); "
                          f"missing: {', '.join(bad) or 'a Trace in trace'}")
    return [{**r, "bucket_cap_mb": _number(r, "bucket_cap_mb"), "exposed_ms": _number(r, "exposed_ms")} for r in rows]


def check_bucket_sweep(sweep: Any) -> str:
    """Your ``bucket_cap_mb`` sweep: at least three sizes spanning 10x, each run your own trace; the
    ``exposed_ms`` you plotted matches that run's trace; all-reduces per step fall as buckets grow."""
    name = "check_bucket_sweep"
    try:
        rows = _rows_of_sweep(sweep)
    except CheckFailed as exc:
        _check("comm", name, False, str(exc))
    _refuse("comm", name, *[r["trace"] for r in rows], trained=tuple(r["trace"] for r in rows), what="sweep's job")
    sizes = sorted({r["bucket_cap_mb"] for r in rows})
    if len(sizes) < 3 or sizes[0] <= 0 or sizes[-1] / sizes[0] < 10:
        _check("comm", name, False, f"your sweep covers bucket_cap_mb {sizes}: run at least three sizes spanning 10x or "
               "more (say 1 to 100 MB) to see where the per-call cost and the overlap balance")
    problems = []
    for r in rows:
        want = _exposed_ms(r["trace"])
        got = r["exposed_ms"]
        if not _close(got, want, 0.25, 1.0):
            # the run's own figure is not printed: the learner measures it (a printed value could be pasted)
            problems.append(f"your exposed_ms for {r['bucket_cap_mb']:g} MB is {got:.1f}, {'above' if got > want else 'below'} "
                            "what that run's trace shows: the all-reduce time a step with no compute kernel beside it")
    if problems:
        _check("comm", name, False, "; ".join(problems[:2]))
    counts = sorted((r["bucket_cap_mb"], collectives_per_step(r["trace"])) for r in rows)
    smallest, largest = counts[0], counts[-1]
    if smallest[1] <= largest[1]:
        shows = (f"your {smallest[0]:g} MB and {largest[0]:g} MB runs both show {smallest[1]:.0f} all-reduces a step"
                 if smallest[1] == largest[1] else
                 f"your {smallest[0]:g} MB run shows {smallest[1]:.0f} all-reduces a step, no more than your "
                 f"{largest[0]:g} MB run's {largest[1]:.0f}")
        _check("comm", name, False, f"{shows}: the bucket size is not reaching DDP (does your function pass "
               "bucket_cap_mb on?)")
    table = ", ".join(f"{mb:g} MB: {n:.0f} all-reduces" for mb, n in counts)
    _record("comm", name, True)
    return f"passed: {name} ({table} a step, per rank)"


def _cast_ms(trace: Trace) -> float:
    ev = trace.events
    casts = ev[(ev["kind"] == "cpu_op") & ev["name"].isin(_CASTS) & (ev["step"] >= 0)]
    return float(casts["dur_us"].sum() / 1e3 / max(1, len(trace.steps)))


#: Tensor types (the profiler's ``Input type``) that are half precision on the wire.
_HALF = ("c10::Half", "c10::BFloat16")
_ITEM = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2}


def wire_stats(trace: Trace) -> dict[str, Any]:
    """What a gloo job's all-reduces send, from the trace (profiled with record_shapes=True, as
    ``communication.run`` does): bytes a step on one rank (NaN if the trace lacks shapes) and how
    many all-reduces sent each tensor type, e.g. ``{"float": 10}``."""
    coll = _collectives(trace)
    coll = coll[(coll["step"] >= 0) & coll["name"].str.contains("all_reduce", regex=False)]
    known = coll["bytes"].notna()
    steps = len(trace.steps) or 1
    per_rank = [trace.metadata.get("collective_types") or {}] + [
        r.get("collective_types") or {} for r in (trace.metadata.get("ranks") or {}).values()]
    types: dict[str, int] = {}
    for counts in per_rank:
        for key, n in counts.items():
            name, _, kind = key.partition("|")
            if "all_reduce" in name:
                types[kind] = types.get(kind, 0) + int(n)
    return {"bytes_per_step": float(coll.loc[known, "bytes"].sum()) / steps if known.any() else float("nan"),
            "all_reduces": int(len(coll)), "types": types}


def _mb(b: float) -> str:
    return f"{b / 1e6:.2f} MB"


def _wire_problem(plain: Trace, hooked: Trace) -> str | None:
    """Why the hooked job's all-reduces do not send every gradient once in half precision, or None."""
    wp, wh = wire_stats(plain), wire_stats(hooked)
    if not wh["types"] or not wh["bytes_per_step"] > 0:
        return ("Your hooked trace does not record what its all-reduces send (tensor types and sizes): run the job "
                "with communication.run, which profiles with record_shapes=True, and load its trace_dir")
    full = {k: n for k, n in wh["types"].items() if k not in _HALF}
    if full:
        return (f"{sum(full.values())} of {sum(wh['types'].values())} all-reduces in your hooked trace send "
                f"{', '.join(sorted(full))} tensors ({_mb(wh['bytes_per_step'])} a step on one rank): the buckets still go "
                "over the wire in fp32. Casting is not enough: the tensor you hand to dist.all_reduce must be the fp16 one. "
                "Is the hook registered on the module your function returns?")
    item = {_ITEM.get(k) for k in wp["types"]}
    if wp["bytes_per_step"] > 0 and len(item) == 1 and None not in item:
        want = wp["bytes_per_step"] * 2 / item.pop()
        tol = th.COMM_HOOK_WIRE_TOLERANCE
        if not (1 - tol) * want <= wh["bytes_per_step"] <= (1 + tol) * want:
            return (f"your hooked job sends {_mb(wh['bytes_per_step'])} a step on one rank in half precision, but its "
                    f"gradients in fp16 are {_mb(want)} ({_mb(wp['bytes_per_step'])} in fp32 without the hook): every "
                    "bucket must go over the wire once, all of its values")
    return None


def check_comm_hook(plain: Trace, hooked: Trace) -> str:
    """Your compression hook is in effect: the hooked job still all-reduces every step, and what goes
    over the wire is half precision (NCCL kernels named f16/bf16 on GPUs; on gloo, each all-reduce's
    tensor type and bytes as the trace records them: every gradient once, 2 bytes a value).
    Judged on what is sent, not on how long the casts take."""
    name = "check_comm_hook"
    _refuse("comm", name, plain, hooked, trained=(hooked,), what="hooked job")
    n_plain, n_hook = collectives_per_step(plain), collectives_per_step(hooked)
    if n_hook == 0:
        _check("comm", name, False, "Your hooked trace has no all-reduce: the hook returns without averaging the "
               "gradients across ranks (its future must come from dist.all_reduce(..., async_op=True)).")
    coll = _collectives(hooked)
    nccl = coll[coll["device"] >= 0]
    wire = ""
    if not nccl.empty:
        half = nccl["name"].str.contains(r"_(?:b?f16|half|bfloat16)", case=False, regex=True)
        if not half.any():
            _check("comm", name, False, f"Your hooked trace's all-reduce kernels are {nccl['name'].iloc[0]}: the buckets "
                   "still go over the wire in fp32. Is the hook registered on the module your function returns?")
    else:
        problem = _wire_problem(plain, hooked)
        if problem:
            _check("comm", name, False, problem[0].upper() + problem[1:] + ".")
        wp, wh = wire_stats(plain), wire_stats(hooked)
        wire = (f"; on the wire {_mb(wh['bytes_per_step'])} a step on one rank in {', '.join(sorted(wh['types']))}"
                + (f", {_mb(wp['bytes_per_step'])} without the hook" if wp["bytes_per_step"] > 0 else ""))
    pp, ph = _per_rank(plain), _per_rank(hooked)
    _record("comm", name, True)
    return (f"passed: {name} ({n_hook:.0f} all-reduces a step, {n_plain:.0f} without the hook{wire}). Reported, not "
            f"judged: all-reduce {pp['collective_us'].mean():.1f} -> {ph['collective_us'].mean():.1f} ms a step, casts "
            f"{_cast_ms(plain):.1f} -> {_cast_ms(hooked):.1f} ms a step, step {_step_ms(plain):.1f} -> "
            f"{_step_ms(hooked):.1f} ms (profiled)")


def shard_rows(trace: Trace) -> dict[int, tuple[int, int, int]]:
    """Per rank, the rows of the global batch it trained on, from the ``rows a:b of n`` ranges the
    course's job writes into each step (empty for traces without them)."""
    ev = trace.events
    ann = ev[(ev["kind"] == "annotation") & ev["name"].str.startswith("rows ")]
    out: dict[int, tuple[int, int, int]] = {}
    for rank, nm in zip(ann["rank"], ann["name"]):
        mt = _ROWS.match(nm)
        if mt:
            out[int(rank)] = (int(mt.group(1)), int(mt.group(2)), int(mt.group(3)))
    return out


def _spread_words(trace: Trace) -> tuple[float, str]:
    imb = m.rank_imbalance(trace)
    per = imb["per_rank"]
    if per is None or len(per) < 2:
        return 0.0, "one rank only"
    comp = per.set_index("rank")["compute_us"]
    slow, fast = int(comp.idxmax()), int(comp.idxmin())
    ratio = float(comp.max() / comp.min()) if comp.min() > 0 else math.inf
    return imb["compute_spread"], f"rank {slow} computes {ratio:.1f}x rank {fast}"


def check_imbalance_fixed(before: Trace, after: Trace) -> str:
    """Your split gives every rank the same work: judged from your trace's rows per rank (every row of the
    global batch once, counts within one row) and reported with the compute spread and the fast rank's
    wait in the all-reduce, before -> after. Traces without row ranges are judged by the compute spread."""
    name = "check_imbalance_fixed"
    _refuse("imbalance", name, before, after)
    spread_b, words_b = _spread_words(before)
    spread_a, words_a = _spread_words(after)
    pb, pa = _per_rank(before), _per_rank(after)
    wait_b = float(pb["exposed_us"].max()) if not pb.empty else float("nan")
    wait_a = float(pa["exposed_us"].max()) if not pa.empty else float("nan")
    rows = shard_rows(after)
    report = (f"compute spread {spread_b:.0%} -> {spread_a:.0%} ({words_a}), the waiting rank's exposed all-reduce "
              f"{wait_b:.1f} -> {wait_a:.1f} ms a step")
    if rows:
        n = max(v[2] for v in rows.values())
        spans = sorted((a, b, r) for r, (a, b, _) in rows.items())
        covered, holes, twice = 0, [], []
        for a, b, _r in spans:
            if a > covered:
                holes.append(f"{covered}:{a}")
            elif a < covered:
                twice.append(f"{a}:{min(b, covered)}")
            covered = max(covered, b)
        if covered < n:
            holes.append(f"{covered}:{n}")
        given = ", ".join(f"rank {r} rows {a}:{b}" for a, b, r in spans)
        if holes or twice:
            what = "; ".join(filter(None, [f"rows {', '.join(holes)} are never trained on" if holes else "",
                                           f"rows {', '.join(twice)} twice" if twice else ""]))
            _check("imbalance", name, False, f"Your split gives {given} of {n}: {what}. Every row of the global batch "
                   "must go to exactly one rank.")
        counts = {r: b - a for r, (a, b, _) in rows.items()}
        if max(counts.values()) - min(counts.values()) > 1:
            big = max(counts, key=counts.get)
            small = min(counts, key=counts.get)
            _check("imbalance", name, False,
                   f"Spread still {spread_a:.0%}: {words_a}. Your split gives rank {big} {counts[big]} of {n} rows and "
                   f"rank {small} {counts[small]}; the others wait for it in the all-reduce every step.")
        _refuse("imbalance", name, trained=(after,), what="split job")  # the rows first: they say which are wrong
        _record("imbalance", name, True)
        note = "" if spread_a < 0.25 else (" The compute spread left is this machine, not your split: the ranks do the "
                                           "same work, one of them got less of its core.")
        return f"passed: {name} ({given} of {n}). Reported: {report}.{note}"
    ok = spread_a < 0.25 and spread_a < 0.5 * spread_b
    if ok:
        _refuse("imbalance", name, trained=(after,), what="split job")
    return _check("imbalance", name, ok, f"Spread still {spread_a:.0%}: {words_a} (before: {spread_b:.0%}, {words_b}). "
                  "The fast rank waits in the all-reduce for the slow one; give every rank the same work.")


def check_imbalance_diagnosed(trace: Trace) -> str:
    """The diagnosis of a trace names load imbalance (reads a trace; earns no credit on its own)."""
    imb = m.rank_imbalance(trace)
    found = [f.pattern for f in diagnose(trace)]
    return _check("imbalance", "check_imbalance_diagnosed", "load_imbalance" in found,
                  f"Findings {found}, compute spread {imb['compute_spread']:.0%}. Compare the ranks' compute lanes "
                  "step by step: which rank arrives last at the all-reduce?")


# --- the same job in Nsight Systems -------------------------------------------------------------
def os_sleep_ms(trace: Trace, calls: Iterable[str] | None = None) -> dict[int, float]:
    """Per rank, ms a step its training thread spent in blocking OS calls (nsys --trace=osrt), inside steps."""
    from ..metrics.activity import BLOCKING_OS_CALLS, os_waits

    names = BLOCKING_OS_CALLS if calls is None else frozenset(calls)
    ev = trace.events
    out: dict[int, float] = {}
    for rank in trace.ranks:
        main = ev.loc[(ev["rank"] == rank) & (ev["device"] < 0) & (ev["kind"] == "annotation"), "tid"].unique()
        s, e = os_waits(trace, rank, main, names)
        win = m.windows(trace, rank)
        per_step = m.overlap(s, e, win["start_us"].to_numpy(), win["end_us"].to_numpy())
        out[int(rank)] = float(per_step.mean() / 1e3) if len(per_step) else 0.0
    return out


def check_nsys_sleep(answer: Any, trace: Trace) -> str:
    """The learner's ms a step each rank's training thread slept in OS calls, read off an nsys export."""
    if trace.format != "nsys-sqlite" or not (trace.events["kind"] == "osrt").any():
        raise CheckFailed("Pass the Nsight Systems export (course.recorded_pair(...)['nsys']): only it records "
                          "OS runtime calls (kind 'osrt').")
    if not isinstance(answer, Mapping) or not answer:
        raise CheckFailed("Give a dict {rank: ms a step}, e.g. {0: 12.5, 1: 3.0}.")
    want = os_sleep_ms(trace)
    steps = {int(r): int((trace.steps["rank"] == r).sum()) for r in want}
    every_call = os_sleep_ms(trace, set(trace.events.loc[trace.events["kind"] == "osrt", "name"]))
    wrong = []
    for rank, ms in want.items():
        try:
            got = float(answer.get(rank, answer.get(str(rank))))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            wrong.append(f"rank {rank}: no number given")
            continue
        # A figure read off this very export: close means within 3% (which calls count as sleeping
        # moves it by less than that; the two ranks' figures can be within 10% of each other).
        if _close(got, ms, 0.03, 0.3):
            continue
        if _close(got, ms * steps[rank], 0.03, 0.3):
            hint = f"that is the total over its {steps[rank]} steps; divide by the steps"
        elif _close(got, every_call[rank], 0.01, 0.1) and not _close(every_call[rank], ms, 0.03, 0.3):
            hint = "you summed every OS call: which of them does a thread sleep in until someone wakes it?"
        elif any(_close(got, v, 0.03, 0.3) for r, v in want.items() if r != rank):
            hint = "that is the other rank's figure: group by the rank column"
        else:
            hint = ("not what the export shows: take the 'osrt' rows of the thread that holds the rank's ranges, "
                    "the calls it blocks in (pthread_cond_wait and the like), inside the step windows") + unit_slip(got, ms)
        wrong.append(f"rank {rank}: {got:g} ms ({hint})")
    return _check("comm", "check_nsys_sleep", not wrong,
                  "; ".join(wrong) + ". Each figure is ms a step, one per rank.")
