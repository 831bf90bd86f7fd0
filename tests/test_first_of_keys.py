"""``metrics.kernels.first_of_keys``, the join the launch figures and the capture check make between kernels and their
launch calls, against the pandas merge it replaced (left side's duplicates dropped, first kept)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from helpers.metrics.kernels import first_of_keys


@pytest.mark.parametrize("seed", range(20))
def test_first_of_keys_joins_as_a_merge_on_the_first_of_each_key(seed):
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(0, 60)), int(rng.integers(0, 60))
    ranks = rng.integers(0, 1 + seed % 4, size=n)  # one rank or several; ids repeated, some never called
    corrs = rng.integers(-1, 12, size=n) * (10**12 if seed % 5 == 0 else 1)  # 13-digit ids too
    want_r, want_c = rng.integers(0, 5, size=m), rng.integers(0, 14, size=m) * (10**12 if seed % 5 == 0 else 1)
    got = first_of_keys(ranks, corrs, want_r, want_c)
    left = pd.DataFrame({"rank": ranks, "corr": corrs, "pos": np.arange(n)}).drop_duplicates(["rank", "corr"])
    right = pd.DataFrame({"rank": want_r, "corr": want_c, "at": np.arange(m)})
    joined = right.merge(left, on=["rank", "corr"], how="left")
    expected = joined.sort_values("at")["pos"].fillna(-1).astype(np.int64).to_numpy()
    assert np.array_equal(got, expected)
