"""Fragment the CUDA caching allocator on purpose, and see what ``expandable_segments`` changes (GPU only).

The allocator keeps the memory it got from CUDA in segments and cuts tensors out of them. Freed blocks stay in
their segment for reuse, but a block can serve only a request no larger than itself: after many tensors of one size
are freed, a larger request finds no block big enough and the allocator asks CUDA for a new segment, while the freed
memory sits unused (reserved, not allocated). With ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` a segment
is a range of virtual addresses that grows by mapping more physical pages, so freed pages at its end can be unmapped
and mapped again where a larger tensor needs them.

    python -m helpers.workloads.fragmentation              # one JSON line: reserved and allocated at the end
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python -m helpers.workloads.fragmentation

The setting is read when CUDA starts, so each run is its own process (:func:`compare` runs both).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

MiB = 2**20
#: The pattern: a buffer that grows step by step (a batch or a sequence getting longer): 16 sizes from 64 to 184 MiB,
#: each allocated and freed before the next. A freed block can serve only a request no larger than itself, so with the
#: default allocator every new size takes a new segment and the old ones stay cached; an expandable segment grows.
SIZES_MB = tuple(64 + 8 * k for k in range(16))


def run() -> dict:
    """Run the pattern in this process: the largest size, and the reserved and allocated MiB at the end."""
    import torch

    if not torch.cuda.is_available():
        from ..errors import NoGPUError

        raise NoGPUError("the fragmentation pattern needs a CUDA GPU (the caching allocator is CUDA's)")
    torch.cuda.empty_cache()
    for mb in SIZES_MB:
        buffer = torch.empty(mb * MiB, dtype=torch.uint8, device="cuda")
        buffer.fill_(1)
        del buffer
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    return {"expandable_segments": "expandable_segments:true" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").lower(),
            "largest_mb": max(SIZES_MB), "reserved_mib": round(torch.cuda.memory_reserved() / MiB, 1),
            "allocated_mib": round(torch.cuda.memory_allocated() / MiB, 1),
            "cudamalloc_calls": int(stats.get("num_device_alloc", 0)),
            "device": torch.cuda.get_device_name(0), "torch": torch.__version__}


def compare(timeout_s: float = 120) -> list[dict]:
    """The pattern once with the default allocator and once with expandable segments, each in a fresh process."""
    out = []
    for conf in ("", "expandable_segments:True"):
        env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        res = subprocess.run([sys.executable, "-m", "helpers.workloads.fragmentation"], capture_output=True, text=True,
                             env=env, timeout=timeout_s)
        line = next((x for x in res.stdout.splitlines() if x.startswith("{")), None)
        if line is None:
            raise RuntimeError(f"the fragmentation run failed: {res.stderr.strip()[-300:]}")
        out.append(json.loads(line))
    return out


def main() -> int:
    from ..errors import NoGPUError

    try:
        print(json.dumps(run()))
    except NoGPUError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
