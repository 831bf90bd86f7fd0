"""Lab 07's triage traces do not give their loop away by name: matching a triage trace's event names (ops, kernels,
ranges) against the labelled recordings in data/ must not single out the course loop it shows.

A trace is *named* by the labelled recordings when exactly one course workload has a loop that holds nearly all of
its distinctive names (those at most DISTINCTIVE_LOOPS labelled loops have) or nearly the same name set as a whole.
The first recordings of eight cases (2026-12-02) were made from the labelled loops themselves (tools/triage_cases.py's
RECORDED_FROM), and they were named; the cases now have shapes of their own and were recorded again on the H200
(2026-12-05): no recording in data/ is named by the loop it shows. The shapes are also checked here on the CPU.
"""

from __future__ import annotations

import collections
import json
import re
import sys
from functools import cache

import pytest
from conftest import DATA, ROOT

from helpers.errors import TraceError
from helpers.readers import load

DISTINCTIVE_LOOPS = 3  # a name at most this many labelled loops have tells them apart
HOLDS = 0.9  # a loop that holds this share of a trace's distinctive names matches it
SAME = 0.9  # ... as does one whose name set is this close to the trace's (Jaccard)
RECORDED_FROM = {"t2": "host_bound", "t3": "launch_overhead", "t4": "data_stall", "t6": "h2d_copy", "t7": "mystery",
                 "t8": "launch_overhead", "t9": "h2d_copy", "t10": "host_bound"}  # tools/triage_cases.RECORDED_FROM


def names(trace) -> set[str]:
    """A trace's event names, step numbers dropped (ProfilerStep#12 and #2 are one name)."""
    return {re.sub(r"#\d+", "", n) for n in trace.events["name"].astype(str)} - {"ProfilerStep"}


@cache
def labelled() -> dict[str, set[str]]:
    """workload:variant -> the names its recordings in data/ hold (every tag)."""
    doc = json.loads((DATA / "manifest.json").read_text())
    out: dict[str, set[str]] = collections.defaultdict(set)
    for e in doc["traces"]:
        if e.get("workload") in ("triage", "published"):
            continue
        try:
            out[f"{e['workload']}:{e['variant']}"] |= names(load(DATA / e["file"]))
        except TraceError:
            continue
    return dict(out)


def workloads_named_by(ns: set[str]) -> set[str]:
    """The course workloads whose labelled recordings match a trace with event names ``ns``."""
    loops = labelled()
    df = collections.Counter(n for s in loops.values() for n in s)
    same = {loop.split(":")[0] for loop, s in loops.items() if len(ns & s) >= SAME * len(ns | s)}
    if same:  # a loop with (nearly) the very same names
        return same
    rare = {n for n in ns if df[n] <= DISTINCTIVE_LOOPS}
    return {loop.split(":")[0] for loop, s in loops.items() if rare and len(rare & s) >= HOLDS * len(rare)}


@pytest.mark.parametrize("case", sorted(RECORDED_FROM, key=lambda c: int(c[1:])))
def test_a_triage_recording_is_not_named_by_the_loop_it_shows(case):
    """(t1 and t5 are loops of their own: no labelled recording shows them.)"""
    named = workloads_named_by(names(load(DATA / f"triage__{case}__h200.json.gz")))
    assert not named, (case, named)  # not its own loop, nor any other


def test_the_new_shapes_are_named_by_no_labelled_loop_on_the_cpu(tmp_path):
    """The cases' code, run on the CPU (a few steps of each case that runs there): no labelled loop matches its names."""
    import torch

    import helpers

    sys.path.insert(0, str(ROOT))
    from tools import triage_cases

    assert set(triage_cases.RECORDED_FROM) == set(RECORDED_FROM)
    assert {k: v.split(":")[0] for k, v in triage_cases.RECORDED_FROM.items()} == RECORDED_FROM
    for case in triage_cases.CPU_CASES:
        if case not in RECORDED_FROM:
            continue  # t1: a loop of its own from the start
        trace = helpers.capture(triage_cases.make_step(case, torch.device("cpu")), steps=2, warmup=1, out_dir=tmp_path,
                                name=case)
        assert len(trace.steps) == 2
        assert not workloads_named_by(names(trace)), case
