"""Fuzzing regular expressions: a user's step pattern (``--steps``, ``load(step_pattern=)``) against any
range names, and every pattern of the toolkit's own against hostile names.

The promise for a user's pattern: the steps Python's ``re.search`` finds, or, when matching would run
past the time limit, one line (TraceError) within that limit plus the child's start; never a hang,
whatever the pattern's shape (no list of "bad shapes": the limit holds for all). For the toolkit's own
patterns: each runs in time linear in the name, so a 20,000-character name costs well under a millisecond.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import signal
import time

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synth import Ev, two_step_loop, write_json

import helpers
from helpers import TraceError, procs
from helpers.cli import main
from helpers.model import build_events, find_steps

LONG = 3_000

# Pieces a pattern is built from: the shapes that backtrack (overlapping alternation, stacked or nested
# repeats, lookarounds, backreferences) next to ordinary ones.
atoms = st.sampled_from(["a", "aa", "b", ".", "\\d", "\\w", "[a-c]", "[^x]", "x", "step", "#", "_", "\\s", " "])


def _extend(inner):
    return st.one_of(
        st.tuples(inner, inner).map("".join),
        st.tuples(inner, inner).map(lambda t: f"(?:{t[0]}|{t[1]})"),
        st.tuples(inner, st.sampled_from(["*", "+", "?", "{2,}", "{1,3}", "*?"])).map("".join),
        inner.map(lambda t: f"({t})"),
        inner.map(lambda t: f"(?={t})"),
        inner.map(lambda t: f"(?!{t})"),
        inner.map(lambda t: f"({t})\\1"),
    )


patterns = st.tuples(st.sampled_from(["", "^"]), st.recursive(atoms, _extend, max_leaves=8),
                     st.sampled_from(["", "$", "!"])).map("".join)
names = st.lists(st.one_of(st.sampled_from(["ProfilerStep#1", "step 2", "train_step", "data", "a" * LONG,
                                            "a" * LONG + "b", "ab" * (LONG // 2), "x_" * (LONG // 2), " " * LONG]),
                           st.text(alphabet="ab x_#0123456789", max_size=40)), min_size=1, max_size=6)


def _events(range_names: list[str]) -> pd.DataFrame:
    n = len(range_names)
    return build_events({"name": range_names, "kind": ["annotation"] * n, "start_us": [i * 10.0 for i in range(n)],
                         "dur_us": [5.0] * n, "tid": [1] * n, "pid": [1] * n})


def _reference(pattern: str, range_names: list[str], limit_s: float) -> list[str] | None:
    """What re.search finds, or None when it runs past ``limit_s`` (an alarm stops it)."""
    def stop(signum, frame):
        raise TimeoutError

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        rx = re.compile(pattern, re.IGNORECASE)
        return sorted({n for n in range_names if rx.search(n)})
    except TimeoutError:
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs an interval timer for the reference")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pattern=patterns, range_names=names)
def test_a_step_pattern_finds_what_re_finds_or_stops_in_time(monkeypatch, pattern, range_names):
    monkeypatch.setattr(procs, "PATTERN_TIMEOUT_S", 1.0)
    started = time.monotonic()
    try:
        steps = find_steps(_events(range_names), pattern)
    except TraceError as exc:
        assert "\n" not in str(exc)
        if "not a regular expression" in str(exc):
            with pytest.raises(re.error):
                re.compile(pattern)
            return
        assert "did not finish within 1 s" in str(exc)
        assert time.monotonic() - started < 15  # the limit, plus the child's start on a busy machine
        assert _reference(pattern, range_names, 0.5) is None, "refused a pattern re runs in half the limit"
        return
    assert time.monotonic() - started < 15
    want = _reference(pattern, range_names, 5.0)
    if want is not None:
        ev = _events(range_names)
        got = sorted({ev["name"][ev["start_us"] == s].iloc[0] for s in steps["start_us"]})
        assert got == want


@pytest.mark.parametrize("pattern", [r"^(a|a)*$", r"^(?:a|aa)*$", r"^(?=(a|a)*!)", r"^.*.*.*.*.*.*x$",
                                     r"^(a+)+$", r"(x|y+)*z", r"(\w*)*$", r"^(a|a)*b$"])
def test_the_issues_patterns_on_a_3000_character_name(tmp_path, capsys, monkeypatch, pattern):
    """Each returns promptly: the right steps, or one line saying the pattern ran past the limit."""
    monkeypatch.setattr(procs, "PATTERN_TIMEOUT_S", 1.0)
    src = write_json([*two_step_loop(), Ev("annotation", "a" * LONG, 0, 10)], tmp_path / "t.json")
    started = time.monotonic()
    try:
        trace = helpers.load(src, pattern)
    except TraceError as exc:  # past the limit, or (a pattern that matches none of the ranges) refused as a typo is
        assert "did not finish within 1 s" in str(exc) or "matches no range" in str(exc)
    else:
        ranges = trace.events.loc[trace.events["kind"] == "annotation", "name"].tolist()
        want = _reference(pattern, ranges, 5.0)
        assert want is not None and len(trace.steps) == sum(n in want for n in ranges)
    status = main(["summary", str(src), "--steps", pattern])
    err = capsys.readouterr().err
    assert status in (0, 2) and (status == 0 or (err.startswith("error: ") and err.count("\n") == 1)), err
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("value, says", [(pd.NA, "as text"), (3, "as text"), (b"step", "as text"),
                                         ("(", "not a regular expression"), ("a{4294967296}", "not a regular expression"),
                                         ("(" * 5000 + ")" * 5000, "not a regular expression"),
                                         ("x" * 20_000, "over 10,000")])
def test_a_step_pattern_that_cannot_be_used_is_one_line(tmp_path, capsys, value, says):
    src = write_json(two_step_loop(), tmp_path / "t.json")
    with pytest.raises(TraceError, match=says):
        helpers.load(src, value)
    if isinstance(value, str):
        assert main(["summary", str(src), "--steps", value]) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1 and len(err) < 400, err


def _toolkit_patterns() -> list[tuple[str, re.Pattern]]:
    """Every compiled regular expression a module of the toolkit keeps at module level."""
    found = {}
    for info in pkgutil.walk_packages(helpers.__path__, "helpers."):
        if info.name.startswith(("helpers.workloads", "helpers.static")) or info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 - a module that needs torch or a GPU: its patterns are not reachable here
            continue
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern) and isinstance(value.pattern, str):
                found.setdefault(value.pattern, f"{info.name}.{name}")
    return [(where, re.compile(p, re.compile(p).flags)) for p, where in found.items()]


def test_the_toolkits_own_patterns_run_in_linear_time_on_hostile_names():
    patterns = _toolkit_patterns()
    assert len(patterns) >= 15
    n = 20_000  # a quadratic pattern takes seconds here, a linear one well under a millisecond a name
    hostile = ["a" * n, " " * n, "_" * n, "x_" * (n // 2), "0" * n, "(" * n, "<" * n, "ProfilerStep#" * (n // 13),
               "cuda" * (n // 4), "Memcpy " * (n // 7), "nccl" + "_" * n + "!", "step " * (n // 5), "a\n" * (n // 2)]
    for where, rx in patterns:
        started = time.perf_counter()
        for name in hostile:
            rx.search(name)
            rx.match(name)
        took = time.perf_counter() - started
        assert took < 1.0, f"{where} ({rx.pattern[:60]!r}) took {took:.2f} s on {n:,}-character names"
