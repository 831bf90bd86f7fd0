"""What this machine gives the labs: Python and torch, the track, nsys/ncu, counter permissions.

``python -m helpers doctor [LABS]`` (see :mod:`helpers.cli`) prints :func:`examine`'s findings; an
instructor's pre-flight (docs/instructors/preflight.md) runs it on every room machine, as the learner's
own user, with ``--probe`` on GPU machines so that nsys and ncu run once for real. Nothing here changes
the machine: it reads files under /proc, asks tools for their version, and (``--probe``) writes two
small reports into a new temporary folder it removes again.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .errors import TraceError
from .outputs import read_regular
from .paths import unreachable
from .procs import Hung, last_line, run_bounded

#: The largest data/manifest.json read (the course's is ~0.1 MB): a larger one is not the course's.
MANIFEST_MAX_BYTES = 16 << 20

#: Python versions the course is tested on (the README's "Python 3.10–3.12").
PYTHON_RANGE = ((3, 10), (3, 12))
#: Packages the notebooks import besides torch (requirements.txt pins them).
PACKAGES = ("numpy", "pandas", "matplotlib", "nvtx", "nbformat", "nbclient", "jupyterlab", "ipykernel")
#: nsys samples CPU call stacks through perf_event_open, which Linux refuses above this paranoid level
#: to an unprivileged user (perf_event_open(2): 2 allows user-space measurement only; some
#: distributions ship 3 or 4, which refuse it).
PARANOID_MAX_FOR_SAMPLING = 2
#: Labs 01 and 04 on the CPU track need this many cores: DataLoader workers beside the training process,
#: and a two-rank job (docs/INSTRUCTORS.md, "at least 2 cores").
MIN_CORES = 2
#: The message NVIDIA's tools print when the driver keeps GPU performance counters to admin users.
COUNTER_ERROR = "ERR_NVGPUCTRPERM"


#: PyTorch 2.9 added torch.backends.cuda.matmul.fp32_precision, the TF32 switch lab 08 teaches.
TF32_SWITCH_TORCH = (2, 9)
#: Packages a hosted notebook service replaces (its own front end runs the notebooks).
HOSTED_NOT_NEEDED = ("jupyterlab",)


def hosted_notebook() -> str:
    """The hosted notebook service this kernel runs in ("Google Colab", "Kaggle"), or "" (a machine of one's own).
    Read from the variables each service sets in its kernels' environment."""
    if os.environ.get("COLAB_RELEASE_TAG") or os.environ.get("COLAB_GPU") is not None:
        return "Google Colab"
    if os.environ.get("KAGGLE_KERNEL_RUN_TYPE") or os.environ.get("KAGGLE_URL_BASE"):
        return "Kaggle"
    return ""


def _device_finding(torch) -> Finding:  # noqa: ANN001 - the torch module, imported by examine
    """What the GPU gives the GPU track: its compute capability and memory, and what follows for lab 08 (tensor
    cores, native bf16, TF32). ``--probe`` adds the measured GEMM and bandwidth figures (helpers.capability)."""
    props = torch.cuda.get_device_properties(0)
    cc = (props.major, props.minor)
    has = [w for w, ok in (("tensor cores", cc >= (7, 0)), ("native bf16", cc >= (8, 0)), ("TF32", cc >= (8, 0))) if ok]
    lacks = [w for w, ok in (("tensor cores", cc >= (7, 0)), ("native bf16", cc >= (8, 0)), ("TF32", cc >= (8, 0))) if not ok]
    detail = (f"{props.name}, compute capability {cc[0]}.{cc[1]}, {props.total_memory / 2**30:.0f} GiB, "
              f"{props.multi_processor_count} SMs; " + (f"has {', '.join(has)}" if has else "no tensor cores")
              + (f"; lacks {', '.join(lacks)}" if has and lacks else ""))
    if cc < (7, 0):
        return Finding("device", "note", detail + ": lab 08 cannot show a precision speed-up here and judges its structure")
    if cc < (8, 0):
        return Finding("device", "note", detail + ": lab 08's low-precision step is fp16 with a GradScaler here",
                       "the speed checks judge against this GPU's own figures (python -m helpers doctor --probe measures them)")
    return Finding("device", "ok", detail + ": lab 08's low-precision step is bf16")


@dataclass(frozen=True)
class Finding:
    """One line of the report: ``status`` is ``ok``, ``note`` (works, with a consequence), ``warn``
    (a part of the course will not run live) or ``fail`` (the labs cannot run)."""

    name: str
    status: str
    detail: str
    fix: str = ""


#: Seconds a tool's ``--version`` may take, and may go without using CPU, before doctor stops waiting: the
#: answer is instant where the tool works; one that hangs (a broken install, a licence prompt) is reported.
VERSION_TIMEOUT_S = 10.0
VERSION_IDLE_S = 3.0


def _tool_version(tool: str) -> str | None:
    exe = shutil.which(tool)
    if exe is None:
        return None
    try:
        out = run_bounded([exe, "--version"], VERSION_TIMEOUT_S, idle_s=VERSION_IDLE_S)
    except subprocess.TimeoutExpired:
        return "on PATH (its --version did not answer; it may be a broken install)"
    except OSError as exc:
        return f"on PATH (its --version could not be run: {exc.strerror or exc})"
    return last_line((out.stdout or "") + "\n" + (out.stderr or "")) or "on PATH"


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _in_container() -> bool:
    cgroup = _read("/proc/1/cgroup") or ""
    return Path("/.dockerenv").exists() or any(k in cgroup for k in ("docker", "kubepods", "containerd", "lxc"))


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def examine(labs: str | os.PathLike = "labs", data: str | os.PathLike | None = None) -> list[Finding]:
    """The findings for this machine, in the order a learner meets them. Raises :class:`TraceError`
    when ``labs`` is not a folder of lab notebooks (bad input, not a finding)."""
    labs = Path(labs)
    if not labs.is_dir():
        why = unreachable(labs) or "not a folder; give the folder of lab notebooks, e.g. python -m helpers doctor labs/"
        raise TraceError(f"{labs}: {why}")
    notebooks = sorted(labs.glob("[0-9][0-9]_*.ipynb"))
    if not notebooks:
        raise TraceError(f"{labs}: holds no lab notebooks (NN_name.ipynb); give the course's labs/ folder")
    out: list[Finding] = []

    v = sys.version_info[:2]
    lo, hi = PYTHON_RANGE
    out.append(Finding("python", "ok" if lo <= v <= hi else "warn", f"Python {platform.python_version()}",
                       "" if lo <= v <= hi else f"the course is tested on Python {lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}"))

    track = "cpu"
    try:
        import torch
    except Exception as exc:  # an import that fails in any way: the labs cannot start
        out.append(Finding("torch", "fail", f"torch does not import ({type(exc).__name__}: {exc})",
                           "pip install -r requirements.txt (on Linux without a GPU, the CPU build first: see the README)"))
        torch = None
    if torch is not None:
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
        out.append(Finding("torch", "ok", f"torch {torch.__version__} ({build})"))
        if torch.cuda.is_available():
            track = "gpu"
            out.append(Finding("track", "ok", f"GPU track: {torch.cuda.get_device_name(0)}; every loop runs live"))
            out.append(_device_finding(torch))
        else:
            why = ("this torch is a CPU build" if not torch.version.cuda
                   else "torch is a CUDA build but sees no GPU (driver, CUDA_VISIBLE_DEVICES, or a container without --gpus)")
            out.append(Finding("track", "note", f"CPU track: {why}; GPU timelines are replayed from the H200 recordings"))

        if tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2]) < TF32_SWITCH_TORCH:
            out.append(Finding("torch version", "note", f"torch {torch.__version__} predates 2.9: lab 08's TF32 switch "
                               "(torch.backends.cuda.matmul.fp32_precision) does not exist in it; use allow_tf32 there",
                               "the course is tested on torch 2.13 (requirements.txt)"))

    host = hosted_notebook()
    if host:
        out.append(Finding("notebook", "note", f"{host}: its notebook service runs the labs (JupyterLab is not needed)",
                           "labs/ holds the notebooks; each starts with the setup cell (README, \"In a cloud notebook\")"))
    wanted = [p for p in PACKAGES if not (host and p in HOSTED_NOT_NEEDED)]
    missing = [p for p in wanted if importlib.util.find_spec(p) is None]
    out.append(Finding("packages", "fail" if missing else "ok",
                       f"missing: {', '.join(missing)}" if missing else f"{len(wanted)} packages the notebooks import",
                       ("python tools/cloud_setup.py" if host else "pip install -r requirements.txt") if missing else ""))

    data = Path(data) if data is not None else labs.resolve().parent / "data"
    manifest = data / "manifest.json"
    if not manifest.exists():
        out.append(Finding("recordings", "fail", f"{manifest} is missing", "re-clone, or git checkout data/"))
    else:
        try:
            entries = json.loads(read_regular(manifest, MANIFEST_MAX_BYTES, "manifest"))["traces"]
            absent = [e["file"] for e in entries if not (data / e["file"]).exists()]
        except TraceError as exc:  # a pipe, or far larger than the course's manifest: never read whole
            out.append(Finding("recordings", "fail", str(exc), "git checkout data/"))
        except RecursionError:  # nested deeper than the parser goes: not the course's manifest either
            out.append(Finding("recordings", "fail", f"{manifest} is not the course's manifest (nested too deeply)",
                               "git checkout data/"))
        except (OSError, ValueError, KeyError, TypeError) as exc:  # unreadable, or not the course's format
            out.append(Finding("recordings", "fail", f"{manifest} is not the course's manifest "
                               f"({' '.join(str(exc).split())[:120]})", "git checkout data/"))
        else:
            out.append(Finding("recordings", "fail" if absent else "ok",
                               f"{len(absent)} of {len(entries)} recorded traces missing, e.g. {absent[0]}" if absent
                               else f"{len(entries)} recorded traces", "git checkout data/" if absent else ""))

    writable = os.access(labs, os.W_OK)
    out.append(Finding("labs folder", "ok" if writable else "fail", f"{labs}: {len(notebooks)} notebooks, "
                       + ("writable (captures go to runs/ beside them)" if writable else "not writable"),
                       "" if writable else "give each learner their own copy of the course"))

    cores = _cores()
    out.append(Finding("cores", "ok" if cores >= MIN_CORES else "warn", f"{cores} usable",
                       "" if cores >= MIN_CORES else f"labs 01 and 04 need {MIN_CORES} (workers, two ranks): they run, slowly"))

    with ThreadPoolExecutor(2) as pool:  # asked at once: a tool that hangs costs its bound once, not twice
        nsys, ncu = pool.map(_tool_version, ("nsys", "ncu"))
    live = track == "gpu"
    out.append(Finding("nsys", "ok" if nsys and live else "note",
                       (nsys or "not on PATH") + (": lab 00 captures live" if nsys and live
                                                  else ": the labs print the commands and read the shipped reports"),
                       "" if nsys or not live else "install Nsight Systems for live captures"))
    out.append(Finding("ncu", "ok" if ncu and live else "note",
                       (ncu or "not on PATH") + (": labs 06 and 08 run ncu live" if ncu and live
                                                 else ": labs 06 and 08 read the shipped ncu reports"),
                       "" if ncu or not live else "install Nsight Compute for live kernel profiles"))

    params = _read("/proc/driver/nvidia/params")
    if params is not None:
        admin_only = any(line.replace(" ", "") == "RmProfilingAdminOnly:1" for line in params.splitlines())
        if admin_only and not _is_root():
            out.append(Finding("GPU counters", "warn",
                               f"the driver keeps performance counters to admin users: ncu and nsys --gpu-metrics-devices "
                               f"will stop with {COUNTER_ERROR}",
                               "options nvidia NVreg_RestrictProfilingToAdminUsers=0 in /etc/modprobe.d/, then reboot "
                               "(or run the tools with sudo / CAP_SYS_ADMIN)"))
        else:
            out.append(Finding("GPU counters", "ok", "open to this user" if admin_only is False else "this user is root"))
    paranoid = _read("/proc/sys/kernel/perf_event_paranoid")
    profiling = live or bool(nsys or ncu)  # what follows matters only where the tools will run
    if profiling and paranoid is not None and paranoid.strip().lstrip("-").isdigit():
        level = int(paranoid)
        ok = level <= PARANOID_MAX_FOR_SAMPLING or _is_root()
        out.append(Finding("CPU sampling", "ok" if ok else "note", f"perf_event_paranoid is {level}"
                           + ("" if ok else ": nsys cannot sample CPU call stacks (the course's captures still work)"),
                           "" if ok else f"sudo sysctl -w kernel.perf_event_paranoid={PARANOID_MAX_FOR_SAMPLING}, or "
                                         "capture with --sample=none"))
    if profiling and _in_container():
        out.append(Finding("container", "note", "running in a container",
                           "ncu needs the counters allowed on the host or the container started with --cap-add=SYS_ADMIN; "
                           "nsys's CPU sampling needs perf_event_open, which docker's default seccomp profile allows only with CAP_SYS_ADMIN"))
    if _is_root() and not host:  # a hosted notebook's kernel runs as root, and its service is the front end
        out.append(Finding("root", "note", "running as root", "start JupyterLab at the repository root with jupyter lab --allow-root"))
    return out


#: Seconds a probed tool may go without using CPU (its whole process group) before it is taken as hung: a profiler
#: running three small GEMMs is never idle that long.
PROBE_IDLE_S = 30.0


def probe(timeout_s: float = 300) -> list[Finding]:
    """Measure the GPU (:func:`helpers.capability.probe`: what lab 08 judges by), then run nsys and ncu once each on a
    few CUDA kernels, as this user, and say what happened.

    Only where torch sees a GPU and the tool is on PATH; the reports go to a temporary folder that is
    removed afterwards. This is what the pre-flight means by "run the tools once": permissions show only
    when a tool actually touches the GPU."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - examine() already says why torch does not import
        return [Finding("probe", "note", "torch does not import: nothing to probe")]
    if not torch.cuda.is_available():
        return [Finding("probe", "note", "no CUDA GPU: nothing to probe (the CPU track reads shipped reports)")]
    from . import capability

    try:
        measured = capability.probe()
    except Exception as exc:  # noqa: BLE001 - a GPU that fails its own probe is a finding, not a crash
        out = [Finding("device probe", "warn", f"the GEMM probe failed: {type(exc).__name__}: {last_line(str(exc))}")]
    else:
        gain = measured.gemm_gain(measured.lowp)
        out = [Finding("device probe", "ok", f"{measured.describe()}; {measured.lowp} GEMMs {gain:.1f}x fp32's: what lab 08 "
                                             "judges your precision step against")]
    program = [sys.executable, "-c", "import torch; x = torch.ones(256, 256, device='cuda'); [x @ x for _ in range(3)]; "
               "torch.cuda.synchronize()"]
    with tempfile.TemporaryDirectory(prefix="doctor-probe-") as tmp:
        for tool, cmd in (("nsys", ["nsys", "profile", "--trace=cuda,nvtx", "-o", str(Path(tmp) / "probe"), *program]),
                          ("ncu", ["ncu", "--section", "SpeedOfLight", "-c", "1", *program])):
            if shutil.which(tool) is None:
                out.append(Finding(f"{tool} probe", "note", "not on PATH: not run"))
                continue
            try:  # nsys is a wrapper: its children are stopped with it
                r = run_bounded(cmd, timeout_s, cwd=tmp, idle_s=PROBE_IDLE_S)
            except Hung:
                out.append(Finding(f"{tool} probe", "warn", f"stopped: it used no CPU for {PROBE_IDLE_S:g} s, waiting on "
                                   "something that never came (a prompt, a lock, a daemon)"))
                continue
            except subprocess.TimeoutExpired:
                out.append(Finding(f"{tool} probe", "warn", f"did not finish in {timeout_s:.0f} s"))
                continue
            except OSError as exc:  # on PATH but not startable (a broken install)
                out.append(Finding(f"{tool} probe", "warn", f"could not be started ({exc.strerror or exc})"))
                continue
            text = (r.stdout or "") + "\n" + (r.stderr or "")
            if COUNTER_ERROR in text:
                out.append(Finding(f"{tool} probe", "warn", f"{COUNTER_ERROR}: this user may not read GPU performance counters",
                                   "options nvidia NVreg_RestrictProfilingToAdminUsers=0 in /etc/modprobe.d/ and reboot; "
                                   "in a container, --cap-add=SYS_ADMIN"))
            elif r.returncode != 0:
                out.append(Finding(f"{tool} probe", "warn", f"exit status {r.returncode}: {last_line(text) or 'no output'}"))
            else:
                out.append(Finding(f"{tool} probe", "ok", "ran as this user and profiled the kernels"))
    return out


def exit_status(findings: list[Finding]) -> int:
    """1 when something stops the labs (a ``fail``), else 0."""
    return 1 if any(f.status == "fail" for f in findings) else 0
