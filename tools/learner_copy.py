"""Make a learner-only copy of the course: the labs and the toolkit, without solutions or answers.

    python tools/learner_copy.py DEST          # DEST must not exist, or be an empty folder

What is left out, and why, is :data:`LEFT_OUT`; the manifest keeps every recording but loses the
fields in :data:`ANSWER_FIELDS` (what each blind-triage trace really is). The copy is made from the
files git tracks (or, without git, from the tree less what .gitignore would ignore), so a learner's
runs, checkpoints and virtual environment never travel. After copying, the copy is scanned for what
must not be in it (solution markers, the triage key); a hit is a bug in this script, reported and
exit 1. DEST is never overwritten: an existing non-empty folder (or a file) is refused with exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Paths (a trailing ``/`` is a folder) the learner copy leaves out, each with the reason.
LEFT_OUT: dict[str, str] = {
    "solutions/": "the complete notebooks (the labs are generated from them)",
    "docs/INSTRUCTORS.md": "the instructor guide",
    "docs/instructors/": "instructor pages: expected figures, wrong answers, the triage key",
    "docs/gpu-track/": "the solution notebooks' run logs",
    "tests/": "the course's tests hold the reference answers",
    ".ci/": "runs the solution notebooks",
    "tools/triage_cases.py": "says which loop each blind-triage trace is (only recording needs it)",
    "tools/seal_answers.py": "seals the triage key from the instructors' copy",
    "tools/make_labs.py": "builds labs/ from solutions/",
    "tools/make_slides.py": "builds slides from solutions/",
    "tools/instructor_figures.py": "writes the expected-figures page",
    "tools/collect_nsys.py": "an instructor's recording tool (turns GPU-session runs into manifest entries)",
    "tools/learner_copy.py": "this script",
}

#: Manifest fields that are answers: the learner reads the trace, not the label.
ANSWER_FIELDS = ("truth",)

#: What a learner's own working tree may hold that no copy should carry.
_NEVER = {".git", ".venv", "runs", "build", "screenshots", "__pycache__", ".ipynb_checkpoints", ".pytest_cache"}
_NEVER_FILES = {".selfcheck.json", ".seals.json"}

NOTE = ("> **Learner copy.** This tree was made with `python tools/learner_copy.py`: the solution notebooks, the\n"
        "> instructor pages, the course's tests and the blind-triage key are left out, so links to them point\n"
        "> nowhere here. Work in `labs/`; your checks and `python -m helpers selfcheck labs/` work as in the full course.\n\n")


def left_out(rel: str) -> bool:
    """Whether the repository path ``rel`` (POSIX, relative to the root) stays out of the copy."""
    parts = rel.split("/")
    if _NEVER.intersection(parts[:-1]) or parts[-1] in _NEVER_FILES or parts[-1] in _NEVER:
        return True
    if rel.endswith((".pyc", ".partial")):
        return True
    return any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in LEFT_OUT)


def course_files(root: Path = ROOT) -> list[str]:
    """The course's files, relative POSIX paths: what git tracks, else a walk of the tree."""
    if (root / ".git").exists() and shutil.which("git"):
        r = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True)
        if r.returncode == 0:
            names = [n for n in r.stdout.decode("utf-8", "surrogateescape").split("\0") if n]
            return sorted(n for n in names if (root / n).is_file() and not (root / n).is_symlink())
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _NEVER and not d.endswith(".egg-info"))
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                out.append(path.relative_to(root).as_posix())
    return sorted(out)


def scrub_manifest(doc: dict) -> tuple[dict, int]:
    """``doc`` with :data:`ANSWER_FIELDS` removed from every entry, and how many were removed."""
    removed = 0
    clean: dict = {}
    for key, value in doc.items():
        if isinstance(value, list):
            rows = []
            for entry in value:
                if isinstance(entry, dict):
                    removed += sum(f in entry for f in ANSWER_FIELDS)
                    entry = {k: v for k, v in entry.items() if k not in ANSWER_FIELDS}
                rows.append(entry)
            value = rows
        clean[key] = value
    return clean, removed


#: The markers around a solution in a notebook: no code file of the copy may hold one.
SOLUTION_MARKERS = ("# BEGIN SOLUTION", "# END SOLUTION")


def answer_strings(root: Path = ROOT) -> list[str]:
    """Texts no file of a learner copy may hold: each blind-triage case's label and look-alike, from the
    instructors' key (and from any manifest entry that still carries a ``truth``)."""
    found: set[str] = set()
    key = root / "docs" / "instructors" / "triage_key.json"
    if key.is_file():
        for case in json.loads(key.read_text(encoding="utf-8")).get("cases", {}).values():
            # a look-alike's description only when it is specific (25+ characters: "two problems at once" is the lab's own words)
            found.update(case[f] for f in ("what", "decoy") if isinstance(case.get(f), str) and len(case[f]) >= (1 if f == "what" else 25))
    manifest = root / "data" / "manifest.json"
    if manifest.is_file():
        doc = json.loads(manifest.read_text(encoding="utf-8"))
        for value in doc.values():
            for entry in value if isinstance(value, list) else []:
                truth = entry.get("truth") if isinstance(entry, dict) else None
                if isinstance(truth, dict) and isinstance(truth.get("what"), str):
                    found.add(truth["what"])
    return sorted(found)


def leaks(dest: Path, needles: Iterable[str]) -> Iterator[str]:
    """``path: what`` for every file under ``dest`` that is left out by name, holds one of ``needles``,
    or (a notebook or Python file) holds a solution marker; the README may name the markers."""
    needles = list(needles)
    for path in sorted(p for p in dest.rglob("*") if p.is_file()):
        rel = path.relative_to(dest).as_posix()
        if rel.startswith(tuple(p for p in LEFT_OUT if p.endswith("/"))) or rel in LEFT_OUT:
            yield f"{rel}: a left-out path"
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary data (compressed traces, images): no text answers in it
        code = rel.endswith((".ipynb", ".py"))
        for needle in needles + (list(SOLUTION_MARKERS) if code else []):
            if needle in text:
                yield f"{rel}: holds {needle[:60]!r}"


def make_copy(dest: Path, root: Path = ROOT) -> dict:
    """Copy the course into ``dest`` (which must not exist or be empty); returns what was done."""
    files = course_files(root)
    kept = [f for f in files if not left_out(f)]
    dest.mkdir(parents=True, exist_ok=True)
    removed = 0
    for rel in kept:
        src, dst = root / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if rel == "data/manifest.json":
            doc, removed = scrub_manifest(json.loads(src.read_text(encoding="utf-8")))
            dst.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        elif rel == "README.md":
            dst.write_text(NOTE + src.read_text(encoding="utf-8"), encoding="utf-8")
        else:
            shutil.copy2(src, dst)
    return {"copied": len(kept), "left_out": len(files) - len(kept), "answer_fields_removed": removed}


def _refusal(dest: Path, root: Path) -> str | None:
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        return f"{dest} exists and is not a folder; give a new folder"
    if dest.is_dir() and any(dest.iterdir()):
        return f"{dest} is not empty; give a new or empty folder (nothing is ever overwritten)"
    resolved = dest.resolve()
    if resolved == root or root in resolved.parents:
        return f"{dest} is inside the course itself; make the copy somewhere else"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="a new (or empty) folder for the copy")
    args = parser.parse_args(argv)
    refusal = _refusal(args.dest, ROOT)
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    try:
        done = make_copy(args.dest)
    except OSError as exc:
        print(f"error: could not write the copy: {exc}", file=sys.stderr)
        return 2
    found = list(leaks(args.dest, answer_strings(ROOT)))
    if found:  # a bug here, not the user's: say exactly what leaked
        print("error: the copy still holds answers:\n  " + "\n  ".join(found), file=sys.stderr)
        return 1
    print(f"{args.dest}: {done['copied']} files copied, {done['left_out']} left out "
          f"(solutions, instructor pages, tests), {done['answer_fields_removed']} answer fields removed from the manifest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
