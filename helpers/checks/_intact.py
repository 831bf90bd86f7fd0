"""Whether the course's own code is still the course's when a check runs.

A check compares the learner's work with the course's reference loop, times captures with the course's pace
probe and judges them with the course's metrics. A notebook that replaces one of those functions first
(``sync_stall.broken_step = my_step``, so the reference trains as the learner's step does;
``profiling.pace_probe = lambda: 1e3``, so any slower step is "explained" by a slow machine;
``behaviour.same_training_problem = lambda *a, **k: None``) would turn every such check into a pass.
:func:`tampered` finds a function of the course's modules (or a method of their classes, or the clock in
:mod:`time`) that is now code written outside the package: the engine (:func:`helpers.checks.exercise.judge`)
refuses to judge while one is in place. The course's own tests stand in for parts of it from their own folder
(``tests/``); that folder's code is the course's.

The limit, as for the signing state (:mod:`helpers.checks._proof`): this finds replaced functions, not every
way code in the same process can change another's behaviour.
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
from pathlib import Path
from typing import Any

from ..stamps import PACKAGE, TESTS, _inside  # the package and its tests (they stand in with functions of their own)

#: Clocks a timing reads, which must still be Python's own.
CLOCKS = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "process_time")


@functools.cache
def _libraries() -> tuple[Path, ...]:
    """Where Python and the installed libraries live (the standard library, site-packages)."""
    import sysconfig

    paths = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(Path(p).resolve() for p in paths if p)


def _course_or_library(path: str) -> bool:
    """Whether code in the file ``path`` is the course's (its package, its tests) or an installed library's."""
    return any(_inside(path, folder) for folder in (PACKAGE, TESTS, *_libraries()))


def _foreign(value: Any) -> bool:
    """Whether ``value`` is a function (or a callable object of a class) written outside the course's package and
    outside every installed library: code of a notebook or a script of the learner's."""
    from ..stamps import _is_learners

    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    elif isinstance(value, property):
        return any(_foreign(f) for f in (value.fget, value.fset) if f is not None)
    if isinstance(value, types.FunctionType):
        module = value.__module__ or "__main__"
        if not _is_learners(module):
            return False
        return not _course_or_library(value.__code__.co_filename)
    if isinstance(value, (type, types.ModuleType)) or not callable(value):
        return False
    kind = type(value)
    if not _is_learners(kind.__module__ or ""):
        return False
    call = inspect.getattr_static(kind, "__call__", None)
    code = getattr(call, "__code__", None)
    return code is None or not _course_or_library(code.co_filename)


def tampered() -> str | None:
    """The first function of the course's code (``module.name``) replaced by code written outside it, or None."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "helpers" or name.startswith("helpers.")):
            continue
        for attr, value in list(vars(module).items()):
            if _foreign(value):
                return f"{name}.{attr}"
            if isinstance(value, type) and value.__module__ == name:
                for method, inner in list(vars(value).items()):
                    if _foreign(inner):
                        return f"{name}.{attr}.{method}"
    import time

    for clock in CLOCKS:
        value = getattr(time, clock, None)
        if value is not None and not isinstance(value, types.BuiltinFunctionType):
            return f"time.{clock}"
    return None


def tampered_problem() -> str | None:
    """The line a check refuses with while the course's code is replaced, or None."""
    where = tampered()
    if where is None:
        return None
    owner = "Python's own" if where.startswith("time.") else "the course's"  # a clock is Python's, not the course's
    return (f"{where} is not {owner} any more: a function of yours replaced it in this kernel. The checks compare "
            "your work with the course's own code (its reference loops, its clock and pace probe, its measurements), so "
            "nothing is judged while it is replaced: restart the kernel (Kernel > Restart) and run the notebook without "
            "the replacement")

