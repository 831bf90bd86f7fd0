"""Timing verdicts measure their own noise: better/worse only outside the band, a slower fix never passes."""

from __future__ import annotations

import pandas as pd
import pytest
from test_lab01 import OK_LOADER, mine

from helpers import checks, render
from helpers import metrics as m
from helpers.course import recorded


def _scaled(t, factor: float):
    """The trace with every time (events and steps) multiplied by ``factor``."""
    ev, steps = t.events.copy(), t.steps.copy()
    for frame in (ev, steps):
        for col in ("start_us", "end_us", "dur_us"):
            frame[col] = frame[col].astype(float) * factor
    out = mine(t, ev)
    out.metadata["steps"] = steps
    return out  # (the stamp digests the events only)


def test_a_no_op_change_reads_within_noise():
    b = mine(recorded("data_stall", "broken", "cpu"))
    same = _scaled(recorded("data_stall", "broken", "cpu"), 1.03)  # 3% slower: well inside 5 noisy steps' band
    text = render.compare_text(m.comparison(b, same))
    row = next(line for line in text.splitlines() if line.strip().startswith("step time"))
    assert "within noise" in row and "better" not in row and "worse" not in row
    assert m.timing_verdict(b, same) == "within noise"
    assert m.timing_verdict(b, mine(recorded("data_stall", "fixed", "cpu"))) == "faster"


def test_change_text_words_outside_the_band():
    assert render.change_text(10.0, 5.0, "lower", noise=1.0) == "2.00x less (better)"
    assert render.change_text(10.0, 9.5, "lower", noise=1.0).endswith("(within noise: +/- 1)")
    assert render.change_text(10.0, 9.5, "lower") == "1.05x less (better)"  # no band: no claim of noise


def test_a_slower_fix_never_passes(monkeypatch):
    """num_workers=1: worker processes, a lower data wait, but the step slower beyond noise (57.8 -> 68.8 ms once),
    on a machine with a core for each worker and the training process (on one without, the step time cannot show
    the loader's gain and is not judged: helpers.checks.speed.too_few_cores; tests/test_speed_judged.py)."""
    monkeypatch.setattr("helpers.checks._core._cores_busy", lambda workers=None: "")
    monkeypatch.setattr("helpers.checks.speed.cores", lambda: 16)  # OK_LOADER asks for 8 workers
    b = mine(recorded("data_stall", "broken", "cpu"))
    slower = _scaled(recorded("data_stall", "fixed", "cpu"), 2.2)  # the fixed loop's structure, 28 ms a step
    assert m.timing_verdict(b, slower) == "slower"
    with pytest.raises(checks.CheckFailed, match=r"your step is slower: median 22\.8 -> 29\.\d ms \(0\.\d+x\), beyond the noise band"):
        checks.check_data_stall_fixed(b, slower, 1.3, OK_LOADER)


def test_too_busy_only_when_measured(monkeypatch):
    from helpers.checks import lab01

    b, f = mine(recorded("data_stall", "broken", "cpu")), mine(recorded("data_stall", "fixed", "cpu"))
    monkeypatch.setattr("helpers.checks._core._cores_busy", lambda workers=None: "")
    assert lab01._busy(b, f) == ""  # quiet steps (3-4% spread) and no load: not "too busy"
    monkeypatch.setattr("helpers.checks._core._cores_busy", lambda workers=None: "load average 3.0 on 2 cores")
    assert lab01._busy(b, f) == "load average 3.0 on 2 cores"
    assert isinstance(m.comparison(b, f), pd.DataFrame) and "noise" in m.comparison(b, f).columns


def test_timing_text_says_when_noise_decides():
    def band(b, a, spread=0.05):
        return {"before_ms": b, "after_ms": a, "band_ms": 1.0, "before_spread": spread, "after_spread": spread}

    text = render.timing_text([band(20, 10), band(21, 10)], ["faster", "faster"], 0.25)
    assert text.splitlines()[0].startswith("round 1: step 20 -> 10 ms (noise band +/- 1 ms")
    assert text.endswith("timing: faster in every round, beyond the noise band")
    mixed = render.timing_text([band(20, 10), band(10, 20)], ["faster", "slower"], 0.25)
    assert "noise decides: the rounds disagree (faster, slower)" in mixed
    busy = render.timing_text([band(20, 10, 0.4), band(20, 10)], ["too noisy", "faster"], 0.25)
    assert "noise decides: a run's steps spread more than 25%" in busy and "faster in every round" not in busy
    assert render.timing_text([band(20, 20)], ["within noise"], 0.25).splitlines()[-1].startswith("timing: no change beyond")
    # the band quoted is the one the verdict used: at least SPEED_SLOWER_FLOOR (5%) of a 40 ms step, not the spread's 1 ms
    wide = render.timing_text([band(40, 41)], ["within noise"], 0.25)
    assert "(noise band +/- 2 ms (the runs' spread gives 1; at least 5% of the step)" in wide


def _jittered(t, factors: list[float]):
    """``t`` (a copy of its own, as :func:`_scaled` makes) with its steps' lengths multiplied by ``factors`` in turn."""
    steps = t.steps.copy()
    f = (factors * len(steps))[: len(steps)]
    steps["dur_us"] = steps["dur_us"].to_numpy() * f
    steps["end_us"] = steps["start_us"] + steps["dur_us"]
    t.metadata["steps"] = steps
    return t


BUSY = [0.8, 1.2, 1.0, 1.25, 0.75]  # a 30% spread, over NOISE_BUSY_SPREAD


def test_noise_decides_only_where_it_could_have_made_the_verdict():
    """A busy machine only lengthens steps: a run that came out faster stays faster however its own steps spread,
    once the difference is beyond the band its spread widens (a fix 5.8x faster was called "too noisy to tell" for
    the spread of its 2.6 ms steps). Where the slower run is the noisy one, or the difference is inside the band,
    noise decides."""
    from helpers import thresholds as th

    before = mine(recorded("data_stall", "broken", "cpu"))
    fast = _jittered(_scaled(recorded("data_stall", "fixed", "cpu"), 0.25), BUSY)
    band = m.step_time_band(before, fast)
    assert band["after_spread"] > th.NOISE_BUSY_SPREAD >= band["before_spread"]  # the case: only the faster run noisy
    assert m.timing_verdict(before, fast) == "faster"
    assert m.timing_verdict(fast, before) == "slower"  # either way round: the noisy run is the faster one
    same = _jittered(_scaled(recorded("data_stall", "broken", "cpu"), 1.0), BUSY)
    assert m.timing_verdict(before, same) == "too noisy"  # inside the band: noise decides, not "within noise"
    noisy_slow = _jittered(_scaled(recorded("data_stall", "broken", "cpu"), 4.0), BUSY)
    assert m.timing_verdict(before, noisy_slow) == "too noisy"  # the noisy run is the slower one: it may be load
    assert m.timing_verdict(noisy_slow, before) == "too noisy"
    quiet_slow = _scaled(recorded("data_stall", "broken", "cpu"), 4.0)
    assert m.timing_verdict(before, quiet_slow) == "slower"  # the same pair with quiet steps: judged
