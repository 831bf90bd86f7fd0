"""Hostile inputs, round 6: a folder rank without events, figures that round to zero quoted as evidence, and
the families of this round (see each section)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synth import kineto_doc, two_step_loop, write_json

import helpers
from helpers import metrics, patterns, render
from helpers.cli import main

ROOT = Path(__file__).resolve().parents[1]


# --- a rank whose file holds no events is listed, saying so ----------------------------------------------------

def _job_with_a_silent_rank(tmp_path: Path, silent: tuple[int, ...] = (1,)) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    for r in range(3):
        if r in silent:
            (job / f"rank{r}.json").write_text(json.dumps(kineto_doc([], rank=r, world=3)))
        else:
            write_json(two_step_loop(), job / f"rank{r}.json", rank=r, world=3)
    return job


@pytest.mark.parametrize("silent", [(1,), (0, 2)])
def test_summary_lists_a_rank_without_events_and_says_so(tmp_path, capsys, silent):
    job = _job_with_a_silent_rank(tmp_path, silent)
    s = metrics.summary(helpers.load(job))
    assert s["ranks"] == [0, 1, 2] and s["ranks_without_events"] == list(silent)
    assert main(["summary", str(job)]) == 0
    out = capsys.readouterr().out
    assert "ranks [0, 1, 2]" in out and f"{', '.join(map(str, silent))} ha" in out and "no events" in out
    assert main(["summary", str(job), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranks_without_events"] == list(silent)


def test_a_job_of_silent_ranks_only_says_no_rank_holds_events(tmp_path, capsys):
    job = _job_with_a_silent_rank(tmp_path, (0, 1, 2))
    assert main(["summary", str(job)]) == 0
    out = capsys.readouterr().out
    assert "no rank's file holds any" in out and "other ranks" not in out


def test_a_whole_job_has_no_silent_ranks_key(tmp_path):
    job = _job_with_a_silent_rank(tmp_path, ())
    assert "ranks_without_events" not in metrics.summary(helpers.load(job))
    assert "no events" not in render.summary_text(metrics.summary(helpers.load(job)))


# --- a figure that rounds to 0 is never quoted as evidence ----------------------------------------------------

def _sync_signals(points: float, blocked: float) -> dict:
    return {"sync_points_per_step": points, "sync_blocked_share": blocked, "sync_gpu_idle_share": 0.65,
            "sync_stall_share": 0.2, "gains": {"sync_stall": 0.23}}


@pytest.mark.parametrize("points, blocked", [(0.0, 0.0), (0.04, 0.0), (0.0, 0.004), (0.03, 0.001), (2.0, 0.001),
                                             (2.0, 0.3)])
def test_the_sync_stall_never_quotes_a_zero(points, blocked):
    text = patterns._say_sync_stall(_sync_signals(points, blocked))
    assert "0.0 host syncs" not in text and " 0% of the step for the GPU" not in text, text
    if points >= 0.05:
        assert f"{points:.1f} host syncs per step" in text
    else:
        assert "free GPU memory" in text


def test_shown_is_none_exactly_where_the_format_shows_zero():
    assert patterns._shown(0.04, ".1f") is None and patterns._shown(0.05, ".1f") == "0.1"
    assert patterns._shown(0.004, ".0%") is None
    assert patterns._shown(0.006, ".0%") == "1%" and patterns._shown(-0.0, ".1f") is None


def test_the_empty_cache_trace_says_what_its_sync_waits_are():
    entry = next(e for e in json.loads((ROOT / "data" / "manifest.json").read_text())["traces"]
                 if e.get("workload") == "gpu_bound" and e.get("variant") == "empty_cache")
    findings = helpers.diagnose(helpers.load(ROOT / "data" / entry["file"]))
    sync = next((f for f in findings if f.pattern == "sync_stall"), None)
    if sync is not None:
        assert "0.0 host syncs" not in sync.summary and "free GPU memory" in sync.summary, sync.summary


# --- JSON that Python's json writes and JSON does not allow: said as what it is ---------------------------------

@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("size", [1, 200_000])
def test_nan_and_infinity_are_named_not_called_a_truncation(tmp_path, word, size):
    evs = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": i * 2.0, "dur": 1.0}
           for i in range(size)]
    text = json.dumps({"traceEvents": evs})
    at = text.index('"dur": 1.0', len(text) // 2)
    p = tmp_path / "t.json"
    p.write_text(text[:at] + f'"dur": {word}' + text[at + 10:])
    with pytest.raises(helpers.TraceError, match="NaN or Infinity") as e:
        helpers.load(p)
    assert "truncated" not in str(e.value)


@pytest.mark.parametrize("number", ["1e999999", "9" * 400])
def test_a_number_past_a_double_is_not_called_a_truncation(tmp_path, number):
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": ' + number
                 + ', "dur": 1}]}')
    with pytest.raises(helpers.TraceError) as e:
        helpers.load(p)
    assert "truncated" not in str(e.value) and "beyond any time" in str(e.value)


# --- outputs: a name no file can have ---------------------------------------------------------------------------

@pytest.mark.parametrize("command, suffix", [(["export"], "json"), (["plot"], "png"), (["compare", "{src}"], "png"),
                                             (["report"], "html")])
def test_an_output_name_with_a_nul_is_one_line(tmp_path, capsys, monkeypatch, command, suffix):
    monkeypatch.chdir(tmp_path)
    src = write_json(two_step_loop(), tmp_path / "t.json")
    args = [command[0], str(src), *(a.format(src=src) for a in command[1:])]
    assert main([*args, "-o", f"a\0b.{suffix}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("NUL" in err or "null" in err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


# --- a timeline window far narrower than the ranges it cuts through ------------------------------------------------

@pytest.mark.parametrize("window", ["0:0.000001", "0.2:0.2000001", "0:1e-12", "0:0.001"])
def test_a_window_narrower_than_its_ranges_draws(tmp_path, window):
    src = write_json(two_step_loop(), tmp_path / "t.json")
    out = tmp_path / "w.png"
    assert main(["plot", str(src), "--window", window, "--findings", "-o", str(out)]) == 0
    assert out.stat().st_size > 0


# --- the environment: python -OO strips docstrings ------------------------------------------------------------------

def test_the_command_line_runs_under_python_OO(tmp_path):
    import subprocess
    import sys

    src = write_json(two_step_loop(), tmp_path / "t.json")
    for args in (["summary", str(src)], ["diagnose", str(src), "--json"], ["--help"]):
        r = subprocess.run([sys.executable, "-OO", "-m", "helpers", *args], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr[-400:])


def test_no_module_reads_its_docstring_without_a_fallback():
    import re

    bare = re.compile(r"(?<![\w.])__doc__\.")  # __doc__.splitlines(): None under python -OO
    found = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "helpers").rglob("*.py"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if bare.search(line)]
    assert not found, found


# --- a trace's events table edited between calls: its times are checked where every edit passes ------------------

def _edits() -> dict:
    import numpy as np
    import pandas as pd

    def at(col, value):
        def edit(t):
            t.events.loc[t.events.index[3], col] = value
        return edit

    return {
        "a NaN start": at("start_us", np.nan), "a NaN duration": at("dur_us", np.nan), "an infinite duration": at("dur_us", np.inf),
        "a negative duration": at("dur_us", -5.0),
        "pd.NA starts": lambda t: t.events.__setitem__("start_us", pd.array([pd.NA] * len(t.events), dtype="Float64")),
        "a whole column of NaN": lambda t: t.events.__setitem__("dur_us", np.nan),
    }


@pytest.mark.parametrize("edit", list(_edits()))
@pytest.mark.parametrize("call", ["diagnose", "summary", "critical_path", "timeline", "steady_state", "export"])
def test_an_edited_table_with_times_no_event_can_have_is_one_line_everywhere(tmp_path, edit, call):
    from helpers import export, plots

    t = helpers.load(write_json(two_step_loop(), tmp_path / "t.json"))
    helpers.diagnose(t)  # the figures cached before the edit must not be served after it
    _edits()[edit](t)
    run = {"diagnose": helpers.diagnose, "summary": metrics.summary, "critical_path": helpers.critical_path,
           "timeline": plots.timeline, "steady_state": helpers.steady_state,
           "export": lambda tr: export.export(tr, tmp_path / "x.json")}[call]
    with pytest.raises(helpers.TraceError, match="trace.events: row|not written") as e:
        run(t)
    assert "\n" not in str(e.value)


def test_end_us_follows_an_edited_duration(tmp_path):
    t = helpers.load(write_json(two_step_loop(), tmp_path / "t.json"))
    helpers.diagnose(t)
    t.events.loc[t.events.index[3], "dur_us"] = 1.0
    assert t.events["end_us"].iloc[3] == t.events["start_us"].iloc[3] + 1.0
    helpers.diagnose(t)


def test_a_loaded_trace_passes_the_time_check_untouched(tmp_path):
    t = helpers.load(write_json(two_step_loop(), tmp_path / "t.json"))
    before = t.events
    helpers.diagnose(t)
    assert t.events is before  # the check reads the table; it neither copies nor changes it


# --- a folder without traces says where they are when they are close --------------------------------------------

def test_a_folder_whose_traces_are_one_level_down_or_hidden_says_so(tmp_path, capsys):
    top = tmp_path / "top"
    (top / "run1").mkdir(parents=True)
    write_json(two_step_loop(), top / "run1" / "rank0.json")
    assert main(["summary", str(top)]) == 2
    assert "its subfolder run1 holds trace files: pass that folder" in capsys.readouterr().err
    hid = tmp_path / "hid"
    hid.mkdir()
    write_json(two_step_loop(), hid / ".rank0.json")
    assert main(["summary", str(hid)]) == 2
    assert "1 hidden file named like a trace (.rank0.json) is skipped" in capsys.readouterr().err


# --- compare: a side that recorded nothing --------------------------------------------------------------------

@pytest.mark.parametrize("empty_side", ["before", "after"])
def test_compare_with_a_trace_that_holds_no_events_is_one_line(tmp_path, capsys, empty_side):
    full = write_json(two_step_loop(), tmp_path / "full.json")
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(kineto_doc([])))
    pair = [empty, full] if empty_side == "before" else [full, empty]
    assert main(["compare", *map(str, pair)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the {empty_side} trace holds no events" in err
    with pytest.raises(helpers.TraceError, match="holds no events"):
        metrics.comparison(*(helpers.load(p) for p in pair))


# --- timeline windows: outside the trace, beside a step, before the axis' zero ----------------------------------

@pytest.mark.parametrize("window", ["1e9:2e9", "-5:-1", "-5:-1e-3", "100:200"])
def test_a_window_that_misses_every_event_is_one_line(tmp_path, capsys, window):
    src = write_json(two_step_loop(), tmp_path / "t.json")
    assert main(["plot", str(src), "--window", window, "-o", str(tmp_path / "w.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no event" in err and not (tmp_path / "w.png").exists()


def test_a_window_and_a_step_together_are_refused_not_one_ignored(tmp_path, capsys):
    from helpers import plots

    src = write_json(two_step_loop(), tmp_path / "t.json")
    assert main(["plot", str(src), "--window", "0:1", "--step", "1", "-o", str(tmp_path / "w.png")]) == 2
    assert "draw one or the other" in capsys.readouterr().err
    with pytest.raises(helpers.TraceError, match="draw one or the other"):
        plots.timeline(helpers.load(src), window_ms=(0, 1), step=1)


@pytest.mark.parametrize("window", ["-0.5:1.5", "-1e-1:1", "-.5:2"])
def test_a_window_starting_before_zero_is_a_value_not_an_option(tmp_path, window):
    src = write_json(two_step_loop(), tmp_path / "t.json")
    assert main(["plot", str(src), "--window", window, "-o", str(tmp_path / "w.png")]) == 0


# --- a damaged first start names the damaged event, not the ones it pushed past the limit --------------------------

@pytest.mark.parametrize("ts", [-1e308, -1e300, -5e18])
def test_a_damaged_earliest_start_names_its_own_event(tmp_path, ts):
    doc = kineto_doc(two_step_loop())
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["ts"], kernel["name"] = ts, "the_damaged_one"
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(helpers.TraceError, match="the_damaged_one") as e:
        helpers.load(p)
    assert f"{ts:.4g}" in str(e.value)


# --- a step pattern that names no range: a typo, not a trace without steps -----------------------------------------

def test_a_step_pattern_that_matches_nothing_is_one_line(tmp_path, capsys):
    src = write_json(two_step_loop(), tmp_path / "t.json")
    assert main(["summary", str(src), "--steps", "tran_step"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matches no range" in err and "'step 0'" in err
    job = tmp_path / "job"
    job.mkdir()
    write_json(two_step_loop(), job / "rank0.json")
    write_json(two_step_loop(), job / "rank1.json")
    with pytest.raises(helpers.TraceError, match="matches no range"):
        helpers.load(job, "tran_step")
    assert len(helpers.load(job, r"step \d").steps) == 4


@pytest.mark.parametrize("workers", [1, 2])
def test_a_step_pattern_that_matches_nothing_is_refused_rank_by_rank_too(tmp_path, capsys, workers):
    """`ranks` and a large folder's `diagnose` read the ranks one by one (helpers.jobs): a pattern naming no range of
    any rank is refused there as the folder reader refuses it; one rank's match is enough to go on."""
    from helpers.jobs import analyse_job

    job = tmp_path / "job"
    job.mkdir()
    write_json(two_step_loop(), job / "rank0.json")
    write_json(two_step_loop(), job / "rank1.json")
    with pytest.raises(helpers.TraceError, match="matches no range of any rank"):
        analyse_job(job, workers=workers, step_pattern="tran_step")
    assert main(["ranks", str(job), "--steps", "tran_step"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matches no range" in err
    assert analyse_job(job, workers=workers, step_pattern="step 0")["ranks"] == 2
