"""A folder's per-rank figures read each rank's own rows (metrics.rank_rows): whole-table masks are taken at the
rank's positions instead of testing every rank's rows for each rank. The figures must be exactly those of a table
that holds only that rank's rows (the same times, the same order): bit for bit, on shipped multi-rank data (GPU
ranks, CPU ranks with gloo collectives) and on a folder of unrelated recordings whose clocks and names differ."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

import helpers
from helpers import critical as cr
from helpers import metrics as m
from helpers.metrics._store import rank_rows
from helpers.model import Trace

CORPUS = ROOT / "tests" / "corpus"


def _mixed(tmp_path: Path) -> Path:
    """Four recordings of different models, GPUs and clocks as ranks 0-3 (none names its own rank)."""
    d = tmp_path / "mixed"
    d.mkdir()
    for r, name in enumerate(("tl_h100_bert_small", "kineto_resnet50_nw4", "tl_h100_owlv2_dataloader",
                              "ext_switch_transformers_a100")):
        shutil.copy(CORPUS / f"{name}.json.gz", d / f"rank{r}.json.gz")
    return d


FOLDERS = {
    "dlrm_8gpu": lambda tmp: ROOT / "data" / "published__dlrm_8gpu__v100",
    "ddp_cpu": lambda tmp: ROOT / "data" / "communication__ddp__cpu",
    "imbalance_cpu": lambda tmp: ROOT / "data" / "communication__imbalance__cpu",
    "mixed": _mixed,
}


def _alone(trace: Trace, rank: int) -> Trace:
    """The rank's rows as a table of their own: the folder's times and order, nothing else."""
    ev = trace.events
    rows = ev[ev["rank"].to_numpy() == rank].reset_index(drop=True)
    steps = trace.metadata.get("steps")
    meta = dict(trace.metadata)
    if steps is not None:
        meta["steps"] = steps[steps["rank"] == rank].reset_index(drop=True)
    return Trace(rows, trace.source, trace.format, meta)


def _same(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
    return all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(a, b))


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_each_ranks_unions_are_its_own_tables(folder, tmp_path):
    trace = helpers.load(FOLDERS[folder](tmp_path))
    assert len(trace.ranks) >= 2
    colls = trace.events.loc[trace.events["kind"] == "collective", ["rank", "tid"]].drop_duplicates()
    shared_threads = colls["tid"].duplicated().any()  # host_compute leaves out every rank's collective threads
    for rank in trace.ranks:
        alone = _alone(trace, rank)
        at = rank_rows(trace, rank)
        assert at is not None and np.array_equal(trace.events["rank"].to_numpy()[at], np.full(len(at), rank))
        causes = ["sync", "data_wait", "collective", "launch"] + ([] if shared_threads else ["host_compute"])
        for cause in causes:
            assert _same(m.host_union(trace, rank, cause), m.host_union(alone, rank, cause)), (folder, rank, cause)
        if trace.has_gpu:
            for device in sorted(set(trace.events.loc[(trace.events["rank"] == rank) & (trace.events["device"] >= 0), "device"])):
                assert _same(m.gpu_work_union(trace, rank, device), m.gpu_work_union(alone, rank, device))


def _rank_steps_by_rows(trace: Trace, rank: int) -> list[dict]:
    """rank_steps as it was written before it took the rank's rows from rank_events and the steps as arrays: a row
    filter of the whole table, then one step at a time through iterrows."""
    cp = cr.critical_path(trace)
    steps = cp.steps[cp.steps["rank"] == rank]
    if steps.empty:
        return []
    stepped = m._memo(trace)["critical_graphs"][1]
    ev = stepped.events
    on = ev[ev["rank"] == rank]
    coll = on[on["kind"] == "collective"].sort_values("start_us", kind="stable")
    if len(coll):
        gpu = on["device"].to_numpy() >= 0
        if (coll["device"].to_numpy() >= 0).any():
            comp = on[gpu & (on["kind"] == "kernel").to_numpy()]
            cs, ce = m.merge_intervals(comp["start_us"].to_numpy(), comp["end_us"].to_numpy())
        else:
            cs, ce = m.host_union(stepped, rank, "host_compute")
        cov = m.overlap(cs, ce, coll["start_us"].to_numpy(), coll["end_us"].to_numpy()) if len(cs) else np.zeros(len(coll))
        exposed = coll["dur_us"].to_numpy() - cov
    out = []
    for _, s in steps.iterrows():
        row = {"step": int(s["step"]), "ms": float(s["dur_us"]) / 1e3,
               "by_cause": {c: float(s[f"{c}_ms"]) for c in cr.PATH_CAUSES if s[f"{c}_ms"] > 0}}
        if len(coll):
            inside = (coll["start_us"].to_numpy() >= s["start_us"]) & (coll["start_us"].to_numpy() < s["end_us"])
            row["collectives"] = [(str(n)[:80], float(d) / 1e3, float(x) / 1e3) for n, d, x in
                                  zip(coll["name"].to_numpy()[inside], coll["dur_us"].to_numpy()[inside], exposed[inside])]
        else:
            row["collectives"] = []
        out.append(row)
    return out


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_each_ranks_critical_steps_are_as_read_row_by_row(folder, tmp_path):
    """rank_steps (what the job's path takes of each rank) reads the rank's rows and its steps as arrays: the very
    figures (float for float, the same types) the whole table's row filter and iterrows gave."""
    trace = m.stepped(helpers.load(FOLDERS[folder](tmp_path)))
    for rank in trace.ranks:
        got, want = cr.rank_steps(trace, rank), _rank_steps_by_rows(trace, rank)
        assert repr(got) == repr(want), (folder, rank)
        assert got, (folder, rank)  # every rank of these folders has steps on its path


def test_a_one_rank_table_is_its_own_rows():
    trace = helpers.load(ROOT / "data" / "pairs" / "sync_stall__broken__h200.json.gz")
    assert rank_rows(trace, trace.ranks[0]) is None  # the table itself: no copy, no positions
    assert len(rank_rows(trace, 12345)) == 0
