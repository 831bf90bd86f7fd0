"""Conveniences for the lab notebooks: the track, recorded traces, and showing code.

Importing this module inside IPython/Jupyter makes the course's own errors (an unfinished
exercise, a failed check, a trace that cannot be read) show as one line instead of a traceback:
the checks' source, and so the expected answer, never appears. Other errors keep their traceback.

The labs choose their track automatically: ``gpu`` runs the loops live on a CUDA GPU, ``cpu``
replays GPU traces this project recorded (``data/manifest.json`` says how) and runs live only
what a CPU shows honestly.
"""

from __future__ import annotations

import inspect
import json
import sys
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import CheckFailed, NoGPUError, TraceError
from .model import Trace
from .readers import load

if TYPE_CHECKING:
    import pandas as pd

DATA = Path(__file__).resolve().parents[1] / "data"


class ExerciseNotDone(NotImplementedError):
    """An exercise's cell still holds its stub line (``raise course.ExerciseNotDone(N, ...)``).

    When the stub sits inside a function (``def make_loader(...)``), the error surfaces under the
    later cell that calls it, so the message names the function: the cell to edit is the one that
    defines it, not the one showing the message.
    """

    def __init__(self, number: int, todo: str = "your code", where: str | None = None) -> None:
        self.number, self.todo = number, todo
        self.where = _enclosing_function(sys._getframe(1)) if where is None else where
        super().__init__(not_done_text(number, todo, self.where))
        target = todo.split(" =")[0] if " =" in todo else ""
        if target.isidentifier():
            _UNFINISHED[target] = number
        _UNFINISHED[""] = number  # the last exercise that stopped a cell


def _enclosing_function(frame) -> str:  # noqa: ANN001 - a frame object
    """The top-level function whose body raised (``make_step`` for ``make_step.<locals>.step``), or ""
    when the raise line is at a cell's top level (then the message shows under that very cell)."""
    code = frame.f_code
    name = getattr(code, "co_qualname", code.co_name).split(".")[0]  # co_qualname: Python 3.11+
    return name if name.isidentifier() else ""


def not_done_text(number: int, todo: str = "your code", where: str = "") -> str:
    """The one line an unfinished exercise shows; ``where``: the function whose body holds its stub."""
    if where:
        return (f"Exercise {number} is not done yet: edit the cell that defines `{where}` (Exercise {number}, the cell "
                f"with `raise course.ExerciseNotDone({number}, ...)`), replace that raise line with {todo}, run that "
                "cell, then come back here with Run > Run Selected Cell and All Below.")
    return (f"Exercise {number} is not done yet: replace its raise line with {todo}, run that cell, "
            "then Run > Run Selected Cell and All Below.")


#: Variable an unfinished exercise should have set -> its number ("" -> the last one that stopped a cell).
_UNFINISHED: dict[str, int] = {}


def one_line(exc: BaseException) -> str | None:
    """The single line a course error shows in a notebook, or None for an error that keeps its traceback."""
    if isinstance(exc, ExerciseNotDone):
        return str(exc)
    if isinstance(exc, CheckFailed):
        return f"Check failed: {exc}"
    if isinstance(exc, (TraceError, NoGPUError)):
        return f"{type(exc).__name__}: {exc}"
    if isinstance(exc, NameError) and _UNFINISHED:
        name = getattr(exc, "name", None) or ""
        number = _UNFINISHED.get(name, _UNFINISHED[""])
        what = f"`{name}`" if name else "a name this cell uses"
        return (f"Exercise {number} is not done yet: {what} is set by the cell of Exercise {number} (the one with "
                f"`raise course.ExerciseNotDone({number}, ...)`): edit that cell, run it, then come back here with "
                "Run > Run Selected Cell and All Below.")
    return None


def _show_course_error(shell, etype, value, tb, tb_offset=None):  # noqa: ANN001 - IPython's handler signature
    line = one_line(value)
    if line is None:
        return shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    # _showtraceback sends an "error" message (ipykernel), so nbval and Run All still stop here.
    shell._showtraceback(etype, value, [f"\x1b[0;31m{line}\x1b[0m"])
    return None


def use_one_line_errors() -> bool:
    """Show course errors as one line in the running IPython shell (done on import); False outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc((ExerciseNotDone, CheckFailed, TraceError, NoGPUError, NameError), _show_course_error)
    return True


def track() -> str:
    """``"gpu"`` if torch sees a CUDA GPU, else ``"cpu"``."""
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def banner() -> str:
    """One line saying which track this notebook is on and why."""
    if track() == "gpu":
        import torch

        return f"GPU track: loops run live on {torch.cuda.get_device_name(0)}."
    return ("CPU track: no CUDA GPU here, so GPU timelines are replayed from traces recorded on an NVIDIA H200 "
            "(data/manifest.json), and the parts a CPU can show run live.")


@lru_cache(maxsize=1)
def manifest() -> list[dict]:
    path = DATA / "manifest.json"
    if not path.exists():
        raise TraceError(f"{path}: missing; the recorded traces ship with the repository: re-clone or git checkout data/")
    return json.loads(path.read_text())["traces"]


def entry(workload: str, variant: str, tag: str = "h200") -> dict:
    """The manifest entry of a recorded trace (how it was made and its measured step time)."""
    for e in manifest():
        if e["workload"] == workload and e["variant"] == variant and e["tag"] == tag:
            return e
    known = sorted({(e["workload"], e["variant"], e["tag"]) for e in manifest()})
    raise TraceError(f"no recorded trace for {workload}:{variant} ({tag}); recorded: {known}")


def measured(workload: str) -> pd.DataFrame:
    """Step times we measured for every variant of a workload (from data/manifest.json), slowest first."""
    import pandas as pd

    rows = [{k: e[k] for k in ("variant", "tag", "device", "step_ms", "command")} for e in manifest()
            if e["workload"] == workload and e.get("format") != "nsys-sqlite"]  # nsys step times run with nsys attached
    return pd.DataFrame(rows).sort_values(["tag", "step_ms"], ascending=[False, False]).reset_index(drop=True)


def recorded(workload: str, variant: str, tag: str = "h200") -> Trace:
    """Load a trace from ``data/`` (recorded on the H200 unless ``tag`` says otherwise)."""
    return load(DATA / entry(workload, variant, tag)["file"])


def recorded_pair(workload: str, variant: str, tag: str = "h200") -> dict[str, Trace]:
    """The two traces of one recorded run: ``{"nsys": <SQLite export>, "profiler": <PyTorch-profiler trace>}``
    (data/manifest.json's "recordings": the same command and seed, one process each, one device session)."""
    recordings = json.loads((DATA / "manifest.json").read_text()).get("recordings", [])
    files = {"nsys" if e["format"] == "nsys-sqlite" else "profiler": e["file"] for e in recordings
             if (e["workload"], e["variant"], e["tag"]) == (workload, variant, tag)}
    if set(files) != {"nsys", "profiler"}:
        known = sorted({(e["workload"], e["variant"], e["tag"]) for e in recordings})
        raise TraceError(f"no recorded nsys/profiler pair for {workload}:{variant} ({tag}); recorded: {known}")
    return {side: load(DATA / f) for side, f in files.items()}


def show(obj: object) -> object:
    """Display a function's or class's source with syntax highlighting (plain text outside Jupyter)."""
    source = inspect.getsource(obj)  # type: ignore[arg-type]
    try:
        from IPython.display import Code

        return Code(source, language="python")
    except ImportError:
        return source


def shipped_nsys_export(workload: str, variant: str) -> Trace:
    """The Nsight Systems SQLite export of ``workload:variant`` recorded on the H200 (``"format": "nsys-sqlite"``)."""
    return load(DATA / nsight_entry(workload, variant)["file"])


def shipped_ncu_entries() -> list[dict]:
    """Manifest entries of nsys exports that carry an Nsight Compute CSV of their top kernel (``"ncu_csv"``)."""
    return [e for e in manifest() if e.get("format") == "nsys-sqlite" and e.get("ncu_csv")]


def nsight_entry(workload: str, variant: str) -> dict:
    """The manifest entry of a shipped Nsight Systems export (``"format": "nsys-sqlite"``)."""
    for e in manifest():
        if e.get("format") == "nsys-sqlite" and e["workload"] == workload and e["variant"] == variant:
            return e
    known = sorted((e["workload"], e["variant"]) for e in manifest() if e.get("format") == "nsys-sqlite")
    raise TraceError(f"no shipped Nsight Systems export of {workload}:{variant}; shipped: {known}")


def nsight_text(workload: str, variant: str, key: str) -> str:
    """A file shipped with an nsys export, as text (``key``: ``"nsys_stats"``, ``"nsys_analyze"``, ``"ncu_csv"``)."""
    e = nsight_entry(workload, variant)
    if key not in e:
        raise TraceError(f"the manifest entry of {workload}:{variant}'s nsys export has no {key!r} file")
    return (DATA / e[key]).read_text()


use_one_line_errors()
