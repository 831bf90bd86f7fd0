"""The blind-triage lab's unlabelled loops (lab 07): each case is a real loop; its id says nothing.

    python -m tools.triage_cases --variant t4 --steps 5 --warmup 10 --profile runs   (from the repository root)

Kept outside the installed package: which case is which loop is the lab's answer. What each case
really is, and what a correct reading names, is the instructors' key, docs/instructors/triage_key.json
(its ``recipe`` field says what each recording in data/ was made from); the package checks readings against its
sealed form (helpers/checks/_triage_key.py, tools/seal_answers.py). Several cases are decoys an eager
reader gets wrong: a GPU-bound loop with harmless syncs, pinned copies that already overlap compute,
two streams whose white space is not idle time, a loop held up by NumPy/Python work on the host, a
CUDA-Graph replay of many small kernels, two problems at once. No case is a course loop: each has a model, data
and host code of its own, so its event names match no labelled recording (tests/test_triage_names.py; the recordings
in data/ are of these shapes, made on the H200 on 2026-12-05: docs/instructors/07_blind_triage.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.profiling import annotate, require_gpu  # noqa: E402
from helpers.workloads import sync_stall  # noqa: E402
from helpers.workloads.common import StepFn, run_cli  # noqa: E402

VARIANTS = ("t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9", "t10")

HARMLESS_SYNC_EVERY = 4


def harmless_sync_step(device: torch.device) -> StepFn:
    model, opt, xs, ys = sync_stall.setup(device)
    log: list[float] = []

    def step(i: int) -> None:
        with annotate("forward"):
            loss = F.cross_entropy(model(xs[i % 8]), ys[i % 8])
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        if i % HARMLESS_SYNC_EVERY == 0:
            with annotate("log"):
                log.append(loss.item())  # waits for a GPU that is busy anyway: costs almost nothing

    return step


def two_stream_step(device: torch.device, n: int = 4096, chain: int = 6) -> StepFn:
    """Stream A and stream B take turns on dependent halves of the work; together they keep the GPU busy."""
    require_gpu("The two-stream triage case")
    g = torch.Generator(device="cpu").manual_seed(0)
    wa = (torch.randn(n, n, generator=g) / n**0.5).to(device)
    wb = (torch.randn(n, n, generator=g) / n**0.5).to(device)
    a, b = torch.cuda.Stream(device), torch.cuda.Stream(device)
    state = {"x": torch.randn(n, n, generator=g).to(device), "b_done": None}

    def step(i: int) -> None:
        a_done = torch.cuda.Event()
        with annotate("stream_a"), torch.cuda.stream(a):
            if state["b_done"] is not None:
                a.wait_event(state["b_done"])
            x = state["x"]
            for _ in range(chain):
                x = torch.tanh(x @ wa)
            a_done.record(a)
        b_done = torch.cuda.Event()
        with annotate("stream_b"), torch.cuda.stream(b):
            b.wait_event(a_done)
            for _ in range(chain):
                x = torch.tanh(x @ wb)
            b_done.record(b)
        state["x"], state["b_done"] = x, b_done

    return step


# --- the triage loops' own shapes ---------------------------------------------------------------
# Each case below shows the same problem (or look-alike) as a course loop, but with a model, data and host code of its
# own: a learner who matches a triage trace's event names (its ops, kernels and ranges) against the labelled
# recordings in data/ finds no loop with the same names (tests/test_triage_names.py). The generic phase ranges
# (data, forward, backward, optimizer) every loop has; the ranges a problem shows in have names of their own.


def _sizes(device: torch.device, gpu: tuple, cpu: tuple) -> tuple:
    return gpu if device.type == "cuda" else cpu


def _mlp(width: int, depth: int, act: type[nn.Module], norm: type[nn.Module] | None = None, out: int = 10) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), *([norm(width)] if norm else []), act()]
    return nn.Sequential(*layers, nn.Linear(width, out))


class Scorer:
    """Host-side evaluation code: a running ranking of recent scores (NumPy), then per-bucket Python counters."""

    def __init__(self, n: int, buckets: int) -> None:
        self.rng = np.random.default_rng(1)
        self.scores = self.rng.standard_normal(n).astype(np.float32)
        self.buckets = buckets
        self.ema: dict[int, float] = {}

    def update(self, i: int) -> None:
        self.scores[(i * 613) % self.scores.size:][:2048] *= np.float32(0.999)
        ranks = np.argsort(self.scores, kind="stable")
        top = self.scores[ranks[-self.buckets:]]
        for b in range(self.buckets):  # a plain Python loop, as hand-written evaluation code often is
            self.ema[b] = self.ema.get(b, 0.0) * 0.9 + float(top[b])


def host_code_step(device: torch.device, synced: bool) -> StepFn:
    """The GPU idles while the host runs its own NumPy/Python code after each step (``synced``: right after a
    ``loss.item()``, so the sync looks like the culprit and is not)."""
    width, depth, batch, n, buckets = _sizes(device, (2048, 4, 1024, 400_000, 3000), (128, 2, 64, 40_000, 300))
    torch.manual_seed(0)
    act, norm = (nn.Softplus, None) if synced else (nn.ELU, nn.BatchNorm1d)
    model = _mlp(width, depth, act, norm).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(4, batch, width, generator=g).to(device)
    ys = torch.randint(0, 10, (4, batch), generator=g).to(device)
    scorer = Scorer(n, buckets)
    seen: list[float] = []

    def step(i: int) -> None:
        with annotate("forward"):
            loss = F.nll_loss(F.log_softmax(model(xs[i % 4]), dim=1), ys[i % 4])
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        if synced:
            seen.append(loss.item())
        with annotate("summaries" if synced else "evaluate"):
            scorer.update(i)

    return step


class Waveforms(Dataset):
    """Synthetic 1-D signals that cost CPU time per sample (filtering in NumPy), like audio decoding."""

    def __init__(self, channels: int, length: int, passes: int, size: int = 1_000_000) -> None:
        self.channels, self.length, self.passes, self.size = channels, length, passes, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        sig = np.random.default_rng(index).standard_normal((self.channels, self.length)).astype(np.float32)
        kernel = np.array([0.25, 0.5, 0.25], dtype=np.float32)
        for _ in range(self.passes):  # a filter bank applied pass by pass, single-threaded
            sig = np.apply_along_axis(np.convolve, 1, sig, kernel, mode="same")
        return torch.from_numpy(np.ascontiguousarray(sig)), index % 10


class ConvSeq(nn.Module):
    """A small 1-D convolutional net: Conv1d, GroupNorm, SiLU, pooled over time."""

    def __init__(self, channels: int, width: int, depth: int = 3) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv1d(channels, width, 5, padding=2)]
        for _ in range(depth):
            layers += [nn.GroupNorm(4, width), nn.SiLU(), nn.Conv1d(width, width, 5, padding=2)]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).mean(dim=2))


def _batches(loader: DataLoader):
    while True:
        yield from loader


def starved_loader_step(device: torch.device, report_every_step: bool = False) -> StepFn:
    """Each batch is filtered in the training process (``num_workers=0``) while the GPU waits; with
    ``report_every_step`` the step also reads its loss back every step (a second, smaller problem)."""
    if device.type == "cpu":
        torch.set_num_threads(1)
    channels, length, passes, batch, width = _sizes(device, (8, 1024, 6, 32, 64), (4, 256, 3, 8, 8))
    torch.manual_seed(0)
    loader = DataLoader(Waveforms(channels, length, passes), batch_size=batch, shuffle=True, num_workers=0)
    if report_every_step:
        model: nn.Module = nn.GRU(channels, 4 * width, batch_first=True).to(device)
        head = nn.Linear(4 * width, 10).to(device)
        params = [*model.parameters(), *head.parameters()]
    else:
        model, head = ConvSeq(channels, width).to(device), None
        params = list(model.parameters())
    opt = torch.optim.RMSprop(params, lr=1e-3)
    batches = _batches(loader)
    report: list[str] = []

    def step(i: int) -> None:
        with annotate("data"):
            x, y = next(batches)
            x, y = x.to(device), y.to(device)
        with annotate("forward"):
            if head is not None:
                out, _ = model(x.transpose(1, 2))
                logits = head(out[:, -1])
            else:
                logits = model(x)
            loss = F.cross_entropy(logits, y)
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        if report_every_step:
            with annotate("report"):
                report.append(f"{i}: {loss.item():.4f}")
                if device.type == "cuda":
                    torch.cuda.synchronize()

    return step


class GatedBlocks(nn.Module):
    """Many small gated blocks (tanh x sigmoid, a residual): lots of ops, little math each."""

    def __init__(self, depth: int, width: int) -> None:
        super().__init__()
        self.a = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.b = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for a, b in zip(self.a, self.b):
            x = x + torch.tanh(a(x)) * torch.sigmoid(b(x))
        return self.head(x)


def many_small_ops_step(device: torch.device) -> StepFn:
    """Eager steps of many tiny kernels, each behind its own launch, with a for-loop optimizer."""
    torch.manual_seed(0)
    model = GatedBlocks(16, 48).to(device)
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3, foreach=False)
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(24, 48, generator=g).to(device), torch.randn(24, 1, generator=g).to(device)) for _ in range(8)]

    def step(i: int) -> None:
        x, y = data[i % 8]
        with annotate("forward"):
            loss = F.smooth_l1_loss(model(x), y)
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step


class HardBlocks(nn.Module):
    """Small blocks of Linear, an RMS scaling and Hardswish, for a CUDA Graph of many tiny kernels."""

    def __init__(self, depth: int, width: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for lin in self.blocks:
            h = lin(x)
            x = x + F.hardswish(h * torch.rsqrt(h.pow(2).mean(dim=1, keepdim=True) + 1e-6))
        return self.head(x)


def graph_replay_step(device: torch.device) -> StepFn:
    """Forward, backward and the optimizer captured once as a CUDA Graph and replayed each step: many small kernels,
    one launch."""
    require_gpu("The graph-replay triage case")
    torch.manual_seed(0)
    model = HardBlocks(20, 96).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True, foreach=True)
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(40, 96, generator=g).to(device), torch.randn(40, 1, generator=g).to(device)) for _ in range(8)]
    sx, sy = torch.zeros_like(data[0][0]), torch.zeros_like(data[0][1])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream, as graph capture requires
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            F.huber_loss(model(sx), sy).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        F.huber_loss(model(sx), sy).backward()
        opt.step()

    def step(i: int) -> None:
        with annotate("data"):
            sx.copy_(data[i % 8][0])
            sy.copy_(data[i % 8][1])
        with annotate("replay"):
            graph.replay()

    return step


def _copy_batches(mb: int, pool: int = 4, pinned: bool = False) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    out = [torch.rand(mb * 2**20 // 4 // 512, 512, generator=g) for _ in range(pool)]
    return [b.pin_memory() for b in out] if pinned else out


def copies_step(device: torch.device, overlapped: bool) -> StepFn:
    """Host batches copied to the GPU each step, then a batched-matmul and softmax over them. ``overlapped``:
    pinned copies on a side stream one batch ahead, under the compute (a look-alike); else pageable and blocking."""
    require_gpu("The copy triage cases")
    batches = _copy_batches(48, pinned=overlapped)
    w = torch.randn(512, 512, device=device) / 23
    if overlapped:
        stream = torch.cuda.Stream(device)

        def start(i: int):
            with torch.cuda.stream(stream):
                x = batches[i % len(batches)].to(device, non_blocking=True)
                done = torch.cuda.Event()
                done.record(stream)
            return x, done

        pending = {"next": start(0)}

        def get(i: int) -> torch.Tensor:
            x, done = pending["next"]
            torch.cuda.current_stream(device).wait_event(done)
            x.record_stream(torch.cuda.current_stream(device))
            pending["next"] = start(i + 1)
            return x
    else:
        def get(i: int) -> torch.Tensor:
            return batches[i % len(batches)].to(device)

    kept: list[torch.Tensor] = []

    def step(i: int) -> None:
        with annotate("data"):
            x = get(i)
        with annotate("forward"):
            h = x.view(-1, 64, 512)
            for _ in range(3 if overlapped else 2):
                h = torch.softmax(torch.bmm(h, w.expand(h.shape[0], 512, 512)), dim=-1)
            kept.append(h.mean())
        if len(kept) > 8:
            kept.pop(0)

    return step


#: Which course loop each case's first recording (2026-12-02) was made from, before the cases had shapes of their own;
#: the recordings of 2026-12-05 replaced them, and no longer match these loops' names (tests/test_triage_names.py).
RECORDED_FROM = {
    "t2": "host_bound:broken", "t3": "launch_overhead:graphs", "t4": "data_stall:broken", "t6": "h2d_copy:fixed",
    "t7": "mystery:broken", "t8": "launch_overhead:broken", "t9": "h2d_copy:broken", "t10": "host_bound:synced",
}
CASES = {
    "t1": harmless_sync_step,
    "t2": lambda device: host_code_step(device, synced=False),
    "t3": graph_replay_step,
    "t4": starved_loader_step,
    "t5": two_stream_step,
    "t6": lambda device: copies_step(device, overlapped=True),
    "t7": lambda device: starved_loader_step(device, report_every_step=True),
    "t8": many_small_ops_step,
    "t9": lambda device: copies_step(device, overlapped=False),
    "t10": lambda device: host_code_step(device, synced=True),
}
#: The cases that run on a CPU (the others need CUDA streams, graphs or device copies).
CPU_CASES = ("t1", "t2", "t4", "t7", "t8", "t10")


def make_step(variant: str, device: torch.device) -> StepFn:
    if variant not in CASES:
        raise ValueError(f"unknown triage case {variant!r}; choose from {VARIANTS}")
    return CASES[variant](device)


if __name__ == "__main__":
    sys.exit(run_cli(__doc__.splitlines()[0], VARIANTS, make_step, default_steps=5))
