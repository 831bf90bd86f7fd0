"""The interactive timeline's Python side: level-of-detail bins, hover lookup, links, window figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import helpers
from helpers import metrics as m
from helpers import plots
from helpers.explore import Lanes, column_runs, figures_lines
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


def _busy_ms(cols, view_ms, width):
    px = (view_ms[1] - view_ms[0]) / width
    return sum(n * f / 100 * px for n, f in zip(cols["n"], cols["f"]))


def test_column_runs_share_of_each_pixel():
    # two events on a 5-pixel view: [0, 1) fills pixel 0, [1.5, 3.5) half of 1, all of 2, half of 3;
    # a nested event inside the second counts once
    start, end = np.array([0.0, 1.5, 2.0]), np.array([1.0, 3.5, 2.5])
    got = column_runs(start, end, np.zeros(3, dtype=np.int64), 0.0, 1.0, 5)
    assert got["x"].tolist() == [0, 1, 2, 3] and got["f"].tolist() == [100, 50, 100, 50]
    assert got["n"].tolist() == [1, 1, 1, 1] and got["c"].tolist() == [0, 0, 0, 0]
    # the colour covering most of a pixel wins; runs of equal pixels merge
    got = column_runs(np.array([0.0, 0.7, 3.0]), np.array([0.7, 1.0, 5.0]), np.array([1, 2, 1]), 0.0, 1.0, 5)
    assert got["x"].tolist() == [0, 3] and got["n"].tolist() == [1, 2] and got["c"].tolist() == [1, 1]
    assert got["f"].tolist() == [100, 100]
    # sparse: a whole second at a nanosecond a pixel costs what its two events cost
    got = column_runs(np.array([10.0, 5e5]), np.array([20.0, 5e5 + 1]), np.zeros(2, dtype=np.int64), 0.0, 1e-3, 10**9)
    assert got["n"].sum() == 10_000 + 1_000 and len(got["x"]) == 2


def test_bins_cover_exactly_the_busy_time_at_fine_resolution(trace, lanes):
    gpu = next(i for i, ln in enumerate(lanes.lanes) if ln.lane.startswith("GPU"))
    lane = lanes.lanes[gpu]
    a, b = (float(lanes.to_ms(t)) for t in lanes.full_us)
    cols = lanes.bins(a, b, width_px=10_000_000)[gpu]
    us, ue = m.merge_intervals(lane.start, lane.end)
    assert _busy_ms(cols, (a, b), 10_000_000) == pytest.approx(float((ue - us).sum()) / 1e3, rel=1e-3)


def test_a_nearly_idle_gpu_looks_nearly_idle_zoomed_out():
    """The launch-bound trace's GPU is busy a few percent of the time: drawn whole, its lane's columns are as
    tall as that share, not solid (issue 33: a merged bar made it look busy)."""
    tr = m.stepped(helpers.load(DATA / "launch_overhead__broken__h200.json.gz"))
    lanes = Lanes(tr)
    gpu = next(i for i, ln in enumerate(lanes.lanes) if ln.lane.startswith("GPU") and "memcpy" not in ln.lane)
    a, b = (float(lanes.to_ms(t)) for t in lanes.full_us)
    cols = lanes.bins(a, b, 800)[gpu]
    lane = lanes.lanes[gpu]
    us, ue = m.merge_intervals(lane.start, lane.end)
    share = float((ue - us).sum()) / (lanes.full_us[1] - lanes.full_us[0])
    assert share < 0.2
    drawn = _busy_ms(cols, (a, b), 800) / (b - a)
    assert drawn == pytest.approx(share, abs=0.01)
    assert sum(n for n, f in zip(cols["n"], cols["f"]) if f == 100) < 0.05 * 800  # hardly a solid pixel


def test_bins_are_bounded_by_the_pixels(lanes):
    a, b = (lanes.to_ms(t) for t in lanes.full_us)
    for width in (50, 400):
        for ln, got in zip(lanes.lanes, lanes.bins(a, b, width)):
            if ln.is_ranges:
                continue
            assert len(got["x"]) <= width and sum(got["n"]) <= width, ln.lane
            assert all(0 <= x < width for x in got["x"])


def test_zoom_fetches_detail_and_only_the_visible_range(trace, lanes):
    gpu = next(i for i, ln in enumerate(lanes.lanes) if ln.lane.startswith("GPU"))
    coarse = lanes.bins(*(lanes.to_ms(t) for t in lanes.full_us), 100)[gpu]
    win = m.windows(trace).iloc[2]
    a, b = lanes.to_ms(win["start_us"]), lanes.to_ms(win["end_us"])
    fine = lanes.bins(a, b, 100_000)[gpu]
    assert all(x >= 0 and x + n <= 100_000 for x, n in zip(fine["x"], fine["n"]))
    kernels = trace.window(win["start_us"], win["end_us"]).events
    n = int(((kernels["kind"] == "kernel") & (kernels["device"] >= 0)).sum())
    full = [x for x, f in zip(fine["x"], fine["f"]) if f == 100]
    assert len(full) >= n // 2 > len(coarse["x"]) // 10  # detail appears on zoom


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


def test_search_pin_and_links_carry_lanes(trace):
    view = plots.explore(trace, step=2, fallback=False)
    got = view.find("cudaLaunchKernel")
    ev = trace.events
    named = ev["name"].str.contains("cudaLaunchKernel", case=False)
    n = int(named.sum())
    assert got["total"] == n > 0 and got["names"] == ev["name"][named].nunique() and len(got["matches"]) == min(n, 5000)
    starts = [mt[1] for mt in got["matches"]]
    assert starts == sorted(starts)
    lane, s, e, row = got["matches"][0]
    assert view.labels[lane].startswith("CUDA API") and "cudaLaunchKernel" in ev["name"].iat[row]
    assert view.find("/cudalaunch(Kernel|xx)/")["total"] == n
    assert view.find("/^cudaLaunchKernel$/")["total"] == int((ev["name"] == "cudaLaunchKernel").sum())
    assert view.find("/[/")["error"].startswith("not a regular expression") and view.find("")["total"] == 0
    view.pin = {"row": row, "seq": 3}
    pinned = view.pinned
    assert pinned["seq"] == 3 and pinned["row"] == row and pinned["lane"] == lane
    assert pinned["link"] == "launched" and view.labels[pinned["links"][0]["lane"]].startswith("GPU")
    assert pinned["links"][0]["start_ms"] >= pinned["start_ms"]
    view.pin = {"seq": 4}
    assert view.pinned == {"seq": 4}


def test_the_axis_names_time_zero(trace):
    view = plots.explore(trace, fallback=False)
    assert view.origin.startswith("0 = the start of the first profiled step (step 0, ProfilerStep#")
    gpu_bound = helpers.load(DATA / "gpu_bound__fp32__h200.json.gz")
    text = plots.explore(gpu_bound, fallback=False).origin
    assert "the host's part of that step lies before 0" in text  # lab 08's first figure: why host work sits at negative times
    # the same words whether the host ran ahead or not: how far ahead is the learner's reading (lab 00, lab 07)
    assert text.split("(")[0] == view.origin.split("(")[0] and text.split(")")[-1] == view.origin.split(")")[-1]
    assert "earlier" not in text and " ms" not in text
    fig = plots.timeline(gpu_bound)
    assert fig.axes[0].get_xlabel().replace("\n", " ") == "time (ms); " + text


def test_dense_and_sparse_columns_agree(trace, lanes, monkeypatch):
    """A view of few columns is computed densely (prefix sums), a level of millions sparsely: the same pixels."""
    import helpers.explore as ex

    def expand(runs, ncols):
        out = np.zeros(ncols)
        colour = np.full(ncols, -1)
        for x, n, c, f in zip(runs["x"], runs["n"], runs["c"], runs["f"]):
            out[x:x + n] = f
            colour[x:x + n] = c
        return out, colour

    t0, t1 = lanes.full_us
    for ln in lanes.lanes:
        if ln.is_ranges:
            continue
        px = (t1 - t0) / 3000
        dense = ex.column_runs(ln.start, ln.end, ln.colour, t0, px, 3000)
        monkeypatch.setattr(ex, "DENSE_COLUMNS", 0)
        sparse = ex.column_runs(ln.start, ln.end, ln.colour, t0, px, 3000)
        monkeypatch.setattr(ex, "DENSE_COLUMNS", 65_536)
        (fd, cd), (fs, cs) = expand(dense, 3000), expand(sparse, 3000)
        assert np.abs(fd - fs).max() <= 1, ln.lane  # rounding of a share to whole percent
        assert (fd > 0).tolist() == (fs > 0).tolist()
        full = (fd == 100) & (fs == 100)
        assert (cd[full] == cs[full]).all()  # a pixel one colour fills is that colour either way


def test_the_critical_path_track(trace):
    view = plots.explore(trace, step=1, fallback=False, critical_path=True)
    (track,) = view.overlays
    assert track["name"] == "critical path" and len(track["x0"]) == len(track["x1"]) == len(track["c"]) > 0
    assert all(a <= b for a, b in zip(track["x0"], track["x1"]))
    assert {c for c, _ in track["legend"]} == set(track["label"])
    assert plots.explore(trace, step=1, fallback=False).overlays == []  # off unless asked: it names causes
