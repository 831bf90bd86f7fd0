"""What the machine a training loop runs on is set to: the settings that change a timeline without a line of code.

:func:`snapshot` reads this machine: the environment variables that change how PyTorch and CUDA behave, the
cores this process may run on and the threads torch will use, the free space in ``/dev/shm`` (where DataLoader
workers hand batches to the training process), and, with an NVIDIA GPU and ``nvidia-smi``, its SM clock, the
clock's ceiling and why the clock is held below it. The result is a plain dict (documented below) that lab 11's
checklist reads; nothing here judges it.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from .procs import run_bounded

#: Environment variables worth seeing before a timeline is trusted.
VARIABLES = ("CUDA_LAUNCH_BLOCKING", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF",
             "CUDA_VISIBLE_DEVICES", "TORCH_NCCL_BLOCKING_WAIT", "NCCL_DEBUG", "TORCH_LOGS")
#: NVML's reasons a GPU's clock is held below its ceiling (the bits of nvidia-smi's clocks_event_reasons.active).
CLOCK_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}


def clock_reasons(mask: int) -> list[str]:
    """The names of the reasons set in an NVML clock-event bit mask."""
    return [name for bit, name in CLOCK_REASONS.items() if mask & bit]


def _gpu() -> dict | None:
    if not shutil.which("nvidia-smi"):
        return None
    for field in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):  # the name changed in 2023
        try:  # bounded: a hung nvidia-smi, or a child of it holding its pipe, stops here (subprocess.run waits)
            res = run_bounded(["nvidia-smi", "-i", "0", f"--query-gpu=name,clocks.sm,clocks.max.sm,{field}",
                               "--format=csv,noheader,nounits"], 20, idle_s=5)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if res.returncode == 0 and res.stdout.strip():
            try:  # (anything but the four fields asked for is not an answer)
                name, sm, max_sm, mask = [p.strip() for p in res.stdout.strip().splitlines()[0].split(",")]
                return {"name": name, "sm_clock_mhz": int(float(sm)), "max_sm_clock_mhz": int(float(max_sm)),
                        "clock_reasons": clock_reasons(int(mask, 16))}
            except (ValueError, OverflowError):
                return None
    return None


def snapshot(num_workers: int = 0, prefetch_factor: int = 2, batch_bytes: int = 0, processes_per_node: int = 1) -> dict:
    """This machine, now. The loader's plan (``num_workers``, ``prefetch_factor``, ``batch_bytes`` of one batch) and
    the training processes on this machine (``processes_per_node``: ranks) are the caller's, since no file says them.

    Returns ``{"env": {variable: value} (only those set), "cores": cores this process may run on, "torch_threads":
    torch.get_num_threads(), "processes_per_node", "dev_shm_free_bytes": free bytes in /dev/shm (None where there is
    none), "loader": {"num_workers", "prefetch_factor", "batch_bytes"}, "gpu": None or {"name", "sm_clock_mhz",
    "max_sm_clock_mhz", "clock_reasons": [names]}}``.
    """
    import torch

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cores = os.cpu_count() or 1
    try:
        shm = shutil.disk_usage("/dev/shm").free
    except OSError:
        shm = None
    return {"env": {k: os.environ[k] for k in VARIABLES if k in os.environ}, "cores": cores,
            "torch_threads": torch.get_num_threads(), "processes_per_node": int(processes_per_node),
            "dev_shm_free_bytes": shm,
            "loader": {"num_workers": int(num_workers), "prefetch_factor": int(prefetch_factor),
                       "batch_bytes": int(batch_bytes)},
            "gpu": _gpu() if torch.cuda.is_available() else None}
