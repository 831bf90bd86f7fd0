"""``python -m helpers report`` files opened in headless Chromium, offline, from disk: a recorded trace, an Nsight
Systems export, a folder of 8 ranks, a before/after diff and a 2M-event trace (first draw within 2 s). Drives hover,
pin, search, keyboard zoom, the heatmap, the linked diff view, and saves screenshots.

Needs Chromium (Debian: ``apt-get install chromium``) and Playwright's Python package (``pip install -r
requirements-browser.txt``); skipped with the reason where either is missing, as in CI. Screenshots go to a
temporary folder (printed; ``REPORT_SCREENSHOTS=DIR`` keeps them in DIR). The 2M-event case writes a 400 MB trace
and takes about a minute; ``REPORT_SKIP_BIG=1`` leaves it out.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import helpers
from helpers import metrics as m
from helpers.explore import Lanes

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (apt-get install chromium)")
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -r requirements-browser.txt)")


@pytest.fixture(scope="module")
def shots():
    folder = Path(os.environ.get("REPORT_SCREENSHOTS") or tempfile.mkdtemp(prefix="report-shots-"))
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    print(f"screenshots in {folder}")


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


def _report(tmp: Path, *inputs: str | Path, name: str = "report.html") -> Path:
    out = tmp / name
    r = subprocess.run([sys.executable, "-m", "helpers", "report", *map(str, inputs), "-o", str(out)],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert r.returncode == 0, r.stderr
    return out


def _open(browser, path: Path):
    """The page, offline (nothing may be fetched), its first draw done; and the errors it logged."""
    context = browser.new_context(offline=True, viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("request", lambda req: errors.append(f"fetched {req.url}") if not req.url.startswith(("file:", "data:", "blob:")) else None)
    page.goto(path.as_uri())
    page.wait_for_function("() => document.body.dataset.drawnAt !== undefined", timeout=60_000)
    return page, errors


def _view(root) -> list[float]:
    return [float(v) for v in root.get_attribute("data-view").split(",")]


def _lane_y(root, lane: int) -> float:
    box = root.locator(".gtl-canvas").bounding_box()
    tops = [float(v) for v in root.get_attribute("data-lane-tops").split(",")]
    heights = [float(v) for v in root.get_attribute("data-lane-heights").split(",")]
    return box["y"] + tops[lane] + heights[lane] / 2


def test_report_of_a_recorded_trace(tmp_path, browser, shots):
    path = _report(tmp_path, DATA / "host_bound__broken__h200.json.gz")
    page, errors = _open(browser, path)
    page.screenshot(path=str(shots / "recorded-1-top.png"))
    root = page.locator(".gtl-explore")
    root.scroll_into_view_if_needed()
    trace = m.stepped(helpers.load(DATA / "host_bound__broken__h200.json.gz"))
    lanes = Lanes(trace, max_lanes=64)
    ev = trace.events
    assert _view(root) == pytest.approx([float(lanes.to_ms(t)) for t in lanes.full_us], abs=1e-4)
    gpu = next(i for i, ln in enumerate(lanes.lanes) if ln.kind == "gpu")
    rows = lanes.lanes[gpu].rows
    k = int(rows[ev["kind"].to_numpy()[rows] == "kernel"][40])
    name = str(ev["name"].iat[k])
    box = root.locator(".gtl-canvas").bounding_box()
    left, width = box["x"] + float(root.get_attribute("data-plot-left")), float(root.get_attribute("data-plot-width"))
    full = _view(root)

    # a click focuses the view; W zooms in at the pointer, S out, clamped to the trace
    page.mouse.click(left + width / 2, _lane_y(root, gpu))
    for _ in range(3):
        page.keyboard.press("w")
    got = _view(root)
    assert got[1] - got[0] == pytest.approx(0.7**3 * (full[1] - full[0]), rel=1e-3)
    for _ in range(40):
        page.keyboard.press("s")
    assert _view(root) == pytest.approx(full, abs=1e-4)

    # search a kernel by its whole name: Enter centres the first match and pins it (its whole name in the panel)
    search = root.locator(".gtl-search")
    search.fill("/^" + re.escape(name) + "$/")
    page.wait_for_function("() => /\\/ [\\d,]+/.test(document.querySelector('.gtl-count').innerText)", timeout=30_000)
    search.press("Enter")
    pinned = root.locator(".gtl-pinned")
    pinned.wait_for(state="visible", timeout=30_000)
    assert name in pinned.inner_text() and "launched by" in pinned.inner_text()
    page.wait_for_function("() => document.querySelector('.gtl-explore').dataset.binsView === document.querySelector('.gtl-explore').dataset.view")
    # hover it (the view shows it in the middle, or nearer an end of the trace)
    ps, pe = (float(v) for v in root.get_attribute("data-pinned-ms").split(","))
    view = _view(root)
    x = left + ((ps + pe) / 2 - view[0]) / (view[1] - view[0]) * width
    page.mouse.move(x, _lane_y(root, gpu) - 200)  # off the lanes: no tooltip left over
    page.mouse.move(x, _lane_y(root, gpu), steps=3)
    tip = root.locator(".gtl-tip")
    page.wait_for_function("(n) => document.querySelector('.gtl-tip').innerText.includes(n)", arg=name[:50], timeout=30_000)
    text = tip.inner_text()
    assert name[:50] in text and "launched by: cudaLaunch" in text
    page.screenshot(path=str(shots / "recorded-2-hover-pinned-flow-arrow.png"))

    # search, then Enter goes to the first match and pins it
    search = root.locator(".gtl-search")
    search.fill("aten::_local_scalar_dense")
    n = int((ev["name"] == "aten::_local_scalar_dense").sum())
    page.wait_for_function(f"() => document.querySelector('.gtl-count').innerText.endsWith('/ {n}')", timeout=30_000)
    search.press("Enter")
    page.wait_for_function("() => /aten::_local_scalar_dense/.test(document.querySelector('.gtl-pinned').innerText)", timeout=30_000)
    page.screenshot(path=str(shots / "recorded-4-search.png"))

    # a finding's button shows its window
    button = page.locator("button.show").first
    a, b = (float(v) for v in button.get_attribute("data-window").split(","))
    button.click()
    got = _view(root)
    assert got[0] == pytest.approx(a - 0.05 * (b - a), abs=1e-4) and got[1] == pytest.approx(b + 0.05 * (b - a), abs=1e-4)
    page.wait_for_timeout(600)
    page.screenshot(path=str(shots / "recorded-5-finding-window.png"))

    # shift-drag selects a stretch: its figures, counted in the page from the events drawn
    root.scroll_into_view_if_needed()
    box = root.locator(".gtl-canvas").bounding_box()
    y = _lane_y(root, gpu)
    page.keyboard.down("Shift")
    page.mouse.move(left + width * 0.3, y)
    page.mouse.down()
    page.mouse.move(left + width * 0.7, y, steps=5)
    page.mouse.up()
    page.keyboard.up("Shift")
    page.wait_for_function("() => !document.querySelector('.gtl-figures').classList.contains('gtl-empty')", timeout=30_000)
    figures = root.locator(".gtl-figures").inner_text()
    assert "GPU busy" in figures and "kernels " in figures and "CUDA API calls" in figures
    page.screenshot(path=str(shots / "recorded-6-selection.png"))

    # the tables sort by a click on a heading, largest first
    table = page.locator("table.sortable").nth(1)
    table.locator("th", has_text="host (ms)").click()
    values = [float(v) for v in table.locator("tbody tr td:nth-child(4)").evaluate_all("cs => cs.map(c => c.dataset.v || 'NaN')")]
    values = [v for v in values if v == v]
    assert values == sorted(values, reverse=True)
    assert errors == []


def test_report_of_an_nsight_export(tmp_path, browser, shots):
    path = _report(tmp_path, DATA / "nsight" / "sync_stall__fixed__h200.sqlite.gz")
    page, errors = _open(browser, path)
    root = page.locator(".gtl-explore")
    root.scroll_into_view_if_needed()
    labels = root.evaluate("e => e.dataset.laneTops.split(',').length")
    assert labels >= 4 and "GPU" in page.locator(".legend, .gtl-legend").first.inner_text() + page.content()
    page.screenshot(path=str(shots / "nsight-1-timeline.png"))
    assert errors == []


def test_report_of_a_folder_of_8_ranks(tmp_path, browser, shots):
    sys.path.insert(0, str(ROOT / "tools"))
    from benchmark import job_folder

    folder = tmp_path / "job"
    folder.mkdir()
    job_folder(folder, 8, 20_000)  # rank 5 computes 1.5x longer a step: the straggler
    path = _report(tmp_path, folder)
    page, errors = _open(browser, path)
    ranks = page.locator("#ranks-0")
    ranks.scroll_into_view_if_needed()
    assert "Stragglers: rank 5" in ranks.inner_text()
    page.screenshot(path=str(shots / "ranks-1-heatmap.png"))
    cell = page.locator('rect.cell[data-rank="5"]').nth(3)
    a, b = (float(v) for v in cell.get_attribute("data-window").split(","))
    cell.click()
    root = page.locator(".gtl-explore")
    got = _view(root)
    assert got[0] == pytest.approx(a - 0.05 * (b - a), abs=1e-4)
    tops = [float(v) for v in root.get_attribute("data-lane-tops").split(",")]
    assert sum(t >= 0 for t in tops) > len(tops) / 8  # rank 5's lanes shown, not only rank 0's
    page.wait_for_timeout(600)
    page.screenshot(path=str(shots / "ranks-2-rank5-step.png"))
    assert errors == []


def test_report_diff_view(tmp_path, browser, shots):
    path = _report(tmp_path, DATA / "sync_stall__broken__h200.json.gz", DATA / "sync_stall__fixed__h200.json.gz")
    page, errors = _open(browser, path)
    assert "faster: " in page.locator(".verdict").inner_text()
    first, second = page.locator(".gtl-explore").nth(0), page.locator(".gtl-explore").nth(1)
    first.scroll_into_view_if_needed()
    box = first.locator(".gtl-canvas").bounding_box()
    left, width = box["x"] + float(first.get_attribute("data-plot-left")), float(first.get_attribute("data-plot-width"))
    page.mouse.click(left + width * 0.2, box["y"] + 40)  # early in both traces: the linked view fits in each
    for _ in range(3):
        page.keyboard.press("w")
    assert _view(second) == pytest.approx(_view(first), abs=1e-6)  # the views are linked
    page.screenshot(path=str(shots / "diff-1-linked-views.png"))
    page.locator("#link-views").uncheck()
    page.mouse.click(left + width * 0.2, box["y"] + 40)  # the view takes the keys again
    page.keyboard.press("w")
    assert _view(second) != pytest.approx(_view(first), abs=1e-6)
    page.locator("details:has(#diff) summary, #diff details > summary").first.click()
    page.locator('button.filter[data-status="removed"]').click()
    shown = page.locator("#diff tbody tr:visible").count()
    assert shown == int(page.locator('button.filter[data-status="removed"]').inner_text().split("(")[1].rstrip(")"))
    page.screenshot(path=str(shots / "diff-2-removed.png"))
    assert errors == []


@pytest.mark.skipif(os.environ.get("REPORT_SKIP_BIG") == "1", reason="REPORT_SKIP_BIG=1")
def test_report_of_2m_events_draws_within_2_s(tmp_path, browser, shots):
    sys.path.insert(0, str(ROOT / "tools"))
    from benchmark import kineto_like

    trace = tmp_path / "big.json.gz"
    kineto_like(2_000_000, trace)
    t0 = time.perf_counter()
    path = _report(tmp_path, trace)
    built = time.perf_counter() - t0
    size_mb = path.stat().st_size / 1e6
    print(f"2M-event trace: report written in {built:.1f} s, {size_mb:.1f} MB")
    assert size_mb < 8
    page, errors = _open(browser, path)
    drawn_ms = float(page.evaluate("document.body.dataset.drawnAt"))
    print(f"first draw {drawn_ms:.0f} ms after the page began to load")
    assert drawn_ms < 2000
    root = page.locator(".gtl-explore")
    root.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "big-1-whole.png"))
    page.wait_for_function("() => document.body.dataset.decoded0 === '1'", timeout=60_000)
    _search_and_pin(page, root, "op17", "op17", timeout=60_000)
    page.screenshot(path=str(shots / "big-2-search.png"))
    assert errors == []


def _search_and_pin(page, root, query: str, pinned: str, timeout: int) -> None:
    """Search ``query`` in the report's explorer, wait for its count, press Enter and wait until the pinned card
    holds ``pinned``."""
    search = root.locator(".gtl-search")
    search.fill(query)
    page.wait_for_function("() => /\\/ [\\d,]+/.test(document.querySelector('.gtl-count').innerText)", timeout=timeout)
    search.press("Enter")
    page.wait_for_function("(text) => document.querySelector('.gtl-pinned').innerText.includes(text)", arg=pinned,
                           timeout=timeout)


def test_report_search_stops_a_catastrophic_pattern(tmp_path, browser, shots):
    # a /regex/ that backtracks for hours on a long name (^(a|a)*$ on 3,000 a's and a b) is matched in a worker the
    # page stops at its time limit, saying so in one line; the tab stays responsive and a plain search still works
    sys.path.insert(0, str(ROOT / "tests"))
    from synth import host_bound_loop, write_json

    events = host_bound_loop()
    long_name = "a" * 3000 + "b"
    events[2].name = long_name  # the first kernel
    trace = write_json(events, tmp_path / "long_name.json")
    path = _report(tmp_path, trace)
    page, errors = _open(browser, path)
    root = page.locator(".gtl-explore")
    root.scroll_into_view_if_needed()
    search = root.locator(".gtl-search")
    t0 = time.monotonic()
    search.fill("/^(a|a)*$/")
    page.wait_for_function("() => /did not finish within/.test(document.querySelector('.gtl-count').innerText)",
                           timeout=20_000)
    assert time.monotonic() - t0 < 10
    assert page.evaluate("() => 1 + 1") == 2  # the page's thread answers: not frozen
    page.screenshot(path=str(shots / "search-catastrophic-pattern-stopped.png"))
    line = root.locator(".gtl-count").inner_text()
    assert "\n" not in line and "stopped" in line
    # a sound pattern and a plain text search answer after it (a fresh worker)
    kernel = next(e.name for e in events if e.kind == "kernel" and e.name != long_name)
    n = sum(e.name == kernel for e in events)
    search.fill("/^" + re.escape(kernel) + "$/")
    page.wait_for_function(f"() => document.querySelector('.gtl-count').innerText.endsWith('/ {n}')", timeout=20_000)
    search.fill(kernel)
    page.wait_for_function(f"() => document.querySelector('.gtl-count').innerText.endsWith('/ {n}')", timeout=20_000)
    search.fill("/a(/")
    page.wait_for_function("() => /not a regular expression/.test(document.querySelector('.gtl-count').innerText)",
                           timeout=20_000)
    page.screenshot(path=str(shots / "search-after-stopped-pattern.png"))
    assert errors == []


def test_report_of_names_that_are_html_draws_and_runs_none_of_them(tmp_path, browser, shots):
    sys.path.insert(0, str(ROOT / "tests"))
    from synth import host_bound_loop, write_json
    from test_report import HOSTILE_NAMES

    events = host_bound_loop(steps=6)
    for e, name in zip([e for e in events if e.kind == "kernel"], HOSTILE_NAMES):
        e.name = name
    path = _report(tmp_path, write_json(events, tmp_path / "<img src=x onerror=window.__pwned=3>.json"))
    page, errors = _open(browser, path)  # drawn: '<!--<script>' in a name stopped the page's code from running
    root = page.locator(".gtl-explore")
    root.scroll_into_view_if_needed()
    _search_and_pin(page, root, "script", "<!--<script>", timeout=20_000)
    page.screenshot(path=str(shots / "html-names-pinned.png"))
    assert page.evaluate("() => window.__pwned") is None
    assert page.evaluate("() => document.querySelectorAll('img, [onerror], [onload]').length") == 0
    assert errors == []


def test_report_search_enter_at_once_pins_the_first_match_and_no_match_unpins(tmp_path, browser, shots):
    """Enter pressed straight after typing (before the search's 200 ms debounce sends the query) goes to the first
    match once the answer comes; a later search that finds nothing takes down the card its match pinned, and one a
    click pinned stays."""
    sys.path.insert(0, str(ROOT / "tests"))
    from synth import host_bound_loop, write_json

    path = _report(tmp_path, write_json(host_bound_loop(steps=6), tmp_path / "loop.json"))
    page, errors = _open(browser, path)
    root = page.locator(".gtl-explore")
    root.scroll_into_view_if_needed()
    search = root.locator(".gtl-search")
    search.fill("gemm")
    search.press("Enter")  # no wait for the count: the query is not even sent yet
    page.wait_for_function("() => document.querySelector('.gtl-pinned').innerText.includes('gemm')", timeout=20_000)
    start_ms = float(root.get_attribute("data-pinned-ms").split(",")[0])
    assert start_ms == pytest.approx(0.010, abs=1e-6)  # step 0's kernel: the first of the six in the whole view
    assert "1 / 6" in root.locator(".gtl-count").inner_text()
    search.fill("no_such_event_anywhere")
    page.wait_for_function("() => document.querySelector('.gtl-count').innerText === 'no match'", timeout=20_000)
    page.wait_for_function("() => document.querySelector('.gtl-pinned').style.display === 'none'", timeout=5_000)
    assert root.get_attribute("data-pinned-ms") == ""
    page.screenshot(path=str(shots / "search-no-match-unpinned.png"))
    # a pin the user made by a click is theirs: a search for nothing leaves it
    search.fill("gemm")
    search.press("Enter")
    page.wait_for_function("() => document.querySelector('.gtl-pinned').innerText.includes('gemm')", timeout=20_000)
    page.wait_for_function("() => document.querySelector('.gtl-explore').dataset.binsView === "
                           "document.querySelector('.gtl-explore').dataset.view", timeout=20_000)
    trace = m.stepped(helpers.load(tmp_path / "loop.json"))
    gpu = next(i for i, ln in enumerate(Lanes(trace, max_lanes=64).lanes) if ln.kind == "gpu")
    box = root.locator(".gtl-canvas").bounding_box()
    left, width = box["x"] + float(root.get_attribute("data-plot-left")), float(root.get_attribute("data-plot-width"))
    ps, pe = (float(v) for v in root.get_attribute("data-pinned-ms").split(","))
    view = _view(root)
    page.mouse.click(left + ((ps + pe) / 2 - view[0]) / (view[1] - view[0]) * width, _lane_y(root, gpu))
    page.wait_for_timeout(300)  # the click's pin answered
    assert "gemm" in root.locator(".gtl-pinned").inner_text()
    search.fill("no_such_event_anywhere")
    page.wait_for_function("() => document.querySelector('.gtl-count').innerText === 'no match'", timeout=20_000)
    page.wait_for_timeout(300)
    assert root.locator(".gtl-pinned").is_visible() and "gemm" in root.locator(".gtl-pinned").inner_text()
    assert errors == [], errors
