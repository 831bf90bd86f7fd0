"""`python -m helpers selfcheck labs --run`: only results a check signed in that run earn credit.

The shipped labs, run untouched, earn nothing and change nothing; a results file written by a notebook's
own code, by hand or by an earlier run earns nothing, each refusal on one line; a check's real pass earns
its item.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path

import nbformat
import pytest
from conftest import own_capture, shipped_labs
from test_checks import TOOL_ANSWERS

from helpers import checks
from helpers.checks import _proof
from helpers.selfcheck import run_selfcheck, verify_results

NB00 = "00_tools_and_first_profile.ipynb"


def _digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


#: The labs the untouched run takes: the first and the last. That every shipped lab stops at its first exercise, in
#: one line, is test_notebooks.test_unsolved_lab_does_not_pass (each lab run as it ships); what this adds, the run's
#: scratch copy, its count and its refusal to write anything back, is the same whatever the lab, and running all
#: twelve here again took 2.8 minutes of CI's 20.
UNTOUCHED = (NB00, "11_call_sites_and_environment.ipynb")


def test_untouched_labs_earn_no_item(capsys, tmp_path):
    labs = shipped_labs(tmp_path / "course")  # the labs as shipped: a learner's work saved in labs/ is theirs
    assert all((labs / name).is_file() for name in UNTOUCHED)
    for other in labs.glob("[0-9][0-9]_*.ipynb"):
        if other.name not in UNTOUCHED:
            other.unlink()
    before = _digest(labs)
    assert run_selfcheck(labs, run=True) == 1
    out = capsys.readouterr().out.splitlines()
    ran = [line for line in out if line.startswith("ran ")]
    assert len(ran) == len(UNTOUCHED)
    assert all("Exercise 1 is not done yet" in line for line in ran), ran  # each stops at its first exercise
    assert out[-1] == f"0/{len(checks.SELF_CHECK)} passed"
    assert _digest(labs) == before  # run in a scratch copy: no results file, no outputs written back


def _names(item: str) -> list[str]:
    return sorted({n for names in checks.CREDIT[item].values() for n in names})


def _claims(item: str, signed: dict | None = None) -> dict:
    result = {"checks": {n: True for n in _names(item)}, "track": "cpu", "when": "2026-12-04 09:00"}
    return {**result, "signed": signed} if signed is not None else result


def _signed_by(key: bytes, notebook: str, item: str) -> dict:
    """Entries a check would have signed, with ``key`` (another run's key, in these tests)."""
    out = {}
    for n in _names(item):
        entry = {"passed": True, "track": "cpu", "notebook": notebook, "trace": [], "source": []}
        out[n] = {**entry, "sig": _proof.sign(key, item, n, entry)}
    return out


def _notebook(path, *cells: str) -> None:
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)


def test_run_counts_only_what_a_check_signed_in_that_run(tmp_path, capsys):
    """One run of a small notebook: a cell that writes the results file (hand-written claims, an earlier
    run's signed results, a made-up signature), a cell that calls the checks' recorder itself, and one
    real check. Only the real check earns its item; each forged item is refused on one line."""
    labs = tmp_path / "labs"
    labs.mkdir()
    nb = "00_tools_and_first_profile.ipynb"  # the lab whose exercise it does: a check earns only in its lab
    earlier = secrets.token_bytes(32)
    forged = {"gaps": _claims("gaps"),
              "capture": _claims("capture", _signed_by(earlier, nb, "capture")),
              "data": _claims("data", {n: {"passed": True, "track": "cpu", "notebook": nb, "trace": [], "source": [],
                                           "sig": "0" * 64} for n in _names("data")})}
    launch = _names("launch")[0]
    _notebook(labs / nb,
              f"import json\njson.dump({forged!r}, open({checks.RESULTS_FILE!r}, 'w'))",
              # the kernel took its key before the first cell: no variable left to follow to it
              f"import os, sys\nassert {_proof.RUN_KEY_ENV!r} not in os.environ and 'helpers.checks' in sys.modules",
              f"from helpers import checks\nprint(checks.check_tool_choice({TOOL_ANSWERS!r}))",
              f"from helpers.checks import _check\n_check('launch', {launch!r}, True, '')")
    assert run_selfcheck(labs, run=True) == 1
    out = capsys.readouterr().out.splitlines()
    assert f"ran {nb}: all cells passed" in out, out
    refused = {line.split(":")[1].strip(): line for line in out if line.startswith("refused: ")}
    assert set(refused) == {"gaps", "capture", "data", "launch"}, out
    assert _proof.NOT_SIGNED in refused["gaps"] and _proof.NOT_SIGNED in refused["launch"]
    assert _proof.WRONG_KEY in refused["capture"] and _proof.WRONG_KEY in refused["data"]
    assert all(line.endswith("it earns nothing") for line in refused.values())
    assert "  [x] Explain when to use Nsight Systems vs Nsight Compute vs PyTorch Profiler" in out
    assert out[-1] == f"1/{len(checks.SELF_CHECK)} passed"
    assert not (labs / checks.RESULTS_FILE).exists()


def test_a_hand_written_results_file_earns_nothing_without_run(tmp_path, capsys):
    every = {item: {"checks": {n: True for n in _names(item)}, "track": "cpu"} for item in checks.CREDIT}
    (tmp_path / checks.RESULTS_FILE).write_text(json.dumps(every))
    assert run_selfcheck(tmp_path) == 1
    out = capsys.readouterr().out.splitlines()
    n = len(checks.SELF_CHECK)
    assert "[x]" not in "\n".join(out) and sum("[~]" in line and "unverified" in line for line in out) == n
    assert out[-1].startswith(f"0/{n} passed (verified); {n}/{n} recorded as passed, unverified: ")
    assert out[-1].endswith("--run verifies them")


def test_a_checks_signature_covers_its_result_and_this_runs_key(monkeypatch):
    """In a run's kernel a check signs its result (with the learner's function's source digest); the
    parent accepts it with that notebook's key only, and refuses an edited result or an earlier run's."""
    from helpers import metrics
    from helpers.course import recorded
    from helpers.selfcheck import read_results

    key = secrets.token_bytes(32)
    monkeypatch.setattr(_proof.SIGNER, "key", key)
    monkeypatch.setattr(_proof.SIGNER, "notebook", NB00)
    checks.check_tool_choice(TOOL_ANSWERS)
    trace = recorded("sync_stall", "broken")
    checks.check_gpu_idle_share(lambda t: 1.0 - metrics.gpu_utilization(t), trace)
    checks._check("capture", "check_annotated_phases", True, "")  # a cell calling the recorder: not signed
    results = read_results(Path(checks.RESULTS_FILE))
    entry = results["gaps"]["signed"]["check_gpu_idle_share"]
    assert entry["passed"] is True and len(entry["source"]) == 1 and entry["notebook"] == NB00
    assert "signed" not in results["capture"]

    verified, refused = verify_results(results, {NB00: key})
    assert verified["tools"] == {"checks": {"check_tool_choice": True}, "track": checks._core._track()}
    assert verified["gaps"]["checks"] == {"check_gpu_idle_share": True}
    assert refused == [f"refused: capture: check_annotated_phases: {_proof.NOT_SIGNED}; it earns nothing"]
    # an earlier run's file: the same results, another key
    verified, refused = verify_results(results, {NB00: secrets.token_bytes(32)})
    assert not verified and any(_proof.WRONG_KEY in line for line in refused)
    # an edit to a signed result (a failed check turned into a pass, its source digest swapped)
    entry["source"] = ["0" * 64]
    verified, refused = verify_results(results, {NB00: key})
    assert "gaps" not in verified and any(line.startswith("refused: gaps:") and _proof.WRONG_KEY in line for line in refused)


def test_a_check_signs_the_digest_of_the_learners_trace(tmp_path):
    from helpers.course import recorded
    from helpers.model import Trace
    from helpers.profiling import events_digest

    t = recorded("data_stall", "broken", "cpu")
    mine = own_capture(Trace(t.events, str(tmp_path / "mine.json.gz"), t.format, dict(t.metadata)))
    _proof.take_evidence()
    assert checks._core.own_capture_problem(mine) is None
    assert _proof.take_evidence() == {"trace": [events_digest(mine)], "source": []}


@pytest.mark.parametrize("env", [None, "missing"])
def test_a_kernel_without_its_key_signs_nothing(env, monkeypatch, tmp_path):
    if env:
        monkeypatch.setenv(_proof.RUN_KEY_ENV, str(tmp_path / "no-such.key"))
    else:
        monkeypatch.delenv(_proof.RUN_KEY_ENV, raising=False)
    assert _proof._take_key() is None
    assert _proof.RUN_KEY_ENV not in os.environ


def test_a_notebook_whose_kernel_never_took_its_key_counts_for_nothing(tmp_path, monkeypatch, capsys):
    """If helpers.checks was not imported at the kernel's start, the notebook's own code could have read
    the key file: the run says so, and nothing that notebook recorded is verified."""
    import nbclient

    from helpers import selfcheck

    seen = {}

    class NoImport:  # a kernel that ran the cells without taking its key
        def __init__(self, nb, **kwargs):
            pass

        def execute(self, env, **kwargs):  # (kwargs: what the kernel is started with, stderr)
            seen["key_file"] = env[_proof.RUN_KEY_ENV]

    monkeypatch.setattr(nbclient, "NotebookClient", NoImport)
    _notebook(tmp_path / "00_x.ipynb", "pass")
    lines, keys = selfcheck.execute_notebooks(tmp_path)
    assert keys == {} and lines == ["ran 00_x.ipynb: helpers.checks could not be imported when its kernel started, so "
                                    "nothing it recorded counts (is the helpers package installed in this environment?)"]
    assert not os.path.exists(seen["key_file"])  # the parent deleted it
