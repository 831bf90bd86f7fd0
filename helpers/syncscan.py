"""A static scan of a training-loop function for calls that force a CPU-GPU synchronization.

Works on any machine (no GPU needed): it reads the function's source, so it can only say
"this line may sync". On a GPU, :func:`helpers.profiling.find_syncs_live` confirms which do.

A call under a test like ``if (i + 1) % LOG_EVERY == 0:`` runs once every N steps, not every step:
the scan still lists it, with ``every_step=False`` (one sync every N steps is the fix, not the bug).
"""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import sources
from .errors import TraceError

if TYPE_CHECKING:
    import pandas as pd

SYNCING_METHODS = {
    "item": "copies one value to the host and waits for the GPU",
    "cpu": "copies a tensor to the host and waits for the GPU",
    "numpy": "needs the tensor on the host, so it waits for the GPU",
    "tolist": "copies the tensor to the host and waits for the GPU",
    "synchronize": "waits until all queued GPU work has finished",
    "nonzero": "its output size depends on the data, so it waits for the GPU",
}
SYNCING_BUILTINS = {
    "print": "formatting a GPU tensor copies it to the host and waits for the GPU",
    "float": "float(tensor) reads the value on the host and waits for the GPU",
    "int": "int(tensor) reads the value on the host and waits for the GPU",
    "bool": "bool(tensor) reads the value on the host and waits for the GPU",
}


@dataclass(frozen=True)
class SyncSite:
    line: int  # line number in the function's file
    code: str  # the source line
    call: str  # what was called
    why: str
    every_step: bool = True  # False when it sits under a periodic test (``if i % N == 0:``)


def scan_source(source: str, first_line: int = 1) -> list[SyncSite]:
    """Possible sync points in a piece of Python source."""
    source = textwrap.dedent(source)
    tree = ast.parse(source)
    lines = source.splitlines()
    sites: list[SyncSite] = []
    periodic: set[int] = set()  # ids of nodes under a periodic ``if``
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_periodic(node.test):
            for child in node.body:
                periodic.update(id(n) for n in ast.walk(child))
    for node in ast.walk(tree):
        call, why = _classify(node)
        if call:
            lineno = node.lineno  # type: ignore[attr-defined]
            sites.append(SyncSite(lineno + first_line - 1, lines[lineno - 1].strip(), call, why, id(node) not in periodic))
    return sorted(set(sites), key=lambda s: (s.line, s.call))


def every_step(sites: list[SyncSite]) -> list[SyncSite]:
    """The sites that run on every step (not under a periodic ``if i % N == 0:``)."""
    return [s for s in sites if s.every_step]


def scan(fn: Callable) -> list[SyncSite]:
    """Possible sync points in a function (or method) given as an object."""
    try:
        file = inspect.getsourcefile(fn) or inspect.getfile(fn)
    except TypeError:
        raise TraceError(f"{fn!r}: not a Python function with source code; pass the function itself") from None
    if file and os.path.exists(file) and not os.path.isfile(file):  # a FIFO or device would hang or fill memory
        raise TraceError(f"{file}: the source of {getattr(fn, '__name__', fn)} is not a regular file; define it in a .py file")
    try:
        source, first = sources.getsourcelines(fn)  # read never blocking: a file swapped for a pipe since the check
    except OSError as exc:
        raise TraceError(f"{getattr(fn, '__name__', fn)}: its source cannot be read ({exc}); define it in a file or cell") from None
    return scan_source("".join(source), first)


def _classify(node: ast.AST) -> tuple[str, str]:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in SYNCING_METHODS:
            return f".{f.attr}()", SYNCING_METHODS[f.attr]
        if isinstance(f, ast.Name) and f.id in SYNCING_BUILTINS and node.args:
            if f.id == "print" and all(isinstance(a, ast.Constant) for a in node.args):
                return "", ""
            return f"{f.id}()", SYNCING_BUILTINS[f.id]
    if isinstance(node, (ast.If, ast.While)) and _compares_values(node.test):
        return "if <tensor>", "branching on a GPU value reads it on the host and waits for the GPU"
    return "", ""


def _is_periodic(test: ast.AST) -> bool:
    """True for ``(i + 1) % N == 0``, ``step % LOG_EVERY == 0`` and the like (a modulo compared with a constant)."""
    if isinstance(test, ast.BoolOp):
        return any(_is_periodic(v) for v in test.values)
    if isinstance(test, ast.Compare) and len(test.comparators) == 1:
        sides = [test.left, test.comparators[0]]
        mod = any(isinstance(o, ast.BinOp) and isinstance(o.op, ast.Mod) for o in sides)
        const = any(isinstance(o, ast.Constant) for o in sides)
        return mod and const and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
    return False


def _compares_values(test: ast.AST) -> bool:
    """True for tests like ``loss > 10`` or ``torch.isnan(x).any()`` (not ``i % 10 == 0``)."""
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr in ("any", "all"):
        return True
    if isinstance(test, ast.Compare):
        operands = [test.left, *test.comparators]
        loopish = {"i", "step", "epoch", "it", "n"}
        names = [o.id for o in operands if isinstance(o, ast.Name)]
        has_arith = any(isinstance(o, ast.BinOp) for o in operands)
        return bool(names) and not has_arith and not set(names) <= loopish
    return False


def backtrace_sites(summary: dict) -> pd.DataFrame:
    """Each synchronizing CUDA call of an Nsight Systems backtrace summary (``{"calls": [{"call", "frames"}]}``, the
    JSON ``tools/record_callsites.py`` writes from a report taken with ``--cudabacktrace=sync``), by the PyTorch
    operator it ran in and who called that operator: one row per (call, operator, caller) with its count.

    The frames are native, innermost first. The operator is the outermost ``at::_ops::NAME::call`` frame (the one
    Python or autograd asked for; the ops inside it are its own steps); the caller is autograd's engine (a backward
    function, no Python frame above it), the Python binding that entered PyTorch (``THPVariable_item``...), or
    ``"(native)"``. The summary holds no Python file:line: the sync debug mode gives that.
    """
    import re

    import pandas as pd

    calls = summary.get("calls") if isinstance(summary, dict) else None
    if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("frames"), list) for c in calls):
        raise TraceError("backtrace_sites(): give the backtrace summary's dict: {'calls': [{'call': ..., 'frames': [...]}]}")
    rows = []
    for c in calls:
        frames = [str(f) for f in c["frames"]]
        ops = [m.group(1) for f in frames if (m := re.match(r"at::_ops::(\w+)::call\b", f))]
        backward = next((m.group(1) for f in frames if (m := re.search(r"generated::(\w+Backward\d*)", f))), None)
        binding = next((m.group(1) for f in frames
                        if (m := re.match(r"(?:torch::autograd::)?(THP\w+|THCP\w+)\(", f))), None)
        caller = f"autograd engine ({backward})" if backward else (binding or "(native)")
        rows.append({"call": str(c.get("call", "?")), "operator": ops[-1] if ops else "(none)", "caller": caller})
    if not rows:
        return pd.DataFrame(columns=["call", "operator", "caller", "count"])
    table = pd.DataFrame(rows).value_counts(sort=False).rename("count").reset_index()
    return table.sort_values("count", ascending=False, kind="stable").reset_index(drop=True)
