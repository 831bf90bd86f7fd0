"""Conveniences for the lab notebooks: the track, recorded traces, and showing code.

Importing this module inside IPython/Jupyter makes the course's own errors (an unfinished
exercise, a failed check, a trace that cannot be read) show as one line instead of a traceback:
the checks' source, and so the expected answer, never appears. Other errors keep their traceback.

The labs choose their track automatically: ``gpu`` runs the loops live on a CUDA GPU, ``cpu``
replays GPU traces this project recorded (``data/manifest.json`` says how) and runs live only
what a CPU shows honestly.
"""

from __future__ import annotations

import ast
import linecache
import sys
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import CheckFailed, NoGPUError, TraceError
from .model import Trace
from .outputs import SHIPPED_LIMIT, read_regular, shipped_json
from .readers import load
from .sources import getsource

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
        names = _stopped_cell_names(sys._getframe(1))
        if target.isidentifier():
            names.add(target)
        for name in names:  # the names this stop left unset: a later NameError on one of them blames this exercise
            _UNFINISHED[name] = (number, self.where)


def _user_namespace() -> dict | None:
    """The running IPython shell's user namespace (where a notebook's cells run), or None outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return None if shell is None else shell.user_ns


def _stopped_cell_names(frame) -> set[str]:  # noqa: ANN001 - a frame object
    """The names the notebook cell running ``frame`` binds at its top level (its source parsed, never run).

    The cell is the outermost frame executing module code in the shell's user namespace; a stub inside a
    function (Exercise 2's ``train_step``) stops the later cell that calls it, and it is that cell whose names
    stay unset. Empty outside IPython or when the cell's source cannot be read.
    """
    user_ns = _user_namespace()
    if user_ns is None:
        return set()
    cell = None
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is user_ns:
            cell = frame
        frame = frame.f_back
    if cell is None:
        return set()
    return cell_bindings("".join(linecache.getlines(cell.f_code.co_filename)))


def cell_bindings(source: str) -> set[str]:
    """Names a cell's source binds at its top level: assignments, imports, defs, for/with targets."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    own_scope = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
                 ast.DictComp, ast.GeneratorExp)

    def stores(node: ast.AST) -> None:  # names a statement's own expressions bind (not its nested statements)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.stmt, *own_scope)):
                continue
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                names.add(child.id)
            stores(child)

    def visit(nodes: list) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
            else:
                stores(node)
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    visit(getattr(node, field, []))
                if isinstance(node, ast.ExceptHandler) and node.name:
                    names.add(node.name)

    visit(tree.body)
    return names


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


#: Name an unfinished exercise left unset -> (that exercise's number, the function holding its stub or ""): its stub's target, and every name the cell
#: it stopped binds at top level (read from that cell's source). Names no stop left unset are not guessed at.
_UNFINISHED: dict[str, tuple[int, str]] = {}


def one_line(exc: BaseException) -> str | None:
    """The single line a course error shows in a notebook, or None for an error that keeps its traceback."""
    if isinstance(exc, ExerciseNotDone):
        return str(exc)
    if isinstance(exc, CheckFailed):
        return f"Check failed: {exc}"
    if isinstance(exc, (TraceError, NoGPUError)):
        return f"{type(exc).__name__}: {exc}"
    if isinstance(exc, NameError) and not _raised_in_helpers(exc):
        name = getattr(exc, "name", None) or ""
        if name in _UNFINISHED:
            number, where = _UNFINISHED[name]
            stub = f"`{where}` still raises" if where else f"its cell still holds `raise course.ExerciseNotDone({number}, ...)`"
            return (f"Exercise {number} is not done yet: `{name}` is set by a cell that stopped there ({stub}): "
                    f"finish Exercise {number}, run its cell, then come back here with Run > Run Selected Cell and "
                    "All Below.")
        if name:
            return (f"NameError: name `{name}` is not defined: no cell run in this kernel has set it. Check its "
                    "spelling; if a cell above sets it, run the cells above (Run > Run All Above Selected Cell).")
    return None


def _raised_in_helpers(exc: BaseException) -> bool:
    """Whether the error's innermost frame is this package's code: a real bug there keeps its traceback."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(Path(__file__).parent)


def _show_course_error(shell, etype, value, tb, tb_offset=None):  # noqa: ANN001 - IPython's handler signature
    line = one_line(value)
    if line is None:
        return shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    # _showtraceback sends an "error" message (ipykernel), so nbval and Run All still stop here.
    shell._showtraceback(etype, value, [f"\x1b[0;31m{text}\x1b[0m" for text in shown_lines(line)])
    return None


#: The width a course error is wrapped to in a notebook: JupyterLab breaks an error's line wider than its output
#: area anywhere, mid-word (word-break: break-all). 76 characters of its 13 px monospace fit an 800 px window with the
#: file browser closed (about 78 there; 107 at 1280 px with it open), seen in headless Chromium on 2026-12-05.
SHOWN_WIDTH = 76


def shown_lines(line: str, width: int = SHOWN_WIDTH) -> list[str]:
    """A course error's line as a notebook shows it: wrapped between words at ``width``, and a check's problems
    (joined by `` | ``) one to a line, each a bullet, so a message of three problems reads as three."""
    import textwrap

    head, *problems = line.split(" | ")
    lead, sep, first = head.partition("Not yet: ")
    if problems and sep:  # "Check failed: Not yet: A | B | C." -> the header, then one bullet a problem
        head, problems = (lead + sep).rstrip(), [first, *problems]
    out = textwrap.wrap(head, width, break_long_words=False, break_on_hyphens=False) or [head]
    for p in problems:
        out += textwrap.wrap(p, width, initial_indent="  - ", subsequent_indent="    ", break_long_words=False,
                             break_on_hyphens=False)
    return out


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


def manifest() -> list[dict]:
    """The recorded traces' entries (data/manifest.json): the caller's copy, so an edit of it (an entry's file
    changed, an entry dropped) never changes what recorded() and the checks read next."""
    import copy

    return copy.deepcopy(_manifest())


@lru_cache(maxsize=1)
def _manifest() -> list[dict]:
    path = DATA / "manifest.json"
    if not path.exists():
        raise TraceError(f"{path}: missing; the recorded traces ship with the repository: re-clone or git checkout data/")
    return shipped_json(path)["traces"]


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
    if not rows:
        known = sorted({e["workload"] for e in manifest()})
        raise TraceError(f"measured(): no workload {workload[:60]!r}; the workloads: {', '.join(known)}")
    return pd.DataFrame(rows).sort_values(["tag", "step_ms"], ascending=[False, False]).reset_index(drop=True)


def recorded(workload: str, variant: str, tag: str = "h200") -> Trace:
    """Load a trace from ``data/`` (recorded on the H200 unless ``tag`` says otherwise)."""
    return load(DATA / entry(workload, variant, tag)["file"])


def recorded_pair(workload: str, variant: str, tag: str = "h200") -> dict[str, Trace]:
    """The two traces of one recorded run: ``{"nsys": <SQLite export>, "profiler": <PyTorch-profiler trace>}``
    (data/manifest.json's "recordings": the same command and seed, one process each, one device session)."""
    recordings = shipped_json(DATA / "manifest.json").get("recordings", [])
    files = {"nsys" if e["format"] == "nsys-sqlite" else "profiler": e["file"] for e in recordings
             if (e["workload"], e["variant"], e["tag"]) == (workload, variant, tag)}
    if set(files) != {"nsys", "profiler"}:
        known = sorted({(e["workload"], e["variant"], e["tag"]) for e in recordings})
        raise TraceError(f"no recorded nsys/profiler pair for {workload}:{variant} ({tag}); recorded: {known}")
    return {side: load(DATA / f) for side, f in files.items()}


def recording(workload: str, variant: str, fmt: str, tag: str = "h200") -> dict:
    """The entry of a recording listed under data/manifest.json's "recordings" in format ``fmt`` (a measurements
    file, a memory snapshot, a profiler trace with no step time of its own...): the caller's copy, with how it was
    made (device, torch, date, command)."""
    import copy

    recordings = shipped_json(DATA / "manifest.json").get("recordings", [])
    for e in recordings:
        if (e.get("workload"), e.get("variant"), e.get("format"), e.get("tag")) == (workload, variant, fmt, tag):
            return copy.deepcopy(e)
    known = sorted({(e.get("workload"), e.get("variant"), e.get("format")) for e in recordings
                    if e.get("workload") == workload and e.get("tag") == tag})
    raise TraceError(f"no recording of {workload[:60]}:{variant[:60]} in format {fmt[:60]!r} ({tag[:20]}); "
                     f"of {workload[:60]}: {known or 'none'}")


def recording_path(workload: str, variant: str, fmt: str, tag: str = "h200") -> Path:
    """The file in data/ of :func:`recording`'s entry (it ships with the repository)."""
    path = DATA / recording(workload, variant, fmt, tag)["file"]
    if not path.is_file():
        raise TraceError(f"{path}: listed in data/manifest.json but missing; re-clone or git checkout data/")
    return path


def steps_line(trace: Trace, label: str) -> str:
    """One line on a trace's steps: how many, and how long one lasts as the analysis counts it.

    A step here lasts until its GPU work ends (``metrics.step_time_ms``, over ``metrics.windows``): when the host
    runs ahead of the GPU, the host's own ``ProfilerStep`` ranges are far shorter than that.
    """
    from .metrics import step_time_ms

    step_ms = step_time_ms(trace)
    length = "no step time" if step_ms is None else f"{step_ms:.2f} ms each"
    return (f"{label}: {len(trace.steps)} steps, {length} (metrics.step_time_ms: a step lasts until its GPU work "
            f"ends, which can be long after the host's own step range); the capture spans {trace.span_us / 1e3:.1f} ms")


def show(obj: object) -> object:
    """Display a function's or class's source with syntax highlighting (plain text outside Jupyter)."""
    try:
        source = getsource(obj)  # type: ignore[arg-type]
    except (TypeError, OSError) as exc:  # a value, a built-in, code typed at the prompt: nothing to show
        raise TraceError(f"show(): no source to show for {type(obj).__name__} ({' '.join(str(exc).split())[:120]}); "
                         "give a function or class of the course") from None
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
    return read_regular(DATA / e[key], SHIPPED_LIMIT, "course data file").decode("utf-8", errors="replace")


# The public functions hold their arguments to their type hints (course.recorded(pd.NA, "x") is one TraceError line).
from .arguments import check_namespace as _check_namespace  # noqa: E402

_check_namespace(globals())
use_one_line_errors()
