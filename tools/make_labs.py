"""Generate the learner notebooks in labs/ from the complete ones in solutions/ (the source of truth).

    python tools/make_labs.py          # write labs/
    python tools/make_labs.py --check  # exit 1 if labs/ is out of date (the tests run this)

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
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + [parts[-1]]


def learner_notebook(solution: dict) -> dict:
    nb = copy.deepcopy(solution)
    exercise = 0
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            headings = HEADING.findall(_source(cell))
            exercise = int(headings[-1]) if headings else exercise
        if cell["cell_type"] == "code":
            cell["source"] = _lines(strip_solutions(_source(cell), max(exercise, 1)))
            cell["outputs"] = []
            cell["execution_count"] = None
    return nb


def render(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether labs/ is up to date")
    args = parser.parse_args(argv)
    stale = []
    for sol in sorted((ROOT / "solutions").glob("*.ipynb")):
        target = ROOT / "labs" / sol.name
        text = render(learner_notebook(json.loads(sol.read_text())))
        if not target.exists() or target.read_text() != text:
            stale.append(target.name)
            if not args.check:
                target.parent.mkdir(exist_ok=True)
                target.write_text(text)
    extra = sorted({p.name for p in (ROOT / "labs").glob("*.ipynb")} - {p.name for p in (ROOT / "solutions").glob("*.ipynb")})
    if args.check:
        if stale or extra:
            print(f"labs/ is out of date: {stale + extra}; run python tools/make_labs.py", file=sys.stderr)
            return 1
        return 0
    print(f"wrote {len(stale)} notebook(s) in labs/" + (f"; labs/ also holds {extra} with no solution" if extra else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
