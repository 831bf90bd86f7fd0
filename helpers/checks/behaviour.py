"""Does the learner's loop still do the same training? Judged before any structure or timing.

A fix that deletes the work (a loader over one cached sample, an update that never touches the
model, logging removed instead of made sync-free) is faster for the wrong reason. These checks run
the learner's own functions on small CPU inputs, next to the loop as first written, and say what is
missing: the data, the update, or the logging. Each returns ``None`` when the behaviour holds, or
one message naming what is missing.
"""

from __future__ import annotations

import ast
import inspect
import re
import secrets
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

#: Largest relative parameter difference from the loop as first written, after the same steps from the
#: same seed, that a real fix shows: the same ops in the same order give bit-identical results on a CPU;
#: 1e-4 leaves room for a different but equivalent reduction order. Skipping one step's data or update
#: moves the parameters by about lr (1e-4 relative and more for Adam on these models), so it does not fit.
PARAM_RTOL = 1e-4
#: A logged loss is the loop's own when it is within this of a true loss (one step's, or a mean or sum
#: over the last N steps): four printed decimals.
LOG_ABS = 2e-3
_FLOAT = re.compile(r"[-+]?(?<!\d)\d+\.\d+(?:[eE][-+]?\d+)?")  # starts only where a run of digits starts: linear time


def _call(fn: Callable, *args: Any, what: str, note: Any = None) -> Any:
    """Run a learner function through the one guard (:func:`run_learner`: a time limit, one line when it
    raises, its source noted for a selfcheck --run); its failure comes back as a :class:`_Failed` the
    caller turns into its own message."""
    from ._core import CheckFailed, run_learner

    try:
        return run_learner(fn, *args, name=what, note=note)
    except NotImplementedError:
        raise
    except CheckFailed as exc:
        return _Failed(str(exc))


def _batches(loader: Any, most: int) -> list | _Failed:
    """At most ``most + 1`` batches of the learner's loader, read under the same guard (an endless or
    stuck loader is a finding, not a hang)."""
    import itertools

    return _call(lambda: list(itertools.islice(iter(loader), most + 1)), what="iterating your DataLoader", note=False)


class _Failed:
    def __init__(self, message: str) -> None:
        self.message = message


@contextmanager
def _threads_kept(threads: int | None = None) -> Iterator[None]:
    """Learner code may call torch.set_num_threads(1) (lab 01's advice for a CPU): leave the kernel as it was.
    ``threads``: run the block with that many (a learner's run and its reference alike: one thread adds in one
    order, and the small CPU runs take 0.1-0.2 s with one against 2-4 s with two threads on a busy 2-core machine)."""
    n = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(n)


# --- the course's own code, wherever the learner writes it -------------------------------------
#: What each exercise asks the learner to write, as the course (or PyTorch) already has it: running one of these
#: inside the learner's function is the reference wrapped (in a def, a subclass, a getattr of a string), not
#: the learner's work. ``module:qualname``; ``[attr]`` after it: only a call whose ``self.attr`` is true counts
#: (``gpu_bound.Net`` with its own checkpointing switched on). The learner's own code may call the course's
#: other helpers (datasets, models, ``host_prepare``, ``annotate``): only the answers are listed.
COURSE_ANSWERS: dict[str, tuple[str, ...]] = {
    "loader": ("helpers.workloads.data_stall:_fixed_loader", "helpers.workloads.data_stall:make_step",
               "helpers.workloads.mystery:make_loader"),
    "device copy": ("helpers.workloads.data_stall:_async_copy", "helpers.workloads.data_stall:make_step"),
    "update": ("torch:_fused_adam_", "torch:_fused_adamw_", "torch.optim.adam:adam", "torch.optim.adam:_single_tensor_adam", "torch.optim.adam:_multi_tensor_adam",
               "torch.optim.adam:_fused_adam", "torch.optim.adam:Adam.step", "torch.optim.adamw:adamw",
               "torch.optim.adamw:AdamW.step", "helpers.workloads.launch_overhead:make_eager_step",
               "helpers.workloads.launch_overhead:make_step"),
    "step": ("helpers.workloads.sync_stall:_fixed_step", "helpers.workloads.sync_stall:broken_step",
             "helpers.workloads.sync_stall:make_step", "helpers.workloads.callsite:fixed_step",
             "helpers.workloads.callsite:broken_step", "helpers.workloads.callsite:make_step"),
    "capstone": ("helpers.workloads.mystery:make_step", "helpers.workloads.mystery:make_step_from_loader",
                 "helpers.workloads.mystery:make_loader", "helpers.workloads.data_stall:_fixed_loader",
                 "helpers.workloads.data_stall:make_step_from_loader", "helpers.workloads.data_stall:make_step",
                 "helpers.workloads.sync_stall:_fixed_step", "helpers.workloads.sync_stall:make_step"),
    "low-precision step": ("helpers.workloads.gpu_bound:train_step", "helpers.workloads.gpu_bound:make_step"),
    "forward without the break": ("helpers.workloads.gpu_bound:Net.forward",),
    "checkpointed forward": ("helpers.workloads.gpu_bound:Net.forward[ckpt]",),
    # labs 09-11: the checks' own reference answers (``_reference*``) and the course's attention loops
    "function (lab 9)": ("helpers.checks.lab09:_reference*", "helpers.workloads.attention:attend_eager",
                          "helpers.workloads.attention:make_step", "helpers.workloads.attention:make_step_with"),
    "function (lab 10)": ("helpers.checks.lab10:_reference*",),
    "function (lab 11)": ("helpers.checks.lab11:_reference*", "helpers.workloads.callsite:fixed_step"),
}


def _answer_codes(what: str) -> dict[Any, tuple[str, str | None]]:
    """{code object: (the answer's name, the ``self`` attribute that must be true or None)} for ``what``; names
    this torch does not have are left out."""
    import importlib

    out: dict[Any, tuple[str, str | None]] = {}
    for entry in COURSE_ANSWERS[what]:
        ref, _, attr = entry.partition("[")
        module, _, qual = ref.partition(":")
        if qual.endswith("*"):  # every function of the module whose name starts so
            try:
                found = vars(importlib.import_module(module))
            except ImportError:
                continue
            for name, fn in found.items():
                if name.startswith(qual[:-1]) and inspect.isfunction(fn):
                    out[fn.__code__] = (f"the course's own {module.rsplit('.', 1)[-1]}.{name}", None)
            continue
        try:
            obj: Any = importlib.import_module(module)
            for part in qual.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            continue
        code = getattr(inspect.unwrap(obj), "__code__", None)
        if code is None and callable(obj):  # a C function (torch._fused_adam_): its object, seen as a c_call
            out[obj] = (f"PyTorch's own {module}.{qual}", None)
        if code is not None:
            label = (f"the course's own {module.rsplit('.', 1)[-1]}.{qual}" if module.startswith("helpers.")
                     else f"PyTorch's own {module}.{qual}")
            out[code] = (label, attr.rstrip("]") or None)
    return out


def _hashable(obj: Any) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


@contextmanager
def course_code_watch(what: str, here: bool = False) -> Iterator[list[str]]:
    """Record which of the course's answers for ``what`` (:data:`COURSE_ANSWERS`) run in the threads started while
    the block runs: the learner's function runs in one of its own (:func:`helpers.checks._core.run_learner`), so
    the check's own reference runs, in the caller's thread, are not counted (``here``: this thread is watched
    too, for a block that runs nothing but the learner's code). Yields the list it fills."""
    import sys
    import threading

    codes = _answer_codes(what)
    used: list[str] = []
    watching = [True]

    def watch(frame: Any, event: str, _arg: Any) -> None:
        if not watching[0]:  # a thread started during the block that outlives it (a loader's pin-memory thread)
            sys.setprofile(None)
            return
        if event == "c_call" and not isinstance(_arg, type) and _hashable(_arg) and _arg in codes:
            if codes[_arg][0] not in used:
                used.append(codes[_arg][0])
            return
        if event == "call" and frame.f_code in codes:
            name, attr = codes[frame.f_code]
            if attr is not None and not getattr(frame.f_locals.get("self"), attr, False):
                return
            if name not in used:
                used.append(name)

    before, mine = getattr(threading, "_profile_hook", None), sys.getprofile()
    threading.setprofile(watch)
    if here:
        sys.setprofile(watch)
    try:
        yield used
    finally:
        watching[0] = False
        threading.setprofile(before)  # type: ignore[arg-type]
        if here:
            sys.setprofile(mine)


def watching(run: Callable, what: str) -> Callable:
    """``run`` (the checks' :func:`~helpers.checks._core.run_learner`) with the course's answers for ``what`` watched
    while the learner's function runs: one of them run refuses the call (:class:`CheckFailed`, naming it)."""
    from ._core import CheckFailed

    def run_watched(fn: Any, *args: Any, **kwargs: Any) -> Any:
        with course_code_watch(what) as used:
            out = run(fn, *args, **kwargs)
        if used:
            raise CheckFailed(f"{kwargs.get('name', 'your function')} runs {', '.join(used)}: write it yourself; a "
                              "reference implementation wrapped in a function earns no credit")
        return out

    return run_watched


def course_code_problem(fn: Any, what: str, used: list[str] | None = None) -> str | None:
    """Why ``fn`` is not the learner's own ``what``: it is the course's code (defined in ``helpers``), a class
    derived from one of the course's answers that keeps its method, or, when ``used`` is given (from
    :func:`course_code_watch` around the learner's calls), it ran one of the course's answers. None when it is
    the learner's own."""
    name = getattr(fn, "__name__", None) or type(fn).__name__
    if str(getattr(fn, "__module__", "") or "").startswith("helpers."):
        return (f"you passed the course's own {name} ({fn.__module__}), not yours: write your {what} in a cell; the "
                "course's reference earns no credit")
    if used:
        return (f"your {what} runs {', '.join(used)}: write the {what} itself; a reference implementation wrapped in a "
                "function (or a subclass) earns no credit")
    return None


# --- lab 01: the loader and the device copy -------------------------------------------------
def _sample_key(x: torch.Tensor) -> bytes:
    try:
        return x.detach().to("cpu").contiguous().numpy().tobytes()
    except (TypeError, RuntimeError):  # a dtype numpy lacks (bfloat16): not any of the dataset's samples
        return b""


def loader_problem(make_loader: Callable, to_device: Callable | None, dataset_factory: Callable[[], Any],
                   batch_size: int, epochs: int = 1, made: list | None = None) -> str | None:
    """Run ``make_loader(dataset, batch_size)`` over a small copy of the lab's dataset for one epoch.

    It must yield the dataset's own samples (the images and labels ``dataset[i]`` returns), each index
    once an epoch (in order or shuffled; a last short batch or ``drop_last`` is fine), in batches of
    ``batch_size``; ``to_device`` must hand back the same values. The loader made is appended to ``made``
    when one is given (the caller reads its settings; the function is not run twice).
    """
    dataset = dataset_factory()
    n = len(dataset)
    index_of = {}
    for i in range(n):
        x, _ = dataset[i]
        index_of.setdefault(_sample_key(x), i)
    with _threads_kept(), course_code_watch("loader") as used:
        loader = _call(make_loader, dataset, batch_size, what="your loader function")
        if isinstance(loader, _Failed):
            return loader.message
        borrowed = course_code_problem(make_loader, "loader", used)
        if borrowed:
            return borrowed
        if made is not None:
            made.append(loader)
        batches = []
        for _ in range(epochs):
            got = _batches(loader, n)  # an epoch has at most n batches, whatever their size
            if isinstance(got, _Failed):
                return got.message
            if len(got) > n:
                return (f"your loader yields more than {n} batches in an epoch of {n} samples: the loop must see "
                        "each sample once an epoch, not an endless stream")
            batches += got
    seen: list[int] = []
    foreign = 0
    for k, b in enumerate(batches):
        if not (isinstance(b, (tuple, list)) and len(b) == 2 and all(isinstance(t, torch.Tensor) for t in b)):
            return "your loader must yield (images, labels) batches of tensors, as the first loop's does"
        x, y = b
        if x.dim() < 1 or y.dim() != 1 or len(x) != len(y) or y.is_floating_point() or y.is_complex():
            return (f"your loader yields a batch of images {tuple(x.shape)} and labels {tuple(y.shape)} ({y.dtype}): "
                    "each batch must be (images, labels) with one integer label per image, as the first loop's")
        if len(x) > batch_size or (len(x) < batch_size and (k + 1) % max(len(batches) // epochs, 1)):
            return f"your loader yields batches of {len(x)}, not the {batch_size} it is given: keep the batch size"
        for row, label in zip(x, y):
            i = index_of.get(_sample_key(row))
            if i is None or int(label) != int(dataset[i][1]):
                foreign += 1
            else:
                seen.append(i)
    full = sum(len(b[0]) == batch_size for b in batches)
    if foreign:
        return (f"{foreign} of the samples your loader yields are not the dataset's (not any dataset[i] with its label): "
                "the data is missing; build the DataLoader over the dataset it is given, and keep each sample's work")
    counts = torch.bincount(torch.tensor(seen, dtype=torch.long), minlength=n) if seen else torch.zeros(n)
    repeated = int((counts > epochs).sum())
    if repeated or len(set(seen)) < (n // batch_size) * batch_size or full < n // batch_size - 1:
        return (f"your loader yields {len(set(seen))} distinct samples out of the dataset's {n} in an epoch"
                + (f" ({repeated} repeated)" if repeated else "")
                + ": the data is missing; the loop must see every sample once an epoch (shuffled or in order), "
                "not a cached few")
    if to_device is not None:
        x, y = batches[0]
        with course_code_watch("device copy") as used:
            moved = _call(to_device, (x, y), torch.device("cpu"), what="your device copy")
        if isinstance(moved, _Failed):
            return moved.message
        borrowed = course_code_problem(to_device, "device copy", used)
        if borrowed:
            return borrowed
        if not (isinstance(moved, (tuple, list)) and len(moved) == 2
                and all(isinstance(t, torch.Tensor) for t in moved)):
            return "your device copy must return the (x, y) pair it was given, moved to the device"
        if not (torch.equal(moved[0].cpu(), x) and torch.equal(moved[1].cpu(), y)):
            return "your device copy returns other values than the batch it was given: the data is missing"
    return None


# --- lab 02: the optimizer update -----------------------------------------------------------
def _adam_error(update: Callable, start: list[torch.Tensor], grads: list[list[torch.Tensor]],
                lr: float) -> tuple[float, float, float] | _Failed:
    """(largest difference from torch.optim.Adam, how far Adam moved the parameters, how far the learner's
    update moved them) after ``len(grads)`` steps."""
    ref = [p.clone().requires_grad_(True) for p in start]
    opt = torch.optim.Adam(ref, lr=lr, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    mine = [p.clone() for p in start]
    m1, m2 = [torch.zeros_like(p) for p in mine], [torch.zeros_like(p) for p in mine]
    for k, gs in enumerate(grads):
        for p, gr in zip(ref, gs):
            p.grad = gr.clone()
        opt.step()
        with torch.no_grad():
            out = _call(update, mine, [gr.clone() for gr in gs], m1, m2, k + 1, lr, 0.9, 0.999, 1e-8,
                        what="your update")
        if isinstance(out, _Failed):
            return out
    err = max(float((a - b.detach()).abs().max()) for a, b in zip(mine, ref))
    moved = max(float((b.detach() - s).abs().max()) for b, s in zip(ref, start))
    mine_moved = max(float((a - s).abs().max()) for a, s in zip(mine, start))
    return err, moved, mine_moved


def adam_problem(update: Callable, model_params: list[torch.Tensor], model_grads: Callable[[int], list[torch.Tensor]],
                 tolerance: float, seed: int | None = None, steps: int = 3) -> tuple[float, str | None]:
    """The learner's update next to ``torch.optim.Adam``: on the model's own parameters with its real
    gradients (``model_grads(k)``), and on random shapes from a seed drawn fresh each call.

    Returns (largest difference seen, a message or None). An update that does not change the
    parameters in place, or is right only on some tensors, is refused.
    """
    # a fresh seed from the OS (torch's own generator may just have been seeded by the lab's code)
    g = torch.Generator().manual_seed(secrets.randbits(31) if seed is None else seed)
    worst, problem = 0.0, None
    shapes = [tuple(int(d) for d in torch.randint(1, 9, (int(torch.randint(1, 4, (), generator=g)),), generator=g))
              for _ in range(int(torch.randint(2, 7, (), generator=g)))]
    def random_case() -> tuple[str, list, list]:
        return (f"random tensors of shapes {shapes}", [torch.randn(s, generator=g) for s in shapes],
                [[torch.randn(s, generator=g) for s in shapes] for _ in range(steps)])

    def model_case() -> tuple[str, list, list]:
        return ("the model's own parameters", [p.detach().clone() for p in model_params],
                [[gr.detach().clone() for gr in model_grads(k)] for k in range(steps)])

    # the small random case runs first (an update that raises or hangs is said before the model's
    # gradients are computed); the model's case is reported first
    results = {}
    for case in (random_case, model_case):
        label, start, grads = case()
        with course_code_watch("update") as used:  # torch's own Adam runs in the check's thread, not in the learner's
            result = _adam_error(update, start, grads, lr=1e-2)
        if isinstance(result, _Failed):
            return float("inf"), result.message + f" (on {label})"
        borrowed = course_code_problem(update, "update", used)
        if borrowed:
            return float("inf"), borrowed + " (fewer calls count only where you wrote the step with them)"
        results[label] = result
    for label in reversed(results):
        err, moved, mine_moved = results[label]
        worst = max(worst, err)
        if err > tolerance and problem is None:
            if mine_moved == 0.0:
                problem = (f"on {label} your update leaves the parameters where they were (Adam moves them by {moved:.2g} in "
                           f"{steps} steps): the update is missing; change `params` in place (torch._foreach_addcdiv_(params, ...))")
            else:
                problem = (f"on {label} your update lands {err:.2g} away from torch.optim.Adam after {steps} steps "
                           f"(want <= {tolerance:g}): fewer calls only count if they compute the same step. Check the bias "
                           "corrections (1 - beta ** step) and where eps is added (to the square root, after the correction).")
    return worst, problem


# --- lab 03 and the sync scan: the learner's own step function ------------------------------
def _course_step_builders() -> set[str]:
    """Names of the course's own training-step functions (the reference loops a learner must not wrap)."""
    import importlib
    import pkgutil

    from .. import workloads

    names: set[str] = set()
    for mod in pkgutil.iter_modules(workloads.__path__):
        module = importlib.import_module(f"{workloads.__name__}.{mod.name}")
        for name, obj in vars(module).items():
            if inspect.isfunction(obj) and "step" in name and obj.__module__ == module.__name__:
                names.add(name)
    return names


def own_step_problem(fn: Callable) -> str | None:
    """The function's own syntax tree (comments and strings do not count) must call ``.backward()`` and an
    optimizer step itself, and must not call the course's reference steps."""
    from ..sources import getsource  # the file read never blocking (a pipe in its place)

    try:
        tree = ast.parse(textwrap.dedent(getsource(fn)))
    except (OSError, TypeError, SyntaxError) as exc:
        return f"could not read the source of {getattr(fn, '__name__', fn)!r} ({exc}); define it in a cell"
    called = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    borrowed = sorted(named & _course_step_builders())
    name = getattr(fn, "__name__", "your function")
    if borrowed:
        return (f"{name} calls the course's own step ({', '.join(borrowed)}): write the step itself (forward, "
                "loss.backward(), the optimizer, logging); a wrapper around the reference earns no credit")
    missing = [what for what, ok in (("loss.backward()", "backward" in called), ("opt.step()", "step" in called)) if not ok]
    if missing:
        return (f"{name} is not a training step yet: its code calls no {' and no '.join(missing)} (a comment does not "
                "count): write the step (forward, loss.backward(), the optimizer, logging) before scanning it")
    return None


def _log_numbers(log: list) -> list[list[float]]:
    from ._core import _one_line

    return [[float(v) for v in _FLOAT.findall(_one_line(line, 400))] for line in log[:10_000]]


def same_training_problem(make_mine: Callable, make_reference: Callable, setup: Callable[[], tuple],
                          steps: int, log_every: int) -> str | None:
    """Run the learner's ``make_mine(*setup(), log)`` and the loop as first written for ``steps`` steps
    from the same seed on the CPU: the same batches must reach the model, the parameters must end
    where the reference's do (``PARAM_RTOL``), and the log must carry the loop's real losses at least
    once every ``log_every`` steps."""
    runs = {}
    with _threads_kept():
        for who, make in (("mine", make_mine), ("reference", make_reference)):  # each from its own seeded setup
            model, opt, *rest = setup()
            start = [p.detach().clone() for p in model.parameters()]
            inputs: list[torch.Tensor] = []
            hook = model.register_forward_pre_hook(lambda _m, args, into=inputs: into.append(args[0].detach().clone()))
            log: list = []
            try:
                with course_code_watch("step") as used:
                    step = _call(make, model, opt, *rest, log, what=f"{getattr(make, '__name__', 'your function')}")
                    if isinstance(step, _Failed):
                        return step.message
                    if getattr(step, "__module__", "").startswith("helpers.") and who == "mine":
                        return ("your function returns the course's own step: write the step itself; a reference "
                                "step earns no credit")
                    for i in range(steps):
                        out = _call(step, i, what="your step")
                        if isinstance(out, _Failed):
                            return out.message
                borrowed = course_code_problem(make, "step", used) if who == "mine" else None
                if borrowed:
                    return borrowed
            finally:
                hook.remove()
            runs[who] = (start, [p.detach().clone() for p in model.parameters()], inputs, log)
    r_start, r_end, r_in, r_log = runs["reference"]
    start, end, m_in, m_log = runs["mine"]
    if len(m_in) < steps or any(not torch.equal(a, b) for a, b in zip(r_in, m_in)):
        differ = next((k for k, (a, b) in enumerate(zip(r_in, m_in)) if not torch.equal(a, b)), min(len(m_in), steps))
        return (f"the data is missing: from step {differ} on your model is fed other inputs than the loop as first written "
                f"({len(m_in)} forward passes in {steps} steps): keep the batches (get_batch(i, xs, ys)) and one forward a step")
    if all(torch.equal(a, b) for a, b in zip(start, end)):
        return ("the update is missing: after your steps the model's parameters are where they started; keep "
                "loss.backward(), opt.step() and opt.zero_grad() in the step")
    scale = max(float((a - s).abs().max()) for a, s in zip(r_end, r_start))
    diff = max(float((a - b).abs().max()) for a, b in zip(r_end, end))
    if diff > PARAM_RTOL * max(scale, 1e-12) + 1e-7:
        return (f"the update differs: after {steps} steps your parameters are {diff:.2g} away from the loop as first written "
                f"(it moved them {scale:.2g}): keep the same loss, backward and optimizer step, once a step")
    true = [float(v) for line in r_log for v in re.findall(r"loss=([-+]?\d+\.\d+)", str(line))]
    candidates = list(true)
    for k in range(log_every, len(true) + 1):
        window = true[k - log_every:k]
        candidates += [sum(window) / log_every, sum(window)]
    real = sum(any(abs(v - c) <= LOG_ABS * max(1.0, abs(c)) for v in nums for c in candidates)
               for nums in _log_numbers(m_log))
    if real < steps // log_every:
        return (f"the logging is missing: in {steps} steps your log got {len(m_log)} line(s), {real} with the loop's real loss "
                f"(want one at least every {log_every} steps): keep the values on the GPU and read them every N steps, "
                "do not drop them")
    return None


# --- lab 04: the ranks' parameters after the job, against plain DDP's ------------------------------------
def _training_records(trace: Any) -> dict[int, dict]:
    """{rank: the job's training record} (helpers.workloads.communication.training_record): from the trace's stamp
    where it has one (the record is under its token: helpers.stamps), else as each rank's trace file carries it;
    ranks without one are left out."""
    from .. import stamps

    how = stamps.stamp_of(trace)
    if how is not None and isinstance(how.get("training"), dict):
        return {int(r): rec for r, rec in how["training"].items() if isinstance(rec, dict) and rec}
    ranks = trace.metadata.get("ranks")
    if isinstance(ranks, dict) and ranks:
        return {int(r): meta["training"] for r, meta in ranks.items() if isinstance(meta, dict) and meta.get("training")}
    own = trace.metadata.get("training")
    return {0: own} if own else {}


def ddp_training_problem(trace: Any, what: str = "job") -> str | None:
    """Whether the learner's DDP job (``communication.run(wrap=...)`` or ``run(shard=...)``) trained as DDP does, from
    the training record each rank's trace carries: PyTorch's own compression hooks not run in place of the learner's,
    every rank's parameters equal rank 0's (:data:`thresholds.DDP_RANKS_APART`) and plain DDP's after the job's steps
    (:data:`thresholds.DDP_SAME_TRAINING_FLOOR`; a job with a comm hook: :data:`thresholds.DDP_HALF_TIMES` times as far
    as PyTorch's fp16 compression lands in the same job). A message naming what is wrong, or None."""
    from .. import thresholds as th

    rec = _training_records(trace)
    world = len(trace.ranks) if hasattr(trace, "ranks") else len(rec)
    if not rec or len(rec) < world:
        return (f"your {what}'s trace carries no record of what its ranks trained ({len(rec)} of {world} ranks have one): "
                "run it with communication.run(wrap=your_function, ...) or run(shard=...) as the lab does; each rank then "
                "compares its parameters with plain DDP's and writes the figures into its trace")
    used = sorted({c for r in rec.values() for c in r.get("course_code", [])})
    if used:
        return (f"your {what} runs PyTorch's own {', '.join(used)} (its own compression, as the course's recorded "
                "fp16_hook variant does): write the hook itself: cast the bucket's buffer to fp16, divide by the world "
                "size, all-reduce it, copy the result back into the buffer and return it")
    steps = int(next(iter(rec.values())).get("steps", 0))
    moved = max(r.get("moved", 0.0) for r in rec.values())
    if not moved > 0:
        return (f"in your {what} the model's parameters did not move in {steps} steps: the module your function returns "
                "must be the model it was given, wrapped (DistributedDataParallel(model, ...)), so that the step trains it")
    apart_rank, apart = max(((r, v.get("ranks_apart", 0.0)) for r, v in rec.items()), key=lambda kv: kv[1])
    if apart > th.DDP_RANKS_APART:
        return (f"after {steps} steps of your {what}, rank {apart_rank}'s parameters are {apart:.1%} (of how far plain DDP "
                "moved them) away from rank 0's: the ranks stepped on different gradients. DDP gives every rank the "
                "same averaged gradient: wrap the model in DistributedDataParallel, and a comm hook must return the "
                "all-reduced result, copied back into the bucket's buffer (buffer.copy_(fut.value()[0]); return buffer)")
    half = [v["fp16_from_plain_ddp"] for v in rec.values() if "fp16_from_plain_ddp" in v]
    tol = max(th.DDP_SAME_TRAINING_FLOOR, th.DDP_HALF_TIMES * max(half)) if half else th.DDP_SAME_TRAINING_FLOOR
    off = max(v.get("from_plain_ddp", 0.0) for v in rec.values())
    if off > tol:
        kind = (f"{th.DDP_HALF_TIMES:g}x as far as PyTorch's fp16 compression lands in your job, {max(half):.1%}"
                if half else "plain DDP's own rounding")
        if world > 1 and abs(moved - world) < 0.1 * world:
            why = (f": your ranks moved them {moved:.2f}x as far, the sum of {world} ranks' gradients, not their mean: "
                   "divide by the world size (dist.get_world_size()) before or after the all-reduce")
        elif world > 1 and abs(moved - 1 / world) < 0.1 / world:
            why = f": your ranks moved them {moved:.2f}x as far: the gradients are divided by the world size twice"
        else:
            why = (f" (your ranks moved them {moved:.2f}x as far): the averaged gradient must be the mean of the ranks' "
                   "gradients, as DDP's own all-reduce gives it")
        return (f"after {steps} steps of your {what} the parameters are {off:.1%} (of how far plain DDP moved them) away "
                f"from where plain DDP puts them (the tolerance, {kind}: {tol:.1%}){why}")
    return None


# --- lab 05: the capstone's fixed loop -------------------------------------------------------
@contextmanager
def _first_inputs(width: int) -> Iterator[tuple[list[torch.Tensor], list[torch.nn.Module]]]:
    """Record each input of the first nn.Linear of ``width`` inputs to run (the model's input layer), and that layer."""
    seen: list[torch.Tensor] = []
    layers: list[torch.nn.Module] = []

    def hook(module: torch.nn.Module, args: tuple) -> None:
        if isinstance(module, torch.nn.Linear) and module.in_features == width and args and isinstance(args[0], torch.Tensor):
            if not layers:
                layers.append(module)
            if module is layers[0]:
                seen.append(args[0].detach().to("cpu").clone())

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        yield seen, layers
    finally:
        handle.remove()


@contextmanager
def loaders_made() -> Iterator[list[int | None]]:
    """The worker processes of every torch DataLoader built while the block runs (in any thread), in order:
    how many a learner's step function asked for, read off the loaders it made."""
    from torch.utils.data import DataLoader

    made: list[int | None] = []
    original = DataLoader.__init__

    def init(self: DataLoader, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(int(getattr(self, "num_workers", 0) or 0))

    DataLoader.__init__ = init  # type: ignore[method-assign]
    try:
        yield made
    finally:
        DataLoader.__init__ = original  # type: ignore[method-assign]


def capstone_problem(make_step: Callable, steps: int = 8, made: list | None = None) -> str | None:
    """Run the learner's fixed mystery step on the CPU: each step's batch must be real rows of the lab's
    dataset (``mystery.FeatureRows``), the batches distinct, and the model's weights must change. ``made``: the
    worker counts of the DataLoaders the learner's function built are appended to it."""
    import numpy as np

    from ..workloads import mystery, sync_stall

    width, batch, passes = mystery.sizes(torch.device("cpu"))
    base = mystery.FeatureRows(width, passes).table.copy()
    for _ in range(passes):  # each row's per-sample work, as FeatureRows does it
        base = np.tanh(base * 0.9 + 0.1)
    base_t = torch.from_numpy(base)
    with _threads_kept(), _first_inputs(width) as (seen, layers), course_code_watch("capstone") as used:
        with loaders_made() as loaders:
            step = _call(make_step, torch.device("cpu"), what="your step function")
        if made is not None:
            made.extend(loaders)
        if isinstance(step, _Failed):
            return step.message
        borrowed = course_code_problem(make_step, "fixed step", used) or course_code_problem(step, "fixed step")
        if borrowed:
            return borrowed
        first = None
        for i in range(steps):
            out = _call(step, i, what="your step")
            if isinstance(out, _Failed):
                return out.message
            if i == 0 and layers:
                first = [layers[0].weight.detach().clone()]
        end = [layers[0].weight.detach().clone()] if layers else None
    borrowed = course_code_problem(make_step, "fixed step", used)
    if borrowed:
        return borrowed
    batches = [x for x in seen if x.dim() == 2 and x.shape[0] > 1][:steps]
    if len(batches) < steps:
        return (f"the data is missing: in {steps} steps your model got {len(batches)} batches of {width} features: each "
                "step must feed the model a batch from the loader")
    cols = torch.cat([x[:, sync_stall.NOISE:sync_stall.NOISE + 64].float() for x in batches])  # untouched by the features
    dist = (cols[:, None, :] - base_t[None, :, :]).abs().amax(-1) if len(cols) * len(base_t) <= 4e6 else None
    if dist is None:
        dist = torch.cdist(cols, base_t, p=float("inf"))
    best, which = dist.min(1)
    rows = [int(k) if d <= 1e-5 else None for d, k in zip(best.tolist(), which.tolist())]
    foreign = sum(k is None for k in rows)
    distinct_batches = len({tuple(x.flatten()[:: max(1, x.numel() // 256)].tolist()) for x in batches})
    known = [k for k in rows if k is not None]
    if foreign:  # rows the lab's dataset never gives: another dataset, or its samples prepared otherwise
        return (f"the data is missing: {foreign} of the {len(rows)} rows your model got in {steps} steps are not rows of "
                "the lab's dataset (mystery.FeatureRows at the sizes mystery.sizes gives, each sample prepared as that "
                "dataset prepares it). A fix changes how the batches are made, not which rows they hold or how much work "
                "each sample gets")
    if distinct_batches < len(batches) or len(set(known)) < 0.75 * len(known):
        return (f"the data is missing: {distinct_batches} distinct batches in {steps} steps, {len(set(known))} distinct "
                f"dataset rows of {len(rows)}: the loop must train on new batches from the dataset each step, not one "
                "fixed batch")
    if first is None or end is None or all(torch.equal(a, b) for a, b in zip(first, end)):
        return ("the update is missing: the model's weights do not change over your steps; keep loss.backward(), "
                "opt.step() and opt.zero_grad() in the step")
    return None


# --- lab 08: a low-precision step against the course's step in the same precision -------------------
#: The autocast dtypes a low-precision step may run its Linear layers in, by name.
LOW_PRECISION = {torch.bfloat16: "bf16", torch.float16: "fp16"}


class _StepRecord:
    """What one call of a training step did to the model and optimizer it was given."""

    def __init__(self, y: torch.Tensor) -> None:
        self.y = y
        self.linear_dtypes: list[torch.dtype] = []
        self.heads: list[torch.Tensor] = []  # the model head's outputs (detached, fp32)
        self.returned: float = float("nan")
        self.scale: float | None = None  # what an enabled GradScaler multiplied the loss by; None: no scaler
        self.scaler: Any = None
        self.back_sq = 0.0  # squared norm of the gradients backward delivered to the parameters
        self.step_sq: float | None = None  # ... and of those the optimizer stepped on (None: it did not step)
        self.moved = False  # whether the head's bias changed (Adam moves every parameter with a gradient)
        self.lowered = False  # whether a GradScaler lowered its scale: it found overflowed gradients and skipped


@contextmanager
def _instrumented(model: torch.nn.Module, opt: torch.optim.Optimizer) -> Iterator[Callable[[torch.Tensor], _StepRecord]]:
    """Hooks that fill one :class:`_StepRecord` per step: the dtype of every Linear call, the head's outputs,
    the scale an enabled ``torch.amp.GradScaler`` applied, the gradients backward delivered to the parameters
    and those the optimizer stepped on. Yields ``start(y)``, which opens the next step's record."""
    records: list[_StepRecord] = []
    params = [p for p in model.parameters() if p.requires_grad]

    def current() -> _StepRecord | None:
        return records[-1] if records else None

    def on_linear(_m: torch.nn.Module, _i: tuple, out: Any) -> None:
        rec = current()
        if rec is not None and isinstance(out, torch.Tensor):
            rec.linear_dtypes.append(out.dtype)

    def on_head(_m: torch.nn.Module, _i: tuple, out: Any) -> None:
        rec = current()
        if rec is not None and isinstance(out, torch.Tensor):
            rec.heads.append(out.detach().float())

    def on_grad(g: torch.Tensor) -> None:
        rec = current()
        if rec is not None:
            rec.back_sq += float(g.detach().float().square().sum())

    def on_step(_opt: Any, _args: Any, _kw: Any) -> None:
        rec = current()
        if rec is not None:
            rec.step_sq = (rec.step_sq or 0.0) + sum(float(p.grad.detach().float().square().sum())
                                                     for p in params if p.grad is not None)

    scaler_cls = torch.amp.GradScaler
    original_scale, original_update = scaler_cls.scale, scaler_cls.update

    def scale(self: Any, outputs: Any) -> Any:  # GradScaler.scale's own signature
        out = original_scale(self, outputs)
        rec = current()
        if rec is not None and self.is_enabled():
            rec.scale, rec.scaler = float(self.get_scale()), self
        return out

    def update(self: Any, new_scale: Any = None) -> None:  # GradScaler.update's own signature
        before = self.get_scale() if self.is_enabled() else None
        original_update(self, new_scale)
        rec = current()
        if rec is not None and before is not None and self.get_scale() < before:
            rec.lowered = True

    handles = [mod.register_forward_hook(on_linear) for mod in model.modules() if isinstance(mod, torch.nn.Linear)]
    head = getattr(model, "head", None)
    if isinstance(head, torch.nn.Module):
        handles.append(head.register_forward_hook(on_head))
    handles += [p.register_hook(on_grad) for p in params]
    handles.append(opt.register_step_pre_hook(on_step))

    def start(y: torch.Tensor) -> _StepRecord:
        records.append(_StepRecord(y))
        return records[-1]

    scaler_cls.scale, scaler_cls.update = scale, update
    try:
        yield start
    finally:
        scaler_cls.scale, scaler_cls.update = original_scale, original_update
        for h in handles:
            h.remove()


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten().float().cpu() for p in model.parameters()])


def _lowp_run(step: Callable, device: torch.device, steps: int,
              perturb_seed: int | None = None) -> tuple[list[_StepRecord], torch.Tensor, tuple[str, str]]:
    """``steps`` calls of ``step(model, opt, x, y)`` on the lab's model from seed 0 (``gpu_bound.setup``): its
    records, the parameters' change and the parameters' dtypes before and after. ``perturb_seed``: every initial weight first multiplied by ``1 + e``,
    e of the size of fp32's rounding (:data:`thresholds.LOWP_SPREAD_PERTURBATION`): a run of the same step whose
    arithmetic rounds differently, as another order of the same sums does."""
    from ..thresholds import LOWP_SPREAD_PERTURBATION
    from ..workloads import gpu_bound as gb

    model, opt, xs, ys = gb.setup(device)
    if perturb_seed is not None:
        g = torch.Generator().manual_seed(perturb_seed)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + LOWP_SPREAD_PERTURBATION * torch.randn(p.shape, generator=g).to(p.device))
    start = _flat(model)
    dtypes = ", ".join(sorted({str(p.dtype) for p in model.parameters()}))
    bias = getattr(getattr(model, "head", None), "bias", None)
    with _instrumented(model, opt) as new_step:
        records = []
        for i in range(steps):
            rec = new_step(ys[i % len(ys)])
            was = bias.detach().clone() if isinstance(bias, torch.Tensor) else None
            loss = step(model, opt, xs[i % len(xs)], ys[i % len(ys)])
            try:
                rec.returned = float(loss)
            except (TypeError, ValueError, RuntimeError):
                rec.returned = float("nan")
            rec.moved = was is not None and not torch.equal(was, bias.detach())
            records.append(rec)
    return records, _flat(model) - start, (dtypes, ", ".join(sorted({str(p.dtype) for p in model.parameters()})))


class _Reference:
    """The course's step in one precision from seed 0, and its own spread: how far runs of the same step whose
    arithmetic rounds differently land from it (:data:`thresholds.LOWP_SPREAD_RUNS` runs from initial weights
    moved by fp32's rounding, and on a GPU one more plain run: its reductions need not add in one order)."""

    def __init__(self, records: list[_StepRecord], update: torch.Tensor, loss_spread: float, update_spread: float) -> None:
        self.records, self.update = records, update
        self.losses = [r.returned for r in records]
        self.loss_spread, self.update_spread = loss_spread, update_spread


_REFERENCES: dict[tuple, _Reference] = {}


def _course_lowp_step(dtype: torch.dtype, scaler: tuple | None) -> Callable:
    """The course's own training step (``gpu_bound.train_step``) in ``dtype``, with a fresh GradScaler of the
    settings ``scaler`` (init scale, growth factor, backoff factor, growth interval) when one is given."""
    from ..workloads import gpu_bound as gb

    made: list = []

    def step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if scaler is not None and not made:
            init, growth, backoff, interval = scaler
            made.append(torch.amp.GradScaler(x.device.type, init_scale=init, growth_factor=growth,
                                             backoff_factor=backoff, growth_interval=interval))
        return gb.train_step(model, opt, x, y, dtype=dtype, scaler=made[0] if made else None)

    return step


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else abs(a - b)


def _same_kind_reference(device: torch.device, steps: int, dtype: torch.dtype, scaler: tuple | None) -> _Reference:
    """The reference of the learner's kind, computed once per device, precision, scaler settings, TF32 setting
    and length: it never changes."""
    from ..capability import tf32_enabled
    from ..thresholds import LOWP_SPREAD_RUNS

    key = (str(device), steps, str(dtype), scaler, tf32_enabled())
    if key not in _REFERENCES:
        records, update, _ = _lowp_run(_course_lowp_step(dtype, scaler), device, steps)
        losses = [r.returned for r in records]
        others = [_lowp_run(_course_lowp_step(dtype, scaler), device, steps, perturb_seed=s) for s in range(1, LOWP_SPREAD_RUNS + 1)]
        if device.type == "cuda":
            others.append(_lowp_run(_course_lowp_step(dtype, scaler), device, steps))
        norm = float(update.norm()) or 1.0
        update_spread = max(float((u - update).norm()) / norm for _, u, _ in others)
        loss_spread = max(_rel(r.returned, b) for recs, _, _ in others for r, b in zip(recs, losses))
        _REFERENCES[key] = _Reference(records, update, loss_spread, update_spread)
    return _REFERENCES[key]


def _loss_of(rec: _StepRecord) -> list[float]:
    """The losses the step's forwards give (cross-entropy of each head output against the step's labels)."""
    import torch.nn.functional as F

    return [float(F.cross_entropy(h, rec.y.to(h.device))) for h in rec.heads]


def _gradient_problem(mine: list[_StepRecord], ref: list[_StepRecord], kind: str) -> str | None:
    """Whether backward started from the (scaled) loss and the optimizer stepped on unscaled gradients, each step
    against the reference's gradients at the same step (the parameters are nearly the same there)."""
    import math

    from ..thresholds import LOWP_GRADIENT_FACTOR

    def within(ratio: float) -> bool:
        return 1 / LOWP_GRADIENT_FACTOR <= ratio <= LOWP_GRADIENT_FACTOR

    for k, (m, r) in enumerate(zip(mine, ref)):
        want = math.sqrt(r.back_sq) / (r.scale or 1.0)  # the gradient norm of the step's loss itself
        if not (math.isfinite(want) and want > 0 and math.isfinite(m.back_sq)):
            continue  # an overflowed step (the scaler skips it): nothing to compare
        got, scale = math.sqrt(m.back_sq), m.scale or 1.0
        if not within(got / (want * scale)):
            if scale > LOWP_GRADIENT_FACTOR and within(got / want):
                return (f"at step {k} backward started from the loss, not from the scaled loss: the gradients reached the "
                        f"parameters unscaled although your GradScaler's scale was {scale:g}, so {kind}'s small gradients "
                        "still flush to zero. Call backward on what the scaler returns: scaler.scale(loss).backward()")
            return (f"at step {k} the gradients backward delivered to the parameters are {got / (want * scale):.3g}x those of "
                    f"the step's loss{f' times your GradScaler scale {scale:g}' if m.scale else ''}: run backward once a "
                    "step, on the loss of the step's forward" + (" (scaled: scaler.scale(loss).backward())" if m.scale else ""))
        if m.step_sq is not None and math.isfinite(m.step_sq):
            at_step = math.sqrt(m.step_sq) / want
            if not within(at_step):
                if m.scale and m.scale > LOWP_GRADIENT_FACTOR and within(at_step / m.scale):
                    return (f"at step {k} the optimizer stepped on the scaled gradients ({m.scale:g} times too large): call "
                            "scaler.step(opt), which unscales them first (and skips a step whose gradients overflowed), "
                            "then scaler.update(), instead of opt.step()")
                return (f"at step {k} the optimizer stepped on gradients {at_step:.3g}x those of the step's loss"
                        + (": the gradients of earlier steps are still in .grad; zero them once a step "
                           "(opt.zero_grad(set_to_none=True))" if at_step > 1 else
                           ": step the optimizer once a step, on the gradients of this step's loss")
                        + (" (scaler.step(opt) unscales them)" if m.scale else ""))
    return None


def lowp_step_problem(step_fn: Callable, device: torch.device, steps: int = 4) -> tuple[str | None, str]:
    """The learner's low-precision ``step_fn(model, opt, x, y) -> loss`` next to the course's step in the same
    precision (bf16 with bf16; fp16 with fp16 and a GradScaler of the learner's settings), from seed 0 on the
    lab's model: (a message naming what is wrong, or None; a summary of what was measured).

    Judged in order: every Linear call of each step ran in one low precision (not "any": an fp32 step with one
    bf16 call beside it is refused); the loss the step returns is the loss of its own forward; fp16 has an
    enabled GradScaler; backward delivered the gradients of that loss (scaled by the scaler's scale) and the
    optimizer stepped on unscaled ones; then the losses and the parameters' change after ``steps`` steps lie
    within the reference's own spread (:class:`_Reference`, times :data:`thresholds.LOWP_SPREAD_TIMES`, at least
    the floors), so a changed learning rate, optimizer, loss or a skipped step fails. ``step_fn`` is called as
    given: pass it through the checks' guard (:func:`helpers.checks._core.run_learner`)."""
    import math

    from ..thresholds import LOWP_SAME_KIND_LOSS_FLOOR, LOWP_SAME_KIND_UPDATE_FLOOR, LOWP_SPREAD_TIMES

    with _threads_kept(1), course_code_watch("low-precision step", here=True) as used:
        mine, update, kept_dtypes = _lowp_run(step_fn, device, steps)
    borrowed = course_code_problem(getattr(step_fn, "learner", step_fn), "low-precision step", used)
    if borrowed:
        return borrowed, ""
    calls = [d for r in mine for d in r.linear_dtypes]
    if not calls or any(not r.linear_dtypes for r in mine):
        return ("your step ran no Linear layer of the model it was given in at least one step: call model(x) in the "
                "step, on the model and batch the step receives"), ""
    low = {LOW_PRECISION[d] for d in calls if d in LOW_PRECISION}
    full = [d for d in calls if d not in LOW_PRECISION]
    if not low:
        return (f"your step's Linear layers produced {sorted(map(str, set(calls)))}: the matrix products still run in "
                "fp32. Put forward and the loss inside torch.autocast(device_type, dtype=...) with bf16 (or fp16 and a "
                "GradScaler on a GPU without native bf16)."), ""
    if full or len(low) > 1:
        return (f"{len(full) or len(calls)} of the {len(calls)} Linear calls of your {steps} steps ran in "
                f"{sorted(map(str, set(full))) or 'another precision'} beside {sorted(low)}: every Linear of the step runs "
                "in the one low precision, in the forward the loss comes from (one torch.autocast around forward and "
                "loss, not a low-precision call beside an fp32 forward)"), ""
    kind = low.pop()
    dtype = next(d for d, name in LOW_PRECISION.items() if name == kind)
    if kept_dtypes[1] != kept_dtypes[0]:
        return (f"your step changed the model's weights from {kept_dtypes[0]} to {kept_dtypes[1]}: autocast keeps the "
                "weights, their gradients and the optimizer's state in fp32 and casts to low precision op by op; "
                f"{kind} weights lose every update smaller than their rounding step. Leave the model as it is and put "
                "forward and the loss in torch.autocast"), ""
    for k, rec in enumerate(mine):
        own = _loss_of(rec)
        if not any(abs(rec.returned - v) <= 1e-4 * max(1.0, abs(v)) for v in own):
            shown = "nothing a float can hold" if not math.isfinite(rec.returned) else f"{rec.returned:.5g}"
            return (f"at step {k} your step returned {shown}, not the loss of its own {kind} forward "
                    f"({', '.join(f'{v:.5g}' for v in own[:2])}): return the loss the step's backward started from "
                    "(loss.detach())"), ""
    scaled = [r for r in mine if r.scale is not None]
    if kind == "fp16" and not scaled:
        return ("your step autocasts to fp16 without a GradScaler: fp16's 5-bit exponent ends at 65504 and flushes "
                "gradients under about 6e-8 to zero, so the loss must be scaled before backward and the gradients "
                "unscaled before the optimizer: scaler = torch.amp.GradScaler(); scaler.scale(loss).backward(); "
                "scaler.step(opt); scaler.update() (a scaler made with enabled=False scales nothing). bf16 has fp32's "
                "range and needs none"), ""
    if not any(r.moved for r in mine):
        return (f"{steps} calls of your step left every parameter as it was: run backward and opt.step()"
                + (" (scaler.step(opt) with a GradScaler)." if scaled else "."), "")
    unexplained = [k for k, r in enumerate(mine) if not r.moved and not r.lowered]
    if unexplained:
        return (f"your step left the parameters unchanged at step(s) {unexplained} of {steps}: call opt.step() every step "
                "(only a GradScaler may skip a step, when fp16 gradients overflowed; it then lowers its scale, and "
                f"{'yours did not' if scaled else 'your step has none'})."), ""
    settings = None
    if kind == "fp16" or scaled:
        s = scaled[0].scaler
        settings = (scaled[0].scale, s.get_growth_factor(), s.get_backoff_factor(), s.get_growth_interval())
    if kind == "bf16":
        settings = None  # scaling by a power of two is exact in bf16: the same training with or without a scaler
    with _threads_kept(1):
        ref = _same_kind_reference(device, steps, dtype, settings)
    problem = _gradient_problem(mine, ref.records, kind)
    if problem:
        return problem, ""
    what = f"the course's step in {kind}" + (" with a GradScaler of your settings" if settings else "")
    losses, want = [r.returned for r in mine], ref.losses
    loss_tol = max(LOWP_SPREAD_TIMES * ref.loss_spread, LOWP_SAME_KIND_LOSS_FLOOR)
    worst = max(_rel(a, b) for a, b in zip(losses, want)) if all(map(math.isfinite, losses)) else math.inf
    update_tol = max(LOWP_SPREAD_TIMES * ref.update_spread, LOWP_SAME_KIND_UPDATE_FLOOR)
    off = float((update - ref.update).norm() / (ref.update.norm() or 1.0))
    drift = (f"your losses {[round(v, 4) for v in losses]} drift from {what}'s {[round(v, 4) for v in want]} by up to "
             f"{worst:.2%} (the tolerance, from the reference's own spread: {loss_tol:.2%})")
    if off > update_tol:
        ratio = float(update.norm() / (ref.update.norm() or 1.0))
        return (f"after {steps} steps your parameters moved {off:.1%} away from where {what} moved them (the tolerance, "
                f"from the reference's own spread: {update_tol:.1%}; your step moved them {ratio:.2f}x as far)"
                + (f", and {drift}" if worst > loss_tol else "") + ": keep the same optimizer and learning rate, one "
                "backward, one opt.step() and one zero_grad a step"
                + (" (with the GradScaler: scaler.step(opt), scaler.update())" if settings else "")), ""
    if worst > loss_tol:
        return drift + ": only the matmuls' precision may change, not the data, the model or the loss", ""
    return None, (f"every Linear in {kind}, against {what}: losses within {worst:.2%} (tolerance {loss_tol:.2%}), the "
                  f"parameters' change within {off:.1%} (tolerance {update_tol:.1%}, from the reference's own spread)")


# --- lab 08: what a forward keeps for backward -----------------------------------------------------
def kept_for_backward(fn: Callable[[], torch.Tensor], keep_out: tuple[torch.Tensor, ...] = ()) -> tuple[int, int, Any]:
    """Run ``fn()`` (a forward) and measure what it keeps: (bytes of the tensors made during it that are still
    alive when it returns, bytes autograd's saved-tensor hooks saw saved, its output).

    The first is memory, counted by storage: every tensor an op made inside ``fn`` (seen by a dispatch mode) and
    still referenced afterwards, by the autograd graph, a saved-tensor hook of the caller's (``save_on_cpu``'s
    host copies), a custom Function's ``ctx`` or anything else, less the output's own storage and those of
    ``keep_out`` (the model's parameters, its input). A hook can hide tensors from the second figure (an inner
    ``saved_tensors_hooks`` shadows the outer one), not from the first: checkpointing keeps less because it
    recomputes, and only that lowers both.
    """
    import gc
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    made: list[weakref.ref] = []

    class _Made(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            out = func(*args, **(kwargs or {}))
            made.extend(weakref.ref(t) for t in tree_leaves(out) if isinstance(t, torch.Tensor))
            return out

    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _Made():
        out = fn()
    gc.collect(0)  # the youngest objects only (a full collection takes seconds): the counts are the same here
    skip = {t.untyped_storage().data_ptr() for t in (*keep_out, *tree_leaves(out)) if isinstance(t, torch.Tensor)}
    storages: dict[int, int] = {}
    for ref in made:
        t = ref()
        if t is None:
            continue
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values()), saved, out


def activation_saving_problem(kept: int, saved: int, plain_kept: int, share: float) -> str | None:
    """Whether a checkpointed forward keeps at most ``share`` of a plain forward's memory for backward (``kept``
    and ``saved`` from :func:`kept_for_backward`); a message naming what is kept, or None."""
    if kept <= share * plain_kept:
        return None
    mib = 2**20
    if saved < share * kept:
        return (f"your forward keeps {kept / mib:.1f} MiB alive for backward ({plain_kept / mib:.1f} MiB plain), though "
                f"saved-tensor hooks see only {saved / mib:.1f} MiB of it: the activations are stored somewhere else "
                "(save_on_cpu copies them to host memory, a pack hook of your own keeps them where it likes), not "
                "recomputed. Checkpointing keeps only each block's input and runs the block again in backward: "
                "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) around every block")
    return (f"your forward keeps {kept / mib:.1f} MiB alive for backward against {plain_kept / mib:.1f} MiB plain (want at "
            f"most {share:.0%} of it): wrap each block (not only one) in checkpoint so only block inputs are kept")


# --- lab 08: a graph break removed, the statistic kept ---------------------------------------------
def kept_statistic_problem(mine: torch.nn.Module, want: list[float], run: Callable[[], Any], forwards: int,
                           where: str = "the first block's output mean") -> str | None:
    """``run()`` calls the learner's model ``forwards`` times (gradients on, as in training); it must append one
    value to its ``seen`` list each forward: a tensor (kept on the device: a Python number is the host read-back
    the fix removes), detached (a statistic that carries the autograd graph keeps every forward's activations
    alive), equal to ``want`` (the course's model's statistic on the same inputs). Deleting it is no fix."""
    seen = getattr(mine, "seen", None)
    name = type(mine).__name__
    if not isinstance(seen, list):
        return (f"{name} has no `seen` list: keep gpu_bound.Net's statistic ({where}, appended to self.seen each "
                "forward), as a tensor")
    start = len(seen)
    run()
    kept = seen[start:]
    if len(kept) != forwards:
        return (f"your model recorded {len(kept)} values of the statistic in {forwards} forwards: the fix keeps the statistic "
                f"({where}, x.detach().mean(), appended to self.seen each forward) and only stops reading it back to "
                "the host inside forward; deleting it is not a fix")
    if not all(isinstance(v, torch.Tensor) and v.numel() == 1 for v in kept):
        odd = next(v for v in kept if not (isinstance(v, torch.Tensor) and v.numel() == 1))
        return (f"your model's statistic is a {type(odd).__name__}"
                + (f" of shape {tuple(odd.shape)}" if isinstance(odd, torch.Tensor) else "")
                + ", not a one-value tensor: keep x.detach().mean() as a tensor on the device (a Python number is a read-back "
                "to the host, the graph break itself)")
    if any(v.requires_grad for v in kept):
        return ("your model's statistic carries the autograd graph (requires_grad=True): each value keeps its forward's "
                "activations alive for as long as the list holds it, every step. Append x.detach().mean()")
    values = [float(v) for v in kept]
    if not all(abs(a - b) <= 1e-4 * max(1.0, abs(b)) for a, b in zip(values, want)):
        return (f"your model records {[round(v, 4) for v in values]} where gpu_bound.Net records {where} "
                f"{[round(v, 4) for v in want]}: keep the same statistic, only as a tensor")
    return None


# --- speed: slower than the machine's own drift between two captures ----------------------------------
def _same_ops(before: Any, after: Any) -> tuple[dict, dict, list[str]]:
    """Per trace ``{op name: (calls a step, ms a step)}`` of its PyTorch ops inside steps, and the names both run
    the same number of times a step."""
    import numpy as np

    def per_step(t: Any) -> dict[str, tuple[float, float]]:
        ev = t.events
        inside = ev["step"] >= 0
        steps = max(int(ev.loc[inside, "step"].nunique()), 1)
        sel = ev[(ev["kind"] == "cpu_op") & inside & (ev["device"] < 0)]
        grouped = sel.groupby("name", observed=True)["dur_us"]
        return {str(k): (float(n) / steps, float(s) / steps) for (k, n), s in zip(grouped.count().items(), grouped.sum())}

    b, a = per_step(before), per_step(after)
    return b, a, [k for k in b if k in a and np.isclose(b[k][0], a[k][0], rtol=0.01)]


def _same_ranges(before: Any, after: Any) -> float:
    """The wall time a step of the learner's phase ranges (``annotate("forward")``, ...) that hold the same ops in
    both traces, ``after`` over ``before``: their stretches include the moments the machine took the core away
    between two ops, which the ops' own times miss. NaN when none."""
    def ranges(t: Any) -> dict[str, tuple[float, dict]]:
        ev = t.events
        inside = ev["step"] >= 0
        steps = max(int(ev.loc[inside, "step"].nunique()), 1)
        ann = ev[(ev["kind"] == "annotation") & inside & (ev["device"] < 0)
                 & ~ev["name"].str.contains("#|ProfilerStep", regex=True)]
        ops = ev[(ev["kind"] == "cpu_op") & inside & (ev["device"] < 0)]
        out = {}
        for name, grp in ann.groupby("name", observed=True):
            counts: dict[str, float] = {}
            for r in grp.itertuples():
                held = ops[(ops["tid"] == r.tid) & (ops["start_us"] >= r.start_us) & (ops["end_us"] <= r.end_us)]
                for op, n in held["name"].value_counts().items():
                    counts[str(op)] = counts.get(str(op), 0.0) + n / steps
            out[str(name)] = (float(grp["dur_us"].sum()) / steps, counts)
        return out

    b, a = ranges(before), ranges(after)
    same = [k for k in b if k in a and b[k][1] and b[k][1] == a[k][1]]
    tb, ta = sum(b[k][0] for k in same), sum(a[k][0] for k in same)
    return ta / tb if tb > 0 and ta > 0 else float("nan")


def machine_drift(before: Any, after: Any) -> float:
    """How many times longer the same work took in ``after`` than in ``before``, the larger of two readings of it:
    the PyTorch ops both traces run the same number of times a step (the model's forward and backward, whatever
    the fix left as it was; the ops it changed run another number of times and drop out), their total time a step;
    and the phase ranges that hold the same ops in both, their wall time a step. Other work on a shared machine
    changes between two captures minutes apart, and the time of the same work says by how much (on a GPU track
    its host time). NaN when the two share nothing."""
    import math

    b, a, common = _same_ops(before, after)
    tb, ta = sum(b[k][1] for k in common), sum(a[k][1] for k in common)
    readings = [ta / tb if tb > 0 and ta > 0 else float("nan"), _same_ranges(before, after)]
    finite = [r for r in readings if math.isfinite(r)]
    return max(finite) if finite else float("nan")


def slower_than_the_machine(before: Any, after: Any) -> str:
    """A line when ``after``'s median step is slower than ``before``'s beyond the noise band and beyond the
    machine's own slowdown between the two captures, else ''. The slowdown is the larger of :func:`machine_drift`
    (the same ops took that much longer) and the pace probe both captures recorded
    (:func:`helpers.checks.speed.machine_pace`). For fixes that add no process of their own (a loader's workers
    compete with the training process for the cores, so their drift is the fix's, and
    :func:`helpers.checks.speed.slower_problem` judges those, on the probe alone): a busier machine slows the same
    work in both loops alike; a slower fix slows the step more. :func:`machine_verdict` gives the line a pass
    carries when the slowdown explained a slower step."""
    return machine_verdict(before, after)[0]


def machine_verdict(before: Any, after: Any) -> tuple[str, str]:
    """``(problem, note)``: :func:`slower_than_the_machine`'s line, and the line a pass carries when the machine's
    measured slowdown explained a step slower beyond the noise band (else '')."""
    from .speed import speed_verdict

    return speed_verdict(before, after, drift=machine_drift(before, after))


# --- every capture-based fix: the timed loop still trains, step by step ---------------------------------
#: A gradient accumulated into one parameter by backward: one a parameter a step that trains it.
ACCUMULATE_GRAD = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
#: torch's optimizers record each step as ``Optimizer.step#<Class>.step``.
_OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#(\w+)\.step$")
#: The share of the loop as first written's per-step training (optimizer steps, gradients) a fixed loop keeps at least:
#: the same training keeps all of it; 0.9 leaves room for a step cut at a capture's edge.
TRAINING_KEPT = 0.9


def _training_per_step(trace: Any) -> tuple[dict[str, float], float]:
    """({optimizer class: its steps per step}, gradients accumulated per step) read off ``trace``'s host events."""
    from .. import metrics as m

    ev = trace.events
    steps = max(int((m.windows(trace)["step"] >= 0).sum()), 1)
    host = ev[ev["device"] < 0] if "device" in ev.columns else ev
    if "step" in host.columns and (host["step"] >= 0).any():
        host = host[host["step"] >= 0]
    names = host["name"].astype(str)
    opt = names.str.extract(_OPTIMIZER_STEP, expand=False).dropna()
    per = {str(k): float(v) / steps for k, v in opt.value_counts().items()}
    return per, float((names == ACCUMULATE_GRAD).sum()) / steps


def trace_training_problem(before: Any, after: Any, optimizer: bool = True) -> str | None:
    """What the fix's capture ``after`` no longer does each step that the loop as first written (``before``) did,
    read off the two timelines: the optimizer's steps (the same optimizer, as often) and the gradients backward
    accumulates into the parameters. A loop that skips the update or the backward, or runs its forward under
    no_grad, is faster for the wrong reason, however correct the function the check ran beside it. None when it
    keeps them. ``optimizer=False``: the gradients only (a fix that replaces torch's optimizer with an update of its
    own, whose steps carry no ``Optimizer.step`` range)."""
    from ..model import Trace

    if not isinstance(before, Trace) or not isinstance(after, Trace):
        return None
    opt_b, grads_b = _training_per_step(before)
    opt_a, grads_a = _training_per_step(after)
    for name, n in opt_b.items() if optimizer else ():
        if opt_a.get(name, 0.0) < TRAINING_KEPT * n:
            other = ", ".join(f"{k} {v:.1f}" for k, v in opt_a.items()) or "none"
            return (f"your capture shows {opt_a.get(name, 0.0):.1f} {name} optimizer steps a step, the loop as first "
                    f"written {n:.1f} (Optimizer.step#{name}.step on the timeline; yours: {other}): the timed loop must "
                    "still step the same optimizer every step")
    if grads_b > 0 and grads_a < TRAINING_KEPT * grads_b:
        return (f"your capture shows {grads_a:.1f} gradients accumulated a step (AccumulateGrad, one a parameter), the "
                f"loop as first written {grads_b:.1f}: the timed loop must still run backward through the whole model "
                "every step, with gradients on")
    return None


# --- a fix that changes how work reaches the device keeps the work itself --------------------------------
#: The PyTorch ops that run a step's matrix products: the leaves autograd and autocast dispatch to, whatever kernel
#: the math library then picks (split-K, tensor cores or not), so their count a step is the model's, not the library's.
MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm"})


def _work_in_steps(trace: Any) -> tuple[int, float, float, float]:
    """(steps, bytes copied host-to-device, the largest such copy, matrix-product ops), over ``trace``'s steps: the
    copies on the device's timeline, the ops on the host's."""
    from .. import metrics as m

    ev = trace.events
    steps = max(int((m.windows(trace)["step"] >= 0).sum()), 1)
    in_steps = ev[ev["step"] >= 0] if "step" in ev.columns else ev
    copies = in_steps[(in_steps["kind"] == "memcpy") & (in_steps["copy_kind"] == "H2D")] \
        if "copy_kind" in in_steps.columns and "bytes" in in_steps.columns else None
    h2d = float(copies["bytes"].sum()) if copies is not None and len(copies) else 0.0
    largest = float(copies["bytes"].max()) if copies is not None and len(copies) else 0.0
    return steps, h2d, largest, float(in_steps["name"].astype(str).isin(MATMUL_OPS).sum())


def _work_per_step(trace: Any) -> tuple[float, float]:
    """(bytes copied host-to-device, matrix-product ops) a step, read off ``trace``'s steps."""
    steps, h2d, _largest, matmuls = _work_in_steps(trace)
    return h2d / steps, matmuls / steps


def device_work_problem(before: Any, after: Any) -> str | None:
    """What the fix's capture ``after`` no longer does each step that the loop as first written (``before``) did, for a
    fix that changes how data reaches the device or which math units run, not what is computed: the bytes each step
    copies to the device and the matrix products it runs. A loop that copies half a batch, reuses a batch already on
    the device or skips layers has faster copies and a shorter step for the wrong reason. None when it keeps both.

    A fix that copies the next batch while this one computes may leave one batch's copy outside the captured steps
    (made before the first, or after the last): the copies may fall short by one of ``before``'s largest."""
    from ..model import Trace

    if not isinstance(before, Trace) or not isinstance(after, Trace):
        return None
    steps_b, bytes_b, largest_b, mm_b = _work_in_steps(before)
    steps_a, bytes_a, _largest, mm_a = _work_in_steps(after)
    per_b, per_a = bytes_b / steps_b, bytes_a / steps_a
    if per_b > 0 and bytes_a + largest_b < TRAINING_KEPT * per_b * steps_a:
        return (f"your capture copies {per_a / 2**20:.1f} MiB to the device a step, the loop as first written "
                f"{per_b / 2**20:.1f} MiB (the host-to-device copies on the GPU's timeline): the timed loop must still "
                "move every batch, whole, each step; make the copies faster and hidden, not smaller or fewer")
    if mm_b > 0 and mm_a / steps_a < TRAINING_KEPT * mm_b / steps_b:
        return (f"your capture runs {mm_a / steps_a:.1f} matrix products a step ({', '.join(sorted(MATMUL_OPS))} on the "
                f"host's timeline), the loop as first written {mm_b / steps_b:.1f}: the timed loop must still run the "
                "model's whole computation every step")
    return None

