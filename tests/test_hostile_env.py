"""Hostile cases from the user's shell and environment: limits set with ulimit, numbers at the edges of what a
float holds, output names that mean something else in a shell ('-' for standard output, a trailing '/' for a
folder). The promises: one line and exit 2 with advice that fits the cause, and no file the user did not name."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from synth import host_bound_loop, write_json

import helpers
from helpers.cli import MAX_LIMIT_BYTES, main
from helpers.errors import TraceError
from helpers.paths import os_error_text

ROOT = Path(__file__).resolve().parents[1]
posix_only = pytest.mark.skipif(os.name != "posix", reason="needs ulimit")


def _one_line(capsys, argv: list[str]) -> str:
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("mb", ["1e308", "1.7976931348623157e308", "1e300"])
def test_a_huge_max_mb_is_a_limit_above_any_disk(tmp_path, capsys, mb):
    t = write_json(host_bound_loop(), tmp_path / "t.json")
    job = tmp_path / "job"
    job.mkdir()
    write_json(host_bound_loop(), job / "rank0.json")
    for argv in (["summary", "--max-mb", mb, str(t)], ["ranks", "--max-mb", mb, str(job)]):
        assert main(argv) == 0, argv  # 1e308 MB was an OverflowError turning it into bytes
    capsys.readouterr()
    assert MAX_LIMIT_BYTES >= 1 << 60


@pytest.mark.parametrize("mb", ["1e-9", "1e-300", "5e-324"])
def test_a_max_mb_under_one_byte_is_refused_in_its_own_words(tmp_path, capsys, mb):
    t = write_json(host_bound_loop(), tmp_path / "t.json")
    err = _one_line(capsys, ["summary", "--max-mb", mb, str(t)])
    assert "--max-mb" in err and "less than one byte" in err  # it said 'max_bytes=0', the API's name


@pytest.mark.parametrize("command", [["export"], ["plot"], ["report"], ["compare", "{t}"]])
@pytest.mark.parametrize("name", ["-", "new/", "out/"])
def test_an_output_named_like_stdout_or_a_folder_is_refused(tmp_path, capsys, command, name):
    t = write_json(host_bound_loop(), tmp_path / "t.json")
    (tmp_path / "out").mkdir()
    os.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = [command[0], str(t), *(a.format(t=t) for a in command[1:]), "-o", name]
    err = _one_line(capsys, argv)
    assert ("standard output" in err) if name == "-" else ("names a folder" in err)
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not list((tmp_path / "out").iterdir())


def test_the_api_refuses_an_output_ending_in_a_slash(tmp_path):
    trace = helpers.load(write_json(host_bound_loop(), tmp_path / "t.json"))
    with pytest.raises(TraceError, match="names a folder"):
        helpers.export.export(trace, str(tmp_path / "new") + "/")
    assert not (tmp_path / "new").exists()


def test_limits_of_the_process_get_advice_about_the_limit():
    emfile = os_error_text(OSError(errno.EMFILE, os.strerror(errno.EMFILE)))
    assert "ulimit -n" in emfile and "check the path" not in emfile
    assert "ulimit -f" in os_error_text(OSError(errno.EFBIG, os.strerror(errno.EFBIG), "/x/out.json"))
    assert "ulimit -u" in os_error_text(OSError(errno.EAGAIN, os.strerror(errno.EAGAIN)))


@posix_only
def test_ranks_under_a_low_open_files_limit_says_so(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    for r in range(2):
        write_json(host_bound_loop(), job / f"rank{r}.json", rank=r, world=2)
    r = subprocess.run(["bash", "-c", f"ulimit -n 12 && exec {sys.executable} -m helpers ranks {job}"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if r.returncode == 0:
        pytest.skip("the ranks were read within 12 descriptors here")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert "ulimit -n" in r.stderr and "check the path" not in r.stderr


def test_plot_of_an_empty_trace_says_so_once(tmp_path, capsys):
    t = tmp_path / "empty.json"
    t.write_text('{"traceEvents": []}')
    err = _one_line(capsys, ["plot", str(t), "-o", str(tmp_path / "p.png")])
    assert err.count(str(t)) == 1 and "no events" in err and "pick a step" not in err


@pytest.mark.parametrize("kwargs", [{"program": []}, {"program": ["python", "t\0.py"]}, {"program": ["python"], "output": ""},
                                    {"program": ["python"], "delay_s": -1.0}, {"program": ["python"], "duration_s": 0.0},
                                    {"program": ["python"], "gpu_metrics_device": -1}, {"program": ["python"], "trace": ""},
                                    {"program": ["python"], "osrt_threshold_ns": -5}])
def test_a_profiler_command_nsys_would_refuse_is_refused_when_built(kwargs):
    # built without complaint before, and refused by nsys (or by subprocess, for a NUL) only when run
    with pytest.raises(TraceError, match="nsys_command\\(\\): "):
        helpers.nsys_command(**kwargs)


def test_an_ncu_command_ncu_would_refuse_is_refused_when_built():
    from helpers.profiling import ncu_command

    for kwargs in ({"program": []}, {"program": ["p"], "count": 0}, {"program": ["p"], "launch_skip": -1},
                   {"program": ["p"], "sections": [""]}):
        with pytest.raises(TraceError, match="ncu_command\\(\\): "):
            ncu_command(kernel_regex="gemm", **kwargs)
    assert ncu_command(["python", "t.py"], "gemm")[-2:] == ["python", "t.py"]
    assert helpers.nsys_command(["python", "t.py"], delay_s=0.0, duration_s=5.0)[-2:] == ["python", "t.py"]


@posix_only
def test_a_deleted_current_folder_is_named_by_the_api_for_inputs_and_outputs(tmp_path, monkeypatch):
    trace = helpers.load(write_json(host_bound_loop(), tmp_path / "t.json"))
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    # a folder read as '.' listed as empty ("holds no trace files"); an output said "cannot write in ."
    with pytest.raises(TraceError, match="current folder no longer exists"):
        helpers.load(".")
    for out in ("out.json", "sub/out.json"):
        with pytest.raises(TraceError, match="current folder no longer exists"):
            helpers.export.export(trace, out)
    helpers.export.export(trace, tmp_path / "abs.json")  # a full path still works
    assert (tmp_path / "abs.json").is_file()
