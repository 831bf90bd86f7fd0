"""``python -m helpers selfcheck``: the syllabus's self-check list, from the learner's notebooks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .checks import RESULTS_FILE, SELF_CHECK


def execute_notebooks(labs: Path, timeout_s: int = 900) -> None:
    """Run every notebook in ``labs`` in place of a person (outputs are not saved back)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    for nb_path in sorted(labs.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        try:
            NotebookClient(nb, timeout=timeout_s, kernel_name="python3", resources={"metadata": {"path": str(labs)}}).execute()
            print(f"ran {nb_path.name}: all cells passed")
        except CellExecutionError as exc:
            last = str(exc).strip().splitlines()[-1][:160]
            print(f"ran {nb_path.name}: stopped at a failing cell ({last})")


def run_selfcheck(labs: Path, run: bool = False) -> int:
    if not labs.is_dir():
        print(f"error: {labs}: not a folder; pass the folder that holds your lab notebooks", file=sys.stderr)
        return 2
    if run:
        execute_notebooks(labs)
    path = labs / RESULTS_FILE
    results = json.loads(path.read_text()) if path.exists() else {}
    if not results and not run:
        print(f"No recorded check results in {path}; run the labs' check cells, or: python -m helpers selfcheck {labs} --run")
    passed = 0
    print("Self-check")
    for item, (text, lab) in SELF_CHECK.items():
        r = results.get(item)
        mark = "[x]" if r and r["passed"] else "[ ]"
        passed += bool(r and r["passed"])
        note = "" if r and r["passed"] else f"   -> revisit {lab}" + (
            f" (failing: {', '.join(k for k, v in r['checks'].items() if not v)})" if r else "")
        print(f"  {mark} {text}{note}")
    print(f"{passed}/{len(SELF_CHECK)} passed")
    return 0 if passed == len(SELF_CHECK) else 1
