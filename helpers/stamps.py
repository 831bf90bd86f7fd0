"""Where a trace was made: a stamp on every trace and table this kernel makes, naming how and of what loop.

The tools that make traces here register each file they write, with how it was made:
:func:`helpers.capture` (the PyTorch profiler), :func:`helpers.workloads.communication.run` (each rank's
trace), :func:`helpers.profiling.run_nsys` (the SQLite export) and :func:`helpers.profiling.run_ncu` (its
CSV, as the table it returns). :func:`helpers.load` stamps a trace whose files were all registered here:
the stamp holds how it was made and a token over it and the trace's events, made with this process's
secret, so a trace loaded from any other file (a recording copied out of ``data/``, another kernel's
capture) carries none, and a stamp copied onto other events does not match them.

How a step was made is described by :func:`describe_step`: the digest of the step function's code, the
course's workloads (``helpers.workloads.<name>``) its code and closures reach, and the digests of the
functions it reaches that are not the course's, torch's or Python's own (the learner's code). The checks
(:mod:`helpers.checks.provenance`) hold each input of an exercise to what its record asks.

Torch-free: the readers call :func:`stamp_if_made` on every trace they load.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
import os
import secrets
import sys
import types
from pathlib import Path
from typing import Any

from .model import Trace

#: This process's stamp secret (never written anywhere).
_SECRET = secrets.token_bytes(32)
#: SHA-256 of each file a tool made in this process -> how it was made.
_MADE: dict[str, dict] = {}
#: The file names a folder of rank traces holds (what helpers.load reads from a folder).
_TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")
#: Modules whose functions are not the learner's: the course's own, torch's, the scientific stack's.
_NOT_LEARNER = ("helpers", "torch", "numpy", "pandas", "nvtx", "functools", "builtins", "typing", "contextlib",
                "collections", "itertools", "operator", "threading", "multiprocessing", "abc", "copy", "math")


def events_digest(trace: Trace) -> str:
    """A content digest of a trace's events (names, kinds, times, ranks): changes when the events are swapped."""
    import pandas as pd

    ev = trace.events[[c for c in ("name", "kind", "start_us", "dur_us", "rank") if c in trace.events.columns]]
    return hashlib.sha256(pd.util.hash_pandas_object(ev, index=False).to_numpy().tobytes()).hexdigest()


def file_digest(path: str | os.PathLike) -> str | None:
    from .errors import TraceError
    from .outputs import open_regular

    h = hashlib.sha256()
    try:
        with open_regular(path) as fh:  # a trace's path swapped for a pipe cannot block the digest
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except (OSError, TraceError):
        return None
    return h.hexdigest()


#: The course's package and its own tests: the code allowed to stamp (and, for helpers.checks._intact, the code
#: that may stand in for the course's functions).
PACKAGE = Path(__file__).resolve().parent
TESTS = PACKAGE.parent / "tests"


def _inside(path: str, folder: Path) -> bool:
    try:
        return Path(path).resolve().is_relative_to(folder)
    except (OSError, ValueError):
        return False


def _course_only(what: str) -> None:
    """Refuse a call of ``what`` made by code outside the course's package (and its tests): a notebook that stamps a
    trace, or registers a file, as made here would forge the provenance every check reads. The course's tools call
    these; nothing else needs to."""
    caller = sys._getframe(2).f_code.co_filename  # the function that called stamp/made: the course's, or not
    if not (_inside(caller, PACKAGE) or _inside(caller, TESTS)):
        from .errors import TraceError

        raise TraceError(f"helpers.stamps.{what} is called by the course's own tools only (helpers.capture, "
                         "communication.run, run_nsys, run_ncu): capture your loop with them; a stamp put on by other "
                         "code earns nothing")


def made(path: str | os.PathLike, how: dict) -> None:
    """Register the file at ``path`` as made in this process, ``how`` (``{"by": "capture", ...}``)."""
    _course_only("made")
    digest = file_digest(path)
    if digest is not None:
        _MADE[digest] = dict(how)


def _token(digest: str, how: dict) -> str:
    payload = digest + "\x1f" + json.dumps(how, sort_keys=True, default=str)
    return hmac.new(_SECRET, payload.encode(), "sha256").hexdigest()


def stamp(trace: Trace, how: dict) -> Trace:
    """Put the stamp of ``how`` on ``trace`` (in its metadata), over its events as they are now."""
    _course_only("stamp")
    digest = events_digest(trace)
    trace.metadata["capture"] = {"digest": digest, "how": dict(how), "token": _token(digest, dict(how))}
    return trace


def stamp_of(trace: Any) -> dict | None:
    """How ``trace`` was made in this process, if its stamp is this process's and its events unchanged since."""
    meta = getattr(trace, "metadata", None)
    st = meta.get("capture") if isinstance(meta, dict) else None
    if not isinstance(st, dict) or not isinstance(st.get("token"), str) or not isinstance(st.get("how"), dict):
        return None
    try:
        want = _token(events_digest(trace), st["how"])
    except Exception:  # noqa: BLE001 - events too damaged to digest carry no stamp
        return None
    return dict(st["how"]) if hmac.compare_digest(st["token"], want) else None


def _files_of(source: str) -> list[Path]:
    p = Path(source)
    try:
        if p.is_dir():
            return sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(_TRACE_SUFFIXES))
        return [p] if p.is_file() else []
    except OSError:
        return []


def stamp_if_made(trace: Trace) -> Trace:
    """``trace`` stamped when every file it was read from was made in this process (else as it is)."""
    if not _MADE or not trace.source:
        return trace
    files = _files_of(trace.source)
    hows = [_MADE.get(file_digest(f) or "") for f in files]
    if not files or any(h is None for h in hows):
        return trace
    first = dict(hows[0])
    if any(h != first for h in hows[1:]):  # a folder mixing runs: not one thing made here
        return trace
    return stamp(trace, first)


# --- tables (Nsight Compute) --------------------------------------------------------------------
def _table_digest(df: Any) -> str:
    return hashlib.sha256(df.to_csv(index=False).encode("utf-8", "replace")).hexdigest()


def stamp_table(df: Any, how: dict) -> Any:
    """Stamp a table (a DataFrame) this process made, e.g. run_ncu's, in its ``attrs``."""
    _course_only("stamp_table")
    digest = _table_digest(df)
    df.attrs["made"] = {"how": dict(how), "token": _token(digest, dict(how))}
    return df


def table_stamp_of(df: Any) -> dict | None:
    attrs = getattr(df, "attrs", None)
    st = attrs.get("made") if isinstance(attrs, dict) else None
    if not isinstance(st, dict) or not isinstance(st.get("token"), str) or not isinstance(st.get("how"), dict):
        return None
    try:
        want = _token(_table_digest(df), st["how"])
    except Exception:  # noqa: BLE001
        return None
    return dict(st["how"]) if hmac.compare_digest(st["token"], want) else None


def table_digest(df: Any) -> str | None:
    try:
        return _table_digest(df)
    except Exception:  # noqa: BLE001 - not a table
        return None


# --- what a step function is --------------------------------------------------------------------
def _code_text(fn: Any) -> str:
    try:
        from .sources import getsource

        return getsource(fn)
    except (OSError, TypeError):
        code = fn if isinstance(fn, types.CodeType) else getattr(fn, "__code__", None)
        return repr((code.co_code, code.co_consts)) if code is not None else type(fn).__qualname__


def _referenced(fn: types.FunctionType) -> list[Any]:
    """What a function's code can reach besides its arguments: its closure's values, its defaults and the globals
    its code names."""
    out: list[Any] = [c.cell_contents for c in (fn.__closure__ or ()) if _has_contents(c)]
    out += list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
    g = fn.__globals__
    return out + [g[n] for n in _names(fn.__code__) if n in g]


def _is_learners(module: str) -> bool:
    top = module.split(".", 1)[0]
    return bool(module) and top not in _NOT_LEARNER and top not in getattr(sys, "stdlib_module_names", ())


def describe_step(fn: Any, limit: int = 400) -> dict:
    """What ``fn`` (a training step, or a function the ranks run) is made of: ``step`` (a digest of its
    code and of everything below), ``workloads`` (the course's ``helpers.workloads`` modules its code,
    closures and defaults reach, or whose objects they hold) and ``learner`` (digests of the functions it
    reaches that are not the course's, torch's or Python's)."""
    workloads: set[str] = set()
    learner: set[str] = set()
    loaders: list[dict] = []
    held: dict[int, tuple[Any, str]] = {}  # id -> (the object, kept alive while its id is a key; what it says)
    seen: set[int] = set()
    todo: list[tuple[Any, int]] = [(fn, 0)]
    parts: list[str] = []
    while todo and len(seen) < limit:
        obj, depth = todo.pop()
        if id(obj) in seen or depth > 6:
            continue
        seen.add(id(obj))
        if isinstance(obj, types.ModuleType):
            if obj.__name__.startswith("helpers.workloads."):
                workloads.add(obj.__name__.rsplit(".", 1)[1])
            continue
        if isinstance(obj, types.MethodType):
            todo += [(obj.__func__, depth), (obj.__self__, depth + 1)]
            continue
        if isinstance(obj, types.FunctionType):
            module = obj.__module__ or "__main__"  # code exec'd without a module name is a notebook's, like __main__'s
            text = _code_text(obj)
            parts.append(f"{module}:{obj.__qualname__}:{hashlib.sha256(text.encode('utf-8', 'replace')).hexdigest()}")
            if module.startswith("helpers.workloads."):
                workloads.add(module.split(".")[2])
            elif _is_learners(module):
                learner.add(hashlib.sha256(text.encode("utf-8", "replace")).hexdigest())
            else:  # the course's tools, torch, Python: what they call is not the step's own
                continue
            nxt = _referenced(obj)
            for value in nxt:  # each object once, however many of the step's functions hold it
                if id(value) not in held and len(held) < 64 and (what := _held(value)):
                    held[id(value)] = (value, what)
            if hasattr(obj, "__wrapped__"):
                nxt.append(obj.__wrapped__)
            todo += [(o, depth + 1) for o in nxt if _worth(o)]
            continue
        if hasattr(obj, "func") and callable(getattr(obj, "func", None)) and hasattr(obj, "args"):  # functools.partial
            todo += [(obj.func, depth)] + [(a, depth + 1) for a in (*obj.args, *obj.keywords.values()) if _worth(a)]
            continue
        if isinstance(obj, (list, tuple, set, frozenset)):
            todo += [(o, depth + 1) for o in list(obj)[:64] if _worth(o)]
            continue
        if isinstance(obj, dict):
            todo += [(o, depth + 1) for o in list(obj.values())[:64] if _worth(o)]
            continue
        module = getattr(type(obj), "__module__", "") or ""
        if module.startswith("helpers.workloads."):  # an object the workload made (its model, dataset, loader)
            workloads.add(module.split(".")[2])
        elif isinstance(obj, type) and (obj.__module__ or "").startswith("helpers.workloads."):
            workloads.add(obj.__module__.split(".")[2])
        if _is_learners(module) and not isinstance(obj, type):  # an instance of the learner's class: its methods
            todo += [(v, depth + 1) for v in vars(type(obj)).values() if isinstance(v, types.FunctionType)]
        if isinstance(obj, type) or not (module.startswith(("helpers.workloads.", "torch.utils.data")) or _is_learners(module)):
            continue
        if hasattr(obj, "dataset") and hasattr(obj, "batch_size") and len(loaders) < 16:
            loaders.append(_loader_signature(obj))
        for attr in ("dataset", "collate_fn", "worker_init_fn", "forward"):  # a DataLoader's parts, a module's forward
            value = getattr(obj, attr, None)
            if value is not None and _worth(value):
                todo.append((value, depth + 1))
    step = hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()
    return {"step": step, "workloads": sorted(workloads), "learner": sorted(learner), "entry": _entry(fn), "entry_name": _entry_name(fn),
            "loaders": loaders, "holds": sorted(what for _, what in held.values())}


def _held(obj: Any) -> str:
    """What one value a step's code holds says about the work it does: a tensor's shape and dtype, a model's class and
    parameter count, an optimizer's class, learning rate and parameter count; '' for anything else. The fix checks
    compare them with the loop as first written's (:func:`helpers.checks.provenance.same_setup_problem`): a fix timed
    on smaller batches, a smaller model or another learning rate is another loop."""
    torch = sys.modules.get("torch")
    if torch is None:
        return ""
    try:
        if isinstance(obj, torch.Tensor):
            return f"tensor {tuple(obj.shape)} {str(obj.dtype).replace('torch.', '')}"
        if isinstance(obj, torch.nn.Module):
            return f"model {type(obj).__name__} {sum(p.numel() for p in obj.parameters())} parameters"
        if isinstance(obj, torch.optim.Optimizer):
            groups = obj.param_groups
            lrs = sorted({float(g["lr"]) for g in groups if "lr" in g})
            n = sum(p.numel() for g in groups for p in g["params"])
            return f"optimizer {type(obj).__name__} lr {','.join(f'{lr:g}' for lr in lrs)} {n} parameters"
    except Exception:  # noqa: BLE001 - an object that cannot be read says nothing
        return ""
    return ""


def _loader_signature(loader: Any) -> dict:
    """What a loader the step holds feeds it: its class, its dataset's class, length and scalar settings (an image
    size, a number of passes), its batch size and worker processes. The fix checks compare it with the loop as first
    written's: a capture of a loop fed from a smaller or cheaper dataset, or smaller batches, is another loop."""
    def name(kind: type) -> str:
        return f"{kind.__module__}.{kind.__qualname__}"

    dataset = getattr(loader, "dataset", None)
    try:
        length = len(dataset)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - an iterable dataset has no length
        length = -1
    settings = {k: v for k, v in (getattr(dataset, "__dict__", None) or {}).items()
                if type(v) in (int, float, bool, str) and not k.startswith("_")}
    workers = getattr(loader, "num_workers", None)
    batch = getattr(loader, "batch_size", None)
    return {"type": name(type(loader)), "dataset": name(type(dataset)), "length": length,
            "settings": dict(sorted(settings.items())), "batch_size": batch if type(batch) is int else None,
            "workers": workers if type(workers) is int else None}


def _unwrap_step(fn: Any) -> Any:
    """The Python function a call of ``fn`` runs first: through functools.partial, bound methods and a callable
    object's ``__call__`` (a few levels at most)."""
    for _ in range(8):
        if isinstance(fn, types.FunctionType):
            return fn
        if isinstance(fn, types.MethodType):
            fn = fn.__func__
        elif hasattr(fn, "func") and callable(getattr(fn, "func", None)) and hasattr(fn, "args"):  # functools.partial
            fn = fn.func
        elif callable(fn) and not isinstance(fn, type) and isinstance(inspect.getattr_static(type(fn), "__call__", None), types.FunctionType):
            fn = type(fn).__call__
        else:
            return None
    return None


def _code_digest(code: types.CodeType) -> str:
    """The digest :func:`describe_step` gives a learner function of this code (its source text's, as ``learner``)."""
    return hashlib.sha256(_code_text(code).encode("utf-8", "replace")).hexdigest()


def _entry(fn: Any) -> str:
    """The digest of the learner's function a capture of ``fn`` calls each step ('' where that is the course's,
    torch's or Python's code): which of the learner's functions the traced loop is (:func:`step_codes`)."""
    inner = _unwrap_step(fn)
    if inner is None or not _is_learners(inner.__module__ or "__main__"):
        return ""
    return _code_digest(inner.__code__)


def _entry_name(fn: Any) -> str:
    """The name of the learner's function a capture of ``fn`` calls each step (``my_step.<locals>.step``), or '':
    what a refusal names when a capture is of another step than the one a check judged."""
    inner = _unwrap_step(fn)
    if inner is None or not _is_learners(inner.__module__ or "__main__"):
        return ""
    return str(getattr(inner, "__qualname__", "") or "")[:200]


def step_codes(fn: Any) -> set[str]:
    """The digests of every learner function ``fn`` can hand back as a step, or is: ``fn`` itself, the functions
    and lambdas defined inside it, and the learner's functions, classes' methods and their inner functions that
    its code reaches (:func:`describe_step`'s walk). A capture's ``entry`` among them is a capture of a step
    ``fn`` made (``my_step(...)``'s inner ``step``), not of some other loop of the learner's."""
    out: set[str] = set()
    todo: list[Any] = [fn]
    seen: set[int] = set()
    while todo and len(seen) < 400:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, types.CodeType):
            out.add(_code_digest(obj))
            todo += [c for c in obj.co_consts if isinstance(c, types.CodeType)]
            continue
        if isinstance(obj, type):
            if _is_learners(obj.__module__ or ""):
                todo += [v for v in vars(obj).values() if isinstance(v, (types.FunctionType, staticmethod, classmethod))]
            continue
        if isinstance(obj, (staticmethod, classmethod)):
            todo.append(obj.__func__)
            continue
        inner = _unwrap_step(obj)
        if inner is None or not _is_learners(inner.__module__ or "__main__"):
            continue
        todo.append(inner.__code__)
        todo += [o for o in _referenced(inner) if callable(o) or isinstance(o, type)]
    return out


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _names(code: types.CodeType) -> set[str]:
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return out


def _worth(obj: Any) -> bool:
    """Whether following ``obj`` can reach code (numbers, strings, tensors and arrays cannot)."""
    if obj is None or isinstance(obj, (str, bytes, int, float, complex, bool)):
        return False
    module = getattr(type(obj), "__module__", "") or ""
    return not (module.startswith(("torch", "numpy")) and not callable(obj) and not hasattr(obj, "dataset"))
