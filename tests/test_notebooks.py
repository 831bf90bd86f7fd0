"""Notebook hygiene: committed clean, labs generated from solutions, and unsolved labs fail.

The labs are read as shipped (conftest.shipped_notebook: the copy generated from solutions/, which make_labs --check
and test_labs_in_step_with_solutions hold the committed labs to), never the learner's working files: a learner's work
saved in labs/ never fails these tests."""

import json
import re
import subprocess
import sys

import pytest
from conftest import ROOT, committed, committed_names, shipped_notebook

from helpers import course

NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb")) + [ROOT / "labs" / p.name for p in sorted((ROOT / "solutions").glob("*.ipynb"))]
MAINTAINERS = "maintainers: python tools/make_labs.py regenerates labs/ (it overwrites them) and re-saves solutions/"


def _text(path) -> str:
    return shipped_notebook(path.relative_to(ROOT).as_posix())


def test_every_lab_has_a_solution_and_the_numbers_run_from_00():
    sols = sorted(p.name for p in (ROOT / "solutions").glob("*.ipynb"))
    listed = committed_names("labs")  # the committed labs: a learner's own extra notebook in labs/ is theirs
    assert listed is None or sorted(n for n in listed if n.endswith(".ipynb")) == sols
    assert sols
    # Labs are numbered 00, 01, ... with no number missing or taken twice (lab 07 kept its number on purpose).
    assert [int(name[:2]) for name in sols] == list(range(len(sols)))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_without_outputs(path):
    nb = json.loads(_text(path))
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert not cell["outputs"] and cell["execution_count"] is None, f"{path.name}: strip outputs before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_lab_shape(path):
    nb = json.loads(_text(path))
    text = ["".join(c["source"]) for c in nb["cells"]]
    assert "By the end of this lab you will be able to" in text[0]
    assert "<details>" in text[-1] and "Questions" in text[-1]
    assert any("# Check" in t for t in text)
    if path.parent.name == "labs":
        assert any("raise course.ExerciseNotDone(" in t for t in text)
        assert not any("# BEGIN SOLUTION" in t for t in text)


def test_labs_in_step_with_solutions():
    """The committed labs (git HEAD, not the working files a learner saves) are what solutions/ generate."""
    sys.path.insert(0, str(ROOT / "tools"))
    from make_labs import clean_notebook, render

    for sol in sorted((ROOT / "solutions").glob("*.ipynb")):
        head = committed(f"labs/{sol.name}")
        if head is None:  # not a git checkout (an unpacked copy): make_labs --check, run by CI, holds the files
            pytest.skip("not a git checkout: tools/make_labs.py --check compares the files")
        assert head == shipped_notebook(f"labs/{sol.name}"), f"labs/{sol.name} is out of step with its solution ({MAINTAINERS})"
        solution = json.loads(sol.read_text(encoding="utf-8"))
        assert render(clean_notebook(solution)) == sol.read_text(encoding="utf-8"), f"{sol.name}: not clean ({MAINTAINERS})"


def test_strip_solutions():
    sys.path.insert(0, str(ROOT / "tools"))
    from make_labs import strip_solutions

    src = "def f(x: int) -> int:\n    \"\"\"Goal.\"\"\"\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n"
    assert strip_solutions(src, 3) == 'def f(x: int) -> int:\n    """Goal."""\n    raise course.ExerciseNotDone(3, "your code")\n'
    with pytest.raises(ValueError):
        strip_solutions("# BEGIN SOLUTION\nx = 1\n")
    answer = "# BEGIN SOLUTION\ngaps = f(t)\nlongest_ms = gaps.max()\n# END SOLUTION\nlongest_ms"
    assert strip_solutions(answer, 2).splitlines()[0] == 'raise course.ExerciseNotDone(2, "longest_ms = <your answer>")'


def test_stubs_numbered_by_the_exercise_heading_above():
    sys.path.insert(0, str(ROOT / "tools"))
    from make_labs import learner_notebook

    def cell(kind, text):
        return {"cell_type": kind, "source": text, "metadata": {}, **({"outputs": [], "execution_count": None} if kind == "code" else {})}

    nb = {"cells": [cell("markdown", "### Exercise 1 · a"), cell("code", "# BEGIN SOLUTION\nx = 1\n# END SOLUTION"),
                    cell("markdown", "### Exercise 2 · b"), cell("code", "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION")]}
    out = ["".join(c["source"]) for c in learner_notebook(nb)["cells"]]
    assert 'ExerciseNotDone(1, "x = <your answer>")' in out[1] and 'ExerciseNotDone(2, "your code")' in out[3]


def make_loader(dataset):  # a stub inside a function, as a cell defines it: the error shows under the cell that calls it
    from helpers import course

    def inner():
        raise course.ExerciseNotDone(2, "your code")
    return inner()


def test_course_errors_show_as_one_line():
    from helpers import course
    from helpers.checks import CheckFailed

    with pytest.raises(NotImplementedError, match="Exercise 4 is not done yet"):
        raise course.ExerciseNotDone(4, "longest_gap_ms = <your answer>")
    assert course.one_line(NameError("x", name="longest_gap_ms")).startswith(
        "Exercise 4 is not done yet: `longest_gap_ms` is set by a cell that stopped there")

    with pytest.raises(NotImplementedError) as stopped:
        make_loader(None)
    assert str(stopped.value).startswith("Exercise 2 is not done yet: edit the cell that defines `make_loader` (Exercise 2")
    with pytest.raises(NotImplementedError) as stopped:  # at a cell's top level the message is under that cell
        exec(compile('raise course.ExerciseNotDone(3, "x = <your answer>")', "<cell>", "exec"), {"course": course})
    assert str(stopped.value).startswith("Exercise 3 is not done yet: replace its raise line with x = <your answer>")
    assert course.one_line(CheckFailed("look at the gaps")) == "Check failed: look at the gaps"
    assert course.one_line(ValueError("a real bug")) is None


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "solutions").glob("*.ipynb")))
def test_unsolved_lab_does_not_pass(name, tmp_path):
    """Run the learner's notebook as it ships: it must stop at the first exercise, with one line and no traceback."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.reads(shipped_notebook(f"labs/{name}"), as_version=4)
    with pytest.raises(CellExecutionError, match="Exercise 1 is not done yet") as stopped:
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    # the message alone, wrapped between words (course.shown_lines): no frame of a traceback among its lines
    assert len(errors) == 1, errors
    shown = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in errors[0].traceback]
    assert shown == course.shown_lines(errors[0].evalue), shown
    assert "Traceback" not in str(stopped.value) and "NameError" not in str(stopped.value)


def test_capture_prints_no_profiler_log_lines(tmp_path):
    code = ("import sys, torch, helpers\n"
            "helpers.capture(lambda i: torch.ones(4).sum(), steps=2, out_dir=sys.argv[1])\n"
            "print('still-shown', file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert "profiler_start" not in r.stderr and "USDT" not in r.stderr
    assert "still-shown" in r.stderr


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_in_jupyterlab_save_format(path):
    """Byte for byte what JupyterLab writes when the notebook is saved unchanged (tests/test_notebook_format_browser.py
    saves them in JupyterLab itself): nbformat's layout, no empty last source line, the kernel's own metadata."""
    import nbformat

    sys.path.insert(0, str(ROOT / "tools"))
    from make_labs import KERNEL_METADATA

    text = _text(path)
    nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
    assert nbformat.writes(nb, version=nbformat.NO_CONVERT) + "\n" == text, f"{path.name}: not in JupyterLab's format ({MAINTAINERS})"
    for key, value in KERNEL_METADATA.items():
        assert nb.metadata[key] == value, f"{path.name}: {key} is not what the kernel reports ({MAINTAINERS})"
    assert all(cell["id"] for cell in nb.cells)


def test_make_labs_writes_no_empty_last_line():
    sys.path.insert(0, str(ROOT / "tools"))
    from make_labs import learner_notebook, render

    nb = {"cells": [{"cell_type": "code", "id": "a", "metadata": {}, "execution_count": 3, "outputs": [{"output_type": "stream", "name": "stdout", "text": "x"}],
                     "source": "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n"}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    cell = json.loads(render(learner_notebook(nb)))["cells"][0]
    assert cell["source"] == ["def f():\n", '    raise course.ExerciseNotDone(1, "your code")\n']
    assert cell["outputs"] == [] and cell["execution_count"] is None
