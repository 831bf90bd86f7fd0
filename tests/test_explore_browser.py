"""plots.explore in a real browser: headless Chromium drives JupyterLab.

Needs Chromium (Debian: ``apt-get install chromium``) and Playwright's Python package
(``pip install -r requirements-browser.txt``; no browser download, the system Chromium is used).
Skipped with the reason when either is missing, as in CI, which installs requirements.txt only.
Screenshots go to a temporary folder (printed; ``EXPLORE_SCREENSHOTS=DIR`` keeps them in DIR).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

import helpers
from helpers import metrics as m
from helpers.explore import Lanes, figures_lines

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "data" / "host_bound__broken__h200.json.gz"
IDLE_TRACE = ROOT / "data" / "launch_overhead__broken__h200.json.gz"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
KERNEL_BLUE = (0x1F, 0x77, 0xB4)

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (apt-get install chromium)"),
    pytest.mark.skipif(shutil.which("jupyter-lab") is None and shutil.which("jupyter") is None, reason="no jupyter lab"),
]
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -r requirements-browser.txt)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _notebook(path: Path, window_ms: tuple[float, float], figures_out: Path) -> None:
    import nbformat

    code = f"""import json, pathlib
import helpers
from helpers import plots
trace = helpers.load({str(TRACE)!r})
view = plots.explore(trace, window_ms={window_ms!r}, fallback=False)
out = pathlib.Path({str(figures_out)!r})
view.observe(lambda change: out.write_text(json.dumps(view.figures)), names=["figures"])
view"""
    idle = f"plots.explore(helpers.load({str(IDLE_TRACE)!r}), fallback=False)"
    filler = "\n".join(f"line {i} of text below the views, so the notebook has a page to scroll" for i in range(80))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code), nbformat.v4.new_code_cell(idle),
                                         nbformat.v4.new_markdown_cell(filler)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def lab():
    tmp = Path(tempfile.mkdtemp(prefix="explore-browser-"))
    shots = Path(os.environ.get("EXPLORE_SCREENSHOTS", tmp / "screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    port, token = _free_port(), "explore-test-token"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_CONFIG_DIR": str(tmp / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "runtime")}
    proc = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
                             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp}",
                             "--LabApp.expose_app_in_browser=True", *(["--allow-root"] if os.geteuid() == 0 else [])],
                            env=env, stdout=subprocess.DEVNULL, stderr=(tmp / "lab.log").open("w"))
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    pytest.fail("jupyter lab did not start within 120 s: " + (tmp / "lab.log").read_text()[-800:])
                time.sleep(0.5)
        yield tmp, port, token, shots
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(f"screenshots in {shots}")


def _view(page, nth: int = 0) -> list[float]:
    return [float(v) for v in page.locator(".gtl-explore").nth(nth).get_attribute("data-view").split(",")]


def _wait_drawn(page, nth: int = 0) -> None:
    """Until the bars on screen were computed for the visible range (the zoom's round trip is done)."""
    page.wait_for_function("""(n) => { const e = document.querySelectorAll('.gtl-explore')[n];
        return e && e.dataset.binsView && e.dataset.binsView === e.dataset.view; }""", arg=nth, timeout=60_000)


def _solid_share(page, nth: int, lane: int) -> float:
    """The share of a lane's pixels drawn in the kernel colour, solid (read off the canvas)."""
    return page.evaluate("""([n, lane, rgb]) => {
        const root = document.querySelectorAll('.gtl-explore')[n], c = root.querySelector('canvas');
        const top = +root.dataset.laneTops.split(',')[lane], h = +root.dataset.laneHeights.split(',')[lane];
        const left = +root.dataset.plotLeft, w = +root.dataset.plotWidth, dpr = c.width / c.clientWidth;
        const img = c.getContext('2d').getImageData(left * dpr, top * dpr, w * dpr, h * dpr).data;
        let hit = 0;
        for (let i = 0; i < img.length; i += 4)
            if (Math.abs(img[i] - rgb[0]) < 6 && Math.abs(img[i + 1] - rgb[1]) < 6 && Math.abs(img[i + 2] - rgb[2]) < 6) hit++;
        return hit / (img.length / 4); }""", [nth, lane, list(KERNEL_BLUE)])


def _scroller(page):
    return page.evaluate("""() => { const n = [...document.querySelectorAll('.jp-WindowedPanel-outer, .jp-Notebook')]
        .find(e => e.scrollHeight > e.clientHeight + 10); return n ? n.scrollTop : null; }""")


def test_explore_in_jupyterlab(lab):
    tmp, port, token, shots = lab
    trace = helpers.load(TRACE)
    lanes = Lanes(m.stepped(trace))
    gpu = next(i for i, ln in enumerate(lanes.lanes) if ln.lane.startswith("GPU"))
    ev = trace.events
    rows = lanes.lanes[gpu].rows
    k = int(rows[(ev["kind"].to_numpy()[rows] == "kernel")][10])  # a known kernel: the first view is centred on it
    ks, ke = float(lanes.to_ms(ev["start_us"].iat[k])), float(lanes.to_ms(ev["end_us"].iat[k]))
    window = (round(ks - 2 * (ke - ks), 6), round(ke + 2 * (ke - ks), 6))
    figures_out = tmp / "figures.json"
    _notebook(tmp / "explore.ipynb", window, figures_out)

    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/lab/tree/explore.ipynb?token={token}")
        page.wait_for_function("() => window.jupyterapp && document.querySelector('.jp-Notebook')", timeout=120_000)
        page.wait_for_function("() => /\\| Idle/.test(document.querySelector('#jp-main-statusbar').innerText)", timeout=120_000)
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")  # not awaited: it runs on
        page.wait_for_function("() => document.querySelectorAll('.gtl-explore canvas').length === 2", timeout=120_000)
        _wait_drawn(page, 0)
        _wait_drawn(page, 1)
        root = page.locator(".gtl-explore").first
        root.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "1-rendered.png"))
        assert _view(page) == pytest.approx(list(window), abs=1e-5)
        assert "time (ms) · 0 = the start of the first profiled step" in root.locator(".gtl-origin").inner_text()
        cells = page.locator(".jp-Notebook .jp-Cell").count()

        box = root.locator(".gtl-canvas").bounding_box()
        left = box["x"] + float(root.get_attribute("data-plot-left"))
        width = float(root.get_attribute("data-plot-width"))
        tops = [float(v) for v in root.get_attribute("data-lane-tops").split(",")]
        heights = [float(v) for v in root.get_attribute("data-lane-heights").split(",")]
        lane_y = box["y"] + tops[gpu] + heights[gpu] / 2

        # hover: the kernel under the pointer, its duration, stream and launch call; the name cut when long
        page.mouse.move(left + width / 2, lane_y)
        tip = root.locator(".gtl-tip")
        tip.wait_for(state="visible", timeout=30_000)
        text = tip.inner_text()
        page.screenshot(path=str(shots / "2-hover.png"))
        name = str(ev["name"].iat[k])
        assert name[:60] in text and (len(name) <= 110 or name not in text)
        assert f"stream {ev['stream'].iat[k]}" in text and "launched by: cudaLaunch" in text

        # click pins it: the whole name in the panel, and the launch call it links to
        page.mouse.click(left + width / 2, lane_y)
        pinned = root.locator(".gtl-pinned")
        pinned.wait_for(state="visible", timeout=30_000)
        assert name in pinned.inner_text() and "launched by" in pinned.inner_text()
        assert root.get_attribute("data-pinned-row") == str(k)
        page.screenshot(path=str(shots / "3-pinned-with-flow-arrow.png"))

        # a plain wheel scrolls the notebook, not the view
        before, scrolled = _view(page), _scroller(page)
        page.mouse.wheel(0, 300)
        page.wait_for_timeout(400)
        assert _view(page) == before and _scroller(page) != scrolled
        page.mouse.wheel(0, -300)
        page.wait_for_timeout(400)
        box = root.locator(".gtl-canvas").bounding_box()
        lane_y = box["y"] + tops[gpu] + heights[gpu] / 2

        # Ctrl-wheel zooms out around the pointer, then the detail for the new range arrives
        page.mouse.move(left + width / 2, lane_y)
        shown = root.get_attribute("data-view")
        page.keyboard.down("Control")
        for _ in range(3):
            page.mouse.wheel(0, 300)
        page.keyboard.up("Control")
        page.wait_for_function(f"() => document.querySelector('.gtl-explore').dataset.view !== '{shown}'")
        _wait_drawn(page)
        zoomed = _view(page)
        assert zoomed[1] - zoomed[0] > 3 * (before[1] - before[0])
        page.screenshot(path=str(shots / "4-ctrl-wheel-zoom.png"))

        # keys: W zooms in, S out, A/D pan; none of them reaches JupyterLab (D, D would delete the cell)
        page.keyboard.press("w")
        _wait_drawn(page)
        inward = _view(page)
        assert inward[1] - inward[0] == pytest.approx(0.7 * (zoomed[1] - zoomed[0]), rel=1e-3)
        span = inward[1] - inward[0]
        page.keyboard.press("d")
        _wait_drawn(page)
        assert _view(page)[0] == pytest.approx(inward[0] + 0.2 * span, abs=1e-5)
        page.keyboard.press("a")
        _wait_drawn(page)
        assert _view(page) == pytest.approx(inward, abs=1e-5)
        for key in ("d", "d", "a", "s"):
            page.keyboard.press(key)
        _wait_drawn(page)
        keyed = _view(page)
        assert keyed[1] - keyed[0] == pytest.approx(zoomed[1] - zoomed[0], rel=1e-3)
        assert page.locator(".jp-Notebook .jp-Cell").count() == cells
        # zoom out is clamped to the trace
        for _ in range(40):
            page.keyboard.press("s")
        _wait_drawn(page)
        full = _view(page)
        assert full == pytest.approx([float(lanes.to_ms(lanes.full_us[0])), float(lanes.to_ms(lanes.full_us[1]))], abs=1e-4)
        page.screenshot(path=str(shots / "5-whole-trace-clamped.png"))
        root.locator(".gtl-tip").evaluate("e => e.style.display = 'none'")

        # search: the count, then Enter goes to a match and pins it
        search = root.locator(".gtl-search")
        search.fill("aten::_local_scalar_dense")
        page.wait_for_function("() => /\\/ [\\d,]+|no match/.test(document.querySelector('.gtl-count').innerText)",
                               timeout=30_000)
        n = int((ev["name"] == "aten::_local_scalar_dense").sum())
        assert root.locator(".gtl-count").inner_text().endswith(f"/ {n:,}")
        search.press("Enter")
        page.wait_for_function("() => document.querySelector('.gtl-explore').dataset.matchIndex === '0'")
        page.wait_for_function("() => /aten::_local_scalar_dense/.test(document.querySelector('.gtl-pinned').innerText)",
                               timeout=30_000)
        search.press("Enter")
        page.wait_for_function("() => document.querySelector('.gtl-explore').dataset.matchIndex === '1'")
        _wait_drawn(page)
        page.screenshot(path=str(shots / "6-search.png"))
        root.focus()
        page.keyboard.press("Escape")
        pinned.wait_for(state="hidden", timeout=30_000)

        # a lane's label collapses it, and again expands it
        api = next(i for i, lab_ in enumerate(lanes.labels) if lab_.startswith("CUDA API"))
        box = root.locator(".gtl-canvas").bounding_box()
        page.mouse.click(box["x"] + 40, box["y"] + tops[api] + heights[api] / 2)
        collapsed = [float(v) for v in root.get_attribute("data-lane-heights").split(",")]
        assert collapsed[api] < heights[api] / 2
        page.screenshot(path=str(shots / "7-collapsed-lane.png"))
        page.mouse.click(box["x"] + 40, box["y"] + tops[api] + collapsed[api] / 2)
        assert [float(v) for v in root.get_attribute("data-lane-heights").split(",")] == heights

        # drag: pan right by a quarter of the width (from a zoomed view)
        root.locator(".gtl-canvas").evaluate("c => c.scrollIntoView()")
        page.keyboard.press("w")
        page.keyboard.press("w")
        _wait_drawn(page)
        zoomed = _view(page)
        box = root.locator(".gtl-canvas").bounding_box()
        lane_y = box["y"] + tops[gpu] + heights[gpu] / 2
        page.mouse.move(left + width / 2, lane_y)
        page.mouse.down()
        page.mouse.move(left + width / 4, lane_y, steps=5)
        page.mouse.up()
        _wait_drawn(page)
        panned = _view(page)
        assert panned[0] > zoomed[0] and panned[1] - panned[0] == pytest.approx(zoomed[1] - zoomed[0], rel=1e-4)

        # shift-drag: select the middle half; its figures are metrics.window_stats of that stretch
        page.keyboard.down("Shift")
        page.mouse.move(left + width / 4, lane_y)
        page.mouse.down()
        page.mouse.move(left + 3 * width / 4, lane_y, steps=5)
        page.mouse.up()
        page.keyboard.up("Shift")
        page.wait_for_function("() => !document.querySelector('.gtl-figures').classList.contains('gtl-empty')", timeout=30_000)
        panel = root.locator(".gtl-figures").inner_text()
        page.screenshot(path=str(shots / "8-selection.png"))

        # the launch-bound trace, whole: its GPU is busy a few percent of the time, and looks it
        idle_root = page.locator(".gtl-explore").nth(1)
        idle_root.scroll_into_view_if_needed()
        idle_lanes = Lanes(m.stepped(helpers.load(IDLE_TRACE)))
        stream = next(i for i, ln in enumerate(idle_lanes.lanes) if ln.kind == "gpu")
        solid = _solid_share(page, 1, stream)
        idle_root.screenshot(path=str(shots / "9-idle-gpu-zoomed-out.png"))
        assert solid < 0.25, f"{solid:.0%} of the GPU lane is solid kernel colour"
        browser.close()

    deadline = time.time() + 30
    while not figures_out.exists() and time.time() < deadline:
        time.sleep(0.2)
    got = json.loads(figures_out.read_text())
    a, b = got["window_ms"]
    assert a == pytest.approx(panned[0] + (panned[1] - panned[0]) / 4, rel=0.02)
    want = m.window_stats(m.stepped(trace), lanes.to_us(a), lanes.to_us(b))
    for key in ("gpu_busy_us", "gpu_busy_share", "kernels", "kernel_us", "syncs", "sync_blocked_us"):
        assert got[key] == pytest.approx(want[key]), key
    assert got["idle_by_cause_us"] == pytest.approx(want["idle_by_cause_us"])
    assert panel.splitlines() == figures_lines(want | {"window_ms": [a, b]})
