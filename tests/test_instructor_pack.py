"""The instructor pack: slides build from every solution notebook (one slide per heading, notebooks untouched); the expected-figures page matches the data."""

from __future__ import annotations

import hashlib
import json
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
from make_slides import as_slides, main, slide_type  # noqa: E402

SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


def test_headings_start_slides():
    md = lambda text: {"cell_type": "markdown", "source": text}  # noqa: E731
    assert slide_type(md("# Lab 01 · x")) == "slide" and slide_type(md("## 2. y")) == "slide"
    assert slide_type(md("### Exercise 1 · z")) == "subslide" and slide_type(md("plain text")) == "-"
    assert slide_type({"cell_type": "code", "source": "# Check"}) == "-"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_every_lab_builds_to_slides(path, tmp_path):
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    assert main(["--out", str(tmp_path), path.name[:2]]) == 0
    html = (tmp_path / f"{path.stem}.slides.html").read_text()
    nb = json.loads(path.read_text())
    n_slides = sum(c["metadata"]["slideshow"]["slide_type"] in ("slide", "subslide") for c in as_slides(nb)["cells"])
    assert n_slides >= 3 and html.count("<section") >= n_slides
    assert "By the end of this lab you will be able to" in html
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before  # the notebook is not changed


def test_refuses_to_overwrite_and_unknown_labs(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "00"]) == 0
    assert main(["--out", str(tmp_path), "00"]) == 2
    assert main(["--out", str(tmp_path), "42"]) == 2
    assert capsys.readouterr().err.count("error: ") == 2


def test_expected_figures_page_is_up_to_date():
    import subprocess

    r = subprocess.run([sys.executable, str(ROOT / "tools" / "instructor_figures.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
