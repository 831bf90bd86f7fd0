"""Lab 10: GPU memory (allocated and reserved, the timeline, the peak's owners, transients, the optimizer in
backward, fragmentation, out-of-memory triage).

The learner's functions run on inputs they have not seen, against references here: snapshots built for the
check (fragmented segments, blocks waiting on a stream), allocator histories with every kind of event,
functions whose transient memory is known, a deep model trained next to the plain Adam step, and out-of-memory
messages other people posted (``data/oom_messages.json``). Readings of the shipped snapshot are checked and earn
nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import torch

from .. import memory as mem
from .. import thresholds as th
from ..outputs import shipped_json
from . import _core
from . import behaviour as _behaviour
from ._core import DATA, NUMBER, CheckFailed, _check, _close, _record, run_learner, unit_slip
from .lab09 import _course_names, _peak_during

run_learner = _behaviour.watching(run_learner, "function (lab 10)")  # the course's answers refused wherever they run

__all__ = ["check_memory_state", "check_allocated_over_time", "check_peak_reading", "check_transient_bytes",
           "check_optimizer_in_backward", "check_oom_triage", "oom_messages"]

ITEM = "memory"
#: Lab 10's own work: the functions the learner wrote, run on inputs they have not seen, and their optimizer in
#: backward, trained and measured here; the same on both tracks (the snapshot reading earns nothing).
# The credit this lab's exercises earn is declared in helpers.checks.exercise.EXERCISES.
MiB = 2**20


def _fail(name: str, message: str) -> None:
    _record(ITEM, name, False)
    raise CheckFailed(message)


def _learners(fn: Any, what: str, name: str) -> None:
    if not callable(fn):
        _fail(name, f"pass your function itself ({what}), not a {type(fn).__name__}")
    if str(getattr(fn, "__module__", "") or "").startswith("helpers."):
        _fail(name, f"{getattr(fn, '__name__', fn)} is the course's own code, not yours: write {what} in a cell")
    ours = tuple(n for n, obj in globals().items() if n.startswith("_reference") and callable(obj))
    borrowed = _course_names(fn, ours + ("_peak_during",))
    if borrowed:
        _fail(name, f"your function calls the check's own {', '.join(borrowed)}: write {what} yourself")


# --- 1. allocated and reserved --------------------------------------------------------------------------
def _reference_state(snap: dict) -> dict:
    seg, bl = mem.segments(snap), mem.blocks(snap)
    free = bl[bl["state"] == "inactive"]["size"]
    return {"reserved_mib": float(seg["total_size"].sum()) / MiB,
            "allocated_mib": float(bl.loc[bl["state"] == "active_allocated", "size"].sum()) / MiB,
            "free_cached_mib": float(free.sum()) / MiB,
            "largest_free_block_mib": float(free.max()) / MiB if len(free) else 0.0}


def _segment(address: int, blocks: list[tuple[int, str]], stream: int = 0) -> dict:
    out, at = [], address
    for size, state in blocks:
        out.append({"address": at, "size": size, "requested_size": size, "state": state, "frames": []})
        at += size
    total = sum(s for s, _ in blocks)
    return {"device": 0, "address": address, "total_size": total, "stream": stream, "segment_type": "large",
            "allocated_size": sum(s for s, st in blocks if st == "active_allocated"),
            "active_size": sum(s for s, st in blocks if st != "inactive"), "blocks": out}


def _snapshot_cases() -> list[tuple[str, dict]]:
    """The shipped snapshot, and snapshots built for the check: a fragmented segment, a block waiting on another
    stream (pending free: neither allocated nor free for reuse), nothing free at all."""
    real = mem.load_snapshot(DATA / "gpu_bound__bf16__h200.memsnap.pickle.gz")
    fragmented = {"segments": [_segment(1 << 30, [(20 * MiB, "active_allocated"), (30 * MiB, "inactive"),
                                                  (6 * MiB, "active_allocated"), (8 * MiB, "inactive")]),
                               _segment(3 << 30, [(2 * MiB, "inactive")])]}
    pending = {"segments": [_segment(1 << 30, [(4 * MiB, "active_pending_free"), (12 * MiB, "active_allocated")]),
                            _segment(2 << 30, [(10 * MiB, "inactive")], stream=7)]}
    full = {"segments": [_segment(1 << 30, [(64 * MiB, "active_allocated")])]}
    return [("the shipped H200 snapshot", real), ("a fragmented segment and a small one", fragmented),
            ("a block waiting on another stream", pending), ("a segment with nothing free", full)]


def check_memory_state(fn: Callable[[dict], dict]) -> str:
    """The learner's ``fn(snapshot)``: reserved, allocated, free-in-the-cache MiB and the largest free block, on the
    shipped snapshot and three built for the check (1e-6)."""
    name = "check_memory_state"
    _learners(fn, "memory_state(snapshot)", name)
    hints = {"reserved_mib": "the sum of every segment's total_size",
             "allocated_mib": "the blocks whose state is 'active_allocated'",
             "free_cached_mib": "the blocks whose state is 'inactive' (a block 'active_pending_free' is neither: freed "
                                "by the program, waiting for a stream)",
             "largest_free_block_mib": "the largest single 'inactive' block (0 when there is none)"}
    for label, snap in _snapshot_cases():
        want = _reference_state(snap)
        got = run_learner(fn, snap, name="your memory_state", returns=dict)
        for k, hint in hints.items():
            try:
                v = float(got.get(k, float("nan")))
            except (TypeError, ValueError):
                v = float("nan")
            if not _close(v, want[k], 1e-6, 1e-9):
                return _check(ITEM, name, False, f"on {label}: {k}={v:.3f}, expected {want[k]:.3f}: {hint}, in MiB"
                              + unit_slip(v, want[k]))
    return _check(ITEM, name, True, "")


# --- 2. the timeline ------------------------------------------------------------------------------------
def _reference_allocated(events: pd.DataFrame) -> pd.Series:
    delta = events["size"].where(events["action"] == "alloc", 0) - events["size"].where(events["action"] == "free_completed", 0)
    return pd.Series(delta.cumsum().to_numpy(), index=events["time_us"].to_numpy(), dtype="float64")


def _event_cases() -> list[tuple[str, pd.DataFrame]]:
    real = mem.snapshot_events(mem.load_snapshot(DATA / "gpu_bound__bf16__h200.memsnap.pickle.gz"))
    rows = [(0.0, "segment_alloc", 64), (1.0, "alloc", 10), (2.0, "alloc", 20), (3.0, "free_requested", 10),
            (4.0, "alloc", 5), (5.0, "free_completed", 10), (6.0, "oom", 100), (7.0, "free_requested", 20),
            (9.0, "free_completed", 20), (9.5, "segment_free", 64), (10.0, "snapshot", 0)]
    built = pd.DataFrame([{"time_us": t, "action": a, "addr": i, "size": s * MiB, "stream": 0, "frame": "", "stack": ()}
                          for i, (t, a, s) in enumerate(rows)])
    return [("the shipped snapshot's history", real), ("a history with segment, oom and pending-free events", built),
            ("the shipped history's second step", real[real["time_us"] >= real["time_us"].median()].reset_index(drop=True))]


def check_allocated_over_time(fn: Callable[[pd.DataFrame], pd.Series]) -> str:
    """The learner's ``fn(events)``: bytes allocated after each event, above the start, indexed by ``time_us``:
    + ``alloc``, - ``free_completed``, nothing else."""
    name = "check_allocated_over_time"
    _learners(fn, "allocated_over_time(events)", name)
    for label, events in _event_cases():
        want = _reference_allocated(events)
        got = run_learner(fn, events.copy(), name="your allocated_over_time", returns=pd.Series)
        if len(got) != len(want):
            return _check(ITEM, name, False, f"on {label}: your series has {len(got)} values for {len(want)} events: one "
                          "value after each event (the running total), indexed by the events' time_us")
        values = pd.to_numeric(got, errors="coerce").to_numpy(dtype="float64")
        bad = [i for i, (a, b) in enumerate(zip(values, want.to_numpy())) if not _close(float(a), float(b), 0.0, 0.5)]
        if bad:
            i = bad[0]
            ev = events.iloc[i]
            return _check(ITEM, name, False,
                          f"on {label}: after event {i} ({ev['action']}, {ev['size'] / MiB:.2f} MiB) your total is "
                          f"{values[i] / MiB:.3f} MiB, expected {want.iloc[i] / MiB:.3f}: add the size at 'alloc', take it "
                          "away at 'free_completed' (not at 'free_requested': the memory is reusable only once the free "
                          "completes), and leave segment_*, oom and snapshot events out")
        try:
            same_index = bool((got.index.to_numpy(dtype="float64") == want.index.to_numpy()).all())
        except (TypeError, ValueError):
            same_index = False
        if not same_index:
            return _check(ITEM, name, False, f"on {label}: index your series by the events' time_us")
    return _check(ITEM, name, True, "")


def _reference_peak(snap: dict) -> dict:
    ev = mem.snapshot_events(snap)
    total = _reference_allocated(ev)
    i = int(total.to_numpy().argmax())
    t = float(ev["time_us"].iloc[i])
    ph = mem.phases(snap)
    top = ph[~ph["name"].str.contains("#")]
    inside = top[(top["start_us"] <= t) & (top["end_us"] >= t)]
    allocs = ev[(ev["action"] == "alloc") & (ev.index <= i)]
    freed = ev[(ev["action"] == "free_completed") & (ev.index <= i)]
    live: dict[str, float] = {}
    gone = freed.groupby("addr").size().to_dict()
    for addr, group in allocs.groupby("addr"):  # an address reused: its last allocations are the live ones
        for _, a in group.iloc[gone.get(addr, 0):].iterrows():
            live[a["frame"]] = live.get(a["frame"], 0.0) + float(a["size"])
    owners = dict(sorted(live.items(), key=lambda kv: -kv[1])[:2])
    return {"peak_mib": float(total.iloc[i]) / MiB, "phase": str(inside["name"].iloc[0]) if len(inside) else "",
            "owners": {k: v / MiB for k, v in owners.items()}}


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def check_peak_reading(answer: dict, snap: dict) -> str:
    """``{"peak_mib": the most memory allocated above the history's start, "phase": the range it falls in,
    "owners": {frame: MiB} of the two frames owning most of what is live then}`` (1%). A reading of a snapshot: it
    earns nothing."""
    name = "check_peak_reading"
    want = _reference_peak(snap)
    if not isinstance(answer, dict):
        return _check(ITEM, name, False, "peak_reading must be a dict with peak_mib, phase and owners")
    try:
        peak = float(answer.get("peak_mib", float("nan")))
    except (TypeError, ValueError):
        peak = float("nan")
    if not _close(peak, want["peak_mib"], 0.01):
        side = "above" if peak > want["peak_mib"] else "below" if peak < want["peak_mib"] else "not"
        return _check(ITEM, name, False, f"peak_mib={answer.get('peak_mib')!r} is {side} the history's peak: the largest "
                      "value of your allocated_over_time series, in MiB" + unit_slip(peak, want["peak_mib"]))
    if answer.get("phase") != want["phase"]:
        return _check(ITEM, name, False, f"phase={answer.get('phase')!r}: which of memory.phases(snap)'s ranges (not the "
                      "ones with '#' in their name, which sit inside them) holds the peak's time?")
    owners = answer.get("owners")
    if not isinstance(owners, dict) or set(owners) != set(want["owners"]):
        return _check(ITEM, name, False, f"owners={owners!r}: group what is live at the peak (allocated at or before it, not "
                      "freed by then) by its 'frame', and keep the two largest groups")
    try:
        ok = all(_close(float(owners[k]), v, 0.01) for k, v in want["owners"].items())
    except (TypeError, ValueError):
        ok = False
    off = [k for k, v in want["owners"].items() if not _close(_number(owners[k]), v, 0.01)]
    return _check(ITEM, name, ok, f"owners={owners}: the right frames, but the MiB of {', '.join(map(repr, off))} "
                  "are off by more than 1%: sum the sizes of the blocks still live at the peak, in MiB (2**20 bytes)")


# --- 3. transients --------------------------------------------------------------------------------------
def _transient_cases(device: torch.device) -> list[tuple[str, Callable[[], Any], int]]:
    """Functions whose transient is known exactly (the allocator rounds to 512 bytes; these sizes are multiples of it),
    with that transient in bytes."""
    def one_buffer() -> None:
        torch.empty(3 * MiB, dtype=torch.uint8, device=device).fill_(1)

    def overlapping() -> None:
        a = torch.empty(1 * MiB, dtype=torch.uint8, device=device)
        b = torch.empty(2 * MiB, dtype=torch.uint8, device=device)
        del a
        c = torch.empty(MiB // 2, dtype=torch.uint8, device=device)
        del b, c

    def kept() -> torch.Tensor:
        return torch.ones(MiB // 4, device=device)  # 1 MiB of float32, returned: still live when the function ends

    def nothing() -> None:
        return None

    return [("a 3 MiB buffer made and dropped", one_buffer, 3 * MiB),
            ("1 MiB and 2 MiB live together, then 0.5 MiB", overlapping, 3 * MiB),
            ("a 1 MiB result the caller keeps", kept, MiB), ("a function that allocates nothing", nothing, 0)]


def check_transient_bytes(fn: Callable[[Callable[[], Any], torch.device], float], device: torch.device | str = "cpu") -> str:
    """The learner's ``fn(work, device)``: the most bytes allocated above the start while ``work()`` runs, on four
    functions whose answer is known (5% or 64 KiB)."""
    from ..profiling import quiet_profiler_logs

    name = "check_transient_bytes"
    _learners(fn, "transient_bytes(work, device)", name)
    device = torch.device(device)
    for label, work, want in _transient_cases(device):
        with quiet_profiler_logs():  # the profiler, started in the learner's thread, says so on stderr
            got = run_learner(fn, work, device, name="your transient_bytes", returns=NUMBER)
        if not _close(float(got), want, 0.05, 64 * 1024):
            return _check(ITEM, name, False,
                          f"on {label}: your function measures {float(got) / MiB:.3f} MiB, expected {want / MiB:.3f}: the "
                          "largest running total of the allocations' bytes (frees negative) while the function runs, above "
                          "where it started" + unit_slip(got, want))
    return _check(ITEM, name, True, "")


# --- 4. the optimizer in backward -----------------------------------------------------------------------
#: The model the check trains: many layers of modest size, so that one layer's gradient and update are a small part
#: of all the gradients (the case where applying each as it arrives pays).
OIB_WIDTH, OIB_DEPTH, OIB_BATCH, OIB_STEPS, OIB_LR = 256, 12, 16, 3, 1e-3


def _oib_model(seed: int = 0) -> torch.nn.Module:
    from ..workloads import gpu_bound as gb

    torch.manual_seed(seed)
    return gb.Net(OIB_WIDTH, OIB_DEPTH)


def check_optimizer_in_backward(fn: Callable[[torch.nn.Module, float], Any]) -> str:
    """The learner's ``fn(model, lr)`` makes ``loss.backward()`` alone train ``model`` as plain Adam would (each
    parameter updated as its gradient arrives, then the gradient freed): the same parameters as
    ``torch.optim.Adam(lr=lr)`` after three steps, no ``.grad`` left, and a step's peak memory under the bytes of
    all the gradients together (measured here, on the CPU: the same lifetimes as on a GPU)."""
    import torch.nn.functional as F

    name = "check_optimizer_in_backward"
    _learners(fn, "attach_optimizer_in_backward(model, lr)", name)
    g = torch.Generator().manual_seed(5)
    xs = torch.randn(OIB_STEPS + 1, OIB_BATCH, OIB_WIDTH, generator=g)
    ys = torch.randint(0, 10, (OIB_STEPS + 1, OIB_BATCH), generator=g)
    ref, mine = _oib_model(), _oib_model()
    opt = torch.optim.Adam(ref.parameters(), lr=OIB_LR)
    run_learner(fn, mine, OIB_LR, name="your attach_optimizer_in_backward")
    for i in range(OIB_STEPS):
        F.cross_entropy(ref(xs[i]), ys[i]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        run_learner(lambda i=i: F.cross_entropy(mine(xs[i]), ys[i]).backward(), name="backward with your hooks", note=False)
    left = [n for n, p in mine.named_parameters() if p.grad is not None]
    with torch.no_grad():
        off = max(float((a - b).abs().max()) for a, b in zip(mine.parameters(), ref.parameters()))
        moved = max(float((a - b).abs().max()) for a, b in zip(mine.parameters(), _oib_model().parameters()))
    if moved == 0.0:
        return _check(ITEM, name, False, "after three backward passes your model's parameters have not moved: each "
                      "parameter's hook must run its optimizer's step() (register_post_accumulate_grad_hook)")
    if off > th.OIB_PARAM_ATOL:
        return _check(ITEM, name, False, f"after three steps your parameters differ from plain Adam's by up to {off:.2g}: one "
                      "torch.optim.Adam([p], lr=lr) per parameter, its step() once per backward, the learning rate given")
    if left:
        return _check(ITEM, name, False, f"after backward {len(left)} parameters still hold a .grad ({left[0]}, ...): set "
                      "each one's grad to None (zero_grad(set_to_none=True)) in its hook once it is applied, or every gradient "
                      "stays alive and nothing is saved")
    grads = sum(p.numel() * p.element_size() for p in mine.parameters())
    with _core.scratch_dir("lab10-mem-") as scratch:  # made and removed here: a call that never returns leaves nothing
        peak = run_learner(lambda: _peak_during(lambda: F.cross_entropy(mine(xs[OIB_STEPS]), ys[OIB_STEPS]).backward(),
                                                torch.device("cpu"), scratch), name="a step with your hooks", note=False)
    return _check(ITEM, name, peak < grads,
                  f"a step with your hooks peaks at {peak / MiB:.2f} MiB above its start, not under the {grads / MiB:.2f} MiB all "
                  "the gradients take together: each gradient must be applied and freed as it arrives (a hook per "
                  "parameter), not all of them at the end")


# --- 5. out of memory -----------------------------------------------------------------------------------
def oom_messages() -> list[dict]:
    """The out-of-memory messages others posted (``data/oom_messages.json``): ``id, source, repository, posted, text``."""
    return shipped_json(DATA / "oom_messages.json")["messages"]


def _reference_cause(f: dict) -> str:
    this = f["this_process"] if f["this_process"] is not None else f["allocated"] + f["reserved_unallocated"]
    if f["capacity"] - f["free"] - this >= th.OOM_OTHER_SHARE * f["capacity"]:
        return "other_processes"
    if f["requested"] > f["free"] + f["reserved_unallocated"]:
        return "too_big"
    if f["reserved_unallocated"] >= f["requested"]:
        return "fragmentation"
    return "too_much"


def check_oom_triage(fn: Callable[[dict], str]) -> str:
    """The learner's ``fn(figures)`` (the dict :func:`helpers.memory.parse_oom` returns) names the cause of each of the
    out-of-memory messages others posted, by the lab's four rules."""
    name = "check_oom_triage"
    _learners(fn, "oom_cause(figures)", name)
    wrong = []
    for m in oom_messages():
        f = mem.parse_oom(m["text"])
        want = _reference_cause(f)
        got = run_learner(fn, dict(f, processes=dict(f["processes"])), name="your oom_cause", returns=str)
        if got != want:
            wrong.append((m, f, got, want))
    if wrong:
        m, f, got, want = wrong[0]
        g = 2**30
        this = f["this_process"] if f["this_process"] is not None else f["allocated"] + f["reserved_unallocated"]
        figures = (f"asked {f['requested'] / g:.2f} GiB of a {f['capacity'] / g:.2f} GiB GPU with {f['free'] / g:.2f} GiB free; "
                   f"this process {this / g:.2f} GiB, so others {(f['capacity'] - f['free'] - this) / g:.2f} GiB; reserved "
                   f"but unallocated {f['reserved_unallocated'] / g:.2f} GiB")
        return _check(ITEM, name, False, f"your cause differs from the rules' on {len(wrong)} of {len(oom_messages())} messages; "
                      f"the first, {m['id']} ({m['source']}): you say {got!r}, the rules say {want!r} ({figures}). Apply the "
                      "rules in their order; when this_process is None, use allocated + reserved_unallocated")
    return _check(ITEM, name, True, "")
