"""Make a cloud notebook's Python (Colab, Kaggle, a JupyterHub image) ready for the labs, keeping what it has.

    python tools/cloud_setup.py            # install what is missing, then print the doctor's report
    python tools/cloud_setup.py --dry-run  # say what it would install and keep, change nothing

Each lab's first code cell runs this after cloning the course, in a notebook opened on its own (README, "In a cloud
notebook"). It installs only what the labs need at run time and the image lacks, at the versions
``requirements.txt`` pins, and never replaces a package the image already has: above all not its torch, which
there is a CUDA build matched to the machine's driver (``pip install -r requirements.txt`` would swap it for
PyPI's 2.7 GB build of another CUDA). The development tools of ``requirements.txt`` (pytest, ruff, ...) and
JupyterLab (the notebook service is the host's) are left out. Then the course's own package is installed
editable without dependencies, so worker processes and ``python -m helpers`` find it, and the doctor reports
what the machine gives: the track, the GPU and its capability, nsys and ncu.

Standalone on purpose (the course's package is not importable before it runs): standard library only.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: What the labs import at run time (distribution names as in requirements.txt); the rest of requirements.txt is
#: for developing the course (tests, lint, a Dask cluster for ``ranks --scheduler``) or is the notebook service.
RUNTIME = ("torch", "numpy", "pandas", "matplotlib", "nvtx", "orjson", "msgspec", "ipykernel", "anywidget",
           "nbclient", "nbformat")
#: PyTorch's index of CPU-only wheels, for a machine without an NVIDIA GPU that has no torch at all.
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PIN = re.compile(r"^\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*==\s*([^\s;#]+)")


def pins(requirements: Path) -> dict[str, str]:
    """``{name: version}`` for each ``name==version`` line of a requirements file (names lower-cased)."""
    out = {}
    for line in requirements.read_text(encoding="utf-8").splitlines():
        m = PIN.match(line)
        if m:
            out[m.group(1).lower()] = m.group(3)
    return out


def installed(name: str) -> str | None:
    """The installed version of distribution ``name``, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def has_nvidia_gpu() -> bool:
    """An NVIDIA driver is on this machine (its tool answers, or its device nodes exist)."""
    return shutil.which("nvidia-smi") is not None or os.path.exists("/dev/nvidiactl")


def plan(wanted: dict[str, str], have: dict[str, str | None], gpu: bool) -> dict[str, list]:
    """What to do for each run-time package: ``keep`` [(name, installed version)], ``install`` [pip argument],
    ``torch_index`` (an index URL for torch, or None). A package the image has is kept whatever its version."""
    keep, install = [], []
    for name in RUNTIME:
        if have.get(name):
            keep.append((name, have[name]))
        elif name in wanted:
            install.append(f"{name}=={wanted[name]}")
        else:
            install.append(name)
    torch_missing = any(a.startswith("torch==") or a == "torch" for a in install)
    return {"keep": keep, "install": install, "torch_index": CPU_INDEX if torch_missing and not gpu else None}


def pip(args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the plan, install nothing")
    parser.add_argument("--no-doctor", action="store_true", help="do not run the doctor afterwards")
    args = parser.parse_args(argv)
    start = time.monotonic()
    wanted = pins(ROOT / "requirements.txt")
    todo = plan(wanted, {n: installed(n) for n in RUNTIME}, has_nvidia_gpu())
    print("keeps: " + (", ".join(f"{n} {v}" for n, v in todo["keep"]) or "nothing"))
    print("installs: " + (" ".join(todo["install"]) or "nothing") + (f" (torch from {todo['torch_index']})"
                                                                        if todo["torch_index"] else ""))
    if args.dry_run:
        return 0
    torch_arg = [a for a in todo["install"] if a.split("==")[0] == "torch"]
    others = [a for a in todo["install"] if a not in torch_arg]
    if torch_arg:
        pip(torch_arg + (["--index-url", todo["torch_index"]] if todo["torch_index"] else []))
    if others:
        pip(others)
    if installed("gpu-timeline-labs") is None:
        pip(["--no-deps", "--editable", str(ROOT)])  # the course's helpers, importable by worker processes
    print(f"setup took {time.monotonic() - start:.0f} s")
    if not args.no_doctor:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
        subprocess.run([sys.executable, "-m", "helpers", "doctor", str(ROOT / "labs")], cwd=ROOT, env=env, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
