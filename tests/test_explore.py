"""The interactive timeline's Python side: level-of-detail bins, hover lookup, links, window figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import helpers
from helpers import metrics as m
from helpers import plots
from helpers.explore import Lanes, figures_lines
from helpers.plots import _lane_label, _lanes_in, time_origin_us

DATA = Path(__file__).resolve().parents[1] / "data"
pytest.importorskip("anywidget")


@pytest.fixture(scope="module")
def trace():
    return helpers.load(DATA / "host_bound__broken__h200.json.gz")


@pytest.fixture(scope="module")
def lanes(trace):
    return Lanes(trace)


def test_same_lanes_and_origin_as_the_static_timeline(trace, lanes):
    ev = trace.events
    order, _ = _lanes_in(trace, float(ev["start_us"].min()), float(ev["end_us"].max()), None)
    assert lanes.labels == [_lane_label(ln, r, False) for r, ln in order]
    assert lanes.origin_us == time_origin_us(trace)


def test_bins_cover_exactly_the_busy_time_at_fine_resolution(trace, lanes):
    # A view so fine that no two events share a pixel: the bars are the lane's union, clipped to nothing.
    gpu = next(i for i, ln in enumerate(lanes.lanes) if ln.lane.startswith("GPU"))
    lane = lanes.lanes[gpu]
    a, b = lanes.full_us
    bins = lanes.bins(lanes.to_ms(a), lanes.to_ms(b), width_px=10_000_000)[gpu]
    us, ue = m.merge_intervals(lane.start, lane.end)
    got = sum(x1 - x0 for x0, x1 in zip(bins["x0"], bins["x1"]))
    assert got == pytest.approx(float((ue - us).sum()) / 1e3, rel=1e-6)


def test_bins_are_bounded_by_the_pixels(lanes):
    a, b = (lanes.to_ms(t) for t in lanes.full_us)
    for width in (50, 400):
        for ln, got in zip(lanes.lanes, lanes.bins(a, b, width)):
            colours = max(len(set(got["c"])), 1)
            assert len(got["x0"]) <= colours * (width + 1), ln.lane


def test_zoom_fetches_detail_and_only_the_visible_range(trace, lanes):
    gpu = next(i for i, ln in enumerate(lanes.lanes) if ln.lane.startswith("GPU"))
    coarse = lanes.bins(*(lanes.to_ms(t) for t in lanes.full_us), 100)[gpu]
    win = m.windows(trace).iloc[2]
    a, b = lanes.to_ms(win["start_us"]), lanes.to_ms(win["end_us"])
    fine = lanes.bins(a, b, 100_000)[gpu]
    assert all(x1 > a and x0 < b for x0, x1 in zip(fine["x0"], fine["x1"]))
    kernels = trace.window(win["start_us"], win["end_us"]).events
    n = int(((kernels["kind"] == "kernel") & (kernels["device"] >= 0)).sum())
    assert len(fine["x0"]) >= n // 2 > len(coarse["x0"]) // 10  # detail appears on zoom


def test_hover_finds_a_kernel_and_its_launch_call_and_back(trace, lanes):
    ev = trace.events
    gpu = next(i for i, ln in enumerate(lanes.lanes) if ln.lane.startswith("GPU"))
    k = int(lanes.lanes[gpu].rows[10])
    mid = lanes.to_ms((ev["start_us"].iat[k] + ev["end_us"].iat[k]) / 2)
    row = lanes.event_at(gpu, mid)
    assert row == k
    info = lanes.describe(row)
    assert info["name"] == ev["name"].iat[k] and info["kind"] == "kernel"
    assert info["where"] == f"GPU {ev['device'].iat[k]}, stream {ev['stream'].iat[k]}"
    assert info["link"] == "launched by" and info["links"][0]["name"].startswith("cudaLaunch")
    call = lanes.linked(k)[0]
    assert ev["correlation"].iat[call] == ev["correlation"].iat[k] and ev["kind"].iat[call] == "runtime"
    back = lanes.describe(call)
    assert back["link"] == "launched" and back["links"][0]["name"] == ev["name"].iat[k]
    assert lanes.event_at(gpu, lanes.to_ms(lanes.full_us[1]) + 100.0) is None


def test_window_figures_equal_the_metrics_of_that_step(trace, lanes):
    for _, win in m.windows(trace).iterrows():
        f = lanes.figures(lanes.to_ms(win["start_us"]), lanes.to_ms(win["end_us"]))
        busy = m.gpu_busy(trace)
        row = busy[busy["step"] == win["step"]].iloc[0]
        assert f["gpu_busy_us"] == pytest.approx(row["busy_us"])
        assert f["gpu_busy_share"] == pytest.approx(row["busy_share"])
        gaps = m.idle_gaps(trace)
        gaps = gaps[gaps["step"] == win["step"]]
        for cause in m.CAUSES:
            assert f["idle_by_cause_us"][cause] == pytest.approx(float(gaps.loc[gaps["cause"] == cause, "dur_us"].sum()), abs=1e-6)
        inw = trace.window(win["start_us"], win["end_us"]).events
        assert f["kernels"] == int(((inw["kind"] == "kernel") & (inw["device"] >= 0)).sum())


def test_window_figures_count_copies_and_syncs():
    tr = helpers.load(DATA / "sync_stall__broken__h200.json.gz")
    lanes = Lanes(tr)
    win = m.windows(tr).iloc[1]
    f = lanes.figures(lanes.to_ms(win["start_us"]), lanes.to_ms(win["end_us"]))
    ev = tr.events
    in_step = ev[(ev["end_us"] > win["start_us"]) & (ev["start_us"] < win["end_us"])]
    syncs = in_step[m.is_sync_call(tr)[in_step.index]]  # blocked time: every call that waits
    points = in_step[m.sync_point_calls(tr)[in_step.index]]  # the count: a .cpu() copy and its sync once
    assert f["syncs"] == len(points) > 0 and len(syncs) > len(points)
    clipped = (np.minimum(syncs["end_us"], win["end_us"]) - np.maximum(syncs["start_us"], win["start_us"])).sum()
    assert f["sync_blocked_us"] == pytest.approx(float(clipped))
    h2d = in_step[(in_step["kind"] == "memcpy") & (in_step["copy_kind"] == "H2D")]
    assert f["copies"].get("H2D", {"count": 0})["count"] == len(h2d)
    assert any(line.startswith("syncs ") for line in figures_lines(f))


def test_widget_round_trips_and_reading_window(trace):
    view = plots.explore(trace, step=2, fallback=False)
    win = m.windows(trace)
    row = win[win["step"] == 2].iloc[0]
    origin = time_origin_us(trace)
    assert view.view_ms == pytest.approx([(row["start_us"] - origin) / 1e3, (row["end_us"] - origin) / 1e3])
    assert view.bins["view"] == view.view_ms
    view.zoom(1.0, 2.0)
    assert view.bins["view"] == [1.0, 2.0]
    assert view.window_ms == (1.0, 2.0)
    view.select(1.25, 1.75)
    assert view.window_ms == (1.25, 1.75)
    assert view.figures == m.window_stats(trace, origin + 1250.0, origin + 1750.0) | {"window_ms": [1.25, 1.75]}
    gpu = next(i for i, lab in enumerate(view.labels) if lab.startswith("GPU"))
    view.probe = {"lane": gpu, "t": 1e9, "tol": 0.0, "seq": 7}
    assert view.hover_info == {"seq": 7}


def test_display_data_falls_back_to_the_static_figure(trace):
    view = plots.explore(trace, window_ms=(0.0, 5.0))
    data, _ = view._repr_mimebundle_()
    assert data["text/plain"] == "explore(host_bound__broken__h200: 0.0-5.0 ms, 6 lanes)"
    assert data["image/png"]  # what nbval, CI and exported HTML show
    assert "application/vnd.jupyter.widget-view+json" in data


def test_front_end_ships_with_the_package():
    from helpers.explore import STATIC

    js = (STATIC / "explore.js").read_text()
    assert "export default" in js and "http" not in js  # an ES module, nothing fetched from a CDN


def test_a_view_before_the_reading_names_no_cause():
    """The labs' views before a reading: a selection's figures say what the GPU did, never what the host was
    doing while it idled (that is the exercise's answer); the toolkit's default view says it."""
    broken = helpers.load(Path(__file__).resolve().parents[1] / "data" / "data_stall__broken__h200.json.gz")
    win = m.windows(broken)
    row = win[win["step"] == 1].iloc[0]
    origin = time_origin_us(broken)
    a, b = (row["start_us"] - origin) / 1e3, (row["end_us"] - origin) / 1e3
    shown = plots.explore(broken, step=1, fallback=False)
    shown.select(a, b)
    assert any(line.startswith("GPU idle while the host was") for line in shown.figure_lines)
    hidden = plots.explore(broken, step=1, fallback=False, causes=False)
    hidden.select(a, b)
    assert "idle_by_cause_us" not in hidden.figures
    assert not any("DataLoader" in line or "GPU idle while" in line for line in hidden.figure_lines)
    assert hidden.figure_lines[1] == shown.figure_lines[1]  # GPU busy, the same
