"""GPU idle time put on what the host was doing during it, and costs that match what a fix wins back:
a batch fetched before a blocking copy is data (the copy is a copy), host work after a sync that is
longer than the wait is host-bound, and an Nsight loop waiting on its DataLoader workers in OS calls is
a data stall. Synthetic traces in tests/synth.py's style, each with the answer it must get."""

from __future__ import annotations

import pytest
from synth import Ev, write_json, write_sqlite

import helpers
from helpers import diagnosis as dg
from helpers import metrics as m

US = 1000  # ns per microsecond
FETCH = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def fetch_then_blocking_copy(steps: int = 5, fetch_us: int = 8000, copy_us: int = 2000, item: bool = True) -> list[Ev]:
    """num_workers=0: each step fetches its batch in the training process (8 ms, GPU idle), copies it with a
    blocking pageable cudaMemcpy (2 ms), launches four 1 ms kernels and, with ``item``, reads the loss
    (a cudaMemcpy that waits for the kernels)."""
    out: list[Ev] = []
    t, c = 0, 0
    for i in range(steps):
        s = t
        out.append(Ev("annotation", FETCH, t, t + fetch_us * US))
        t += fetch_us * US
        c += 1
        out.append(Ev("runtime", "cudaMemcpy", t, t + (copy_us + 20) * US, correlation=c))
        out.append(Ev("memcpy", "", t + 10 * US, t + (copy_us + 10) * US, correlation=c, bytes=64_000_000, copy="H2D",
                      host_mem="pageable"))
        t += (copy_us + 20) * US
        g = t + 10 * US
        for _ in range(4):
            c += 1
            out.append(Ev("runtime", "cudaLaunchKernel", t, t + 5 * US, correlation=c))
            out.append(Ev("kernel", "gemm", g, g + 1000 * US, correlation=c))
            g += 1000 * US
            t += 10 * US
        if item:
            c += 1
            out.append(Ev("runtime", "cudaMemcpy", t, g + 10 * US, correlation=c))
            out.append(Ev("memcpy", "", g + 2 * US, g + 4 * US, correlation=c, bytes=4, copy="D2H", host_mem="pageable"))
            t = g + 12 * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", s, t))
    return out


def host_work_after_sync(steps: int = 5, gpu_us: int = 4000, host_us: int = 8000) -> list[Ev]:
    """Each step launches 4 ms of kernels, waits for them (cudaStreamSynchronize: a .item()), then runs
    ``host_us`` of NumPy / Python work outside any recorded op while the GPU idles."""
    out: list[Ev] = []
    t, c = 0, 0
    for i in range(steps):
        s = t
        g = t + 10 * US
        for _ in range(4):
            c += 1
            out.append(Ev("runtime", "cudaLaunchKernel", t, t + 5 * US, correlation=c))
            out.append(Ev("kernel", "gemm", g, g + gpu_us // 4 * US, correlation=c))
            g += gpu_us // 4 * US
            t += 10 * US
        c += 1
        out.append(Ev("runtime", "cudaStreamSynchronize", t, g + 5 * US, correlation=c))
        t = g + 5 * US + host_us * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", s, t))
    return out


def _load(events, tmp_path, name="t.json"):
    return helpers.load(write_json(events, tmp_path / name))


def _costs(result) -> dict[str, float]:
    return {f.pattern: f.cost for f in result}


@pytest.mark.parametrize("item", [True, False], ids=["loss_read", "no_loss_read"])
def test_fetch_before_a_blocking_copy_is_data_and_the_copy_a_copy(tmp_path, item):
    """Each cost is what its fix saves on the step's critical path (helpers.what_if), worked out by hand."""
    trace = _load(fetch_then_blocking_copy(item=item), tmp_path)
    result = dg.diagnose(trace)
    costs = _costs(result)
    assert result[0].pattern == "data_stall"
    step_us = result[0].step_ms * 1e3
    # with the loss read, a step is fetch 8 ms + copy 2.02 ms + launches + the wait for the 4 ms of kernels: 14.04 ms;
    # a loader that keeps up leaves the copy, the launches and the kernels, 6.04 ms. Without it the copy of step i
    # waits behind step i-1's kernels on the stream, 6.02 ms a step
    assert costs["data_stall"] == pytest.approx(1 - (6042 if item else 6022) / step_us, abs=0.01)
    # pinned and prefetched, the copy's 2 ms leave the path
    assert costs["h2d_copy"] == pytest.approx(2000 / step_us, abs=0.01)
    # copies and the loss read made asynchronous: the 8 ms fetch runs beside the GPU's copy and kernels (6 ms)
    assert costs["sync_stall"] == pytest.approx(1 - (9249 if item else 9242) / step_us, abs=0.01)
    lo, hi = result[0].window
    assert any(e.name == FETCH and e.start_ns <= lo * US and hi * US <= e.end_ns + 20 * US for e in fetch_then_blocking_copy())
    # fixes overlap (both the loader and async copies hide the fetch): together they save less than their sum
    assert result.signals["step_ms_if_all_fixed"] * 1e3 > step_us * (1 - sum(costs.values()))


def test_host_work_longer_than_the_wait_after_a_sync_is_host_bound(tmp_path):
    result = dg.diagnose(_load(host_work_after_sync(), tmp_path))
    costs = _costs(result)
    # moving the host work off wins all 8 ms of the 12 ms step; removing the sync hides 4 ms of it (the kernels')
    assert result[0].pattern == "host_bound" and costs["host_bound"] == pytest.approx(8 / 12, abs=0.02)
    assert costs["sync_stall"] == pytest.approx(4 / 12, abs=0.02)
    assert result[0].window and result[0].window[1] - result[0].window[0] == pytest.approx(8000, rel=0.01)


def test_host_work_the_sync_hides_entirely_is_the_sync_stall(tmp_path):
    # 3 ms of host work after a 4 ms wait: removing the sync hides all of it (lab 03's loop)
    result = dg.diagnose(_load(host_work_after_sync(host_us=3000), tmp_path))
    assert result[0].pattern == "sync_stall" and result[0].cost == pytest.approx(3 / 7, abs=0.02)


def nsys_loop_waiting_on_workers(steps: int = 6, wait_us: int = 6000, gpu_us: int = 3000) -> list[Ev]:
    """An Nsight export without NVTX: the main thread polls and reads the DataLoader workers' pipe for
    ``wait_us`` each step (OS runtime rows), then launches ``gpu_us`` of kernels and syncs once."""
    out: list[Ev] = []
    t, c = 0, 0
    for _ in range(steps):
        out.append(Ev("osrt", "poll", t, t + (wait_us - 100) * US))
        out.append(Ev("osrt", "read", t + (wait_us - 100) * US, t + wait_us * US))
        out.append(Ev("osrt", "read", t, t + (wait_us - 50) * US, tid=77, pid=5000))  # a worker process
        t += wait_us * US
        g = t + 10 * US
        for name in ("conv", "bn", "relu", "fc"):
            c += 1
            out.append(Ev("runtime", "cudaLaunchKernel", t, t + 5 * US, correlation=c))
            out.append(Ev("kernel", name, g, g + gpu_us // 4 * US, correlation=c))
            g += gpu_us // 4 * US
            t += 10 * US
        c += 1
        out.append(Ev("runtime", "cudaStreamSynchronize", t, g + 5 * US, correlation=c))
        out.append(Ev("osrt", "pthread_cond_wait", t + 10 * US, g, correlation=-1))  # the sync's own wait
        t = g + 5 * US
    return out


def test_nsys_main_thread_waiting_on_dataloader_workers_is_a_data_stall(tmp_path):
    trace = helpers.load(write_sqlite(nsys_loop_waiting_on_workers(), tmp_path / "t.sqlite"))
    result = dg.diagnose(trace)
    assert result[0].pattern == "data_stall", [(f.pattern, f.cost) for f in result]
    # 6 ms of each 9 ms step; the capture's last step ends after its kernels (no next batch to wait for)
    assert result[0].cost == pytest.approx(4 * 6000 / m.windows(m.stepped(trace))["dur_us"].sum(), abs=0.01)
    assert "host_bound" not in _costs(result)
    # the waits inside the sync are the sync's: not counted as loading
    assert m.data_wait(m.stepped(trace))["data_wait_us_per_step"] * 5 == pytest.approx(4 * 6000, rel=0.01)


def test_nsys_sleep_between_steps_is_not_data(tmp_path):
    events = [Ev("osrt", "clock_nanosleep", e.start_ns, e.end_ns) if e.kind == "osrt" and e.tid != 77 and e.name != "pthread_cond_wait"
              else e for e in nsys_loop_waiting_on_workers()]
    result = dg.diagnose(helpers.load(write_sqlite(events, tmp_path / "sleep.sqlite")))
    assert result[0].pattern != "data_stall"


def copy_to_host_waiting(steps: int = 5, wait_us: int = 6000, host_mem: str = "pageable") -> list[Ev]:
    """Each step launches four 1 ms kernels, then copies a loss to the host (``.cpu()``: an ``aten::to``
    making a cudaMemcpyAsync, then a cudaStreamSynchronize). The GPU's stream waits ``wait_us`` on work
    the trace does not show before the copy runs; into pageable memory the host sits in the copy call
    all that time (CUDA returns from it only once the copy is done), into pinned memory it returns at once
    and waits in the sync instead."""
    out: list[Ev] = []
    t, c = 0, 0
    for i in range(steps):
        s = t
        g = t + 10 * US
        for _ in range(4):
            c += 1
            out.append(Ev("cpu_op", "aten::mm", t, t + 8 * US))
            out.append(Ev("runtime", "cudaLaunchKernel", t + 1 * US, t + 6 * US, correlation=c))
            out.append(Ev("kernel", "gemm", g, g + 1000 * US, correlation=c))
            g += 1000 * US
            t += 10 * US
        c += 1
        copy_at = g + wait_us * US
        blocking = host_mem == "pageable"
        call_end = copy_at + 5 * US if blocking else t + 8 * US
        out.append(Ev("runtime", "cudaMemcpyAsync", t + 1 * US, call_end, correlation=c))
        out.append(Ev("memcpy", "", copy_at, copy_at + 2 * US, correlation=c, bytes=4, copy="D2H", host_mem=host_mem))
        c += 1
        out.append(Ev("runtime", "cudaStreamSynchronize", call_end + 1 * US, copy_at + 10 * US, correlation=c))
        out.append(Ev("cpu_op", "aten::to", t, copy_at + 12 * US))
        t = copy_at + 20 * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", s, t))
    return out


def test_a_copy_into_pageable_memory_is_a_sync_not_a_launch(tmp_path):
    """The host sits in a pageable device-to-host cudaMemcpyAsync while its GPU idles: the call waits for
    the stream like a sync (nothing else can be queued), so the idle is the sync's, not the launches' that
    the surrounding op would otherwise suggest. The copy and the sync after it are one sync point."""
    tr = _load(copy_to_host_waiting(), tmp_path)
    ev = tr.events
    blocking = m.blocking_copy_calls(tr)
    assert ev.loc[blocking, "name"].tolist() == ["cudaMemcpyAsync"] * 5
    assert m.is_sync_call(tr)[blocking].all()
    cost = m.idle_cost_by_cause(tr)
    assert cost["launch"] < 0.05 * sum(cost.values()), cost
    sync = m.sync_stats(tr)
    assert sync["sync_points_per_step"] == 1.0  # the copy and its stream sync: one wait
    assert sync["blocked_us_per_step"] > 6000  # the wait in the copy call is counted
    result = helpers.diagnose(tr)
    assert result[0].pattern == "sync_stall", [(f.pattern, f.cost) for f in result]
    assert "launch_overhead" not in _costs(result)


def test_a_copy_into_pinned_memory_is_no_sync_of_its_own(tmp_path):
    """Into pinned memory the same copy call returns at once: only the stream sync after it waits."""
    tr = _load(copy_to_host_waiting(host_mem="pinned"), tmp_path)
    assert not m.blocking_copy_calls(tr).any()
    assert m.sync_stats(tr)["sync_points_per_step"] == 1.0
    assert helpers.diagnose(tr)[0].pattern == "sync_stall"


def test_the_selection_counts_a_copy_and_its_stream_sync_as_one_sync(tmp_path):
    """plots.explore's selection figures (metrics.window_stats) count sync points as sync_stats does."""
    tr = _load(copy_to_host_waiting(), tmp_path)
    st = tr.steps.iloc[1]
    stats = m.window_stats(tr, float(st["start_us"]), float(st["end_us"]))
    assert stats["syncs"] == 1 and stats["sync_blocked_us"] > 6000


def _preprocessing_loop(frame: str) -> list[Ev]:
    """Each step: the main thread runs ``frame`` (a with_stack frame) for 5 ms with the GPU idle, then launches 2 ms
    of GPU work; a second thread decodes the next input in PIL frames the whole time."""
    out, t, c = [], 0, 0
    for i in range(4):
        s = t
        out.append(Ev("python", frame, t, t + 5000 * US))
        t += 5000 * US
        for _ in range(4):
            c += 1
            out.append(Ev("cpu_op", "aten::linear", t, t + 20 * US))
            out.append(Ev("runtime", "cudaLaunchKernel", t + 2 * US, t + 10 * US, correlation=c))
            out.append(Ev("kernel", "ampere_sgemm_128x64_nn", t + 15 * US, t + 515 * US, correlation=c))
            t += 500 * US
        out.append(Ev("runtime", "cudaStreamSynchronize", t, t + 40 * US))
        t += 60 * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", s, t))
    out.append(Ev("python", "PIL/Image.py(2200): resize", 0, t, tid=99))
    return out


def test_an_input_pipelines_frames_on_the_loops_thread_are_its_wait_for_data(tmp_path):
    """Python frames of an input pipeline (a Hugging Face processor, a pipeline's preprocess, torchvision, PIL, video
    and audio decoders) on the thread that launches the GPU's work are the loop preparing its next input: the GPU's
    idle beside them is a data stall, as under enumerate(DataLoader) (the corpus's TimeSformer pipeline). The same
    frames on another thread (decoding beside the loop) are not; the loop's own code in frames of its own is not, nor
    a tokenizer decoding the model's output."""
    pre = helpers.load(write_json(_preprocessing_loop("transformers/models/vit/image_processing_vit.py(300): preprocess"),
                                  tmp_path / "pre.json"))
    found = dg.diagnose(pre)
    assert found[0].pattern == "data_stall"
    assert m.data_wait(pre)["data_wait_us_per_step"] == pytest.approx(5000, rel=0.01)  # the decoding thread's: not data
    for i, frame in enumerate(("train.py(40): make_batch",  # the loop's own code
                               "transformers/tokenization_utils_base.py(3800): batch_decode")):  # the output's side
        own = helpers.load(write_json(_preprocessing_loop(frame), tmp_path / f"own{i}.json"))
        assert [f.pattern for f in dg.diagnose(own)][0] == "host_bound"
        assert m.data_wait(own)["data_wait_us_per_step"] == 0


def backlog_then_closing_sync(steps: int = 5, gpu_us: int = 1000, host_us: int = 300, backlog: int = 10,
                              gap_us: int = 60) -> list[Ev]:
    """The host runs ahead of a GPU-bound loop: when the capture begins the GPU still runs ``backlog`` kernels
    launched before it (correlations no call of the trace holds), ``gap_us`` apart; each step's host launches one
    kernel, and the GPU runs them back to back after the backlog while the host sits in the capture's closing
    cudaDeviceSynchronize."""
    out, g = [], 0
    for j in range(backlog):
        out.append(Ev("kernel", "gemm", g, g + gpu_us * US, correlation=1 + j))
        g += (gpu_us + (gap_us if j < backlog - 1 else 0)) * US
    t = 0
    for i in range(steps):
        out.append(Ev("annotation", f"ProfilerStep#{i}", t, t + host_us * US))
        out.append(Ev("runtime", "cudaLaunchKernel", t + 10 * US, t + 20 * US, correlation=100 + i))
        out.append(Ev("kernel", "gemm", g, g + gpu_us * US, correlation=100 + i))
        g += gpu_us * US
        t += host_us * US
    out.append(Ev("runtime", "cudaDeviceSynchronize", t + 5 * US, g + 5 * US, correlation=999))
    return out


def test_work_queued_before_the_capture_is_not_held_up_by_the_hosts_sync(tmp_path):
    """The GPU drains a backlog launched before the capture while the host sits in a sync: the gaps between those
    kernels are the GPU's own (nothing the host does in the capture queued them), so removing the sync saves
    nothing and no sync stall is named (a CUDA-Graph loop with no sync in its steps read a 5.5% one on an H100)."""
    tr = _load(backlog_then_closing_sync(), tmp_path)
    step = helpers.critical_path(tr).step_ms
    assert helpers.what_if(tr, {"sync": 0}) == pytest.approx(step, rel=1e-3)
    assert [f.pattern for f in helpers.diagnose(tr)] == ["gpu_bound"]
