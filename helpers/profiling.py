"""Capturing: annotate phases, profile steps with torch.profiler, and build nsys command lines.

Everything here imports torch; the analysis side (:mod:`helpers.metrics`) does not.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from . import thresholds as th
from .errors import ArgumentError, NoGPUError, TraceError
from .model import Trace
from .procs import KEEP_BYTES, last_line, run_bounded
from .readers import load
from .stamps import describe_step, events_digest, made, stamp_if_made, stamp_of, stamp_table  # noqa: F401

if TYPE_CHECKING:  # only run_ncu returns a DataFrame; readers.ncu imports pandas when it runs
    import pandas as pd

try:
    import nvtx as _nvtx
except ImportError:  # pragma: no cover - nvtx is in requirements.txt
    _nvtx = None

NSYS_HELP = (
    "Nsight Systems (nsys) is not on PATH. Install it from NVIDIA's developer site (or the CUDA "
    "toolkit's nsight-systems package) and reopen the terminal; meanwhile the lab uses the PyTorch "
    "profiler, whose trace the same helpers read."
)
NCU_HELP = (
    "Nsight Compute (ncu) is not on PATH. Install it from NVIDIA's developer site (or the CUDA toolkit's "
    "nsight-compute package); meanwhile read the shipped ncu CSV with helpers.readers.ncu.read_ncu."
)


def track() -> str:
    """``"gpu"`` when a CUDA GPU is usable (labs run live), else ``"cpu"`` (labs replay recorded GPU traces)."""
    return "gpu" if torch.cuda.is_available() else "cpu"


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def require_gpu(what: str) -> None:
    """Raise :class:`NoGPUError` with a one-line explanation if no CUDA GPU is present."""
    if not torch.cuda.is_available():
        raise NoGPUError(
            f"{what} needs a CUDA GPU and this machine has none (torch.cuda.is_available() is False); "
            "the lab's replay track shows the recorded GPU trace instead"
        )


class annotate(contextlib.ContextDecorator):
    """Mark a phase so it shows in Nsight Systems (NVTX) *and* in the PyTorch profiler.

    Use as ``with annotate("forward"):`` or as a decorator ``@annotate("optimizer")``.
    """

    def __init__(self, name: str, color: str | None = None) -> None:
        self.name = name
        self.color = color
        self._rf: torch.profiler.record_function | None = None

    def __enter__(self) -> annotate:
        if _nvtx is not None:
            _nvtx.push_range(self.name, color=self.color)
        self._rf = torch.profiler.record_function(self.name)
        self._rf.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._rf is not None
        self._rf.__exit__(None, None, None)
        if _nvtx is not None:
            _nvtx.pop_range()


def new_run_dir(root: str | os.PathLike = "runs", name: str = "run") -> Path:
    """A fresh folder ``root/name-YYYYmmdd-HHMMSS[-k]``; never reuses one that exists."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for k in range(1000):
        candidate = root / (f"{name}-{stamp}" + (f"-{k}" if k else ""))
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise TraceError(f"{root}: could not make a new run folder; clean old runs out of it")


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


#: Lines the profiler's C++ side (Kineto) writes straight to file descriptor 2 at start and stop,
#: e.g. "USDT:2026-... SyncActivityProfilerHandler.cpp:52] profiler_start": noise for a learner.
#: Also the line it writes when a profiler starts on a thread other than the one that first registered it (a
#: check that measures a learner's function in its own thread): "External init callback must run in same thread as
#: registerClient", harmless.
PROFILER_LOG_LINE = re.compile(r"^(USDT:|STAGE:)|ActivityProfiler\w*\.cpp:\d+\]|libkineto|kineto|"
                               r"External init callback must run in same thread", re.IGNORECASE)


@contextlib.contextmanager
def quiet_profiler_logs(enabled: bool = True):
    """Hold back the profiler's own log lines on stderr (fd 2) while the block runs; pass every other line on.

    Kineto writes from C++ to the file descriptor, so Python-level redirection cannot catch it: fd 2
    goes to a temporary file for the block, and afterwards its lines, less the profiler's, are written back.
    """
    if not enabled:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().decode(errors="replace").splitlines(keepends=True)
                    if not PROFILER_LOG_LINE.search(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def capture(step_fn: Callable[[int], object], steps: int = 5, warmup: int = 2, wait: int = 1,
            out_dir: str | os.PathLike = "runs", name: str = "run", cuda: bool | None = None,
            profiler_logs: bool = False, with_stack: bool = False, profile_memory: bool = False) -> Trace:
    """Profile ``steps`` steps of a loop and return the Trace.

    ``step_fn(i)`` runs one training step. It is called ``wait + warmup + steps`` times; only the
    last ``steps`` are recorded (a wait/warmup/active schedule keeps start-up costs out).
    The trace is written gzipped into a new folder under ``out_dir`` and never overwrites one.
    The profiler's own start/stop log lines are held back unless ``profiler_logs`` is True.
    ``with_stack`` records the Python functions on the profiled thread (``python`` events: the call stack above
    each op); ``profile_memory`` records every allocation and free (read them with
    :func:`helpers.memory.allocations`). Both make the profiled steps slower.
    Just before and just after the steps, outside the profiler, :func:`pace_probe` times a small fixed workload
    (about 15 ms each on a quiet machine); the stamp keeps both figures (``pace_ms``), which the fix checks read to
    tell a machine that ran slower during this capture from a slower step (:mod:`helpers.checks.speed`).
    """
    from torch.profiler import ProfilerActivity, profile, schedule

    if steps < 1 or warmup < 0 or wait < 0:
        raise ArgumentError(f"capture needs steps >= 1, warmup >= 0 and wait >= 0, not steps={steps}, "
                         f"warmup={warmup}, wait={wait}: the schedule would record no step")
    cuda = torch.cuda.is_available() if cuda is None else cuda
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    run_dir = new_run_dir(out_dir, name)
    pace_before = pace_probe()  # the machine's pace just before the steps, outside the profiler: not in the trace
    with quiet_profiler_logs(not profiler_logs), \
            profile(activities=activities, schedule=schedule(wait=wait, warmup=warmup, active=steps, repeat=1),
                    with_stack=with_stack, profile_memory=profile_memory) as prof:
        for i in range(wait + warmup + steps):
            step_fn(i)
            prof.step()
        _sync()
    pace = [pace_before, pace_probe()]  # ... and just after them: the pair brackets the profiled window
    # the stamp names the loop (its code and the workload it runs) and the machine's pace around it (certified
    # with the rest: a check reads it off the stamp, helpers.checks.speed)
    how = {"by": "capture", **describe_step(step_fn), "pace_ms": pace}
    return _stamp(load(save_trace(prof, run_dir / "trace.json.gz", how)))


def _pace_work(a: torch.Tensor, b: torch.Tensor, tiny: torch.Tensor) -> float:
    """One run of the reference workload, in ms: the two kinds of work a training step's host does, Python-level
    calls of tiny ops (dispatch) and a few ops big enough for torch's intra-op threads (matmul, elementwise)."""
    t0 = time.perf_counter()
    with torch.no_grad():
        for _ in range(th.PACE_TINY_OPS):
            tiny.add_(1.0)
        x = a
        for _ in range(th.PACE_BIG_OPS):
            x = torch.relu(x @ b).mul_(0.5).add_(a)
        float(x[0, 0])  # the result, read: the work is done, not queued
    return (time.perf_counter() - t0) * 1e3


def pace_probe(reps: int | None = None) -> float:
    """The machine's pace now: the mean time (ms) of ``reps`` runs of a small fixed CPU workload
    (:data:`~helpers.thresholds.PACE_REPS` by default), after one run to warm up, on torch's intra-op threads as
    the loop has them set. About 0.65 ms a run on a quiet 2-core machine; many times that while another process
    takes the core an intra-op thread needs.

    The mean, not the median: what slows a step on a shared machine is the stalls (a parallel op waits for its
    thread to get a core back, a time slice), which a median of the runs would leave out and a step's time holds.
    :func:`capture` runs it just before and just after the profiled steps, outside the profiler, and records both
    in the trace's stamp; the fix checks compare the two captures' paces (:mod:`helpers.checks.speed`). It
    measures the host only: a GPU slowed by another job does not show in it."""
    reps = max(th.PACE_REPS if reps is None else int(reps), 1)
    g = torch.Generator().manual_seed(0)
    n = th.PACE_MATRIX
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g) / n ** 0.5
    tiny = torch.zeros(8)
    _pace_work(a, b, tiny)
    runs: list[float] = []
    t0 = time.perf_counter()
    while len(runs) < reps and (len(runs) < 3 or time.perf_counter() - t0 < th.PACE_MAX_S):
        runs.append(_pace_work(a, b, tiny))  # on a machine so busy a run takes 100x longer, three runs are enough
    return round(sum(runs) / len(runs), 4)


def _stamp(trace: Trace) -> Trace:
    """``trace`` as :func:`capture` returns it: stamped as made here (:mod:`helpers.stamps`), which
    :func:`helpers.load` does for a file a tool of this process wrote.

    Any other trace is refused (a recording loaded or copied from ``data/``, a file written by other code,
    a trace built in memory): the stamp certifies bytes this process's tools wrote, nothing else.
    """
    if stamp_of(trace) is None:
        trace = stamp_if_made(trace)
    if stamp_of(trace) is None:
        name = Path(trace.source).name if trace.source else "this trace"
        raise TraceError(f"{name}: this trace was loaded, not captured here: only what helpers.capture(...) records "
                         "in this kernel counts as your capture")
    return trace


def captured_here(trace: Trace) -> bool:
    """Whether ``trace`` was made by this process's tools (:func:`capture`, ...), its events unchanged since."""
    return stamp_of(trace) is not None


def save_trace(prof: torch.profiler.profile, path: Path, how: dict | None = None) -> Path:
    """Export a finished profile as gzipped Chrome-trace JSON at ``path`` (which must not exist), registered
    as made in this process ``how`` (:func:`helpers.stamps.made`; default: by capture, of an unknown loop)."""
    if path.exists():
        raise TraceError(f"{path}: already exists; refusing to overwrite a recorded trace")
    raw = path.with_suffix("")  # trace.json
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(path, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    made(path, how or {"by": "capture", "step": "", "workloads": [], "learner": []})  # these bytes, no other file
    return path


def time_steps(step_fn: Callable[[int], object], steps: int = 20, warmup: int = 3) -> float:
    """Mean wall time of one step in milliseconds, with no profiler attached.

    The GPU is synchronized once before and once after the timed steps, not between them, so
    the loop keeps whatever overlap it has.
    """
    if steps < 1 or warmup < 0:
        raise ArgumentError(f"time_steps needs steps >= 1 and warmup >= 0, not steps={steps}, warmup={warmup}: "
                         "a mean over no steps is no time")
    for i in range(warmup):
        step_fn(i)
    _sync()
    t0 = time.perf_counter()
    for i in range(warmup, warmup + steps):
        step_fn(i)
    _sync()
    return (time.perf_counter() - t0) * 1e3 / steps


# --- Nsight Systems -------------------------------------------------------------------------
def _check_words(fn: str, **words: Sequence[str]) -> None:
    """A command's words: a program of at least one word, and none of them empty text (an empty output name is
    nsys's error later) or text with a NUL character (no command line can carry one: subprocess raised ValueError)."""
    for name, items in words.items():
        items = list(items)
        if name == "program" and not items:
            raise ArgumentError(f"{fn}(): program=[]: give the command to profile, e.g. ['python', 'train.py']")
        for item in items:
            if not item or "\0" in item:
                raise ArgumentError(f"{fn}(): {name} holds {item!r:.60}: give words that are not empty and hold no "
                                    "NUL character")


def nsys_command(program: Sequence[str], output: str = "profile", capture_range: str | None = "cudaProfilerApi",
                 delay_s: float | None = None, duration_s: float | None = None,
                 trace: str = "cuda,nvtx,osrt", gpu_metrics_device: int | None = None,
                 stats: bool = True, cuda_graph_trace: str | None = None, cpu_sampling: bool = True,
                 osrt_threshold_ns: int | None = None) -> list[str]:
    """The recommended ``nsys profile`` command line for ``program`` (a list like ``["python", "train.py"]``).

    ``capture_range="cudaProfilerApi"`` records only between ``torch.cuda.profiler.start()`` and
    ``stop()`` (the workloads call them around their steady-state steps with ``--nsys-range``).
    Otherwise ``delay_s`` / ``duration_s`` cut a time window. ``cuda_graph_trace="node"`` shows each
    kernel a CUDA Graph replays on the GPU lane (nsys's default, ``"graph"``, draws one range per
    replay, which hides whether the graph's kernels are still tiny and gapped).
    ``cpu_sampling=False`` turns off nsys's default CPU sampling and context-switch tracing (most of a
    long whole-run report), and ``osrt_threshold_ns`` records only the OS runtime calls at least that
    long (nsys's default is 1000 ns: every file stat of Python's imports).
    """
    if cuda_graph_trace not in (None, "graph", "node"):
        raise ArgumentError(f"cuda_graph_trace must be 'graph' or 'node', not {cuda_graph_trace!r}")
    _check_words("nsys_command", program=program, output=[output], trace=[trace])
    for name, value, ok, words in (("delay_s", delay_s, delay_s is None or delay_s >= 0, "0 or more"),
                                   ("duration_s", duration_s, duration_s is None or duration_s > 0, "above 0"),
                                   ("gpu_metrics_device", gpu_metrics_device, gpu_metrics_device is None or gpu_metrics_device >= 0,
                                    "0 or more"),
                                   ("osrt_threshold_ns", osrt_threshold_ns, osrt_threshold_ns is None or osrt_threshold_ns >= 0,
                                    "0 or more")):
        if not ok:  # nsys refuses these only once the program is about to run
            raise ArgumentError(f"nsys_command(): {name}={value!r}: give a number {words}")
    cmd = ["nsys", "profile", f"--trace={trace}", "-o", output, "--force-overwrite=false"]
    if stats:
        cmd.append("--stats=true")
    if capture_range:
        cmd += [f"--capture-range={capture_range}", "--capture-range-end=stop"]
    if delay_s is not None:
        cmd += [f"--delay={delay_s:g}"]
    if duration_s is not None:
        cmd += [f"--duration={duration_s:g}"]
    if gpu_metrics_device is not None:
        cmd += [f"--gpu-metrics-devices={gpu_metrics_device}"]
    if cuda_graph_trace:
        cmd += [f"--cuda-graph-trace={cuda_graph_trace}"]
    if not cpu_sampling:
        cmd += ["--sample=none", "--cpuctxsw=none"]
    if osrt_threshold_ns is not None:
        cmd += [f"--osrt-threshold={int(osrt_threshold_ns)}"]
    return cmd + list(program)


def nsys_available() -> bool:
    return shutil.which("nsys") is not None


def ncu_available() -> bool:
    return shutil.which("ncu") is not None


def _option_value(command: Sequence[str], *names: str) -> str | None:
    """The value of ``-o X`` / ``--output=X`` style options in a command list (None if absent)."""
    for i, token in enumerate(command):
        for name in names:
            if token == name and i + 1 < len(command):
                return command[i + 1]
            if token.startswith(name + "="):
                return token.split("=", 1)[1]
    return None


def _this_python(command: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """"python" in a profiled program means this interpreter, and the course's workloads must import."""
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    return [sys.executable if c == "python" else str(c) for c in command], env


def _run_tool(command: Sequence[str], env: dict[str, str] | None = None, *, what: str, timeout_s: float,
              stdout: int | None = None) -> subprocess.CompletedProcess:
    """Run a profiler; a failure becomes one TraceError line with the tool's last words."""
    try:
        done = run_bounded(command, timeout_s, stdout=stdout, env=env,  # the tool's own children stopped with it
                           keep_bytes=None if stdout == subprocess.PIPE else KEEP_BYTES)  # (a piped stdout is the result)
    except subprocess.TimeoutExpired:
        raise TraceError(f"{what} ran past {timeout_s:g} s and was stopped; profile fewer steps or raise timeout_s") from None
    except OSError as exc:
        raise TraceError(f"{what} could not be started ({exc.strerror or exc})") from None
    if done.returncode != 0:
        raise TraceError(f"{what} failed (exit {done.returncode}): {last_line(done.stderr, 160) or 'no message'}")
    return done


def with_output(command: Sequence[str], output: str | os.PathLike) -> list[str]:
    """``command`` with its ``-o``/``--output`` value replaced by ``output`` (added if it had none)."""
    command = [str(c) for c in command]
    for i, token in enumerate(command):
        if token in ("-o", "--output") and i + 1 < len(command):
            return command[:i + 1] + [str(output)] + command[i + 2:]
        if token.startswith("--output="):
            return command[:i] + [f"--output={output}"] + command[i + 1:]
    return command[:2] + ["-o", str(output)] + command[2:]


def run_nsys(command: Sequence[str], timeout_s: float = 600) -> Trace:
    """Run an ``nsys profile`` command, export its report to SQLite and load it.

    The report lands where ``-o`` says (``.nsys-rep`` added); its SQLite export beside it
    (``--stats=true`` already writes one, else ``nsys export`` does). Nothing that exists is
    overwritten. Raises :class:`FileNotFoundError` with :data:`NSYS_HELP` when nsys is not installed,
    :class:`TraceError` (one line) when the run or the export fails.
    """
    if not nsys_available():
        raise FileNotFoundError(NSYS_HELP)
    command = list(command)
    if command[:2] != ["nsys", "profile"]:
        raise TraceError(f"not an nsys profile command: {shell(command[:3])} ...; build one with nsys_command(...)")
    output = _option_value(command, "-o", "--output")
    if output is None:
        raise TraceError("the nsys command has no -o/--output; name the report so it can be found and exported")
    report = Path(output if output.endswith(".nsys-rep") else output + ".nsys-rep")
    sqlite = report.with_suffix(".sqlite")
    for existing in (report, sqlite):
        if existing.exists():
            raise TraceError(f"{existing}: already exists; pick another -o name (recorded reports are never overwritten)")
    _run_tool(*_this_python(command), what="nsys profile", timeout_s=timeout_s)
    if not report.exists():
        raise TraceError(f"{report}: nsys wrote no report; with --capture-range=cudaProfilerApi the program must "
                         "call torch.cuda.profiler.start()/stop() (the course's workloads do with --nsys-range)")
    if not sqlite.exists():  # --stats=true exports on its own
        _run_tool(["nsys", "export", "--type", "sqlite", "-o", str(sqlite), str(report)], what="nsys export", timeout_s=timeout_s)
    made(sqlite, _tool_how("run_nsys", command))
    return load(sqlite)


def _tool_how(by: str, command: Sequence[str]) -> dict:
    """How a profiler run of ``command`` made its output: the tool, and the course's workloads it ran."""
    workloads = sorted({str(c).rsplit(".", 1)[1] for c in command if str(c).startswith("helpers.workloads.")})
    return {"by": by, "command": shell([str(c) for c in command]), "workloads": workloads, "learner": []}


def ncu_command(program: Sequence[str], kernel_regex: str, count: int = 1, launch_skip: int = 0,
                sections: Sequence[str] | None = None, metric_set: str = "basic",
                clock_control: str | None = None) -> list[str]:
    """An ``ncu`` command line that profiles ``count`` launches of the kernels matching ``kernel_regex``.

    Collects ``--set basic`` (launch statistics, occupancy, speed of light) unless ``sections`` names
    sections (e.g. ``["SpeedOfLight", "Occupancy"]``), and prints the details page as CSV, which
    :func:`helpers.readers.ncu.read_ncu` reads. ``launch_skip`` skips warm-up launches (``-s``);
    ``clock_control="none"`` keeps the GPU's own clocks instead of ncu's base clocks.
    """
    _check_words("ncu_command", program=program, sections=list(sections or []))
    if count < 1 or launch_skip < 0:
        raise ArgumentError(f"ncu_command(): count={count!r}, launch_skip={launch_skip!r}: give count >= 1 and "
                            "launch_skip >= 0 (launches to profile, and to skip first)")
    cmd = ["ncu"]
    if sections:
        for section in sections:
            cmd += ["--section", section]
    else:
        cmd += ["--set", metric_set]
    cmd += ["-k", f"regex:{kernel_regex}", "-c", str(int(count))]
    if launch_skip:
        cmd += ["-s", str(int(launch_skip))]
    if clock_control:
        cmd += ["--clock-control", clock_control]
    return cmd + ["--csv", "--page", "details"] + list(program)


def run_ncu(command: Sequence[str], csv_path: str | os.PathLike, timeout_s: float = 600) -> pd.DataFrame:
    """Run an :func:`ncu_command`, save its CSV output at ``csv_path`` (which must not exist) and read it."""
    from .readers.ncu import read_ncu

    if not ncu_available():
        raise FileNotFoundError(NCU_HELP)
    csv_path = Path(csv_path)
    if csv_path.exists():
        raise TraceError(f"{csv_path}: already exists; pick another name (recorded results are never overwritten)")
    done = _run_tool(*_this_python(command), what="ncu", timeout_s=timeout_s, stdout=subprocess.PIPE)
    csv_path.write_text(done.stdout)
    return stamp_table(read_ncu(csv_path), _tool_how("run_ncu", command))


def shell(cmd: Sequence[str]) -> str:
    """A command list as one line to paste into a terminal."""
    return " ".join(shlex.quote(c) for c in cmd)


# --- finding hidden syncs on a GPU ------------------------------------------------------------
def find_syncs_live(fn: Callable[[], object]) -> list[str]:
    """Run ``fn`` once with CUDA sync debugging on and return ``file:line`` of every sync it hit."""
    require_gpu("find_syncs_live")
    found: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
            torch.cuda.current_stream().query()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    for w in caught:
        if "synchroniz" in str(w.message).lower():
            found.append(f"{Path(w.filename).name}:{w.lineno}: {str(w.message).splitlines()[0][:80]}")
    return found


@functools.lru_cache(maxsize=1)
def device_name() -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


# The public functions hold their arguments to their type hints (capture(fn, steps=pd.NA) is one TraceError line).
from .arguments import check_namespace as _check_namespace  # noqa: E402

_check_namespace(globals())
