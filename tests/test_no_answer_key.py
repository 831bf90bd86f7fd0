"""No answer key readable from the installed package in plain text (helpers/, data/, labs/).

For each blind-triage trace, none of its patterns may stand near its id (within NEAR characters) in any
text file, and none of the instructors' descriptions of it; for each lab 00 tool question, its tool may
not follow the question. The key itself (docs/instructors/triage_key.json) and the tests know the
answers; the package holds digests only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import ROOT, TRIAGE_KEY, shipped_notebook

#: Where a learner's installed course lives: the package, its data and the notebooks they open.
SHIPPED = ("helpers", "data", "labs")
NEAR = 300  # characters: a trace id this close to one of its patterns would label it
#: The tool each lab 00 question wants (tests may know answers).
TOOL_ANSWERS = ("nsys", "ncu", "torch", "nsys", "ncu", "torch")
BINARY = (".gz", ".png", ".pickle", ".pyc", ".nsys-rep", ".ncu-rep", ".sqlite")
#: How the labs and messages spell each pattern in words, besides its name.
WORDS = {"gpu_bound": ("gpu-bound", "gpu bound"), "host_bound": ("host-bound", "host bound"),
         "launch_overhead": ("launch overhead", "launch-bound"), "data_stall": ("data stall", "data-loading stall"),
         "sync_stall": ("sync stall",), "h2d_copy": ("h2d cop", "host-to-device cop")}


def _texts() -> list[tuple[str, str]]:
    out = []
    for top in SHIPPED:
        if top == "labs":  # the labs as shipped, not the learner's saved work (their own notes may name answers)
            out += [(f"labs/{p.name}", shipped_notebook(f"labs/{p.name}")) for p in sorted((ROOT / "solutions").glob("*.ipynb"))]
            continue
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix in BINARY:
                continue
            try:
                out.append((path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")))
            except (UnicodeDecodeError, OSError):
                continue  # binary: a report or an image
    return out


TEXTS = _texts()
LOWER = [(name, text.lower()) for name, text in TEXTS]


def _near(text: str, trace_id: str, pattern: str) -> list[str]:
    """Where ``trace_id`` stands within NEAR characters of ``pattern`` (its name or its words) in lower-cased ``text``."""
    if trace_id not in text:
        return []
    # an id, not a C++ template's type parameter ("const t1 *" in a kernel's name)
    ids = [m.start() for m in re.finditer(rf"(?<![\w.])(?<!const ){re.escape(trace_id)}(?![\d\w])(?!\s*[*&])", text)]
    spelled = "|".join(re.escape(w) for w in (pattern, *WORDS.get(pattern, ())))
    pats = [m.start() for m in re.finditer(rf"\b(?:{spelled})", text)]
    return [text[max(0, i - 60):i + 60].replace("\n", " ") for i in ids for j in pats if abs(i - j) <= NEAR]


def test_the_scan_reads_the_package():
    names = {n for n, _ in TEXTS}
    assert "helpers/checks/lab05.py" in names and "data/manifest.json" in names
    assert "labs/07_blind_triage.ipynb" in names and len(TRIAGE_KEY) == 10


def test_no_triage_trace_stands_next_to_its_patterns():
    hits = []
    for trace_id, case in TRIAGE_KEY.items():
        for pattern in set(case["patterns"]) | set(case["recorded_patterns"]):
            for name, text in LOWER:
                hits += [f"{name}: {trace_id} ~ {pattern}: ...{h}..." for h in _near(text, trace_id, pattern)]
    assert not hits, "\n".join(hits[:20])


def test_no_triage_description_is_in_the_package():
    hits = []
    for trace_id, case in TRIAGE_KEY.items():
        for field in ("what", "decoy", "note", "second"):
            words = case[field][:40]
            if len(words) >= 25:  # shorter phrases ("two problems at once") are the lab's own words
                hits += [f"{name}: {trace_id}.{field}" for name, text in TEXTS if words in text]
    assert not hits, hits


def test_the_scan_would_find_a_key():
    leaked = json.dumps({"t7": {"patterns": ["data_stall", "sync_stall"]}})
    assert _near(leaked, "t7", "sync_stall") and not _near(leaked, "t1", "sync_stall")
    assert _near("that is a gpu-bound loop (t1).", "t1", "gpu_bound")
    assert not _near("t10 ... gpu_bound", "t1", "gpu_bound")  # t10 is not t1


def test_no_tool_answer_follows_its_question():
    from helpers import checks

    hits = []
    for question, tool in zip(checks.TOOL_QUESTIONS, TOOL_ANSWERS):
        for name, text in TEXTS:
            at = text.find(question)
            while at >= 0:
                after = text[at + len(question):at + len(question) + 40]
                at = text.find(question, at + 1)
                if re.search(rf"""['"]{tool}['"]""", after):
                    hits.append(f"{name}: {question[:30]}... -> {tool}")
    assert not hits, hits
    assert checks.check_tool_choice(dict(zip(checks.TOOL_QUESTIONS, TOOL_ANSWERS))).startswith("passed")


def test_no_check_hands_out_an_answer_without_a_reading():
    from helpers import checks
    from helpers.checks import lab00, lab05, lab06

    for module, names in ((lab05, ("TRIAGE", "manifest_truth")), (lab00, ("_tool_is_right",)),
                          (lab06, ("kernel_limiter", "analyze_rule_matters"))):
        for name in names:
            assert not hasattr(module, name) and not hasattr(checks, name), name
    assert Path(ROOT / "helpers" / "workloads" / "triage.py").exists() is False
