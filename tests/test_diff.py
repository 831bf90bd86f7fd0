"""The matched diff: on the course's broken/fixed pairs it names what the fix changed, and a rerun of the same
code is "within noise"."""

from __future__ import annotations

from pathlib import Path

import pytest

import helpers
from helpers import cli
from helpers.diff import work_diff

DATA = Path(__file__).resolve().parents[1] / "data"


def _diff(before: str, after: str):
    return work_diff(helpers.load(DATA / before), helpers.load(DATA / after))


@pytest.mark.parametrize("before, after, named, measure", [
    ("data_stall__broken__h200.json.gz", "data_stall__fixed__h200.json.gz", "enumerate(DataLoader)", "host"),
    ("sync_stall__broken__h200.json.gz", "sync_stall__fixed__h200.json.gz", "aten::item", "host"),
    ("h2d_copy__broken__h200.json.gz", "h2d_copy__fixed__h200.json.gz", "aten::copy_", "host"),
    ("host_bound__broken__h200.json.gz", "host_bound__fixed__h200.json.gz", "bookkeeping", "host"),
    ("launch_overhead__broken__h200.json.gz", "launch_overhead__foreach__h200.json.gz", "Optimizer.step", "host"),
    ("gpu_bound__fp32__h200.json.gz", "gpu_bound__bf16__h200.json.gz", "aten::mm", "gpu"),
])
def test_the_fix_is_named_first(before, after, named, measure):
    d = _diff(before, after)
    first = d.changes[0]
    assert named in first["path"] and first["measure"] == measure, [c["path"] for c in d.changes]
    assert first["after_ms"] < first["before_ms"]
    assert d.step["after_ms"] < d.step["before_ms"]


def test_kernels_are_matched_through_their_operator():
    """fp32 -> bf16: the GEMM kernels change name (cuBLAS picks others); the operator that launched them matches,
    and the diff lists the kernels under it on both sides."""
    d = _diff("gpu_bound__fp32__h200.json.gz", "gpu_bound__bf16__h200.json.gz")
    addmm = next(c for c in d.changes if c["path"].endswith("aten::addmm"))
    assert addmm["status"] == "changed" and addmm["path"] == "forward > aten::linear > aten::addmm"
    before = {k for k, _ in addmm["kernels_before"]}
    after = {k for k, _ in addmm["kernels_after"]}
    assert before and after and not before & after
    t = d.table.set_index("path")
    leaf = next(p for p in t.index if p.startswith("forward > aten::linear > aten::addmm > ") and t.loc[p, "status"] == "removed")
    assert t.loc[leaf, "kind"] == "kernel"


def test_a_rerun_of_the_same_code_is_within_noise():
    d = _diff("data_stall__broken__h200.json.gz", "pairs/data_stall__broken__h200.json.gz")
    assert d.step["verdict"] == "within noise" and d.changes == []
    same = _diff("data_stall__broken__h200.json.gz", "data_stall__broken__h200.json.gz")
    assert same.changes == [] and set(same.table["status"]) <= {"same"}


def test_compare_names_the_change_and_says_within_noise(capsys):
    assert cli.main(["compare", str(DATA / "sync_stall__broken__h200.json.gz"), str(DATA / "sync_stall__fixed__h200.json.gz")]) == 0
    out = capsys.readouterr().out
    assert "verdict: faster: " in out and "beyond the +/-" in out
    assert "1. removed: logging > aten::item > aten::_local_scalar_dense (op): host" in out
    assert cli.main(["compare", str(DATA / "data_stall__broken__h200.json.gz"),
                     str(DATA / "pairs" / "data_stall__broken__h200.json.gz")]) == 0
    out = capsys.readouterr().out
    assert "verdict: within noise: " in out and "no operator or kernel changed beyond its own noise band" in out
