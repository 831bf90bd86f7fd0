"""The exercise model: every credit check is a declared record, judged by one engine, signed only as its own.

Credit is derived from the records; a record names parameters its check really has; the engine opens the
exercise in the signing state, so only that exercise's own results are signed, and only in its lab's
notebook; a reading signed for one item cannot earn another; the parent refuses a result signed in a
notebook that is not the exercise's.
"""

from __future__ import annotations

import inspect
import json
import secrets
from pathlib import Path

import pytest
from test_checks import TOOL_ANSWERS
from test_reading_credit import _truthful

from helpers import checks
from helpers.checks import _proof, exercise
from helpers.course import recorded
from helpers.selfcheck import read_results, verify_results

NB00, NB01 = exercise.LABS["00"], exercise.LABS["01"]


@pytest.fixture
def run_key(monkeypatch):
    """This kernel as a selfcheck --run kernel of ``notebook``: returns a function that sets it."""
    key = secrets.token_bytes(32)

    def as_notebook(notebook: str) -> bytes:
        monkeypatch.setattr(_proof.SIGNER, "key", key)
        monkeypatch.setattr(_proof.SIGNER, "notebook", notebook)
        return key

    return as_notebook


def test_credit_is_derived_from_the_records_and_covers_every_item():
    assert exercise.credit() == checks.CREDIT
    assert set(checks.CREDIT) == set(checks.SELF_CHECK)
    for item, tracks in checks.CREDIT.items():
        assert set(tracks) == {"gpu", "cpu"} and all(tracks[t] for t in tracks), item
    # one record per (item, check); every check an item needs is one exercise's
    keys = [(ex.item, ex.check) for ex in exercise.EXERCISES]
    assert len(keys) == len(set(keys))
    for item, tracks in checks.CREDIT.items():
        for names in tracks.values():
            assert all(exercise.find(item, n) is not None for n in names)


@pytest.mark.parametrize("ex", exercise.EXERCISES, ids=lambda ex: f"{ex.lab}:{ex.check}")
def test_each_record_names_a_check_under_the_engine_and_its_real_parameters(ex):
    fn = getattr(checks, ex.function)
    assert ex.lab in exercise.LABS and ex.item in checks.SELF_CHECK and ex.goal
    assert ex.notebook in checks.SELF_CHECK[ex.item][1]  # the self-check list points at the lab it is done in
    assert ex in fn.__exercises__  # run by the engine (the argument checker keeps the engine's attributes)
    inner = inspect.unwrap(fn)
    params = inspect.signature(inner).parameters
    for takes in ex.takes:
        assert takes.name in params, (ex.check, takes.name)
        assert takes.what in ("function", "answer", "trace", "traces", "table")
        assert set(takes.made) <= set(exercise.MADE)
        if takes.what in ("trace", "traces", "table"):
            assert takes.made, f"{ex.check}: {takes.name} says how it must be made"
    assert set(ex.tracks) <= {"gpu", "cpu"}


#: Fix checks judged from a capture whose behaviour stage runs inside the check: lab 04's jobs are read for DDP's
#: training rank by rank (helpers.checks.lab04._refuse), lab 00's phases must each hold the step's work.
BEHAVIOUR_IN_THE_CHECK = {"check_comm_fixed", "check_imbalance_fixed", "check_bucket_sweep", "check_annotated_phases"}


@pytest.mark.parametrize("ex", [ex for ex in exercise.EXERCISES if any(t.mine for t in ex.takes)],
                         ids=lambda ex: f"{ex.lab}:{ex.check}")
def test_every_fix_judged_from_a_capture_has_a_behaviour_stage(ex):
    """Every check is judged the same way: made here, then the same training (or work) as the loop as first written,
    then structure, then speed. A capture-based fix with no behaviour stage credits a loop that does less."""
    if ex.function not in BEHAVIOUR_IN_THE_CHECK:
        assert ex.trains or ex.trains_gradients_on_cpu or ex.same_work, f"{ex.check} has no behaviour stage"
        assert set(ex.compares) <= {t.name for t in ex.takes}, ex.compares  # the pair the stage reads is the check's


def test_every_check_that_earns_is_bound_in_its_lab_module_too():
    from helpers.checks import lab01, reading

    assert hasattr(lab01.check_data_stall_fixed, "__exercises__")
    assert hasattr(reading.check_reading, "__exercises__")
    assert not hasattr(checks.check_launch_diagnosed, "__exercises__")  # reads a shipped trace: earns nothing


def test_a_check_signs_only_its_own_exercise_in_its_own_lab(run_key, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_key(NB00)
    checks.check_tool_choice(TOOL_ANSWERS)
    checks._check("capture", "check_annotated_phases", True, "")  # the recorder called from a cell: no exercise open
    results = read_results(Path(checks.RESULTS_FILE))
    assert "check_tool_choice" in results["tools"]["signed"] and "signed" not in results["capture"]
    # the same check in another lab's notebook: refused, with where it is earned, and not signed
    run_key(NB01)
    with pytest.raises(checks.CheckFailed, match=f"lab 00's exercise.*earned in {NB00}"):
        checks.check_tool_choice(TOOL_ANSWERS)


def test_a_reading_signed_for_another_item_is_refused(run_key, tmp_path, monkeypatch):
    """lab 01's 'data' reading cannot earn lab 03's 'sync', whatever item the call names."""
    monkeypatch.chdir(tmp_path)
    t = recorded("data_stall", "broken")
    good = _truthful(t)
    run_key(NB01)
    with pytest.raises(checks.CheckFailed, match="lab 01's exercise for the 'data' item; it cannot earn 'sync'"):
        checks.check_reading(good, t, "sync", "data")
    assert checks.check_reading(good, t, "data", "data").startswith("passed")
    results = read_results(Path(checks.RESULTS_FILE))
    assert "signed" not in results.get("sync", {})
    # a label of another lab, in this notebook: refused, naming this notebook's own readings
    with pytest.raises(checks.CheckFailed, match=r"check_reading\[broken loop\] is not an exercise of "
                                                 f"{NB01}: this notebook's are 'data', 'h2d'"):
        checks.check_reading(good, t, "sync", "broken loop")


def test_outside_a_run_the_record_still_fixes_the_item(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t = recorded("data_stall", "broken")
    with pytest.raises(checks.CheckFailed, match="cannot earn 'launch'"):
        checks.check_reading(_truthful(t), t, "launch", "data")


def test_the_parent_refuses_a_result_signed_in_another_notebook():
    """A results file whose signature is valid for the notebook it names, but that notebook is not the
    exercise's lab (an extra notebook in labs/ that called the check): refused, one line saying where."""
    key = secrets.token_bytes(32)
    entry = {"passed": True, "track": "cpu", "notebook": "99_extra.ipynb", "trace": [], "source": []}
    entry["sig"] = _proof.sign(key, "tools", "check_tool_choice", entry)
    results = {"tools": {"checks": {"check_tool_choice": True}, "track": "cpu", "signed": {"check_tool_choice": entry}}}
    verified, refused = verify_results(json.loads(json.dumps(results)), {"99_extra.ipynb": key})
    assert not verified
    assert refused == [f"refused: tools: check_tool_choice: signed in 99_extra.ipynb, but check_tool_choice is lab 00's "
                       f"exercise, earned in {NB00}; it earns nothing"]


def test_the_signing_state_is_one_object_that_takes_its_key_when_started(tmp_path, monkeypatch):
    key_file = tmp_path / "k.key"
    key_file.write_text(json.dumps({"key": "ab" * 32, "notebook": NB00}))
    monkeypatch.setenv(_proof.RUN_KEY_ENV, str(key_file))
    signer = _proof.Signer()
    assert signer.key is None and signer.entry("tools", "check_tool_choice", True, "cpu", {}) is None
    assert signer.start() and signer.notebook == NB00 and not key_file.exists()
    assert signer.entry("tools", "check_tool_choice", True, "cpu", {}) is None  # no exercise open
    with signer.judging(exercise.find("tools", "check_tool_choice")):
        assert signer.entry("tools", "check_tool_choice", True, "cpu", {})["sig"]
        assert signer.entry("gaps", "check_longest_gap", True, "cpu", {}) is None  # not this exercise's
    # importing the checks takes no key: the kernel's first line starts the signing state explicitly
    import helpers.selfcheck as sc

    assert "start_run()" in sc.KERNEL_START


def test_an_extra_notebook_that_only_calls_public_checks_earns_nothing(tmp_path, capsys):
    """One extra notebook in labs/ that does none of the labs' work: it calls the public checks on whatever
    passes them (the right tool answers, a truthful reading of a shipped trace, lab 06's shipped report and
    ncu table, lab 00's idle share on the recording). Under --run it earns 0 items, each call refused with a
    line naming the lab where that exercise is earned."""
    import nbformat

    from helpers.selfcheck import run_selfcheck

    labs = tmp_path / "labs"
    labs.mkdir()
    cells = [
        "from helpers import checks, course, metrics\nfrom helpers.checks import Reading\nout = []",
        f"out.append(checks.check_tool_choice({TOOL_ANSWERS!r}))",
        "t = course.recorded('sync_stall', 'broken')\nout.append(checks.check_gpu_idle_share(lambda x: 1 - metrics.gpu_utilization(x), t))",
        "s = course.shipped_nsys_export('data_stall', 'broken')\n"
        "out.append(checks.check_stats_reading({'top_api_call': 'cudaLaunchKernel', 'top_kernel': 'void wgrad_alg0_engine<float, (int)128'}, s))",
    ]
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), labs / "99_shortcuts.ipynb")
    assert run_selfcheck(labs, run=True) == 1
    out = capsys.readouterr().out.splitlines()
    ran = next(line for line in out if line.startswith("ran 99_shortcuts.ipynb"))
    assert "3 cell(s) failed, the first: CheckFailed: check_tool_choice is lab 00's exercise, earned in " + NB00 in ran
    assert out[-1] == f"0/{len(checks.SELF_CHECK)} passed"


def test_a_pass_that_earns_nothing_is_not_reported_as_a_refused_claim():
    """Checks of practice (reading a shipped trace, a triage reading inside check_triage) are recorded unsigned;
    the --run report lists refusals of credit claims only."""
    results = {"launch": {"checks": {"check_launch_diagnosed": True}, "track": "cpu"},
               "workflow": {"checks": {"check_reading[triage t1]": True}, "track": "cpu"}}
    verified, refused = verify_results(results, {})
    assert verified == {} and refused == []
