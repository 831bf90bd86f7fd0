"""plots.explore on a Python without anywidget says so in one line (a TraceError, shown as one line in a notebook),
not as an import traceback."""

from __future__ import annotations

import sys

import pytest
from synth import two_step_loop, write_json

import helpers
from helpers import explore


def test_the_explorer_without_anywidget_is_one_line(tmp_path, monkeypatch):
    trace = helpers.load(write_json(two_step_loop(), tmp_path / "t.json"))
    monkeypatch.setitem(sys.modules, "anywidget", None)  # import anywidget raises ImportError
    monkeypatch.setattr(explore, "_EXPLORER", None)
    with pytest.raises(helpers.TraceError, match="needs anywidget.*pip install") as raised:
        helpers.plots.explore(trace)
    assert "\n" not in str(raised.value)
