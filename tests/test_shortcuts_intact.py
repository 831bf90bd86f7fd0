"""The course's own code stays the course's while a check judges: a replaced reference, clock or pace probe is refused.

A notebook could replace the reference loop a check compares with (``sync_stall.broken_step = my_step``: the "loop as
first written" then trains as the learner's does), the pace probe (every slower step then "explained" by a slow
machine), a check's own stage, or the clock. The engine refuses to judge while any function of the course's modules
is code written outside the package (helpers.checks._intact).
"""

from __future__ import annotations

import pytest

from helpers import checks, profiling
from helpers.checks import _intact, behaviour
from helpers.workloads import sync_stall


def _notebook_function(src: str, name: str):
    """A function as a notebook cell defines it: module ``__main__``, its code in the kernel's cell file."""
    namespace: dict = {"__name__": "__main__"}
    exec(compile(src, "/tmp/ipykernel_4242/3141592653.py", "exec"), namespace)
    return namespace[name]


def my_fixed_step(model, opt, xs, ys, log):
    def step(i):
        pass

    return step


@pytest.mark.parametrize("module,name,src", [
    (sync_stall, "broken_step", "def broken_step(model, opt, xs, ys, log):\n    return lambda i: None\n"),
    (profiling, "pace_probe", "def pace_probe(reps=None):\n    return 1000.0\n"),
    (behaviour, "same_training_problem", "def same_training_problem(*a, **k):\n    return None\n"),
], ids=["reference-loop", "pace-probe", "check-stage"])
def test_a_check_refuses_to_judge_while_the_courses_code_is_replaced(monkeypatch, module, name, src):
    assert _intact.tampered() is None
    monkeypatch.setattr(module, name, _notebook_function(src, name))
    assert _intact.tampered() == f"{module.__name__}.{name}"
    with pytest.raises(checks.CheckFailed, match=f"{module.__name__}.{name} is not the course's any more"):
        checks.check_sync_scan_clean(my_fixed_step)


def test_a_replaced_clock_or_a_callable_object_of_the_learners_is_found(monkeypatch):
    import time

    class Fast:
        def __call__(self, *a):
            return 1.0

    Fast.__module__ = "__main__"
    Fast.__call__ = _notebook_function("def __call__(self, *a):\n    return 1.0\n", "__call__")
    monkeypatch.setattr(time, "perf_counter", _notebook_function("def perf_counter():\n    return 0.0\n", "perf_counter"))
    assert _intact.tampered() == "time.perf_counter"
    assert _intact.tampered_problem().startswith("time.perf_counter is not Python's own any more: a function of yours")
    monkeypatch.undo()
    monkeypatch.setattr(profiling, "pace_probe", Fast())
    assert _intact.tampered() == "helpers.profiling.pace_probe"


def test_the_courses_tests_and_libraries_may_stand_in(monkeypatch):
    monkeypatch.setattr(profiling, "pace_probe", lambda reps=None: 1.0)  # a test's own stand-in (tests/)
    import math

    monkeypatch.setattr(sync_stall, "host_prepare", math.sqrt)  # a library's function, not the learner's code
    assert _intact.tampered() is None


def test_a_stamp_or_a_made_file_is_the_course_tools_alone(tmp_path):
    """helpers.stamps.stamp / made / stamp_table called from a notebook (directly or through a library, a thread)
    would forge the provenance of any trace: refused in one line."""
    import threading

    from helpers import course, stamps
    from helpers.errors import TraceError

    trace = course.recorded("data_stall", "fixed", "cpu")  # the course's fix, passed off as the learner's capture
    how = {"by": "capture", "step": "x", "workloads": ["data_stall"], "learner": ["mine"]}
    forge = _notebook_function("def forge(stamps, trace, how):\n    return stamps.stamp(trace, how)\n", "forge")
    with pytest.raises(TraceError, match="called by the course's own tools only"):
        forge(stamps, trace, how)
    register = _notebook_function("def register(stamps, path, how):\n    stamps.made(path, how)\n", "register")
    (tmp_path / "t.json").write_text("{}")
    with pytest.raises(TraceError, match="helpers.stamps.made is called by the course's own tools only"):
        register(stamps, tmp_path / "t.json", how)
    assert stamps.stamp_of(trace) is None
    errors: list = []
    runner = _notebook_function(
        "def runner(threading, stamps, trace, how, errors):\n"
        "    def go():\n"
        "        try:\n"
        "            stamps.stamp(trace, how)\n"
        "        except Exception as exc:\n"
        "            errors.append(exc)\n"
        "    t = threading.Thread(target=go)\n"
        "    t.start()\n"
        "    t.join()\n", "runner")
    runner(threading, stamps, trace, how, errors)
    assert errors and isinstance(errors[0], TraceError) and stamps.stamp_of(trace) is None
