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


def test_zero_steps_are_refused_not_divided_by(capsys):
    with pytest.raises(ValueError, match="steps >= 1"):
        profiling.time_steps(lambda i: None, steps=0)
    with pytest.raises(ValueError, match="steps >= 1"):
        helpers.capture(lambda i: None, steps=0)
    with pytest.raises(ValueError, match="steps >= 1"):
        communication.run("manual", steps=0)
    for threads in (0, -1, True, 1.5):  # each refused before a rank starts
        with pytest.raises(ValueError, match="threads must be a whole number"):
            communication.run("manual", threads=threads)
    from helpers.workloads.common import run_cli

    for argv in (["--steps", "0"], ["--steps", "-3"], ["--warmup", "-1"], ["--steps", "x"]):
        with pytest.raises(SystemExit) as exit_:
            run_cli("t", ("broken",), lambda v, d: (lambda i: None), argv=argv + ["--device", "cpu"])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "error: argument --" in err and ("at least" in err or "whole number" in err)
    with pytest.raises(SystemExit) as exit_:
        communication.main(["--steps", "0"])
    assert exit_.value.code == 2 and "must be at least 1, not 0" in capsys.readouterr().err


def test_nsys_command_shapes():
    cmd = profiling.nsys_command(["python", "train.py"], output="p")
    assert cmd[:2] == ["nsys", "profile"] and "--trace=cuda,nvtx,osrt" in cmd and "--stats=true" in cmd
    assert "--capture-range=cudaProfilerApi" in cmd and cmd[-2:] == ["python", "train.py"]
    window = profiling.nsys_command(["python", "t.py"], capture_range=None, delay_s=10, duration_s=30, gpu_metrics_device=0)
    assert "--delay=10" in window and "--duration=30" in window and "--gpu-metrics-devices=0" in window
    assert not any(c.startswith("--capture-range") for c in window)
    graphs = profiling.nsys_command(["python", "t.py"], cuda_graph_trace="node")
    assert "--cuda-graph-trace=node" in graphs and graphs[-2:] == ["python", "t.py"]
    with pytest.raises(ValueError, match="'graph' or 'node'"):
        profiling.nsys_command(["python", "t.py"], cuda_graph_trace="kernels")


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
    fixed = syncscan.scan(sync_stall._fixed_step)
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


# --- the H200 Nsight recordings in data/ (tools/nsys_session.sh, tools/collect_nsys.py) ---------
def _manifest() -> dict:
    import json
    from pathlib import Path

    return json.loads((Path(__file__).resolve().parents[1] / "data" / "manifest.json").read_text())


def test_every_gpu_variant_has_a_real_nsys_export_and_a_torch_twin():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from record_traces import GPU_PLAN, TRIAGE_PLAN

    recs = _manifest()["recordings"]
    by_format = {(e["workload"], e["variant"], e["format"]): e for e in recs}
    for workload, variant, _ in GPU_PLAN + TRIAGE_PLAN:
        nsys = by_format[(workload, variant, "nsys-sqlite")]
        # A CUDA-Graph replay shows as whole-graph rows unless nsys runs with --cuda-graph-trace=node.
        rows = nsys["table_rows"]
        assert rows.get("CUPTI_ACTIVITY_KIND_KERNEL", 0) + rows.get("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", 0) > 0
        assert "nsys profile" in nsys["command"]
        assert "--nsys-range" in nsys["command"] and nsys["device"] == "NVIDIA H200"
        twin = by_format.get((workload, variant, "torch-json"))
        if twin is not None:  # same command and seed, own process (see pair_note)
            assert twin["run"] == nsys["run"]
    for lab in ("data_stall", "h2d_copy", "sync_stall"):
        for variant in ("broken", "fixed"):
            assert by_format[(lab, variant, "nsys-sqlite")]["report"].endswith(".nsys-rep")


def test_nsys_exports_load_with_their_recorded_kernel_counts():
    from pathlib import Path

    import helpers

    data = Path(__file__).resolve().parents[1] / "data"
    for e in _manifest()["recordings"]:
        if e["format"] != "nsys-sqlite":
            continue
        trace = helpers.load(data / e["file"])  # the reader takes .sqlite.gz as it is shipped
        kernels = int((trace.events["kind"] == "kernel").sum())
        # A CUDA-Graph replay that nsys records as one graph-level interval reads as one kernel-kind event.
        rows = e["table_rows"]
        assert kernels == rows.get("CUPTI_ACTIVITY_KIND_KERNEL", 0) + rows.get("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", 0), e["file"]


def test_triage_cases_are_recorded_unlabelled_and_keyed_outside_the_package():
    from conftest import TRIAGE_KEY

    traces = [e for e in _manifest()["traces"] if e["workload"] == "triage"]
    assert len(traces) >= 8 and set(TRIAGE_KEY) == {e["variant"] for e in traces}
    for e in traces:
        assert e["file"] == f"triage__{e['variant']}__h200.json.gz"
        assert "truth" not in e and "tools.triage_cases" in e["command"]


def test_host_bound_variants_differ_only_in_when_the_bookkeeping_runs():
    from helpers.workloads import host_bound

    books = host_bound.Bookkeeping()
    books.update(0)
    assert len(books.report) == 1 and len(books.counts) == host_bound.CLASSES
    step = host_bound.make_step("fixed", torch.device("cpu"))
    for i in range(2):
        step(i)


def test_gloo_job_marked_for_nsys_runs_with_its_hooks(tmp_path):
    """--nsys-range: the marking hook wraps the variant's own hook (here fp16 compression) and trains."""
    res = communication.run("fp16_hook", world_size=2, steps=1, warmup=0, pin_cores=1,
                            mark_collectives=True, nsys_steps=True)
    assert res["backend"] == "gloo" and len(res["per_rank_ms"]) == 2


def test_a_failed_job_raises_the_rank_that_failed_first(tmp_path):
    # Rank 1 crashes; rank 0 then fails in its barrier ("Connection closed by peer"): the cause is rank 1's,
    # whichever rank number comes first.
    import json

    from helpers.workloads.communication import _error_record, _reraise

    crash, peer = _error_record(RuntimeError("rank 1 crashed on purpose")), _error_record(RuntimeError("Connection closed by peer"))
    crash["at"], peer["at"] = 100.0, 100.5
    (tmp_path / "rank1.error.json").write_text(json.dumps(crash))
    (tmp_path / "rank0.error.json").write_text(json.dumps(peer))
    with pytest.raises(RuntimeError, match="crashed on purpose"):
        _reraise(tmp_path, 2, RuntimeError("the parent's own"))
