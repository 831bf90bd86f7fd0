"""Generate the learner notebooks in labs/ from the complete ones in solutions/: for maintainers; it overwrites labs/.

    python tools/make_labs.py          # write labs/ (and re-save solutions/): OVERWRITES every lab, a learner's work included
    python tools/make_labs.py --check  # exit 1 if the labs/ files differ from what solutions/ generate (CI runs this)

For maintainers only: a learner never needs it (their work in labs/ would be lost). The tests read the labs as
generated from solutions/, never the files in labs/, so a learner's saved work never fails ``pytest``.

Exercise conventions (follow them in every solution notebook):

- Introduce each exercise with a markdown cell whose heading reads ``### Exercise N · <what to do>``,
  numbered from 1 in each lab.
- In the code cell(s) that follow, put the learner's part between a ``# BEGIN SOLUTION`` and a
  ``# END SOLUTION`` line (same indentation; inside a function body is fine). It becomes one line,
  ``raise course.ExerciseNotDone(N, "...")`` at that indentation, where N is the number of the
  last ``Exercise N`` heading above it. When the solution ends by setting a variable
  (``answer_ms = ...``), the stub says so: ``"answer_ms = <your answer>"``; otherwise ``"your code"``.
  Keep the names the later cells use defined by the solution block, not before it.
- The notebook imports ``course`` (``from helpers import checks, course, ...``) in its first code cell:
  importing it makes course errors (an unfinished exercise, a failed check, a bad trace) show as one
  line in Jupyter, and a check cell that names a variable an unfinished exercise should have set says
  "exercise N is not done yet" instead of a NameError.
- Put the check in its own code cell that starts with ``# Check`` and calls one ``checks.check_...``.
- Everything else is copied as is; outputs and execution counts are stripped from both notebooks.

Both folders are written in JupyterLab's own save format, so that a notebook opened and saved in
JupyterLab with nothing changed stays byte-identical (no diff in ``git status`` after a look). The
format was taken from JupyterLab 4.6 itself, saving the labs in headless Chromium (the browser test
``tests/test_notebook_format_browser.py`` does it again): the server writes ``nbformat.writes`` (keys
sorted, one-space indent, each source a list of lines with no empty last line, a final newline),
and the front end replaces the notebook's kernel metadata by what the kernel reports on start, which
marks the notebook changed unless it is already that. ``KERNEL_METADATA`` is ipykernel's report;
its one varying field is the Python version, so on a Python other than ``PYTHON_VERSION`` a save
changes that one line and nothing else.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tools") not in sys.path:  # cloud_cell, beside this file, when imported from elsewhere
    sys.path.insert(0, str(ROOT / "tools"))
PYTHON_VERSION = "3.11.7"  # the Python the course's notebooks are run and recorded with
KERNEL_METADATA = {  # what ipykernel 7 reports, as JupyterLab 4.6 writes it into the notebook on a kernel's start
    "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
    "language_info": {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                      "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                      "pygments_lexer": "ipython3", "version": PYTHON_VERSION},
}
BEGIN = re.compile(r"^(\s*)# BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
ASSIGNMENT = re.compile(r"^(\w+)\s*(?::[^=]+)?=(?!=)")
HEADING = re.compile(r"^#+\s*Exercise\s+(\d+)\b", re.MULTILINE)


def stub_for(body: list[str], indent: str, exercise: int) -> str:
    """The line that replaces a solution: it names the variable to set when the solution ends by setting one."""
    targets = [m.group(1) for line in body if line.startswith(indent) and (m := ASSIGNMENT.match(line[len(indent):]))]
    if targets and not body[-1][len(indent):].startswith((" ", "return")):
        return f'{indent}raise course.ExerciseNotDone({exercise}, "{targets[-1]} = <your answer>")'
    return f'{indent}raise course.ExerciseNotDone({exercise}, "your code")'


def strip_solutions(source: str, exercise: int = 1) -> str:
    out: list[str] = []
    body: list[str] = []
    indent = ""
    inside = False
    for line in source.split("\n"):
        m = BEGIN.match(line)
        if m and not inside:
            inside, indent, body = True, m.group(1), []
            continue
        if inside:
            if END.match(line):
                inside = False
                out.append(stub_for(body or [""], indent, exercise))
            else:
                body.append(line)
            continue
        out.append(line)
    if inside:
        raise ValueError("a '# BEGIN SOLUTION' without its '# END SOLUTION'")
    return "\n".join(out)


def _source(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def clean_notebook(nb: dict) -> dict:
    """The notebook as committed: the setup cell after the title (``tools/cloud_cell.py``), no outputs or
    execution counts, the kernel metadata JupyterLab would write."""
    from cloud_cell import with_setup_cell

    nb = with_setup_cell(nb)
    nb["metadata"] = {**nb.get("metadata", {}), **copy.deepcopy(KERNEL_METADATA)}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return nb


def learner_notebook(solution: dict) -> dict:
    nb = clean_notebook(solution)
    exercise = 0
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            headings = HEADING.findall(_source(cell))
            exercise = int(headings[-1]) if headings else exercise
        if cell["cell_type"] == "code":
            cell["source"] = strip_solutions(_source(cell), max(exercise, 1))
    return nb


def render(nb: dict) -> str:
    """The file's text exactly as Jupyter's server saves it (nbformat.writes, then one newline)."""
    import nbformat

    return nbformat.writes(nbformat.from_dict(nb), version=nbformat.NO_CONVERT) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="For maintainers: without --check it overwrites labs/, a learner's work in them included.")
    parser.add_argument("--check", action="store_true", help="only report whether labs/ and solutions/ are up to date")
    args = parser.parse_args(argv)
    stale = []
    for sol in sorted((ROOT / "solutions").glob("*.ipynb")):
        solution = json.loads(sol.read_text(encoding="utf-8"))
        for target, text in ((sol, render(clean_notebook(solution))),
                             (ROOT / "labs" / sol.name, render(learner_notebook(solution)))):
            if not target.exists() or target.read_text(encoding="utf-8") != text:
                stale.append(f"{target.parent.name}/{target.name}")
                if not args.check:
                    target.parent.mkdir(exist_ok=True)
                    target.write_bytes(text.encode("utf-8"))
    extra = sorted({p.name for p in (ROOT / "labs").glob("*.ipynb")} - {p.name for p in (ROOT / "solutions").glob("*.ipynb")})
    if args.check:
        if stale or extra:
            print(f"differ from what solutions/ generate, or not in JupyterLab's save format: {stale + extra} (a learner's "
                  "saved work differs too, and that is fine; maintainers: python tools/make_labs.py regenerates labs/, "
                  "overwriting them)", file=sys.stderr)
            return 1
        return 0
    print(f"wrote {len(stale)} notebook(s): {stale}" + (f"; labs/ also holds {extra} with no solution" if extra else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
