"""A machine slowed during one capture is no slower fix: the pace probe (helpers.capture) is the evidence.

In one CI run two solution notebooks (lab 02's and lab 11's fixes) failed "your step is slower" because the
machine ran 2-3x slower for the whole fixed capture: not the learner's doing. helpers.capture now times a fixed
reference workload just before and just after its profiled steps and the stamp keeps both figures; the fix
checks judge the step against the loop as first written at the measured pace, say so in the verdict, and still
refuse a slower fix on a machine at the same pace, or at a pace that explains only part of the slowdown.
"""

from __future__ import annotations

import math
import os

import pytest
from test_checks import mine
from test_noise_band import _scaled
from test_speed_judged import _own_update, _stretched

from helpers import checks, stamps
from helpers import thresholds as th
from helpers.checks import behaviour, speed
from helpers.course import recorded


def paced(t, pre: float, post: float):
    """``t`` (stamped here) with the pace probe's two figures helpers.capture records, in ms a run."""
    return stamps.stamp(t, {**stamps.stamp_of(t), "pace_ms": [pre, post]})


def _pair(factor: float, ops_too: bool):
    before = mine((recorded("launch_overhead", "broken", "cpu"),))[0]
    after = _stretched(_own_update(recorded("launch_overhead", "foreach", "cpu")), factor, ops_too=ops_too)
    return before, after


def test_a_machine_measured_3x_slower_explains_a_3x_slower_step():
    """The CI flake: the fixed capture's every step 3x longer, the probe 3x slower at both ends of it. The model's
    own ops are as fast as before (the machine took the core between them), so only the probe can say it."""
    from test_fake_fixes import _adam

    before, after = _pair(3.0, ops_too=False)
    assert "your step is slower" in behaviour.slower_than_the_machine(before, after)  # as the flake said it, no figures
    before, after = paced(before, 0.66, 0.64), paced(after, 1.98, 2.05)
    pace = speed.machine_pace(before, after)
    assert pace["ratio"] == pytest.approx(1.98 / 0.66) and pace["applied"] == pytest.approx(pace["ratio"])
    problem, note = behaviour.machine_verdict(before, after)
    assert problem == "" and "the machine ran 3.00x slower during your capture" in note
    assert "0.66 -> 1.98 ms a run" in note
    out = checks.check_launch_fixed(before, after, 1.5, update=_adam)
    assert out.startswith("passed") and "once the machine's own slowdown is allowed for: the machine ran 3.00x" in out
    # lab 01 / 05's judgement (no drift: a loader's workers are the fix's own load) reads the same probe
    assert speed.slower_problem(before, after) == "" and "3.00x slower" in speed.pace_note(before, after)


def test_a_slower_fix_on_a_machine_at_the_same_pace_is_refused():
    """The fixed step plus a sleep of twice its length, the probe as fast in both captures: slower, and the message
    says the machine was measured no slower."""
    before, after = _pair(3.0, ops_too=False)
    before, after = paced(before, 0.66, 0.64), paced(after, 0.65, 0.70)
    problem = speed.slower_problem(before, after)
    assert "your step is slower" in problem and "no slower during your capture beyond the probe's own noise" in problem
    assert "0.66 -> 0.65 ms a run" in problem and speed.pace_note(before, after) == ""
    problem, note = behaviour.machine_verdict(before, after)  # lab 02's, 03's and 11's judgement (drift and pace)
    assert "your step is slower" in problem and note == ""


def test_a_mildly_slower_machine_does_not_excuse_a_much_slower_step():
    """Probe 1.2x slower (within its noise), step 3x: refused. Probe 1.8x (beyond it), step 3x: still refused, the
    message giving both figures."""
    before, after = _pair(3.0, ops_too=False)
    mild = speed.slower_problem(paced(before, 1.0, 1.0), paced(after, 1.2, 1.25))
    assert "your step is slower" in mild and "1.20x" in mild
    before, after = _pair(3.0, ops_too=False)
    part = speed.slower_problem(paced(before, 1.0, 1.0), paced(after, 1.8, 1.9))
    assert "even with the machine 1.80x slower during your capture" in part and "1.00 -> 1.80 ms a run" in part


def test_a_slowdown_at_one_end_only_is_not_the_machine():
    """The fix's capture slow only after its last step (its own leftover work, a loader's workers still
    prefetching, or a disturbance that began at the end), or the first capture slow at one end: no factor."""
    before, after = _pair(3.0, ops_too=False)
    assert speed.machine_pace(paced(before, 1.0, 1.0), paced(after, 1.0, 3.0))["applied"] == 1.0
    assert "your step is slower" in speed.slower_problem(paced(before, 1.0, 1.0), paced(after, 1.0, 3.0))
    before, after = _pair(3.0, ops_too=False)
    assert speed.machine_pace(paced(before, 1.0, 3.0), paced(after, 3.0, 3.0))["applied"] == 1.0


def test_no_figures_no_tampering_judged_as_before():
    """A trace without the figures (loaded, older captures, Nsight) is judged as before; figures edited into a
    stamp break it, so they are not read."""
    before, after = _pair(3.0, ops_too=False)
    plain = speed.slower_problem(before, after)
    assert "your step is slower" in plain and "pace probe" not in plain
    assert math.isnan(speed.machine_pace(paced(before, 1.0, 1.0), after)["ratio"])
    after = paced(after, 3.0, 3.0)
    after.metadata["capture"]["how"]["pace_ms"] = [30.0, 30.0]  # edited: the token no longer matches
    assert stamps.stamp_of(after) is None and math.isnan(speed.machine_pace(paced(before, 1.0, 1.0), after)["ratio"])


def test_on_a_gpu_trace_only_the_hosts_share_takes_the_factor():
    """A CPU probe says nothing about a GPU slowed by another job: a GPU-bound step gets the factor on the share of
    the step its GPU sat idle only."""
    from helpers import metrics as m

    b = mine((recorded("launch_overhead", "graphs"),))[0]  # the graphed step: its GPU busy most of the step
    a = _scaled(recorded("launch_overhead", "graphs"), 3.0)
    u = max(m.gpu_utilization(b), m.gpu_utilization(a))
    assert u > 0.5
    pace = speed.machine_pace(paced(b, 1.0, 1.0), paced(a, 3.0, 3.0))
    assert pace["applied"] == pytest.approx(1 + 2.0 * (1 - u)) and pace["applied"] < 2.0
    # the step 3x slower on a host measured 3x slower: only its idle share is excused, so it is still refused
    problem = speed.slower_problem(paced(b, 1.0, 1.0), paced(a, 3.0, 3.0))
    assert "your step is slower" in problem and "the step the GPU sat idle" in problem


_W: dict = {}


def _small_step(i: int) -> None:
    """A small CPU step of the kind the labs' loops run (Python-level calls of tiny ops, matmuls), ~10 ms: long
    against the scheduler's time slices, so that a core shared with another process shows in its median."""
    import torch

    if not _W:
        g = torch.Generator().manual_seed(0)
        _W.update(a=torch.randn(128, 128, generator=g), b=torch.randn(128, 128, generator=g) / 128 ** 0.5)
    x, y = torch.ones(16), _W["a"]
    for _ in range(40):
        x = x.add(1.0).mul(0.5)
    for _ in range(60):
        y = torch.relu(y @ _W["b"])


def _burners(core: int, n: int) -> list:
    import subprocess
    import sys

    return [subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile 1: pass"])
            for _ in range(n)]


def _captures(tmp_path, core: int, spinners: int):
    """A capture of the small loop, then one with ``spinners`` processes spinning on ``core`` (this process held
    there too); a first capture whose own two figures disagree (other work came or went during it) is taken again."""
    import time

    import helpers

    for _ in range(3):
        first = helpers.capture(_small_step, steps=5, name="pace-quiet", out_dir=tmp_path)
        pre, post = stamps.stamp_of(first)["pace_ms"]
        if max(pre, post) / min(pre, post) < th.PACE_MIN_RATIO:
            break
    spinning = _burners(core, spinners)
    try:
        time.sleep(0.1)  # the spinners started
        second = helpers.capture(_small_step, steps=5, name="pace-busy", out_dir=tmp_path)
    finally:
        for p in spinning:
            p.kill()
            p.wait()
    return first, second


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_a_real_capture_records_its_pace_and_a_disturbed_one_is_judged_against_it(tmp_path):
    """helpers.capture on a small CPU loop, twice, this process held to one core and one intra-op thread; during the
    second, four processes spin on that core (each gets a fifth of it, a fifth of what other work leaves). The
    probe records that (the recorded ratio is checked, not a timing's luck), and the verdict judges the step at
    that pace and says so. The first core is taken: CI keeps the last one busy for the whole run. On a machine
    whose other work happened to slow the first capture as much, the pair is taken once more."""
    import torch

    cores, threads = os.sched_getaffinity(0), torch.get_num_threads()
    core = min(cores)
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    try:
        for _ in range(2):
            first, second = _captures(tmp_path, core, 4)
            if speed.machine_pace(first, second)["ratio"] > th.PACE_MIN_RATIO:
                break
    finally:
        os.sched_setaffinity(0, cores)
        torch.set_num_threads(threads)
    for t in (first, second):
        ends = stamps.stamp_of(t)["pace_ms"]
        assert len(ends) == 2 and all(x > 0 for x in ends)
    pace = speed.machine_pace(first, second)
    assert pace["ratio"] > th.PACE_MIN_RATIO, pace  # a fifth of the core at both ends of the second capture
    assert pace["applied"] == pytest.approx(pace["ratio"])  # no GPU: the whole step takes the factor
    # the verdict judged the step against the loop as first written at that factor, and says so whichever way it
    # went (a step follows the probe only roughly: whether this one stayed within PACE_FACTOR_ERROR is timing)
    problem, note = speed.speed_verdict(first, second)
    plain = speed.speed_verdict(first, mine((second,))[0])[0]  # the same captures without the figures: as before
    if plain:
        assert f"{pace['ratio']:.2f}x slower" in (problem or note), (problem, note)
        assert f"{pace['before_ms']:.2f} -> {pace['after_ms']:.2f} ms a run" in (problem or note)


def _verdict(before, after) -> str:
    from helpers import render
    from helpers.diff import work_diff

    d = work_diff(before, after)
    return render.verdict_text(d.step, d.steps)


@pytest.mark.parametrize("factor,pace_after", [(1.03, None), (1.03, 0.65), (3.0, None), (3.0, 0.65), (3.0, 1.98),
                                               (3.0, 1.2)])
def test_compare_says_slower_exactly_where_a_fix_check_would(factor, pace_after):
    """python -m helpers compare and the fix checks judge one pair the same way (metrics.pace.judge_step): a step
    slower only within the 5% floor is noise in both, a machine measured 3x slower explains a 3x slower step in
    both, and where the stamps carry the pace probe's figures compare quotes them."""
    before = mine((recorded("data_stall", "broken", "cpu"),))[0]  # 5 steps: a band
    after = _scaled(before, factor)
    if pace_after is not None:
        before, after = paced(before, 0.66, 0.64), paced(after, pace_after, pace_after + 0.02)
    problem, note = speed.speed_verdict(before, after)
    text = _verdict(before, after)
    assert text.startswith("slower: ") == bool(problem), text
    assert text.startswith("slower, within the machine's own slowdown") == bool(note), text
    if factor < 1.05:
        assert text.startswith("within noise")
    if pace_after is not None and factor > 1.05:
        assert f"0.66 -> {pace_after:.2f} ms a run" in text  # the probe's figures, as the checks quote them
    if pace_after is None and factor > 1.05:  # no figures (a file read from disk): the verdict says it cannot tell
        assert "no pace probe says whether the machine itself ran slower" in text
    if pace_after == 1.98:
        assert note and "3.00x slower during the second capture" in text


@pytest.mark.parametrize("host_us,slower", [(830, False), (900, True)])
def test_compare_allows_the_floor_the_checks_allow(tmp_path, host_us, slower):
    """Identical steps have a band of 0 ms: a step 3% longer is still within the SPEED_SLOWER_FLOOR (5%) every check
    allows (the profiler's own overhead), in compare's verdict, its table and the checks alike; 10% longer is slower
    in all three."""
    from synth import host_bound_loop, write_json

    from helpers import load, render
    from helpers import metrics as m

    before = load(write_json(host_bound_loop(steps=8), tmp_path / "before.json"))
    after = load(write_json(host_bound_loop(steps=8, host_us=host_us), tmp_path / "after.json"))
    assert m.step_time_band(before, after)["band_ms"] == pytest.approx(0.0, abs=1e-6)
    text = _verdict(before, after)
    row = next(line for line in render.compare_text(m.comparison(before, after)).splitlines() if "step time" in line)
    problem = speed.slower_problem(before, after)
    if slower:
        assert text.startswith("slower: ") and problem and "worse" in row
    else:
        assert text.startswith("within noise") and "5% of the step" in text and "profiler's own overhead" in text
        assert problem == "" and "within noise" in row and m.timing_verdict(before, after) == "within noise"
