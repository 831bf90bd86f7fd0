"""The job's critical path across ranks (helpers.critical.job_path): which rank and which of its work bound each
step, and what a straggler running like the median rank, or a collective overlapped, would save; in memory and
through the ``ranks`` command's rank-by-rank reduction alike."""

from __future__ import annotations

import pytest
from synth import Ev, write_json

import helpers
from helpers import jobs

US = 1000
STEPS = 6
COMPUTE_MS = 20
STRAGGLER, STRAGGLER_MS = 17, 30
TRANSFER_MS = (1, 1, 1, 8)  # the fourth all-reduce of every step is slow (a planted slow collective)


def rank_events(rank: int, world: int) -> list[Ev]:
    """One data-parallel rank: a step's compute kernel, then four all-reduces (NCCL kernels on their own stream, each
    starting as the rank arrives and ending when the last rank has arrived plus its transfer), and a stream sync."""
    out, t, c = [], 0, 0
    for i in range(STEPS):
        s = t
        compute = STRAGGLER_MS if rank == STRAGGLER else COMPUTE_MS
        slowest = max(STRAGGLER_MS if world > STRAGGLER else COMPUTE_MS, COMPUTE_MS)
        c += 1
        out.append(Ev("runtime", "cudaLaunchKernel", t, t + 5 * US, correlation=c))
        out.append(Ev("kernel", "sm90_xmma_gemm_bf16bf16", t + 10 * US, t + (10 + compute * 1000) * US, correlation=c))
        arrive = t + (10 + compute * 1000) * US
        done = t + (10 + slowest * 1000) * US
        for k, ms in enumerate(TRANSFER_MS):
            c += 1
            out.append(Ev("runtime", "ncclKernelLaunch" if False else "cudaLaunchKernel", t + (6 + k) * US, t + (7 + k) * US,
                          correlation=c))
            done += ms * 1000 * US
            out.append(Ev("kernel", f"ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgs) #{k}", arrive, done,
                          correlation=c, stream=13))
            arrive = done
        c += 1
        out.append(Ev("runtime", "cudaStreamSynchronize", t + 12 * US, done + 5 * US, correlation=c))
        t = done + 20 * US
        out.append(Ev("annotation", f"ProfilerStep#{i}", s, t))
    return out


@pytest.fixture(scope="module")
def job64(tmp_path_factory):
    folder = tmp_path_factory.mktemp("job64")
    for r in range(64):
        write_json(rank_events(r, 64), folder / f"rank{r}.json", rank=r, world=64)
    return folder


def _check(jp: dict) -> None:
    bounds = jp["bounds"]
    kinds = [b["kind"] for b in bounds]
    assert kinds[:2] == ["straggler", "collective"], bounds
    straggler, slow = bounds[0], bounds[1]
    # the straggler bounds every step; were it the others' 20 ms, the job would save its 10 ms a step
    assert straggler["rank"] == STRAGGLER and straggler["steps_bound"] == STEPS
    assert straggler["saving_ms"] == pytest.approx(STRAGGLER_MS - COMPUTE_MS, abs=0.1)
    assert straggler["cause"] == "gemm"
    # the slow all-reduce (the fourth of each step) nothing overlaps: overlapping it saves its 8 ms transfer
    assert slow["index"] == 3 and "AllReduce" in slow["name"]
    assert slow["saving_ms"] == pytest.approx(TRANSFER_MS[3], abs=0.1)
    # the fast all-reduces save 1 ms each, the floor's side of noise for a 42 ms step (5%: 2.1 ms): not named
    assert len(bounds) == 2
    steps = jp["steps"]
    assert all(r["rank"] == STRAGGLER for r in steps)
    assert steps[0]["job_ms"] == pytest.approx(STRAGGLER_MS + sum(TRANSFER_MS), abs=0.2)


def test_a_64_rank_job_names_its_straggler_and_its_slow_collective_in_memory(job64):
    trace = helpers.load(job64)
    assert len(trace.ranks) == 64
    cp = helpers.critical_path(trace)
    _check(cp.job.to_dict())


def test_the_ranks_command_reduces_to_the_same_job_path(job64):
    report = jobs.analyse_job(job64, workers=1)
    _check(report["job_path"])
    assert report["stragglers"] == [STRAGGLER]
