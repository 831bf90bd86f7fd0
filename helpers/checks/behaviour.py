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
def _threads_kept() -> Iterator[None]:
    """Learner code may call torch.set_num_threads(1) (lab 01's advice for a CPU): leave the kernel as it was."""
    n = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(n)


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
    with _threads_kept():
        loader = _call(make_loader, dataset, batch_size, what="your loader function")
        if isinstance(loader, _Failed):
            return loader.message
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
        moved = _call(to_device, (x, y), torch.device("cpu"), what="your device copy")
        if isinstance(moved, _Failed):
            return moved.message
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
        result = _adam_error(update, start, grads, lr=1e-2)
        if isinstance(result, _Failed):
            return float("inf"), result.message + f" (on {label})"
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
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
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


def capstone_problem(make_step: Callable, steps: int = 8) -> str | None:
    """Run the learner's fixed mystery step on the CPU: each step's batch must be real rows of the lab's
    dataset (``mystery.FeatureRows``), the batches distinct, and the model's weights must change."""
    import numpy as np

    from ..workloads import mystery, sync_stall

    width, batch, passes = mystery.sizes(torch.device("cpu"))
    base = mystery.FeatureRows(width, passes).table.copy()
    for _ in range(passes):  # each row's per-sample work, as FeatureRows does it
        base = np.tanh(base * 0.9 + 0.1)
    base_t = torch.from_numpy(base)
    with _threads_kept(), _first_inputs(width) as (seen, layers):
        step = _call(make_step, torch.device("cpu"), what="your step function")
        if isinstance(step, _Failed):
            return step.message
        first = None
        for i in range(steps):
            out = _call(step, i, what="your step")
            if isinstance(out, _Failed):
                return out.message
            if i == 0 and layers:
                first = [layers[0].weight.detach().clone()]
        end = [layers[0].weight.detach().clone()] if layers else None
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
    if foreign or distinct_batches < len(batches) or len(set(known)) < 0.75 * len(known):
        return (f"the data is missing: {distinct_batches} distinct batches in {steps} steps, {len(set(known))} distinct "
                f"dataset rows of {len(rows)}, {foreign} rows not from mystery.FeatureRows: the loop must train on "
                "new batches from the dataset each step, not one fixed batch")
    if first is None or end is None or all(torch.equal(a, b) for a, b in zip(first, end)):
        return ("the update is missing: the model's weights do not change over your steps; keep loss.backward(), "
                "opt.step() and opt.zero_grad() in the step")
    return None
