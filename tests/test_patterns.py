"""The pattern catalogue drives the diagnosis, the reading check and the plots: rules as data, signals named
like the thresholds; diagnose() returns one typed result that is still the list of findings."""

from __future__ import annotations

import dataclasses

from conftest import DATA
from synth import host_bound_loop, write_json

import helpers
from helpers import diagnosis as dg
from helpers import metrics as m
from helpers import patterns as pt
from helpers import plots
from helpers import thresholds as th
from helpers.checks import reading
from helpers.patterns import CATALOGUE


def _load(events, tmp_path):
    return helpers.load(write_json(events, tmp_path / "t.json"))


def test_catalogue_is_the_one_source(tmp_path):
    assert dg.PATTERNS == pt.PATTERNS == tuple(p.name for p in pt.CATALOGUE)
    for p in pt.CATALOGUE:
        assert p.fix and p.colour.startswith("#") and p.rules
        for r in p.rules:
            assert r.window in pt.WINDOWS and r.on in ("gpu", "cpu", "any")
            assert r.cost == "none" or r.cost in pt.Signals.__annotations__
            assert set(r.reads) <= set(pt.Signals.__annotations__), p.name
            assert set(r.evidence) <= set(pt.Signals.__annotations__), p.name
        # the reading check offers exactly the record's provable figures
        assert reading.EVIDENCE.get(p.name, ()) == tuple(e for e in p.evidence if e in reading.FIGURE_HOWTO)
    # every idle cause the metrics name has one owner, and the idle histogram draws it in that colour
    assert set(pt.BY_CAUSE) == set(m.CAUSES)
    assert plots.pattern_colour("host_bound") == pt.BY_NAME["host_bound"].colour


def test_idle_causes_have_colours_told_apart():
    """The idle histogram stacks the causes: two of them in near-identical colours read as one
    ('other' and 'collective' were two purples)."""
    from itertools import combinations

    rgb = {c: tuple(int(p.colour[i:i + 2], 16) for i in (1, 3, 5)) for c, p in pt.BY_CAUSE.items()}
    for (a, x), (b, y) in combinations(rgb.items(), 2):
        assert sum((u - v) ** 2 for u, v in zip(x, y)) ** 0.5 > 50, (a, b)  # RGB distance; the two purples: 24


def test_host_bound_comes_from_its_record(tmp_path):
    trace = _load(host_bound_loop(), tmp_path)
    result = dg.diagnose(trace)
    f = result[0]
    rec = pt.BY_NAME["host_bound"]
    assert f.pattern == "host_bound" and f.fix == rec.fix
    assert set(rec.rules[0].evidence) - {"host_busy_in"} <= set(f.evidence)
    gaps = m.idle_gaps(trace)
    own = gaps[gaps["cause"] == rec.cause]
    hit = own[(own["start_us"] == f.window[0]) & (own["end_us"] == f.window[1])]
    assert len(hit) == 1 and float(hit["dur_us"].iloc[0]) == float(own["dur_us"].max())


def test_a_new_pattern_is_one_record(tmp_path, monkeypatch):
    trace = _load(host_bound_loop(), tmp_path)
    assert "many_steps" not in [f.pattern for f in dg.diagnose(trace)]

    def _two_steps_or_more(s: pt.Signals) -> bool:
        return pt.get(s, "steps") >= 2

    new = pt.Pattern("many_steps", "a test pattern", fix="nothing to fix", colour="#000000", rules=(
        pt.Rule(_two_steps_or_more, ("steps",), "gpu_kernel_share", lambda s: f"{s['steps']} steps.", ("steps",),
                "longest_step", on="any"),))
    monkeypatch.setattr(dg, "CATALOGUE", (*pt.CATALOGUE, new))
    f = next(f for f in dg.diagnose(helpers.load(trace.source)) if f.pattern == "many_steps")
    assert f.summary == "4 steps." and f.fix == "nothing to fix" and f.evidence["steps"] == 4 and f.window


def test_diagnosis_is_a_list_with_signals_and_its_steady_state(tmp_path):
    result = dg.diagnose(_load(host_bound_loop(), tmp_path))
    assert isinstance(result, list) and len(result) == len(list(result)) and result[0] is result.findings[0]
    assert result.signals["host_bound_idle_share"] > 0.45 and result.signals["has_step_markers"]
    assert result.steady.source == "markers" and result.steady.steps == 4
    assert not hasattr(result[0], "share")
    doc = result.to_dict()
    assert doc["steady_state"]["steps"] == 4 and doc["findings"][0]["pattern"] == "host_bound"


def test_steady_state_says_what_it_left_out():
    # an Nsight export without step markers: the repeats are the steps, start-up and tail are left out
    result = dg.diagnose(helpers.load(DATA / "nsight" / "data_stall__broken__h200.sqlite.gz"))
    st = result.steady
    assert st.source == "inferred" and st.inferred["ramp_up_dropped"]
    assert 0 < st.kept_share < 1 and len(st.left_out) == 2
    assert "ramp-up" in st.left_out[0].why and st.left_out[0].end_us == st.kept_us[0]
    text = helpers.render.diagnose_text("t", result, True)
    assert "left out" in text and f"{st.kept_share:.0%} of the capture" in text
    assert dataclasses.is_dataclass(st)


def test_signals_are_named_like_thresholds(tmp_path):
    sg = dg.signals(helpers.load(write_json(host_bound_loop(), tmp_path / "t.json")))
    for pattern in CATALOGUE:
        assert pattern.name in dg.PATTERNS and pattern.fix
        for rule in pattern.rules:
            assert rule.cost in sg or not rule.when(sg) or rule.cost == "none"
    for name in ("data_stall_share", "sync_blocked_share", "launch_idle_share", "launch_median_kernel_us",
                 "host_bound_idle_share", "gpu_bound_busy"):
        assert hasattr(th, name.upper()) or hasattr(th, name.upper().replace("_SHARE", "")) or name.upper() + "_SHARE"
        assert name in sg
    assert th.SMALL_KERNEL_US == m.SMALL_KERNEL_US == 10.0


def test_finding_has_no_share_alias(tmp_path):
    f = helpers.diagnose(helpers.load(write_json(host_bound_loop(), tmp_path / "t.json")))[0]
    assert not hasattr(f, "share") and 0 < f.cost <= 1
