"""Capture and the workloads on the CPU: annotate, capture, nsys commands, sync scan, the DDP job."""

import multiprocessing as mp_std

import pytest
import torch

import helpers
from helpers import profiling, syncscan
from helpers.workloads import communication, data_stall, launch_overhead, sync_stall


def test_annotate_emits_profiler_ranges_and_capture_never_overwrites(tmp_path):
    x = torch.ones(4)

    @profiling.annotate("optimizer")
    def opt_step():
        x.mul_(0.5)

    def step(i):
        with profiling.annotate("forward"):
            x.add_(1)
        opt_step()

    a = helpers.capture(step, steps=3, out_dir=tmp_path, name="run")
    b = helpers.capture(step, steps=3, out_dir=tmp_path, name="run")
    assert a.source != b.source and len(list(tmp_path.iterdir())) == 2
    names = set(a.events.loc[a.events["kind"] == "annotation", "name"])
    assert {"forward", "optimizer"} <= names and len(a.steps) == 3


def test_time_steps_returns_ms():
    assert 0 < profiling.time_steps(lambda i: torch.ones(10).sum(), steps=3, warmup=1) < 1000


def test_nsys_command_shapes():
    cmd = profiling.nsys_command(["python", "train.py"], output="p")
    assert cmd[:2] == ["nsys", "profile"] and "--trace=cuda,nvtx,osrt" in cmd and "--stats=true" in cmd
    assert "--capture-range=cudaProfilerApi" in cmd and cmd[-2:] == ["python", "train.py"]
    window = profiling.nsys_command(["python", "t.py"], capture_range=None, delay_s=10, duration_s=30, gpu_metrics_device=0)
    assert "--delay=10" in window and "--duration=30" in window and "--gpu-metrics-devices=0" in window
    assert not any(c.startswith("--capture-range") for c in window)


def test_run_nsys_without_nsys_says_how(monkeypatch):
    monkeypatch.setattr(profiling.shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="Nsight Systems"):
        profiling.run_nsys(["nsys", "profile", "-o", "x", "python", "t.py"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_gpu_only_workload_without_gpu_says_so():
    from helpers.workloads import h2d_copy

    with pytest.raises(helpers.NoGPUError, match="needs a CUDA GPU"):
        h2d_copy.make_step("broken", torch.device("cpu"))


def test_sync_scan_finds_every_hidden_sync():
    calls = {s.call for s in syncscan.scan(sync_stall.broken_step)}
    assert {".item()", ".cpu()", ".synchronize()", "if <tensor>", "float()"} <= calls
    fixed = syncscan.scan(sync_stall.fixed_step)
    assert [s.call for s in fixed] == [".item()"] and "LOG_EVERY" in fixed[0].code  # one read every LOG_EVERY steps
    assert syncscan.scan_source("for i in range(3):\n    if i % 10 == 0:\n        print('x')\n") == []


def test_cpu_workloads_run_and_show_their_pattern(tmp_path):
    ds = data_stall.AugmentedImages()
    broken = helpers.capture(data_stall.make_step_from_loader(data_stall.broken_loader(ds), torch.device("cpu")),
                             steps=3, out_dir=tmp_path)
    assert [f.pattern for f in helpers.diagnose(broken)][:1] == ["data_stall"]
    lo = helpers.capture(launch_overhead.make_step("broken", torch.device("cpu")), steps=2, out_dir=tmp_path)
    assert len(lo.steps) == 2 and not lo.has_gpu


def test_ddp_job_failure_leaves_no_process_behind(monkeypatch):
    with pytest.raises(ValueError, match="unknown variant"):
        communication.run("nope")
    before = set(mp_std.active_children())
    monkeypatch.setenv("HELPERS_CRASH_RANK", "1")
    with pytest.raises(Exception, match="crashed on purpose"):  # the parent re-raises instead of hanging
        communication.run("manual", world_size=2, steps=1, warmup=0)
    assert set(mp_std.active_children()) <= before


def test_free_port_is_free():
    import socket

    port = communication.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
