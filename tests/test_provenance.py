"""Provenance on every input of every credit check (issue 29, "Why" 1).

Every trace an exercise takes is judged first by where it was made: a capture made here (stamped by
helpers.capture / communication.run / run_nsys / run_ncu, :mod:`helpers.stamps`) of the exercise's loop,
or the very recording the lab loads, by digest. A shipped recording copied to a scratch folder, a trace of
another loop, the course's own loop where the learner's fix goes, a made-up table or trace: each refused
with one line that says what is missing.
"""

from __future__ import annotations

import shutil
from dataclasses import replace

import pandas as pd
import pytest
from conftest import as_learners, own_capture

import helpers
from helpers import checks, course, stamps
from helpers.checks import exercise, provenance
from helpers.model import Trace

#: Each exercise's trace input that must be made in this kernel (not only a shipped recording).
MADE_HERE = [(ex, t) for ex in exercise.EXERCISES for t in ex.takes
             if t.what in ("trace", "traces") and set(t.made) - {"shipped"}]


def _copied(tmp_path, workload="data_stall", variant="broken", tag="cpu") -> Trace:
    """A shipped recording copied out of data/ to a scratch folder and loaded from there."""
    src = course.DATA / course.entry(workload, variant, tag)["file"]
    dst = tmp_path / "scratch" / f"mine{''.join(src.suffixes)}"
    dst.parent.mkdir(exist_ok=True)
    shutil.copy(src, dst)
    return helpers.load(dst)


def _as_given(takes, trace):
    return [{"bucket_cap_mb": 1, "exposed_ms": 1.0, "trace": trace}] if takes.what == "traces" else trace


@pytest.mark.parametrize("ex,takes", MADE_HERE, ids=lambda v: getattr(v, "check", None) or getattr(v, "name", ""))
def test_a_copied_recording_is_refused_by_every_credit_check(ex, takes, tmp_path):
    copied = _copied(tmp_path, "host_bound", "broken", "cpu")  # a recording no exercise reads
    assert stamps.stamp_of(copied) is None and not checks.shipped(copied)
    problem = provenance.problems(ex, {takes.name: _as_given(takes, copied)})
    assert problem is not None, (ex.check, takes.name)
    if "shipped" in takes.made:  # a reading of the lab's recording: another recording is not it
        assert "is not the trace this exercise reads" in problem and "pass the trace the lab loads" in problem
    else:
        assert "was not made in this notebook" in problem and "(a course recording, even copied to another folder" in problem
        assert exercise.MADE[takes.made[0]].split("(")[0] in problem  # says how to make it


@pytest.mark.parametrize("ex,takes", [(e, t) for e, t in MADE_HERE if "shipped" not in t.made and not t.mine],
                         ids=lambda v: getattr(v, "check", None) or getattr(v, "name", ""))
def test_a_capture_of_another_loop_is_refused_where_the_exercises_loop_is_asked(ex, takes, tmp_path):
    t = course.recorded("data_stall", "broken", "cpu")
    other = own_capture(replace(t, events=t.events.copy(), metadata={}, _memo={}), by=takes.made[0],
                        of=("host_bound",), mine=False)
    problem = provenance.problems(ex, {takes.name: _as_given(takes, other)})
    assert problem and f"is a capture of another loop (host_bound), not of the {takes.of} loop" in problem


@pytest.mark.parametrize("ex,takes", [(e, t) for e, t in MADE_HERE if t.mine],
                         ids=lambda v: getattr(v, "check", None) or getattr(v, "name", ""))
def test_the_courses_own_loop_is_refused_where_the_learners_fix_goes(ex, takes):
    t = course.recorded("data_stall", "broken", "cpu")
    course_only = own_capture(replace(t, events=t.events.copy(), metadata={}, _memo={}), by=takes.made[0],
                              of=(takes.of or "data_stall",), mine=False)
    problem = provenance.problems(ex, {takes.name: _as_given(takes, course_only)})
    assert problem and "runs only the course's code" in problem and "none of yours" in problem
    learners = own_capture(replace(t, events=t.events.copy(), metadata={}, _memo={}), by=takes.made[0])
    assert provenance.problems(ex, {takes.name: _as_given(takes, learners)}) is None


def test_a_real_capture_is_stamped_with_its_loop_and_a_copy_of_a_recording_is_not(tmp_path):
    import torch

    from helpers.workloads import sync_stall

    course_step = sync_stall.make_step("broken", torch.device("cpu"))
    broken = helpers.capture(course_step, steps=2, out_dir=tmp_path, name="b")
    how = stamps.stamp_of(broken)
    assert how["by"] == "capture" and how["workloads"] == ["sync_stall"] and how["learner"] == []
    mine = helpers.capture(lambda i: (torch.ones(8) * i).sum(), steps=2, out_dir=tmp_path, name="m")  # code of theirs
    assert stamps.stamp_of(mine)["learner"] and stamps.stamp_of(mine)["step"] != how["step"]
    assert stamps.stamp_of(helpers.load(broken.source)) == how  # reloading the file made here keeps its stamp
    ex = exercise.find("sync", "check_sync_fixed")
    assert provenance.problems(ex, {"before": broken, "after": mine}) is None
    assert "runs only the course's code (sync_stall)" in provenance.problems(ex, {"before": broken, "after": broken})
    # its events changed after the capture: the stamp no longer holds
    edited = replace(mine, events=mine.events.iloc[: len(mine.events) // 2].copy(), _memo={})
    assert "was not made in this notebook" in provenance.problems(ex, {"before": broken, "after": edited})


# --- lab 00 ---------------------------------------------------------------------------------------
def test_lab00_annotated_phases_refuses_a_course_recording(tmp_path):
    shipped = course.recorded("host_bound", "broken")  # the recording the lab shows, annotated
    with pytest.raises(checks.CheckFailed, match="is a trace the course recorded, not yours"):
        checks.check_annotated_phases(shipped)
    with pytest.raises(checks.CheckFailed, match="was not made in this notebook"):
        checks.check_annotated_phases(_copied(tmp_path, "host_bound", "broken", "h200"))
    assert checks.check_annotated_phases(as_learners(shipped)).startswith("passed")


# --- lab 06: the shipped report the lab loads, by digest ------------------------------------------
STALL_ANSWERS = {"top_api_call": "cudaLaunchKernel", "top_kernel": "void wgrad_alg0_engine<float, (int)128"}


def _two_events() -> Trace:
    ev = pd.DataFrame({"name": ["cudaLaunchKernel", "void wgrad_alg0_engine<float, (int)128, 6, 7, 3, 3, 5, 0, false>"],
                       "kind": ["runtime", "kernel"], "start_us": [0.0, 5.0], "dur_us": [10.0, 100.0],
                       "end_us": [10.0, 105.0], "rank": [0, 0], "step": [-1, -1]})
    return Trace(ev, "made-up.sqlite", "nsys-sqlite", {})


def test_lab06_stats_reading_judges_the_shipped_report_not_a_made_up_trace():
    stall = course.shipped_nsys_export("data_stall", "broken")
    assert checks.check_stats_reading(STALL_ANSWERS, stall).startswith("passed")
    with pytest.raises(checks.CheckFailed, match=r"made-up.sqlite\) is not the trace this exercise reads \(the course's "
                                                 r"nsys:data_stall:broken\)"):
        checks.check_stats_reading(STALL_ANSWERS, _two_events())
    edited = replace(stall, events=stall.events.iloc[:-1].copy(), _memo={})  # the report with a row dropped
    with pytest.raises(checks.CheckFailed, match="a copy with its events changed"):
        checks.check_stats_reading(STALL_ANSWERS, edited)


def test_lab06_kernel_limiter_judges_the_shipped_ncu_table_or_run_ncus_not_a_made_up_one():
    from helpers.readers.ncu import read_ncu

    e = course.nsight_entry("sync_stall", "fixed")
    table = read_ncu(course.DATA / e["ncu_csv"])
    row = table.iloc[0]
    right = "compute" if row["compute_throughput_pct"] >= row["memory_throughput_pct"] else "memory"
    if max(row["compute_throughput_pct"], row["memory_throughput_pct"]) < 60:
        right = "latency"
    assert checks.check_kernel_limiter(right, table).startswith("passed")
    one_row = pd.DataFrame([{"compute_throughput_pct": 90.0, "memory_throughput_pct": 10.0}])
    with pytest.raises(checks.CheckFailed, match="neither a table run_ncu returned in this notebook nor the course's "
                                                 "shipped ncu:sync_stall:fixed table"):
        checks.check_kernel_limiter("compute", one_row)
    doctored = table.copy()
    doctored.loc[doctored.index[0], "memory_throughput_pct"] = 99.0
    with pytest.raises(checks.CheckFailed, match="a table typed in or edited earns nothing"):
        checks.check_kernel_limiter("memory", doctored)
    # a table run_ncu returned here (on a GPU): stamped, and accepted
    made = stamps.stamp_table(one_row.copy(), {"by": "run_ncu", "command": "ncu ...", "workloads": [], "learner": []})
    assert checks.check_kernel_limiter("compute", made).startswith("passed")


# --- lab 04, lab 08, lab 01: the checks that only refused a path under data/ -------------------------
@pytest.mark.parametrize("call", [
    lambda t, m: checks.check_comm_fixed(m, t),
    lambda t, m: checks.check_bucket_sweep([{"bucket_cap_mb": mb, "step_ms": 1.0, "exposed_ms": 1.0, "trace": t}
                                            for mb in (1, 10, 100)]),
    lambda t, m: checks.check_bucket_sweep({"bucket_cap_mb": mb, "step_ms": 1.0, "exposed_ms": 1.0, "trace": t}
                                           for mb in (1, 10, 100)),  # a generator: read once, judged the same
    lambda t, m: checks.check_imbalance_fixed(m, t),
], ids=["comm_fixed", "bucket_sweep", "bucket_sweep_generator", "imbalance_fixed"])
def test_lab04_fix_checks_refuse_a_copied_recording(call, tmp_path):
    src = course.DATA / course.entry("communication", "ddp", "cpu")["file"]
    shutil.copytree(src, tmp_path / "job")
    copied = helpers.load(tmp_path / "job")
    mine = own_capture(course.recorded("communication", "manual", "cpu"), by="communication.run", mine=False)
    with pytest.raises(checks.CheckFailed, match=r"was not made in this notebook.*communication\.run"):
        call(copied, mine)


def test_lab08_tensor_cores_and_lab01_h2d_fix_refuse_a_copied_recording(tmp_path):
    fp32 = own_capture(course.recorded("gpu_bound", "fp32"), of=("gpu_bound",), mine=False)
    bf16 = _copied(tmp_path, "gpu_bound", "bf16", "h200")
    with pytest.raises(checks.CheckFailed, match=r"fast_trace \(mine.json.gz\) was not made in this notebook"):
        checks.check_tensor_cores(fp32, bf16)
    before = own_capture(course.recorded("h2d_copy", "broken"), of=("h2d_copy",), mine=False)
    with pytest.raises(checks.CheckFailed, match=r"after \(mine.json.gz\) was not made in this notebook"):
        checks.check_h2d_fixed(before, _copied(tmp_path, "h2d_copy", "fixed", "h200"))


def test_a_reading_of_another_labs_recording_is_refused():
    """lab 01's data reading reads the data-stall loop: lab 03's recording is not it."""
    from test_reading_credit import _truthful

    other = course.recorded("sync_stall", "broken")
    with pytest.raises(checks.CheckFailed, match=r"is not the trace this exercise reads \(the course's data_stall:broken"):
        checks.check_reading(_truthful(other), other, "data", "data")


def test_a_fix_that_runs_another_labs_loop_is_refused():
    """A step of the learner's that only wraps another lab's course loop (lab 02's, offered as lab 03's fix)."""
    ex = exercise.find("sync", "check_sync_fixed")
    t = course.recorded("sync_stall", "broken")
    before = own_capture(replace(t, events=t.events.copy(), metadata={}, _memo={}), of=("sync_stall",), mine=False)
    wrapped = own_capture(replace(t, events=t.events.copy(), metadata={}, _memo={}), of=("launch_overhead", "common"))
    problem = provenance.problems(ex, {"before": before, "after": wrapped})
    assert problem and "runs the course's launch_overhead loop, not a fix of the sync_stall loop" in problem
    shared_only = own_capture(replace(t, events=t.events.copy(), metadata={}, _memo={}), of=("common",))
    assert provenance.problems(ex, {"before": before, "after": shared_only}) is None
