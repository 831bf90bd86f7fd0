"""Lab 03's checks: the reading, the scan of the learner's step and the fix judged from their own trace.

For each check: the reference passes, the unsolved stub fails, and plausible wrong answers fail with
a message naming what the learner's code or trace shows (".item() moved but a .cpu() left").
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, as_learners, shipped_notebook
from conftest import own_capture as _stamp  # stands in for helpers.capture in this process
from synth import Ev, write_json

import helpers
from helpers import checks, diagnose, metrics, plots, syncscan
from helpers.course import recorded
from helpers.selfcheck import item_status
from helpers.workloads import sync_stall

CPU = torch.device("cpu")


def as_mine(workload: str, variant: str, tmp_path: Path):
    src = Path(recorded(workload, variant).source)
    dst = tmp_path / f"mine_{src.name}"
    shutil.copy(src, dst)
    from conftest import own_capture as _stamp  # stands in for helpers.capture in this process

    return _stamp(helpers.load(dst))


# --- the learner's step functions: the reference and plausible wrong answers --------------------
def reference_step(model, opt, xs, ys, log):
    """The solution notebook's my_fixed_step."""
    running: dict = {"loss": None, "correct": None}

    def step(i: int) -> None:
        with helpers.annotate(sync_stall.PREP_RANGE):
            x, y = sync_stall.get_batch(i, xs, ys)
        with helpers.annotate("forward"):
            out = model(x)
            loss = F.cross_entropy(out, y)
        with helpers.annotate("backward"):
            loss.backward()
        with helpers.annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        with helpers.annotate("logging"):
            correct = (out.argmax(1) == y).sum()
            running["loss"] = loss.detach() if running["loss"] is None else running["loss"] + loss.detach()
            running["correct"] = correct if running["correct"] is None else running["correct"] + correct
            if (i + 1) % sync_stall.LOG_EVERY == 0:
                n = sync_stall.LOG_EVERY
                log.append(f"loss={running['loss'].item() / n:.4f} acc={running['correct'].item() / (n * len(y)):.3f}")
                running["loss"] = running["correct"] = None

    return step


def cpu_left_step(model, opt, xs, ys, log):
    """Wrong answer: the .item() reads moved to every N steps, but the accuracy still goes through .cpu() each step."""
    running: dict = {"loss": None, "acc": 0.0}

    def step(i: int) -> None:
        with helpers.annotate(sync_stall.PREP_RANGE):
            x, y = sync_stall.get_batch(i, xs, ys)
        with helpers.annotate("forward"):
            out = model(x)
            loss = F.cross_entropy(out, y)
        with helpers.annotate("backward"):
            loss.backward()
        with helpers.annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        with helpers.annotate("logging"):
            running["loss"] = loss.detach() if running["loss"] is None else running["loss"] + loss.detach()
            running["acc"] = running["acc"] + (out.argmax(1).cpu() == y.cpu()).float().mean()
            if (i + 1) % sync_stall.LOG_EVERY == 0:
                log.append(f"loss={running['loss'].item() / sync_stall.LOG_EVERY:.4f}")
                running["loss"] = None

    return step


def item_every_step(model, opt, xs, ys, log):
    """Wrong answer: the syncs around it removed, but the loss still read with .item() every step."""

    def step(i: int) -> None:
        with helpers.annotate(sync_stall.PREP_RANGE):
            x, y = sync_stall.get_batch(i, xs, ys)
        with helpers.annotate("forward"):
            loss = F.cross_entropy(model(x), y)
        with helpers.annotate("backward"):
            loss.backward()
        with helpers.annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        with helpers.annotate("logging"):
            log.append(f"loss={loss.item():.4f}")

    return step


def no_training(model, opt, xs, ys, log):
    """Wrong answer: "no syncs" by leaving the training out (backward named only so the scan reads a step)."""

    def step(i: int) -> None:
        with helpers.annotate("forward"):
            model(xs[i % 8][:4])  # and no loss.backward()

    return step


# --- exercise 1: the reading -----------------------------------------------------------------
def _reference_reading(t) -> checks.Reading:
    ev = t.events
    origin, n_steps = plots.time_origin_us(t), len(t.steps)
    gaps = metrics.idle_gaps(t)
    syncs = ev[metrics.sync_point_calls(t) & (ev["step"] >= 0)]
    gap = gaps.sort_values("dur_us").iloc[-1]
    return checks.Reading("sync_stall", ((gap.start_us - origin) / 1e3, (gap.end_us - origin) / 1e3),
                          {"sync_points_per_step": len(syncs) / n_steps},
                          metrics.idle_cost_by_cause(t)["sync"] / t.steps["dur_us"].sum())


def test_reading_reference_passes_and_wrong_readings_say_what_the_trace_shows():
    t = recorded("sync_stall", "broken")
    good = _reference_reading(t)
    out = checks.check_reading(good, t, "sync", "broken loop")
    assert out.startswith("passed") and "sync_stall" in out
    with pytest.raises(checks.CheckFailed, match="not complete"):
        checks.check_reading(None, t, "sync")
    # the eager reader: the white stretch sits in the batch preparation, so "a data stall"
    with pytest.raises(checks.CheckFailed, match="data_stall is not what holds this loop back.*just after a host sync"):
        checks.check_reading(checks.Reading("data_stall", good.window_ms, {"host_data_wait_ms_per_step": 5.6}, 0.3), t, "sync")
    # a window over the forward pass, where the GPU is busy
    busy = (good.window_ms[1] + 0.5, good.window_ms[1] + 2.5)
    with pytest.raises(checks.CheckFailed, match="in your window .* the GPU is busy"):
        checks.check_reading(checks.Reading("sync_stall", busy, good.evidence, good.cost), t, "sync")
    # the host's blocked share given as the cost
    with pytest.raises(checks.CheckFailed, match="cost of 80%"):
        checks.check_reading(checks.Reading("sync_stall", good.window_ms, good.evidence, 0.80), t, "sync")


# --- exercise 2a: the scan of the learner's function ---------------------------------------------
def test_scan_passes_the_reference_and_names_the_cpu_line_left():
    assert checks.check_sync_scan_clean(reference_step).startswith("passed")
    with pytest.raises(checks.CheckFailed, match=r"1 line of cpu_left_step still syncs on every step: line \d+: "
                                                 r"`running\[\"acc\"\] = .*\.cpu\(\).*` \(\.cpu\(\)"):
        checks.check_sync_scan_clean(cpu_left_step)
    with pytest.raises(checks.CheckFailed, match=r"item_every_step still sync.*loss\.item\(\)"):
        checks.check_sync_scan_clean(item_every_step)
    with pytest.raises(checks.CheckFailed, match=r"broken_step is the course's own code, not yours"):
        checks.check_sync_scan_clean(sync_stall.broken_step)
    with pytest.raises(checks.CheckFailed, match=r"fixed_step is the course's own code"):
        checks.check_sync_scan_clean(sync_stall._fixed_step)  # an importable reference earns nothing
    with pytest.raises(checks.CheckFailed, match="pass your step function itself"):
        checks.check_sync_scan_clean(syncscan.scan(reference_step))


def test_scan_refuses_the_unsolved_stub():
    nb = json.loads(shipped_notebook("labs/03_sync_stall.ipynb"))
    cell = next("".join(c["source"]) for c in nb["cells"] if "def my_fixed_step(" in "".join(c["source"]))
    path = Path("stub_cell.py")  # a file, so inspect can read the stub's source
    path.write_text("from helpers import course\n" + cell)
    ns: dict = {}
    exec(compile(path.read_text(), str(path.resolve()), "exec"), ns)
    with pytest.raises(checks.CheckFailed, match="is not a training step yet"):
        checks.check_sync_scan_clean(ns["my_fixed_step"])


def test_syncscan_marks_periodic_reads():
    src = ("def f(i, loss):\n    if (i + 1) % N == 0:\n        print(loss.item())\n    x = loss.cpu()\n"
           "    if step % 10 == 0 and i > 2:\n        v = float(loss)\n")
    sites = syncscan.scan_source(src)
    assert [(s.call, s.every_step) for s in sites] == [(".item()", False), ("print()", False), (".cpu()", True), ("float()", False)]
    assert [s.call for s in syncscan.every_step(sites)] == [".cpu()"]


# --- exercise 2b: the fix, judged from the learner's trace ---------------------------------------
@pytest.fixture(scope="module")
def cpu_before(tmp_path_factory):
    return helpers.capture(sync_stall.broken_step(*sync_stall.setup(CPU), []), steps=3,
                           out_dir=tmp_path_factory.mktemp("b"), name="before")


def _after(fn, tmp_path, name, steps=10):
    return helpers.capture(fn(*sync_stall.setup(CPU), []), steps=steps, out_dir=tmp_path, name=name)


def test_fix_reference_passes_live_and_the_stub_fails_naming_the_ops(tmp_path, cpu_before):
    after = _after(reference_step, tmp_path, "ref")
    assert checks.check_sync_fixed(cpu_before, after).startswith("passed")
    # the unsolved stub leaves the broken loop: every op that would sync is named, with its range
    with pytest.raises(checks.CheckFailed, match=r"4\.0 syncing ops per step.*aten::item in 'logging' 3\.0 per step.*aten::is_nonzero"):
        checks.check_sync_fixed(cpu_before, as_learners(cpu_before))
    with pytest.raises(checks.CheckFailed, match="runs only the course's code \\(sync_stall\\), none of yours"):
        checks.check_sync_fixed(cpu_before, cpu_before)


def test_item_every_step_fails_live(tmp_path, cpu_before):
    after = _after(item_every_step, tmp_path, "item", steps=3)
    with pytest.raises(checks.CheckFailed, match=r"1\.0 syncing ops per step.*aten::item in 'logging' 1\.0 per step \(\.item\(\)"):
        checks.check_sync_fixed(cpu_before, after)


def test_a_step_that_stops_training_fails_live(tmp_path, cpu_before):
    after = _after(no_training, tmp_path, "none", steps=3)
    with pytest.raises(checks.CheckFailed, match="optimizer steps a step, the loop as first written|calls the model.s layers .* keep the whole training step"):
        checks.check_sync_fixed(cpu_before, after)


def gpu_logging_loop(steps: int = 4, to_cpu: int = 2, items: int = 0) -> list[Ev]:
    """Steps of one 600 us kernel, then a 'logging' range where the host copies ``to_cpu`` tensors to the
    host (aten::to -> cudaMemcpyAsync + cudaStreamSynchronize) and reads ``items`` scalars."""
    us = 1000
    out: list[Ev] = []
    t, corr = 0, 1
    for i in range(steps):
        s0 = t
        out.append(Ev("runtime", "cudaLaunchKernel", t + 2 * us, t + 8 * us, correlation=corr))
        out.append(Ev("kernel", "gemm", t + 10 * us, t + 610 * us, correlation=corr))
        corr += 1
        h = t + 20 * us
        log0 = h
        for name, n in (("aten::to", to_cpu), ("aten::item", items)):
            for _ in range(n):
                end = max(h + 40 * us, t + 615 * us)
                out.append(Ev("cpu_op", name, h, end))
                out.append(Ev("runtime", "cudaMemcpyAsync", h + 1 * us, h + 3 * us, correlation=corr))
                out.append(Ev("runtime", "cudaStreamSynchronize", h + 4 * us, end - 1 * us, correlation=corr + 1))
                corr += 2
                h = end + 5 * us
        out.append(Ev("annotation", "logging", log0, h + 5 * us))
        t = max(h + 300 * us, t + 1000 * us)  # the host prepares the next step while the GPU waits
        out.insert(0, Ev("annotation", f"ProfilerStep#{i}", s0, t))
    return out


def test_cpu_left_in_the_loop_fails_on_a_gpu_trace_naming_the_op(tmp_path):
    before = _stamp(helpers.load(write_json(gpu_logging_loop(to_cpu=2, items=3), tmp_path / "before.json")))
    after = _stamp(helpers.load(write_json(gpu_logging_loop(to_cpu=2, items=0), tmp_path / "after.json")))
    with pytest.raises(checks.CheckFailed, match=r"Your trace still has 2\.0 sync points per step \(the broken loop: 5\.0.*"
                                                 r"aten::to in 'logging' 2\.0 per step \(\.cpu\(\) / \.to\('cpu'\)\)"):
        checks.check_sync_fixed(before, after)
    clean = _stamp(helpers.load(write_json(gpu_logging_loop(to_cpu=0, items=0), tmp_path / "clean.json")))
    assert checks.check_sync_fixed(before, clean).startswith("passed")


def test_recorded_fixed_trace_passes_as_the_learners_own_and_the_courses_earns_nothing(tmp_path):
    before, after = as_mine("sync_stall", "broken", tmp_path), as_mine("sync_stall", "fixed", tmp_path)
    assert checks.check_sync_fixed(before, after).startswith("passed")
    with pytest.raises(checks.CheckFailed, match=r"6\.0 sync points per step.*aten::item in 'logging' 2\.0.*aten::to in 'logging' 2\.0"):
        checks.check_sync_fixed(before, as_learners(before))
    with pytest.raises(checks.CheckFailed, match="after .* is a capture of the same step as before"):
        checks.check_sync_fixed(before, before)
    with pytest.raises(checks.CheckFailed, match="recorded, not yours"):
        checks.check_sync_fixed(recorded("sync_stall", "broken"), recorded("sync_stall", "fixed"))


# --- the loop itself, credit, the lab's text ------------------------------------------------------
def test_the_batch_preparation_is_not_a_data_range(tmp_path, cpu_before):
    """Issue 9: the broken loop was also diagnosed data_stall (its NumPy prep sat in a 'data' range)."""
    assert metrics.data_wait(cpu_before)["data_wait_share"] == 0.0
    assert "data_stall" not in [f.pattern for f in diagnose(cpu_before)]
    assert not metrics.DATA_WAIT.search(sync_stall.PREP_RANGE)


def test_credit_is_reading_scan_and_fix():
    want = ("check_reading[broken loop]", "check_sync_scan_clean", "check_sync_fixed")
    assert checks.CREDIT["sync"] == {"gpu": want, "cpu": want}
    assert not item_status("sync", {"checks": {"check_sync_scan_clean": True, "check_sync_fixed": True}, "track": "cpu"})[0]
    assert item_status("sync", {"checks": dict.fromkeys(want, True), "track": "cpu"})[0]


def test_the_lab_names_no_pattern_before_the_reading():
    nb = json.loads((ROOT / "solutions" / "03_sync_stall.ipynb").read_text())
    cells = nb["cells"]
    first_check = next(i for i, c in enumerate(cells) if "checks.check_reading(" in "".join(c["source"]))
    prose = "\n".join("".join(c["source"]) for c in cells[:first_check] if c["cell_type"] == "markdown").lower()
    for word in ("sync", "stall", "wait", ".item()", ".cpu()"):
        assert word not in prose, word
    code = "\n".join("".join(c["source"]) for c in cells[:first_check] if c["cell_type"] == "code")
    assert "diagnose(" not in code and "findings" not in code and "syncscan" not in code
    everything = "\n".join("".join(c["source"]) for c in cells)
    assert "fixed_step" not in everything.replace("my_fixed_step", "") and 'make_step("fixed"' not in everything
    shown = sync_stall.broken_step.__doc__ + "".join(
        line for line in Path(sync_stall.__file__).read_text().split("def broken_step")[1].split("def _fixed_step")[0].splitlines(True)
        if "#" in line)
    assert "sync" not in shown.lower()


def test_a_longer_step_inside_the_noise_band_is_called_longer_not_not_slower():
    from helpers.checks.speed import band_words

    assert "longer here, but inside the noise band" in band_words(178.7, 241.3)  # 178.71 -> 241.32 ms: not "not slower"
    assert band_words(241.3, 178.7) == " (not slower beyond the noise band)"
    assert "machine's own slowdown is allowed for: 1.3x" in band_words(178.7, 241.3, "1.3x")
