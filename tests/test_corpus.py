"""Traces other people recorded and published (tests/corpus/manifest.json says where each came from).

Each trace must load, and its diagnosis must lead with the finding judged by hand from its timeline,
at a cost inside the judged range; a trace judged to hold nothing to diagnose ("refused") must be refused
with one clear error, not read as an idle loop. Where today's diagnosis disagrees, the case is a strict xfail whose
reason says what is wrong, so that fixing the rule turns it into a failure to flip (not a silent pass).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.diagnosis import PATTERNS, diagnose
from helpers.errors import TraceError
from helpers.readers import load

CORPUS = Path(__file__).parent / "corpus"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())["traces"]
ROOT = Path(__file__).resolve().parents[1]
#: What all tracked files may weigh together: learners clone this repository on laptops and free cloud notebooks,
#: and CI clones it on every change. 45 MiB were taken on 2026-12-04; the rest is room for new traces, so each one
#: has to earn its bytes (a faithful cut of a few steps, gzipped, with the cut said in its manifest entry).
#: Raised from 56 on 2026-12-05 for that day's H200 recordings (lab 07's ten triage cases recorded again, 9.9 MB,
#: and labs 09-11's kernel, memory and call-site data, 1.6 MB): 61.9 MiB were taken. Of that, 6.2 MB is triage
#: case t7 alone (a recurrent net of about 4,160 kernels a step): a trial recording of a wide few-kernel model in its
#: place took 0.4 MB, so recording t7 again that way brings the budget back down. Raised to 63 later that day
#: (62.1 MiB: the day's tests and the GPU track's run records): a re-recording of t7 with a wide convolutional
#: model on the H200 took 0.4 MB, but it shows its data stall only through the what-if (the GPU's idle time counted
#: to the sync before the loading), so the lab keeps the recurrent net's recording until its check can read it.
TRACKED_BUDGET_MIB = 63


def _cases():
    for entry in MANIFEST:
        marks = [pytest.mark.xfail(strict=True, reason=entry["disagreement"])] if entry["disagreement"] else []
        yield pytest.param(entry, id=entry["file"].split(".")[0], marks=marks)


def test_the_tracked_files_stay_within_the_clone_budget():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git clone: the tracked files cannot be listed")
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    sizes = {n.decode(errors="replace"): (ROOT / n.decode(errors="replace")).stat().st_size
             for n in names if n and (ROOT / n.decode(errors="replace")).is_file()}
    total_mib = sum(sizes.values()) / 2**20
    largest = ", ".join(f"{name} {size / 2**20:.1f} MiB" for name, size in sorted(sizes.items(), key=lambda kv: -kv[1])[:8])
    assert total_mib <= TRACKED_BUDGET_MIB, (
        f"tracked files weigh {total_mib:.1f} MiB, over the {TRACKED_BUDGET_MIB} MiB a clone may take; "
        f"cut the largest traces to a few steps (largest: {largest})")


def test_manifest_describes_every_file_and_only_those():
    files = {p.name for p in CORPUS.glob("*.gz")}
    assert files == {e["file"] for e in MANIFEST}
    for e in MANIFEST:
        assert e["expected"] in (*PATTERNS, "none", "refused"), e["file"]
        assert len(e["commit"]) == 40 and e["repository"].count("/") == 1 and e["reason"]
        # only what a licence lets us redistribute: a repository that states none grants no such right
        assert e["licence"] and e["licence"].lower() not in ("not stated", "none", "unknown"), e["file"]
        assert 0 <= e["cost"][0] <= e["cost"][1] <= 1
        assert (CORPUS / e["file"]).stat().st_size == e["stored_bytes"]


@pytest.mark.parametrize("entry", _cases())
def test_published_trace_gets_its_hand_judged_finding(entry):
    if entry["expected"] == "refused":
        with pytest.raises(TraceError) as refused:
            load(CORPUS / entry["file"])
        assert "\n" not in str(refused.value) and "capture" in str(refused.value), str(refused.value)
        return
    trace = load(CORPUS / entry["file"])
    assert len(trace.events) > 0
    if entry["pytorch"].startswith("1.8"):  # the oldest Kineto spellings read as GPU work, not an idle capture
        assert {"kernel", "runtime", "cpu_op"} <= set(trace.events["kind"].astype(str)), entry["file"]
    findings = diagnose(trace)
    top = findings[0].pattern if findings else "none"
    assert top == entry["expected"], f"{entry['file']}: {top}, judged {entry['expected']} ({entry['reason']})"
    if findings:
        lo, hi = entry["cost"]
        assert lo <= findings[0].cost <= hi, f"{entry['file']}: cost {findings[0].cost:.2f} outside {lo}-{hi}"



def test_an_older_nsys_export_stores_each_runtime_call_twice_and_is_read_once():
    """The 2021 export keeps every CUDA runtime call in two rows (eventClass 0 and 67, one correlation id):
    each call is one event, so the first cudaMalloc's 210 ms of context creation is counted once."""
    import gzip
    import sqlite3
    import tempfile
    entry = next(e for e in MANIFEST if e["file"] == "nsys_extrap_a100_vector_ops.sqlite.gz")
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "t.sqlite"
        db.write_bytes(gzip.decompress((CORPUS / entry["file"]).read_bytes()))
        con = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
        rows, calls = con.execute("SELECT COUNT(*), COUNT(DISTINCT correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
        con.close()
    assert rows == 2 * calls == 36
    trace = load(CORPUS / entry["file"])
    runtime = trace.events[trace.events["kind"] == "runtime"]
    assert len(runtime) == calls and runtime["correlation"].is_unique
    assert diagnose(trace)[0].evidence["startup_share"] < 0.7  # 0.62: counted twice it would pass 1


def _tool_without_helpers(name: str):
    """tools/NAME.py, loaded as a module, after checking it imports nothing from helpers: the corpus's tools read and
    cut traces for a hand judgement, which comes before the toolkit's."""
    import ast
    import importlib.util
    path = ROOT / "tools" / f"{name}.py"
    imported = {n.module if isinstance(n, ast.ImportFrom) else a.name
                for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in (n.names if isinstance(n, ast.Import) else [n])}
    assert not any(str(m).split(".")[0] == "helpers" for m in imported), imported
    spec = importlib.util.spec_from_file_location(name, path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_the_hand_reading_tool_reads_both_formats_without_the_toolkit(capsys):
    """tools/corpus_reading.py gives the figures a hand judgement rests on; it must not lean on helpers
    (the judgement comes before the toolkit), and it must read a Kineto trace and a gzipped nsys export."""
    tool = _tool_without_helpers("corpus_reading")
    assert tool.main([str(CORPUS / "hta_gp100_tiny_training_loop.json.gz")]) == 0
    out = capsys.readouterr().out
    assert "device: Quadro GP100" in out and "kernels 130:" in out and "GPU busy per" in out
    assert tool.main([str(CORPUS / "nsys_lighttransport_rtx5060ti_no_work.sqlite.gz")]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA GeForce RTX 5060 Ti" in out and "cuStreamCreate" in out
    assert tool.main([str(CORPUS / "hta_gp100_tiny_training_loop.json.gz"), "--gaps", "50"]) == 0
    out = capsys.readouterr().out
    assert "GPU idle" in out and "innermost host event" in out
    assert tool.main([str(ROOT / "data" / "published__dlrm_8gpu__v100"), "--ranks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 9 and lines[8].split()[:3] == ["7", "7.51", "12.51"]  # rank 7 starts last


def test_a_capture_under_a_second_is_said_in_milliseconds():
    """The published device-query window is 14.6 ms of CUDA calls: printed in seconds it read 'spans 0.0 s'."""
    found = diagnose(load(CORPUS / "ext_particle_transformer_a100_device_queries.json.gz"))
    assert found[0].pattern == "capture_window" and "spans 14.6 ms" in found[0].summary, found[0].summary


def test_the_window_cutting_tool_keeps_whole_events_inside_the_window_only(tmp_path):
    """tools/corpus_window.py cuts the corpus's windows: it imports nothing from helpers, keeps every metadata
    event and every event wholly inside the window, drops those crossing an edge, and clips the profiler's span."""
    tool = _tool_without_helpers("corpus_window")
    ev = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
          {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": 1000, "dur": 9000},
          {"ph": "X", "cat": "cpu_op", "name": "before", "ts": 1000, "dur": 500},
          {"ph": "X", "cat": "cpu_op", "name": "across_start", "ts": 2500, "dur": 1000},
          {"ph": "X", "cat": "kernel", "name": "inside", "ts": 4000, "dur": 1000},
          {"ph": "i", "name": "mark", "ts": 4500, "s": "t"},
          {"ph": "X", "cat": "kernel", "name": "across_end", "ts": 5500, "dur": 1000}]
    out, kept, total = tool.cut({"schemaVersion": 1, "traceEvents": ev}, 2.0, 5.0)  # ms from the first timed event
    names = [e["name"] for e in out["traceEvents"]]
    assert names == ["thread_name", "PyTorch Profiler (0)", "inside", "mark"] and (kept, total) == (4, 7)
    span = out["traceEvents"][1]
    assert (span["ts"], span["dur"]) == (3000, 3000) and out["schemaVersion"] == 1
    src, dst = tmp_path / "in.json", tmp_path / "out.json.gz"
    src.write_text(json.dumps({"traceEvents": ev}))
    assert tool.main([str(src), str(dst), "2", "5"]) == 0 and load(dst).events["name"].tolist() == ["inside"]
    assert tool.main([str(src), str(dst), "2", "5"]) == 2  # never overwrites
