"""helpers.export writes the document its per-event definition says, and it reads back as the same table."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from synth import host_bound_loop, two_step_loop, write_json

import helpers
from helpers import export as ex

DATA = Path(__file__).resolve().parents[1] / "data"


def _reference(trace) -> dict:
    """The document, one dict per event: the definition the fast writer must match."""
    events: list[dict] = []
    lanes = sorted({(int(r), ln) for r, ln in zip(trace.events["rank"], trace.events["lane"])})
    lane_id = {rl: i + 1 for i, rl in enumerate(lanes)}
    for rank in sorted({r for r, _ in lanes}):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
    for (rank, lane), tid in lane_id.items():
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": lane}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid, "args": {"sort_index": tid}})
    # One arrow per GPU event from the first API call of its rank and correlation id: "s" events, then "f".
    first_call: dict[tuple[int, int], int] = {}
    for i, row in enumerate(trace.events.itertuples()):
        if row.kind == "runtime" and row.correlation >= 0:
            first_call.setdefault((int(row.rank), int(row.correlation)), i)
    rows = list(trace.events.itertuples())
    pairs = [(first_call[(int(r.rank), int(r.correlation))], i) for i, r in enumerate(rows)
             if r.device >= 0 and r.correlation >= 0 and (int(r.rank), int(r.correlation)) in first_call]
    for phase, side in (("s", 0), ("f", 1)):
        for k, pair in enumerate(pairs, start=1):
            r = rows[pair[side]]
            flow = {"ph": phase, "cat": "ac2g", "name": "ac2g", "id": k, "pid": int(r.rank),
                    "tid": lane_id[(int(r.rank), r.lane)], "ts": round(float(r.start_us), 3)}
            events.append(flow if phase == "s" else {**flow, "bp": "e"})
    for row in trace.events.itertuples():
        args = {"step": int(row.step)}
        if row.device >= 0:
            args.update(device=int(row.device), stream=int(row.stream))
        if row.correlation >= 0:
            args["correlation"] = int(row.correlation)
        if row.bytes == row.bytes:
            args["bytes"] = float(row.bytes)
        events.append({"ph": "X", "cat": ex._category(row.kind, int(row.device)), "name": row.name, "pid": int(row.rank),
                       "tid": lane_id[(int(row.rank), row.lane)], "ts": round(float(row.start_us), 3),
                       "dur": round(float(row.dur_us), 3), "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms", "metadata": {"source": trace.source, "format": trace.format}}


def _close(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a))  # numpy's and Python's rounding may differ in the last bit
    return type(a) is type(b) and a == b


def _traces(tmp_path):
    yield helpers.load(write_json(two_step_loop(), tmp_path / "a.json"))
    yield helpers.load(write_json(host_bound_loop(sync=True), tmp_path / "b.json"))
    folder = tmp_path / "ranks"
    folder.mkdir()
    for r in range(2):
        write_json(two_step_loop(), folder / f"rank{r}.json", rank=r, world=2)
    yield helpers.load(folder)
    for name in ("triage__t2__h200.json.gz", "triage__t7__h200.json.gz", "bench/launch_overhead_long__h200.json.gz",
                 "nsys/data_stall__fixed__h200.sqlite.gz"):  # with OS runtime calls
        if (DATA / name).exists():
            yield helpers.load(DATA / name)


def test_document_matches_its_definition(tmp_path):
    for trace in _traces(tmp_path):
        assert _close(_reference(trace), ex.to_chrome_trace(trace)), trace.source


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_export_reads_back_as_the_same_table(tmp_path, suffix):
    for i, trace in enumerate(_traces(tmp_path)):
        out = ex.export(trace, tmp_path / f"out{i}{suffix}")
        raw = out.read_bytes()
        json.loads(gzip.decompress(raw) if suffix.endswith(".gz") else raw)  # strict JSON
        back = helpers.load(out).events
        # Times are written to the nanosecond, so events that tie after rounding may swap rows: compare sorted.
        cols = ["kind", "name", "device", "stream", "correlation", "copy_kind", "host_memory", "dur_us"]

        def rows(ev, cols=cols):
            ev = ev[cols].assign(kind=ev["kind"].astype(str), dur_us=ev["dur_us"].round(3))
            return ev.sort_values(cols).reset_index(drop=True)

        pd.testing.assert_frame_equal(rows(back), rows(trace.events), check_dtype=False, atol=1.5e-3)


def test_every_kernel_has_an_arrow_from_its_launch():
    """A kernel's flow pair starts on its launch call's lane at the call's start and ends on the kernel's."""
    trace = helpers.load(DATA / "launch_overhead__broken__h200.json.gz")
    doc = ex.to_chrome_trace(trace)
    threads = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    ev = trace.events
    kernels = ev[(ev["kind"] == "kernel") & (ev["correlation"] >= 0)]
    assert starts.keys() == ends.keys() and len(ends) >= len(kernels) > 1000
    calls = ev[ev["kind"] == "runtime"].drop_duplicates(["rank", "correlation"]).set_index("correlation")
    k = kernels.iloc[len(kernels) // 2]  # one kernel: its arrow leaves its own launch call
    arrow = next(i for i, e in ends.items() if abs(e["ts"] - k["start_us"]) < 5e-4 and threads[e["tid"]] == k["lane"])
    call = calls.loc[k["correlation"]]
    assert call["name"].startswith("cudaLaunch") and abs(starts[arrow]["ts"] - call["start_us"]) < 5e-4
    assert threads[starts[arrow]["tid"]] == call["lane"] and ends[arrow]["bp"] == "e"


def test_empty_trace_exports(tmp_path):
    trace = helpers.load(write_json(two_step_loop(), tmp_path / "a.json"))
    empty = helpers.Trace(trace.events.iloc[:0], "empty", "kineto", {})
    assert ex.to_chrome_trace(empty)["traceEvents"] == []


def _reference_text(trace) -> bytes:
    """The timed events as the per-event formatter wrote them before the writer was vectorised:
    times as "%d.%03d" of integer nanoseconds, bytes as repr of the float, names quoted by orjson."""
    lanes = sorted({(int(r), ln) for r, ln in zip(trace.events["rank"], trace.events["lane"])})
    lane_id = {rl: i + 1 for i, rl in enumerate(lanes)}
    rows = []
    for row in trace.events.itertuples():
        head = (f'{{"ph":"X","cat":{ex._quote(ex._category(row.kind, int(row.device)))},"name":{ex._quote(row.name)},'
                f'"pid":{int(row.rank)},"tid":{lane_id[(int(row.rank), row.lane)]},')
        ts, dur = (int(round(v * 1e3)) for v in (row.start_us, row.dur_us))
        args = f'"step":{int(row.step)}' + (f',"device":{int(row.device)},"stream":{int(row.stream)}' if row.device >= 0 else "")
        if row.correlation >= 0:
            args += f',"correlation":{int(row.correlation)}'
        if row.bytes == row.bytes:
            args += f',"bytes":{float(row.bytes)!r}'
        (ts_int, ts_frac), (dur_int, dur_frac) = divmod(ts, 1000), divmod(dur, 1000)
        rows.append(head + f'"ts":{ts_int}.{ts_frac:03d},"dur":{dur_int}.{dur_frac:03d},"args":{{{args}}}}}')
    return ",".join(rows).encode()


def test_document_text_is_byte_for_byte_the_per_event_format(tmp_path, monkeypatch):
    """The vectorised writer's bytes: every digit count, copies with bytes, names that need escaping,
    and small traces cut into batches of 7 events."""
    odd = helpers.load(write_json(two_step_loop(), tmp_path / "odd.json"))
    ev = odd.events.copy()
    ev["name"] = ev["name"].astype(str)  # a categorical holds only its own names: plain text takes new ones
    ev.loc[::3, "name"] = 'naïve "quoted" \\ name\twith ünïcode ✓'
    ev.loc[1::4, "start_us"] += 123_456_789.0005  # longer integer parts, a rounding half-way
    ev.loc[::5, "dur_us"] = 0.0
    ev.loc[2::5, "dur_us"] = 98_765.4321
    ev.loc[::2, "correlation"] = 10**12 + ev.loc[::2, "correlation"].abs()
    ev["end_us"] = ev["start_us"] + ev["dur_us"]
    copies = ev["kind"] == "memcpy"
    assert copies.any()
    ev.loc[copies, "bytes"] = np.resize([2.0**40, 1e-3, 123.0, 0.0, 1e22], int(copies.sum()))
    for trace in [*_traces(tmp_path), helpers.Trace(ev, "odd ✓", "kineto", {})]:
        monkeypatch.setattr(ex, "_BATCH", 7 if len(trace.events) < 1000 else 100_000)
        text = b"".join(ex._fragments(trace))
        timed = text[:-len(text.rsplit(b"]", 1)[1]) - 1]  # up to the end of the events list
        assert timed.endswith(b"," + _reference_text(trace)), trace.source
        json.loads(text)
