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


# --- the guide and the per-lab pages ------------------------------------------------------------
import re  # noqa: E402

DOCS = ROOT / "docs"
GUIDE = DOCS / "INSTRUCTORS.md"
PAGES = sorted((DOCS / "instructors").glob("[0-9][0-9]_*.md"))
STUDY_ORDER = ["00", "01", "02", "03", "04", "05", "07", "06", "08"]


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page) -> set[str]:
    return {_slug(line.lstrip("#")) for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("#")}


def test_every_lab_has_a_page_and_a_row_in_the_guide_in_the_order_of_study():
    assert [p.stem for p in PAGES] == [s.stem for s in SOLUTIONS]
    guide = GUIDE.read_text(encoding="utf-8")
    rows = re.findall(r"^\| \d \| \[(\d\d) · .*?\| \[(\d\d_\w+)\.md\]\(instructors/\2\.md\)", guide, re.MULTILINE)
    assert [lab for lab, _ in rows] == STUDY_ORDER
    assert sorted(page for _, page in rows) == [p.stem for p in PAGES]
    assert "(instructors/figures.md)" in guide


def test_every_link_and_named_file_in_the_pack_exists():
    for page in [GUIDE, *PAGES]:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"LAB0\d_CPU|TIMING_TABLE|RUNMAX", text), f"{page.name}: a placeholder is left"
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.exists(), f"{page.name}: link to {target} points nowhere"
            if anchor and dest.suffix == ".md":
                assert anchor in _anchors(dest), f"{page.name}: {target}: no such heading"
        for named in re.findall(r"`((?:labs|solutions|helpers|tests|tools|docs|data)/[\w./-]+\.(?:ipynb|py|md|json))`", text):
            if "NN" in named or "/." in named:  # a pattern (labNN.py) or what a learner's run writes (.selfcheck.json)
                continue
            assert (ROOT / named).exists(), f"{page.name} names {named}, which does not exist"


def test_the_wrong_answers_script_prints_what_the_learner_sees(capsys):
    sys.path.insert(0, str(DOCS / "instructors"))
    from wrong_answers import main as wrong_answers

    assert wrong_answers(["07"]) == 0
    out = capsys.readouterr().out
    assert out.count("Not yet (t") >= 8 and "PASSES" not in out
    assert wrong_answers(["42"]) == 2
