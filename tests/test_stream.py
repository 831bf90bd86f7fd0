"""The streaming Kineto reader reads every document exactly as parsing it whole does.

``kineto.parse_stream`` cuts ``traceEvents`` into pieces at ``}, {`` and parses each on its own; these
tests cut as small as possible (pieces of one byte, blocks of a few bytes) and put the cut marks and
the key inside strings and nested values, then compare with the whole-document parse.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest
from conftest import assert_tables_equal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz import event, values

import helpers
from helpers import TraceError
from helpers.readers import kineto

TRICKY = ['}, {', '"traceEvents": [', '}]', '] }', '\\"}, {\\"', '{"a": [}, {]}']


def _read(data: bytes, stream: bool, block: int = 7):
    """(events, metadata) or the TraceError, streamed in ``block``-byte blocks or parsed whole."""
    path = Path("t.json")
    try:
        if stream:
            return kineto.parse_stream((data[i:i + block] for i in range(0, len(data), block)), path, 10_000)
        cols = kineto._Columns(path, 10_000)
        return cols.finish(kineto._whole(data, path, cols))
    except TraceError as exc:
        return exc


def _same(a, b) -> None:
    if isinstance(a, TraceError) or isinstance(b, TraceError):
        assert isinstance(a, TraceError) and isinstance(b, TraceError), (a, b)
        return
    assert_tables_equal(a[0], b[0])
    assert a[1] == b[1]


@pytest.fixture(autouse=True)
def _tiny_pieces(monkeypatch):
    monkeypatch.setattr(kineto, "_PIECE", 1)


tricky_event = st.fixed_dictionaries({"ph": st.just("X"), "cat": st.sampled_from(["kernel", "cpu_op", "cuda_runtime"]),
                                      "name": st.sampled_from(TRICKY) | st.text(max_size=6), "pid": st.integers(0, 3),
                                      "tid": st.integers(0, 3), "ts": st.floats(0, 1e6), "dur": st.floats(0, 100)},
                                     optional={"args": st.dictionaries(st.sampled_from(TRICKY + ["device", "stream"]), values, max_size=3)})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(event | tricky_event | values, max_size=8), st.dictionaries(st.sampled_from(TRICKY + ["distributedInfo"]), values, max_size=2),
       st.dictionaries(st.sampled_from(TRICKY + ["deviceProperties"]), values, max_size=2), st.sampled_from(["", " ", "\n  "]),
       st.integers(1, 9))
def test_stream_reads_as_whole(events, before, after, space, block):
    doc = {**before, "traceEvents": events, **after}
    text = json.dumps(doc, allow_nan=True, separators=("," + space, ":" + space))
    data = text.encode()
    _same(_read(data, stream=True, block=block), _read(data, stream=False))


@pytest.mark.parametrize("key", ["ts", "dur"])
@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("alone", [True, False], ids=["alone", "among-numbers"])
def test_a_boolean_time_is_refused_streamed_or_whole(key, value, alone):
    """A JSON true or false as a time is refused by both readers, in one message. numpy reads a boolean among
    numbers as 1 or 0, so the whole parse once took ``"dur": true`` as 1 us while a piece holding it alone was
    refused; a cut mark in a name made the two readers see different pieces."""
    good = {"ph": "X", "cat": "kernel", "name": "}, {", "pid": 0, "tid": 0, "ts": 5.0, "dur": 2.0}
    events = ([] if alone else [good, {**good, "ts": 1.0, "dur": 0}]) + [{**good, key: value}]
    data = json.dumps({"traceEvents": events}).encode()
    for result in (_read(data, stream=True, block=3), _read(data, stream=False)):
        assert isinstance(result, TraceError), result
        assert f"lacks a numeric {key!r} (it is {str(value).lower()})" in str(result)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(tricky_event, min_size=1, max_size=6), st.integers(0, 200), st.integers(1, 9))
def test_stream_cut_anywhere(events, cut, block):
    """Truncated documents fail the same way streamed or whole."""
    data = json.dumps({"traceEvents": events, "traceName": "x"}).encode()
    data = data[:cut % (len(data) + 1)]
    _same(_read(data, stream=True, block=block), _read(data, stream=False))


def test_stream_matches_whole_on_a_recorded_trace(tmp_path, monkeypatch):
    src = Path(__file__).resolve().parents[1] / "data" / "bench" / "launch_overhead_long__h200.json.gz"
    if not src.exists():
        pytest.skip("no benchmark trace")
    monkeypatch.setattr(kineto, "_PIECE", 4096)
    import gzip
    data = gzip.decompress(src.read_bytes())
    rng = random.Random(0)
    sizes = [rng.randrange(1, 1 << 16) for _ in range(4)]
    whole = _read(data, stream=False)
    for size in sizes:
        _same(_read(data, stream=True, block=size), whole)
    # and through helpers.load, from a file and from gzip
    (tmp_path / "t.json").write_bytes(data)
    t = helpers.load(tmp_path / "t.json")
    assert_tables_equal(t.events, helpers.load(src).events)


def test_event_limit_stops_the_stream_early():
    data = json.dumps({"traceEvents": [{}] * 50}).encode()
    with pytest.raises(TraceError, match="over the limit"):
        kineto.parse_stream(iter([data]), Path("t.json"), 10)


def test_two_event_lists_are_refused():
    data = b'{"traceEvents": [], "traceEvents": []}'
    with pytest.raises(TraceError, match="two 'traceEvents'"):
        kineto.parse_stream(iter([data]), Path("t.json"))


def test_events_that_are_not_objects_take_the_checked_path_and_read_the_same():
    """A piece with non-object events or unhashable categories is read one event at a time; what it
    keeps is exactly what the fast path keeps from the same piece without them."""
    good = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.0, "dur": 2.0,
             "args": {"device": 0, "stream": 7, "correlation": 5}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 9.0, "dur": 1.0,
             "args": {"correlation": 5}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 8.0, "dur": 3.0, "args": [1, 2]}]
    hostile = [[1, 2], 7, None, {"ph": "X", "cat": ["kernel"], "name": "x", "ts": 1, "dur": 1},
               {"ph": ["X"], "cat": "kernel", "name": "y", "ts": 1, "dur": 1}, {"ph": "i", "cat": "kernel"}]
    mixed = [hostile[0], good[0], *hostile[1:4], good[1], *hostile[4:], good[2]]
    a = _read(json.dumps({"traceEvents": mixed}).encode(), stream=False)
    b = _read(json.dumps({"traceEvents": good}).encode(), stream=False)
    _same(a, b)
    assert list(a[0]["name"]) == ["aten::mul", "cudaLaunchKernel", "k"]
    assert a[0]["correlation"].tolist() == [-1, 5, 5]


ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted([*(ROOT / "data").glob("*.json.gz"), *(ROOT / "tests" / "corpus").glob("*.json.gz")])


@pytest.mark.parametrize("src", SHIPPED, ids=lambda p: p.name)
def test_msgspec_decoding_reads_as_the_general_parser(src, monkeypatch):
    """The fast path (msgspec decodes each piece straight into the few fields read) and the general one
    (a JSON parser's dicts copied into them) give the same table on every shipped recording."""
    try:
        fast = helpers.load(src)
    except TraceError as exc:
        fast = exc
    monkeypatch.setattr(kineto, "_decode_events", None)
    try:
        general = helpers.load(src)
    except TraceError as exc:
        assert isinstance(fast, TraceError) and str(fast) == str(exc)
        return
    assert not isinstance(fast, TraceError), fast
    assert_tables_equal(fast.events, general.events)
    for key in ("device_names", "distributed", "torch_version", "collective_types", "other_accelerator_events"):
        assert fast.metadata.get(key) == general.metadata.get(key), key


def test_pieces_msgspec_refuses_go_to_the_general_parser():
    """A member that is not an object, an ``args`` that is a list, nesting past msgspec's depth: each
    makes msgspec refuse its piece, which is then read as json.loads reads it. A time that is an integer
    beyond 64 bits msgspec takes whole, and it reads as the same time."""
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.0, "dur": 2.0,
              "args": {"device": 0, "stream": 7, "correlation": 5}}
    # 1,000 levels: past msgspec's depth, within orjson's (built as text: json.dumps would recurse too deep)
    deep = json.dumps(kernel).replace('"correlation": 5', '"correlation": 5, "nested": ' + "[" * 1000 + "]" * 1000)
    big_time = json.dumps({**kernel, "ts": 2**70})  # msgspec keeps it an int, orjson makes it a float: the same time
    for odd in ("7", json.dumps({**kernel, "args": [1]}), deep, big_time):
        data = ('{"traceEvents": [' + json.dumps(kernel) + ", " + odd + "]}").encode()
        assert kineto._decode_events is not None
        if odd is not big_time:
            with pytest.raises(kineto._FAST_ERRORS):
                kineto._decode_events(b"[" + odd.encode() + b"]")
        _same(_read(data, stream=True, block=1 << 20), _read(data, stream=False))


def test_reads_the_same_without_msgspec(tmp_path):
    """msgspec is optional: without it the reader makes the same table from orjson's dicts."""
    import subprocess
    import sys
    src = ROOT / "data" / "launch_overhead__broken__h200.json.gz"
    code = ("import sys; sys.modules['msgspec'] = None\n"
            "import helpers\nfrom helpers.readers import kineto\nassert kineto._decode_events is None\n"
            f"helpers.load({str(src)!r}).events.to_pickle({str(tmp_path / 'e.pkl')!r})\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)
    assert_tables_equal(pd.read_pickle(tmp_path / "e.pkl"), helpers.load(src).events)


def test_numbers_beyond_a_double_in_what_the_reader_sizes_are_no_size():
    """msgspec keeps an integer of 400 digits whole: a copy's ``bytes`` or a gloo tensor's dims that large
    read as no size (NaN), never an OverflowError."""
    huge = int("9" * 400)
    copy = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
            "ts": 10.0, "dur": 2.0, "args": {"device": 0, "stream": 7, "correlation": 5, "bytes": huge}}
    gloo = {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 1, "ts": 1.0,
            "dur": 5.0, "args": {"Input type": ["float"], "Input Dims": [[huge, 2]]}}
    data = json.dumps({"traceEvents": [copy, gloo]}).encode()
    events, _ = kineto.parse(data, Path("t.json"))
    assert events["bytes"].isna().all() and len(events) == 2


def test_the_tables_comparison_sees_every_kind_of_difference():
    """assert_tables_equal (the fast stand-in for assert_frame_equal the comparisons above use) fails on a changed
    name, a category list in another order, a time 1 ms off and a missing column."""
    t = helpers.load(ROOT / "data" / "data_stall__broken__h200.json.gz").events
    assert_tables_equal(t, t.copy())
    renamed = t.copy()
    renamed["name"] = renamed["name"].cat.rename_categories({renamed["name"].iloc[0]: "another name"})
    reordered = t.copy()
    reordered["kind"] = reordered["kind"].cat.reorder_categories(list(reordered["kind"].cat.categories)[::-1])
    moved = t.copy()
    moved.loc[moved.index[3], "start_us"] += 1000.0  # 1 ms: beyond the float tolerance both comparisons share
    for other in (renamed, reordered, moved, t.drop(columns=["step"])):
        with pytest.raises(AssertionError):
            assert_tables_equal(t, other)
        with pytest.raises(AssertionError):
            pd.testing.assert_frame_equal(t, other)  # the verdict assert_frame_equal gives too
