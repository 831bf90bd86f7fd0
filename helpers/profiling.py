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

import torch

from .errors import NoGPUError, TraceError
from .model import Trace
from .readers import load

try:
    import nvtx as _nvtx
except ImportError:  # pragma: no cover - nvtx is in requirements.txt
    _nvtx = None

NSYS_HELP = (
    "Nsight Systems (nsys) is not on PATH. Install it from NVIDIA's developer site (or the CUDA "
    "toolkit's nsight-systems package) and reopen the terminal; meanwhile the lab uses the PyTorch "
    "profiler, whose trace the same helpers read."
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
PROFILER_LOG_LINE = re.compile(r"^(USDT:|STAGE:)|ActivityProfiler\w*\.cpp:\d+\]|libkineto|kineto", re.IGNORECASE)


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
            profiler_logs: bool = False) -> Trace:
    """Profile ``steps`` steps of a loop and return the Trace.

    ``step_fn(i)`` runs one training step. It is called ``wait + warmup + steps`` times; only the
    last ``steps`` are recorded (a wait/warmup/active schedule keeps start-up costs out).
    The trace is written gzipped into a new folder under ``out_dir`` and never overwrites one.
    The profiler's own start/stop log lines are held back unless ``profiler_logs`` is True.
    """
    from torch.profiler import ProfilerActivity, profile, schedule

    cuda = torch.cuda.is_available() if cuda is None else cuda
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    run_dir = new_run_dir(out_dir, name)
    with quiet_profiler_logs(not profiler_logs), \
            profile(activities=activities, schedule=schedule(wait=wait, warmup=warmup, active=steps, repeat=1)) as prof:
        for i in range(wait + warmup + steps):
            step_fn(i)
            prof.step()
        _sync()
    return load(save_trace(prof, run_dir / "trace.json.gz"))


def save_trace(prof: torch.profiler.profile, path: Path) -> Path:
    """Export a finished profile as gzipped Chrome-trace JSON at ``path`` (which must not exist)."""
    if path.exists():
        raise TraceError(f"{path}: already exists; refusing to overwrite a recorded trace")
    raw = path.with_suffix("")  # trace.json
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(path, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    return path


def time_steps(step_fn: Callable[[int], object], steps: int = 20, warmup: int = 3) -> float:
    """Mean wall time of one step in milliseconds, with no profiler attached.

    The GPU is synchronized once before and once after the timed steps, not between them, so
    the loop keeps whatever overlap it has.
    """
    for i in range(warmup):
        step_fn(i)
    _sync()
    t0 = time.perf_counter()
    for i in range(warmup, warmup + steps):
        step_fn(i)
    _sync()
    return (time.perf_counter() - t0) * 1e3 / steps


# --- Nsight Systems -------------------------------------------------------------------------
def nsys_command(program: Sequence[str], output: str = "profile", capture_range: str | None = "cudaProfilerApi",
                 delay_s: float | None = None, duration_s: float | None = None,
                 trace: str = "cuda,nvtx,osrt", gpu_metrics_device: int | None = None,
                 stats: bool = True) -> list[str]:
    """The recommended ``nsys profile`` command line for ``program`` (a list like ``["python", "train.py"]``).

    ``capture_range="cudaProfilerApi"`` records only between ``torch.cuda.profiler.start()`` and
    ``stop()`` (the workloads call them around their steady-state steps with ``--nsys-range``).
    Otherwise ``delay_s`` / ``duration_s`` cut a time window.
    """
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
    return cmd + list(program)


def nsys_available() -> bool:
    return shutil.which("nsys") is not None


def run_nsys(command: Sequence[str], timeout_s: float = 600) -> Trace:
    """Run an ``nsys profile`` command, export its report to SQLite and load it.

    Raises :class:`FileNotFoundError` with :data:`NSYS_HELP` when nsys is not installed.
    """
    if not nsys_available():
        raise FileNotFoundError(NSYS_HELP)
    command = list(command)
    out = Path(command[command.index("-o") + 1])
    report = out.with_suffix(".nsys-rep") if out.suffix != ".nsys-rep" else out
    if report.exists():
        raise TraceError(f"{report}: already exists; pick another -o name (recorded reports are never overwritten)")
    subprocess.run(command, check=True, timeout=timeout_s)
    sqlite = report.with_suffix(".sqlite")
    subprocess.run(["nsys", "export", "--type", "sqlite", "-o", str(sqlite), str(report)], check=True, timeout=timeout_s)
    return load(sqlite)


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
