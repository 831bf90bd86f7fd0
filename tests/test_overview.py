"""The step overview's numbers: TensorBoard's categories, the call tree that ties kernels to operators, the tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import helpers
from helpers import metrics as m
from helpers.overview import CATEGORIES, call_tree, kernel_table, op_key, op_table, step_categories

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def data_stall():
    return m.stepped(helpers.load(DATA / "data_stall__broken__h200.json.gz"))


def test_categories_add_up_to_the_step_and_claim_in_order(data_stall):
    cats = step_categories(data_stall)
    win = m.windows(data_stall)
    assert len(cats) == int((win["step"] >= 0).sum())
    total = cats[[f"{c}_us" for c in CATEGORIES]].sum(axis=1)
    assert np.allclose(total, cats["step_us"])
    assert (cats["dataloader_us"] / cats["step_us"]).min() > 0.6  # the stalled loader owns the step
    # kernel time is the GPU's busy kernel time in the step, claimed first
    busy = m.gpu_work_union(data_stall, 0, 0, kinds=("kernel",))
    want = m.overlap(*busy, win["start_us"].to_numpy(float), win["end_us"].to_numpy(float))
    assert np.allclose(cats["kernel_us"], want)
    gpu_bound = step_categories(helpers.load(DATA / "gpu_bound__fp32__h200.json.gz"))
    assert (gpu_bound["kernel_us"] / gpu_bound["step_us"]).min() > 0.95


def test_each_kernel_hangs_under_the_innermost_op_around_its_launch(data_stall):
    tree = call_tree(data_stall)
    ops, gpu = tree["ops"].set_index("row"), tree["gpu"]
    ev = data_stall.events
    hung = gpu[gpu["op"] >= 0]
    assert len(hung) > 0.8 * len(gpu[gpu["call"] >= 0])
    for _, g in hung.head(200).iterrows():
        call_t = ev["start_us"].iat[g["call"]]
        op = ops.loc[g["op"]]
        assert op["start_us"] <= call_t <= op["end_us"] and ev["correlation"].iat[g["call"]] == ev["correlation"].iat[g["row"]]
        inner = ops[(ops["parent"] == g["op"]) & (ops["start_us"] <= call_t) & (ops["end_us"] >= call_t)]
        assert inner.empty, "a child op holds the launch: it is the innermost"
    # paths are keys from the top down
    nested = ops[ops["parent"] >= 0].iloc[0]
    assert nested["path"].endswith(" > " + nested["key"]) and nested["path"].startswith(ops.loc[nested["top"], "key"])


def test_op_and_kernel_tables(data_stall):
    ops = op_table(data_stall)
    kern = kernel_table(data_stall)
    assert kern["share"].sum() == pytest.approx(1.0)
    steps = int((m.windows(data_stall)["step"] >= 0).sum())
    ev = data_stall.events
    gpu = ev[(ev["device"] >= 0) & ev["kind"].isin(("kernel", "memcpy", "memset", "collective")) & (ev["step"] >= 0)]
    assert kern["total_ms"].sum() == pytest.approx(gpu["dur_us"].sum() / 1e3 / steps)
    # an op's GPU time (inclusive) is at least the GPU time it launched itself
    assert (ops["gpu_ms"] + 1e-9 >= ops["gpu_self_ms"]).all()
    loader = ops[ops["name"].str.startswith("enumerate(DataLoader)")].iloc[0]
    assert loader["host_ms"] > 10 and loader["kind"] == "range"
    copy = kern[kern["name"].str.startswith("Memcpy HtoD")].iloc[0]
    assert copy["op"] == "aten::copy_"


def test_op_key_drops_the_instance():
    assert op_key("Optimizer.step#Adam.step") == "Optimizer.step"
    assert op_key("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__") == "enumerate(DataLoader)"
    assert op_key("aten::mm") == "aten::mm" and op_key("#") == "#"
