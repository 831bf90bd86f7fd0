"""The critical path of each step and what-if costs (helpers.critical): synthetic loops whose path and
replays can be worked out by hand, and the course's recordings for the identity (no factors = the measured step)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from synth import Ev, write_json, write_sqlite

import helpers

US = 1000  # ns per microsecond
FETCH = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _load(tmp_path, events, name="t.json", **kw):
    return helpers.load(write_json(events, tmp_path / name, **kw))


def _path_cover(cp) -> None:
    """Stretches never overlap within a rank, and on each rank they add up to its steps' span."""
    for _rank, st in cp.stretches.groupby("rank"):
        s = st.sort_values("start_us")
        assert (s["start_us"].to_numpy()[1:] >= s["end_us"].to_numpy()[:-1] - 1e-6).all()
    assert sum(cp.ms_per_step.values()) == pytest.approx(cp.step_ms, rel=1e-6)


def launch_bound(steps: int = 4, kernels: int = 50, kernel_us: int = 2, gap_us: int = 10) -> list[Ev]:
    """Each step launches ``kernels`` tiny kernels one every ``gap_us``: the GPU waits on every launch."""
    out, t, c = [], 0, 0
    for i in range(steps):
        s = t
        for _ in range(kernels):
            c += 1
            out.append(Ev("cpu_op", "aten::mul", t, t + 8 * US))
            out.append(Ev("runtime", "cudaLaunchKernel", t + 2 * US, t + 6 * US, correlation=c))
            out.append(Ev("kernel", "vectorized_elementwise_kernel", t + 7 * US, t + (7 + kernel_us) * US, correlation=c))
            t += gap_us * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", s, t))
    return out


def sync_then_host(steps: int = 4, gpu_us: int = 3000, host_us: int = 2000, sync: str = "cudaStreamSynchronize") -> list[Ev]:
    """Each step: launch 3 ms of GEMM, wait for it (a .item()), then 2 ms of host work outside any op."""
    out, t, c = [], 0, 0
    for i in range(steps):
        s = t
        c += 1
        out.append(Ev("runtime", "cudaLaunchKernel", t, t + 5 * US, correlation=c))
        out.append(Ev("kernel", "ampere_sgemm_128x64_nn", t + 10 * US, t + (10 + gpu_us) * US, correlation=c))
        c += 1
        end_wait = t + (10 + gpu_us + 8) * US
        out.append(Ev("runtime", sync, t + 6 * US, end_wait, correlation=c))
        t = end_wait + host_us * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", s, t))
    return out


def test_launch_bound_path_is_the_hosts_and_one_graph_replay_leaves_the_gpus_work(tmp_path):
    t = _load(tmp_path, launch_bound())
    cp = helpers.critical_path(t)
    _path_cover(cp)
    assert cp.step_ms == pytest.approx(0.5, abs=0.02)  # 50 launches 10 us apart
    # the ops, their launch calls and the interpreter's 2 us between one op and the next: all dispatching
    assert cp.ms_per_step["launch"] == pytest.approx(0.5, abs=0.01)
    assert cp.ms_per_step["other"] == pytest.approx(0.0, abs=0.01)
    assert helpers.what_if(t, {}) == pytest.approx(cp.step_ms, rel=1e-9)
    # launches as one graph replay: 50 kernels of 2 us back to back, GRAPH_NODE_GAP_US apart
    assert helpers.what_if(t, {"launch": 0}) == pytest.approx(50 * 2e-3, rel=0.25)
    assert helpers.what_if(t, {"launch": 0.5}) < cp.step_ms


def test_sync_made_asynchronous_overlaps_host_work_with_the_gpu(tmp_path):
    t = _load(tmp_path, sync_then_host())
    cp = helpers.critical_path(t)
    _path_cover(cp)
    assert cp.step_ms == pytest.approx(5.018, abs=0.01)
    assert cp.ms_per_step["gemm"] == pytest.approx(3.0, abs=0.01)  # the path runs through the kernel ...
    assert cp.ms_per_step["other"] == pytest.approx(2.0, abs=0.01)  # ... then the host work after the sync
    assert cp.waits_per_step == 1
    assert helpers.what_if(t, {}) == pytest.approx(cp.step_ms, rel=1e-9)
    # no sync: the host's 2 ms run beside the next step's 3 ms kernel; the GPU paces the loop
    assert helpers.what_if(t, {"sync": 0}) == pytest.approx(3.0, rel=0.05)
    # half the syncs kept ("sync every 2 steps")
    assert 3.0 < helpers.what_if(t, {"sync": 0.5}) < cp.step_ms
    # GEMMs at a low-precision rate: the step shrinks by what they save on the path
    assert helpers.what_if(t, {"gemm": 0.1}) == pytest.approx(cp.step_ms - 2.7, abs=0.02)


def test_a_call_not_named_a_sync_that_returned_as_the_gpu_drained_is_a_wait(tmp_path):
    """cudaFree waits for the device: the step's path runs through the kernel it waited for."""
    t = _load(tmp_path, sync_then_host(sync="cudaFree"))
    cp = helpers.critical_path(t)
    assert cp.waits_per_step == 1 and cp.ms_per_step["gemm"] == pytest.approx(3.0, abs=0.01)
    assert helpers.what_if(t, {"sync": 0}) == pytest.approx(3.0, rel=0.05)
    # a short cudaFree that ends as the GPU happens to finish is no wait: too short to have waited
    short = [e for e in sync_then_host(sync="cudaFree")]
    for e in short:
        if e.name == "cudaFree":
            e.start_ns = e.end_ns - 5 * US
    assert helpers.critical_path(_load(tmp_path, short, "short.json")).waits_per_step == 0


def test_a_kernel_that_waited_on_another_streams_copy_puts_the_copy_on_the_path(tmp_path):
    """A 0.4 ms copy on stream 9, then a 1 ms kernel on stream 7 launched early but started only as the copy ended
    (cudaStreamWaitEvent): the path runs through the copy, and faster copies shorten the step."""
    out, t, c = [], 0, 0
    for i in range(4):
        s = t
        out.append(Ev("runtime", "cudaMemcpyAsync", t, t + 10 * US, correlation=c + 1))
        out.append(Ev("memcpy", "", t + 20 * US, t + 420 * US, correlation=c + 1, stream=9, bytes=10_000_000, copy="H2D",
                      host_mem="pinned"))
        out.append(Ev("runtime", "cudaLaunchKernel", t + 15 * US, t + 20 * US, correlation=c + 2))
        out.append(Ev("kernel", "relu_kernel", t + 423 * US, t + 1423 * US, correlation=c + 2, stream=7))
        out.append(Ev("runtime", "cudaStreamSynchronize", t + 25 * US, t + 1430 * US, correlation=c + 3))
        c += 3
        t += 1440 * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", s, t))
    tr = _load(tmp_path, out)
    cp = helpers.critical_path(tr)
    assert cp.info["ranks"][0]["cross_stream_edges"] == 4
    assert cp.ms_per_step["copy"] == pytest.approx(0.4, abs=0.01)
    assert helpers.what_if(tr, {"copy": 0.5}) == pytest.approx(cp.step_ms - 0.2, abs=0.01)
    # copies overlapped (prefetched on their side stream a step ahead): nothing waits for them ...
    assert helpers.what_if(tr, {}, overlapped=["copy"]) == pytest.approx(cp.step_ms - 0.4, abs=0.03)
    # ... but a copy stream busier than the step bounds it: copies 3x longer than the kernels pace the loop
    assert helpers.what_if(tr, {"copy": 7.5}, overlapped=["copy"]) == pytest.approx(3.0, rel=0.05)


def test_data_wait_and_a_pageable_copy_that_blocks_its_call(tmp_path):
    """num_workers=0 loading (4 ms), then a pageable H2D copy whose cudaMemcpyAsync returns as the copy ends."""
    out, t, c = [], 0, 0
    for i in range(4):
        s = t
        out.append(Ev("annotation", FETCH, t, t + 4000 * US))
        t += 4000 * US
        c += 1
        out.append(Ev("runtime", "cudaMemcpyAsync", t, t + 2005 * US, correlation=c))
        out.append(Ev("memcpy", "", t + 200 * US, t + 2010 * US, correlation=c, bytes=12_000_000, copy="H2D",
                      host_mem="pageable"))
        t += 2010 * US
        c += 1
        out.append(Ev("runtime", "cudaLaunchKernel", t, t + 5 * US, correlation=c))
        out.append(Ev("kernel", "gemm", t + 10 * US, t + 1010 * US, correlation=c))
        c += 1
        out.append(Ev("runtime", "cudaStreamSynchronize", t + 6 * US, t + 1015 * US, correlation=c))
        t += 1015 * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", s, t))
    tr = _load(tmp_path, out)
    cp = helpers.critical_path(tr)
    _path_cover(cp)
    assert cp.ms_per_step["data_wait"] == pytest.approx(4.0, abs=0.01)
    assert cp.ms_per_step["copy"] > 1.7  # the copy itself is on the path: its call waited for it
    assert cp.waits_per_step == 2
    assert helpers.what_if(tr, {"data_wait": 0}) == pytest.approx(cp.step_ms - 4.0, abs=0.01)
    assert helpers.what_if(tr, {"copy": 0.1}) == pytest.approx(cp.step_ms - 0.9 * 1.81, abs=0.05)


def test_a_gpu_paced_loop_becomes_host_bound_when_its_kernels_shrink(tmp_path):
    """The host launches each step's 5 ms kernel in 1 ms and runs ahead; the GPU paces the loop. Kernels 10x
    faster leave the host's 1 ms a step as the bound."""
    out, t, c, g = [], 0, 0, 100 * US
    for i in range(6):
        s = t
        c += 1
        out.append(Ev("runtime", "cudaLaunchKernel", t, t + 5 * US, correlation=c))
        g = max(g, t + 10 * US)
        out.append(Ev("kernel", "sgemm_128x128", g, g + 5000 * US, correlation=c))
        g += 5000 * US
        t += 1000 * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", s, t))
    out.append(Ev("runtime", "cudaDeviceSynchronize", t + 10 * US, g + 8 * US, correlation=c + 1))
    tr = _load(tmp_path, out)
    cp = helpers.critical_path(tr)
    assert cp.step_ms == pytest.approx(5.0, rel=0.02)
    assert cp.ms_per_step["gemm"] > 0.95 * cp.step_ms
    assert helpers.what_if(tr, {}) == pytest.approx(cp.step_ms, rel=1e-9)
    assert helpers.what_if(tr, {"gemm": 0.1}) == pytest.approx(1.0, rel=0.1)


def test_cpu_only_path_is_the_hosts_time_by_cause(tmp_path):
    out, t = [], 0
    for i in range(4):
        s = t
        out.append(Ev("annotation", FETCH, t, t + 3000 * US))
        out.append(Ev("cpu_op", "aten::addmm", t + 3000 * US, t + 8000 * US))
        t += 10000 * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", s, t))
    tr = _load(tmp_path, out)
    assert not tr.has_gpu
    cp = helpers.critical_path(tr)
    assert cp.ms_per_step["data_wait"] == pytest.approx(3.0, abs=0.01)
    assert cp.ms_per_step["cpu_compute"] == pytest.approx(5.0, abs=0.01)
    assert cp.ms_per_step["other"] == pytest.approx(2.0, abs=0.01)
    assert helpers.what_if(tr, {"data_wait": 0, "other": 0.5}) == pytest.approx(6.0, abs=0.01)


def test_nsys_export_of_the_same_loop_has_the_same_path(tmp_path):
    events = sync_then_host()
    a = helpers.critical_path(helpers.load(write_json(events, tmp_path / "a.json")))
    b = helpers.critical_path(helpers.load(write_sqlite(events, tmp_path / "a.sqlite")))
    assert b.step_ms == pytest.approx(a.step_ms, rel=1e-6)
    for cause in ("gemm", "other", "sync"):
        assert b.ms_per_step[cause] == pytest.approx(a.ms_per_step[cause], abs=0.01)


def test_bad_factors_are_refused_with_the_causes_named(tmp_path):
    t = _load(tmp_path, sync_then_host())
    with pytest.raises(ValueError, match="unknown cause 'launches'.*launch"):
        helpers.what_if(t, {"launches": 0})
    with pytest.raises(ValueError, match=">= 0"):
        helpers.what_if(t, {"sync": -1})
    with pytest.raises(ValueError, match="unknown cause"):
        helpers.what_if(t, {}, overlapped=["nccl"])


@pytest.mark.parametrize("name", ["sync_stall__broken__h200", "h2d_copy__fixed__h200", "gpu_bound__fp32__h200",
                                  "launch_overhead__graphs__h200", "mystery__broken__h200"])
def test_no_factors_replays_the_recorded_step(name):
    """The replay with every cause as measured is the measured step, on the course's recordings (host-paced,
    GPU-paced, a graph replay, prefetching on a side stream, data and syncs together)."""
    t = helpers.load(Path(__file__).resolve().parents[1] / "data" / f"{name}.json.gz")
    cp = helpers.critical_path(t)
    assert helpers.what_if(t, {}) == pytest.approx(cp.step_ms, rel=1e-6)
    _path_cover(cp)
    assert np.isfinite(cp.step_ms) and cp.step_ms > 0


@pytest.mark.parametrize("name", ["data/sync_stall__broken__h200.json.gz", "data/h2d_copy__broken__h200.json.gz",
                                  "data/mystery__broken__h200.json.gz", "data/launch_overhead__graphs__h200.json.gz",
                                  "tests/corpus/tl_mi300_resnet18_hipfree.json.gz",
                                  "tests/corpus/tl_sglang_qwen3_8b_decode.json.gz"])
def test_the_replay_in_one_pass_times_every_node_as_the_replay_wait_by_wait(name):
    """A graph without cross-stream waits is replayed segment by segment (the waits the only sequential step); the
    replay wait by wait, which every graph can take, gives the same time to every host item and GPU op, with causes
    scaled, syncs kept in part or made asynchronous, and work moved off the path (an op left first on its stream
    with nothing before it waits at its recorded end)."""
    from helpers import critical as cr

    t = helpers.load(Path(__file__).resolve().parents[1] / name)
    rng = np.random.default_rng(0)
    for g0 in cr._graphs(t).values():
        for names in ((), ("h2d_copies",), ("kernel",), ("collective", "copy")):
            g = cr._overlapped(g0, names) if names else g0
            if (g.g_cross >= 0).any():
                continue
            for trial in range(4):
                f = np.ones(len(cr.PATH_CAUSES)) if trial == 0 else rng.choice([0.0, 0.25, 0.5, 2.0], len(cr.PATH_CAUSES))
                by_waits, by_segments = cr._simulate_by_waits(g, f), cr._simulate_by_segments(g, f)
                for a, b in zip(by_waits, by_segments):
                    np.testing.assert_allclose(b, a, rtol=0, atol=1e-4)
                assert cr._span(g, *by_segments) == pytest.approx(cr._span(g, *by_waits), abs=1e-4)
                assert cr._replayed_span(g, f) == pytest.approx(cr._span(g, *by_waits), abs=1e-4)


def test_each_step_is_walked_from_its_own_end():
    """The Nsight export of the fixed sync-stall loop: its GPU runs without a gap through the first steps while the
    host prepares the next batch in a range named ``data``, and catches up with the host only in a later step.
    Walked back from the steps' end alone, the path reached the host there and stayed on it, so the earlier steps
    came out as the host's (a third of the step "data wait"); each step walked from its own end is the GPU's, as
    the same loop's profiler trace and the diagnosis (GPU-bound) say."""
    data = Path(__file__).resolve().parents[1] / "data"
    nsys = helpers.critical_path(helpers.load(data / "nsight" / "sync_stall__fixed__h200.sqlite.gz"))
    twin = helpers.critical_path(helpers.load(data / "sync_stall__fixed__h200.json.gz"))
    for cp in (nsys, twin):
        _path_cover(cp)
        gpu = cp.ms_per_step["gemm"] + cp.ms_per_step["kernel"]
        assert gpu >= 0.9 * cp.step_ms
        assert cp.ms_per_step["data_wait"] <= 0.05 * cp.step_ms
        assert set(cp.steps["bound_by"]) == {"gemm"}
