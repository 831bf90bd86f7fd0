"""Markdown in the labs renders as written: no inequality or rule of text swallowed by Markdown's own syntax."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.relative_to(ROOT).as_posix() for d in ("solutions", "labs") for p in (ROOT / d).glob("*.ipynb"))


def markdown_lines(path: str):
    """(cell index, line number, previous line, line) of every markdown line outside a fenced code block."""
    nb = json.loads((ROOT / path).read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        fenced, previous = False, ""
        for n, line in enumerate("".join(cell["source"]).splitlines(), 1):
            if line.lstrip().startswith(("```", "~~~")):
                fenced = not fenced
            elif not fenced:
                yield i, n, previous, line
            previous = line


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_no_line_starts_as_a_blockquote(path):
    """A line starting with '>' is a blockquote (the course quotes nothing that way): '>= 0.25 x capacity' at the
    start of a wrapped line loses its '>=' and shows as a quote. Wrap the line elsewhere or put the math in a code span."""
    bad = [f"cell {i} line {n}: {line.strip()[:60]}" for i, n, _, line in markdown_lines(path) if re.match(r"^\s*>", line)]
    assert not bad, bad


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_no_line_of_equals_or_dashes_turns_the_text_above_into_a_heading(path):
    """'a\\n= b' or a wrapped line that is only '=' or '-' makes the line above a heading (setext) and drops it."""
    bad = [f"cell {i} line {n}: {prev.strip()[:60]}" for i, n, prev, line in markdown_lines(path)
           if re.match(r"^\s{0,3}(=+|-+)\s*$", line) and prev.strip() and not prev.lstrip().startswith("|")]
    assert not bad, bad
