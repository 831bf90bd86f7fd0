"""A fix's capture is of the loop its check judges: a good function passed beside a capture of another loop earns nothing.

The fix checks run the learner's function (their step, their update, their device copy) to see it still trains as
the loop as first written, then judge the structure and speed of a capture. Without a tie between the two, a learner
could pass a function that trains correctly and a capture of another loop of theirs, one that skips the optimizer,
the logging or the host's data preparation, and be credited for a faster loop that does less. The capture's stamp
names the learner's function the profiler called each step (``entry``, :func:`helpers.stamps.describe_step`); the
check's provenance stage (:func:`helpers.checks.provenance._tie_problem`) holds it to the judged function's steps.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
import torch
from conftest import own_capture

from helpers import course, stamps
from helpers.checks import exercise, provenance

#: The fix checks that judge a capture of the learner's training loop (lab, check): each reads the training and the
#: setup off the two timelines.
CAPTURE_FIX_CHECKS = [("workflow", "check_capstone"), ("sync", "check_sync_fixed"), ("data", "check_data_stall_fixed"),
                      ("callsites", "check_callsites_fixed")]


def _stamped(step_fn):
    """A made-up trace stamped as :func:`helpers.capture` of ``step_fn`` stamps its capture (no profiler run)."""
    t = course.recorded("data_stall", "broken", "cpu")
    t = replace(t, events=t.events.copy(), metadata={}, _memo={}, source="")
    return stamps.stamp(t, {"by": "capture", **stamps.describe_step(step_fn), "pace_ms": [1.0, 1.0]})


def _before():
    """The loop as first written: a capture of the course's loops (every workload), no code of the learner's."""
    t = course.recorded("data_stall", "broken", "cpu")
    return own_capture(replace(t, events=t.events.copy(), metadata={}, _memo={}, source=""), mine=False)


# --- the learner's functions, as a notebook's cells would have them -----------------------------------
def good_make_step(device):
    w = torch.zeros(4, requires_grad=True)

    def step(i):
        loss = (w * i).sum()
        loss.backward()
        with torch.no_grad():
            w.sub_(0.1 * w.grad)

    return step


def cheat_make_step(device):
    def step(i):  # the same loop without the backward and the update: faster, and trains nothing
        return torch.zeros(4).sum()

    return step


def _global_step(i, w):
    return (w * i).sum()


def partial_make_step(device):
    return functools.partial(_global_step, w=torch.zeros(4))


class Stepper:
    def __init__(self) -> None:
        self.w = torch.zeros(4)

    def __call__(self, i):
        return (self.w * i).sum()


def class_make_step(device):
    return Stepper()


def lambda_make_step(device):
    w = torch.zeros(4)
    return lambda i: (w * i).sum()


def my_update(params):
    for p in params:
        p.mul_(0.5)


def other_update(params):
    pass


@pytest.mark.tied
# --- lab 05 (step_of the function argument) and lab 11 ----------------------------------------------
def test_a_capture_of_another_step_than_the_judged_make_step_is_refused():
    ex = exercise.find("workflow", "check_capstone")
    before = _before()
    cheat = _stamped(cheat_make_step(torch.device("cpu")))
    problem = provenance.problems(ex, {"before": before, "after": cheat, "make_step": good_make_step})
    assert problem and "is a capture of another step than the one this check judges" in problem
    assert "good_make_step" in problem and "it timed cheat_make_step's step" in problem  # both steps named
    good = _stamped(good_make_step(torch.device("cpu")))
    assert provenance.problems(ex, {"before": before, "after": good, "make_step": good_make_step}) is None


@pytest.mark.tied
@pytest.mark.parametrize("make", [partial_make_step, class_make_step, lambda_make_step],
                         ids=["partial", "callable-object", "lambda"])
def test_a_step_returned_as_a_partial_an_object_or_a_lambda_is_still_the_judged_ones(make):
    ex = exercise.find("workflow", "check_capstone")
    after = _stamped(make(torch.device("cpu")))
    assert provenance.problems(ex, {"before": _before(), "after": after, "make_step": make}) is None
    assert "another step" in provenance.problems(ex, {"before": _before(), "after": after,
                                                      "make_step": good_make_step})


@pytest.mark.tied
def test_lab11_callsites_fix_times_the_step_its_fn_returns():
    ex = exercise.find("callsites", "check_callsites_fixed")
    cheat = _stamped(cheat_make_step(None))
    assert "another step" in provenance.problems(ex, {"fn": good_make_step, "before": _before(), "after": cheat})
    good = _stamped(good_make_step(None))
    assert provenance.problems(ex, {"fn": good_make_step, "before": _before(), "after": good}) is None


@pytest.mark.tied
# --- lab 03 (step_of another exercise's judged function) -----------------------------------------------
def test_lab03_sync_fix_times_a_step_check_sync_scan_clean_passed():
    ex = exercise.find("sync", "check_sync_fixed")
    scan = exercise.find("sync", "check_sync_scan_clean")
    good = _stamped(good_make_step(None))
    problem = provenance.problems(ex, {"before": _before(), "after": good})
    assert problem and "run check_sync_scan_clean(your step function) first" in problem  # nothing judged yet
    provenance.note_judged(scan, {"fn": good_make_step})
    assert provenance.problems(ex, {"before": _before(), "after": good}) is None
    cheat = _stamped(cheat_make_step(None))
    problem = provenance.problems(ex, {"before": _before(), "after": cheat})
    assert "another step" in problem and "helpers.capture(good_make_step(...))" in problem  # the judged one, by name


@pytest.mark.tied
def test_lab03_a_capture_of_the_judged_function_edited_since_its_scan_says_so():
    ex = exercise.find("sync", "check_sync_fixed")
    provenance.note_judged(exercise.find("sync", "check_sync_scan_clean"), {"fn": good_make_step})
    cell = {"__name__": __name__, "torch": torch}  # the same function's cell, edited and run again
    exec("def good_make_step(device):\n    def step(i):\n        return torch.ones(4).sum()\n\n    return step\n", cell)
    problem = provenance.problems(ex, {"before": _before(), "after": _stamped(cell["good_make_step"](None))})
    assert problem and "good_make_step's step as its cell defines it now" in problem
    assert "run check_sync_scan_clean(good_make_step) on this one first" in problem


@pytest.mark.tied
# --- labs 01 and 02 (runs: the traced loop calls the judged function) -------------------------------------
def test_lab02_launch_fix_times_a_loop_that_runs_the_judged_update():
    ex = exercise.find("launch", "check_launch_fixed")
    params = [torch.zeros(3)]

    def mine(i):
        my_update(params)

    def skips(i):
        other_update(params)

    assert provenance.problems(ex, {"before": _before(), "after": _stamped(mine), "update": my_update}) is None
    problem = provenance.problems(ex, {"before": _before(), "after": _stamped(skips), "update": my_update})
    assert problem and "never calls my_update" in problem


@pytest.mark.tied
def test_lab01_data_fix_times_a_loop_that_runs_the_judged_device_copy():
    ex = exercise.find("data", "check_data_stall_fixed")
    cached = torch.zeros(4)

    def my_to_device(batch):
        return batch

    def cheat_to_device(batch):
        return cached  # the first batch, every step: loading vanishes from the timeline

    def loop_of(copy):
        return lambda i: copy(torch.ones(4))

    args = {"before": _before(), "make_loader": good_make_step, "to_device": my_to_device}
    assert provenance.problems(ex, {**args, "after": _stamped(loop_of(my_to_device))}) is None
    assert "never calls my_to_device" in provenance.problems(ex, {**args, "after": _stamped(loop_of(cheat_to_device))})


@pytest.mark.tied
def test_a_real_capture_names_the_step_it_called(tmp_path):
    import helpers

    trace = helpers.capture(good_make_step(None), steps=1, warmup=0, wait=0, out_dir=tmp_path, name="tie")
    how = stamps.stamp_of(trace)
    assert how["entry"] in stamps.step_codes(good_make_step)
    assert how["entry"] not in stamps.step_codes(cheat_make_step)


# --- the timed loop still trains each step, read off the two timelines ----------------------------------------
def _without(trace, pattern):
    """A copy of ``trace`` without the host events whose name matches ``pattern`` (a loop that skips that work)."""
    ev = trace.events
    kept = ev[~ev["name"].astype(str).str.contains(pattern, regex=True)].reset_index(drop=True)
    return replace(trace, events=kept, metadata={k: v for k, v in trace.metadata.items() if k != "capture"}, _memo={},
                   source="")


@pytest.mark.parametrize("skipped,words", [(r"^Optimizer\.step#", "optimizer steps a step"),
                                           ("AccumulateGrad", "gradients accumulated a step")],
                         ids=["no-optimizer-step", "no-backward"])
@pytest.mark.parametrize("ex_key", CAPTURE_FIX_CHECKS, ids=lambda k: k[1])
def test_a_fix_whose_capture_skips_the_update_or_the_backward_is_refused_before_its_check_runs(ex_key, skipped, words):
    from helpers import checks

    ex = exercise.find(*ex_key)
    assert ex.trains
    t = course.recorded("mystery", "broken", "cpu")
    before = own_capture(_without(t, "^$"), mine=False)  # the recording as it is, its steps kept
    after = own_capture(_without(t, skipped))
    args = {"before": before, "after": after}
    if ex.function == "check_callsites_fixed":
        call = (good_make_step, before, after)
    elif ex.function == "check_sync_fixed":
        call = (before, after)
    else:
        call = (before, after, 1.3, good_make_step)
    assert args  # the same pair the engine reads
    with pytest.raises(checks.CheckFailed, match=words):
        getattr(checks, ex.function)(*call)


def test_the_training_read_off_a_timeline_counts_optimizer_steps_and_gradients():
    from helpers.checks import behaviour

    t = course.recorded("mystery", "broken", "cpu")
    assert behaviour._training_per_step(t) == ({"Adam": 1.0}, 14.0)
    assert behaviour.trace_training_problem(t, t) is None
    assert behaviour.trace_training_problem(_without(t, "^Optimizer"), t) is None  # keeping more is no problem


# --- lab 01: the fix's loop is fed the lab's dataset, in the lab's batches ---------------------------------------
def _data_stall_pair(after_loader, to_device=None):
    """(before, after): stamped as captures of data_stall's step over the broken loader and over ``after_loader``."""
    from torch.utils.data import DataLoader

    from helpers.workloads import data_stall

    cpu = torch.device("cpu")
    dataset = data_stall.AugmentedImages(length=64, size=8, blur_passes=1)
    before = _stamped(data_stall.make_step_from_loader(data_stall.broken_loader(dataset), cpu))
    loader = after_loader(dataset, DataLoader, data_stall)
    kwargs = {"to_device": to_device} if to_device else {}
    return before, _stamped(data_stall.make_step_from_loader(loader, cpu, **kwargs))


@pytest.mark.parametrize("loader,words", [
    (lambda ds, DL, w: [ds[0]] * 8, "no loader at all"),  # one cached batch, every step: loading vanishes
    (lambda ds, DL, w: DL(w.AugmentedImages(length=64, size=8, blur_passes=0), batch_size=w.BATCH_SIZE), "blur_passes"),
    (lambda ds, DL, w: DL(w.AugmentedImages(length=8, size=8, blur_passes=1), batch_size=w.BATCH_SIZE), "8 samples"),
    (lambda ds, DL, w: DL(ds, batch_size=2), "in batches of 2"),
], ids=["cached-list", "cheaper-samples", "fewer-samples", "smaller-batches"])
def test_a_data_fix_whose_loop_is_fed_less_or_cheaper_data_is_refused(loader, words):
    before, after = _data_stall_pair(loader)
    problem = provenance.same_data_problem(before, after)
    assert problem and "your capture's loop is fed from" in problem and words in problem


def test_a_data_fix_over_the_labs_dataset_with_workers_and_pinned_memory_is_fed_the_same():
    before, after = _data_stall_pair(lambda ds, DL, w: DL(ds, batch_size=w.BATCH_SIZE, shuffle=False, pin_memory=False,
                                                          num_workers=0, drop_last=True))
    assert provenance.same_data_problem(before, after) is None
    assert stamps.stamp_of(after)["loaders"][0]["dataset"].endswith("AugmentedImages")


def test_check_data_stall_fixed_refuses_a_capture_fed_from_a_cached_batch_before_running_anything():
    from helpers import checks

    def my_copy(batch, device):
        return batch

    before, after = _data_stall_pair(lambda ds, DL, w: [ds[0]] * 8, to_device=my_copy)
    with pytest.raises(checks.CheckFailed, match="no loader at all"):
        checks.check_data_stall_fixed(before, after, 1.3, good_make_step, my_copy)


# --- labs 01, 03, 05, 11: the fix is timed on the lab's setup ---------------------------------------------------
def my_sync_step(model, opt, xs, ys, log):
    def step(i):
        loss = torch.nn.functional.cross_entropy(model(xs[i % len(xs)]), ys[i % len(ys)])
        loss.backward()
        opt.step()
        opt.zero_grad()

    return step


def _smaller_batches(model, opt, xs, ys):
    return model, opt, xs[:, :8], ys[:, :8]


def _smaller_model(model, opt, xs, ys):
    from helpers.workloads import sync_stall

    small = sync_stall.make_model(xs.shape[-1], depth=1)
    return small, torch.optim.Adam(small.parameters(), lr=1e-4), xs, ys


def _other_lr(model, opt, xs, ys):
    return model, torch.optim.Adam(model.parameters(), lr=1e-2), xs, ys


@pytest.mark.parametrize("change,words", [(_smaller_batches, "tensor (8, 1024, 256) float32"),
                                          (_smaller_model, "model Sequential"),
                                          (_other_lr, "optimizer Adam lr 0.0001")],
                         ids=["smaller-batches", "smaller-model", "other-lr"])
@pytest.mark.parametrize("ex_key", CAPTURE_FIX_CHECKS, ids=lambda k: k[1])
def test_a_fix_timed_on_a_smaller_setup_than_the_loop_as_first_written_is_refused(ex_key, change, words):
    from helpers.workloads import sync_stall

    ex = exercise.find(*ex_key)
    assert ex.same_setup
    cpu = torch.device("cpu")
    before = _stamped(sync_stall.broken_step(*sync_stall.setup(cpu), []))
    problem = provenance.same_setup_problem(before, _stamped(my_sync_step(*change(*sync_stall.setup(cpu)), [])))
    assert problem and "is not set up as the loop as first written's" in problem and words in problem
    assert provenance.same_setup_problem(before, _stamped(my_sync_step(*sync_stall.setup(cpu), []))) is None


def test_check_sync_fixed_refuses_a_fix_timed_on_smaller_batches_before_reading_its_syncs():
    from helpers import checks
    from helpers.workloads import sync_stall

    cpu = torch.device("cpu")
    before = _stamped(sync_stall.broken_step(*sync_stall.setup(cpu), []))
    after = _stamped(my_sync_step(*_smaller_batches(*sync_stall.setup(cpu)), []))
    with pytest.raises(checks.CheckFailed, match="is not set up as the loop as first written's"):
        checks.check_sync_fixed(before, after)


# --- lab 00: the phase ranges hold the phases' work -------------------------------------------------------------
def test_lab00_phase_ranges_around_no_work_or_no_phases_asked_for_earn_nothing(tmp_path):
    import helpers
    from helpers import checks
    from helpers.profiling import annotate

    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.ones(4, 8)

    def train_step(i):
        with annotate("forward"):
            loss = model(x).square().mean()
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            opt.step()
            opt.zero_grad()

    def ranges_only(i):  # the three ranges, around nothing: no training step annotated
        for phase in ("forward", "backward", "optimizer"):
            with annotate(phase):
                pass

    good = helpers.capture(train_step, steps=2, warmup=0, wait=0, out_dir=tmp_path, name="good")
    assert checks.check_annotated_phases(good).startswith("passed")
    hollow = helpers.capture(ranges_only, steps=2, warmup=0, wait=0, out_dir=tmp_path, name="hollow")
    with pytest.raises(checks.CheckFailed, match="Phase ranges that hold none of their phase's work: 'forward', in every one of the 2 profiled steps"):
        checks.check_annotated_phases(hollow)
    with pytest.raises(checks.CheckFailed, match="hold none of their phase's work"):
        checks.check_annotated_phases(hollow, phases=())  # asking for no phase asks for the course's three


def test_lab02_cpu_fix_whose_capture_skips_the_backward_is_refused_and_its_own_update_is_no_problem():
    from helpers import checks

    t = course.recorded("launch_overhead", "broken", "cpu")
    before = own_capture(_without(t, "^$"), mine=False)
    own_update = own_capture(_without(t, r"^Optimizer\.step#"))  # an update of its own: no torch optimizer range
    assert exercise.find("launch", "check_launch_fixed").trains_gradients_on_cpu
    from helpers.checks import behaviour

    assert behaviour.trace_training_problem(before, own_update, optimizer=False) is None
    no_backward = own_capture(_without(t, "AccumulateGrad"))
    with pytest.raises(checks.CheckFailed, match="gradients accumulated a step"):
        checks.check_launch_fixed(before, no_backward, min_gain=1.5, update=my_update)
