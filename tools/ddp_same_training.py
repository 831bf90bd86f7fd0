"""The figures behind lab 04's same-training tolerances (helpers/thresholds.py, DDP_*).

Runs the lab's two-rank job (``communication.run(wrap=...)``, as the lab runs it) with a learner's DDP and with
comm hooks a learner may write, and prints each job's training record (``communication.training_record``): how far
the ranks' parameters land from plain DDP's after the job's steps, from each other, and how far PyTorch's own fp16
compression moves them (the reference of the hooks' kind). The right hooks land as far as that reference; a hook
that never divides by the world size moves the parameters twice as far, one that never copies its result back
leaves each rank on its own gradients.

    python tools/ddp_same_training.py [--steps 4] [--warmup 2]
"""

from __future__ import annotations

import argparse
import linecache
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HOOKS = '''
def fp16_hook(state, bucket):  # the lab's solution
    buffer = bucket.buffer()
    half = buffer.to(torch.float16).div_(dist.get_world_size())
    future = dist.all_reduce(half, async_op=True).get_future()

    def back(fut):
        buffer.copy_(fut.value()[0])
        return buffer
    return future.then(back)


def divide_then_cast_hook(state, bucket):  # right too: the division before the cast
    buffer = bucket.buffer()
    half = buffer.div(dist.get_world_size()).to(torch.float16)
    future = dist.all_reduce(half, async_op=True).get_future()

    def back(fut):
        buffer.copy_(fut.value()[0])
        return buffer
    return future.then(back)


def bf16_hook(state, bucket):  # right, in bf16
    buffer = bucket.buffer()
    half = buffer.to(torch.bfloat16).div_(dist.get_world_size())
    future = dist.all_reduce(half, async_op=True).get_future()

    def back(fut):
        buffer.copy_(fut.value()[0])
        return buffer
    return future.then(back)


def no_divide_hook(state, bucket):  # wrong: the sum, not the mean
    buffer = bucket.buffer()
    half = buffer.to(torch.float16)
    future = dist.all_reduce(half, async_op=True).get_future()

    def back(fut):
        buffer.copy_(fut.value()[0])
        return buffer
    return future.then(back)


def no_copy_back_hook(state, bucket):  # wrong: the all-reduced result never reaches the gradients
    buffer = bucket.buffer()
    half = buffer.to(torch.float16).div_(dist.get_world_size())
    return dist.all_reduce(half, async_op=True).get_future().then(lambda fut: buffer)


def divide_twice_hook(state, bucket):  # wrong: half the mean
    buffer = bucket.buffer()
    half = buffer.to(torch.float16).div_(dist.get_world_size()).div_(dist.get_world_size())
    future = dist.all_reduce(half, async_op=True).get_future()

    def back(fut):
        buffer.copy_(fut.value()[0])
        return buffer
    return future.then(back)


def plain(model):
    return DDP(model)


def bucket_1mb(model):
    return DDP(model, bucket_cap_mb=1)
'''
NAMES = ("fp16_hook", "divide_then_cast_hook", "bf16_hook", "no_divide_hook", "no_copy_back_hook", "divide_twice_hook")


def learner_functions() -> dict:
    """The hooks above as a notebook defines them (in ``__main__``, their source in the line cache)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    cell = HOOKS + "".join(f"\n\ndef wrap_{h}(model):\n    ddp = DDP(model)\n    ddp.register_comm_hook(None, {h})\n"
                           "    return ddp\n" for h in NAMES)
    filename = "<ddp-same-training>"
    linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
    ns = {"__name__": "__main__", "torch": torch, "dist": dist, "DDP": DDP}
    exec(compile(cell, filename, "exec"), ns)  # noqa: S102 - the tool's own learner code
    return ns


def main(argv: list[str] | None = None) -> int:
    from helpers.workloads import communication

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args(argv)
    ns = learner_functions()
    for name in ("plain", "bucket_1mb", *(f"wrap_{h}" for h in NAMES)):
        job = communication.run(wrap=ns[name], world_size=2, steps=args.steps, warmup=args.warmup, pin_cores=False,
                                threads=1)
        rec = job["training"]
        worst = {k: max(r.get(k, float("nan")) for r in rec) for k in ("from_plain_ddp", "ranks_apart", "moved")}
        half = rec[0].get("fp16_from_plain_ddp")
        print(f"{name:28s} {job['backend']} {rec[0]['steps']} steps: from plain DDP {worst['from_plain_ddp']:.2%}, "
              f"ranks apart {worst['ranks_apart']:.2%}, moved {worst['moved']:.3f}x"
              + (f", PyTorch's fp16 compression from plain DDP {half:.2%}" if half is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
