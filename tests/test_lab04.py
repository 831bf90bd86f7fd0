"""Lab 04's checks: each passes on the reference work, fails on the unsolved stub, and fails on a
plausible wrong answer with a message naming what that trace shows. The learner's functions run in
real 2-rank gloo jobs of a few steps (spawned ranks: the functions travel as source)."""

from __future__ import annotations

import linecache
import multiprocessing as mp_std
import re

import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest import as_learners
from torch.nn.parallel import DistributedDataParallel as DDP

import helpers
from helpers import checks, course
from helpers.course import recorded
from helpers.diagnosis import signals
from helpers.model import Trace
from helpers.plots import time_origin_us
from helpers.selfcheck import item_status
from helpers.workloads import communication

RUN = dict(world_size=2, steps=2, warmup=1, pin_cores=False, threads=1)  # as the lab runs them

# --- the learner's code, as a notebook cell would define it: in __main__, with no file -----------------
NOTEBOOK_CELL = '''
BUCKETS = 25

def fp16_hook(state, bucket):
    buffer = bucket.buffer()
    half = buffer.to(torch.float16).div_(dist.get_world_size())
    future = dist.all_reduce(half, async_op=True).get_future()

    def back_to_fp32(fut):
        buffer.copy_(fut.value()[0])
        return buffer
    return future.then(back_to_fp32)


def my_hooked_wrap(model):
    ddp = DDP(model, bucket_cap_mb=BUCKETS)
    ddp.register_comm_hook(None, fp16_hook)
    return ddp


def cast_only_hook(state, bucket):  # wrong: casts to fp16 and back, then all-reduces the fp32 buffer
    buffer = bucket.buffer()
    buffer.copy_(buffer.to(torch.float16).to(torch.float32)).div_(dist.get_world_size())
    return dist.all_reduce(buffer, async_op=True).get_future().then(lambda fut: fut.value()[0])


def cast_only_wrap(model):
    ddp = DDP(model, bucket_cap_mb=BUCKETS)
    ddp.register_comm_hook(None, cast_only_hook)
    return ddp
'''


def notebook_functions() -> dict:
    filename = "<ipython-input-7-lab04>"
    linecache.cache[filename] = (len(NOTEBOOK_CELL), None, NOTEBOOK_CELL.splitlines(True), filename)
    ns = {"__name__": "__main__", "torch": torch, "dist": dist, "DDP": DDP}
    exec(compile(NOTEBOOK_CELL, filename, "exec"), ns)
    return ns


# --- reference answers and plausible wrong ones ---------------------------------------------------
def my_wrap(model, bucket_cap_mb=25):
    return DDP(model, bucket_cap_mb=bucket_cap_mb)


def wrap_forgets_ddp(model, bucket_cap_mb=25):  # wrong: the model goes back unwrapped
    return model


def stub_wrap(model, bucket_cap_mb=25):  # what labs/ ships
    raise course.ExerciseNotDone(2, "your code")


def my_split(n, rank, world):
    return rank * n // world, (rank + 1) * n // world


def split_swapped(n, rank, world):  # wrong: the big share moved to rank 0
    per = n // 16
    return (0, n - per) if rank == 0 else (n - per, n)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("lab04-runs"))

    def go(**kw):
        return helpers.load(communication.run(profile_dir=out, **RUN, **kw)["trace_dir"])

    nb = notebook_functions()
    return {"manual": go(), "ddp": go(wrap=my_wrap), "plain": go(wrap=wrap_forgets_ddp),
            "mb1": go(wrap=my_wrap, bucket_cap_mb=1), "mb100": go(wrap=my_wrap, bucket_cap_mb=100),
            "hooked": go(wrap=nb["my_hooked_wrap"]), "cast_only": go(wrap=nb["cast_only_wrap"]), "uneven": go(shard=communication.split_rows),
            "even": go(shard=my_split), "swapped": go(shard=split_swapped)}


def truthful(trace, pattern: str) -> checks.Reading:
    from helpers import diagnose
    from helpers.checks.reading import want_cost

    f = next(f for f in diagnose(trace) if f.pattern == pattern)
    o = time_origin_us(trace)
    fig = checks.EVIDENCE[pattern][0]
    sg = signals(trace)
    # the window a learner points at: the pattern's longest stretch, not the step around it (diagnose's window)
    s, e = checks.pattern_intervals(trace, pattern)
    i = int(np.argmax(e - s))
    # the cost a learner measures (checks.cost_howto), not diagnose's what-if of the fix
    return checks.Reading(pattern, ((s[i] - o) / 1e3, (e[i] - o) / 1e3), {fig: float(sg[fig])},
                          want_cost(pattern, trace, sg, f.cost))


# --- Exercise 1 and 5: the readings ----------------------------------------------------------------
def test_readings_pass_when_true_and_fail_naming_the_trace(jobs):
    for name, pattern, item, wrong in (("manual", "communication", "comm", "data_stall"),
                                       ("uneven", "load_imbalance", "imbalance", "communication")):
        t = jobs[name]
        from helpers import diagnose

        found = [f.pattern for f in diagnose(t)]
        assert found and found[0] in ("communication", "load_imbalance"), (name, found)
        if pattern not in found:  # a live job on a busy 2-core machine: its timing decides which of the two shows
            pattern = found[0]
        assert checks.check_reading(truthful(t, pattern), t, item, item).startswith(f"passed: check_reading[{item}]")
        good = truthful(t, pattern)
        if wrong in found:  # this run shows the "wrong" pattern too: naming it is not wrong here
            continue
        with pytest.raises(checks.CheckFailed, match=r"is not what holds this loop back.*exposed communication; the ranks compute rank 0 [\d.]+ ms, rank 1 [\d.]+ ms a step \(spread"):
            checks.check_reading(checks.Reading(wrong, good.window_ms, {checks.EVIDENCE[wrong][0]: 0.5}, good.cost), t, item, item)
        with pytest.raises(checks.CheckFailed, match="not complete"):
            checks.check_reading(None, t, item, item)  # the stub leaves no reading


# --- Exercise 2: the learner's DDP --------------------------------------------------------------
def test_comm_fixed_passes_on_your_ddp_and_says_what_the_trace_shows(jobs):
    assert checks.check_comm_fixed(jobs["manual"], jobs["ddp"]).startswith("passed: check_comm_fixed")
    with pytest.raises(checks.CheckFailed, match=r"runs only the course's code \(communication\), none of yours"):
        checks.check_comm_fixed(jobs["manual"], jobs["manual"])  # the course's own job as the fix
    with pytest.raises(checks.CheckFailed, match="carries no record of what its ranks trained .*run it with "
                                                 r"communication\.run\(wrap=your_function"):
        checks.check_comm_fixed(jobs["manual"], as_learners(jobs["manual"]))  # unsolved: the hand-written loop again
    with pytest.raises(checks.CheckFailed, match=r"rank 1's parameters are \d+\.\d% .* away from rank 0's: the ranks stepped "
                                                 "on different gradients"):
        checks.check_comm_fixed(jobs["manual"], jobs["plain"])  # behaviour first: each rank trained a model of its own
    with pytest.raises(checks.CheckFailed, match="recorded, not yours"):
        checks.check_comm_fixed(recorded("communication", "manual", "cpu"), recorded("communication", "ddp", "cpu"))


def test_the_unsolved_stub_stops_in_the_notebook_as_one_line():
    before = set(mp_std.active_children())
    # raised in a rank's process, it still names the function whose cell holds the stub
    with pytest.raises(course.ExerciseNotDone, match="Exercise 2 is not done yet: edit the cell that defines `stub_wrap`"):
        communication.run(wrap=stub_wrap, **RUN)
    assert set(mp_std.active_children()) <= before


# --- Exercise 3: the sweep -----------------------------------------------------------------------
def _entry(mb, t, exposed=None):
    from helpers import metrics

    e = float(metrics.comm_stats(t)["exposed_us"].mean() / 1e3) if exposed is None else exposed
    return {"bucket_cap_mb": mb, "step_ms": 1.0, "exposed_ms": e, "trace": t}


def test_bucket_sweep(jobs):
    good = [_entry(1, jobs["mb1"]), _entry(25, jobs["ddp"]), _entry(100, jobs["mb100"])]
    out = checks.check_bucket_sweep(good)
    assert out.startswith("passed: check_bucket_sweep") and "1 MB: 8 all-reduces" in out
    with pytest.raises(checks.CheckFailed, match="each run needs"):
        checks.check_bucket_sweep([])  # the stub's empty sweep
    # wrong: the bucket size never reaches DDP, every run is the default
    ignored = [_entry(1, jobs["ddp"]), _entry(25, jobs["ddp"]), _entry(100, jobs["ddp"])]
    with pytest.raises(checks.CheckFailed, match="runs both show 2 all-reduces a step: the bucket size is not reaching DDP"):
        checks.check_bucket_sweep(ignored)
    with pytest.raises(checks.CheckFailed, match=r"exposed_ms for 1 MB is 999.0, above what that run's trace shows"):
        checks.check_bucket_sweep([_entry(1, jobs["mb1"], 999.0)] + good[1:])
    with pytest.raises(checks.CheckFailed, match="spanning 10x"):
        checks.check_bucket_sweep(good[1:])


# --- Exercise 4: the hook -------------------------------------------------------------------------
def _retimed(trace, names: tuple[str, ...], factor: float):
    """The same trace with the named ops' durations scaled: a busy or an idle core, as the check sees it."""
    ev = trace.events.copy()
    sel = ev["name"].isin(names)
    ev.loc[sel, "dur_us"] *= factor
    ev["end_us"] = ev["start_us"] + ev["dur_us"]
    return Trace(ev, trace.source, trace.format, dict(trace.metadata))


def _resent(trace, factor: float):
    """The same trace with each all-reduce sending ``factor`` of its bytes (a hook that sends part of a bucket)."""
    ev = trace.events.copy()
    sel = ev["kind"] == "collective"
    ev.loc[sel, "bytes"] *= factor
    return Trace(ev, trace.source, trace.format, dict(trace.metadata))


def test_comm_hook(jobs):
    out = checks.check_comm_hook(jobs["ddp"], jobs["hooked"])
    assert out.startswith("passed: check_comm_hook") and "c10::Half" in out
    wp, wh = checks.lab04.wire_stats(jobs["ddp"]), checks.lab04.wire_stats(jobs["hooked"])
    assert set(wp["types"]) == {"float"} and set(wh["types"]) == {"c10::Half"}
    assert wh["bytes_per_step"] == pytest.approx(wp["bytes_per_step"] / 2, rel=0.01)
    with pytest.raises(checks.CheckFailed, match="still go over the wire in fp32"):
        checks.check_comm_hook(jobs["ddp"], jobs["ddp"])  # unsolved / hook never registered
    with pytest.raises(checks.CheckFailed, match="rank 1's parameters are .* away from rank 0's"):
        checks.check_comm_hook(jobs["ddp"], jobs["plain"])


def test_comm_hook_judges_what_goes_over_the_wire_not_the_cast_time(jobs):
    casts = ("aten::_to_copy", "aten::to", "aten::copy_")
    # a hook that casts but hands the fp32 buffer to the all-reduce: refused, however long its casts take
    for factor in (1.0, 100.0):
        with pytest.raises(checks.CheckFailed, match=r"\d+ of \d+ all-reduces .* send float tensors.*still go over the wire in fp32"):
            checks.check_comm_hook(jobs["ddp"], _retimed(jobs["cast_only"], casts, factor))
    # the right hook passes with its casts taking no time at all, or as long as on a busy core
    for factor in (0.0, 10.0):
        assert checks.check_comm_hook(jobs["ddp"], _retimed(jobs["hooked"], casts, factor)).startswith("passed")
    # half precision, but only half of each bucket sent: not every gradient is averaged
    with pytest.raises(checks.CheckFailed, match="every bucket must go over the wire once"):
        checks.check_comm_hook(jobs["ddp"], _resent(jobs["hooked"], 0.5))


# --- Exercise 6: the split -----------------------------------------------------------------------
def test_imbalance_fixed(jobs):
    assert checks.shard_rows(jobs["even"]) == {0: (0, 288, 576), 1: (288, 576, 576)}
    out = checks.check_imbalance_fixed(jobs["uneven"], jobs["even"])
    assert out.startswith("passed: check_imbalance_fixed") and "compute spread" in out
    with pytest.raises(checks.CheckFailed, match=r"Spread still \d+%: rank 1 computes [\d.]+x rank 0\. Your split gives rank 1 540"):
        checks.check_imbalance_fixed(jobs["uneven"], as_learners(jobs["uneven"]))  # unsolved
    with pytest.raises(checks.CheckFailed, match=r"runs only the course's code \(communication\), none of yours"):
        checks.check_imbalance_fixed(jobs["uneven"], jobs["uneven"])  # the course's split_rows as the fix
    with pytest.raises(checks.CheckFailed, match=r"Spread still \d+%: rank 0 computes [\d.]+x rank 1\. Your split gives rank 0 540"):
        checks.check_imbalance_fixed(jobs["uneven"], jobs["swapped"])
    # wrong: both ranks take the first half (equal work, half the batch never trained on)
    both_first = jobs["even"].window(-1e18, 1e18)
    ev = both_first.events
    ev.loc[ev["name"] == "rows 288:576 of 576", "name"] = "rows 0:288 of 576"
    with pytest.raises(checks.CheckFailed, match="rows 288:576 are never trained on; rows 0:288 twice"):
        checks.check_imbalance_fixed(jobs["uneven"], as_learners(both_first))  # as if a split of theirs did it
    with pytest.raises(checks.CheckFailed, match="was not made in this notebook"):
        checks.check_imbalance_fixed(jobs["uneven"], both_first)  # the job's trace, its events edited afterwards
    with pytest.raises(checks.CheckFailed, match="recorded, not yours"):
        checks.check_imbalance_fixed(recorded("communication", "imbalance", "cpu"), jobs["even"])


def test_credit_needs_the_readings_and_the_fixes():
    assert set(checks.CREDIT["comm"]["cpu"]) == {"check_reading[comm]", "check_comm_fixed", "check_bucket_sweep"}
    assert set(checks.CREDIT["imbalance"]["gpu"]) == {"check_reading[imbalance]", "check_imbalance_fixed"}
    only_fix = {"checks": {"check_imbalance_fixed": True}, "track": "cpu"}
    assert not item_status("imbalance", only_fix)[0]
    both = {"checks": {"check_imbalance_fixed": True, "check_reading[imbalance]": True}, "track": "cpu"}
    assert item_status("imbalance", both)[0]


# --- the learner's functions travel to the ranks ------------------------------------------------
def test_notebook_functions_travel_as_source_with_what_they_use():
    nb = notebook_functions()
    spec = communication.portable(nb["my_hooked_wrap"])
    assert list(spec["sources"]) == ["fp16_hook", "my_hooked_wrap"]
    assert spec["globals"]["BUCKETS"][0] == "value" and spec["globals"]["torch"] == ("module", "torch")
    assert callable(communication.materialize(spec))


def test_what_cannot_travel_is_one_clear_error():
    with pytest.raises(ValueError, match="define it with def at the top level"):
        communication.portable(lambda model: model)

    def inner(model):
        return model
    with pytest.raises(ValueError, match="define it with def at the top level"):
        communication.portable(inner)
    ns = notebook_functions()
    src = "def uses_lock(model):\n    return LOCK\n"
    linecache.cache["<cell-lock>"] = (len(src), None, src.splitlines(True), "<cell-lock>")
    import threading

    ns["LOCK"] = threading.Lock()
    exec(compile(src, "<cell-lock>", "exec"), ns)
    with pytest.raises(ValueError, match=re.escape("uses_lock uses 'LOCK' (lock) from the notebook")):
        communication.portable(ns["uses_lock"])
    with pytest.raises(ValueError, match="not both"):
        communication.run("ddp", wrap=my_wrap)


def test_a_failing_learner_function_raises_its_own_error_and_leaves_no_process():
    before = set(mp_std.active_children())
    with pytest.raises(ValueError, match=r"returned \(0, 9999\)"):
        communication.run(shard=bad_split, **RUN)
    assert set(mp_std.active_children()) <= before


def bad_split(n, rank, world):
    return 0, 9999


def test_nsys_sleep_check_on_the_recorded_export():
    """Exercise 7 reads the shipped nsys export: the right figures pass; totals, every OS call and swapped ranks say why not."""
    from helpers.checks.lab04 import os_sleep_ms
    from helpers.course import recorded_pair

    pair = recorded_pair("communication", "manual", tag="h200cpu")
    t = pair["nsys"]
    right = os_sleep_ms(t)
    assert checks.check_nsys_sleep(right, t).startswith("passed")
    assert checks.check_nsys_sleep({str(r): v * 1.01 for r, v in right.items()}, t).startswith("passed")
    every = os_sleep_ms(t, set(t.events.loc[t.events["kind"] == "osrt", "name"]))
    for wrong, words in (({r: v * 5 for r, v in right.items()}, "total over its 5 steps"),
                         (every, "every OS call"), ({0: right[1], 1: right[0]}, "other rank's figure"),
                         ({0: right[0] * 1000, 1: right[1]}, "1000 times")):
        with pytest.raises(checks.CheckFailed, match=words):
            checks.check_nsys_sleep(wrong, t)
    with pytest.raises(checks.CheckFailed, match="Nsight Systems export"):
        checks.check_nsys_sleep(right, pair["profiler"])
