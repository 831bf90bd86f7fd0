"""The shortcuts the diagnosis's figures take (kinds tested on their codes, a host item's overlap looked up once per
cut, a rank's windows cut from every rank's, a seal's verdict kept with the trace) give what the long way gave."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import DATA
from synth import two_step_loop, write_json

from helpers import critical as cr
from helpers import metrics as m
from helpers import seal
from helpers.metrics.intervals import merge_intervals, overlap
from helpers.metrics.windows import _plain_steps, _rank_of_all, _windows_of
from helpers.model import KINDS, kind_in
from helpers.readers import load


@pytest.fixture(scope="module")
def job():
    return load(DATA / "communication__ddp__cpu")  # two ranks, marked steps


def test_kind_in_is_pandas_isin(job):
    ev = job.events
    for kinds in [("cpu_op",), ("annotation", "cpu_op"), ("kernel", "memcpy", "memset", "collective"), ("nope",), KINDS]:
        assert np.array_equal(kind_in(ev, kinds), ev["kind"].isin(kinds).to_numpy()), kinds


def test_is_kind_is_the_look_up_table():
    codes = np.random.default_rng(0).integers(-1, len(cr._KINDS), 5000).astype(np.int8)  # -1: any other kind
    for kinds in [("kernel",), ("memcpy", "memset"), ("cpu_op", "runtime", "annotation"), ("kernel", "kernel")]:
        table = np.zeros(len(cr._KINDS) + 1, dtype=bool)
        table[[cr._K[k] for k in kinds]] = True
        assert np.array_equal(cr._is_kind(codes, *kinds), table[codes]), kinds


def test_among_is_isin():
    values = np.random.default_rng(1).integers(0, 40, 5000)
    for few in (np.zeros(0, np.int64), np.array([3]), np.array([1, 7, 39]), np.arange(20)):
        assert np.array_equal(cr._among(values, few), np.isin(values, few))


@pytest.mark.parametrize("n", [0, 1, 300])
def test_overlap_per_cut_is_overlap(n):
    rng = np.random.default_rng(n)
    s = rng.uniform(0, 1000, n)
    us, ue = merge_intervals(s, s + rng.uniform(0, 20, n))
    cuts = np.unique(rng.uniform(-10, 1010, 400))
    assert np.array_equal(cr._overlap_items(us, ue, cuts), overlap(us, ue, cuts[:-1], cuts[1:]))


def test_a_ranks_windows_cut_from_every_ranks_are_its_own(job):
    assert _plain_steps(job.steps) and len(job.ranks) == 2
    own = {r: _windows_of(job, job.steps, [r]) for r in job.ranks}
    m.windows(job)  # every rank's, kept with the trace
    for r in job.ranks:
        pd.testing.assert_frame_equal(m.windows(job, r), own[r], check_exact=True)
    assert _rank_of_all(job, 99) is None  # no such rank: worked out as before


@pytest.mark.sealed
def test_a_seal_made_after_the_trace_was_looked_at_holds_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # seal() keeps the lab's seals in the working folder
    t = load(write_json(two_step_loop(), tmp_path / "own.json"))
    assert seal.sealed_by(t) is None  # kept with the trace for the seals then in force ...
    seal.seal(t, "check_reading[shortcut]")
    assert seal.sealed_by(t) == "check_reading[shortcut]"  # ... not for the seal made since
    seal._OPEN.add("check_reading[shortcut]")  # its reading passed
    assert seal.sealed_by(t) is None
