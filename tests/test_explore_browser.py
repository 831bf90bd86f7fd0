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
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

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
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
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


def _view(page) -> list[float]:
    return [float(v) for v in page.eval_on_selector(".gtl-explore", "e => e.dataset.view").split(",")]


def _wait_drawn(page) -> None:
    """Until the bars on screen were computed for the visible range (the zoom's round trip is done)."""
    page.wait_for_function("""() => { const e = document.querySelector('.gtl-explore');
        return e && e.dataset.binsView && e.dataset.binsView === e.dataset.view; }""", timeout=60_000)


def test_explore_in_jupyterlab(lab):
    tmp, port, token, shots = lab
    trace = helpers.load(TRACE)
    lanes = Lanes(trace)
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
        page.wait_for_selector(".gtl-explore canvas", timeout=120_000)
        _wait_drawn(page)
        page.locator(".gtl-explore").scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "1-rendered.png"))
        assert _view(page) == pytest.approx(list(window), abs=1e-5)

        root = page.locator(".gtl-explore")
        box = page.locator(".gtl-canvas").bounding_box()
        left = box["x"] + float(root.get_attribute("data-plot-left"))
        width = float(root.get_attribute("data-plot-width"))
        lane_y = box["y"] + float(root.get_attribute("data-lane-top")) + (gpu + 0.5) * float(root.get_attribute("data-lane-height"))

        # hover: the kernel under the pointer, its duration, stream and launch call
        page.mouse.move(left + width / 2, lane_y)
        tip = page.locator(".gtl-tip")
        tip.wait_for(state="visible", timeout=30_000)
        text = tip.inner_text()
        page.screenshot(path=str(shots / "2-hover.png"))
        assert ev["name"].iat[k] in text
        assert f"stream {ev['stream'].iat[k]}" in text and f"{ev['dur_us'].iat[k]:.1f} µs" in text
        assert "launched by: cudaLaunch" in text

        # wheel: zoom out around the pointer, then the detail for the new range arrives
        before, shown = _view(page), root.get_attribute("data-view")
        page.mouse.wheel(0, 800)
        page.wait_for_function(f"() => document.querySelector('.gtl-explore').dataset.view !== '{shown}'")
        _wait_drawn(page)
        zoomed = _view(page)
        assert zoomed[1] - zoomed[0] > 3 * (before[1] - before[0])
        page.screenshot(path=str(shots / "3-wheel-zoom.png"))

        # drag: pan right by a quarter of the width
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
        panel = page.locator(".gtl-figures").inner_text()
        page.screenshot(path=str(shots / "4-selection.png"))
        browser.close()

    deadline = time.time() + 30
    while not figures_out.exists() and time.time() < deadline:
        time.sleep(0.2)
    got = json.loads(figures_out.read_text())
    a, b = got["window_ms"]
    assert a == pytest.approx(panned[0] + (panned[1] - panned[0]) / 4, rel=0.02)
    want = m.window_stats(trace, lanes.to_us(a), lanes.to_us(b))
    for key in ("gpu_busy_us", "gpu_busy_share", "kernels", "kernel_us", "syncs", "sync_blocked_us"):
        assert got[key] == pytest.approx(want[key]), key
    assert got["idle_by_cause_us"] == pytest.approx(want["idle_by_cause_us"])
    assert panel.splitlines() == figures_lines(want | {"window_ms": [a, b]})
