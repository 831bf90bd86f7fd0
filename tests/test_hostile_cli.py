"""Hostile cases at the command line, the file system and child processes, new shapes of families earlier
rounds closed: a labs folder that links back into itself, a manifest no parser should hold, closed standard
streams, a tool that floods its pipe or prints bytes a terminal cannot show, a scheduler that never answers.

The promises: one line and exit 2 (or a finding) for what a user can cause; time and memory bounded by the
mechanism, whatever the shape of the input.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.cli import main
from helpers.errors import TraceError

posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and symbolic links")
ROOT = Path(__file__).resolve().parents[1]
LAB00 = ROOT / "labs" / "00_tools_and_first_profile.ipynb"


def one_line_exit_2(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


# --- selfcheck --run copies the labs folder within bounds ------------------------------------------------

@posix_only
def test_selfcheck_copy_keeps_links_as_links_and_leaves_out_pipes(tmp_path):
    from helpers.selfcheck import copy_labs

    labs = tmp_path / "labs"
    labs.mkdir()
    (labs / "00_x.ipynb").write_text("{}")
    (labs / "up").symlink_to("..")  # a loop: copied by following, it never ends
    (labs / "self").symlink_to("self")
    os.mkfifo(labs / "pipe")  # reading it waits forever
    (labs / "runs").mkdir()
    (labs / "runs" / "big.bin").write_bytes(b"x" * 100)
    copy_labs(labs, tmp_path / "copy")
    out = tmp_path / "copy"
    assert sorted(p.name for p in out.iterdir()) == ["00_x.ipynb", "self", "up"]
    assert os.readlink(out / "up") == str(tmp_path)  # points where the learner's link pointed
    assert (out / "00_x.ipynb").read_text() == "{}"


def test_selfcheck_copy_refuses_a_huge_labs_folder_at_once(tmp_path, monkeypatch):
    from helpers import selfcheck

    labs = tmp_path / "labs"
    labs.mkdir()
    with open(labs / "huge.bin", "wb") as fh:  # sparse: costs no disk here, and must not be copied
        fh.truncate(selfcheck.COPY_MAX_BYTES + 1)
    t0 = time.monotonic()
    with pytest.raises(TraceError, match="huge.bin: the labs folder holds over") as info:
        selfcheck.copy_labs(labs, tmp_path / "copy")
    assert time.monotonic() - t0 < 5 and len(str(info.value)) < 250
    assert not (tmp_path / "copy" / "huge.bin").exists()
    monkeypatch.setattr(selfcheck, "COPY_MAX_ENTRIES", 50)
    many = tmp_path / "many"
    many.mkdir()
    for i in range(60):
        (many / f"f{i}").write_text("")
    with pytest.raises(TraceError, match="over 50 files"):
        selfcheck.copy_labs(many, tmp_path / "copy2")


def test_selfcheck_run_says_a_half_saved_notebook_is_not_one(tmp_path):
    from helpers.selfcheck import execute_notebooks

    (tmp_path / "00_tools_and_first_profile.ipynb").write_bytes(LAB00.read_bytes()[:3000])  # saved half-way
    lines, keys = execute_notebooks(tmp_path)
    assert keys == {} and len(lines) == 1 and "not a notebook Jupyter can open" in lines[0] and len(lines[0]) < 250


# --- doctor reads data/manifest.json within bounds ----------------------------------------------------------

@posix_only
@pytest.mark.parametrize("shape", ["sparse", "nested", "fifo", "folder"])
def test_doctor_reads_no_manifest_whole(tmp_path, shape):
    from helpers import doctor

    labs, data = tmp_path / "labs", tmp_path / "data"
    labs.mkdir()
    data.mkdir()
    (labs / LAB00.name).write_bytes(LAB00.read_bytes())
    manifest = data / "manifest.json"
    if shape == "sparse":  # 3 GB that costs no disk: read whole, it is a MemoryError
        with open(manifest, "wb") as fh:
            fh.truncate(3 << 30)
    elif shape == "nested":
        manifest.write_text("[" * 100_000)  # json's RecursionError
    elif shape == "fifo":
        os.mkfifo(manifest)  # reading it waits forever
    else:
        manifest.mkdir()
    t0, peak = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    findings = {f.name: f for f in doctor.examine(labs, data)}
    assert time.monotonic() - t0 < 30
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < (500 << 10)  # KB: far less than the file
    rec = findings["recordings"]
    assert rec.status == "fail" and str(manifest) in rec.detail and len(rec.detail) < 250 and "\n" not in rec.detail


# --- a scheduler that never answers, or never runs anything, is given up within a stated bound --------------

def _job(tmp_path: Path) -> str:
    from synth import two_step_loop, write_json

    job = tmp_path / "job"
    job.mkdir()
    for r in range(2):
        write_json(two_step_loop(), job / f"rank{r}.json", rank=r, world=2)
    return str(job)


def test_a_listener_that_never_speaks_is_not_waited_on(tmp_path, capsys):
    import socket
    import threading

    from helpers import jobs

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list = []
    threading.Thread(target=lambda: held.append(server.accept()), daemon=True).start()
    try:
        t0 = time.monotonic()
        err = one_line_exit_2(capsys, ["ranks", _job(tmp_path), "--scheduler", f"tcp://127.0.0.1:{server.getsockname()[1]}"])
        assert "says nothing within" in err and time.monotonic() - t0 < jobs.SCHEDULER_CONNECT_S + 5
    finally:
        server.close()


def test_a_scheduler_without_workers_is_given_up(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    from helpers import jobs

    monkeypatch.setattr(jobs, "SCHEDULER_NO_WORKERS_S", 2.0)
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:
        t0 = time.monotonic()
        with pytest.raises(TraceError, match="no workers for 2 s, so 2 rank") as info:
            jobs.analyse_job(_job(tmp_path), scheduler=cluster.scheduler_address)
        assert time.monotonic() - t0 < 20 and len(str(info.value)) < 250


# --- usage errors are one line; counts are read as a user means them ------------------------------------------

@pytest.mark.parametrize("argv, says", [
    (["ranks", "x", "--workers", "0"], "'0': give a positive whole number"),
    (["ranks", "x", "--workers", "\u00b2"], "give a positive whole number"),  # str.isdigit takes it, int() does not
    (["ranks", "x", "--workers", "\u0663"], "give a positive whole number"),  # an Arabic-Indic 3
    (["ranks", "x", "--workers", "9" * 5000], "far larger than any count"),  # past Python's int() digit limit
    (["summary", "x", "--max-events", "1e3"], "give a positive whole number"),
    (["summary", "x", "--max-mb", "nan"], "give a positive number"),
    (["summary"], "required: trace"),
    (["nonsense", "x"], "invalid choice"),
    (["summary", "x", "--bogus", "z" * 5000], "unrecognized arguments"),
])
def test_usage_errors_are_one_short_line(capsys, argv, says):
    err = one_line_exit_2(capsys, argv)
    assert says in err and len(err) < 300 and "_positive" not in err and "usage:" not in err


# --- closed standard streams -------------------------------------------------------------------------------

def _with_closed(fds: tuple[int, ...], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    r, w = os.pipe()

    def close() -> None:
        os.dup2(w, 2) if 2 not in fds else None  # stderr to the pipe, read below
        for fd in fds:
            os.close(fd)

    proc = subprocess.Popen([sys.executable, "-m", "helpers", *args], cwd=cwd, preexec_fn=close, pass_fds=(w,),
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        err = fh.read().decode()
    return subprocess.CompletedProcess(args, proc.wait(timeout=120), "", err)


@posix_only
def test_closed_stdout_is_said_before_any_work_and_closed_stderr_keeps_the_status(tmp_path):
    from synth import two_step_loop, write_json

    src = write_json(two_step_loop(), tmp_path / "t.json")
    r = _with_closed((1,), "export", str(src), "-o", "out.json", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "standard output is closed" in r.stderr and not (tmp_path / "out.json").exists()
    r = _with_closed((2,), "summary", "missing.json", cwd=tmp_path)
    assert r.returncode == 2
    r = _with_closed((0, 2), "export", str(src), "-o", "out.json", cwd=tmp_path)  # stdout is fine: the work is done
    assert r.returncode == 0 and (tmp_path / "out.json").exists()


# --- a tool's output: bounded in memory, its last words printable, its export held to the limit -------------

def _tool(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text("#!/bin/sh\n" + body)
    (bin_dir / name).chmod(0o755)


@posix_only
def test_a_tool_that_floods_its_pipes_costs_what_is_kept():
    from helpers import procs

    flood = "import sys\nfor _ in range(300): sys.stdout.buffer.write(b'x' * (1 << 20)); sys.stderr.write('y' * 9999)\n" \
            "sys.stderr.write('\\nlast words\\n')"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = procs.run_bounded([sys.executable, "-c", flood], 60)
    assert r.returncode == 0 and len(r.stdout) == procs.KEEP_BYTES and r.stderr.endswith("last words\n")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < (150 << 10)  # KB: not the 300 MB it wrote
    r = procs.run_bounded([sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read()[::-1])"], 60,
                          stdin_bytes=b"abc" * 1_000_000, keep_bytes=None)  # fed and read whole where asked
    assert r.stdout == "cba" * 1_000_000


@pytest.mark.parametrize("said, shown", [
    ("ok\n\x1b[31mred\x1b[0m\r\n", "red"),  # a terminal's colours
    ("\x1b]0;title\x07said", "said"),
    ("a\nbad \ufffd\ufffd bytes\x07 here\n\n  \n", "bad bytes here"),
    ("x" * 3000, "x" * 120 + "..."),
    ("", ""),
])
def test_a_tools_last_words_are_one_short_printable_line(said, shown):
    from helpers.procs import last_line

    assert last_line(said) == shown


@posix_only
def test_doctor_shows_a_tools_noise_as_one_short_line(tmp_path, monkeypatch):
    from helpers import doctor

    _tool(tmp_path / "bin", "nsys", "head -c 5000 /dev/urandom\nprintf 'nsys \\033[1m2099.1\\n' >&2\n")
    _tool(tmp_path / "bin", "ncu", "printf '%05000d\\n' 0\nexit 3\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert doctor._tool_version("nsys") == "nsys 2099.1"
    assert doctor._tool_version("ncu") == "0" * 120 + "..."


@posix_only
def test_an_nsys_export_is_stopped_once_past_the_limit(tmp_path, monkeypatch, capsys):
    import tempfile

    _tool(tmp_path / "bin", "nsys", 'out=""\nwhile [ $# -gt 0 ]; do [ "$1" = "--output" ] && out="$2"; shift; done\n'
          'yes "an export that never ends" > "$out"\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    report = tmp_path / "r.nsys-rep"
    report.write_bytes(b"a report")
    t0 = time.monotonic()
    err = one_line_exit_2(capsys, ["summary", str(report), "--max-mb", "5"])
    assert "grew past the limit of 5 MB" in err and time.monotonic() - t0 < 20 and list(temp.iterdir()) == []


# --- every user pattern is bounded in time: the explorer's /regex/ search too -------------------------------

def test_an_explorer_regex_search_is_stopped_in_time(tmp_path, monkeypatch):
    from synth import Ev, write_json

    import helpers
    from helpers import explore

    events = [Ev("annotation", "ProfilerStep#1", 0, 100_000), Ev("cpu_op", "a" * 3000 + "!", 1000, 50_000),
              Ev("cpu_op", "aten::mm", 60_000, 70_000)]
    lanes = explore.Lanes(helpers.load(write_json(events, tmp_path / "t.json")))
    monkeypatch.setattr(explore, "SEARCH_TIMEOUT_S", 1.0)
    t0 = time.monotonic()
    found = lanes.search("/^(a|aa)*$/")  # in-process this backtracks for hours on the 3,000-character name
    assert time.monotonic() - t0 < 10 and found["total"] == 0 and "did not finish within 1 s" in found["error"]
    assert "not a regular expression" in lanes.search("/(/")["error"]
    assert lanes.search("/^a+!$/")["names"] == 1 and lanes.search("ATEN::")["names"] == 1


# --- text written into a document is valid text, whatever bytes a file name holds ----------------------------

@posix_only
def test_a_report_of_a_file_whose_name_is_not_utf8(tmp_path, capsys):
    from synth import two_step_loop, write_json

    src = write_json(two_step_loop(), tmp_path / os.fsdecode(b"caf\xe9.json"))
    assert main(["report", str(src), "-o", str(tmp_path / "r.html")]) == 0, capsys.readouterr().err
    page = (tmp_path / "r.html").read_bytes().decode("utf-8")  # valid UTF-8 throughout
    assert "caf\\xe9.json" in page


# --- invalid JSON is named for what is wrong with it ---------------------------------------------------------

@pytest.mark.parametrize("text, says", [
    ('{"traceEvents":[' + "[" * 200_000 + "]" * 200_000 + "]}", "nest deeper than any trace's"),
    ('{"traceEvents":[{"ph":"X","name":"a\\ud800","pid":1,"tid":1,"ts":0,"dur":1}]}', "not valid Unicode"),
    ('{"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":1,"ts":0,"dur":1}', "probably truncated"),
])
def test_invalid_json_says_why_in_words_that_fit(tmp_path, capsys, text, says):
    (tmp_path / "t.json").write_text(text)
    err = one_line_exit_2(capsys, ["summary", str(tmp_path / "t.json")])
    assert says in err and len(err.replace(str(tmp_path / "t.json"), "")) < 200


# --- selfcheck --run: a signal while a notebook runs stops the command ----------------------------------------

class _ClientLikeNbclient:
    """What nbclient does with signals: its event loop takes SIGINT and SIGTERM (they stop the kernel) and
    gives them back to Python's defaults at the end. A signal arrives while it runs."""

    outcome = "returns"

    def __init__(self, nb, **kwargs) -> None:
        pass

    def execute(self, **kwargs) -> None:
        import asyncio
        import signal

        async def run() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, lambda: None)  # nbclient's: stop the kernel, carry on
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(0.2)
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            if self.outcome == "cancelled":
                raise asyncio.CancelledError

        asyncio.run(run())


@posix_only
@pytest.mark.parametrize("outcome", ["returns", "cancelled"])
def test_a_signal_during_a_notebook_stops_selfcheck_and_the_handlers_come_back(tmp_path, monkeypatch, outcome):
    import signal

    import nbclient

    from helpers import interrupts
    from helpers.errors import Interrupted
    from helpers.selfcheck import execute_notebooks

    monkeypatch.setattr(nbclient, "NotebookClient", _ClientLikeNbclient)
    monkeypatch.setattr(_ClientLikeNbclient, "outcome", outcome)
    (tmp_path / "00_a.ipynb").write_bytes(LAB00.read_bytes())
    (tmp_path / "01_b.ipynb").write_bytes(LAB00.read_bytes())
    with interrupts.signals_as_exceptions():
        with pytest.raises(Interrupted) as info:  # not the next notebook, not a report as if nothing happened
            execute_notebooks(tmp_path)
        assert info.value.signum == signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is interrupts._handler  # a later SIGTERM still cleans up
        assert signal.getsignal(signal.SIGINT) is interrupts._handler


# --- a signal that lands in the middle of an import waits for the import to end -----------------------------

@posix_only
def test_a_signal_inside_a_module_being_imported_is_raised_after_the_import(tmp_path, monkeypatch):
    """A C extension importing a module (numpy importing datetime) turns an exception raised in that module's
    body into its own ImportError ("your installation is broken"): the signal is raised once the import is done."""
    import importlib
    import signal

    from helpers import interrupts
    from helpers.errors import Interrupted

    (tmp_path / "slow_module_for_signals.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\nfor _ in range(20):\n    time.sleep(0.01)\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with interrupts.signals_as_exceptions(), pytest.raises(Interrupted):
        try:
            module = importlib.import_module("slow_module_for_signals")
            assert module.DONE  # the whole body ran
        except Interrupted:
            pytest.fail("raised inside the module's body")
        time.sleep(2)  # the signal, sent again, lands here
    sys.modules.pop("slow_module_for_signals", None)
    assert signal.getsignal(signal.SIGINT) is not interrupts._handler


# --- names are printed as text: a terminal never obeys a control sequence a trace or a file name holds ---------

@posix_only
def test_control_characters_in_names_are_printed_escaped(tmp_path, capsys):
    from synth import Ev, write_json

    events = [Ev("annotation", "ProfilerStep#1", 0, 100_000), Ev("cpu_op", "op\x1b]0;owned\x07\x1b[2J", 1000, 90_000)]
    src = write_json(events, tmp_path / "t\x1b[31m.json")
    assert main(["diagnose", str(src)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b[31m.json" in out
    err = one_line_exit_2(capsys, ["summary", str(src), "--max-events", "1"])
    assert "\x1b" not in err and "t\\x1b[31m.json" in err


@pytest.mark.parametrize("window", ["0:inf", "nan:5", "1e308:1.7e308", "-1.7e308:1.7e308"])
def test_a_window_that_is_not_finite_milliseconds_is_said_so(tmp_path, capsys, window):
    from synth import two_step_loop, write_json

    src = write_json(two_step_loop(), tmp_path / "t.json")
    err = one_line_exit_2(capsys, ["plot", str(src), "-o", str(tmp_path / "p.png"), f"--window={window}"])
    assert f"--window '{window}': START and END must be finite" in err and not (tmp_path / "p.png").exists()


@posix_only
@pytest.mark.parametrize("body", ["(sleep 120 &)\necho 'NVIDIA H200, 1980, 1980, 0x0'\n",  # a child holds the pipe
                                  "echo 'not, the, answer'\n", "echo 'a,b,c,d,e'\n", "head -c 3000 /dev/urandom\n"])
def test_an_nvidia_smi_that_hangs_or_babbles_is_no_gpu(tmp_path, monkeypatch, body):
    from helpers import environment

    _tool(tmp_path / "bin", "nvidia-smi", body)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    t0 = time.monotonic()
    gpu = environment._gpu()
    assert time.monotonic() - t0 < 15
    assert gpu is None or gpu == {"name": "NVIDIA H200", "sm_clock_mhz": 1980, "max_sm_clock_mhz": 1980, "clock_reasons": []}


@posix_only
@pytest.mark.parametrize("command, ext", [("plot", "png"), ("export", "json"), ("report", "html")])
def test_a_written_name_with_a_line_break_is_printed_on_one_line(tmp_path, capsys, command, ext):
    from synth import two_step_loop, write_json

    src = write_json(two_step_loop(), tmp_path / "t.json")
    out = tmp_path / f"a\nb.{ext}"
    assert main([command, str(src), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert out.exists() and printed.count("\n") == 1 and "a\\x0ab." in printed


@pytest.mark.parametrize("argv", [["summary", ""], ["export", "t.json", "-o", ""], ["compare", "t.json", ""],
                                  ["ranks", ""], ["doctor", ""], ["report", "t.json", "-o", ""]])
def test_an_empty_name_is_refused_not_read_as_the_current_folder(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    assert "an empty name" in one_line_exit_2(capsys, argv)


def test_a_config_folder_that_cannot_be_written_leaves_stderr_quiet(tmp_path):
    from synth import two_step_loop, write_json

    src = write_json(two_step_loop(), tmp_path / "t.json")
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    r = subprocess.run([sys.executable, "-m", "helpers", "plot", str(src), "-o", str(tmp_path / "p.png")],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "MPLCONFIGDIR": str(not_a_folder),
                            "HOME": str(not_a_folder)})
    assert r.returncode == 0 and r.stderr == "" and (tmp_path / "p.png").exists()


@posix_only
def test_doctor_probe_does_not_wait_out_a_hung_tool(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from helpers import capability, doctor

    for tool in ("nsys", "ncu"):
        _tool(tmp_path / "bin", tool, "(sleep 120 &)\nsleep 120\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(capability, "probe", lambda: (_ for _ in ()).throw(RuntimeError("no GPU\\nhere" * 50)))
    monkeypatch.setattr(doctor, "PROBE_IDLE_S", 1.0)
    t0 = time.monotonic()
    found = {f.name: f for f in doctor.probe()}
    assert time.monotonic() - t0 < 20
    assert all("used no CPU for 1 s" in found[f"{t} probe"].detail for t in ("nsys", "ncu"))
    assert len(found["device probe"].detail) < 200


@pytest.mark.parametrize("codec", ["utf-32", "utf-32-le", "utf-32-be", "utf-16", "utf-8-sig"])
def test_a_trace_saved_as_utf32_reads_as_its_utf8_self(tmp_path, codec):
    from synth import two_step_loop, write_json

    import helpers

    src = write_json(two_step_loop(), tmp_path / "t.json")
    other = tmp_path / f"{codec}.json"
    other.write_bytes(src.read_text().encode(codec))
    a, b = helpers.load(src).events, helpers.load(other).events
    assert len(a) == len(b) and list(a["name"]) == list(b["name"])


@posix_only
def test_an_nsys_export_that_fails_is_quoted_from_wherever_it_spoke(tmp_path, monkeypatch, capsys):
    _tool(tmp_path / "bin", "nsys", "yes 'license check failed' | head -n 1500000\nexit 1\n")  # 31 MB, on stdout
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    report = tmp_path / "r.nsys-rep"
    report.write_bytes(b"a report")
    err = one_line_exit_2(capsys, ["summary", str(report)])
    assert "nsys export failed (license check failed)" in err


@posix_only
@pytest.mark.parametrize("command", ["doctor", "selfcheck"])
def test_a_labs_link_that_loops_is_named_as_one(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "labs").symlink_to("labs")
    assert main([command, "labs"]) == 2
    err = capsys.readouterr().err.strip()
    assert "symbolic link that points back at itself" in err and "\n" not in err
