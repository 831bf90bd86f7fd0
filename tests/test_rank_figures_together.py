"""A job's figures-only ranks are worked out a few at a time on one table of them (``jobs.analyse_figures``): every
figure must be the one the rank gives on its own (``analyse_rank(..., findings=False)``), bit for bit, whatever the
ranks hold (GPU and host collectives, marked steps or none, a step pattern, ranks of several formats, no events),
and a job's report must be the same with the shared table and without it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import jobs

ROOT = Path(__file__).resolve().parents[1]

from test_jobs_scale import job  # noqa: E402


def _same(alone: jobs.RankSummary, together: jobs.RankSummary) -> None:
    for name in ("rank", "source", "format", "events", "has_gpu", "diagnosed", "findings"):
        assert getattr(alone, name) == getattr(together, name), (alone.source, name)
    assert set(alone.comm) == set(together.comm) == set(jobs.COMM_COLUMNS)
    for c in jobs.COMM_COLUMNS:
        a, b = alone.comm[c], together.comm[c]
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True), (alone.source, c)


def _files(tmp_path: Path) -> list[Path]:
    """Ranks unlike each other: the course's gloo ranks (host collectives), recordings with and without step
    markers (a GPU-paced loop among them), an Nsight export, tiny ranks with one slow one, a rank with no events."""
    corpus = ROOT / "tests" / "corpus"
    picked = [*sorted((ROOT / "data" / "communication__ddp__cpu").glob("*.json.gz")),
              *sorted((ROOT / "data" / "communication__imbalance__cpu").glob("*.json.gz")),
              *(corpus / n for n in ("hta_event_sync_multistream.json.gz", "hta_cpu_only_rank34.json.gz",
                                     "hta_triton_example.json.gz", "tl_torch_compile_triton.json.gz",
                                     "hta_mi250_minitoy_train.json.gz", "hta_gp100_tiny_training_loop.json.gz",
                                     "nsys_extrap_gtx1060_concurrent.sqlite.gz")),
              ROOT / "data" / "gpu_bound__bf16__h200.json.gz"]
    tiny = sorted(job(tmp_path, 9, slow=(4,), kernels=3).iterdir())
    empty = tmp_path / "rank_empty.json"
    empty.write_text(json.dumps({"traceEvents": []}))
    return [*picked, *tiny[:5], empty, *tiny[5:]]


@pytest.mark.parametrize("pattern", [None, "ProfilerStep"])
def test_figures_of_ranks_together_are_each_ranks_own(tmp_path, monkeypatch, pattern):
    monkeypatch.setattr(jobs, "_rank_of", lambda path, meta, index: index)  # the recordings all say rank 0
    files = _files(tmp_path)
    args = [(str(f), i, pattern, None, None, False) for i, f in enumerate(files)]
    alone = [jobs.analyse_rank(*a) for a in args]
    assert sum(len(s.comm["step"]) for s in alone) > len(files)  # steps found: figures to compare
    for order in (args, args[::-1], args[1::2] + args[::2]):
        for s, a in zip(jobs.analyse_figures(order), order):
            _same(alone[a[1]], s)
    for k in range(0, len(args), 4):  # in small groups too (a group of one rank of each kind)
        for s, a in zip(jobs.analyse_figures(args[k:k + 4]), args[k:k + 4]):
            _same(alone[a[1]], s)


def test_ranks_claiming_one_rank_are_still_refused(tmp_path):
    folder = job(tmp_path, 3, kernels=3)
    doc = json.loads((folder / "rank00001.json").read_text())
    doc["distributedInfo"]["rank"] = 0
    (folder / "rank00001.json").write_text(json.dumps(doc))
    args = [(str(f), i, None, None, None, False) for i, f in enumerate(sorted(folder.iterdir()))]
    for s, a in zip(jobs.analyse_figures(args), args):
        _same(jobs.analyse_rank(*a), s)
    with pytest.raises(jobs.TraceError, match="two files claim rank 0"):
        jobs.reduce_ranks(jobs.analyse_figures(args))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_jobs_report_is_the_same_with_and_without_the_shared_table(tmp_path, monkeypatch, workers):
    folder = job(tmp_path, 40, slow=(7, 30), kernels=4)
    monkeypatch.setattr(jobs, "DIAGNOSED_RANKS", 6)  # the figures-only path for most of them
    together = jobs.analyse_job(folder, workers=workers)
    monkeypatch.setattr(jobs, "JOIN_EVENTS", 0)  # no rank shares a table: each analysed on its own
    alone = jobs.analyse_job(folder, workers=workers)
    assert together["diagnosed"] == alone["diagnosed"] == 6
    assert together.keys() == alone.keys()
    for key in together:
        if key == "per_rank":
            assert together[key].equals(alone[key])
        else:
            assert together[key] == alone[key], key


def test_a_step_pattern_refused_on_the_ranks_together_leaves_each_rank_to_decide(tmp_path, monkeypatch):
    """A step pattern runs under a time bound; on the names of many ranks together it may run out where each rank's
    own names would not: the ranks are then analysed one by one, as without the shared table."""
    folder = job(tmp_path, 5, kernels=3)
    args = [(str(f), i, "ProfilerStep", None, None, False) for i, f in enumerate(sorted(folder.iterdir()))]
    alone = [jobs.analyse_rank(*a) for a in args]
    real = jobs.finish

    def bounded(events, *a, **kw):
        if events["rank"].nunique() > 1:
            raise jobs.TraceError("step pattern 'ProfilerStep' did not finish within 5 s")
        return real(events, *a, **kw)

    monkeypatch.setattr(jobs, "finish", bounded)
    for s, a in zip(jobs.analyse_figures(args), alone):
        _same(a, s)


@pytest.mark.parametrize("held, each", [(1, 2 << 20), (4_000, 2 << 20), (16 << 20, 3_000)])
def test_ranks_are_held_for_a_shared_table_within_a_bound(tmp_path, monkeypatch, held, each):
    """Small ranks wait for their shared table only up to JOIN_HELD_BYTES together, and a rank over JOIN_BYTES (a long
    name, say) is analysed as soon as it is read: a folder of small files that inflate is never held whole. The
    figures are the same however the ranks are grouped."""
    folder = job(tmp_path, 12, slow=(3,), kernels=3)
    doc = json.loads((folder / "rank00005.json").read_text())
    doc["traceEvents"][1]["name"] = "cudaLaunchKernel_" + "x" * 5_000  # its columns alone are over 3,000 bytes
    (folder / "rank00005.json").write_text(json.dumps(doc))
    monkeypatch.setattr(jobs, "JOIN_HELD_BYTES", held)
    monkeypatch.setattr(jobs, "JOIN_BYTES", each)
    args = [(str(f), i, None, None, None, False) for i, f in enumerate(sorted(folder.iterdir()))]
    alone = [jobs.analyse_rank(*a) for a in args]
    groups = []
    real = jobs._figures_of_held
    monkeypatch.setattr(jobs, "_figures_of_held", lambda h, *a: groups.append([i for i, _ in h]) or real(h, *a))
    for s, a in zip(jobs.analyse_figures(args), alone):
        _same(a, s)
    held_at_once = max(len(g) for g in groups)
    assert held_at_once == (1 if held == 1 else 11 if each == 3_000 else 12 if held > 10**6 else held_at_once)
    if each == 3_000:
        assert all(5 not in g for g in groups)  # the large rank was never held
    if held == 4_000:
        assert len(groups) > 2 and held_at_once < 12


def test_a_ranks_gpu_is_judged_as_on_its_own_table(monkeypatch):
    """``has_gpu`` of a rank alone: a row on a device and a row of GPU work, not necessarily the same row (a rank
    whose kernels name no device beside a GPU-side range that does); its figures alone and together agree."""
    def columns(rank: int, kernel_device: int) -> dict:
        kind = ["annotation", "runtime", "kernel", "gpu_annotation"]
        return {"name": np.array(["ProfilerStep#1", "cudaLaunchKernel", "gemm", "nccl:range"], dtype=object),
                "kind": np.array(kind, dtype=object), "start_us": np.array([0.0, 5.0, 10.0, 10.0]),
                "dur_us": np.array([700.0, 4.0, 100.0, 100.0]), "device": np.array([-1, -1, kernel_device, 0]),
                "stream": np.array([-1, -1, 7, 7]), "correlation": np.array([-1, 1, 1, -1]),
                "rank": np.full(4, rank, dtype=np.int64)}

    reads = {f"r{r}": (Path(f"r{r}"), columns(r, -1 if r == 1 else 0), {}, "kineto", r) for r in range(3)}
    monkeypatch.setattr(jobs, "_read_rank", lambda path, *a: reads[path])
    args = [(f"r{r}", r, None, None, None, False) for r in range(3)]
    together = jobs.analyse_figures(args)
    assert [s.has_gpu for s in together] == [True, True, True]  # rank 1: a device row, and GPU work, apart
    for s, a in zip(together, args):
        _same(jobs.analyse_rank(*a), s)
