"""A large job's diagnosis works out the later half of its ranks in a forked process (helpers.rank_split): every
figure must be the one a single process gets, bit for bit, the forked process's failure included (its ranks are
then worked out here)."""

from __future__ import annotations

import os

import pandas as pd
import pytest
from conftest import ROOT

import helpers
from helpers import critical as cr
from helpers import metrics as m
from helpers import rank_split, render
from helpers.diagnosis import _catalogue_fixes, diagnose

pytestmark = pytest.mark.skipif(not rank_split._can_fork(), reason="the split needs fork and two usable cores")


def _everything(folder: str) -> str:
    """The diagnosis as ``diagnose --json`` prints it, with every signal, and the digests of the critical path's
    stretches and the idle gaps (every value and its type)."""
    trace = helpers.load(ROOT / "data" / folder)
    d = diagnose(trace)
    stepped = m.stepped(trace)
    frames = {"path": cr.critical_path(stepped).stretches, "gaps": m.idle_gaps(stepped)}
    digests = {k: (list(f.columns), [str(t) for t in f.dtypes], pd.util.hash_pandas_object(f).to_numpy().tobytes().hex())
               for k, f in frames.items()}
    return render.to_json({"summary": m.summary(trace), **d.to_dict(), "signals": dict(d.signals), **digests})


def _forks(monkeypatch) -> list[int]:
    started: list[int] = []
    start = rank_split._Remote.start.__func__

    def counted(cls, trace, ranks, fixes):
        remote = start(cls, trace, ranks, fixes)
        started.append(remote is not None)
        return remote

    monkeypatch.setattr(rank_split._Remote, "start", classmethod(counted))
    return started


JOB = "published__dlrm_8gpu__v100"  # 8 GPU ranks, several findings


@pytest.fixture(scope="module")
def one_process() -> str:
    rank_split.FORCE = False
    try:
        return _everything(JOB)
    finally:
        rank_split.FORCE = None


def test_split_matches_one_process(one_process, monkeypatch):
    """Bit for bit, and a replay asked after the catalogue's (every finding's fix at once) is the forked process's to
    answer for its ranks."""
    started = _forks(monkeypatch)
    asked: list[tuple] = []
    ask = rank_split._Remote.ask
    monkeypatch.setattr(rank_split._Remote, "ask", lambda self, key: (asked.append(key), ask(self, key))[1])
    monkeypatch.setattr(rank_split, "FORCE", True)
    assert _everything(JOB) == one_process
    assert started == [True]  # the diagnosis did run in two processes
    assert [k for k in asked if k not in _catalogue_fixes()]  # every fix at once: asked, not prefetched


def test_split_of_cpu_ranks_matches_one_process(monkeypatch):
    monkeypatch.setattr(rank_split, "FORCE", False)
    serial = _everything("communication__ddp__cpu")
    started = _forks(monkeypatch)
    monkeypatch.setattr(rank_split, "FORCE", True)
    assert _everything("communication__ddp__cpu") == serial
    assert started == [True]


def test_a_failed_forked_process_leaves_the_figures_as_they_are(one_process, monkeypatch):
    parent = os.getpid()
    share = rank_split._share

    def failing(trace, graphs, fixes):
        if os.getpid() != parent:
            raise RuntimeError("the forked process fails")
        return share(trace, graphs, fixes)

    monkeypatch.setattr(rank_split, "_share", failing)
    started = _forks(monkeypatch)
    monkeypatch.setattr(rank_split, "FORCE", True)
    assert _everything(JOB) == one_process
    assert started == [True]
