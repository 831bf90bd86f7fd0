"""Communication bottleneck and uneven load in data-parallel training (torch.distributed).

Runs as a real multi-process job: one process per rank (NCCL on GPUs, gloo on CPUs).

manual:      no DDP; after backward every gradient is all-reduced by hand, one at a time,
             so nothing overlaps and every tensor pays the collective's fixed cost.
ddp:         DistributedDataParallel with its default 25 MB buckets, all-reduced while
             backward is still running (overlap).
tiny_buckets: DDP with bucket_cap_mb=1: many small all-reduces.
bf16_hook:   DDP with a bf16 compression hook (fp16 on gloo): half the bytes on the wire.
no_sync:     gradient accumulation over ACCUM micro-batches with ``no_sync()``: one all-reduce
             per ACCUM micro-batches.
imbalance:   DDP, but the last rank gets IMBALANCE x the batch: the others wait for it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

from ..profiling import annotate, new_run_dir

VARIANTS = ("manual", "ddp", "tiny_buckets", "bf16_hook", "no_sync", "imbalance")
LAYERS, BATCH = 8, 64
ACCUM = 4
IMBALANCE = 4
#: NVLink multicast off in NCCL, PyTorch and NVSHMEM, in every rank (a shared-host safety rule).
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(width: int) -> nn.Module:
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(LAYERS)])


def _step_fn(variant: str, rank: int, world: int, device: torch.device, width: int):
    torch.manual_seed(0)
    model = make_model(width).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = BATCH * (IMBALANCE if variant == "imbalance" and rank == world - 1 else 1)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(batch, width, generator=g).to(device)
    y = torch.randn(batch, width, generator=g).to(device)
    if variant == "manual":
        def step(_: int) -> None:
            with annotate("forward"):
                loss = F.mse_loss(model(x), y)
            with annotate("backward"):
                loss.backward()
            with annotate("all-reduce gradients"):
                for p in model.parameters():  # one blocking collective per tensor, after backward
                    dist.all_reduce(p.grad)
                    p.grad /= world
            with annotate("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
        return step
    ids = [device.index] if device.type == "cuda" else None
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=1 if variant == "tiny_buckets" else 25)
    if variant == "bf16_hook":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        # bf16 all-reduce needs NCCL; on gloo the fp16 hook halves the bytes the same way.
        hook = default_hooks.bf16_compress_hook if dist.get_backend() == "nccl" else default_hooks.fp16_compress_hook
        ddp.register_comm_hook(dist.group.WORLD, hook)
    micro = ACCUM if variant == "no_sync" else 1
    xs, ys = x.chunk(micro), y.chunk(micro)

    def step(_: int) -> None:
        for k in range(micro):
            last = k == micro - 1
            with ddp.no_sync() if not last else contextlib.nullcontext():
                with annotate("forward"):
                    loss = F.mse_loss(ddp(xs[k]), ys[k]) / micro
                with annotate("backward"):
                    loss.backward()
        with annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
    return step


def _rank_main(rank: int, variant: str, world: int, port: int, steps: int, warmup: int, out_dir: str | None,
               result_dir: str) -> None:
    os.environ.update(SAFE_ENV)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= world
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        per_rank = max(1, len(cores) // world)
        if len(cores) >= world:  # each rank on cores of its own, as CPU jobs should be run
            os.sched_setaffinity(0, set(cores[rank * per_rank:(rank + 1) * per_rank]))
        torch.set_num_threads(per_rank)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    try:
        if os.environ.get("HELPERS_CRASH_RANK") == str(rank):  # fault injection for the tests
            raise RuntimeError(f"rank {rank} crashed on purpose")
        width = 4096 if cuda else 1024
        step = _step_fn(variant, rank, world, device, width)
        sync = torch.cuda.synchronize if cuda else (lambda: None)
        for i in range(warmup):
            step(i)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        for i in range(steps):
            step(i)
        sync()
        ms = (time.perf_counter() - t0) * 1e3 / steps
        trace_path = None
        if out_dir:
            from torch.profiler import ProfilerActivity, profile, schedule

            from ..profiling import quiet_profiler_logs, save_trace
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            dist.barrier()
            with quiet_profiler_logs(), \
                    profile(activities=acts, schedule=schedule(wait=0, warmup=1, active=min(steps, 5), repeat=1)) as prof:
                for i in range(1 + min(steps, 5)):
                    step(i)
                    prof.step()
                sync()
            trace_path = str(save_trace(prof, Path(out_dir) / f"rank{rank}.json.gz"))
        Path(result_dir, f"rank{rank}.json").write_text(json.dumps(
            {"rank": rank, "step_ms": ms, "device": str(device), "backend": dist.get_backend(), "trace": trace_path}))
    finally:
        dist.destroy_process_group()


def run(variant: str, world_size: int = 2, steps: int = 10, warmup: int = 3, profile_dir: str | None = None) -> dict:
    """Run the job in ``world_size`` fresh processes; returns per-rank step times (and the trace folder).

    Every rank is stopped if one fails or on Ctrl-C: no process is left behind.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    if steps < 1 or world_size < 1:
        raise ValueError("steps and world_size must be at least 1")
    out_dir = str(new_run_dir(profile_dir, f"{variant}-ws{world_size}")) if profile_dir else None
    result_dir = Path(out_dir) if out_dir else Path(new_run_dir(Path(os.environ.get("TMPDIR", "/tmp")) / "comm-results", variant))
    os.environ.update(SAFE_ENV)  # inherited by the spawned ranks too
    ctx = mp.start_processes(_rank_main, args=(variant, world_size, free_port(), steps, warmup, out_dir, str(result_dir)),
                             nprocs=world_size, join=False, start_method="spawn")
    try:
        while not ctx.join():
            pass
    except BaseException:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
        for p in ctx.processes:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        raise
    ranks = [json.loads((result_dir / f"rank{r}.json").read_text()) for r in range(world_size)]
    for r in range(world_size):
        (result_dir / f"rank{r}.json").unlink()
    return {"variant": variant, "world_size": world_size, "step_ms": max(r["step_ms"] for r in ranks),
            "per_rank_ms": [r["step_ms"] for r in ranks], "backend": ranks[0]["backend"], "trace_dir": out_dir}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=VARIANTS, default="manual")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile", metavar="DIR", help="write one trace per rank into a new folder under DIR")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.variant, args.world_size, args.steps, args.warmup, args.profile)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
