"""What a check compares is plain: a learner's objects never judge themselves.

A str subclass whose ``__eq__`` says yes to everything, named as a reading's pattern, once passed check_reading
with the wrong pattern (and opened the trace's seal). Every check now gets plain copies of its arguments
(``_core.plain``: exact str/int/float, rebuilt lists, dicts and Readings; a class of the learner's own refused),
and a learner function's return value is made plain inside its thread, under the time limit.
"""

from __future__ import annotations

import inspect
import threading
import time

import pytest

from helpers import checks, diagnose
from helpers.checks import _core
from helpers.course import recorded


class Sly(str):
    """A pattern name that equals every other."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = str.__hash__


class AnyEq:
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


AnyEq.__module__ = "__main__"  # as a class typed in a notebook cell is


class Disguised:
    """Says it is a float (isinstance reads __class__), and is not one."""

    @property
    def __class__(self):  # noqa: ANN201
        return float


def _wrong_pattern_reading(trace):
    """A reading of a pattern the trace does not show, its figures measured truthfully for that pattern."""
    from helpers.checks.reading import want_cost
    from helpers.diagnosis import locate, signals
    from helpers.plots import time_origin_us

    shown = {f.pattern for f in diagnose(trace)}
    sg, o = signals(trace), time_origin_us(trace)
    for p in checks.EVIDENCE:
        fig = checks.EVIDENCE[p][0]
        cost = want_cost(p, trace, sg, None)
        loc = locate(trace, p)
        if p in shown or not isinstance(sg.get(fig), (int, float)) or cost is None or loc.window is None:
            continue
        return p, ((loc.window[0] - o) / 1e3, (loc.window[1] - o) / 1e3), {fig: float(sg[fig])}, cost
    raise AssertionError("no other pattern with figures in this trace")


@pytest.mark.parametrize("via", ["checks", "module"])
def test_a_pattern_name_that_equals_everything_does_not_pass_a_reading(via):
    from helpers.checks import reading

    t = recorded("data_stall", "broken")
    pattern, window, evidence, cost = _wrong_pattern_reading(t)
    check = checks.check_reading if via == "checks" else reading.check_reading
    with pytest.raises(checks.CheckFailed, match="is not what holds this loop back"):
        check(checks.Reading(pattern, window, evidence, cost), t, "data")
    with pytest.raises(checks.CheckFailed, match="is not what holds this loop back"):
        check(checks.Reading(Sly(pattern), window, evidence, cost), t, "data")


@pytest.mark.parametrize("field, value, says", [
    ("window_ms", "12", "window_ms must be two numbers"),  # text would read as (1, 2)
    ("window_ms", b"12", "window_ms must be two numbers"),  # bytes as (49, 50)
    ("window_ms", {1.0: 0, 2.0: 0}, "window_ms must be two numbers"),
    ("window_ms", (True, 3.0), "window_ms must be two numbers"),
    ("window_ms", ("1", "2"), "window_ms must be two numbers"),
    ("evidence", {"data_wait_share": True}, "every evidence value must be a number"),
    ("evidence", {"data_wait_share": "0.4"}, "every evidence value must be a number"),
    ("evidence", {1: 0.4}, "evidence must name each figure"),
    ("cost", True, "cost must be a share"),
    ("cost", "0.5", "cost must be a share"),
    ("pattern", AnyEq(), "holds a AnyEq, a class of your own"),
    ("evidence", {"data_wait_share": AnyEq()}, "a class of your own"),
])
def test_a_reading_of_the_wrong_types_is_refused(field, value, says):
    t = recorded("data_stall", "broken")
    fields = {"pattern": "data_stall", "window_ms": (1.0, 2.0), "evidence": {"data_wait_share": 0.4}, "cost": 0.5}
    fields[field] = value
    with pytest.raises(checks.CheckFailed, match=says) as exc:
        checks.check_reading(checks.Reading(**fields), t, "data")
    assert "\n" not in str(exc.value)


def test_every_check_compares_plain_values():
    loose = [n for n in dir(checks) if n.startswith("check_") and inspect.isfunction(getattr(checks, n))
             and not getattr(getattr(checks, n), "__plain__", False)]
    assert not loose


def test_plain_values():
    assert type(_core.plain(Sly("x"))) is str and _core.plain(Sly("x")) == "x"
    out = _core.plain({Sly("k"): [Sly("a"), (1.5, True)]})
    assert out == {"k": ["a", (1.5, True)]} and type(next(iter(out))) is str and type(out["k"][0]) is str
    with pytest.raises(checks.CheckFailed, match="a class of your own"):
        _core.plain([1, {"x": AnyEq()}])
    nested: list = []
    nested.append(nested)
    with pytest.raises(checks.CheckFailed, match="nested more than"):
        _core.plain(nested)


def test_what_a_learner_function_returns_is_plain_or_refused():
    got = _core.run_learner(lambda: {"bound": Sly("memory")}, returns=dict, note=False)
    assert type(got["bound"]) is str
    with pytest.raises(checks.CheckFailed, match="a class of your own"):
        _core.run_learner(lambda: AnyEq(), note=False)
    with pytest.raises(checks.CheckFailed, match="returned"):
        _core.learner_number(lambda: Disguised())


def test_an_exception_whose_text_never_ends_is_bounded(monkeypatch):
    monkeypatch.setattr(_core, "LEARNER_TIMEOUT_S", 0.3)
    release = threading.Event()

    class Stuck(Exception):
        def __str__(self) -> str:
            release.wait(30)
            return "late"

    def raises_stuck():
        raise Stuck()

    t0 = time.monotonic()
    try:
        with pytest.raises(checks.CheckFailed, match="did not return within"):
            _core.run_learner(raises_stuck, note=False)
    finally:
        release.set()
    assert time.monotonic() - t0 < 5

    def raises_long():
        raise ValueError("x" * 10_000_000)

    with pytest.raises(checks.CheckFailed) as exc:
        _core.run_learner(raises_long, note=False)
    assert len(str(exc.value)) < 400


def test_a_learner_function_that_never_returns_leaves_no_process(monkeypatch):
    import subprocess
    import sys

    monkeypatch.setattr(_core, "LEARNER_TIMEOUT_S", 0.5)
    started: list = []
    release = threading.Event()

    def spawns_and_hangs():
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        release.wait(30)

    def spawns_and_raises():
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        raise RuntimeError("boom")

    try:
        with pytest.raises(checks.CheckFailed, match=r"did not return within 0.5 s.*\(the 1 process it started was stopped\)"):
            _core.run_learner(spawns_and_hangs, note=False)
        with pytest.raises(checks.CheckFailed, match="raised RuntimeError: boom"):
            _core.run_learner(spawns_and_raises, note=False)
        for p in started:
            assert p.wait(timeout=5) == -9  # killed, not left sleeping
    finally:
        release.set()
        for p in started:
            p.kill()


def test_a_learner_function_that_prints_megabytes_is_capped(capsys):
    def noisy():
        for _ in range(20_000):
            print("x" * 99)
        print("y" * 1000, file=__import__("sys").stderr)
        return 1.0

    assert _core.run_learner(noisy, note=False) == 1.0
    out, err = capsys.readouterr()
    assert len(out) + len(err) < _core.PRINT_LIMIT + 200
    assert f"{2_001_001 - _core.PRINT_LIMIT:,} more characters your function printed are not shown" in err
    print("after")  # the check's own output is never capped
    assert capsys.readouterr().out == "after\n"


def _checks() -> dict:
    return {n: getattr(checks, n) for n in dir(checks) if n.startswith("check_") and inspect.isfunction(getattr(checks, n))}


@pytest.mark.parametrize("name", sorted(_checks()))
def test_every_check_refuses_a_value_of_the_wrong_kind_in_one_line(name):
    # pd.NA in every argument: the first one the check's hints hold (a trace, a number, text, a dict of answers, a
    # list, a table) is refused before the check runs, as a CheckFailed (the lab's one line) and a TraceError
    import pandas as pd

    from helpers.errors import CheckArgumentError, TraceError

    fn = _checks()[name]
    params = [p for p in inspect.signature(fn).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    args = {p.name: pd.NA for p in params if p.default is inspect.Parameter.empty}
    if not args:
        return
    try:
        fn(**args)
    except CheckArgumentError as exc:
        assert isinstance(exc, TraceError) and isinstance(exc, checks.CheckFailed) and "\n" not in str(exc)
        assert "=<NA>" in str(exc)
    except checks.CheckFailed as exc:  # a learner's function or a form the check explains itself
        assert "\n" not in str(exc) and "passed" not in str(exc)


def test_a_learner_call_that_never_returns_leaves_no_scratch_folder(monkeypatch):
    import os

    monkeypatch.setattr(_core, "LEARNER_TIMEOUT_S", 0.3)
    release = threading.Event()

    def writes_then_hangs(folder: str) -> None:
        with open(os.path.join(folder, "t.json"), "w") as fh:
            fh.write("{}")
        release.wait(30)

    try:
        with _core.scratch_dir("check-scratch-") as folder, pytest.raises(checks.CheckFailed, match="did not return"):
            _core.run_learner(writes_then_hangs, folder, note=False)
        assert not os.path.exists(folder)
    finally:
        release.set()


def test_a_window_of_two_numbers_in_any_sequence_is_taken():
    import numpy as np

    from helpers.checks.reading import _problems_with_form

    for window in ((1.0, 2.0), [1, 2], np.array([1.0, 2.0]), (np.float32(1.0), np.int64(2))):
        assert _problems_with_form(checks.Reading("data_stall", window, {"data_wait_share": 0.4}, 0.5)) is None


def test_a_checks_verdict_shows_in_a_notebook_wrapped_between_words_without_quotes():
    """JupyterLab breaks a returned string's repr anywhere, mid-word: a verdict shows as a failed check's words do."""
    import torch
    from IPython.lib.pretty import pretty

    from helpers import course

    if torch.cuda.is_available():
        pytest.skip("the CPU track's verdict")
    out = checks.check_h2d_fixed(course.recorded("h2d_copy", "broken"), None)
    shown = pretty(out)
    assert type(str(out)) is str and out == str(out) and repr(out) == repr(str(out))  # the very text otherwise
    assert not shown.startswith(("'", '"')) and len(shown.splitlines()) > 1
    assert all(len(line) <= course.SHOWN_WIDTH for line in shown.splitlines())
    assert shown.split() == out.split()  # wrapped between words: no word cut
