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

from .critical import critical_path, what_if
from .diagnosis import PATTERNS, Finding, diagnose, steady_state
from .errors import NoGPUError, TraceError
from .model import Trace
from .readers import load

__all__ = ["PATTERNS", "Finding", "NoGPUError", "Trace", "TraceError", "annotate", "capture", "critical_path", "diagnose",
           "load", "nsys_command", "steady_state", "track", "what_if"]


def __getattr__(name: str):  # profiling pulls in torch: import it only when asked for
    if name in ("annotate", "capture", "nsys_command", "track"):
        from . import profiling as _profiling

        return getattr(_profiling, name)
    raise AttributeError(f"module 'helpers' has no attribute {name!r}")
