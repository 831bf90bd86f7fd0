"""Labs 09-11 and lab 04's published-job section: a learner function that raises, returns nonsense or never returns
gets one line from every check that calls it, within the checks' time limit, and no traceback."""

from __future__ import annotations

import time

import pytest
import torch

from helpers import checks
from helpers.checks import CheckFailed, _core


def _entries() -> dict:
    return {
        "lab09 matmul_flops": lambda behave: checks.check_matmul_flops(lambda model, x: behave()),
        "lab09 roofline_point": lambda behave: checks.check_roofline_point(lambda *a: behave()),
        "lab09 pad_head": lambda behave: checks.check_padded_head(lambda model, m: behave()),
        "lab09 attention": lambda behave: checks.check_sdpa_attention(lambda q, k, v: behave(), "cpu"),
        "lab10 memory_state": lambda behave: checks.check_memory_state(lambda s: behave()),
        "lab10 allocated_over_time": lambda behave: checks.check_allocated_over_time(lambda e: behave()),
        "lab10 transient_bytes": lambda behave: checks.check_transient_bytes(lambda w, d: behave(), "cpu"),
        "lab10 optimizer_in_backward": lambda behave: checks.check_optimizer_in_backward(lambda model, lr: behave()),
        "lab10 oom_cause": lambda behave: checks.check_oom_triage(lambda f: behave()),
        "lab11 environment_pitfalls": lambda behave: checks.check_environment_pitfalls(lambda s: behave()),
    }


ENTRIES = list(_entries())


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_learner_function_that_raises_is_one_line(entry):
    def behave():
        raise TypeError("boom")

    with pytest.raises(CheckFailed) as exc:
        _entries()[entry](behave)
    text = str(exc.value)
    assert "raised TypeError" in text and "\n" not in text and "passed" not in text


@pytest.mark.parametrize("entry", ["lab09 matmul_flops", "lab10 oom_cause", "lab11 environment_pitfalls", "lab10 memory_state"])
def test_a_learner_function_that_never_returns_is_stopped(entry, monkeypatch):
    monkeypatch.setattr(_core, "LEARNER_TIMEOUT_S", 0.3)
    t0 = time.monotonic()
    with pytest.raises(CheckFailed, match="did not return within"):
        _entries()[entry](lambda: time.sleep(3))
    assert time.monotonic() - t0 < 2.5


@pytest.mark.parametrize("entry,returns", [("lab09 matmul_flops", "many"), ("lab10 memory_state", [1]),
                                           ("lab10 oom_cause", None), ("lab11 environment_pitfalls", "launch_blocking")])
def test_a_learner_function_that_returns_the_wrong_kind_of_thing_is_told_so(entry, returns):
    with pytest.raises(CheckFailed, match="should return|returned"):
        _entries()[entry](lambda: returns)


def test_the_published_job_reading_takes_any_dict_without_a_traceback():
    import helpers

    job = helpers.load(checks.PUBLISHED_JOB)
    for junk in ({}, {"late_rank": "seven"}, {"nccl_stream": 84, "late_rank": 7, "waited_longest": 1, "slow_backward": "4,5"},
                 {"nccl_stream": 84, "late_rank": 7, "waited_longest": 1, "slow_backward": ["four", None]},
                 "not a dict", {"nccl_stream": 84, "late_rank": 7, "waited_longest": 1, "slow_backward": [4, 5], "wait_ms": "x"}):
        with pytest.raises(CheckFailed):
            checks.check_published_job_reading(junk, job)
    assert torch.is_grad_enabled()
