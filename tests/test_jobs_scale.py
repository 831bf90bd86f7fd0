"""Jobs too large to read as one timeline: ``diagnose FOLDER`` takes the bounded path (rank by rank, as ``ranks``
does) by itself, and a job of thousands of small ranks diagnoses a bounded number of them, so its time is the
reading of its files and not minutes of diagnoses."""

from __future__ import annotations

import json

import pytest

from helpers import jobs
from helpers.cli import main


def job(tmp_path, ranks: int, slow: tuple[int, ...] = (), kernels: int = 30):
    """``ranks`` one-step ranks of ``kernels`` kernels each, the ``slow`` ones computing 3x longer."""
    folder = tmp_path / "job"
    folder.mkdir()
    for r in range(ranks):
        k = 3.0 if r in slow else 1.0
        events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0,
                   "dur": 200 * k * kernels, "args": {}}]
        for i in range(kernels):
            t = 10 + i * 200 * k
            events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t,
                        "dur": 5, "args": {"correlation": i + 1}},
                       {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 8, "dur": 150 * k,
                        "args": {"device": 0, "stream": 7, "correlation": i + 1}}]
        doc = {"distributedInfo": {"backend": "nccl", "rank": r, "world_size": ranks}, "traceEvents": events}
        (folder / f"rank{r:05d}.json").write_text(json.dumps(doc))
    return folder


def test_diagnose_reads_a_folder_of_many_ranks_rank_by_rank(tmp_path, monkeypatch, capsys):
    folder = job(tmp_path, 6, slow=(4,))
    assert jobs.rank_by_rank(folder) is None  # small: one timeline, diagnosed across ranks as before
    assert main(["diagnose", str(folder)]) == 0
    whole = capsys.readouterr().out
    assert "rank by rank" not in whole
    monkeypatch.setattr(jobs, "TIMELINE_RANKS", 4)
    assert main(["diagnose", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "6 ranks, more than the 4 diagnosed as one timeline, so read rank by rank" in out
    assert "stragglers: 4" in out
    assert main(["diagnose", str(folder), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["ranks", str(folder), "--json"]) == 0
    ranks = json.loads(capsys.readouterr().out)
    assert doc["read"].startswith("6 ranks") and doc["stragglers"] == ranks["stragglers"] == [4]
    assert doc["per_rank"] == ranks["per_rank"] and doc["compute_spread"] == ranks["compute_spread"]
    monkeypatch.setattr(jobs, "TIMELINE_RANKS", 64)
    monkeypatch.setattr(jobs, "TIMELINE_BYTES", 1000)
    assert "MB of traces, more than the 0 MB held as one timeline" in (main(["diagnose", str(folder)]), capsys.readouterr().out)[1]
    # the limits given hold on the bounded path too, for the ranks together
    assert main(["diagnose", str(folder), "--max-events", "300"]) == 2
    assert "ranks together hold more than 300 events" in capsys.readouterr().err


@pytest.mark.parametrize("workers", [1, 2])
def test_a_job_of_many_ranks_diagnoses_a_bounded_number_of_them(tmp_path, monkeypatch, workers):
    """Past DIAGNOSED_RANKS, every rank gives its figures, and the ranks worth a look (the straggler, the extremes,
    an even spread) their diagnosis too; the job's own figures are those of a job diagnosed rank by rank in full."""
    folder = job(tmp_path, 12, slow=(7,), kernels=10)
    full = jobs.analyse_job(folder, workers=workers)
    monkeypatch.setattr(jobs, "DIAGNOSED_RANKS", 5)
    calls = []
    if workers == 1:  # counted in this process (figures only: a few ranks at a time, on one table of them)
        real, together = jobs.analyse_rank, jobs.analyse_figures
        monkeypatch.setattr(jobs, "analyse_rank", lambda *a, **kw: calls.append(a[5]) or real(*a, **kw))
        monkeypatch.setattr(jobs, "analyse_figures", lambda args, *a: calls.extend(x[5] for x in args) or together(args, *a))
    part = jobs.analyse_job(folder, workers=workers)
    assert part["diagnosed"] == 5 and full["diagnosed"] == 12
    if workers == 1:
        assert calls.count(True) == 5 and calls.count(False) == 12
    for key in ("stragglers", "compute_spread", "slowest_rank", "fastest_rank", "events"):
        assert part[key] == full[key], key
    table = part["per_rank"].set_index("rank")
    assert table.loc[7, "diagnosed"] and table.loc[7, "top_finding"] == full["per_rank"].set_index("rank").loc[7, "top_finding"]
    assert (~table["diagnosed"]).sum() == 7 and (table.loc[~table["diagnosed"], "top_finding"] == "").all()
    from helpers import render

    text = render.job_text(part)
    assert "(figures only)" in text and "the 5 ranks diagnosed on their own" in text
