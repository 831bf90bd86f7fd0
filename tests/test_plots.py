"""Figures fit the notebook: the PNG the inline backend would produce is no wider than the cell."""

import io

import numpy as np
import pytest
from PIL import Image

from helpers import diagnose, plots
from helpers.course import recorded

#: JupyterLab's output area in a 1440-px-wide window, measured with tools/screenshots.py (975 px).
NOTEBOOK_WIDTH_PX = 975


def png_width(fig) -> int:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")  # what %matplotlib inline does
    fig.clf()
    return Image.open(buf).size[0]


@pytest.mark.parametrize("workload,variant", [("data_stall", "broken"), ("mystery", "broken"), ("sync_stall", "broken")])
def test_timeline_of_one_step_fits_the_cell_even_with_findings_elsewhere(workload, variant):
    t = recorded(workload, variant)
    findings = diagnose(t)
    assert findings and any(f.window for f in findings)
    for step in (0, 2):
        assert png_width(plots.timeline(t, step=step, findings=findings)) <= NOTEBOOK_WIDTH_PX


def test_findings_outside_the_window_are_listed_and_titles_name_the_trace():
    t = recorded("data_stall", "broken")
    far = [f for f in diagnose(t) if f.window]
    fig = plots.timeline(t, window=(t.events["start_us"].min(), t.events["start_us"].min() + 1.0), findings=far)
    title = fig.axes[0].get_title(loc="left")
    assert "findings' windows outside this one" in title and far[0].pattern in title
    cmp = plots.compare(t, recorded("data_stall", "fixed"), labels=("broken", "your fix"))
    titles = [ax.get_title(loc="left") for ax in cmp.axes[:2]]
    assert all("trace.json" not in x for x in titles) and titles[0].startswith("broken: ")
    assert png_width(cmp) <= NOTEBOOK_WIDTH_PX


@pytest.mark.parametrize("workload,variant", [("sync_stall", "broken"), ("data_stall", "fixed")])
def test_range_labels_stay_inside_their_bars(workload, variant):
    """A phase's name is drawn only where it fits its bar: 'forward' spilled over 'backward' when the fit
    counted the figure's width instead of the axes'."""
    from helpers.plots import RANGE_LABEL

    t = recorded(workload, variant)
    for fig in (plots.timeline(t, step=1), plots.compare(recorded(workload, "broken"), t)):
        fig.canvas.draw()
        labels = [(ax, x) for ax in fig.axes for x in ax.texts if x.get_gid() == RANGE_LABEL]
        assert labels  # the long phases keep their names
        for ax, label in labels:
            (a, _), (b, _) = ax.transData.transform([(label.range_ms[0], 0), (label.range_ms[1], 0)])
            assert label.get_window_extent().width <= b - a, label.get_text()
        fig.clf()


def _legends(ax):
    from helpers.lanes import LEGEND_GID

    return {leg.get_title().get_text(): [t.get_text() for t in leg.get_texts()]
            for leg in ax.get_children() if getattr(leg, "get_gid", lambda: None)() == LEGEND_GID}


def test_the_ranges_lane_has_a_key_like_the_other_lanes_and_it_fits_under_the_axis():
    from matplotlib.colors import to_hex

    from helpers.lanes import PHASE_WORDS, RANGES_GID, _phase_color

    t = recorded("launch_overhead", "broken")
    fig = plots.timeline(t, step=1)
    ax = fig.axes[0]
    legends = _legends(ax)
    kinds = next(words for title, words in legends.items() if title.startswith("colour = kind"))
    phases = next(words for title, words in legends.items() if "NVTX" in title)
    assert "kernel" in kinds and {"forward", "backward", "optimizer"} <= set(phases)
    # each phase named is a colour drawn on the ranges lane, and each colour drawn there is named
    drawn = {to_hex(c, keep_alpha=False) for coll in ax.collections if coll.get_gid() == RANGES_GID
             for c in coll.get_facecolors()}
    named = {_phase_color(w.split(" ")[0]) for w in phases if w in PHASE_WORDS.values()}
    assert drawn and all(w in PHASE_WORDS.values() for w in phases)  # this trace's ranges are all phases
    assert named == drawn
    # the legends lie inside the figure and below the axes, the ranges' key under the kinds'
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = {title: leg.get_window_extent(r) for leg in ax.get_children()
             if getattr(leg, "get_gid", lambda: None)() == "timeline-legend" for title in [leg.get_title().get_text()]}
    axes_box = ax.get_window_extent(r)
    for box in boxes.values():
        assert box.y0 >= 0 and box.y1 < axes_box.y0 and box.x1 <= fig.bbox.x1 + 1
    kinds_box = next(b for title, b in boxes.items() if title.startswith("colour = kind"))
    ranges_box = next(b for title, b in boxes.items() if "NVTX" in title)
    assert ranges_box.y1 <= kinds_box.y0 + 1
    # under compare, a timeline's keys stay clear of the next timeline's title
    cmp = plots.compare(t, recorded("launch_overhead", "foreach"))
    cmp.canvas.draw()
    r = cmp.canvas.get_renderer()
    lowest = min(leg.get_window_extent(r).y0 for leg in cmp.axes[0].get_children()
                 if getattr(leg, "get_gid", lambda: None)() == "timeline-legend")
    assert lowest > cmp.axes[1].title.get_window_extent(r).y1
    assert png_width(fig) <= NOTEBOOK_WIDTH_PX


def test_compare_and_one_step_views_draw_the_steps_nearest_the_median():
    """The recorded eager loop's first profiled step is 37.6 ms, its others 33.5 and 34.0: compare draws steps 1-2
    (the run nearest the median), says so, and typical_steps picks the median step itself for a one-step view."""
    from helpers import metrics as m

    t = m.stepped(recorded("launch_overhead", "broken"))
    times = m.step_times(t)
    assert times[0] > 1.05 * float(sorted(times)[1])  # the slow start this is about
    assert m.typical_steps(t, 2) == [1, 2] and m.typical_steps(t) == [int(times.argsort()[len(times) // 2])]
    assert m.typical_steps(t, 9) == [0, 1, 2] and m.typical_steps(recorded("launch_overhead", "graphs"), 1)
    fig = plots.compare(t, recorded("launch_overhead", "graphs"))
    title = fig.axes[0].get_title(loc="left")
    assert "steps 1-2 of 3" in title
    w = m.windows(t)
    start_ms = (float(w.loc[w["step"] == 1, "start_us"].iat[0]) - plots.time_origin_us(t)) / 1e3
    assert fig.axes[0].get_xlim()[0] == pytest.approx(start_ms, abs=1e-6)
    assert png_width(fig) <= NOTEBOOK_WIDTH_PX


def test_lab07_one_step_views_show_the_median_step_not_the_long_one():
    """Triage t1 stalls every fourth step (a 44 ms step among 3-4 ms ones, step 1 of the capture): the notebook's
    "one step" views draw the step metrics.typical_steps picks, a representative one, for every trace."""
    import json
    from pathlib import Path

    from helpers import metrics as m
    from helpers.checks import triage_trace

    t = triage_trace("t1")
    times = m.step_times(m.stepped(t))
    (step,) = m.typical_steps(t)
    assert times.argmax() == 1 and times[step] == float(np.median(times)) and times[step] < 2 * times.min()
    nb = json.loads((Path(__file__).resolve().parents[1] / "solutions" / "07_blind_triage.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    one_step = [c for c in code if "one step" in c and "plots.timeline" in c]
    assert len(one_step) == 10 and all("step = metrics.typical_steps(t)[0]" in c and "step=step" in c for c in one_step)
    assert not any("step=1" in c for c in code)


def test_compare_keeps_its_lanes_tall_under_the_keys():
    """Two keys under each timeline take about an inch: a CPU compare (two lanes each) still gives its lanes room
    (it drew them 0.2 inches tall, labels overlapping, once the ranges' key came)."""
    fig = plots.compare(recorded("launch_overhead", "broken", "cpu"), recorded("launch_overhead", "foreach", "cpu"))
    fig.canvas.draw()
    for ax in fig.axes[:2]:
        lanes = len(ax.get_yticks())
        assert ax.get_window_extent().height / fig.dpi >= 0.35 * max(lanes, 3), ax.get_title(loc="left")


def test_an_nsight_exports_phases_are_labelled_like_the_profilers():
    """An Nsight export's NVTX phases sit at the top of their lane, no ProfilerStep range around them: they are the
    phases, labelled where they fit, as the profiler trace's phases one level down are (they were never labelled)."""
    from conftest import DATA

    from helpers import load
    from helpers.lanes import RANGE_LABEL

    def labels(fig):
        fig.canvas.draw()
        return {t.get_text() for t in fig.axes[0].texts if t.get_gid() == RANGE_LABEL}

    nsys = labels(plots.timeline(load(DATA / "nsys" / "launch_overhead__broken__h200.sqlite.gz"), step=1))
    kineto = labels(plots.timeline(recorded("launch_overhead", "broken"), step=1))
    assert {"forward", "backward", "optimizer"} <= nsys and {"forward", "backward", "optimizer"} <= kineto
    assert not any(n.startswith("ProfilerStep") for n in kineto)
