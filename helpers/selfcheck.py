"""``python -m helpers selfcheck``: the syllabus's self-check list, from the learner's own work.

An item is marked done only when every check of the learner's work that earns it
(:data:`helpers.checks.CREDIT`, per track) passed. ``--run`` executes the notebooks in a scratch
copy of the folder, so the verdict is that run's alone and nothing in the learner's folder changes.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from .checks import CREDIT, RESULTS_FILE, SELF_CHECK
from .checks._core import RESULTS_LIMIT
from .errors import TraceError
from .outputs import read_regular


def execute_notebooks(labs: Path, timeout_s: int = 900) -> list[str]:
    """Run every cell of every notebook in ``labs``, as a learner running each cell would (errors do not
    stop the notebook, so check cells after an unfinished exercise run too); one line each."""
    import re

    import nbformat
    from nbclient import NotebookClient

    ansi = re.compile(r"\x1b\[[0-9;]*m")
    lines = []
    for nb_path in sorted(labs.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        try:
            NotebookClient(nb, timeout=timeout_s, kernel_name="python3", allow_errors=True,
                           resources={"metadata": {"path": str(labs)}}).execute()
        except Exception as exc:  # a dead kernel or a timeout: say so, go on with the next notebook
            lines.append(f"ran {nb_path.name}: stopped ({type(exc).__name__}: {ansi.sub('', str(exc)).strip()[:120]})")
            continue
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
        if not errors:
            lines.append(f"ran {nb_path.name}: all cells passed")
        else:
            first = ansi.sub("", f"{errors[0].get('ename', '')}: {errors[0].get('evalue', '')}").strip()
            lines.append(f"ran {nb_path.name}: {len(errors)} cell(s) failed, the first: {first[:160]}")
    return lines


def read_results(path: Path) -> dict[str, dict]:
    """The recorded check results; a file that is not the course's format is a one-line error."""
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        results = json.loads(read_regular(path, RESULTS_LIMIT, "self-check results file").decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise TraceError(f"{path}: not a readable self-check results file ({exc.__class__.__name__}); delete it and "
                         "run the labs' check cells again") from None
    ok = isinstance(results, dict) and all(
        isinstance(r, dict) and isinstance(r.get("checks", {}), dict) for r in results.values())
    if not ok:
        raise TraceError(f"{path}: not in the self-check results format (item -> {{'checks': {{name: passed}}}}); "
                         "delete it and run the labs' check cells again")
    return results


def item_status(item: str, result: dict | None) -> tuple[bool, list[str]]:
    """Whether ``item`` is earned, and the checks of the learner's work still missing or failing."""
    track = (result or {}).get("track")
    track = track if track in ("gpu", "cpu") else "cpu"
    needed = CREDIT.get(item, {}).get(track, ())
    checks = (result or {}).get("checks", {})
    missing = [name for name in needed if checks.get(name) is not True]
    return bool(needed) and not missing, missing


def run_selfcheck(labs: Path, run: bool = False) -> int:
    if not labs.is_dir():
        print(f"error: {labs}: not a folder; pass the folder that holds your lab notebooks", file=sys.stderr)
        return 2
    try:
        if run:
            with tempfile.TemporaryDirectory(prefix="selfcheck-") as scratch:
                copy = Path(scratch) / labs.name
                shutil.copytree(labs, copy, ignore=shutil.ignore_patterns(RESULTS_FILE, "runs", ".ipynb_checkpoints"))
                for line in execute_notebooks(copy):
                    print(line)
                results = read_results(copy / RESULTS_FILE)
        else:
            results = read_results(labs / RESULTS_FILE)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not results and not run:
        print(f"No recorded check results in {labs / RESULTS_FILE}; run the labs' check cells, or: "
              f"python -m helpers selfcheck {labs} --run")
    passed = 0
    print("Self-check" + (" (this run only)" if run else ""))
    for item, (text, lab) in SELF_CHECK.items():
        done, missing = item_status(item, results.get(item))
        passed += done
        note = "" if done else f"   -> revisit {lab}" + (f" (not passed yet: {', '.join(missing)})" if missing else "")
        print(f"  {'[x]' if done else '[ ]'} {text}{note}")
    print(f"{passed}/{len(SELF_CHECK)} passed")
    return 0 if passed == len(SELF_CHECK) else 1
