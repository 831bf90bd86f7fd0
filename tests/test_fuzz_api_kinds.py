"""Kinds of values the earlier API fuzzing did not try, in every argument of the public API: endless or huge
iterators where a list or a (start, end) pair goes, a 0-d array, NumPy times (np.timedelta64 is an integer type to
NumPy), exact and narrow numbers (Fraction, np.int8, np.uint64), paths that are a PathLike giving bytes or a
PureWindowsPath. The promises: a result or one TraceError line, memory bounded by what could be used, and the
function given the plain Python number or path text it was promised (never an np.int8 that wraps around)."""

from __future__ import annotations

import itertools
import os
import random
from fractions import Fraction
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np
import pandas as pd
import pytest
import test_fuzz_api as api
from synth import two_step_loop, write_json

import helpers
from helpers import TraceError
from helpers.arguments import MAX_ITEMS, checked


class Endless:
    """An endless iterator that fails the test if more items are drawn than any check may draw."""

    def __init__(self, limit: int = MAX_ITEMS + 10) -> None:
        self.drawn, self.limit = 0, limit

    def __iter__(self):
        return self

    def __next__(self) -> float:
        self.drawn += 1
        assert self.drawn <= self.limit, "drawn without bound"
        return 1.0


class BytesPath:
    def __init__(self, path: bytes) -> None:
        self.path = path

    def __fspath__(self) -> bytes:
        return self.path


class MyFloat(float):
    pass


def _kinds(tmp: Path) -> list:
    return [Endless(), itertools.repeat(2.0, 10**12), range(10**18), (x for x in (0.0, 1.0)), np.array(5.0),
            np.timedelta64(5, "ms"), np.timedelta64("NaT"), np.datetime64("2020-01-01"), Fraction(1, 3),
            np.float16(1.5), np.int8(100), np.uint64(2**63), MyFloat(2.0), (np.int8(-100), np.int8(100)),
            (Fraction(0), Fraction(1, 3)), np.matrix([[0.0, 10.0]]), np.ma.masked_array([0.0, 10.0], mask=[0, 1]),
            BytesPath(os.fsencode(tmp / "b.json")), PureWindowsPath("C:\\x\\y.json"), PurePosixPath(tmp / "p.json")]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return helpers.load(write_json(two_step_loop(), tmp_path_factory.mktemp("kinds") / "t.json"))


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix, on purpose
def test_a_seeded_sample_of_kinds_in_every_argument(trace, tmp_path_factory):
    rng = random.Random(20261205)
    names = sorted(api.FUZZED)
    for _ in range(600):
        name = rng.choice(names)
        fn = api.ENUMERATED[name]
        params = [p for p in api.inspect.signature(fn).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if not params:
            continue
        tmp = tmp_path_factory.mktemp("out")
        args = api._arguments(fn, trace, tmp)
        target = rng.choice(params).name
        value = rng.choice(_kinds(tmp))
        args[target] = value
        api._a_result_or_one_line(fn, args, (name, target, value), exercise_or_gpu=True)


def test_an_endless_iterator_is_drawn_only_as_far_as_it_could_be_used(trace):
    pair = Endless()
    with pytest.raises(TraceError, match="window_ms=.*give 2 finite numbers"):
        helpers.plots.timeline(trace, window_ms=pair)
    assert pair.drawn == 3  # two items and one to see that there are more
    names = Endless()
    with pytest.raises(TraceError, match=f"at most {MAX_ITEMS:,} items"):
        helpers.what_if(trace, {"kernel": 0.5}, overlapped=names)
    with pytest.raises(TraceError, match="overlapped=range"):
        helpers.what_if(trace, {"kernel": 0.5}, overlapped=range(10**18))
    assert helpers.plots.timeline(trace, window_ms=(x for x in (0.0, 1.0))) is not None  # a finite generator: taken


def test_numbers_arrive_as_python_numbers():
    seen = []

    @checked
    def f(window_ms: tuple[float, float], x: float, n: int) -> None:
        seen.append((window_ms, x, n))

    f((np.int8(-100), np.int8(100)), Fraction(1, 4), np.uint8(3))
    (a, b), x, n = seen[0]
    assert (a, b, x, n) == (-100, 100, 0.25, 3) and b - a == 200
    assert {type(a), type(b), type(n)} == {int} and type(x) is float
    for bad in (np.timedelta64(5, "ms"), np.timedelta64("NaT"), np.datetime64("2020-01-01"), np.array(5.0)):
        with pytest.raises(TraceError, match="f\\(\\): "):
            f((0.0, 1.0), bad, 1)
        with pytest.raises(TraceError, match="f\\(\\): "):
            f((0.0, 1.0), 1.0, bad)
        with pytest.raises(TraceError, match="f\\(\\): "):
            f(bad, 1.0, 1)
    for bad in (np.timedelta64(5, "ms"), np.timedelta64("NaT")):
        with pytest.raises(TraceError, match="max_bytes=.*give a positive number"):
            helpers.load("x.json", max_bytes=bad)


def test_a_path_is_passed_on_as_the_text_it_names(tmp_path):
    got = []

    @checked
    def g(path: str | os.PathLike) -> None:
        got.append(path)
        raise FileNotFoundError(2, "No such file or directory", os.fsdecode(path))

    for value, text in ((BytesPath(b"/tmp/x.json"), "/tmp/x.json"), (PureWindowsPath("C:\\x\\y.json"), "C:\\x\\y.json"),
                        (np.str_("a.json"), "a.json")):
        with pytest.raises(TraceError, match="no such file"):
            g(value)
        assert got[-1] == text and type(got[-1]) is str
    p = tmp_path / "t.json"
    with pytest.raises(TraceError):
        g(p)
    assert got[-1] is p  # a Path as given
    out = tmp_path / "e.json"
    helpers.export.export(helpers.load(write_json(two_step_loop(), tmp_path / "in.json")), BytesPath(os.fsencode(out)))
    assert out.is_file()


NULLABLE_EDITS = {
    "convert_dtypes": lambda e: e.convert_dtypes(),
    "Float64 start with NA": lambda e: e.assign(start_us=e["start_us"].astype("Float64").where(e.index != 3, pd.NA)),
    "Float64 duration": lambda e: e.assign(dur_us=e["dur_us"].astype("Float64")),
    "Int64 stream with NA": lambda e: e.assign(stream=e["stream"].astype("Int64").where(e.index != 2, pd.NA)),
    "string names": lambda e: e.assign(name=e["name"].astype("string")),
}


@pytest.mark.parametrize("edit", sorted(NULLABLE_EDITS))
def test_an_events_table_of_nullable_dtypes_is_analysed_or_one_line(trace, edit):
    # convert_dtypes() makes Float64/Int64 columns: a 'f'/'i' kind that was kept as it was, pd.NA and all, and
    # diagnose said "boolean value of NA is ambiguous"
    from helpers import export, metrics, plots

    t = helpers.Trace(NULLABLE_EDITS[edit](trace.events.copy()), trace.source, trace.format, dict(trace.metadata))
    for call in (helpers.diagnose, metrics.summary, helpers.critical_path, plots.timeline, export.to_chrome_trace):
        api._a_result_or_one_line(call, {"trace": t}, (edit, call.__name__))
    if "with NA" not in edit:
        assert all(t.events[c].dtype == np.dtype("float64") for c in ("start_us", "dur_us"))
        assert helpers.diagnose(t)[0].pattern == helpers.diagnose(trace)[0].pattern


METADATA_EDITS = {
    "ranks as text": ("ranks", "x"), "ranks of numbers": ("ranks", {0: 5}), "distributed a number": ("distributed", 5),
    "device names a number": ("device_names", 7), "device names of numbers": ("device_names", [1, 2]),
    "origin as text": ("origin_us", "z"), "origin NaN": ("origin_us", float("nan")), "world size True": ("world_size", True),
    "collective types a list": ("collective_types", [1]), "torch version a number": ("torch_version", 2.1),
}


@pytest.mark.parametrize("edit", sorted(METADATA_EDITS))
def test_metadata_a_user_assigned_is_one_line_in_every_function(trace, tmp_path, edit):
    # what the readers put in metadata, replaced by values of another kind: TypeErrors and AttributeErrors from
    # critical paths, checks and figures before; one line naming the key now, from any function given the trace
    key, value = METADATA_EDITS[edit]
    t = helpers.Trace(trace.events.copy(), trace.source, trace.format, {**trace.metadata, key: value})
    with pytest.raises(TraceError, match=f"trace.metadata\\[{key!r}\\]"):
        helpers.diagnose(t)
    rng = random.Random(edit)
    for name in rng.sample(sorted(api.FUZZED), 25):
        fn = api.ENUMERATED[name]
        args = api._arguments(fn, t, tmp_path)
        if any(v is t for v in args.values()):
            api._a_result_or_one_line(fn, args, (name, edit), exercise_or_gpu=True)


def test_a_steps_table_that_numbers_a_step_twice_is_one_line(trace):
    from helpers import report

    steps = trace.metadata["steps"]
    for table in (pd.concat([steps, steps]), steps.assign(step=0), steps.assign(rank=99).pipe(lambda s: pd.concat([s, s]))):
        t = helpers.Trace(trace.events.copy(), trace.source, trace.format, {**trace.metadata, "steps": table})
        for call in (helpers.diagnose, lambda t: report.build([t])):
            with pytest.raises(TraceError, match="numbers a step twice"):
                call(t)
