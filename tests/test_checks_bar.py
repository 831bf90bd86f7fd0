"""A fix that earns credit is held to the course's bar, however the check is called: a bar is an argument
(``max_per_step=0.3``), and a learner who passes ``max_per_step=1e9``, ``min_gain=0`` or NaN once passed a fix that
fixed nothing."""

from __future__ import annotations

import math

import pytest
from test_lab03 import _after, cpu_before, item_every_step  # noqa: F401 - cpu_before is a fixture

from helpers import TraceError, checks
from helpers.checks._core import course_bar


@pytest.mark.parametrize("bar", [5.0, 1e9, float("nan"), float("inf"), True, "9"])
def test_a_looser_bar_does_not_pass_an_unfixed_loop(tmp_path, cpu_before, bar):  # noqa: F811
    after = _after(item_every_step, tmp_path, "item", steps=3)
    with pytest.raises((checks.CheckFailed, TraceError)) as exc:  # a bar that is not a number: refused as an argument
        checks.check_sync_fixed(cpu_before, after, max_per_step=bar)
    assert "passed" not in str(exc.value)


def test_the_stricter_bar_wins():
    assert course_bar(0.1, 0.3, at_least=False) == 0.1 and course_bar(9.0, 0.3, at_least=False) == 0.3
    assert course_bar(3.0, 1.5, at_least=True) == 3.0 and course_bar(0.0, 1.5, at_least=True) == 1.5
    assert all(course_bar(v, 1.5, at_least=True) == 1.5 for v in (math.nan, -math.inf, None, "2", True))
