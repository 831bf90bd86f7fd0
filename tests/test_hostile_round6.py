"""Hostile inputs, round 6: a folder rank without events, figures that round to zero quoted as evidence, and
the families of this round (see each section)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synth import kineto_doc, two_step_loop, write_json

import helpers
from helpers import metrics, patterns, render
from helpers.cli import main

ROOT = Path(__file__).resolve().parents[1]


# --- a rank whose file holds no events is listed, saying so ----------------------------------------------------

def _job_with_a_silent_rank(tmp_path: Path, silent: tuple[int, ...] = (1,)) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    for r in range(3):
        if r in silent:
            (job / f"rank{r}.json").write_text(json.dumps(kineto_doc([], rank=r, world=3)))
        else:
            write_json(two_step_loop(), job / f"rank{r}.json", rank=r, world=3)
    return job


@pytest.mark.parametrize("silent", [(1,), (0, 2)])
def test_summary_lists_a_rank_without_events_and_says_so(tmp_path, capsys, silent):
    job = _job_with_a_silent_rank(tmp_path, silent)
    s = metrics.summary(helpers.load(job))
    assert s["ranks"] == [0, 1, 2] and s["ranks_without_events"] == list(silent)
    assert main(["summary", str(job)]) == 0
    out = capsys.readouterr().out
    assert "ranks [0, 1, 2]" in out and f"{', '.join(map(str, silent))} ha" in out and "no events" in out
    assert main(["summary", str(job), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranks_without_events"] == list(silent)


def test_a_whole_job_has_no_silent_ranks_key(tmp_path):
    job = _job_with_a_silent_rank(tmp_path, ())
    assert "ranks_without_events" not in metrics.summary(helpers.load(job))
    assert "no events" not in render.summary_text(metrics.summary(helpers.load(job)))


# --- a figure that rounds to 0 is never quoted as evidence ----------------------------------------------------

def _sync_signals(points: float, blocked: float) -> dict:
    return {"sync_points_per_step": points, "sync_blocked_share": blocked, "sync_gpu_idle_share": 0.65,
            "sync_stall_share": 0.2, "gains": {"sync_stall": 0.23}}


@pytest.mark.parametrize("points, blocked", [(0.0, 0.0), (0.04, 0.0), (0.0, 0.004), (0.03, 0.001), (2.0, 0.001),
                                             (2.0, 0.3)])
def test_the_sync_stall_never_quotes_a_zero(points, blocked):
    text = patterns._say_sync_stall(_sync_signals(points, blocked))
    assert "0.0 host syncs" not in text and " 0% of the step for the GPU" not in text, text
    if points >= 0.05:
        assert f"{points:.1f} host syncs per step" in text
    else:
        assert "free GPU memory" in text


def test_shown_is_none_exactly_where_the_format_shows_zero():
    assert patterns._shown(0.04, ".1f") is None and patterns._shown(0.05, ".1f") == "0.1"
    assert patterns._shown(0.004, ".0%") is None
    assert patterns._shown(0.006, ".0%") == "1%" and patterns._shown(-0.0, ".1f") is None


def test_the_empty_cache_trace_says_what_its_sync_waits_are():
    entry = next(e for e in json.loads((ROOT / "data" / "manifest.json").read_text())["traces"]
                 if e.get("workload") == "gpu_bound" and e.get("variant") == "empty_cache")
    findings = helpers.diagnose(helpers.load(ROOT / "data" / entry["file"]))
    sync = next((f for f in findings if f.pattern == "sync_stall"), None)
    if sync is not None:
        assert "0.0 host syncs" not in sync.summary and "free GPU memory" in sync.summary, sync.summary
