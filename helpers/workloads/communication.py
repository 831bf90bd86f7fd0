"""Data-parallel training across ranks (torch.distributed): the course's two-rank jobs.

Runs as a real multi-process job: one process per rank (NCCL when the machine has a GPU per rank,
else gloo on CPU tensors, one core per rank where the machine has them).

The variants, for recording (``tools/record_traces.py``):

manual:       no DDP; after backward every gradient is all-reduced by hand, one call per tensor.
ddp:          DistributedDataParallel with its default 25 MB buckets.
tiny_buckets: DDP with bucket_cap_mb=1.
fp16_hook:    DDP with PyTorch's fp16 compression hook (``fp16_compress_hook``) on every backend: the hook
              Exercise 4 of lab 04 has the learner write. (gloo all-reduces bf16 too in torch 2.13; the
              course records fp16, the dtype of the exercise.)
no_sync:      the same per-rank batch in ACCUM micro-batches, ``no_sync()`` on all but the last:
              still one all-reduce a step, so it only adds work here (it pays off when the
              micro-batches are what fits in memory and the accumulation replaces more steps).
imbalance:    DDP, but the last rank gets IMBALANCE x the batch.

The lab's second job is DDP on one global batch split by :func:`split_rows` (``run(shard=split_rows)``).

The learner's own code runs in the ranks too: ``run(wrap=fn, **options)`` trains the same model on
``wrap(model, **options)`` (their DDP configuration), ``run(shard=fn)`` splits the global batch with
``fn(n_rows, rank, world) -> (start, stop)``. Spawned ranks cannot unpickle a function defined in a
notebook, so :func:`portable` sends its source (and what it uses from the notebook) and each rank
rebuilds it.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import dis
import importlib
import inspect
import json
import linecache
import math
import os
import pickle
import socket
import sys
import textwrap
import time
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

from .. import stamps
from ..profiling import _nvtx, annotate, new_run_dir
from .common import count_at_least

VARIANTS = ("manual", "ddp", "tiny_buckets", "fp16_hook", "no_sync", "imbalance")
#: PyTorch's own compression hooks (``ddp_comm_hooks.default_hooks``): what lab 04's Exercise 4 has the learner write
#: (the course's ``fp16_hook`` variant records ``fp16_compress_hook``). A learner's job that calls one runs the
#: reference, not a hook of its own; the rank notes it in its training record.
REFERENCE_HOOKS = ("fp16_compress_hook", "bf16_compress_hook", "_compress_hook")
LAYERS, BATCH = 8, 64
ACCUM = 4
IMBALANCE = 4
#: NVLink multicast off in NCCL, PyTorch and NVSHMEM, in every rank (a shared-host safety rule).
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


#: The NVTX range each marked collective gets: the name PyTorch's profiler gives gloo's own ranges,
#: so both trace formats class it the same way (helpers.model.is_host_collective).
COLLECTIVE_RANGE = "gloo:all_reduce"


def marked_hook(inner: Callable) -> Callable:
    """A DDP comm hook that runs ``inner`` inside an NVTX start/end range from issue to completion.

    Nsight Systems cannot see gloo's collectives (no CUDA, and PyTorch's own gloo ranges go only to
    its profiler). A start/end range is not tied to a thread: it opens when DDP hands a bucket to the
    hook and closes on whichever thread completes the all-reduce, so the export holds the same
    interval the PyTorch profiler draws on gloo's thread.
    """
    # No annotations: DDP compares them with the real types, and this module's are strings.
    def hook(state, bucket):  # noqa: ANN001, ANN202
        handle = _nvtx.start_range(COLLECTIVE_RANGE)

        def done(fut: torch.futures.Future) -> Any:
            _nvtx.end_range(handle)
            return fut.value()

        return inner(state, bucket).then(done)
    return hook


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(width: int) -> nn.Module:
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(LAYERS)])


#: Rows per rank in the second job's global batch, and the world size its split was written for.
SHARD_ROWS, SPLIT_FOR_WORLD = 288, 16


def global_rows(world: int) -> int:
    """Rows in the second job's global batch: SHARD_ROWS for each rank."""
    return SHARD_ROWS * world


def split_rows(n: int, rank: int, world: int) -> tuple[int, int]:
    """The rows of the global batch this rank trains on (the second job's split of its batch)."""
    per_rank = n // SPLIT_FOR_WORLD  # the shard size of the 16-rank job this code came from
    start = rank * per_rank
    stop = n if rank == world - 1 else start + per_rank
    return start, stop


def manual_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, opt: torch.optim.Optimizer, world: int,
                mark: bool = False):
    """The first job's training step: no DDP; the gradients are averaged by hand after backward."""
    def step(_: int) -> None:
        with annotate("forward"):
            loss = F.mse_loss(model(x), y)
        with annotate("backward"):
            loss.backward()
        with annotate("all-reduce gradients"):
            for p in model.parameters():
                if mark:
                    handle = _nvtx.start_range(COLLECTIVE_RANGE)
                dist.all_reduce(p.grad)
                if mark:
                    _nvtx.end_range(handle)
                p.grad /= world
        with annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
    return step


def learner_step(module: nn.Module, x: torch.Tensor, y: torch.Tensor, opt: torch.optim.Optimizer):
    """The step ``run(wrap=...)`` and ``run(shard=...)`` train with: forward, backward, optimizer on the
    module ``wrap`` returned, no all-reduce of its own."""
    def step(_: int) -> None:
        with annotate("forward"):
            loss = F.mse_loss(module(x), y)
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
    return step


def _batch(rank: int, world: int, device: torch.device, width: int, rows: tuple[int, int] | None):
    if rows is None:  # a batch of BATCH rows of the rank's own
        g = torch.Generator().manual_seed(rank)
        return torch.randn(BATCH, width, generator=g).to(device), torch.randn(BATCH, width, generator=g).to(device)
    g = torch.Generator().manual_seed(1234)  # one global batch, the same on every rank
    n = global_rows(world)
    xs, ys = torch.randn(n, width, generator=g), torch.randn(n, width, generator=g)
    return xs[rows[0]:rows[1]].to(device), ys[rows[0]:rows[1]].to(device)


def _rows_of(value: Any, n: int, who: str) -> tuple[int, int]:
    """(start, stop) from what a shard function returned: a pair, a range or a slice of [0, n)."""
    if isinstance(value, (range, slice)):
        if value.step not in (None, 1):
            raise ValueError(f"{who} returned {value!r}: give a contiguous stretch of rows, (start, stop)")
        value = (value.start or 0, n if value.stop is None else value.stop)
    try:
        start, stop = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{who} returned {value!r}; it must return (start, stop), the rows of the global batch "
                         "this rank trains on") from None
    if not 0 <= start <= stop <= n:
        raise ValueError(f"{who} returned ({start}, {stop}); rows must lie in 0..{n} with start <= stop")
    return start, stop


def _step_fn(variant: str, rank: int, world: int, device: torch.device, width: int,
             learner: dict[str, Any] | None = None, mark: bool = False):
    torch.manual_seed(0)
    model = make_model(width).to(device)
    ids = [device.index] if device.type == "cuda" else None
    if learner:
        rows = None
        if learner.get("shard"):
            n = global_rows(world)
            rows = _rows_of(materialize(learner["shard"])(n, rank, world), n, learner["shard"]["name"])
        x, y = _batch(rank, world, device, width, rows)
        if learner.get("wrap"):
            module = materialize(learner["wrap"])(model, **learner.get("options", {}))
            if not isinstance(module, nn.Module):
                raise TypeError(f"{learner['wrap']['name']} returned {type(module).__name__}; return the module "
                                "the step should call (the model, wrapped)")
        else:
            module = nn.parallel.DistributedDataParallel(model, device_ids=ids)
        opt = torch.optim.SGD(module.parameters(), lr=1e-3)
        step = learner_step(module, x, y, opt)
        if rows is None:
            step.trained = (model, rows, module)  # type: ignore[attr-defined] # what training_record compares
            return step
        label = f"rows {rows[0]}:{rows[1]} of {global_rows(world)}"

        def step_with_rows(i: int) -> None:  # the rows show in the trace: the checks read them there
            with annotate(label):
                step(i)
        step_with_rows.trained = (model, rows, module)  # type: ignore[attr-defined]
        return step_with_rows
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = BATCH * (IMBALANCE if variant == "imbalance" and rank == world - 1 else 1)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(batch, width, generator=g).to(device)
    y = torch.randn(batch, width, generator=g).to(device)
    if variant == "manual":
        return manual_step(model, x, y, opt, world, mark)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=1 if variant == "tiny_buckets" else 25)
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    hook = None
    if variant == "fp16_hook":
        hook = default_hooks.fp16_compress_hook  # half the bytes on the wire, the same on NCCL and gloo
    if mark:  # DDP's built-in all-reduce, as a hook, so that each bucket's all-reduce can be marked
        hook = marked_hook(hook or default_hooks.allreduce_hook)
    if hook is not None:
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


def rank_table(trace) -> Any:
    """Per rank, ms a step: the step, its forward and backward ranges, compute (the rank's PyTorch ops),
    all-reduce time, and all-reduce time with no compute beside it (exposed)."""
    import pandas as pd

    from .. import metrics

    cs = metrics.comm_stats(trace).groupby("rank")[["window_us", "compute_us", "collective_us", "exposed_us"]].mean() / 1e3
    ev = trace.events
    ranges = ev[(ev["kind"] == "annotation") & ev["name"].isin(("forward", "backward")) & (ev["step"] >= 0)]
    steps = trace.steps.groupby("rank").size()
    phases = ranges.groupby(["rank", "name"])["dur_us"].sum().unstack(fill_value=0.0).div(steps, axis=0) / 1e3
    table = pd.DataFrame({"step": cs["window_us"], "forward": phases.get("forward"), "backward": phases.get("backward"),
                          "compute": cs["compute_us"], "all-reduce": cs["collective_us"], "exposed": cs["exposed_us"]})
    table.index.name = "rank"
    return table


# --- the learner's functions, sent to spawned ranks as source ----------------------------------
_SIMPLE = (int, float, complex, str, bytes, bool, type(None))


def _loaded_globals(code: types.CodeType) -> set[str]:
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _loaded_globals(const)
    return names


def _importable(obj: Any) -> tuple[str, str] | None:
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not mod or not qual or mod == "__main__" or "<" in qual:
        return None
    try:
        target: Any = importlib.import_module(mod)
        for part in qual.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError):
        return None
    return (mod, qual) if target is obj else None


def portable(fn: Callable) -> dict[str, Any]:
    """``fn`` as something a spawned rank can rebuild: its source, the sources of the notebook functions
    it calls, and the modules and values they use. Raises ValueError naming what cannot be sent."""
    spec: dict[str, Any] = {"name": getattr(fn, "__name__", repr(fn)), "sources": {}, "globals": {}}
    _collect(fn, spec)
    return spec


def _collect(fn: Callable, spec: dict[str, Any]) -> None:
    if not inspect.isfunction(fn):
        raise ValueError(f"{fn!r} is not a function: pass a function defined with def")
    name = fn.__name__
    if name == "<lambda>" or "<locals>" in fn.__qualname__ or fn.__closure__:
        raise ValueError(f"{fn.__qualname__} cannot be sent to the ranks: define it with def at the top level of a cell")
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        raise ValueError(f"the source of {name} cannot be found: define it with def in a notebook cell or a file") from None
    spec["sources"][name] = None  # being collected: a function that calls this one back stops here
    needed = _loaded_globals(fn.__code__)
    optional = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for g in sorted(needed | optional):
        if g == name or g in spec["globals"] or g in spec["sources"]:
            continue
        if g not in fn.__globals__:
            if g in needed and not hasattr(builtins, g):
                raise ValueError(f"{name} uses {g!r}, which is not defined yet: run the cell that defines it first")
            continue
        value = fn.__globals__[g]
        if inspect.isfunction(value) and value.__globals__ is fn.__globals__ and _importable(value) is None:
            _collect(value, spec)  # another function of the notebook: its source travels too
            continue
        try:
            spec["globals"][g] = _portable_value(value)
        except ValueError as exc:
            if g in needed:
                raise ValueError(f"{name} uses {g!r} ({type(value).__name__}) from the notebook, which the rank "
                                 f"processes cannot receive ({exc}): create it inside {name}, or pass it as an option") from None
    del spec["sources"][name]
    spec["sources"][name] = source  # after the functions it uses


def _portable_value(value: Any) -> tuple[str, Any]:
    if isinstance(value, types.ModuleType):
        return ("module", value.__name__)
    ref = _importable(value)
    if ref is not None:
        return ("import", ref)
    if isinstance(value, (*_SIMPLE, tuple, list, dict, frozenset, set)):
        try:
            return ("value", pickle.dumps(value))
        except Exception as exc:  # noqa: BLE001 - any pickling failure means it cannot travel
            raise ValueError(str(exc)) from None
    raise ValueError("only modules, importable functions and classes, other functions of the notebook and plain "
                     "values travel")


def materialize(spec: dict[str, Any]) -> Callable:
    """Rebuild a function :func:`portable` described (in the rank process)."""
    ns: dict[str, Any] = {"__name__": "__learner__", "__builtins__": builtins}
    for g, (kind, payload) in spec["globals"].items():
        if kind == "module":
            ns[g] = importlib.import_module(payload)
        elif kind == "import":
            target: Any = importlib.import_module(payload[0])
            for part in payload[1].split("."):
                target = getattr(target, part)
            ns[g] = target
        else:
            ns[g] = pickle.loads(payload)
    for fname, src in spec["sources"].items():
        filename = f"<your {fname}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        exec(compile(src, filename, "exec"), ns)  # noqa: S102 - the learner's own code, in their own rank
    return ns[spec["name"]]


# --- what a learner's job trained ----------------------------------------------------------------


class _Tripwires:
    """In a fresh rank, before the learner's functions are rebuilt: each of :data:`REFERENCE_HOOKS` made to note its
    use while ``armed`` and run as before, by giving the function object itself new code (so a reference held
    anywhere trips it: an import, an attribute, ``DDPCommHookType``'s partials), and DDP's C++ built-in hooks
    (``_register_builtin_comm_hook``) noted the same way. ``originals[name]``: a copy of the hook, for the course's
    own reference run."""

    def __init__(self) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        self.used: list[str] = []
        self.armed = True
        self.originals: dict[str, Callable] = {}
        for name in REFERENCE_HOOKS:
            fn = getattr(default_hooks, name, None)
            if not isinstance(fn, types.FunctionType) or fn.__closure__:
                continue
            copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
            copy.__kwdefaults__ = fn.__kwdefaults__
            self.originals[name] = copy
            key = f"_course_tripwire_{name}"
            fn.__globals__[key] = self._noting(f"default_hooks.{name}", copy)
            code = fn.__code__  # the same parameters (DDP reads the hook's signature), its defaults kept as they are
            pos = list(code.co_varnames[:code.co_argcount])
            kw = list(code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount])
            params = ", ".join(pos + (["*"] + kw if kw else []))
            call = ", ".join(pos + [f"{k}={k}" for k in kw])
            template = compile(f"def {name}({params}):\n    return {key}({call})\n", "<tripwire>", "exec")
            fn.__code__ = next(c for c in template.co_consts if isinstance(c, types.CodeType))
        ddp = nn.parallel.DistributedDataParallel
        builtin = getattr(ddp, "_register_builtin_comm_hook", None)
        if builtin is not None:
            ddp._register_builtin_comm_hook = self._noting("DistributedDataParallel._register_builtin_comm_hook", builtin)

    def _noting(self, label: str, run: Callable) -> Callable:
        def noted(*args: Any, **kwargs: Any) -> Any:
            if self.armed and label not in self.used:
                self.used.append(label)
            return run(*args, **kwargs)
        return noted


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])


def _reference_params(rank: int, world: int, device: torch.device, width: int, rows: tuple[int, int] | None,
                      steps: int, hook: Callable | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(initial, trained) parameters of the course's DDP job: the model from seed 0 in ``DistributedDataParallel``
    with its defaults (and ``hook`` registered), ``steps`` steps of learner_step's work on the rank's batch."""
    torch.manual_seed(0)
    model = make_model(width).to(device)
    start = _flat(model)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x, y = _batch(rank, world, device, width, rows)
    for _ in range(steps):  # learner_step's work, without its ranges (they would show in an Nsight capture)
        F.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return start, _flat(model)


def training_record(step: Callable, rank: int, world: int, device: torch.device, width: int, steps: int,
                    trips: _Tripwires | None = None) -> dict[str, Any]:
    """What a learner's job trained, next to plain DDP, in every rank after ``steps`` steps (call it in all ranks
    at once). The reference: the same model from the same seed in ``DistributedDataParallel`` with its defaults,
    trained the same steps on the rank's batch (a split job's: the rows of an even split). Figures relative to how
    far the reference moved the parameters: ``from_plain_ddp`` (this rank's parameters from the reference's),
    ``ranks_apart`` (from rank 0's), ``moved`` (how far this rank's moved). A job whose module has a comm hook also
    gets the reference of its kind, PyTorch's ``fp16_compress_hook``: ``fp16_from_plain_ddp``, how far half-precision
    gradients alone move the parameters from plain DDP's. ``course_code``: PyTorch's own hooks the learner's code ran
    (:data:`REFERENCE_HOOKS`)."""
    model, rows, module = step.trained  # type: ignore[attr-defined]
    mine = _flat(model)
    if trips is not None:
        trips.armed = False  # the references below run PyTorch's hook: not the learner's use of it
    n = global_rows(world)
    even = None if rows is None else (rank * n // world, (rank + 1) * n // world)
    start, ref = _reference_params(rank, world, device, width, even, steps)
    first = mine.clone()
    dist.broadcast(first, 0)
    scale = float((ref - start).norm()) or 1.0
    out = {"steps": steps, "from_plain_ddp": float((mine - ref).norm()) / scale,
           "ranks_apart": float((mine - first).norm()) / scale, "moved": float((mine - start).norm()) / scale,
           "course_code": list(trips.used) if trips is not None else []}
    if getattr(module, "_comm_hooks", None):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hook = trips.originals.get("fp16_compress_hook") if trips is not None else default_hooks.fp16_compress_hook
        _, half = _reference_params(rank, world, device, width, even, steps, hook)
        out["fp16_from_plain_ddp"] = float((half - ref).norm()) / scale
    return out


# --- the job -------------------------------------------------------------------------------------
def _error_record(exc: BaseException) -> dict[str, Any]:
    rec: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc), "at": time.time(),
                           "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))}
    if type(exc).__name__ == "ExerciseNotDone":
        rec.update(number=getattr(exc, "number", 0), todo=getattr(exc, "todo", "your code"), where=getattr(exc, "where", ""))
    else:
        try:
            rec["pickled"] = pickle.dumps(exc).hex()
            pickle.loads(bytes.fromhex(rec["pickled"]))
        except Exception:  # noqa: BLE001 - an exception that does not survive pickling travels as text
            rec.pop("pickled", None)
    return rec


def _rank_main(rank: int, variant: str, world: int, port: int, steps: int, warmup: int, out_dir: str | None,
               result_dir: str, learner: dict[str, Any] | None = None, pin_cores: bool | int = True,
               mark: bool = False, nvtx_steps: bool = False, threads: int | None = None) -> None:
    os.environ.update(SAFE_ENV)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= world
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        per_rank = max(1, len(cores) // world)
        if not isinstance(pin_cores, bool) and pin_cores > 0:  # a number: that many cores a rank, at most
            per_rank = min(per_rank, int(pin_cores))
        if pin_cores and len(cores) >= world:  # each rank on cores of its own, as the recordings ran
            os.sched_setaffinity(0, set(cores[rank * per_rank:(rank + 1) * per_rank]))
        torch.set_num_threads(threads or per_rank)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    try:
        if os.environ.get("HELPERS_CRASH_RANK") == str(rank):  # fault injection for the tests
            raise RuntimeError(f"rank {rank} crashed on purpose")
        width = 4096 if cuda else 1024
        if mark or nvtx_steps:
            # Which process is which rank, for a multi-process Nsight Systems export (helpers.readers.nsys).
            _nvtx.mark(f"rank {rank} of {world}")
        trips = _Tripwires() if learner else None
        step = _step_fn(variant, rank, world, device, width, learner, mark)
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
        training = training_record(step, rank, world, device, width, warmup + steps, trips) if learner else None
        if nvtx_steps:
            # The steps an nsys capture should read, as the PyTorch profiler's run below has them: one
            # step to settle after the barrier, then up to 5 steps in NVTX ranges named as
            # helpers.load finds steps. A CPU job has no CUDA profiler range: nsys captures the whole run.
            dist.barrier()
            step(0)
            for i in range(min(steps, 5)):
                _nvtx.push_range(f"step {i}")
                step(1 + i)
                _nvtx.pop_range()
        if out_dir:
            from torch.profiler import ProfilerActivity, profile, schedule

            from ..profiling import quiet_profiler_logs, save_trace
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            dist.barrier()
            with quiet_profiler_logs(), \
                    profile(activities=acts, schedule=schedule(wait=0, warmup=1, active=min(steps, 5), repeat=1),
                            record_shapes=True) as prof:  # shapes: what each collective sends (bytes on the wire)
                if training is not None:  # the checks read it with the trace it belongs to
                    prof.add_metadata_json("training", json.dumps(training))
                for i in range(1 + min(steps, 5)):
                    step(i)
                    prof.step()
                sync()
            trace_path = str(save_trace(prof, Path(out_dir) / f"rank{rank}.json.gz"))
        Path(result_dir, f"rank{rank}.json").write_text(json.dumps(
            {"rank": rank, "step_ms": ms, "device": str(device), "backend": dist.get_backend(), "trace": trace_path,
             "training": training}))
    except BaseException as exc:
        Path(result_dir, f"rank{rank}.error.json").write_text(json.dumps(_error_record(exc)))
        raise
    finally:
        dist.destroy_process_group()


def _reraise(result_dir: Path, world: int, original: BaseException) -> None:
    """Raise the error that came first in the notebook (an unfinished exercise stays one line): when one
    rank fails, the others fail after it ("Connection closed by peer" in gloo), and the first is the cause."""
    found = []
    for r in range(world):
        path = result_dir / f"rank{r}.error.json"
        if path.exists():
            rec = json.loads(path.read_text())
            found.append((rec.get("type") != "ExerciseNotDone", float(rec.get("at", math.inf)), r, rec))
    for _, _, r, rec in sorted(found, key=lambda x: x[:3]):
        if rec.get("type") == "ExerciseNotDone":
            from ..course import ExerciseNotDone

            raise ExerciseNotDone(int(rec.get("number", 0)), rec.get("todo", "your code"), rec.get("where", "")) from None
        exc: BaseException | None = None
        if rec.get("pickled"):
            with contextlib.suppress(Exception):
                exc = pickle.loads(bytes.fromhex(rec["pickled"]))
        if not isinstance(exc, BaseException):
            exc = RuntimeError(f"{rec.get('type')}: {rec.get('message')}")
        if hasattr(exc, "add_note"):
            exc.add_note(f"(raised in rank {r}; its traceback:)\n{rec.get('traceback', '')}")
        raise exc from None
    raise original


def _job_how(variant: str | None, wrap: Callable | None, shard: Callable | None) -> dict:
    """How a job's rank traces were made: by this module, with the learner's ``wrap``/``shard`` (their code)."""
    import hashlib

    parts = [stamps.describe_step(f) for f in (wrap, shard) if f is not None]
    step = hashlib.sha256("|".join([variant or ""] + [p["step"] for p in parts]).encode()).hexdigest()
    return {"by": "communication.run", "step": step,
            "workloads": sorted({"communication"}.union(*[p["workloads"] for p in parts])),
            "learner": sorted(set().union(*[p["learner"] for p in parts]))}


def run(variant: str | None = None, world_size: int = 2, steps: int = 10, warmup: int = 3, profile_dir: str | None = None,
        *, wrap: Callable | None = None, shard: Callable | None = None, pin_cores: bool | int = True,
        mark_collectives: bool = False, nsys_steps: bool = False, threads: int | None = None, **options: Any) -> dict:
    """Run the job in ``world_size`` fresh processes; returns per-rank step times (and the trace folder).

    ``variant`` picks one of :data:`VARIANTS` (default ``manual``). Or run your own code in the ranks:
    ``wrap(model, **options)`` returns the module to train (your DDP configuration); ``shard(n, rank,
    world)`` returns the (start, stop) rows of the global batch each rank trains on (DDP with its
    defaults unless ``wrap`` is given too). On CPUs, ``pin_cores`` gives each rank cores of its own (as
    the recordings ran); a number gives each rank at most that many; ``False`` lets the ranks share
    all cores, so that a core busy with other work slows both ranks alike rather than one. ``threads``
    sets each CPU rank's torch threads (default: its share of the cores). Every rank is stopped if one fails or on Ctrl-C: no process
    is left behind; a rank's own error is raised here.

    For Nsight Systems (which sees neither gloo's collectives nor the PyTorch profiler's steps):
    ``mark_collectives`` puts each all-reduce in an NVTX range (:func:`marked_hook`) and each rank's
    number in an NVTX mark; ``nsys_steps`` also runs up to 5 steps in NVTX ``step N`` ranges after the
    timed ones. Run it under ``nsys profile --trace=nvtx,osrt`` without a capture range.
    """
    if (mark_collectives or nsys_steps) and _nvtx is None:
        raise RuntimeError("marking the job for Nsight Systems needs the nvtx package: pip install nvtx")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a whole number of at least 1 (or None for the cores shared out), not {threads!r}")
    if steps < 1 or warmup < 0 or world_size < 1:
        raise ValueError(f"the job needs steps >= 1, warmup >= 0 and world_size >= 1, not steps={steps}, "
                         f"warmup={warmup}, world_size={world_size}")
    learner = None
    if wrap is not None or shard is not None:
        if variant is not None:
            raise ValueError("give either a variant or your own wrap=/shard= functions, not both")
        learner = {"wrap": portable(wrap) if wrap is not None else None,
                   "shard": portable(shard) if shard is not None else None, "options": options}
        try:
            pickle.dumps(options)
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"the options {sorted(options)} must be plain values the ranks can receive ({exc})") from None
        name = "-".join(f.__name__ for f in (wrap, shard) if f is not None)
    else:
        if options:
            raise ValueError(f"options {sorted(options)} go to your wrap= function; a variant takes none")
        variant = variant or "manual"
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
        name = variant
    if steps < 1 or world_size < 1:
        raise ValueError("steps and world_size must be at least 1")
    out_dir = str(new_run_dir(profile_dir, f"{name}-ws{world_size}")) if profile_dir else None
    result_dir = Path(out_dir) if out_dir else Path(new_run_dir(Path(os.environ.get("TMPDIR", "/tmp")) / "comm-results", name))
    os.environ.update(SAFE_ENV)  # inherited by the spawned ranks too
    ctx = mp.start_processes(_rank_main, args=(variant or "", world_size, free_port(), steps, warmup, out_dir,
                                               str(result_dir), learner, pin_cores,
                                               mark_collectives or nsys_steps, nsys_steps, threads),
                             nprocs=world_size, join=False, start_method="spawn")
    try:
        while not ctx.join():
            pass
    except BaseException as exc:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
        for p in ctx.processes:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        if isinstance(exc, Exception):
            _reraise(result_dir, world_size, exc)
        raise
    ranks = [json.loads((result_dir / f"rank{r}.json").read_text()) for r in range(world_size)]
    for r in range(world_size):
        (result_dir / f"rank{r}.json").unlink()
    if out_dir:  # each rank's trace, registered as made here: helpers.load(trace_dir) stamps the job's trace
        how = _job_how(variant, wrap, shard)
        if learner:  # what the ranks trained goes under the stamp's token too: the checks read it from there
            how["training"] = {str(r["rank"]): r.get("training") for r in ranks}
        for r in ranks:
            if r.get("trace"):
                stamps.made(r["trace"], how)
    out = {"variant": variant or name, "world_size": world_size, "step_ms": max(r["step_ms"] for r in ranks),
           "per_rank_ms": [r["step_ms"] for r in ranks], "backend": ranks[0]["backend"], "trace_dir": out_dir}
    if learner:  # what the learner's job trained, next to plain DDP (training_record), rank by rank
        out["training"] = [r.get("training") for r in ranks]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or __name__).splitlines()[0])
    parser.add_argument("--variant", choices=VARIANTS, default="manual")
    parser.add_argument("--world-size", type=count_at_least(1), default=2)
    parser.add_argument("--steps", type=count_at_least(1), default=10)
    parser.add_argument("--warmup", type=count_at_least(0), default=3)
    parser.add_argument("--profile", metavar="DIR", help="write one trace per rank into a new folder under DIR")
    parser.add_argument("--mark-collectives", action="store_true",
                        help="each all-reduce in an NVTX range and each rank's number in an NVTX mark (for nsys)")
    parser.add_argument("--nsys-range", action="store_true",
                        help="--mark-collectives, and 5 more steps in NVTX 'step N' ranges: run under "
                             "nsys profile --trace=nvtx,osrt (a CPU job has no CUDA profiler range to capture)")
    parser.add_argument("--cores-per-rank", type=int, default=0,
                        help="on CPUs, each rank on this many cores of its own (default: the cores shared out)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.variant, args.world_size, args.steps, args.warmup, args.profile,
                         pin_cores=args.cores_per_rank or True,
                         mark_collectives=args.mark_collectives, nsys_steps=args.nsys_range)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
