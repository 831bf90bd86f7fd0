"""Nsight in the course: shipped nsys exports, the ncu CSV reader, nsys/ncu command lines, lab 00's check."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from conftest import DATA
from synth import two_step_loop, write_sqlite

import helpers
from helpers import checks, course, profiling
from helpers.errors import TraceError
from helpers.readers.ncu import read_ncu

FIXTURES = Path(__file__).parent / "fixtures"
CONSTRUCTED_CSV = FIXTURES / "ncu-details-constructed.csv"
SCRIPT = ["python", "-m", "helpers.workloads.data_stall", "--variant", "broken", "--steps", "10"]


def _manifest_files(fmt: str) -> list[str]:
    return [e["file"] for e in course.manifest() if e.get("format") == fmt]


# --- shipped exports -------------------------------------------------------------------------
NSYS_EXPORTS = _manifest_files("nsys-sqlite")


@pytest.mark.skipif(not NSYS_EXPORTS, reason="no nsys exports listed in data/manifest.json yet")
@pytest.mark.parametrize("name", NSYS_EXPORTS or ["none"])
def test_every_shipped_nsys_export_loads_with_steps_and_gpu_work(name):
    trace = helpers.load(DATA / name)
    assert trace.format == "nsys-sqlite"
    assert trace.has_gpu and (trace.events["kind"] == "kernel").any()
    runtime = trace.events[trace.events["kind"] == "runtime"]["name"]
    assert not runtime.str.contains(r"_v\d+$").any(), "version suffixes must be stripped"
    assert (trace.events["kind"] == "annotation").any(), "the workloads' NVTX phase ranges must be read"


@pytest.mark.parametrize("entry", course.shipped_ncu_entries() or [None], ids=lambda e: e["file"] if e else "none")
def test_every_shipped_ncu_csv_reads(entry):
    if entry is None:
        pytest.skip("no ncu CSV listed in data/manifest.json yet")
    table = read_ncu(DATA / entry["ncu_csv"])
    assert len(table) >= 1 and (table["duration_us"] > 0).all()
    assert table[["achieved_occupancy_pct", "compute_throughput_pct", "memory_throughput_pct"]].stack().between(0, 100).all()


@pytest.mark.parametrize("name", NSYS_EXPORTS or ["none"])
def test_shipped_exports_carry_their_nsight_outputs(name):
    if name == "none":
        pytest.skip("no nsys exports listed in data/manifest.json yet")
    entry = next(e for e in course.manifest() if e["file"] == name)
    for key in ("report", "nsys_stats", "nsys_analyze"):
        if key in entry:
            assert (DATA / entry[key]).is_file(), f"{name}: {key} -> {entry[key]} is missing"
    if "nsys_stats" in entry:
        stats = (DATA / entry["nsys_stats"]).read_text()
        assert all(r in stats for r in ("cuda_api_sum", "cuda_gpu_kern_sum", "nvtx_sum"))


# --- the ncu reader --------------------------------------------------------------------------
def test_ncu_reader_one_row_per_launch_with_units_and_separators():
    table = read_ncu(CONSTRUCTED_CSV)
    assert list(table["id"]) == [0, 1]
    assert table.loc[0, "duration_us"] == pytest.approx(1204.35)  # "1,204.35" us
    assert table.loc[1, "duration_us"] == pytest.approx(1210.0)  # "1.21" ms
    assert table.loc[0, "achieved_occupancy_pct"] == pytest.approx(18.52)
    assert table.loc[0, "compute_throughput_pct"] == pytest.approx(78.90)
    assert table.loc[0, "memory_throughput_pct"] == pytest.approx(41.20)
    assert table.loc[1, "achieved_occupancy_pct"] != table.loc[1, "achieved_occupancy_pct"]  # n/a -> NaN
    assert table.loc[0, "kernel"] == "sm90_xmma_gemm_bf16bf16_bf16f32"


def _bad_csvs() -> dict[str, tuple[str, str]]:
    good = CONSTRUCTED_CSV.read_text().splitlines()
    header = next(line for line in good if line.startswith('"ID"'))
    return {
        "empty": ("", "no ncu CSV header"),
        "no kernels": ("==PROF== Connected\n==WARNING== No kernels were profiled.\n", "profiled no kernel"),
        "other csv": ('"ID","name"\n"1","x"\n', "lacks the columns"),
        "header only": (header + "\n", "no metrics"),
        "cut short": (header + '\n"0","1234","python3.12"\n', "cut short"),
        "odd unit": ("\n".join([header, good[6].replace('"Memory Throughput","%","41.20"', '"Duration","furlong","3"')]),
                     "unknown duration unit"),
        "no duration": ("\n".join([header, good[6]]), "no kernel Duration"),
    }


@pytest.mark.parametrize("case", list(_bad_csvs()))
def test_ncu_reader_bad_input_one_line(case, tmp_path):
    text, expected = _bad_csvs()[case]
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceError, match=expected) as info:
        read_ncu(path)
    assert "\n" not in str(info.value)


def test_ncu_reader_missing_file(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        read_ncu(tmp_path / "nope.csv")


# --- command lines ---------------------------------------------------------------------------
def test_ncu_command_profiles_the_named_kernel_as_csv():
    cmd = profiling.ncu_command(["python", "t.py"], "gemm", count=3, launch_skip=5, clock_control="none")
    assert cmd[:3] == ["ncu", "--set", "basic"] and cmd[-2:] == ["python", "t.py"]
    assert cmd[cmd.index("-k") + 1] == "regex:gemm" and cmd[cmd.index("-c") + 1] == "3"
    assert cmd[cmd.index("-s") + 1] == "5" and cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--csv") + 1:cmd.index("--csv") + 3] == ["--page", "details"]
    chosen = profiling.ncu_command(["python", "t.py"], "k", sections=["SpeedOfLight", "Occupancy"])
    assert "--set" not in chosen and chosen.count("--section") == 2


def _fake_tool(tmp_path: Path, name: str, body: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text(f"#!{sys.executable}\nimport sys, shutil\n{body}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def test_run_nsys_profiles_exports_and_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.environ["PATH"])
    export = write_sqlite(two_step_loop(), tmp_path / "made.sqlite")
    _fake_tool(tmp_path, "nsys", f"""
args = sys.argv[1:]
if args[0] == "profile":
    open(args[args.index("-o") + 1] + ".nsys-rep", "w").write("report")
elif args[0] == "export":
    shutil.copy({str(export)!r}, args[args.index("-o") + 1])
""")
    cmd = profiling.nsys_command(SCRIPT, output=str(tmp_path / "run1"), stats=False)
    trace = profiling.run_nsys(cmd)
    assert trace.format == "nsys-sqlite" and (tmp_path / "run1.nsys-rep").exists()
    with pytest.raises(TraceError, match="already exists"):
        profiling.run_nsys(cmd)


def test_run_nsys_failures_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.environ["PATH"])
    _fake_tool(tmp_path, "nsys", "sys.stderr.write('Error: unknown option --bogus\\n'); sys.exit(1)")
    with pytest.raises(TraceError, match=r"nsys profile failed \(exit 1\): Error: unknown option"):
        profiling.run_nsys(profiling.nsys_command(SCRIPT, output=str(tmp_path / "r")))
    _fake_tool(tmp_path, "nsys", "pass  # exits 0 and writes nothing, as when the capture range never opened")
    with pytest.raises(TraceError, match="wrote no report"):
        profiling.run_nsys(profiling.nsys_command(SCRIPT, output=str(tmp_path / "r")))
    with pytest.raises(TraceError, match="no -o"):
        profiling.run_nsys(["nsys", "profile", "python", "t.py"])


def test_run_ncu_saves_and_reads_the_csv(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.environ["PATH"])
    _fake_tool(tmp_path, "ncu", f"sys.stdout.write(open({str(CONSTRUCTED_CSV)!r}).read())")
    table = profiling.run_ncu(profiling.ncu_command(["python", "t.py"], "gemm"), tmp_path / "k.csv")
    assert len(table) == 2 and (tmp_path / "k.csv").exists()
    with pytest.raises(TraceError, match="already exists"):
        profiling.run_ncu(profiling.ncu_command(["python", "t.py"], "gemm"), tmp_path / "k.csv")


def test_run_ncu_without_ncu_says_how(monkeypatch, tmp_path):
    monkeypatch.setattr(profiling.shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="Nsight Compute"):
        profiling.run_ncu(["ncu", "python", "t.py"], tmp_path / "k.csv")


# --- lab 00's nsys command check ---------------------------------------------------------------
REFERENCE = {
    "capture range": profiling.nsys_command(SCRIPT + ["--nsys-range"], output="data_stall_broken"),
    "time window": profiling.nsys_command(SCRIPT[:-1] + ["1500"], output="steady", capture_range=None, delay_s=20, duration_s=5),
    "gpu metrics": profiling.nsys_command(SCRIPT, output="metrics", capture_range=None, gpu_metrics_device=0),
}


def test_reference_nsys_answers_pass_as_lists_and_as_strings():
    assert checks.check_nsys_commands(REFERENCE).startswith("passed")
    assert checks.check_nsys_commands({k: profiling.shell(v) for k, v in REFERENCE.items()}).startswith("passed")
    short = "nsys profile -t cuda,nvtx -o w -y 5 -d 20 python train.py"
    assert checks.nsys_command_problems("time window", short) == []


WRONG = {
    ("capture range", "nsys profile --trace=cuda,nvtx -o r --capture-range=cudaProfilerApi python train.py"): "--nsys-range",
    ("capture range", "nsys profile --trace=cuda,nvtx -o r python train.py --nsys-range"): "cudaProfilerApi",
    ("capture range", "nsys profile --trace=cuda -o r -c cudaProfilerApi python t.py --nsys-range"): "misses ['nvtx']",
    ("capture range", "nsys profile --trace=cuda,nvtx -c cudaProfilerApi python t.py --nsys-range"): "no -o NAME",
    ("time window", "nsys profile --trace=cuda,nvtx -o w --duration=30 python t.py"): "no --delay",
    ("time window", "nsys profile --trace=cuda,nvtx -o w --delay=10 python t.py"): "no --duration",
    # the syllabus's numbers on lab 00's 10-step script: the window starts after the program has ended
    ("time window", "nsys profile -t cuda,nvtx -o w -y 10 -d 30 python -m helpers.workloads.data_stall --steps 10"): r"--steps \d+ or more",
    ("time window", "nsys profile -t cuda,nvtx -o w -y 2 -d 5 python -m helpers.workloads.data_stall --steps 5000"): "inside start-up",
    ("time window", "nsys profile -t cuda,nvtx -o w -y 20 -d 5 python -m helpers.workloads.data_stall --steps 1000"): r"--steps \d+ or more",
    ("time window", "nsys profile --trace=cuda,nvtx -o w -y 10 -d 30 -c cudaProfilerApi python t.py"): "no --capture-range",
    ("gpu metrics", "nsys profile --trace=cuda,nvtx -o m python t.py"): "--gpu-metrics-devices=0",
    ("gpu metrics", "nsys profile --trace=cuda,nvtx -o m --gpu-metrics-devices=0"): "program",
    ("gpu metrics", "nsys --trace=cuda,nvtx -o m python t.py"): "not 'nsys profile'",
}


@pytest.mark.parametrize("task,command", list(WRONG))
def test_plausible_wrong_nsys_answers_fail_saying_what_is_wrong(task, command):
    answers = dict(REFERENCE, **{task: command})
    with pytest.raises(checks.CheckFailed, match=f"{task}: .*{WRONG[task, command].replace('[', '.').replace(']', '.')}"):
        checks.check_nsys_commands(answers)


def test_missing_nsys_answer_is_named():
    with pytest.raises(checks.CheckFailed, match="gpu metrics: missing"):
        checks.check_nsys_commands({k: v for k, v in REFERENCE.items() if k != "gpu metrics"})


# --- lab 06's checks -----------------------------------------------------------------------------
ANALYZE_SAMPLE = """\
Processing [r.sqlite] with [/opt/nvidia/nsight-systems/2025.3.1/host-linux-x64/rules/cuda_memcpy_async.py]...

 ** CUDA Async Memcpy with Pageable Memory (cuda_memcpy_async):

The following APIs use PAGEABLE memory which causes asynchronous CUDA memcpy
operations to block and be executed synchronously.

Processing [r.sqlite] with [/opt/nvidia/nsight-systems/2025.3.1/host-linux-x64/rules/cuda_memset_sync.py]...

 ** CUDA Synchronous Memset (cuda_memset_sync):

There were no problems detected related to synchronous memset operations.

 ** CUDA Synchronization APIs (cuda_api_sync):

The following are synchronization APIs that block the host until all issued
CUDA calls are complete.
"""


def test_analyze_findings_lists_only_the_rules_that_reported():
    found = checks.analyze_findings(ANALYZE_SAMPLE)
    assert sorted(found) == ["cuda_api_sync", "cuda_memcpy_async"]
    assert "PAGEABLE" in found["cuda_memcpy_async"]


def test_analyze_verdicts_follow_the_diagnosis():
    trace = helpers.load(write_sqlite(two_step_loop(), Path("t.sqlite")))
    found = {f.pattern for f in helpers.diagnose(trace)}
    truth = {r: bool(found & set(p)) for r, p in checks.ANALYZE_RULE_PATTERNS.items()}
    fired = ["cuda_api_sync", "gpu_gaps"]
    assert checks.check_analyze_verdicts({r: truth[r] for r in fired}, fired, trace, "synth").startswith("passed")
    with pytest.raises(checks.CheckFailed, match="cuda_api_sync"):
        checks.check_analyze_verdicts({"cuda_api_sync": not truth["cuda_api_sync"], "gpu_gaps": truth["gpu_gaps"]},
                                      fired, trace, "synth")


def test_kernel_limiter_reads_speed_of_light():
    import pandas as pd

    rows = pd.DataFrame({"compute_throughput_pct": [79.0, 30.0, 20.0], "memory_throughput_pct": [41.0, 88.0, 35.0]})
    assert [checks.lab06._kernel_limiter(r) for _, r in rows.iterrows()] == ["compute", "memory", "latency"]
    from helpers.stamps import stamp_table

    table = stamp_table(read_ncu(CONSTRUCTED_CSV), {"by": "run_ncu", "command": "ncu ...", "workloads": [], "learner": []})
    assert checks.check_kernel_limiter("compute", table).startswith("passed")  # as run_ncu returned it here
    with pytest.raises(checks.CheckFailed, match="compute 79% and memory 41%"):
        checks.check_kernel_limiter("memory", table)


def test_gzipped_sqlite_export_loads_like_the_plain_one(tmp_path):
    import gzip

    plain = write_sqlite(two_step_loop(), tmp_path / "t.sqlite")
    packed = tmp_path / "t.sqlite.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = helpers.load(plain), helpers.load(packed)
    assert b.format == "nsys-sqlite" and a.events.equals(b.events)


def test_graph_replays_recorded_whole_count_as_gpu_work(tmp_path):
    """nsys's default --cuda-graph-trace=graph writes CUPTI_ACTIVITY_KIND_GRAPH_TRACE rows, no kernel rows."""
    import sqlite3

    from synth import Ev

    path = write_sqlite([Ev("runtime", "cudaGraphLaunch_v10000", 1_000, 5_000, correlation=77),
                         Ev("annotation", "step 0", 0, 50_000)], tmp_path / "g.sqlite")
    con = sqlite3.connect(path)
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE(start, end, deviceId, contextId, streamId, correlationId, "
                "graphId, graphExecId) VALUES (6000, 46000, 0, 1, 7, 77, 3, 4)")
    con.commit()
    con.close()
    trace = helpers.load(path)
    kernels = trace.events[trace.events["kind"] == "kernel"]
    assert list(kernels["name"]) == ["CUDA Graph 3 (whole graph)"] and kernels["dur_us"].iloc[0] == pytest.approx(40.0)
    assert kernels["correlation"].iloc[0] == 77 and trace.has_gpu


def test_stats_reading_and_data_wait_share_say_what_the_report_shows():
    from helpers.course import shipped_nsys_export

    trace = shipped_nsys_export("data_stall", "broken")
    ev = trace.events
    apis = ev[ev["kind"] == "runtime"].groupby("name")["dur_us"].sum().sort_values(ascending=False)
    kernels = ev[ev["kind"] == "kernel"].groupby("name")["dur_us"].sum().sort_values(ascending=False)
    right = {"top_api_call": apis.index[0], "top_kernel": kernels.index[0][:30]}
    assert checks.check_stats_reading(right, trace).startswith("passed")
    with pytest.raises(checks.CheckFailed, match=r"top_api_call: .* is row 2 by time"):
        checks.check_stats_reading({**right, "top_api_call": apis.index[1]}, trace)
    with pytest.raises(checks.CheckFailed, match="names no kernel of this report"):
        checks.check_stats_reading({**right, "top_kernel": "flash_attention_kernel"}, trace)
    share = checks.data_wait_share(trace)
    assert checks.check_data_wait_share(share, trace, "nsys").startswith("passed")
    with pytest.raises(checks.CheckFailed, match="is off for the nsys trace"):
        checks.check_data_wait_share(1.0 - share, trace, "nsys")
