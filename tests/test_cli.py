"""The command line on recorded traces: every command, JSON schema, no overwriting."""

import json
import subprocess
import sys

import pytest
from conftest import DATA

import helpers
from helpers.cli import main

BROKEN = str(DATA / "data_stall__broken__h200.json.gz")
FIXED = str(DATA / "data_stall__fixed__h200.json.gz")


def run(*args):
    return subprocess.run([sys.executable, "-m", "helpers", *args], capture_output=True, text=True)


def test_summary_and_diagnose_text(capsys):
    assert main(["summary", BROKEN]) == 0
    out = capsys.readouterr().out
    assert "GPU utilization" in out and "NVIDIA H200" in out
    assert main(["diagnose", BROKEN]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1. data_stall") and "fix:" in out


def test_diagnose_json_schema(capsys):
    assert main(["diagnose", BROKEN, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"trace", "summary", "findings", "steady_state"}
    assert doc["steady_state"]["source"] == "markers" and doc["steady_state"]["steps"] > 0
    f = doc["findings"][0]
    assert set(f) == {"pattern", "cost", "summary", "evidence", "fix", "window"}
    assert f["pattern"] == "data_stall" and len(f["window"]) == 2


def test_plot_compare_export(tmp_path, capsys):
    out = tmp_path / "t.png"
    assert main(["plot", BROKEN, "-o", str(out), "--step", "1", "--findings"]) == 0
    assert out.stat().st_size > 10_000
    assert main(["plot", BROKEN, "-o", str(out)]) == 2  # never overwrites
    assert "already exists" in capsys.readouterr().err
    assert main(["plot", BROKEN, "-o", str(tmp_path / "w.png"), "--window", "5:2"]) == 2
    assert main(["compare", BROKEN, FIXED, "-o", str(tmp_path / "c.png")]) == 0
    assert "step time" in capsys.readouterr().out
    exported = tmp_path / "e.json"
    assert main(["export", BROKEN, "-o", str(exported)]) == 0
    doc = json.loads(exported.read_text())
    assert {e["ph"] for e in doc["traceEvents"]} == {"X", "M"}
    again = helpers.load(exported)  # the exported JSON reads back with the same events
    original = helpers.load(BROKEN)
    assert again.events["kind"].value_counts().to_dict() == original.events["kind"].value_counts().to_dict()
    assert again.events["dur_us"].sum() == pytest.approx(original.events["dur_us"].sum(), rel=1e-6)


def test_directory_and_cpu_only_trace():
    r = run("summary", str(DATA / "communication__manual__cpu"))
    assert r.returncode == 0 and "ranks [0, 1]" in r.stdout and "no GPU activity" in r.stdout


@pytest.mark.parametrize("args", [["summary"], ["nonsense", "x"]])
def test_usage_errors(args):
    assert run(*args).returncode == 2
