"""`python -m helpers selfcheck labs --run` on the labs as shipped: every cell runs, nothing is earned, nothing changes."""

from __future__ import annotations

import hashlib

from conftest import ROOT

from helpers.selfcheck import run_selfcheck


def _digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_untouched_labs_earn_no_item(capsys):
    labs = ROOT / "labs"
    before = _digest(labs)
    assert run_selfcheck(labs, run=True) == 1
    out = capsys.readouterr().out.splitlines()
    ran = [line for line in out if line.startswith("ran ")]
    assert len(ran) == len(list(labs.glob("[0-9][0-9]_*.ipynb"))) >= 8
    assert all("Exercise 1 is not done yet" in line for line in ran), ran  # each stops at its first exercise
    assert out[-1] == "0/12 passed"
    assert _digest(labs) == before  # run in a scratch copy: no results file, no outputs written back
