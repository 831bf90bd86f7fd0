"""Every lab check can fail: given the broken loop's trace it fails with a message, given the fixed one it passes."""

import pytest
from conftest import as_learners

from helpers import checks
from helpers.course import recorded


def b_f(workload, a="broken", b="fixed", tag="h200"):
    return recorded(workload, a, tag), recorded(workload, b, tag)


def mine(pair):
    """The recorded pair as if the learner had captured it: lab 01's fix checks refuse the course's traces."""
    from conftest import own_capture as _stamp  # stands in for helpers.capture in this process

    from helpers.model import Trace

    return tuple(_stamp(Trace(t.events, f"runs/mine/{i}.json.gz", t.format, dict(t.metadata))) for i, t in enumerate(pair))


def _real_mystery_step():
    from test_fake_fixes import real_mystery_step  # the fix checks run the learner's step before judging the trace

    return real_mystery_step


def OK_LOADER(dataset, batch_size):
    """A loader that gives the dataset's samples with as many worker processes as any before trace may ask for
    (the fix checks run it before judging the trace, and size its workers from the before trace)."""
    import torch

    from helpers import thresholds as th

    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=th.DATA_WORKERS_CAP,
                                       persistent_workers=True)


#: The tool-choice answers, here in the tests only (the checks hold digests).
TOOL_ANSWERS = {q: t for q, t in zip(checks.TOOL_QUESTIONS, ("nsys", "ncu", "torch", "nsys", "ncu", "torch"))}


CASES = [
    ("data_stall", lambda br, fx: checks.check_data_stall_fixed(br, fx, 4.0, OK_LOADER), mine(b_f("data_stall"))),
    ("h2d", lambda br, fx: checks.check_h2d_fixed(br, fx, 3.0), mine(b_f("h2d_copy"))),
    # launch and sync: their fix checks refuse the course's recorded traces; tests/test_lab02.py, test_lab03.py
    # comm: its fix check refuses recorded traces; tests/test_lab04.py runs it on live two-rank jobs
    ("capstone", lambda br, fx: checks.check_capstone(br, fx, 2.0, _real_mystery_step()), mine(b_f("mystery"))),
]


@pytest.mark.parametrize("name,check,pair", CASES, ids=[c[0] for c in CASES])
def test_check_passes_on_fix_and_fails_on_broken(name, check, pair):
    broken, fixed = pair
    assert check(broken, fixed).startswith("passed")
    with pytest.raises(checks.CheckFailed) as info:
        check(broken, broken)
    assert len(str(info.value)) > 40  # says what to look at and what to change


def test_answer_checks_fail_on_wrong_answers():
    with pytest.raises(checks.CheckFailed, match="tool choices"):
        checks.check_tool_choice({q: "nsys" for q in checks.TOOL_QUESTIONS})
    checks.check_tool_choice(TOOL_ANSWERS)
    assert not hasattr(checks, "TOOL_ANSWERS")  # no importable answer key


def test_reading_checks_have_tolerances():
    t = recorded("sync_stall", "broken")  # the trace lab 00's gap exercises read
    from helpers import metrics

    longest = float(metrics.idle_gaps(t)["dur_us"].max() / 1e3)
    assert checks.check_longest_gap(longest * 1.05, t).startswith("passed")
    with pytest.raises(checks.CheckFailed):
        checks.check_longest_gap(longest * 1.5, t)
    with pytest.raises(checks.CheckFailed):
        checks.check_gpu_idle_share(lambda tr: 0.0, t)
    with pytest.raises(checks.CheckFailed):
        checks.check_imbalance_diagnosed(recorded("communication", "ddp", "cpu"))
    checks.check_imbalance_diagnosed(recorded("communication", "imbalance", "cpu"))


def test_results_are_recorded_for_selfcheck(capsys):
    import json
    from pathlib import Path

    from helpers.selfcheck import run_selfcheck

    checks.check_tool_choice(TOOL_ANSWERS)
    with pytest.raises(checks.CheckFailed):
        checks.check_tool_choice({})
    results = json.loads(Path(checks.RESULTS_FILE).read_text())
    assert results["tools"]["checks"] == {"check_tool_choice": False} and "workflow" not in results
    assert run_selfcheck(Path(".")) == 1
    out = capsys.readouterr().out
    assert "[ ] Explain when to use Nsight Systems" in out and "revisit labs/07_blind_triage.ipynb, labs/05_workflow_capstone.ipynb" in out


def test_fix_checks_judge_structure_not_timing():
    """A fixed loop on a busy machine (its speed-up below the quiet-machine bar) still passes, and says why."""
    broken, fixed = mine(b_f("data_stall"))
    verdict = checks.check_data_stall_fixed(broken, fixed, 1000.0, OK_LOADER)
    assert verdict.startswith("passed") and "below the 1000.0x a quiet machine shows" in verdict
    # why the time is not judged, said once: the machine's cores for the workers asked, or other work on it
    assert ("step time not judged" in verdict) != ("timing is not judged" in verdict)
    assert checks.check_capstone(*mine(b_f("mystery")), 1000.0, _real_mystery_step()).startswith("passed")
    with pytest.raises(checks.CheckFailed, match="recorded, not yours"):
        checks.check_capstone(*b_f("mystery"), 2.0)
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_data_stall_fixed(broken, as_learners(broken), 1.0, OK_LOADER)
    assert "DataLoader" in str(info.value)
    with pytest.raises(checks.CheckFailed, match="is a capture of the same step as before: capture your fixed step"):
        checks.check_data_stall_fixed(broken, broken, 1.0, OK_LOADER)
