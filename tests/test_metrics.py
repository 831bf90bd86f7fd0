"""Every metric on a synthetic two-step trace whose answers were worked out by hand (see synth.two_step_loop)."""

import numpy as np
import pytest
from synth import Ev, two_step_loop, write_json

import helpers
from helpers import metrics as m


@pytest.fixture
def trace(tmp_path):
    return helpers.load(write_json(two_step_loop(), tmp_path / "t.json"), step_pattern=r"^step \d+$")


def test_interval_helpers():
    s, e = m.merge_intervals(np.array([5.0, 0, 2, 10]), np.array([6.0, 3, 4, 12]))
    assert s.tolist() == [0, 5, 10] and e.tolist() == [4, 6, 12]
    assert m.overlap(s, e, np.array([3.0, 0]), np.array([11.0, 100])).tolist() == [3.0, 7.0]
    gs, ge = m.gaps_in(s, e, 1.0, 11.0)
    assert list(zip(gs, ge)) == [(4, 5), (6, 10)]


def test_steps_found(trace):
    assert trace.steps[["start_us", "end_us"]].values.tolist() == [[0, 1000], [1000, 2000]]


def test_gpu_busy(trace):
    busy = m.gpu_busy(trace)
    assert busy["busy_us"].tolist() == pytest.approx([400, 850])
    assert busy["kernel_us"].tolist() == pytest.approx([400, 800])
    assert m.gpu_utilization(trace) == pytest.approx(1250 / 2000)


def test_stream_busy(trace):
    sb = m.stream_busy(trace).set_index("stream")
    # stream 7: kernels 200 + 100 + 800 us and the 50 us copy; stream 8: one 150 us kernel; 2000 us of steps
    assert sb.loc[7, "busy_us"] == pytest.approx(1150) and sb.loc[8, "busy_us"] == pytest.approx(150)
    assert sb.loc[7, "busy_share"] == pytest.approx(0.575)


def test_idle_gaps_and_causes(trace):
    gaps = m.idle_gaps(trace)
    got = [(g.start_us, g.end_us, g.cause) for g in gaps.itertuples()]
    # (400, 600) follows the sync, but the host waited only 50 us of it while the GPU computed: removing the
    # sync would win 50 us, the host's own 200 us after it (outside every op) win back all of the gap
    assert got == [(0, 100, "data_wait"), (400, 600, "other"), (700, 1000, "launch"), (1000, 1050, "other"), (1900, 2000, "other")]
    assert gaps["after_sync"].tolist() == [False, True, False, False, False]
    assert m.blocked_while_computing(trace) == 50
    assert m.idle_by_cause(trace) == {"sync": 0, "data_wait": 100, "collective": 0, "launch": 300, "graph": 0, "other": 350}


def test_kernel_stats(trace):
    k = m.kernel_stats(trace)
    assert (k["count"], k["per_step"], k["median_us"], k["share_under_10us"]) == (4, 2.0, 175.0, 0.0)
    assert k["top"]["name"].tolist()[0] == "long_k"


def test_launch_stats(trace):
    s = m.launch_stats(trace)
    assert s["launch_calls"] == 4
    assert s["median_launch_call_us"] == pytest.approx(4.5)
    assert s["median_launch_to_start_us"] == pytest.approx(10)
    assert s["individually_launched_share"] == 1.0


def test_copy_stats(trace):
    c = m.copy_stats(trace).iloc[0]
    assert (c.copy_kind, c.host_memory, c["count"]) == ("H2D", "pageable", 1)
    assert c.gb_per_s == pytest.approx(100.0)
    assert c.overlap_share == 0.0
    assert c.time_per_step_us == pytest.approx(25.0)


def test_sync_stats(trace):
    s = m.sync_stats(trace)
    assert s["sync_points_per_step"] == 0.5
    assert s["blocked_us_per_step"] == pytest.approx(30.0)
    assert s["blocked_share"] == pytest.approx(60 / 2000)
    assert s["causes"] == {"cudaStreamSynchronize": 1}


def test_data_wait(trace):
    assert m.data_wait(trace) == pytest.approx({"data_wait_us_per_step": 45.0, "data_wait_share": 90 / 2000})


def test_step_breakdown_adds_up(trace):
    b = m.step_breakdown(trace)
    parts = b[["gpu_busy_us", "sync_us", "data_wait_us", "collective_us", "launch_us", "other_us"]].sum(axis=1)
    assert parts.tolist() == pytest.approx(b["step_us"].tolist())


def test_last_window_covers_the_gpu_work_of_the_last_step(tmp_path):
    from synth import Ev

    us = 1000
    # two host steps of 100 us, each launching a 380-400 us kernel: the GPU runs a whole step behind, so
    # the windows are the GPU's steps (tests/test_diagnosis_steps.py has the steady and single-step cases)
    events = [Ev("annotation", "step 0", 0, 100 * us), Ev("annotation", "step 1", 100 * us, 200 * us),
              Ev("runtime", "cudaLaunchKernel", 10 * us, 12 * us, correlation=1),
              Ev("kernel", "k0", 20 * us, 400 * us, correlation=1),
              Ev("runtime", "cudaLaunchKernel", 110 * us, 112 * us, correlation=2),
              Ev("kernel", "k1", 400 * us, 800 * us, correlation=2)]
    t = helpers.load(write_json(events, tmp_path / "ahead.json"))
    assert m.windows(t)["end_us"].max() == 800
    assert m.step_time_ms(t) == pytest.approx(0.4)
    # the host paces the loop (step 0's kernel ends before step 1 starts): host windows, the last one
    # stretched by its own GPU work only
    events[3] = Ev("kernel", "k0", 20 * us, 90 * us, correlation=1)
    events[5] = Ev("kernel", "k1", 115 * us, 350 * us, correlation=2)
    t = helpers.load(write_json(events, tmp_path / "half.json"))
    assert m.windows(t)[["start_us", "end_us"]].values.tolist() == [[0, 100], [100, 350]]


def test_cpu_only_trace_says_so(tmp_path):
    from synth import Ev

    us = 1000
    events = [Ev("annotation", "step 0", 0, 100 * us), Ev("annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 60 * us),
              Ev("cpu_op", "aten::addmm", 60 * us, 100 * us)]
    t = helpers.load(write_json(events, tmp_path / "cpu.json"))
    s = m.summary(t)
    assert s["gpu_utilization"] is None and not s["has_gpu"]
    from helpers.render import summary_text

    assert "no GPU activity" in summary_text(s)  # the words live in the renderer, the numbers in metrics
    assert s["data_wait_share"] == pytest.approx(0.6)
    assert [f.pattern for f in helpers.diagnose(t)] == ["data_stall"]


def test_comparison_table(trace):
    table = m.comparison(trace, trace)
    assert set(table["better"]) <= {"lower", "higher"}
    assert all(isinstance(v, (int, float)) or v is None for v in table["before"])


def test_change_words():
    from helpers.render import change_text

    assert change_text(2.0, 0.0, "lower") == "2 -> 0 (better)"
    assert change_text(2.0, 1.0, "lower") == "2.00x less (better)"
    assert change_text(0.2, 0.4, "higher") == "2.00x more (better)"
    assert change_text(1.0, 1.0, "lower") == "same"


def _data_phase_with_copy(tmp_path, blocking: bool):
    """Two 10 ms steps whose ``data`` phase is a 4 ms DataLoader fetch then a 2 ms ``.to(device)``."""
    ev = []
    for i, t0 in enumerate((0, 10_000_000)):
        ms = 1_000_000
        ev += [Ev("annotation", f"ProfilerStep#{i}", t0, t0 + 10 * ms),
               Ev("annotation", "data", t0, t0 + 6 * ms),
               Ev("annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0, t0 + 4 * ms),
               Ev("cpu_op", "aten::to", t0 + 4 * ms, t0 + 6 * ms),
               Ev("runtime", "cudaMemcpyAsync", t0 + 4 * ms + 1000, t0 + (6 * ms if blocking else 4 * ms + 20_000),
                  correlation=100 + i),
               Ev("memcpy", "copy", t0 + 4 * ms + 5000, t0 + 6 * ms - 1000, correlation=100 + i, copy="H2D",
                  host_mem="pageable", bytes=1 << 20),
               Ev("kernel", "k", t0 + 6 * ms + 10_000, t0 + 10 * ms - 10_000, correlation=200 + i)]
    return helpers.load(write_json(ev, tmp_path / f"copy{int(blocking)}.json"))


@pytest.mark.parametrize("blocking", [True, False])
def test_a_device_copy_inside_the_data_phase_is_not_data_wait(tmp_path, blocking):
    # The fetch (4 of 10 ms) is waiting for data; the .to(device) after it (2 ms) is copy work, whether
    # the host blocks in it or not: counting it as data wait would blame the loader for the copy.
    t = _data_phase_with_copy(tmp_path, blocking)
    assert m.data_wait(t)["data_wait_share"] == pytest.approx(0.4, abs=1e-6)


def test_a_data_phase_without_device_copies_counts_whole(tmp_path):
    ms = 1_000_000
    ev = [Ev("annotation", "ProfilerStep#0", 0, 10 * ms), Ev("annotation", "data", 0, 6 * ms),
          Ev("cpu_op", "aten::to", 4 * ms, 6 * ms),  # a dtype cast on the host: no memcpy call inside
          Ev("kernel", "k", 6 * ms + 10_000, 10 * ms - 10_000, correlation=1),
          Ev("runtime", "cudaLaunchKernel", 6 * ms, 6 * ms + 5000, correlation=1)]
    t = helpers.load(write_json(ev, tmp_path / "cast.json"))
    assert m.data_wait(t)["data_wait_share"] == pytest.approx(0.6, abs=1e-6)


def _graph_replays(steps: int = 3) -> list[Ev]:
    """Each 1000 us step: 300 us of framework ops, then a cudaGraphLaunch the host sits in for 400 us while its four
    100 us kernels run with 50 us between them (the GPU's own node-to-node gaps), then 100 us of nothing."""
    us, out = 1000, []
    for s in range(steps):
        t0, c = s * 1000 * us, s + 1
        out.append(Ev("annotation", f"step {s}", t0, t0 + 1000 * us))
        out.append(Ev("cpu_op", "aten::copy_", t0, t0 + 300 * us))
        out.append(Ev("runtime", "cudaGraphLaunch", t0 + 300 * us, t0 + 700 * us, correlation=c))
        for k in range(4):
            ks = t0 + (310 + 150 * k) * us
            out.append(Ev("kernel", f"node{k}", ks, ks + 100 * us, correlation=c))
    return out


def test_gaps_inside_a_graph_replay_are_the_graphs_not_the_launches(tmp_path):
    # The host sits in cudaGraphLaunch (a launch call) through the replay, yet the 50 us between the replay's own
    # kernels are the GPU's: the host queued them all in one call. The gap before the replay, while the host ran
    # framework ops, is still the launches'.
    trace = helpers.load(write_json(_graph_replays(), tmp_path / "g.json"), step_pattern=r"^step \d+$")
    gaps = m.idle_gaps(trace)
    first = gaps[gaps["step"] == 0]
    assert [(g.start_us, g.end_us, g.cause) for g in first.itertuples()] == [
        (0, 310, "launch"), (410, 460, "graph"), (560, 610, "graph"), (710, 760, "graph"), (860, 1000, "other")]
    assert not gaps.loc[gaps["cause"] == "graph", "after_sync"].any()
    by = m.idle_by_cause(trace)
    assert by["graph"] == pytest.approx(3 * 150) and by["launch"] == pytest.approx(3 * 310)
    assert m.step_breakdown(trace)["graph_us"].tolist() == pytest.approx([150, 150, 150])
