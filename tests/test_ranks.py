"""Many ranks: the vectorised step labelling, the rank-by-rank job analysis and its reduce."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from synth import Ev, write_json

import helpers
from helpers import cli, jobs, metrics
from helpers.diagnosis import signals
from helpers.errors import TraceError
from helpers.model import assign_steps


def _assign_steps_reference(events: pd.DataFrame, steps: pd.DataFrame) -> None:
    """The per-event implementation assign_steps replaced, kept as the reference it must agree with."""
    events["step"] = -1
    if steps.empty:
        return
    for rank, st in steps.groupby("rank"):
        st = st.sort_values("start_us")
        on_rank = (events["rank"] == rank).to_numpy()
        starts = events.loc[on_rank, "start_us"].to_numpy()
        idx = np.searchsorted(st["start_us"].to_numpy(), starts, side="right") - 1
        inside = (idx >= 0) & (starts < st["end_us"].to_numpy()[np.clip(idx, 0, None)])
        events.loc[on_rank, "step"] = np.where(inside, st["step"].to_numpy()[np.clip(idx, 0, None)], -1)
    api = events[(events["kind"] == "runtime") & (events["correlation"] >= 0)]
    if api.empty:
        return
    launch_step = dict(zip(zip(api["rank"], api["correlation"]), api["step"]))
    dev = (events["device"] >= 0) & (events["correlation"] >= 0)
    if not dev.any():
        return
    keys = zip(events.loc[dev, "rank"], events.loc[dev, "correlation"])
    current = events.loc[dev, "step"].to_numpy()
    events.loc[dev, "step"] = [launch_step.get(k, c) for k, c in zip(keys, current)]


def _random_events(seed: int, n: int = 3000, ranks: int = 4) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    kind = rng.choice(["runtime", "kernel", "cpu_op", "annotation", "memcpy"], n)
    device = np.where(np.isin(kind, ["kernel", "memcpy"]), rng.integers(0, 2, n), -1)
    # Few correlation ids, so ids repeat on a rank (several launches, kernels with no launch) and across ranks.
    corr = np.where(rng.random(n) < 0.85, rng.integers(0, 300, n), -1)
    events = pd.DataFrame({"rank": rng.integers(0, ranks, n), "kind": kind, "start_us": rng.uniform(0, 10_000, n).round(1),
                           "device": device, "correlation": corr, "step": -1})
    rows = []
    for r in range(ranks - 1):  # the last rank has no steps at all
        t = rng.uniform(0, 500)
        for i in range(12):
            d = rng.uniform(100, 1500)
            rows.append((r, i, t, t + d, d))
            # steps that overlap the next (nested or overlapping ranges), gaps between others, a shared start
            t += d * rng.choice([0.5, 1.0, 1.3]) if i != 5 else 0.0
    steps = pd.DataFrame(rows, columns=["rank", "step", "start_us", "end_us", "dur_us"]).sample(frac=1, random_state=seed)
    return events, steps


@pytest.mark.parametrize("seed", range(6))
def test_assign_steps_matches_the_per_event_reference(seed):
    events, steps = _random_events(seed)
    ours, ref = events.copy(), events.copy()
    assign_steps(ours, steps)
    _assign_steps_reference(ref, steps)
    assert (ours["step"] >= 0).any() and (ours["step"] == -1).any()
    np.testing.assert_array_equal(ours["step"].to_numpy(), ref["step"].to_numpy())
    assert ours["step"].dtype == np.int64


def test_assign_steps_edge_cases():
    events, steps = _random_events(0, n=50)
    for ev, st in ((events.iloc[:0].copy(), steps), (events.copy(), steps.iloc[:0])):
        ours, ref = ev.copy(), ev.copy()
        assign_steps(ours, st)
        _assign_steps_reference(ref, st)
        np.testing.assert_array_equal(ours["step"].to_numpy(), ref["step"].to_numpy())
    # a kernel whose launch falls outside every step, on a rank whose launches are all labelled elsewhere
    ev = pd.DataFrame({"rank": [0, 0, 0, 1], "kind": ["runtime", "kernel", "kernel", "kernel"],
                       "start_us": [5.0, 15.0, 1.0, 2.0], "device": [-1, 0, 0, 0], "correlation": [7, 7, 8, 7], "step": -1})
    st = pd.DataFrame({"rank": [0, 1], "step": [0, 0], "start_us": [0.0, 0.0], "end_us": [10.0, 10.0], "dur_us": [10.0, 10.0]})
    assign_steps(ev, st)
    assert ev["step"].tolist() == [0, 0, 0, 0]  # the kernel at 15 us inherits its launch's step 0


# --- many ranks: helpers.jobs -------------------------------------------------------------------
DATA = Path(__file__).resolve().parents[1] / "data"
SHIPPED_JOBS = sorted(p for p in DATA.glob("communication__*__cpu") if p.is_dir())


def _gpu_rank(compute_us: int, steps: int = 4, step_us: int = 1100) -> list[Ev]:
    """One rank of a synchronous data-parallel job: its compute, then an all-reduce that ends when the
    slowest rank's compute does (every rank's step takes ``step_us``)."""
    out, corr = [], 0
    for s in range(steps):
        t = s * step_us * 1000
        out.append(Ev("annotation", f"ProfilerStep#{s}", t, t + step_us * 1000))
        for name, a, b in (("gemm", 10, compute_us), ("ncclDevKernel_AllReduce_Sum_f32", compute_us, step_us - 5)):
            corr += 1
            out.append(Ev("runtime", "cudaLaunchKernel", t + a * 1000 - 5000 if a > 10 else t + 1000, t + a * 1000 - 1000 if a > 10 else t + 5000,
                          correlation=corr))
            out.append(Ev("kernel", name, t + a * 1000, t + b * 1000, correlation=corr))
    return out


def _gpu_job(folder: Path, computes: list[int]) -> Path:
    folder.mkdir()
    for r, c in enumerate(computes):
        write_json(_gpu_rank(c), folder / f"worker{r}.pt.trace.json", rank=r, world=len(computes))
    return folder


def _assert_same_as_in_memory(report: dict, folder: Path) -> None:
    trace = helpers.load(folder)
    sg, imb = signals(trace), metrics.rank_imbalance(trace)
    assert report["ranks"] == len(trace.ranks) and report["events"] == len(trace.events)
    for key in ("comm_exposed_share", "collective_ms_per_step", "exposed_ms_per_step"):
        assert report[key] == pytest.approx(sg[key], rel=1e-9), key
    assert report["compute_spread"] == pytest.approx(imb["compute_spread"], rel=1e-9, abs=1e-12)
    assert (report["slowest_rank"], report["fastest_rank"]) == (imb["slowest_rank"], imb["fastest_rank"])
    pr = report["per_rank"].set_index("rank")
    ref = imb["per_rank"].set_index("rank")
    for ours, theirs in (("compute_ms", "compute_us"), ("exposed_ms", "exposed_us"), ("collective_ms", "collective_us")):
        np.testing.assert_allclose(pr[ours].to_numpy() * 1e3, ref.loc[pr.index, theirs].to_numpy(), rtol=1e-9)
    job_level = [f.pattern for f in helpers.diagnose(trace) if f.pattern in ("communication", "load_imbalance")]
    assert report["findings"] == job_level


@pytest.mark.parametrize("folder", SHIPPED_JOBS, ids=lambda p: p.name)
def test_rank_by_rank_gives_the_in_memory_figures_on_the_shipped_jobs(folder):
    _assert_same_as_in_memory(jobs.analyse_job(folder, workers=1), folder)


def test_shipped_imbalance_job_names_its_straggler():
    report = jobs.analyse_job(DATA / "communication__imbalance__cpu", workers=1)
    assert report["findings"] == ["load_imbalance"] and report["stragglers"] == [report["slowest_rank"]] == [1]


def test_process_pool_gives_the_serial_report_and_finds_the_straggler(tmp_path):
    folder = _gpu_job(tmp_path / "job", [600, 610, 1000, 590, 605, 600])
    serial = jobs.analyse_job(folder, workers=1)
    pooled = jobs.analyse_job(folder, workers=2)
    pd.testing.assert_frame_equal(serial["per_rank"], pooled["per_rank"])
    assert serial["stragglers"] == pooled["stragglers"] == [2] and serial["slowest_rank"] == 2
    assert serial["per_rank"]["compute_ms"].round(3).tolist() == [0.59, 0.6, 0.99, 0.58, 0.595, 0.59]
    _assert_same_as_in_memory(pooled, folder)


def test_bad_rank_and_duplicate_ranks_are_one_trace_error(tmp_path):
    folder = _gpu_job(tmp_path / "job", [600, 600, 600])
    (folder / "worker1.pt.trace.json").write_text("{")
    with pytest.raises(TraceError, match="worker1"):
        jobs.analyse_job(folder, workers=2)
    dup = _gpu_job(tmp_path / "dup", [600])
    write_json(_gpu_rank(600), dup / "other.json", rank=0)
    with pytest.raises(TraceError, match="two files claim rank 0"):
        jobs.analyse_job(dup, workers=1)


def test_cli_ranks(tmp_path, capsys):
    folder = _gpu_job(tmp_path / "job", [600, 1000, 600])
    assert cli.main(["ranks", str(folder), "--workers", "1"]) == 0
    out, err = capsys.readouterr()
    assert "3 ranks" in out and "stragglers: 1" in out and err == ""  # no progress bar when stderr is not a terminal
    assert cli.main(["ranks", str(folder), "--workers", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["stragglers"] == [1] and [r["rank"] for r in doc["per_rank"]] == [0, 1, 2]
    assert cli.main(["ranks", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_progress_bar_only_on_a_terminal(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert jobs.stderr_progress() is None
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    bar = jobs.stderr_progress()
    bar(1, 4)
    bar(4, 4)
    assert "ranks 1/4" in tty.getvalue() and tty.getvalue().endswith("ranks 4/4 [" + "#" * 30 + "]\n")


def test_dask_distributed_scheduler_gives_the_same_report(tmp_path):
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is not installed (requirements.txt pins it)")
    folder = _gpu_job(tmp_path / "job", [600, 1000, 600, 620])
    serial = jobs.analyse_job(folder, workers=1)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster:
        done = []
        report = jobs.analyse_job(folder, scheduler=cluster.scheduler_address, progress=lambda d, n: done.append((d, n)))
    pd.testing.assert_frame_equal(serial["per_rank"], report["per_rank"])
    assert report["stragglers"] == [1] and done[-1] == (4, 4)


def test_no_scheduler_at_the_address_is_one_line():
    pytest.importorskip("distributed", reason="dask[distributed] is not installed (requirements.txt pins it)")
    with pytest.raises(TraceError, match="no Dask scheduler"):
        jobs._on_dask("tcp://127.0.0.1:9", [], None, timeout=2)


def test_successive_windows_of_one_process_are_not_read_as_ranks(tmp_path):
    """tensorboard_trace_handler writes one file a profiling cycle (HOST_PID.TIMESTAMP.pt.trace.json): a log folder
    of one process's cycles, none naming a rank, was read as a 4-rank job and its cycles compared as stragglers
    (a published batch-size sweep's folder). One process id, one window after another: refused in one line, by the
    folder reader and the rank-by-rank path alike. Ranks that run at the same time, or say their rank, are ranks."""
    def cycle(t0_ns):
        return [Ev("cpu_op", "aten::mm", t0_ns, t0_ns + 50_000),
                Ev("runtime", "cudaLaunchKernel", t0_ns + 10_000, t0_ns + 15_000, correlation=1),
                Ev("kernel", "gemm", t0_ns + 20_000, t0_ns + 90_000, correlation=1)]
    windows = tmp_path / "log"
    windows.mkdir()
    for i in range(3):  # one process (synth's PID), cycles a second apart
        write_json(cycle(i * 1_000_000_000), windows / f"host_4242.17337698{i}.pt.trace.json")
    with pytest.raises(TraceError, match="one process .pid 4242. recorded at different times") as err:
        helpers.load(windows)
    assert "\n" not in str(err.value)
    with pytest.raises(TraceError, match="one process"):
        jobs.reduce_ranks(jobs.analyse_figures([(str(f), i, None, None, None)
                                                for i, f in enumerate(jobs.job_files(windows))]))
    with pytest.raises(TraceError, match="one process"):
        jobs.analyse_job(windows, workers=1)
    together = tmp_path / "together"  # the same process id, at the same time (synthetic ranks): still ranks
    together.mkdir()
    for i in range(3):
        write_json(cycle(0), together / f"host_4242.{i}.pt.trace.json")
    assert helpers.load(together).ranks == [0, 1, 2]
    declared = tmp_path / "declared"  # ranks that say so are believed, whatever their clocks
    declared.mkdir()
    for i in range(3):
        write_json(cycle(i * 1_000_000_000), declared / f"w{i}.pt.trace.json", rank=i, world=3)
    assert helpers.load(declared).ranks == [0, 1, 2]
