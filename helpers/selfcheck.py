"""``python -m helpers selfcheck``: the syllabus's self-check list, from the learner's own work.

An item is marked done only when every check of the learner's work that earns it
(:data:`helpers.checks.CREDIT`, per track) passed. Credit comes from ``--run`` alone: it executes the
notebooks in a scratch copy of the folder, each in a fresh kernel holding its own random key, and counts
only the results a check signed with that key in that run (:mod:`helpers.checks._proof`); a result
written any other way is refused, one line per item saying why. Without ``--run`` the list shows what
the learner's check cells recorded, as unverified progress that earns nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from . import interrupts
from .checks import CREDIT, RESULTS_FILE, SELF_CHECK, _proof
from .checks._core import RESULTS_LIMIT
from .checks.exercise import find
from .errors import Interrupted, TraceError
from .interrupts import temporary_dir
from .outputs import read_state_json
from .paths import unreachable

#: Run at each kernel's start, before any cell: the signing state takes the key and hides it from the notebook.
KERNEL_START = "--IPKernelApp.exec_lines=from helpers.checks import _proof; _proof.start_run()"


def _key_file(folder: Path, notebook: str, key: bytes) -> Path:
    path = folder / f"{Path(notebook).stem}.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # readable by this user only
    with os.fdopen(fd, "w") as fh:
        json.dump({"key": key.hex(), "notebook": notebook}, fh)
    return path


#: What ``--run`` copies of a labs folder at most: the notebooks and what a learner keeps beside them, not a
#: multi-GB recording or a folder linked in (each link is kept as a link to where it points, never followed).
COPY_MAX_BYTES = 1 << 30
COPY_MAX_ENTRIES = 20_000
_NOT_COPIED = {RESULTS_FILE, ".seals.json", "runs", ".ipynb_checkpoints"}


def copy_labs(labs: Path, copy: Path) -> None:
    """Copy ``labs`` to ``copy`` for a run, within :data:`COPY_MAX_BYTES` and :data:`COPY_MAX_ENTRIES`.

    Links are made again as links to the same place (absolute), so a link loop or a link to a large
    folder costs one entry; a pipe, socket or device is left out (reading a pipe can wait forever).
    Anything that cannot be copied, or a folder over the bounds, is one :class:`TraceError` line."""
    copy.mkdir()
    total, entries, todo = 0, 0, [(labs, copy)]
    while todo:
        src, dst = todo.pop()
        try:
            with os.scandir(src) as it:
                found = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise TraceError(f"{src}: cannot be read to copy it for --run ({exc.strerror or exc})") from None
        for e in found:
            if e.name in _NOT_COPIED:
                continue
            entries += 1
            if entries > COPY_MAX_ENTRIES:
                raise TraceError(f"{labs}: holds over {COPY_MAX_ENTRIES:,} files and folders; --run copies the folder "
                                 "first: keep only your lab notebooks in it")
            target = dst / e.name
            try:
                if e.is_symlink():
                    os.symlink(os.path.realpath(e.path), target)
                elif e.is_dir(follow_symlinks=False):
                    target.mkdir()
                    todo.append((Path(e.path), target))
                elif e.is_file(follow_symlinks=False):
                    total += e.stat(follow_symlinks=False).st_size
                    if total > COPY_MAX_BYTES:
                        raise TraceError(f"{e.path}: the labs folder holds over {COPY_MAX_BYTES >> 20:,} MB with it, "
                                         "too much to copy for --run; move large files out, or link to them")
                    shutil.copyfile(e.path, target, follow_symlinks=False)
            except OSError as exc:  # (a pipe swapped in meanwhile is shutil's SpecialFileError, an OSError)
                raise TraceError(f"{e.path}: cannot be copied for --run ({exc.strerror or exc})") from None


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
    with temporary_dir(prefix="selfcheck-keys-") as key_dir, temporary_dir(prefix="selfcheck-tmp-") as kernel_tmp:
        for nb_path in sorted(labs.glob("[0-9][0-9]_*.ipynb")):
            key = secrets.token_bytes(32)
            key_file = _key_file(Path(key_dir), nb_path.name, key)
            stopped = None
            try:
                nb = nbformat.read(nb_path, as_version=4)
            except Exception as exc:  # noqa: BLE001 - half-saved, or not a notebook: say so, go on with the next one
                key_file.unlink(missing_ok=True)
                lines.append(f"ran {nb_path.name}: not a notebook Jupyter can open ({type(exc).__name__}: "
                             f"{' '.join(str(exc).split())[:100]}); save it again from Jupyter")
                continue
            noted: list[int] = []
            try:
                with _signals_noted(noted):
                    _execute(NotebookClient, nb, labs, timeout_s, key_file, kernel_tmp)
            except (Exception, asyncio.CancelledError) as exc:  # a dead kernel or a timeout: say so, go on
                _stop_if_signalled(noted)  # (a signal that landed in the client's event loop comes out as another error)
                stopped = f"ran {nb_path.name}: stopped ({type(exc).__name__}: {ansi.sub('', str(exc)).strip()[:120]})"
            _stop_if_signalled(noted)  # the client stopped its kernel and carried on: this command stops here
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


def _execute(client_class, nb, labs: Path, timeout_s: int, key_file: Path, kernel_tmp: Path) -> None:
    # The kernel's own log (its start-up warnings; a traceback when it is stopped mid-message) is not the
    # command's to print, and what it leaves in $TMPDIR (compile caches) goes with the scratch folder.
    client_class(nb, timeout=timeout_s, kernel_name="python3", allow_errors=True, extra_arguments=[KERNEL_START],
                 resources={"metadata": {"path": str(labs)}}).execute(
        env={**os.environ, _proof.RUN_KEY_ENV: str(key_file), "TMPDIR": str(kernel_tmp)}, stderr=subprocess.DEVNULL)


@contextlib.contextmanager
def _signals_noted(noted: list[int]) -> Iterator[None]:
    """While a notebook runs, nbclient takes SIGINT and SIGTERM for its event loop (they stop the kernel, and the
    run goes on as if nothing happened) and leaves Python's defaults behind (a later SIGTERM then kills this
    command before it cleans up). Here each such signal is appended to ``noted``, and this command's own
    handlers are put back afterwards."""
    loop_class = asyncio.SelectorEventLoop
    original = loop_class.add_signal_handler

    def add_signal_handler(loop, sig, callback, *args):
        def note(*a):
            noted.append(sig)
            callback(*a)
        return original(loop, sig, note, *args)

    loop_class.add_signal_handler = add_signal_handler
    try:
        yield
    finally:
        loop_class.add_signal_handler = original
        if interrupts._state["active"]:
            interrupts.install()
            interrupts._state["active"] -= 1  # (install counts itself in; this only puts the handlers back)


def _stop_if_signalled(noted: list[int]) -> None:
    """Raise :class:`Interrupted` if a signal reached this command: noted by the notebook client's handlers, or
    raised in its event loop and swallowed there (the command then went on as if nothing happened)."""
    signum = noted[0] if noted else interrupts.received()
    if signum is not None:
        raise Interrupted(signum)


def read_results(path: Path) -> dict[str, dict]:
    """The recorded check results; a file that is not the course's format is a one-line error."""
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        results = read_state_json(path, RESULTS_LIMIT, "self-check results file")
    except FileNotFoundError:
        return {}
    except TraceError as exc:  # not a file, too big, not UTF-8 JSON, nested deeper than the parser goes
        raise TraceError(f"{exc}; delete it and run the labs' check cells again") from None
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
        print(f"error: {labs}: {unreachable(labs) or 'not a folder; pass the folder that holds your lab notebooks'}",
              file=sys.stderr)
        return 2
    try:
        if run:
            with temporary_dir(prefix="selfcheck-") as scratch:
                copy = Path(scratch) / labs.name
                copy_labs(labs, copy)
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
