"""Lab 04, section 4: the reading of the published eight-GPU NCCL job is recomputed from the job itself, and the
misreadings a learner makes (the longest collective taken for the slow rank, a share for a fraction) are refused."""

from __future__ import annotations

import shutil

import pytest

import helpers
from helpers import checks
from helpers.checks import CheckFailed

RIGHT = {"nccl_stream": 84, "late_rank": 7, "waited_longest": 1, "wait_ms": 7.625, "slow_backward": [4, 5],
         "overlap_share": 0.034}


@pytest.fixture(scope="module")
def job():
    return helpers.load(checks.PUBLISHED_JOB)


def test_the_reading_of_the_job_passes_and_matches_what_was_read_by_hand(job):
    assert checks.check_published_job_reading(RIGHT, job).startswith("passed")
    assert checks.check_published_job_reading({**RIGHT, "slow_backward": (5, 4)}, job).startswith("passed")
    table = checks.rank_table(job)
    assert list(table.index) == list(range(8)) and table.loc[7, "step_starts_ms"] == pytest.approx(7.51, abs=0.01)


@pytest.mark.parametrize("wrong,words", [
    ({"late_rank": 1}, "starts last"),            # the rank with the longest collective taken for the slow one
    ({"waited_longest": 7}, "runs longest"),
    ({"nccl_stream": 7}, "collective kernels"),
    ({"slow_backward": [1, 3]}, "backward"),
    ({"wait_ms": 7625.0}, "1000 times"),
    ({"overlap_share": 0.97}, "exposed/collective"),  # exposed share given instead of the hidden share
])
def test_misreadings_are_refused_with_what_to_look_at(job, wrong, words):
    with pytest.raises(CheckFailed, match=words):
        checks.check_published_job_reading({**RIGHT, **wrong}, job)


def test_only_the_published_job_itself_is_read(job, tmp_path):
    copy = tmp_path / "job"
    shutil.copytree(checks.PUBLISHED_JOB, copy)
    with pytest.raises(CheckFailed, match="published job itself"):
        checks.check_published_job_reading(RIGHT, helpers.load(copy))
    assert checks.published_job_entry()["licence"].startswith("MIT")
