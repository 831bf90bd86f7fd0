"""A folder holding only some of its job's ranks (the traces say world_size 8; two files are here) says so wherever
the job's figures are shown: summary, diagnose, ranks, their JSON, and the rank-by-rank path of a large job. A whole
job, or traces that give no size, say nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from synth import host_bound_loop, write_json

import helpers


def _folder(tmp_path: Path, ranks: list[int], world: int | None) -> Path:
    d = tmp_path / "job"
    d.mkdir()
    for r in ranks:
        write_json(host_bound_loop(steps=4), d / f"rank{r}.json", rank=None if world is None else r, world=world or 1)
    return d


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "helpers", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_a_part_of_a_job_is_said_by_every_command(tmp_path):
    d = _folder(tmp_path, [0, 3], world=8)
    trace = helpers.load(d)
    assert trace.metadata["job_world_size"] == 8
    assert helpers.metrics.summary(trace)["job_world_size"] == 8
    for cmd in ("summary", "diagnose", "ranks"):
        out = _cli(cmd, str(d))
        assert out.returncode == 0, out.stderr
        assert "job had 8 ranks; this folder holds 2 (ranks 0, 3)" in out.stdout, (cmd, out.stdout)
    doc = json.loads(_cli("ranks", str(d), "--json").stdout)
    assert doc["job_world_size"] == 8


@pytest.mark.parametrize("diagnosed", [256, 1])  # every rank diagnosed; or most only their figures, from one table
def test_the_rank_by_rank_path_says_it_too(tmp_path, monkeypatch, diagnosed):
    from helpers import jobs, render

    monkeypatch.setattr(jobs, "DIAGNOSED_RANKS", diagnosed)
    d = _folder(tmp_path, [1, 2, 5], world=6)
    report = jobs.analyse_job(d, workers=1)
    assert report["job_world_size"] == 6
    assert "job had 6 ranks; this folder holds 3 (ranks 1, 2, 5)" in render.job_text(report)


@pytest.mark.parametrize("world", [None, 2, 0, -3, 10**12])
def test_a_whole_job_or_no_size_says_nothing(tmp_path, world):
    d = _folder(tmp_path, [0, 1], world=world)
    trace = helpers.load(d)
    assert "job_world_size" not in trace.metadata  # a damaged or absent size is not believed
    assert "job had" not in _cli("summary", str(d)).stdout
