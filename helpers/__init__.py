"""Find and fix training-loop bottlenecks on a GPU timeline.

Layers (each usable on its own):

* load:     :func:`load` reads a PyTorch-profiler trace, a folder of per-rank traces or an
            Nsight Systems SQLite export into a :class:`Trace` (see :mod:`helpers.model`).
* analyze:  :mod:`helpers.metrics` (pure functions of a Trace), :func:`critical_path` and :func:`what_if`
            (:mod:`helpers.critical`), and :func:`diagnose`.
* render:   :mod:`helpers.plots` (functions that return matplotlib Figures) and the CLI.
* capture:  :func:`annotate`, :func:`capture`, :func:`nsys_command` (in :mod:`helpers.profiling`) and :mod:`helpers.workloads`.
"""

from __future__ import annotations

import importlib

from .errors import NoGPUError, TraceError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read this name the same)
if TYPE_CHECKING:
    from .critical import critical_path, what_if
    from .diagnosis import PATTERNS, Finding, diagnose, steady_state
    from .model import Trace
    from .profiling import annotate, capture, nsys_command, track
    from .readers import load

__all__ = ["PATTERNS", "Finding", "NoGPUError", "Trace", "TraceError", "annotate", "capture", "critical_path", "diagnose",
           "load", "nsys_command", "steady_state", "track", "what_if"]

# Imported when first asked for: ``python -m helpers`` takes charge of Ctrl-C before pandas and numpy load
# (a second or so in which a signal would otherwise print a traceback), and profiling pulls in torch.
_HOME = {"critical_path": "critical", "what_if": "critical", "PATTERNS": "diagnosis", "Finding": "diagnosis",
         "diagnose": "diagnosis", "steady_state": "diagnosis", "Trace": "model", "load": "readers", "annotate": "profiling", "capture": "profiling",
         "nsys_command": "profiling", "track": "profiling"}


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is not None:
        value = getattr(importlib.import_module(f".{home}", __name__), name)
        globals()[name] = value
        return value
    if not name.startswith("_"):  # a submodule: helpers.metrics, helpers.plots, ...
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module 'helpers' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
