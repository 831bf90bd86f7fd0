"""The command line on recorded traces: every command, JSON schema, no overwriting."""

import json
import re
import shlex
import subprocess
import sys

import pytest
from conftest import DATA

import helpers
from helpers import plots, render
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
    assert set(doc) == {"trace", "summary", "findings", "steady_state", "critical_path", "capture"}
    assert doc["steady_state"]["source"] == "markers" and doc["steady_state"]["steps"] > 0
    f = doc["findings"][0]
    assert set(f) == {"pattern", "cost", "summary", "evidence", "fix", "window", "step_ms", "step_ms_if_fixed", "if_fixed",
                      "ranked_above"}
    assert f["pattern"] == "data_stall" and len(f["window"]) == 2
    # what the fix buys, on the critical path: the step it predicts, and the cost is the share that saves
    assert f["step_ms_if_fixed"] < f["step_ms"] == pytest.approx(doc["critical_path"]["step_ms"])
    assert f["cost"] == pytest.approx(1 - f["step_ms_if_fixed"] / f["step_ms"])
    assert sum(doc["critical_path"]["path_ms_per_step"].values()) == pytest.approx(f["step_ms"])


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
    assert {"X", "M"} <= {e["ph"] for e in doc["traceEvents"]} <= {"X", "M", "s", "f"}  # s/f: launch-to-kernel flows
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


# --- what diagnose prints: readable, and every hint runs as printed -----------------------------------
def _diagnose(path, capsys) -> str:
    assert main(["diagnose", str(path)]) == 0
    return capsys.readouterr().out


def test_diagnose_text_rounds_figures_and_cuts_no_line(capsys):
    out = _diagnose(BROKEN, capsys)
    assert "gpu_idle_ms_per_step: sync 0, data_wait 20, collective 0, launch 2.15, graph 0, other 1.12" in out  # a dict of figures, 3 significant digits
    assert not re.search(r"\d\.\d{5,}", out), out  # no unrounded float anywhere
    fp32 = _diagnose(DATA / "gpu_bound__fp32__h200.json.gz", capsys)
    for line in (out + fp32).splitlines():
        # wrapped at word boundaries: a line is long only when it is one unbreakable word, a kernel or the where command
        assert len(line) <= render.TEXT_WIDTH or " " not in line.strip() or "kernel time" in line \
            or line.lstrip().startswith("python -m helpers plot "), line
    kernels = [line for line in fp32.splitlines() if "of kernel time" in line]
    assert len(kernels) == 3 and kernels[0].rstrip().endswith("_align1>(cutlass_80_simt_sgemm_256x128_8x4_nt_align1::Params)")


def test_where_command_runs_as_printed(tmp_path, monkeypatch, capsys):
    # the sync stall's window is 0.2 ms long: printed as 76.7:77.0, not as 76.8:76.8 (refused by --window)
    monkeypatch.chdir(tmp_path)
    out = _diagnose(DATA / "sync_stall__broken__h200.json.gz", capsys)
    commands = [line.strip() for line in out.splitlines() if line.strip().startswith("python -m helpers plot ")]
    assert commands and commands[0].endswith("-o sync_stall.png"), out  # one a finding, the sync stall's first
    argv = shlex.split(commands[0])
    assert argv[:3] == ["python", "-m", "helpers"]
    assert main(argv[3:]) == 0, capsys.readouterr().err  # the command as printed, in this process (no new interpreter)
    assert (tmp_path / capsys.readouterr().out.strip()).stat().st_size > 10_000


def test_where_window_of_a_short_step_is_accepted_and_covers_it():
    assert render.window_arg(0.21, 0.24) == "0.21:0.24"  # not 0.2:0.2, which --window refuses
    assert render.window_arg(0.2003, 0.2004) == "0.2003:0.2004"
    assert render.window_arg(91.22, 114.68) == "91.2:114.7"  # rounded outwards: the window stays inside
    for a, b in [(0.21, 0.24), (5.0, 5.01), (1234.5678, 1234.5679)]:
        lo, hi = (float(x) for x in render.window_arg(a, b).split(":"))
        assert lo <= a < b <= hi and main(["plot", BROKEN, "--window", f"{lo}:{hi}", "-o", "/dev/null/x.png"]) == 2


def test_where_text_shows_a_short_window_not_zero():
    # A launch gap of 8 us at the start of the axis: two decimals would print it as 0.00-0.01 ms.
    assert render.window_text(0.004, 0.012) == "0.0040-0.0120 ms"
    assert render.window_text(91.22, 114.68) == "91.22-114.68 ms"  # a step-long window: two decimals, as before
    for a, b in ((0.0, 1e-7), (3.2, 3.2000004), (-0.5, 0.25)):
        lo, hi = (float(x) for x in render.window_text(a, b).removesuffix(" ms").rsplit("-", 1))
        assert lo <= hi and abs(lo - a) < 1e-5 and abs(hi - b) < 1e-5
    assert render.window_text(float("nan"), 1.0) == "nan-1.00 ms"  # printed as it is, never a crash
    assert render.window_text(0.0, float("inf")) == "0.00-inf ms" and render.window_arg(0.0, float("inf")) == "0.0:inf"


def test_where_command_of_a_window_before_the_first_step_parses():
    from helpers.cli import build_parser

    cmd = render.where_command(BROKEN, -3.0, 1.0)  # a start-up stretch: negative on the steps' axis
    args = build_parser().parse_args(shlex.split(cmd)[3:])
    assert args.window == "-3.0:1.0" and args.output == "where.png"


def test_where_names_the_trace_file_not_a_label():
    trace = helpers.load(BROKEN)
    found = helpers.diagnose(trace)
    text = render.diagnose_text("before (my loop)", found, trace.has_gpu, source=BROKEN)
    assert text.count(f"python -m helpers plot {BROKEN} --window") == sum(1 for f in found if f.window) >= 1
    # a label that is no file gets the window without a command that could not run
    text = render.diagnose_text("before", helpers.diagnose(trace), trace.has_gpu)
    assert "where: 91.22-114.68 ms" in text and "python -m helpers plot" not in text


def test_a_short_finding_is_shaded_wide_enough_to_see():
    from helpers import plots
    from helpers.diagnosis import Finding

    trace = helpers.load(DATA / "h2d_copy__broken__h200.json.gz")
    finding = Finding("sync_stall", 0.1, "", {}, "", (20_000.0, 20_200.0))  # 0.2 ms of a ~120 ms trace
    fig = plots.timeline(trace, findings=[finding])
    ax = fig.axes[0]
    t0, t1 = ax.get_xlim()
    widths = [p.get_width() for p in ax.patches if type(p).__name__ == "Rectangle" and p.get_width() < (t1 - t0) / 2]
    assert widths and min(widths) >= plots.MIN_BAND_PX * (t1 - t0) / plots.FIGURE_WIDTH_PX * 0.99


def test_compare_table_shows_whole_metric_names():
    import matplotlib.pyplot as plt

    from helpers import plots

    h2d = DATA / "h2d_copy__broken__h200.json.gz"  # few events: every GPU metric row, cheaply
    rows = helpers.metrics.comparison(helpers.load(h2d), helpers.load(DATA / "h2d_copy__fixed__h200.json.gz"))
    fig = plt.figure(figsize=(plots.FIGURE_WIDTH_PX / 100, 4), dpi=100)  # the width plots.compare draws it at
    table = plots.compare_table(fig.add_subplot(), rows)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for (_row, col), cell in table.get_celld().items():
        if col == 0:  # the metric names: every one fits its cell
            assert cell.get_text().get_window_extent(renderer).width <= cell.get_window_extent(renderer).width, \
                cell.get_text().get_text()


def test_an_empty_trace_names_the_usual_cause(tmp_path, capsys):
    path = tmp_path / "empty.json"  # what torch.profiler exports when its schedule recorded nothing
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 10.0, "dur": 84.7}]}))
    text = " ".join(_diagnose(path, capsys).split())
    assert "the profiler recorded nothing" in text
    assert "never reached its active steps" in text and "on_trace_ready" in text


def test_summary_of_an_empty_trace_gives_no_figures_and_of_a_stepless_one_says_what_they_are_over(tmp_path, capsys):
    """No figure of an empty trace is zero: there is none. Without steps the figures are over the whole capture,
    and "per step" would name a step there is not."""
    empty, one = tmp_path / "empty.json", tmp_path / "one.json"
    empty.write_text(json.dumps({"traceEvents": []}))
    one.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1.0, "dur": 5.0}]}))
    assert main(["summary", str(empty)]) == 0
    out = capsys.readouterr().out
    assert "0 events" in out and "the trace holds no events: there are no figures to give" in out
    assert "ms/step" not in out and "data wait" not in out and "no GPU activity" not in out
    assert main(["summary", str(one)]) == 0
    out = capsys.readouterr().out
    assert "(kineto, 1 event, ranks [0], 0 steps)" in out
    assert "0.00 ms in the capture, 0% of the capture" in out and "/step" not in out


def test_where_and_window_count_from_the_plot_axis(capsys, tmp_path):
    """An Nsight export whose first step starts 28 ms into the capture: "where" prints the finding's window on
    the timeline's axis (0 = the first step's start, as the plot labels it), and --window reads it the same."""
    path = DATA / "nsight" / "data_stall__broken__h200.sqlite.gz"
    trace = helpers.load(path)
    origin = plots.time_origin_us(trace)
    assert origin > 1000  # the case this test is about: the axis does not start at the capture's start
    finding = helpers.diagnose(trace)[0]
    assert main(["diagnose", str(path)]) == 0
    where = next(line for line in capsys.readouterr().out.splitlines() if "where:" in line)
    a, b = (float(x) for x in where.split("where:")[1].split("ms")[0].split("-"))
    assert a == pytest.approx((finding.window[0] - origin) / 1e3, abs=0.01)
    assert b == pytest.approx((finding.window[1] - origin) / 1e3, abs=0.01)
    out = tmp_path / "w.png"
    assert main(["plot", str(path), "--window", f"{a}:{b}", "-o", str(out)]) == 0
    ax = plots.timeline(trace, window_ms=(a, b)).axes[0]
    assert ax.get_xlim() == pytest.approx((a, b), abs=0.01)
