"""Fixes that delete the work instead of fixing it are refused, with a message naming what is missing.

Each fake fix here removes the work a check must see instead of making it faster; the real fix beside
it still passes. The checks run the learner's functions on small CPU inputs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_lab03 import reference_step
from torch.utils.data import DataLoader, TensorDataset

import helpers
from helpers import checks
from helpers.checks import behaviour
from helpers.workloads import sync_stall

CPU = torch.device("cpu")


def _scan(fn):
    return checks.check_sync_scan_clean(fn)


# --- lab 03: the learner's step must still train and log ---------------------------------------
def no_logging_step(model, opt, xs, ys, log):
    def step(i: int) -> None:
        x, y = sync_stall.get_batch(i, xs, ys)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def fake_log_step(model, opt, xs, ys, log):
    def step(i: int) -> None:
        x, y = sync_stall.get_batch(i, xs, ys)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (i + 1) % sync_stall.LOG_EVERY == 0:
            log.append("loss=0.0000")  # a line, but not the loop's loss

    return step


def no_update_step(model, opt, xs, ys, log):
    def step(i: int) -> None:
        x, y = sync_stall.get_batch(i, xs, ys)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.zero_grad(set_to_none=True)  # the gradients dropped before the update: opt.step() does nothing
        opt.step()
        if (i + 1) % sync_stall.LOG_EVERY == 0:
            log.append(f"loss={loss.item():.4f}")

    return step


def one_batch_step(model, opt, xs, ys, log):
    running = {"loss": None}

    def step(i: int) -> None:
        x, y = sync_stall.get_batch(0, xs, ys)  # the same batch every step
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        d = loss.detach()
        running["loss"] = d if running["loss"] is None else running["loss"] + d
        if (i + 1) % sync_stall.LOG_EVERY == 0:
            log.append(f"loss={running['loss'].item() / sync_stall.LOG_EVERY:.4f}")
            running["loss"] = None

    return step


def reference_wrapper(model, opt, xs, ys, log):
    # loss.backward() appears in this comment only, and in the course's step it calls
    return sync_stall._fixed_step(model, opt, xs, ys, log)


def comment_only(model, opt, xs, ys, log):
    def step(i: int) -> None:
        pass  # x = model(x); loss.backward(); opt.step()

    return step


def test_lab03_real_fix_passes_fakes_refused():
    assert _scan(reference_step).startswith("passed")
    with pytest.raises(checks.CheckFailed, match="(?i)the logging is missing"):
        _scan(no_logging_step)
    with pytest.raises(checks.CheckFailed, match="(?i)the logging is missing"):
        _scan(fake_log_step)
    with pytest.raises(checks.CheckFailed, match="(?i)the update is missing"):
        _scan(no_update_step)
    with pytest.raises(checks.CheckFailed, match="(?i)the data is missing"):
        _scan(one_batch_step)


def test_sync_scan_reads_the_learners_own_syntax_tree():
    with pytest.raises(checks.CheckFailed, match="calls the course's own step .*_fixed_step"):
        _scan(reference_wrapper)
    with pytest.raises(checks.CheckFailed, match=r"calls no loss.backward\(\) and no opt.step\(\) \(a comment does not count\)"):
        _scan(comment_only)


# --- lab 01: the loader must give the dataset's own samples -------------------------------------
def real_loader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=2, persistent_workers=True)


def in_order_loader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size)


def cached_loader(dataset, batch_size):
    x, y = dataset[0]  # one sample, decoded once, repeated
    return DataLoader(TensorDataset(x.expand(len(dataset), *x.shape).clone(), torch.full((len(dataset),), y)),
                      batch_size=batch_size, num_workers=1)


def random_loader(dataset, batch_size):
    x, _ = dataset[0]
    return DataLoader(TensorDataset(torch.rand(len(dataset), *x.shape), torch.zeros(len(dataset), dtype=torch.long)),
                      batch_size=batch_size)


def test_lab01_loader_behaviour():
    from helpers.checks.lab01 import _probe_dataset
    from helpers.workloads import data_stall

    def problem(loader, to_device=None):
        return behaviour.loader_problem(loader, to_device, _probe_dataset, data_stall.BATCH_SIZE)

    assert problem(real_loader, lambda b, d: (b[0].to(d, non_blocking=True), b[1].to(d))) is None
    assert problem(in_order_loader) is None
    assert "the data is missing" in problem(cached_loader) and "distinct samples" in problem(cached_loader)
    assert "not the dataset's" in problem(random_loader)
    assert "other values" in problem(real_loader, lambda b, d: (torch.zeros_like(b[0]), b[1]))
    assert "batches of 4" in problem(lambda ds, bs: DataLoader(ds, batch_size=4))


def test_lab01_check_refuses_a_cached_sample_and_a_missing_loader(tmp_path):
    from test_lab01 import mine

    from helpers.course import recorded

    b, f = mine(recorded("data_stall", "broken", "cpu")), mine(recorded("data_stall", "fixed", "cpu"))
    with pytest.raises(checks.CheckFailed, match="pass your loader function too"):
        checks.check_data_stall_fixed(b, f, 1.3)
    with pytest.raises(checks.CheckFailed, match="(?i)the data is missing"):
        checks.check_data_stall_fixed(b, f, 1.3, cached_loader)
    assert checks.check_data_stall_fixed(b, f, 1.3, real_loader).startswith("passed")


# --- lab 02: the update is tested on the model's own parameters and random shapes ----------------
def _adam(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps):
    from test_lab02 import reference_update

    reference_update(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps)


def three_tensor_update(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps):
    """Right only on the old checker's three tensors (shapes (5, 3), (7,), (2, 2, 2)); the model is never touched."""
    if [tuple(p.shape) for p in params] == [(5, 3), (7,), (2, 2, 2)]:
        _adam(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps)


def copying_update(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps):
    """The maths on copies: the parameters it was given stay where they were."""
    _adam([p.clone() for p in params], grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps)


def test_lab02_update_checked_on_the_model_and_random_shapes():
    assert checks.lab02.adam_update_problem(_adam)[1] is None
    err, problem = checks.lab02.adam_update_problem(three_tensor_update)
    assert "the model's own parameters" in problem and "the update is missing" in problem
    assert "the update is missing" in checks.lab02.adam_update_problem(copying_update)[1]
    # the random case changes from call to call (a fresh seed), so no fixed set of shapes can be special-cased
    seen: set = set()

    def recording(params, *rest):
        seen.add(tuple(tuple(p.shape) for p in params))
        _adam(params, *rest)

    checks.lab02.adam_update_problem(recording)
    checks.lab02.adam_update_problem(recording)
    assert len(seen) == 3  # the model's parameters, and two different sets of random shapes


def test_lab02_check_needs_the_update_on_the_cpu_track(tmp_path):
    from test_lab02 import foreach_step

    from helpers.workloads import launch_overhead

    broken = helpers.capture(launch_overhead.make_step("broken", CPU), steps=2, out_dir=tmp_path, name="b")
    fixed = helpers.capture(foreach_step(_adam), steps=2, out_dir=tmp_path, name="f")
    with pytest.raises(checks.CheckFailed, match="pass your update too"):
        checks.check_launch_fixed(broken, fixed, 1.5)
    with pytest.raises(checks.CheckFailed, match="the update is missing"):
        checks.check_launch_fixed(broken, fixed, 1.5, update=three_tensor_update)
    assert checks.check_launch_fixed(broken, fixed, 1.5, update=_adam).startswith("passed")


# --- lab 05: the capstone's loop must train on the dataset's batches -----------------------------
def real_mystery_step(device):
    from helpers.workloads import mystery

    width, batch, passes = mystery.sizes(device)
    torch.manual_seed(0)
    loader = DataLoader(mystery.FeatureRows(width, passes), batch_size=batch, shuffle=True, num_workers=1)
    model = sync_stall.make_model(width).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    it = iter(loader)

    def step(i: int) -> None:
        x, y = next(it)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def fixed_batch_step(device):
    from helpers.workloads import mystery

    width, batch, passes = mystery.sizes(device)
    x, y = next(iter(DataLoader(mystery.FeatureRows(width, passes), batch_size=batch, shuffle=True)))
    model = sync_stall.make_model(width).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step(i: int) -> None:  # no data loading at all: one batch, every step
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def no_update_mystery_step(device):
    inner = real_mystery_step(device)
    model_step = inner

    def step(i: int) -> None:
        with torch.no_grad():  # forward only: nothing to update
            try:
                model_step(i)
            except RuntimeError:
                pass

    return step


def cheaper_rows_step(device):
    from helpers.workloads import mystery

    width, batch, passes = mystery.sizes(device)
    torch.manual_seed(0)
    loader = DataLoader(mystery.FeatureRows(width, passes // 10), batch_size=batch, shuffle=True)  # a tenth of the work
    model = sync_stall.make_model(width).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    it = iter(loader)

    def step(i: int) -> None:
        x, y = next(it)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def test_lab05_capstone_behaviour():
    assert behaviour.capstone_problem(real_mystery_step) is None
    assert "one fixed batch" in behaviour.capstone_problem(fixed_batch_step)
    cheaper = behaviour.capstone_problem(cheaper_rows_step)  # new batches each step, of rows the lab's dataset never gives
    assert "are not rows of the lab's dataset" in cheaper and "fixed batch" not in cheaper
    assert "the update is missing" in behaviour.capstone_problem(no_update_mystery_step)


def test_lab05_check_needs_the_step():
    from test_checks import b_f, mine

    before, after = mine(b_f("mystery"))
    with pytest.raises(checks.CheckFailed, match="pass your step function too"):
        checks.check_capstone(before, after, 1000.0)
    with pytest.raises(checks.CheckFailed, match="(?i)the data is missing.*not one fixed batch"):
        checks.check_capstone(before, after, 1000.0, fixed_batch_step)


# --- the learner's own trace: captured in this kernel, on the same track as its before ------------
def test_a_copied_recording_is_refused_as_the_learners_trace(tmp_path):
    import shutil
    from pathlib import Path

    from test_lab01 import mine

    from helpers.course import recorded
    from helpers.profiling import captured_here

    src = Path(recorded("data_stall", "fixed", "cpu").source)
    shutil.copy(src, tmp_path / "my_fixed.json.gz")  # copied out of data/: no longer under data/
    copied = helpers.load(tmp_path / "my_fixed.json.gz")
    before = mine(recorded("data_stall", "broken", "cpu"))
    assert not captured_here(copied)
    with pytest.raises(checks.CheckFailed, match=r"my_fixed.json.gz\) was not made in this notebook: it was loaded from a file"):
        checks.check_data_stall_fixed(before, copied, 1.3, real_loader)
    # a capture whose events were swapped for a recording's afterwards
    live = helpers.capture(lambda i: torch.ones(3).sum(), steps=2, out_dir=tmp_path, name="live")
    assert captured_here(live)
    live.events = copied.events
    assert not captured_here(live)
    # an H200 "after" against a CPU "before"
    gpu_after = mine(recorded("data_stall", "fixed"))
    with pytest.raises(checks.CheckFailed, match="'before' is a CPU-only trace and your 'after' a GPU trace"):
        checks.check_data_stall_fixed(before, gpu_after, 1.3, real_loader)


def test_a_copied_recording_cannot_be_stamped_as_captured_here(tmp_path):
    """The stamp certifies bytes this process's capture wrote: a loaded recording cannot acquire it, and a
    token taken from a real capture does not fit other events."""
    import shutil
    from pathlib import Path

    from helpers.course import recorded
    from helpers.errors import TraceError
    from helpers.profiling import _stamp, captured_here, events_digest

    copy = tmp_path / "mine.json.gz"
    shutil.copy(Path(recorded("data_stall", "fixed", "cpu").source), copy)
    copied = helpers.load(copy)
    with pytest.raises(TraceError, match="mine.json.gz: this trace was loaded, not captured here"):
        _stamp(copied)
    assert not captured_here(copied)
    live = helpers.capture(lambda i: torch.ones(3).sum(), steps=2, out_dir=tmp_path, name="live")
    again = helpers.load(live.source)  # the learner's own capture, loaded again: still theirs
    assert captured_here(_stamp(again))
    shutil.copy(copy, live.source)  # a recording copied over the capture's own file
    with pytest.raises(TraceError, match="loaded, not captured here"):
        _stamp(helpers.load(live.source))
    copied.metadata["capture"] = dict(live.metadata["capture"])  # the real capture's token, moved over
    assert not captured_here(copied)
    copied.metadata["capture"]["digest"] = events_digest(copied)
    assert not captured_here(copied)


# --- no answers before the learner looks -------------------------------------------------------
def test_lab01_exercise3_messages_do_not_give_exercise4s_answer():
    from helpers import metrics
    from helpers.course import recorded

    t = recorded("h2d_copy", "broken")
    facts = metrics.h2d_stats(t)
    wrong = checks.Reading("data_stall", (0.0, 1.0), {"data_stall_share": 0.5}, 0.5)
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_reading(wrong, t, "h2d", "h2d")
    message = str(info.value)
    assert "GB/s" not in message and f"{facts['gb_per_s']:.1f}" not in message
    assert "pageable" not in message.lower() and "pinned" not in message.lower()
