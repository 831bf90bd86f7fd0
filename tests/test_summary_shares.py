"""A finding's summary never quotes an idle share that contradicts its own saving: where the cost model counts a
pattern's idle time to another cause (a batch loaded right after a sync), the summary says so instead of "0%"."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT
from synth import host_bound_loop, write_json

import helpers
from helpers import thresholds as th
from helpers.patterns import gain


def _finding(trace, pattern):
    return next(f for f in helpers.diagnose(trace) if f.pattern == pattern)


def test_a_batch_loaded_after_a_sync_is_not_called_zero_percent_idle():
    trace = helpers.load(ROOT / "data" / "mystery__data_fixed__h200.json.gz")
    f = _finding(trace, "data_stall")
    assert f.evidence["data_stall_share"] < th.SHARE_QUOTED_MIN_OF_GAIN * f.cost  # the case itself
    assert not re.search(r"\b0% of step time", f.summary), f.summary
    assert "sync" in f.summary and "ms a step" in f.summary, f.summary


def test_a_sync_whose_gap_is_counted_to_the_loading_after_it_says_so(tmp_path: Path):
    events = host_bound_loop(steps=6, gpu_us=400, host_us=600, sync=True)
    for e in events:
        if e.name == "metrics":
            e.name = "data"  # the host loads the next batch right after the sync returns
    trace = helpers.load(write_json(events, tmp_path / "sync_then_load.json"))
    sync = _finding(trace, "sync_stall")
    assert sync.evidence["sync_stall_share"] < th.SHARE_QUOTED_MIN_OF_GAIN * sync.cost
    assert "at most 0%" not in sync.summary and "counted to what the host does next" in sync.summary, sync.summary
    data = _finding(trace, "data_stall")  # its own share is its saving: quoted as before
    assert re.search(r"\d+% of step time it sits idle", data.summary), data.summary


def test_where_share_and_saving_agree_the_share_is_quoted():
    trace = helpers.load(ROOT / "data" / "data_stall__broken__h200.json.gz")
    f = _finding(trace, "data_stall")
    assert f"{f.evidence['data_stall_share']:.0%} of step time it sits idle" in f.summary
    assert gain(helpers.diagnosis.signals(trace), "data_stall") > 0


def test_host_code_right_after_a_long_sync_is_not_called_zero_percent_idle(tmp_path: Path):
    """The host's own code after a sync that waited most of the step (sync_stall broken on an H100: the batch
    prepared in NumPy right after each step's syncs): its idle time is counted to the sync, and the host_bound
    summary says so instead of "The GPU idles 0% of the step" beside its saving."""
    events = host_bound_loop(steps=6, gpu_us=600, host_us=400, sync=True)
    trace = helpers.load(write_json(events, tmp_path / "long_sync_then_host_code.json"))
    f = _finding(trace, "host_bound")
    assert f.evidence["host_bound_idle_share"] < th.SHARE_QUOTED_MIN_OF_GAIN * f.cost  # the case itself
    assert not re.search(r"\b0% of the step", f.summary), f.summary
    assert "counted to the sync just before it" in f.summary and "critical path" in f.summary, f.summary
    plain = helpers.load(write_json(host_bound_loop(steps=6, gpu_us=200, host_us=800), tmp_path / "host_code.json"))
    share = _finding(plain, "host_bound")  # its own share is its saving: quoted as before
    assert re.search(r"The GPU idles \d+% of the step while the host runs code", share.summary), share.summary
