"""Notebook hygiene: committed clean, labs generated from solutions, and unsolved labs fail."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT

NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb")) + sorted((ROOT / "labs").glob("*.ipynb"))


def test_seven_labs_each_with_a_solution():
    sols = sorted(p.name for p in (ROOT / "solutions").glob("*.ipynb"))
    labs = sorted(p.name for p in (ROOT / "labs").glob("*.ipynb"))
    assert sols == labs and len(sols) == 7


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert not cell["outputs"] and cell["execution_count"] is None, f"{path.name}: strip outputs before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_lab_shape(path):
    nb = json.loads(path.read_text())
    text = ["".join(c["source"]) for c in nb["cells"]]
    assert "By the end of this lab you will be able to" in text[0]
    assert "<details>" in text[-1] and "Questions" in text[-1]
    assert any("# Check" in t for t in text)
    if path.parent.name == "labs":
        assert any("raise NotImplementedError" in t for t in text)
        assert not any("# BEGIN SOLUTION" in t for t in text)


def test_labs_in_step_with_solutions():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "make_labs.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_strip_solutions():
    sys.path.insert(0, str(ROOT / "tools"))
    from make_labs import strip_solutions

    src = "def f(x: int) -> int:\n    \"\"\"Goal.\"\"\"\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n"
    assert strip_solutions(src) == 'def f(x: int) -> int:\n    """Goal."""\n    raise NotImplementedError("Exercise: replace this line with your code")\n'
    with pytest.raises(ValueError):
        strip_solutions("# BEGIN SOLUTION\nx = 1\n")
    answer = "# BEGIN SOLUTION\ngaps = f(t)\nlongest_ms = gaps.max()\n# END SOLUTION\nlongest_ms"
    assert strip_solutions(answer).splitlines()[0] == (
        'raise NotImplementedError("Exercise: replace this line with longest_ms = <your answer>")')


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "labs").glob("*.ipynb")))
def test_unsolved_lab_does_not_pass(name, tmp_path):
    """Run the learner's notebook as it ships: it must stop at the first exercise."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(ROOT / "labs" / name, as_version=4)
    with pytest.raises(CellExecutionError, match="NotImplementedError"):
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
