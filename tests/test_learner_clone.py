"""The learner's work in labs/ never fails the README's ``pytest``: tests about the shipped notebooks read them as
shipped (conftest.shipped_notebook), and no message sends a learner to a command that overwrites their labs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import nbformat
import pytest
from conftest import ROOT

#: The tests that read notebooks under labs/ (the slow ones that run a kernel per lab left out): run in the clone.
LAB_TESTS = ["tests/test_notebooks.py", "tests/test_cloud.py::test_every_lab_starts_with_the_setup_cell",
             "tests/test_no_answer_key.py::test_the_scan_reads_the_package",
             "tests/test_no_answer_key.py::test_no_triage_trace_stands_next_to_its_patterns"]


def _work_on(path, answer: str) -> None:
    """What a learner does to a lab in JupyterLab: their code in the first exercise's stub, cells run (outputs and
    execution counts), notes of their own, and a save (JupyterLab's format, their kernel's Python version)."""
    nb = nbformat.read(path, as_version=4)
    stub = next(c for c in nb.cells if c.cell_type == "code" and "raise course.ExerciseNotDone(" in c.source)
    stub.source = re.sub(r"raise course\.ExerciseNotDone\(.*\)", answer, stub.source, count=1)
    for n, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.execution_count = n + 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"ran cell {n}\n")]
    nb.cells.append(nbformat.v4.new_markdown_cell("My notes: t4 looked like a data stall to me, t8 like launch overhead."))
    nb.metadata["language_info"]["version"] = "3.12.4"
    path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")


def test_pytest_passes_in_a_clone_where_a_learner_worked_on_labs_00_and_08(tmp_path):
    if committed_head_missing():
        pytest.skip("not a git checkout: nothing to clone")
    clone = tmp_path / "course"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(clone)], check=True, timeout=120)
    _work_on(clone / "labs" / "00_tools_and_first_profile.ipynb", 'answer = {"first": "nsys"}  # my answer')
    _work_on(clone / "labs" / "08_gpu_bound.ipynb", "x = 1  # my answer")
    (clone / "labs" / "runs" / "first-profile").mkdir(parents=True)
    (clone / "labs" / "runs" / "first-profile" / "trace.json").write_text("{}")
    (clone / "labs" / ".selfcheck.json").write_text(json.dumps({"tools": {"checks": {}}}))
    before = {p.name: p.read_bytes() for p in (clone / "labs").glob("*.ipynb")}
    env = {**os.environ, "PYTHONPATH": str(clone)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                          "-k", "not unsolved_lab and not capture_prints and not course_errors", *LAB_TESTS],
                         cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "passed" in out.stdout and "skipped" not in out.stdout.splitlines()[-1]  # the in-step test ran, on git HEAD
    assert {p.name: p.read_bytes() for p in (clone / "labs").glob("*.ipynb")} == before  # nothing of theirs rewritten
    shutil.rmtree(clone, ignore_errors=True)


def committed_head_missing() -> bool:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0


def test_no_test_reads_a_learners_working_lab():
    """Every test reads labs/ notebooks as shipped: none opens a file under labs/ itself."""
    direct = re.compile(r'\(ROOT / "labs" / [^)]*\)\.read_(text|bytes)|\(ROOT / "labs"\)\.glob\(|ROOT / "labs"\)\.iterdir'
                        r'|nbformat\.read\(ROOT / "labs"|LAB\.read_text\(\)')
    found = [f"{p.name}:{n}" for p in sorted((ROOT / "tests").glob("test_*.py"))
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if direct.search(line) and not line.endswith("# copied as it is")]  # a copy of the tree compared with it
    assert not found, found


def test_no_message_sends_a_learner_to_overwrite_their_labs():
    """make_labs says it overwrites labs/ and is for maintainers, in its help and its --check message; the README's
    table of folders says so where it names it; no test message tells anyone to run it bare."""
    sys.path.insert(0, str(ROOT / "tools"))
    import make_labs

    assert "overwrites" in make_labs.__doc__ and "maintainers" in make_labs.__doc__
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "make_labs.py"), "--help"], capture_output=True, text=True)
    assert "overwrites" in r.stdout and "maintainers" in r.stdout
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for line in readme.splitlines():
        if "python tools/make_labs.py" in line and "--check" not in line:
            assert "overwrit" in line or "maintainer" in line, line
    for p in sorted((ROOT / "tests").glob("test_*.py")):
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            assert not re.search(r"[\"'].*\brun python tools/make_labs\.py", line), f"{p.name}:{n}: {line.strip()}"
