"""Lab 00's profiler exercise and launch-queue reading: the checks pass the solution and name each mistake."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from helpers import checks, metrics, thresholds
from helpers.course import recorded
from helpers.profiling import quiet_profiler_logs

LIN = torch.nn.Linear(16, 16)
X = torch.randn(8, 16)


def _step(i: int) -> None:
    with torch.profiler.record_function("forward"):
        loss = torch.relu(LIN(X)).sum()
    loss.backward()


def _profile(trace_dir, steps=5, sched=(1, 1, 3), writer=True, shapes=True, sort_by="self_cpu_time_total", rows=10):
    kw = {}
    if sched:
        kw["schedule"] = schedule(wait=sched[0], warmup=sched[1], active=sched[2], repeat=1)
    if writer:
        kw["on_trace_ready"] = tensorboard_trace_handler(str(trace_dir))
    with quiet_profiler_logs(), profile(activities=[ProfilerActivity.CPU], record_shapes=shapes, **kw) as prof:
        for i in range(steps):
            _step(i)
            prof.step()
    return prof, prof.key_averages().table(sort_by=sort_by, row_limit=rows)


@pytest.fixture(scope="module")
def right(tmp_path_factory):
    folder = tmp_path_factory.mktemp("right")
    prof, table = _profile(folder)
    return prof, table, folder


def test_the_solution_passes_and_its_table_parses(right):
    prof, table, folder = right
    assert checks.check_my_profiler(prof, table, folder) == "passed: check_my_profiler"
    headers, rows = checks.parse_profiler_table(table)
    assert headers[:3] == ["Name", "Self CPU %", "Self CPU"] and len(rows) == 10
    assert checks.lab00._table_value("1.500ms") == 1500.0 and checks.lab00._table_value("2.000s") == 2e6


@pytest.mark.parametrize("kw, says", [
    ({"sched": None}, "no schedule"),
    ({"writer": False}, "no on_trace_ready"),
    ({"steps": 2}, "never reached its active phase"),
    ({"steps": 4}, "ended 1 step(s) before its active phase did"),
    ({"sched": (0, 1, 3)}, "wait=0, warmup=1, active=3"),
    ({"shapes": False}, "record_shapes=True"),
    ({"sort_by": "cpu_time_total"}, "it is sorted by 'CPU total'"),
    ({"sort_by": "count"}, "it is sorted by '# of Calls'"),
    ({"rows": 4}, "row_limit=10"),
])
def test_each_mistake_is_named(tmp_path, kw, says):
    prof, table = _profile(tmp_path / "t", **kw)
    with pytest.raises(checks.CheckFailed, match="no schedule" if says == "no schedule" else None) as failed:
        checks.check_my_profiler(prof, table, tmp_path / "t")
    assert says in str(failed.value)


def test_a_trace_from_elsewhere_or_a_table_of_another_run_is_refused(right, tmp_path):
    prof, table, folder = right
    theirs = tmp_path / "copied"
    theirs.mkdir()
    doc = json.loads(next(folder.glob("*.json")).read_text())
    for e in doc["traceEvents"]:
        if isinstance(e.get("pid"), int):
            e["pid"] = 1  # as written by another process
    (theirs / "other.pt.trace.json").write_text(json.dumps(doc))
    with pytest.raises(checks.CheckFailed, match="another process"):
        checks.check_my_profiler(prof, table, theirs)
    shutil.rmtree(theirs)
    with pytest.raises(checks.CheckFailed, match="No trace file"):
        checks.check_my_profiler(prof, table, theirs)
    with pytest.raises(checks.CheckFailed, match="not those of the trace"):  # same layout, other operators
        checks.check_my_profiler(prof, table.replace("aten::", "bten::"), folder)
    with pytest.raises(checks.CheckFailed, match="your profiler"):
        checks.check_my_profiler("prof", table, folder)
    with pytest.raises(checks.CheckFailed, match="ruler"):
        checks.check_my_profiler(prof, "printed, not returned", folder)
    with pytest.raises(checks.CheckFailed, match="no Name column"):  # rulers, but not the profiler's table
        checks.check_my_profiler(prof, table.replace("Name", "Nom"), folder)
    with pytest.raises(checks.CheckFailed, match="not a NoneType"):
        checks.check_my_profiler(prof, table, None)


QUEUE = {"A": recorded("launch_overhead", "broken"), "B": recorded("gpu_bound", "fp32")}


def _offset(trace):
    ev = trace.events
    calls = ev[(ev["kind"] == "runtime") & ev["name"].str.startswith("cudaLaunch")]
    kernels = ev[(ev["kind"] == "kernel") & (ev["correlation"] >= 0)]
    pairs = kernels.merge(calls.drop_duplicates(["rank", "correlation"]), on=["rank", "correlation"], suffixes=("_k", "_c"))
    return pairs, pairs["start_us_k"] - pairs["start_us_c"]


def test_the_recorded_queues_are_one_empty_one_deep():
    a, b = (metrics.launch_stats(t)["median_launch_to_start_us"] for t in QUEUE.values())
    assert a < thresholds.LAUNCH_QUEUE_EMPTY_US < thresholds.LAUNCH_QUEUE_DEEP_US < b
    assert 8 < a < 10 and 60_000 < b < 80_000  # the figures thresholds.py quotes (9.0 µs, 72 ms)


def test_launch_queue_check():
    right = {"A": "empty", "B": "deep"}
    assert checks.check_launch_queue(lambda t: float(_offset(t)[1].median()), right, QUEUE).startswith("passed")
    from_end = lambda t: float((_offset(t)[0]["start_us_k"] - _offset(t)[0]["end_us_c"]).median())  # noqa: E731
    with pytest.raises(checks.CheckFailed, match="from the launch call's end"):
        checks.check_launch_queue(from_end, right, QUEUE)
    with pytest.raises(checks.CheckFailed, match="1000 times"):
        checks.check_launch_queue(lambda t: float(_offset(t)[1].median()) / 1e3, right, QUEUE)
    with pytest.raises(checks.CheckFailed, match="trace A: a median offset") as wrong:
        checks.check_launch_queue(lambda t: float(_offset(t)[1].median()), {"A": "deep", "B": "deep"}, QUEUE)
    assert "trace B" not in str(wrong.value)
    with pytest.raises(checks.CheckFailed, match="say 'empty' or 'deep'"):
        checks.check_launch_queue(lambda t: float(_offset(t)[1].median()), {"A": "launch-bound", "B": "deep"}, QUEUE)
    # fewer traces than the exercise's two (or one of them twice) cannot pass on one reading
    for traces in ({}, {"A": QUEUE["A"]}, {"A": QUEUE["A"], "B": QUEUE["A"]}, {"A": QUEUE["A"], "B": "trace B"}):
        with pytest.raises(checks.CheckFailed, match="both of its traces"):
            checks.check_launch_queue(lambda t: float(_offset(t)[1].median()), {"A": "empty", "B": "empty"}, traces)


def test_on_a_gpu_the_profile_needs_its_kernels_and_the_table_its_cuda_column(right, monkeypatch):
    prof, table, folder = right
    with pytest.raises(checks.CheckFailed, match="no 'Self CUDA' column"):
        checks.check_my_profiler(prof, table, folder, sort_by="self_cuda_time_total")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(checks.CheckFailed, match="list ProfilerActivity.CUDA"):
        checks.check_my_profiler(prof, table, folder)


def test_idle_share_refusal_never_prints_the_right_figure():
    """A wrong idle share is told which side it lies on, never the trace's figure (it could be pasted)."""
    from helpers import metrics as m
    from helpers.checks import CheckFailed, lab00
    from helpers.course import recorded

    trace = recorded("sync_stall", "broken")  # the trace the exercise reads
    want = 1.0 - m.gpu_utilization(trace)
    for wrong in (want + 0.2, want - 0.2):
        with pytest.raises(CheckFailed) as failed:
            lab00.check_gpu_idle_share(lambda _t, v=wrong: v, trace)
        text = str(failed.value)
        assert f"{want:.3f}" not in text and f"{want:.2f}" not in text, text
        assert ("above" if wrong > want else "below") in text


def test_messages_count_in_words_and_do_not_contradict_themselves():
    """Lab 00's refusals: '1 gap', not '1 gaps'; steps as integers; no 'problem(s)'; the time window's message
    says which start-up each bound is and how many steps would do; a share outside [0, 1] is said to be one."""
    from conftest import as_learners

    from helpers import metrics as m
    from helpers.checks import CheckFailed, lab00

    trace = recorded("sync_stall", "broken")
    gaps = m.idle_gaps(trace)["dur_us"].sort_values() / 1e3
    just_under_longest = float(gaps.iloc[-2]) * 1.001  # only the longest gap is longer than this by 10%
    if gaps.iloc[-1] > just_under_longest * 1.1 and gaps.iloc[-2] <= just_under_longest * 1.1:
        with pytest.raises(CheckFailed) as failed:
            checks.check_longest_gap(just_under_longest, trace)
        assert "1 gap on the GPU lanes is longer" in str(failed.value), str(failed.value)

    with pytest.raises(CheckFailed) as failed:
        checks.check_annotated_phases(as_learners(trace), phases=("forward", "no such phase"))
    assert "Missing phase ranges: 'no such phase', in every one of the" in str(failed.value)
    assert "0.0" not in str(failed.value)  # steps counted as whole numbers

    script = "python -m helpers.workloads.data_stall --variant broken --steps 10"
    commands = {"capture range": f"nsys profile --trace=cuda,nvtx --capture-range=cudaProfilerApi -o a {script} --nsys-range",
                "time window": f"nsys profile --trace=cuda,nvtx --delay=20 --duration=30 -o b {script}",
                "gpu metrics": f"nsys profile --trace=cuda,nvtx --gpu-metrics-devices=0 -o c {script}"}
    with pytest.raises(CheckFailed) as failed:
        checks.check_nsys_commands(commands)
    text = str(failed.value)
    assert text.startswith("Check failed: 1 problem:") or "1 problem:" in text, text
    assert "(s)" not in text and "can be done" not in text
    needed = int(text.split("--steps ")[1].split()[0])
    program = script.split()[:-1] + [str(needed)]
    assert lab00.window_problems(20, 30, program) == []  # the steps it asks for make the window hold steps
    assert lab00.window_problems(20, 30, script.split()[:-1] + [str(needed - 2)])

    with pytest.raises(CheckFailed) as failed:
        lab00.check_gpu_idle_share(lambda _t: -8.683, trace)
    assert "lies between 0 and 1" in str(failed.value), str(failed.value)


def test_the_phase_check_says_each_phase_once_with_the_steps_it_is_wrong_in():
    from helpers.checks import lab00

    assert lab00._phase_words({"forward": [0, 1, 2, 3, 4], "optimizer": [2]}, 5) == \
        "'forward', in every one of the 5 profiled steps; 'optimizer', in step 2"
    assert lab00._phase_words({"backward": [0, 1, 2, 3, 4, 5]}, 8) == "'backward', in steps 0, 1, 2, 3, ..."


def test_a_busy_share_given_as_the_idle_share_is_named_in_a_sentence():
    from helpers.checks import CheckFailed

    def busy_share(trace):
        return metrics.gpu_utilization(trace)

    with pytest.raises(CheckFailed) as failed:
        checks.check_gpu_idle_share(busy_share, recorded("sync_stall", "broken"))
    assert "Your figure is what taking the busy share instead of the idle share gives on this trace." in str(failed.value)
