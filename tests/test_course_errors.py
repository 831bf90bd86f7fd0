"""A NameError in a notebook cell names the exercise that left the name unset, and only that one."""

import linecache

import pytest

from helpers import course


def run_cell(ns: dict, source: str, number: int) -> BaseException | None:
    """Run `source` as notebook cell `number` runs: module code in the shell's namespace, its source in linecache."""
    filename = f"<cell-{number}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        exec(compile(source, filename, "exec"), ns)
    except Exception as exc:  # noqa: BLE001 - what a cell raised is the result
        return exc
    return None


@pytest.fixture
def shell(monkeypatch):
    ns: dict = {"course": course}
    monkeypatch.setattr(course, "_user_namespace", lambda: ns)
    monkeypatch.setattr(course, "_UNFINISHED", {})
    return ns


STUB_IN_FUNCTION = '''
def train_step(i):
    raise course.ExerciseNotDone(2, "your code")
'''
CAPTURE = "first = train_step(0)\nfirst\n"
LATER_STUB = 'raise course.ExerciseNotDone(5, "longest_gap_ms = <your answer>")\nlongest_gap_ms\n'


def test_a_name_set_by_the_cell_an_exercise_stopped_blames_that_exercise_not_the_last_one(shell):
    assert run_cell(shell, STUB_IN_FUNCTION, 1) is None
    assert isinstance(run_cell(shell, CAPTURE, 2), course.ExerciseNotDone)
    assert isinstance(run_cell(shell, LATER_STUB, 3), course.ExerciseNotDone)
    line = course.one_line(run_cell(shell, "helpers_diagnose = len(first)", 4))
    assert line.startswith("Exercise 2 is not done yet: `first` is set by a cell that stopped there (`train_step` "
                           "still raises)"), line
    line = course.one_line(run_cell(shell, "print(longest_gap_ms)", 5))
    assert line.startswith("Exercise 5 is not done yet: `longest_gap_ms`"), line


@pytest.mark.parametrize("name", ["helpers", "frist", "longest_gap"])
def test_a_name_no_exercise_left_unset_is_said_plainly(shell, name):
    run_cell(shell, STUB_IN_FUNCTION, 1)
    run_cell(shell, CAPTURE, 2)
    run_cell(shell, LATER_STUB, 3)
    line = course.one_line(run_cell(shell, f"{name}.diagnose(first)", 4))
    assert line.startswith(f"NameError: name `{name}` is not defined"), line
    assert "Exercise" not in line


def test_a_name_error_inside_the_helpers_keeps_its_traceback(shell):
    from helpers import model

    run_cell(shell, LATER_STUB, 1)
    try:
        exec(compile("longest_gap_ms", model.__file__, "exec"), {})  # as if the package's own code had the bug
    except NameError as exc:
        assert course.one_line(exc) is None


def test_cell_bindings_reads_top_level_names_only():
    source = '''
import torch.nn as nn
from helpers import metrics as m
x, (y, z) = 1, (2, 3)
for i in range(3):
    w = i
with open("f") as fh:
    pass
def f():
    inner = 1
class C:
    attr = 1
squares = [k * k for k in range(3)]
try:
    pass
except ValueError as err:
    handled = 1
'''
    assert course.cell_bindings(source) == {"nn", "m", "x", "y", "z", "i", "w", "fh", "f", "C", "squares", "err",
                                            "handled"}
    assert course.cell_bindings("%matplotlib inline\nx = 1") == set()


def test_steps_line_gives_the_step_time_without_calling_it_the_hosts():
    from helpers import metrics
    from helpers.checks import triage_trace

    t = triage_trace("t5")  # the host's step ranges last about 0.5 ms, the GPU's steps about 32 ms
    host_ms = float((t.steps["end_us"] - t.steps["start_us"]).max() / 1e3)
    line = course.steps_line(t, "t5")
    assert f"{metrics.step_time_ms(t):.2f} ms each" in line and metrics.step_time_ms(t) > 10 * host_ms
    assert "on the host" not in line and "GPU work ends" in line


def test_a_check_message_is_shown_wrapped_between_words_one_problem_a_line():
    from helpers.errors import CheckFailed

    problems = ["host_bound is not what holds this loop back. What the trace shows: the GPU is busy 4% of the step "
                "and idles 30.49 ms per step while the host launches kernels",
                "in your window 38.6-40.6 ms: the GPU is busy 6% of it",
                "'kernels_per_step' does not prove host_bound; the figures that do: host_bound_idle_share."]
    line = course.one_line(CheckFailed("Not yet: " + " | ".join(problems)))
    shown = course.shown_lines(line)
    assert shown[0] == "Check failed: Not yet:"
    assert sum(s.startswith("  - ") for s in shown) == 3  # one bullet a problem
    assert all(len(s) <= course.SHOWN_WIDTH for s in shown)
    # wrapped between words: the words, in order, are the message's own (nothing cut mid-word, nothing lost)
    words = " ".join(s.removeprefix("  - ").strip() for s in shown).split()
    assert words == (line.replace(" | ", " ")).split()
    long_path = "x" * 150  # a word longer than the width stays whole
    assert long_path in course.shown_lines(f"TraceError: {long_path} is not a trace")
