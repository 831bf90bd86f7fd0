"""``python -m helpers selfcheck``: the syllabus's self-check list, from the learner's own work.

An item is marked done only when every check of the learner's work that earns it
(:data:`helpers.checks.CREDIT`, per track) passed. Credit comes from ``--run`` alone: it executes the
notebooks in a scratch copy of the folder, each in a fresh kernel holding its own random key, and counts
only the results a check signed with that key in that run (:mod:`helpers.checks._proof`); a result
written any other way is refused, one line per item saying why. Without ``--run`` the list shows what
the learner's check cells recorded, as unverified progress that earns nothing.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

from .checks import CREDIT, RESULTS_FILE, SELF_CHECK, _proof
from .checks._core import RESULTS_LIMIT
from .checks.exercise import find
from .errors import TraceError
from .outputs import read_regular

#: Run at each kernel's start, before any cell: the signing state takes the key and hides it from the notebook.
KERNEL_START = "--IPKernelApp.exec_lines=from helpers.checks import _proof; _proof.start_run()"


def _key_file(folder: Path, notebook: str, key: bytes) -> Path:
    path = folder / f"{Path(notebook).stem}.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # readable by this user only
    with os.fdopen(fd, "w") as fh:
        json.dump({"key": key.hex(), "notebook": notebook}, fh)
    return path


def execute_notebooks(labs: Path, timeout_s: int = 900) -> tuple[list[str], dict[str, bytes]]:
    """Run every cell of every notebook in ``labs``, as a learner running each cell would (errors do not
    stop the notebook, so check cells after an unfinished exercise run too); one line each.

    Each notebook runs in a fresh kernel with a fresh key; returns the lines and the key of each notebook
    whose kernel took its key at start (the keys its checks' results are verified with)."""
    import re

    import nbformat
    from nbclient import NotebookClient

    ansi = re.compile(r"\x1b\[[0-9;]*m")
    lines: list[str] = []
    keys: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="selfcheck-keys-") as key_dir:
        for nb_path in sorted(labs.glob("[0-9][0-9]_*.ipynb")):
            key = secrets.token_bytes(32)
            key_file = _key_file(Path(key_dir), nb_path.name, key)
            nb = nbformat.read(nb_path, as_version=4)
            stopped = None
            try:
                NotebookClient(nb, timeout=timeout_s, kernel_name="python3", allow_errors=True,
                               extra_arguments=[KERNEL_START],
                               resources={"metadata": {"path": str(labs)}}).execute(
                    env={**os.environ, _proof.RUN_KEY_ENV: str(key_file)})
            except Exception as exc:  # a dead kernel or a timeout: say so, go on with the next notebook
                stopped = f"ran {nb_path.name}: stopped ({type(exc).__name__}: {ansi.sub('', str(exc)).strip()[:120]})"
            taken = not key_file.exists()  # helpers.checks took it at the kernel's start, before any cell
            key_file.unlink(missing_ok=True)
            if taken:
                keys[nb_path.name] = key
            errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                      if o.get("output_type") == "error"]
            if stopped:
                lines.append(stopped)
            elif not taken:  # the notebook's own code could have read the key: nothing from it counts
                lines.append(f"ran {nb_path.name}: helpers.checks could not be imported when its kernel started, so "
                             "nothing it recorded counts (is the helpers package installed in this environment?)")
            elif not errors:
                lines.append(f"ran {nb_path.name}: all cells passed")
            else:
                first = ansi.sub("", f"{errors[0].get('ename', '')}: {errors[0].get('evalue', '')}").strip()
                lines.append(f"ran {nb_path.name}: {len(errors)} cell(s) failed, the first: {first[:160]}")
    return lines, keys


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


def verify_results(results: dict[str, dict], keys: dict[str, bytes]) -> tuple[dict[str, dict], list[str]]:
    """The results a check signed in this run (item -> {'checks', 'track'}), and one line per item whose
    recorded passes were refused, saying why."""
    verified: dict[str, dict] = {}
    refused: list[str] = []
    for item, result in results.items():
        signed = result.get("signed") if isinstance(result.get("signed"), dict) else {}
        checks: dict[str, bool] = {}
        tracks = []
        why: dict[str, str] = {}
        for name, entry in signed.items():
            reason = _proof.verify(keys, item, name, entry) or _elsewhere(item, name, entry)
            if reason is None:
                checks[name] = entry["passed"]
                tracks.append(entry["track"])
            elif isinstance(entry, dict) and entry.get("passed") is True:
                why[name] = reason
        for name, passed in result.get("checks", {}).items():  # a pass no exercise earns by (a reading practice) is no claim
            if passed is True and checks.get(name) is not True and name not in why and find(item, name) is not None:
                why[name] = (_proof.NOT_SIGNED if name not in checks else
                             "a check in this run recorded it as not passed; the file says otherwise")
        if checks:
            verified[item] = {"checks": checks, "track": tracks[-1]}
        if why:
            reasons: dict[str, list[str]] = {}
            for name, reason in why.items():
                reasons.setdefault(reason, []).append(name)
            refused.append(f"refused: {item}: " + "; ".join(f"{', '.join(names)}: {reason}" for reason, names in reasons.items())
                           + "; it earns nothing")
    return verified, refused


def _elsewhere(item: str, check: str, entry: dict) -> str | None:
    """Why a validly signed result does not count: it is no exercise's, or was signed in a notebook that is
    not its exercise's lab (an extra notebook calling the checks); None when it is where it belongs."""
    ex = find(item, check)
    if ex is None:
        return f"no exercise of the {item!r} item is called {check}"
    if entry.get("notebook") != ex.notebook:
        return f"signed in {entry.get('notebook')}, but {ex.check} is lab {ex.lab}'s exercise, earned in {ex.notebook}"
    return None


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
                shutil.copytree(labs, copy, ignore=shutil.ignore_patterns(RESULTS_FILE, ".seals.json", "runs", ".ipynb_checkpoints"))
                lines, keys = execute_notebooks(copy)
                for line in lines:
                    print(line)
                results, refused = verify_results(read_results(copy / RESULTS_FILE), keys)
            for line in refused:
                print(line)
        else:
            results = read_results(labs / RESULTS_FILE)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return _report(results) if run else _report_unverified(labs, results)


def _report(results: dict[str, dict]) -> int:
    passed = 0
    print("Self-check (this run only)")
    for item, (text, lab) in SELF_CHECK.items():
        done, missing = item_status(item, results.get(item))
        passed += done
        note = "" if done else f"   -> revisit {lab}" + (f" (not passed yet: {', '.join(missing)})" if missing else "")
        print(f"  {'[x]' if done else '[ ]'} {text}{note}")
    print(f"{passed}/{len(SELF_CHECK)} passed")
    return 0 if passed == len(SELF_CHECK) else 1


def _report_unverified(labs: Path, results: dict[str, dict]) -> int:
    """What the learner's check cells recorded, marked [~]: any code can write that file, so it earns nothing."""
    command = f"python -m helpers selfcheck {labs} --run"
    if not results:
        print(f"No recorded check results in {labs / RESULTS_FILE}; run the labs' check cells, or: {command}")
    print(f"Self-check, as your check cells recorded it (unverified: only {command} verifies and earns credit)")
    recorded = 0
    for item, (text, lab) in SELF_CHECK.items():
        done, missing = item_status(item, results.get(item))
        recorded += done
        note = ("   (recorded as passed, unverified)" if done else
                f"   -> revisit {lab}" + (f" (not passed yet: {', '.join(missing)})" if missing else ""))
        print(f"  {'[~]' if done else '[ ]'} {text}{note}")
    print(f"0/{len(SELF_CHECK)} passed (verified); {recorded}/{len(SELF_CHECK)} recorded as passed, unverified: "
          f"{command} verifies them")
    return 1
