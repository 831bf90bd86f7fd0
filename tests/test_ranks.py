"""Many ranks: the vectorised step labelling, the rank-by-rank job analysis and its reduce."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from helpers.model import assign_steps


def _assign_steps_reference(events: pd.DataFrame, steps: pd.DataFrame) -> None:
    """The per-event implementation assign_steps replaced, kept as the reference it must agree with."""
    events["step"] = -1
    if steps.empty:
        return
    for rank, st in steps.groupby("rank"):
        st = st.sort_values("start_us")
        on_rank = (events["rank"] == rank).to_numpy()
        starts = events.loc[on_rank, "start_us"].to_numpy()
        idx = np.searchsorted(st["start_us"].to_numpy(), starts, side="right") - 1
        inside = (idx >= 0) & (starts < st["end_us"].to_numpy()[np.clip(idx, 0, None)])
        events.loc[on_rank, "step"] = np.where(inside, st["step"].to_numpy()[np.clip(idx, 0, None)], -1)
    api = events[(events["kind"] == "runtime") & (events["correlation"] >= 0)]
    if api.empty:
        return
    launch_step = dict(zip(zip(api["rank"], api["correlation"]), api["step"]))
    dev = (events["device"] >= 0) & (events["correlation"] >= 0)
    if not dev.any():
        return
    keys = zip(events.loc[dev, "rank"], events.loc[dev, "correlation"])
    current = events.loc[dev, "step"].to_numpy()
    events.loc[dev, "step"] = [launch_step.get(k, c) for k, c in zip(keys, current)]


def _random_events(seed: int, n: int = 3000, ranks: int = 4) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    kind = rng.choice(["runtime", "kernel", "cpu_op", "annotation", "memcpy"], n)
    device = np.where(np.isin(kind, ["kernel", "memcpy"]), rng.integers(0, 2, n), -1)
    # Few correlation ids, so ids repeat on a rank (several launches, kernels with no launch) and across ranks.
    corr = np.where(rng.random(n) < 0.85, rng.integers(0, 300, n), -1)
    events = pd.DataFrame({"rank": rng.integers(0, ranks, n), "kind": kind, "start_us": rng.uniform(0, 10_000, n).round(1),
                           "device": device, "correlation": corr, "step": -1})
    rows = []
    for r in range(ranks - 1):  # the last rank has no steps at all
        t = rng.uniform(0, 500)
        for i in range(12):
            d = rng.uniform(100, 1500)
            rows.append((r, i, t, t + d, d))
            # steps that overlap the next (nested or overlapping ranges), gaps between others, a shared start
            t += d * rng.choice([0.5, 1.0, 1.3]) if i != 5 else 0.0
    steps = pd.DataFrame(rows, columns=["rank", "step", "start_us", "end_us", "dur_us"]).sample(frac=1, random_state=seed)
    return events, steps


@pytest.mark.parametrize("seed", range(6))
def test_assign_steps_matches_the_per_event_reference(seed):
    events, steps = _random_events(seed)
    ours, ref = events.copy(), events.copy()
    assign_steps(ours, steps)
    _assign_steps_reference(ref, steps)
    assert (ours["step"] >= 0).any() and (ours["step"] == -1).any()
    np.testing.assert_array_equal(ours["step"].to_numpy(), ref["step"].to_numpy())
    assert ours["step"].dtype == np.int64


def test_assign_steps_edge_cases():
    events, steps = _random_events(0, n=50)
    for ev, st in ((events.iloc[:0].copy(), steps), (events.copy(), steps.iloc[:0])):
        ours, ref = ev.copy(), ev.copy()
        assign_steps(ours, st)
        _assign_steps_reference(ref, st)
        np.testing.assert_array_equal(ours["step"].to_numpy(), ref["step"].to_numpy())
    # a kernel whose launch falls outside every step, on a rank whose launches are all labelled elsewhere
    ev = pd.DataFrame({"rank": [0, 0, 0, 1], "kind": ["runtime", "kernel", "kernel", "kernel"],
                       "start_us": [5.0, 15.0, 1.0, 2.0], "device": [-1, 0, 0, 0], "correlation": [7, 7, 8, 7], "step": -1})
    st = pd.DataFrame({"rank": [0, 1], "step": [0, 0], "start_us": [0.0, 0.0], "end_us": [10.0, 10.0], "dur_us": [10.0, 10.0]})
    assign_steps(ev, st)
    assert ev["step"].tolist() == [0, 0, 0, 0]  # the kernel at 15 us inherits its launch's step 0
