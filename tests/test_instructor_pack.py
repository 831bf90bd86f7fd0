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
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=\"(?!data:)", html)  # offline: nothing fetched
    assert "<style>" in html and "<script>" in html and "unpkg" not in html and "cdnjs" not in html
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before  # the notebook is not changed


def test_refuses_to_overwrite_and_unknown_labs(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "00"]) == 0
    assert main(["--out", str(tmp_path), "00"]) == 2
    assert main(["--out", str(tmp_path), "42"]) == 2
    assert capsys.readouterr().err.count("error: ") == 2


def test_slides_are_never_written_through_a_symlink(tmp_path, capsys):
    mine = tmp_path / "mine.html"
    mine.write_text("my notes")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "00_tools_and_first_profile.slides.html").symlink_to(mine)
    (tmp_path / "out" / make_slides.DECK_NAME).symlink_to(mine)
    assert main(["--out", str(tmp_path / "out"), "00"]) == 2
    assert main(["--out", str(tmp_path / "out"), "deck"]) == 2
    assert mine.read_text() == "my notes" and capsys.readouterr().err.count("symbolic link") == 2


def test_expected_figures_page_is_up_to_date():
    import subprocess

    r = subprocess.run([sys.executable, str(ROOT / "tools" / "instructor_figures.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# --- the guide and the per-lab pages ------------------------------------------------------------
import re  # noqa: E402

DOCS = ROOT / "docs"
GUIDE = DOCS / "INSTRUCTORS.md"
PAGES = sorted((DOCS / "instructors").glob("[0-9][0-9]_*.md"))
STUDY_ORDER = ["00", "01", "02", "03", "04", "05", "07", "06", "08", "09", "10", "11"]


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page) -> set[str]:
    return {_slug(line.lstrip("#")) for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("#")}


def test_every_lab_has_a_page_and_a_row_in_the_guide_in_the_order_of_study():
    assert [p.stem for p in PAGES] == [s.stem for s in SOLUTIONS]
    guide = GUIDE.read_text(encoding="utf-8")
    rows = re.findall(r"^\| \d+ \| \[(\d\d) · .*?\| \[(\d\d_\w+)\.md\]\(instructors/\2\.md\)", guide, re.MULTILINE)
    assert [lab for lab, _ in rows] == STUDY_ORDER
    assert sorted(page for _, page in rows) == [p.stem for p in PAGES]
    assert "(instructors/figures.md)" in guide


#: The pack's pages besides the per-lab ones: the day, the pre-flight, the mixed room.
RUNNING = [DOCS / "instructors" / f"{name}.md" for name in ("agenda", "preflight", "mixed_room")]


def test_every_link_and_named_file_in_the_pack_exists():
    guide = GUIDE.read_text(encoding="utf-8")
    for page in RUNNING:
        assert f"(instructors/{page.name})" in guide, f"the guide does not link {page.name}"
    for page in [GUIDE, *PAGES, *RUNNING]:
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
    assert wrong_answers(["08"]) == 0  # the GPU-bound lab: every wrong answer is refused, with the words shown
    out = capsys.readouterr().out
    assert out.count("\n- ") == 6 and "PASSES" not in out and "wrap each block" in out and "L1/TEX" in out
    assert wrong_answers(["42"]) == 2


# --- the learner-only copy -----------------------------------------------------------------------
import subprocess  # noqa: E402

import learner_copy  # noqa: E402


def _triage_labels() -> list[str]:
    """What each blind-triage trace really is, from every place the full course keeps it."""
    labels = set(learner_copy.answer_strings(ROOT))
    from conftest import TRIAGE_KEY

    labels |= {c["what"] for c in TRIAGE_KEY.values()}
    assert len(labels) >= 10  # the scan below would be vacuous without them
    return sorted(labels)


@pytest.fixture(scope="module")
def learner_tree(tmp_path_factory):
    dest = tmp_path_factory.mktemp("copy") / "course"
    assert learner_copy.main([str(dest)]) == 0
    return dest


def test_the_learner_copy_has_the_labs_and_no_solution_instructor_page_or_answer(learner_tree):
    files = {p.relative_to(learner_tree).as_posix() for p in learner_tree.rglob("*") if p.is_file()}
    labs = sorted(p.name for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))  # each lab has its solution
    assert len(labs) == len(SOLUTIONS)
    assert {f"labs/{n}" for n in labs} <= files
    notebooks = {f for f in files if f.endswith(".ipynb")}
    assert notebooks == {f"labs/{n}" for n in labs}  # no solution notebook under any name
    for name in labs:  # each exactly the file in labs/ (as shipped, or with a learner's work: copied as it is)
        assert (learner_tree / "labs" / name).read_bytes() == (ROOT / "labs" / name).read_bytes()  # copied as it is
    instructor_pages = {p.name for p in (DOCS / "instructors").iterdir()} | {"INSTRUCTORS.md"}
    assert not [f for f in files if f.split("/")[-1] in instructor_pages or f.startswith(("solutions/", "tests/"))]
    labels = _triage_labels()
    for f in files:
        try:
            text = (learner_tree / f).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        assert not [w for w in labels if w in text], f"{f} holds a triage answer"
        if f.endswith((".py", ".ipynb")):
            assert "BEGIN SOLUTION" not in text, f
    doc = json.loads((learner_tree / "data" / "manifest.json").read_text())
    full = json.loads((ROOT / "data" / "manifest.json").read_text())
    assert [e["file"] for e in doc["traces"]] == [e["file"] for e in full["traces"]]  # every recording, no label
    assert not any("truth" in e for v in doc.values() if isinstance(v, list) for e in v if isinstance(e, dict))


def test_the_learner_copy_runs_the_labs_helpers(learner_tree):
    code = ("import helpers, helpers.checks.lab05, helpers.checks.lab08; from helpers.course import recorded; "
            "print(helpers.diagnose(recorded('mystery', 'fixed'))[0].pattern)\n"
            "try:\n    helpers.diagnose(recorded('triage', 't5'))\nexcept helpers.TraceError as e:\n    print(e)")
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(learner_tree)}
    r = subprocess.run([sys.executable, "-c", code], cwd=learner_tree, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    first, sealed = r.stdout.strip().splitlines()
    assert first == "gpu_bound" and "waits for your reading" in sealed  # a triage trace is sealed until it is read


def test_the_learner_copy_never_overwrites(tmp_path, capsys):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("a learner's file")
    assert learner_copy.main([str(busy)]) == 2
    assert (busy / "mine.txt").read_text() == "a learner's file" and len(list(busy.iterdir())) == 1
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert learner_copy.main([str(a_file)]) == 2 and a_file.read_text() == "x"
    assert learner_copy.main([str(ROOT / "labs" / "copy")]) == 2 and not (ROOT / "labs" / "copy").exists()
    err = capsys.readouterr().err
    assert err.count("error: ") == 3 and "Traceback" not in err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert learner_copy.main([str(empty)]) == 0 and (empty / "labs").is_dir()


def test_the_copy_rules_and_the_leak_scan(tmp_path):
    assert learner_copy.left_out("solutions/00_tools_and_first_profile.ipynb")
    assert learner_copy.left_out("docs/instructors/figures.md") and learner_copy.left_out("labs/runs/x/trace.json")
    assert not learner_copy.left_out("labs/00_tools_and_first_profile.ipynb")
    clean, n = learner_copy.scrub_manifest({"traces": [{"file": "a", "truth": {"what": "x"}}, {"file": "b"}]})
    assert n == 1 and clean == {"traces": [{"file": "a"}, {"file": "b"}]}
    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "notes.md").write_text("t5 is " + _triage_labels()[0])
    (tmp_path / "labs" / "x.py").write_text("# BEGIN SOLUTION\n")
    (tmp_path / "README.md").write_text("make_labs strips # BEGIN SOLUTION blocks")  # naming the marker is fine
    found = list(learner_copy.leaks(tmp_path, _triage_labels()))
    assert len(found) == 2 and found[0].startswith("labs/notes.md") and found[1].startswith("labs/x.py")


# --- the one-day agenda --------------------------------------------------------------------------
AGENDA = DOCS / "instructors" / "agenda.md"
DAY_LIMIT_MIN = 390  # six and a half hours, breaks included (the workshop's promise)


def _table(text: str, heading: str) -> list[list[str]]:
    """The rows of the first Markdown table after ``heading``, cells stripped, header and rule left out."""
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]


def test_the_agenda_fits_the_day_and_places_every_lab():
    text = AGENDA.read_text(encoding="utf-8")
    day = _table(text, "The day")
    assert len(day) >= 10
    clock = None
    for start, minutes, _what, lab, kind in day:
        h, m = map(int, start.split(":"))
        begins = 60 * h + m
        assert clock is None or begins == clock, f"{start} does not follow the row before it"
        assert int(minutes) > 0 and kind in ("core", "break") and (lab == "-" or re.fullmatch(r"\d\d", lab))
        clock = begins + int(minutes)
    total = sum(int(r[1]) for r in day)
    assert total <= DAY_LIMIT_MIN
    first = 60 * int(day[0][0][:2]) + int(day[0][0][3:])
    assert clock - first == total
    breaks = sum(int(r[1]) for r in day if r[4] == "break")
    assert breaks >= 45  # a lunch at least
    assert f"{total - breaks} minutes of teaching and {breaks} of breaks" in " ".join(text.split())
    optional = _table(text, "Optional parts")
    core_labs = {r[3] for r in day if r[3] != "-"}
    optional_labs = {r[1] for r in optional}
    labs = {p.name[:2] for p in SOLUTIONS}
    assert core_labs | optional_labs == labs, f"not placed: {sorted(labs - core_labs - optional_labs)}"
    assert all(int(r[2]) > 0 for r in optional)
    for named in re.findall(r"\]\(([\w.]+\.md)", text):  # the pages the day sends the instructor to
        assert (AGENDA.parent / named).exists(), named


# --- the pre-flight: python -m helpers doctor ----------------------------------------------------
from helpers import doctor  # noqa: E402
from helpers.cli import main as cli  # noqa: E402


def test_doctor_reports_the_track_the_labs_will_choose(capsys):
    from helpers import course

    assert cli(["doctor", str(ROOT / "labs"), "--json"]) == 0
    found = {f["name"]: f for f in json.loads(capsys.readouterr().out)}
    assert {"python", "torch", "track", "packages", "recordings", "labs folder", "nsys", "ncu"} <= set(found)
    assert found["track"]["detail"].startswith(f"{course.track().upper()} track")
    assert found["recordings"]["status"] == "ok" and found["labs folder"]["status"] == "ok"
    assert cli(["doctor", str(ROOT / "labs")]) == 0
    out = capsys.readouterr().out
    assert "track" in out and out.rstrip().splitlines()[-1].startswith("ready")


def test_doctor_refuses_bad_input_with_one_line(tmp_path, capsys):
    assert cli(["doctor", str(tmp_path / "nowhere")]) == 2
    assert cli(["doctor", str(tmp_path)]) == 2  # a folder without lab notebooks
    (tmp_path / "f.txt").write_text("x")
    assert cli(["doctor", str(tmp_path / "f.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 3 and err.count("error: ") == 3 and "Traceback" not in err


def test_doctor_fails_without_the_recordings_and_warns_of_counters(tmp_path, monkeypatch):
    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "00_x.ipynb").write_text("{}")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "manifest.json").write_text(json.dumps({"traces": [{"file": "gone.json.gz"}]}))
    real_read = doctor._read
    monkeypatch.setattr(doctor, "_read", lambda p: "RmProfilingAdminOnly: 1\n" if p.endswith("params") else real_read(p))
    monkeypatch.setattr(doctor, "_is_root", lambda: False)
    found = {f.name: f for f in doctor.examine(tmp_path / "labs")}
    assert found["recordings"].status == "fail" and "1 of 1" in found["recordings"].detail
    assert doctor.exit_status(list(found.values())) == 1
    assert found["GPU counters"].status == "warn" and "ERR_NVGPUCTRPERM" in found["GPU counters"].detail
    assert "NVreg_RestrictProfilingToAdminUsers=0" in found["GPU counters"].fix


def test_doctor_probe_runs_the_tools_and_names_the_permission_error(tmp_path, monkeypatch):
    import torch

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nsys").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "ncu").write_text("#!/bin/sh\necho '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission'\nexit 1\n")
    for tool in ("nsys", "ncu"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    found = {f.name: f for f in doctor.probe(timeout_s=60)}
    assert found["nsys probe"].status == "ok"
    assert found["ncu probe"].status == "warn" and "ERR_NVGPUCTRPERM" in found["ncu probe"].detail


def test_doctor_probe_stops_a_tool_and_the_children_it_started(tmp_path, monkeypatch):
    import os
    import time

    import torch

    bin_dir, child = tmp_path / "bin", tmp_path / "child.pid"
    bin_dir.mkdir()
    (bin_dir / "nsys").write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {child}\nwait\n")  # a wrapper and its child
    (bin_dir / "nsys").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    found = {f.name: f for f in doctor.probe(timeout_s=1)}
    assert found["nsys probe"].status == "warn" and "did not finish in 1 s" in found["nsys probe"].detail
    pid = int(child.read_text())
    for _ in range(50):  # the kill is sent before probe returns; the process table may lag a moment
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        raise AssertionError("the tool's child outlived the probe's time limit")


def test_doctor_without_torch_is_findings_not_a_traceback(tmp_path, monkeypatch, capsys):
    import sys

    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "00_x.ipynb").write_text("{}")
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    assert cli(["doctor", str(tmp_path / "labs"), "--probe", "--json"]) == 1
    found = {f["name"]: f for f in json.loads(capsys.readouterr().out)}
    assert found["torch"]["status"] == "fail" and found["probe"]["status"] == "note"
    assert found["recordings"]["status"] == "fail"


# --- the concept deck ----------------------------------------------------------------------------
import make_slides  # noqa: E402


def test_the_concept_deck_builds_offline_with_the_data_s_figures(tmp_path):
    assert main(["--out", str(tmp_path), "deck"]) == 0
    page = (tmp_path / make_slides.DECK_NAME).read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page  # nothing to fetch: no CDN, no fonts, no scripts
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=\"(?!data:)", page)  # only inline data
    assert "{{" not in page and "<script>" in page and "<style>" in page
    sections = page.count("<section")
    assert sections == len(make_slides.deck_slides(make_slides.DECK_SOURCE.read_text(encoding="utf-8"))) >= 15
    for concept in ("execution model", "Streams", "CUPTI", "NVTX", "lanes", "DDP", "bucket", "CUDA Graph",
                    "Precision", "torch.compile", "Nsight Compute", "GradScaler", "--clock-control none"):
        assert concept in page, concept
    assert page.count("<svg") >= 6 and page.count("data:image/png;base64,") == 1
    from helpers import course

    lo = course.entry("launch_overhead", "graphs", "h200")
    assert f"{lo['step_ms']:.1f} ms" in page and f"{lo['gpu_utilization']:.0%}" in page
    assert main(["--out", str(tmp_path), "deck"]) == 2  # never replaces the deck without --force


def test_the_deck_refuses_a_figure_it_does_not_know():
    with pytest.raises(KeyError, match="no figure named 'nope'"):
        make_slides.render_deck("preamble\n---\n## x\n{{n:nope}}\n", numbers={})
    with pytest.raises(KeyError, match="no drawing named 'nope'"):
        make_slides.render_deck("preamble\n---\n## x\n\n{{figure:nope}}\n", numbers={})
