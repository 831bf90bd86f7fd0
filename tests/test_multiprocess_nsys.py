"""Nsight Systems exports of multi-process jobs: processes become ranks, gloo collectives marked in
NVTX are collectives, and a rank's compute is its own ranges less the OS calls it slept in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synth import Ev, write_json, write_sqlite

import helpers
from helpers import metrics

DATA = Path(__file__).resolve().parents[1] / "data"
MS = 1_000_000  # ns


def _rank_process(pid: int, rank: int, wait_ms: float, backward_ms: float, mark: bool = True) -> list[Ev]:
    """Two steps of a gloo rank: forward 2 ms, backward with an all-reduce issued at 1 ms whose
    completion the rank sleeps for at the end (pthread_cond_wait), optimizer 1 ms."""
    evs = [Ev("mark", f"rank {rank} of 2", 0, 0, pid=pid, tid=pid)] if mark else []
    t = 1 * MS
    for i in range(2):
        bwd_end = t + int((2 + backward_ms) * MS)
        step_end = bwd_end + 1 * MS
        evs += [
            Ev("annotation", f"step {i}", t, step_end, pid=pid, tid=pid),
            Ev("annotation", "forward", t, t + 2 * MS, pid=pid, tid=pid),
            Ev("annotation", "backward", t + 2 * MS, bwd_end, pid=pid, tid=pid),
            Ev("startend", "gloo:all_reduce", t + 3 * MS, bwd_end, pid=pid, tid=pid),
            Ev("osrt", "pthread_cond_wait", bwd_end - int(wait_ms * MS), bwd_end, pid=pid, tid=pid),
            Ev("osrt", "pthread_cond_signal", t + 3 * MS, t + 3 * MS + 5_000, pid=pid, tid=pid),
            Ev("annotation", "optimizer", bwd_end, step_end, pid=pid, tid=pid),
        ]
        t = step_end
    return evs


def _launcher(pid: int = 100) -> list[Ev]:
    return [Ev("osrt", "poll", 0, 40 * MS, pid=pid, tid=pid)]


def test_processes_become_ranks_by_their_nvtx_marks(tmp_path):
    # rank 1 has the lower pid: the marks, not the pid order, decide
    evs = _launcher() + _rank_process(300, 0, wait_ms=6, backward_ms=8) + _rank_process(200, 1, wait_ms=1, backward_ms=8)
    trace = helpers.load(write_sqlite(evs, tmp_path / "job.sqlite"))
    assert trace.ranks == [0, 1]
    procs = trace.metadata["distributed"]["processes"]
    assert [(p["pid"], p["rank"], p["rank_from"]) for p in procs] == [(300, 0, "NVTX mark"), (200, 1, "NVTX mark")]
    assert not (trace.events["pid"] == 100).any(), "the launcher belongs to no rank"
    assert len(trace.steps) == 4 and set(trace.steps["rank"]) == {0, 1}
    ev = trace.events
    assert set(ev.loc[ev["name"] == "gloo:all_reduce", "kind"]) == {"collective"}
    osrt = ev[ev["kind"] == "osrt"]
    assert len(osrt) == 8 and all(lane.startswith("OS runtime ") for lane in osrt["lane"])


def test_without_marks_ranks_follow_pid_order(tmp_path):
    evs = _launcher() + _rank_process(300, 0, 6, 8, mark=False) + _rank_process(200, 1, 1, 8, mark=False)
    trace = helpers.load(write_sqlite(evs, tmp_path / "job.sqlite"))
    procs = trace.metadata["distributed"]["processes"]
    assert [(p["pid"], p["rank"], p["rank_from"]) for p in procs] == [(200, 0, "pid order"), (300, 1, "pid order")]


def test_one_training_process_keeps_every_event_on_rank_0(tmp_path):
    # a loader worker with OS calls of its own is not a second rank
    evs = _rank_process(300, 0, 6, 8, mark=False) + [Ev("osrt", "read", 2 * MS, 3 * MS, pid=301, tid=301)]
    trace = helpers.load(write_sqlite(evs, tmp_path / "one.sqlite"))
    assert trace.ranks == [0] and trace.metadata["distributed"] == {}
    assert (trace.events["pid"] == 301).sum() == 1


def test_exposed_collective_is_the_time_a_rank_slept_waiting_for_it(tmp_path):
    evs = _rank_process(300, 0, wait_ms=6, backward_ms=8) + _rank_process(200, 1, wait_ms=1, backward_ms=8)
    trace = helpers.load(write_sqlite(evs, tmp_path / "job.sqlite"))
    cs = metrics.comm_stats(trace).groupby("rank")[["window_us", "collective_us", "compute_us", "exposed_us"]].mean()
    # step: forward 2 + backward 8 + optimizer 1 = 11 ms; the all-reduce runs from 1 ms into backward to its end
    assert cs.loc[0, "window_us"] == pytest.approx(11_000)
    assert cs.loc[0, "collective_us"] == pytest.approx(7_000)
    assert cs.loc[0, "exposed_us"] == pytest.approx(6_000)  # the cond wait
    assert cs.loc[1, "exposed_us"] == pytest.approx(1_000)
    assert cs.loc[0, "compute_us"] == pytest.approx(11_000 - 6_000)
    assert cs.loc[1, "compute_us"] == pytest.approx(11_000 - 1_000)
    spread = metrics.rank_imbalance(trace)["compute_spread"]
    assert spread == pytest.approx((10_000 - 5_000) / 10_000)


def test_profiler_traces_still_count_framework_ops_as_compute(tmp_path):
    """Kineto traces have cpu_op rows: compute stays the ops' time, whatever the ranges say."""
    evs = [Ev("annotation", "ProfilerStep#1", 0, 10 * MS), Ev("annotation", "backward", 0, 10 * MS),
           Ev("cpu_op", "aten::mm", 1 * MS, 4 * MS)]
    trace = helpers.load(write_json(evs, tmp_path / "k.json"))
    s, e = metrics.host_union(trace, 0, "host_compute")
    assert float((e - s).sum()) == pytest.approx(3_000)


# --- the recorded gloo jobs (tools/record_traces.py --comm, tools/comm_session.sh) ----------
def _comm_recordings() -> list[dict]:
    doc = json.loads((DATA / "manifest.json").read_text())
    return [e for e in doc.get("recordings", []) if e["workload"] == "communication"]


def test_every_gloo_variant_has_an_nsys_export_and_a_twin_of_the_same_job():
    from helpers.workloads.communication import VARIANTS

    recs = _comm_recordings()
    by = {(e["variant"], e["format"]): e for e in recs}
    for variant in VARIANTS:
        nsys, twin = by[(variant, "nsys-sqlite")], by[(variant, "torch-json")]
        assert nsys["run"] == twin["run"]
        assert "--trace=nvtx,osrt" in nsys["command"] and "--nsys-range" in nsys["command"]
        assert "--mark-collectives" in twin["command"]
    for variant in ("manual", "ddp"):  # the lab's broken and fixed jobs, to open in the Nsight Systems GUI
        assert (DATA / by[(variant, "nsys-sqlite")]["report"]).stat().st_size > 0


@pytest.mark.parametrize("variant", ["manual", "ddp", "imbalance"])
def test_recorded_gloo_exports_map_both_ranks_and_see_their_collectives(variant):
    e = next(r for r in _comm_recordings() if r["variant"] == variant and r["format"] == "nsys-sqlite")
    trace = helpers.load(DATA / e["file"])
    assert trace.ranks == [0, 1]
    assert {p["rank_from"] for p in trace.metadata["distributed"]["processes"]} == {"NVTX mark"}
    assert len(trace.steps) == 10  # 5 NVTX steps a rank
    coll = trace.events[trace.events["kind"] == "collective"]
    assert set(coll["rank"]) == {0, 1}
