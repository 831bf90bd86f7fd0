"""A job with several bad rank files names the same one on every run: the first in the folder's order that fails,
not whichever worker process failed first in time (a quick refusal of a later file used to win the race)."""

from __future__ import annotations

import json

import pytest

from helpers import TraceError, jobs


def test_the_first_bad_rank_in_order_is_named_whichever_fails_first(tmp_path):
    event = json.dumps({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0})
    # rank 0: 6 MB of events cut off before the end (read to the end before it is refused); rank 1: 6 MB that is
    # no JSON at all (refused at its first byte). Each is over a worker task's bytes, so they run side by side.
    slow = '{"traceEvents": [' + ", ".join([event] * (6_000_000 // len(event)))
    (tmp_path / "rank0.json").write_text(slow)
    (tmp_path / "rank1.json").write_bytes(b"x" * 6_000_000)
    for _ in range(3):
        with pytest.raises(TraceError) as info:
            jobs.analyse_job(tmp_path, workers=2)
        assert "rank0.json" in str(info.value) and "rank1.json" not in str(info.value), info.value
