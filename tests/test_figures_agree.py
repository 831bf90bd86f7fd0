"""The command line's figures agree: one denominator for the shares it prints (or the denominator named), a window
keeps the lanes a reader expects, and --findings shades what it lists."""

from __future__ import annotations

from pathlib import Path

import pytest

import helpers
from helpers import metrics as m
from helpers import render
from helpers.diagnosis import diagnose
from helpers.lanes import timeline

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def stall():
    return helpers.load(DATA / "data_stall__broken__h200.json.gz")


def test_summary_and_diagnose_give_one_stall_share(stall):
    """issue 33: a stall was 84% in diagnose and 83% and 86% in summary. The idle shares summary prints are of step
    time, as diagnose's costs; the host's own data wait is named as such."""
    s = m.summary(stall)
    finding = next(f for f in diagnose(stall) if f.pattern == "data_stall")
    share = finding.evidence["data_stall_share"]
    assert s["idle_share_by_cause"]["data_wait"] == pytest.approx(share)
    text = render.summary_text(s)
    assert f"data_wait {share:.0%}" in text and "% of step time" in text
    assert f"{share:.0%} of step time it sits idle" in finding.summary  # diagnose's own sentence: the same figure
    assert "the host's own time in the DataLoader" in text
    idle_total = sum(s["idle_share_by_cause"].values())
    assert idle_total + s["gpu_utilization"] == pytest.approx(1.0, abs=0.02)  # busy and idle: one step


def test_a_window_without_gpu_work_keeps_the_gpu_lanes(stall):
    fig = timeline(stall, window_ms=(0.0, 15.0))  # the loader's stretch: no GPU event in it
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "GPU 0 stream 7" in labels and "GPU 0 MemCopy" in labels


def test_findings_shade_where_they_show_in_a_step(stall):
    """--step 2 --findings: the finding's own window is in another step; the step still shows the pattern shaded."""
    from matplotlib.collections import PolyCollection

    from helpers.patterns import colour

    findings = diagnose(stall)
    fig = timeline(stall, step=2, findings=findings)
    ax = fig.axes[0]
    want = colour("data_stall")
    shaded = [c for c in ax.collections if isinstance(c, PolyCollection) and c.get_alpha() == 0.1]
    assert shaded, "nothing shaded"
    from matplotlib.colors import to_hex

    assert to_hex(shaded[0].get_facecolor()[0], keep_alpha=False) == to_hex(want)
    assert "shaded here where it shows" in ax.get_title(loc="left")


@pytest.mark.parametrize("name, pattern", [("h2d_copy__broken__h200.json.gz", "h2d_copy"),
                                           ("communication__imbalance__cpu", "load_imbalance"),
                                           ("gpu_bound__fp32__h200.json.gz", "gpu_bound"),
                                           ("sync_stall__broken__h200.json.gz", "sync_stall")])
def test_findings_of_every_pattern_are_shaded_where_they_show(name, pattern):
    """--findings shades each finding's own stretches (its pattern's locate function: the copies, the collectives,
    the kernels, the syncs), not only the idle gaps of a pattern with an idle cause: a step shows the copies of an
    h2d_copy finding and the collectives of a load_imbalance one."""
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_hex

    from helpers.patterns import colour

    trace = helpers.load(DATA / name)
    findings = [f for f in diagnose(trace) if f.pattern == pattern]
    assert findings, f"no {pattern} finding"
    s, e = findings[0].where(trace)
    assert s.size and (e > s).all()
    fig = timeline(trace, step=int(m.windows(m.stepped(trace))["step"].max()), findings=findings)
    shaded = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection) and c.get_alpha() == 0.1]
    assert [to_hex(c.get_facecolor()[0], keep_alpha=False) for c in shaded] == [to_hex(colour(pattern))]
