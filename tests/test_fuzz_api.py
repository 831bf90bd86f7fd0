"""Fuzzing the API: any scalar (or wrong object) as any argument of any public function, and any edit of a
trace's events table between two calls.

The promises: a value a function cannot use is one TraceError line naming the function and the argument
(CheckFailed from a check), never an AttributeError or TypeError from deep inside; and a trace whose table
was edited in place, filtered, shuffled or replaced is analysed as it now is (the same answer as a trace
built from that table afresh), never from figures cached before the edit, or refused in one line.
"""

from __future__ import annotations

import inspect
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synth import two_step_loop, write_json

import helpers
from helpers import TraceError, checks, export, metrics, plots
from helpers.errors import CheckFailed

SCALARS = [pd.NA, None, float("nan"), float("inf"), -float("inf"), np.float64(1.5), np.int64(3), np.float32("nan"),
           np.bool_(True), True, 0, -1, 10**30, 1e308, "", "x", b"x", pd.NaT, np.datetime64("NaT"), [], {}, (),
           (pd.NA, 5.0), (1.0,), (1.0, 2.0, 3.0), (float("nan"), 1.0), ("a", "b"), object(), np.array([]),
           np.array([1.0, np.nan]), pd.Series([1.0]), complex(1, 1), Ellipsis]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return helpers.load(write_json(two_step_loop(), tmp_path_factory.mktemp("api") / "t.json"))


def _public() -> dict:
    out = {f"helpers.{n}": getattr(helpers, n) for n in ("diagnose", "steady_state", "critical_path", "what_if")}
    out.update({f"metrics.{n}": getattr(metrics, n) for n in metrics.__all__
                if inspect.isfunction(getattr(metrics, n)) and not n.startswith("_") and n != "name_mask"})
    out.update({f"plots.{n}": getattr(plots, n) for n in ("timeline", "compare", "gap_histogram", "step_breakdown", "explore")})
    out.update({"export.export": export.export, "export.to_chrome_trace": export.to_chrome_trace})
    out.update({f"checks.{n}": getattr(checks, n) for n in ("check_longest_gap", "check_data_wait_share",
                                                             "check_read_h2d_bandwidth", "check_compile_seconds")})
    return out


PUBLIC = _public()


def _arguments(fn, trace, tmp_path) -> dict:
    """Arguments a call of ``fn`` can succeed with (a trace, an output path, arrays, a number)."""
    hints = {}
    try:
        import typing

        hints = typing.get_type_hints(inspect.unwrap(fn))
    except Exception:  # noqa: BLE001
        pass
    args = {}
    for p in inspect.signature(fn).parameters.values():
        if p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        hint = hints.get(p.name)
        args[p.name] = (trace if hint is helpers.Trace else tmp_path / "out.json" if p.name == "path" else
                        {"kernel": 0.5} if p.name == "factors" else np.array([0.0, 10.0]) if hint is np.ndarray else
                        1.0 if hint in (float, int) else "label" if hint is str else trace)
    return args


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(PUBLIC)), which=st.integers(0, 20), value=st.sampled_from(SCALARS))
def test_any_value_as_any_argument_is_a_result_or_one_line(trace, tmp_path_factory, name, which, value):
    import matplotlib.pyplot as plt

    fn = PUBLIC[name]
    params = [p for p in inspect.signature(fn).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    tmp = tmp_path_factory.mktemp("out")
    args = _arguments(fn, trace, tmp)
    target = params[which % len(params)].name
    args[target] = value
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(**args)
    except (TraceError, CheckFailed) as exc:
        assert "\n" not in str(exc).strip() and str(exc).strip(), (name, target, value)
    finally:
        plt.close("all")


def test_the_issues_calls(trace, tmp_path):
    cases = [lambda: helpers.diagnose(pd.NA), lambda: helpers.diagnose(np.float64(1)),
             lambda: helpers.diagnose(trace.events), lambda: plots.explore(None),
             lambda: helpers.load(str(trace.source), step_pattern=pd.NA),
             lambda: plots.timeline(trace, window_ms=pd.NA), lambda: plots.timeline(trace, window_ms=(pd.NA, 1.0)),
             lambda: plots.explore(trace, window_ms=pd.NA), lambda: export.export(trace, pd.NA),
             lambda: checks.check_longest_gap(pd.NA, trace)]
    for case in cases:
        with pytest.raises(TraceError) as exc:
            case()
        assert "\n" not in str(exc.value)
    with pytest.raises(TraceError, match=r"diagnose\(\): trace=.*give a Trace"):
        helpers.diagnose(trace.events)
    with pytest.raises(ValueError):  # a step the trace lacks is also a ValueError, as it always was
        plots.timeline(trace, step=99)


# --- the events table edited between two calls -------------------------------------------------------------

def _findings(trace) -> list:
    return [(f.pattern, round(f.cost, 6)) for f in helpers.diagnose(trace)]


EDITS = {
    "drop rows in place": lambda ev: ev.drop(ev.index[ev["kind"] == "kernel"][:1], inplace=True),
    "drop the first rows in place": lambda ev: ev.drop(ev.index[:3], inplace=True),
    "shuffle rows": lambda ev: ev.sample(frac=1, random_state=1),
    "filter": lambda ev: ev[ev["kind"] != "memcpy"],
    "a kernel made shorter": lambda ev: ev.loc.__setitem__((ev["kind"] == "kernel", "dur_us"), 1.0),
    "index relabelled": lambda ev: ev.set_axis(ev.index + 1000, axis=0),
    "a column dropped": lambda ev: ev.drop(columns=["host_memory"]),
    "kind as text": lambda ev: ev.assign(kind=ev["kind"].astype(str)),
    "names as plain text": lambda ev: ev.assign(name=ev["name"].astype(object), lane=ev["lane"].astype(str)),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_trace_edited_between_calls_is_analysed_as_it_now_is(trace, edit):
    warnings.simplefilter("ignore", DeprecationWarning)
    t = helpers.load(str(trace.source))
    _findings(t)  # fills the caches
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = EDITS[edit](t.events)
    if out is not None:  # an edit that returns a new table: the user assigns it
        t.events = out
    now = _findings(t)
    fresh = helpers.Trace(t.events.copy().reset_index(drop=True), t.source, t.format, dict(t.metadata))
    assert now == _findings(fresh), edit
    assert metrics.summary(t) == metrics.summary(fresh)


@pytest.mark.parametrize("table, says", [(None, "not the events table"), ("x", "not the events table"),
                                         (pd.DataFrame({"name": ["k"]}), "no column 'kind'"),
                                         ("text times", "not numbers")])
def test_an_events_table_the_analysis_cannot_use_is_one_line(trace, table, says):
    t = helpers.load(str(trace.source))
    t.events = t.events.assign(start_us="soon") if isinstance(table, str) and table == "text times" else table
    with pytest.raises(TraceError, match=says):
        helpers.diagnose(t)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(list(EDITS)), min_size=2, max_size=3))
def test_edits_in_any_order(trace, edits):
    t = helpers.load(str(trace.source))
    for edit in edits:
        _findings(t)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = EDITS[edit](t.events)
        if out is not None:
            t.events = out
    fresh = helpers.Trace(t.events.copy().reset_index(drop=True), t.source, t.format, dict(t.metadata))
    assert _findings(t) == _findings(fresh)
    assert all(math.isfinite(v) or v != v for v in [metrics.gpu_utilization(t)])
