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


def _a_result_or_one_line(fn, args: dict, case: tuple, exercise_or_gpu: bool = False) -> None:
    """``fn(**args)`` returns, or refuses in one line (a TraceError or CheckFailed). With ``exercise_or_gpu`` a
    course exercise not done yet (NotImplementedError) and what needs a GPU on a machine without one (NoGPUError,
    in one line) are answers too."""
    import matplotlib.pyplot as plt

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(**args)
    except (TraceError, CheckFailed) as exc:
        assert "\n" not in str(exc).strip() and str(exc).strip(), case
    except NotImplementedError:  # a course exercise not done yet says so in its own words
        if not exercise_or_gpu:
            raise
    except helpers.NoGPUError as exc:  # documented: what needs a GPU says so on a machine without one
        if not exercise_or_gpu:
            raise
        assert "\n" not in str(exc).strip()
    finally:
        plt.close("all")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(PUBLIC)), which=st.integers(0, 20), value=st.sampled_from(SCALARS))
def test_any_value_as_any_argument_is_a_result_or_one_line(trace, tmp_path_factory, name, which, value):
    fn = PUBLIC[name]
    params = [p for p in inspect.signature(fn).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    tmp = tmp_path_factory.mktemp("out")
    args = _arguments(fn, trace, tmp)
    target = params[which % len(params)].name
    args[target] = value
    _a_result_or_one_line(fn, args, (name, target, value))


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


# --- the whole public API, enumerated: a function added later is held to its hints without a list to edit ------

def _modules() -> list:
    from helpers import course, critical, diagnosis, explore, profiling, seal

    return [metrics, plots, checks, export, explore, diagnosis, critical, course, profiling, seal]


#: Public functions that check their own arguments (helpers.load: the readers' words for a path and the limits).
OWN_CHECKS = {"helpers.readers.load"}


def _enumerated() -> dict:
    from helpers.arguments import public_function

    out = {}
    for mod in _modules():
        # a module's __all__ is its public API where it has one, else the functions defined in it or under it
        for name in getattr(mod, "__all__", dir(mod)):
            value = getattr(mod, name)
            if not name.startswith("_") and inspect.isfunction(value) and public_function(
                    value, "helpers" if hasattr(mod, "__all__") else mod.__name__):
                out[f"{mod.__name__}.{name}"] = value
    for name in helpers.__all__:
        value = getattr(helpers, name)
        if inspect.isfunction(value):
            out[f"helpers.{name}"] = value
    return out


ENUMERATED = _enumerated()


def test_every_public_function_is_held_to_its_hints():
    assert len(ENUMERATED) > 150  # the enumeration reaches the labs' helpers, not only the figures
    # Trace's one public method, window, holds its own arguments (see the test of its bounds below)
    assert [n for n, v in vars(helpers.Trace).items() if not n.startswith("_") and inspect.isfunction(v)] == ["window"]
    loose = sorted(n for n, fn in ENUMERATED.items()
                   if not getattr(fn, "__checked__", False) and f"{fn.__module__}.{fn.__name__}" not in OWN_CHECKS)
    assert not loose, f"public functions not held to their type hints: {loose}"


# the checks that run a learner's function or the labs' training loops: judged by tests of their own (test_exercise)
_SLOW = ("check_activation_saving", "adam_update", "saved_tensor_bytes", "check_my_", "check_adam", "check_fused",
         "check_compile", "check_speed", "learner_number", "run_learner", "capture", "time_steps", "find_syncs_live",
         "run_nsys", "run_ncu", "shell", "device_profile", "quiet_profiler_logs", "annotate")
FUZZED = sorted(n for n in ENUMERATED if not any(s in n for s in _SLOW) and ".check_" not in n)
HOSTILE = [*SCALARS, b"/tmp", "/", "12", -0.0, np.int64(-1), (5.0, 1.0), (1.0, float("nan")), True]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(FUZZED), which=st.integers(0, 20), value=st.sampled_from(HOSTILE))
def test_any_value_as_any_argument_of_the_enumerated_api(trace, tmp_path_factory, name, which, value):
    fn = ENUMERATED[name]
    params = [p for p in inspect.signature(fn).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not params:
        return
    args = _arguments(fn, trace, tmp_path_factory.mktemp("out"))
    target = params[which % len(params)].name
    args[target] = value
    _a_result_or_one_line(fn, args, (name, target, value), exercise_or_gpu=True)


def test_an_int_where_a_path_goes_never_opens_a_file_descriptor(tmp_path):
    # open(True) is open(1): it would read stdout and close it
    import os

    for value in (True, 1, np.int64(2), 0):
        for fn in (checks.ncu_stalls, checks.ncu_long, checks.gpu_metrics):
            with pytest.raises(TraceError, match="give a file path"):
                fn(value)
    os.fstat(1), os.fstat(2)  # still open


def test_a_named_file_that_is_missing_or_a_folder_is_one_line(tmp_path):
    for fn in (checks.ncu_stalls, checks.ncu_long, checks.gpu_metrics):
        for value in (tmp_path / "missing.csv", tmp_path, str(tmp_path / "missing.csv").encode()):
            with pytest.raises(TraceError, match="check the path"):
                fn(value)
    (tmp_path / "m.json").write_text('{"metrics": {"GR Active": "busy"}}')
    with pytest.raises(TraceError, match="not a GPU-metrics summary"):
        checks.gpu_metrics(tmp_path / "m.json")


def test_a_hint_that_does_not_resolve_leaves_the_others_checked():
    # course.measured's return hint names pandas, imported only inside it: its argument is checked all the same
    from helpers import course

    with pytest.raises(TraceError, match=r"measured\(\): workload=<NA>"):
        course.measured(pd.NA)
    with pytest.raises(TraceError, match="no workload 'no such'"):
        course.measured("no such")


@pytest.mark.parametrize("call", ["timeline_ms", "timeline_us", "explore", "describe", "pick"])
def test_a_reversed_window_is_one_line(trace, call):
    calls = {"timeline_ms": lambda: plots.timeline(trace, window_ms=(5, 1)),
             "timeline_us": lambda: plots.timeline(trace, window=(5.0, np.float64(1.0))),
             "explore": lambda: plots.explore(trace, window_ms=(3, 1)),
             "describe": lambda: checks.describe_window(trace, (4.0, 1.0)),
             "pick": lambda: plots.pick_window(trace, window=(2, 1))}
    with pytest.raises(TraceError, match="start before the end"):
        calls[call]()


def test_an_empty_trace_is_one_line_where_there_is_nothing_to_draw(trace):
    empty = helpers.load(str(trace.source))
    empty.events = empty.events.iloc[:0]
    for call in (lambda: plots.timeline(empty), lambda: plots.compare(trace, empty), lambda: plots.compare(empty, trace),
                 lambda: checks.rank_table(empty)):
        with pytest.raises(TraceError, match="no events|no steps"):
            call()


def test_every_trace_error_is_one_line_of_bounded_length():
    from helpers.errors import ArgumentError

    exc = TraceError("x.json:\nline two\r\n" + "v" * 100_000 + " do this next")
    text = str(exc)
    assert "\n" not in text and "\r" not in text and len(text) < 1000
    assert text.startswith("x.json: line two") and text.endswith("do this next")
    assert str(ArgumentError("a\nb")) == "a b" and isinstance(ArgumentError("a"), ValueError)
    with pytest.raises(TraceError) as caught:
        helpers.load("t.json", max_events=pd.DataFrame({"a": range(50)}))
    assert "\n" not in str(caught.value)


# --- the metadata is part of what the caches depend on ----------------------------------------------------------

def _steps_cut(t):
    t.metadata["steps"] = t.steps.iloc[:2].copy()


TRACE_EDITS = {
    "steps cut": _steps_cut,
    "steps dropped in place": lambda t: t.steps.drop(t.steps.index[:3], inplace=True),
    "a step's end moved in place": lambda t: t.steps.loc.__setitem__((t.steps.index[0], "end_us"), t.steps["start_us"].iloc[0] + 1.0),
    "metadata replaced": lambda t: setattr(t, "metadata", {}),
    "steps key removed": lambda t: t.metadata.pop("steps"),
}


@pytest.fixture(scope="module")
def six_steps(tmp_path_factory):
    from synth import host_bound_loop

    return write_json(host_bound_loop(steps=6, sync=True), tmp_path_factory.mktemp("six") / "six.json")


def _figures(t) -> tuple:
    s = metrics.summary(t)
    return (_findings(t), s["steps"], round(s["step_time_ms"], 6), len(metrics.windows(t)),
            len(helpers.steady_state(t)[0].steps))


@pytest.mark.parametrize("edit", list(TRACE_EDITS))
def test_a_trace_whose_metadata_changed_is_analysed_as_it_now_is(six_steps, edit):
    t = helpers.load(str(six_steps))
    before = _figures(t)  # fills the caches
    TRACE_EDITS[edit](t)
    fresh = helpers.Trace(t.events.copy(), t.source, t.format,
                          {k: (v.copy() if isinstance(v, pd.DataFrame) else v) for k, v in t.metadata.items()})
    assert _figures(t) == _figures(fresh), edit
    assert _figures(t) != before or edit == "metadata replaced"  # the edit changed what there is to measure


def test_the_steady_state_a_user_edited_is_not_handed_out_again(six_steps):
    t = helpers.load(str(six_steps))
    t.metadata = {}  # no step markers: the steady state is a trace of its own, cached on t
    kept, _ = helpers.steady_state(t)
    assert kept is not t and len(kept.events)
    n = len(kept.events)
    kept.events.drop(kept.events.index[:5], inplace=True)  # the user edits what they were given
    again, _ = helpers.steady_state(t)
    assert len(again.events) == n
    assert metrics.stepped(t) is again


# --- a trace whose fields a user replaced: one line at every entry point, never an error from inside ------------

FIELD_EDITS = {
    "metadata None": lambda t: setattr(t, "metadata", None),
    "metadata a list": lambda t: setattr(t, "metadata", [1]),
    "steps text": lambda t: t.metadata.__setitem__("steps", "x"),
    "steps without times": lambda t: t.metadata.__setitem__("steps", pd.DataFrame({"rank": [0]})),
    "steps with NaN times": lambda t: t.metadata.__setitem__("steps", t.steps.assign(start_us=np.nan)),
    "steps reversed": lambda t: t.metadata.__setitem__("steps", t.steps.assign(start_us=t.steps["end_us"],
                                                                               end_us=t.steps["start_us"])),
    "steps_inferred text": lambda t: t.metadata.__setitem__("steps_inferred", "x"),
    "source a number": lambda t: setattr(t, "source", 5),
    "rank with NaN": lambda t: t.events.__setitem__("rank", np.where(np.arange(len(t.events)) < 2, np.nan, 0.0)),
    "rank fractional": lambda t: t.events.__setitem__("rank", 0.5),
    "a kind the model lacks": lambda t: t.events.__setitem__("kind", "weird"),
    "a column twice": lambda t: setattr(t, "events", pd.concat([t.events, t.events[["dur_us"]]], axis=1)),
    "columns of two levels": lambda t: setattr(t, "events", t.events.set_axis(
        pd.MultiIndex.from_tuples([(c, "") for c in t.events.columns]), axis=1)),
}
FIELD_CALLS = {
    "diagnose": helpers.diagnose, "summary": metrics.summary, "timeline": plots.timeline, "explore": plots.explore,
    "export": export.to_chrome_trace, "critical_path": helpers.critical_path, "windows": metrics.windows,
    "check": lambda t: checks.check_longest_gap(1.0, t),
}


@pytest.mark.parametrize("edit", list(FIELD_EDITS))
def test_a_trace_whose_fields_were_replaced_is_one_line_everywhere(trace, edit):
    import matplotlib.pyplot as plt

    for name, call in FIELD_CALLS.items():
        t = helpers.load(str(trace.source))
        metrics.summary(t)  # the store filled before the edit
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            FIELD_EDITS[edit](t)
            try:
                with pytest.raises(TraceError) as exc:
                    call(t)
            finally:
                plt.close("all")
        assert "\n" not in str(exc.value) and "trace." in str(exc.value), (edit, name)
        assert "not usable" in repr(t)  # Jupyter shows it, with what is wrong


def test_a_whole_number_column_held_as_floats_is_taken(trace):
    t = helpers.load(str(trace.source))
    want = _findings(t)
    t.events = t.events.assign(rank=t.events["rank"].astype("float64"), device=t.events["device"].astype("float64"))
    assert _findings(t) == want and t.events["rank"].dtype == "int64"


# --- what a function returns is the caller's: editing it never changes what the trace's store holds ------------

def _scramble(v, depth: int = 0) -> None:
    """Every edit a caller could make of a result: numbers overwritten, rows dropped, items added."""
    if depth > 3:
        return
    if isinstance(v, pd.DataFrame):
        for c in v.columns:
            if v[c].dtype.kind in "if":
                v[c] = v[c] * 0 + 12345
        if len(v):
            v.drop(v.index[:1], inplace=True)
    elif isinstance(v, np.ndarray):
        try:
            v[...] = 12345  # the caller's own array, or one of the store's, which are handed out read-only
        except ValueError as exc:
            assert "read-only" in str(exc)
    elif isinstance(v, dict):
        for k in list(v):
            if isinstance(v[k], float):
                v[k] = 12345.0
            else:
                _scramble(v[k], depth + 1)
        v["__junk__"] = 1
    elif isinstance(v, (list, tuple)):
        for x in v:
            _scramble(x, depth + 1)
        if isinstance(v, list):
            v.append("junk")
    elif hasattr(v, "__dataclass_fields__"):
        for x in vars(v).values():
            _scramble(x, depth + 1)


def _one_trace_calls() -> dict:
    def takes_a_trace(fn) -> bool:
        params = [p for p in inspect.signature(fn).parameters.values() if p.default is inspect.Parameter.empty]
        return len(params) == 1 and params[0].name == "trace"

    # stepped: a trace with step markers is its own steady state (the very trace, by design)
    out = {n: getattr(metrics, n) for n in metrics.__all__ if inspect.isfunction(getattr(metrics, n)) and not n.startswith("_")
           and takes_a_trace(getattr(metrics, n)) and n != "stepped"}
    out.update({"diagnose": helpers.diagnose, "critical_path": helpers.critical_path,
                "host_union": lambda t: metrics.host_union(t, 0, "data_wait"),
                "gpu_work_union": lambda t: metrics.gpu_work_union(t, 0, 0),
                "steady_state": lambda t: helpers.steady_state(t)[1], "signals": helpers.diagnosis.signals,
                "locate": lambda t: helpers.diagnosis.locate(t, "sync_stall"),
                "pattern_intervals": lambda t: checks.pattern_intervals(t, "host_bound")})
    return out


@pytest.mark.parametrize("name", sorted(_one_trace_calls()))
def test_editing_a_result_never_reaches_the_store(six_steps, name):
    fn = _one_trace_calls()[name]
    want = repr(fn(helpers.load(str(six_steps))))
    t = helpers.load(str(six_steps))
    md = repr(t.metadata)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _scramble(fn(t))
    assert repr(fn(t)) == want, name
    assert repr(t.metadata) == md, name


@pytest.mark.parametrize("edit", ["drop rows in place", "a kernel made shorter", "filter"])
def test_an_interactive_view_reads_the_events_it_drew(trace, edit):
    # the explorer's lanes index rows by position: after an edit of the trace's table its hover, search and
    # selection once read other rows (or past the end: IndexError)
    from helpers.explore import Lanes

    t = helpers.load(str(trace.source))
    lanes = Lanes(t)
    last = len(t.events) - 1

    def seen() -> tuple:
        return lanes.describe(last), lanes.search("k"), lanes.figures(0.0, 5.0)

    before = seen()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = EDITS[edit](t.events)
    if out is not None:
        t.events = out
    assert seen() == before


@pytest.mark.parametrize("bounds", [(pd.NA, 5.0), (None, 5.0), ("x", 5.0), (float("nan"), 5.0), (5.0, 1.0), (b"1", 2.0),
                                    (10**400, 1.0)])
def test_a_trace_window_of_unusable_bounds_is_one_line(trace, bounds):
    with pytest.raises(TraceError) as exc:
        trace.window(*bounds)
    assert "\n" not in str(exc.value) and "window()" in str(exc.value)


def test_an_empty_path_is_refused_not_read_as_the_current_folder():
    for fn in (checks.ncu_long, checks.gpu_metrics, checks.ncu_stalls):
        with pytest.raises(TraceError, match="not empty"):
            fn("")


def test_column_runs_of_a_lane_outside_the_view_and_bad_shapes():
    from helpers.explore import column_runs, figures_lines

    out = column_runs(np.array([100.0]), np.array([110.0]), np.array([0]), 0.0, 1.0, 10)  # was IndexError
    assert all(v.size == 0 for v in out.values())
    with pytest.raises(TraceError, match="one of each per event"):
        column_runs(np.array([1.0, 2.0]), np.array([3.0]), np.array([0]), 0.0, 1.0, 10)
    with pytest.raises(TraceError, match="at most"):
        column_runs(np.array([1.0]), np.array([3.0]), np.array([0]), 0.0, 1.0, 10**30)
    with pytest.raises(TraceError, match="no 'window_ms'"):
        figures_lines({})


def test_the_probed_device_figures_are_the_callers_copy(monkeypatch):
    from helpers import capability

    fake = capability.DeviceProfile("Fake GPU", (9, 0), {"bf16": 100.0, "fp32": 10.0}, 1000.0)
    monkeypatch.setattr(capability, "probe", lambda device: fake)
    capability._probe_cached.cache_clear()
    try:
        capability.device_profile("cpu").gemm_tflops["bf16"] = 1e9  # an edit of what the caller got ...
        assert capability.device_profile("cpu").gemm_tflops["bf16"] == 100.0  # ... never reaches the cache
    finally:
        capability._probe_cached.cache_clear()


def test_the_seal_functions_hold_their_arguments(trace):
    # seal.py imports Trace for type checkers only: its hints resolve all the same
    from helpers import seal

    for call in (lambda: seal.fingerprint(pd.NA), lambda: seal.sketch(trace.events), lambda: seal.seal(None, "x"),
                 lambda: seal.gate(trace, 5), lambda: seal.open_seal(b"x"), lambda: seal.sealed_by(trace, scope=None)):
        with pytest.raises(TraceError) as exc:
            call()
        assert "\n" not in str(exc.value)
