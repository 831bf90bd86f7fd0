"""Generate the learner notebooks in labs/ from the complete ones in solutions/ (the source of truth).

    python tools/make_labs.py          # write labs/
    python tools/make_labs.py --check  # exit 1 if labs/ is out of date (the tests run this)

In a solution notebook, the code between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` becomes
``raise NotImplementedError(...)`` at the same indentation; everything else is copied as is, with
outputs and execution counts stripped.
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
STUB = 'raise NotImplementedError("Exercise: replace this line with your code")'
ASSIGNMENT = re.compile(r"^(\w+)\s*(?::[^=]+)?=(?!=)")


def stub_for(body: list[str], indent: str) -> str:
    """The line that replaces a solution: it names the variable to set when the solution ends by setting one."""
    targets = [m.group(1) for line in body if line.startswith(indent) and (m := ASSIGNMENT.match(line[len(indent):]))]
    if targets and not body[-1][len(indent):].startswith((" ", "return")):
        return f'{indent}raise NotImplementedError("Exercise: replace this line with {targets[-1]} = <your answer>")'
    return f"{indent}{STUB}"


def strip_solutions(source: str) -> str:
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
                out.append(stub_for(body or [""], indent))
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
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["source"] = _lines(strip_solutions(_source(cell)))
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
