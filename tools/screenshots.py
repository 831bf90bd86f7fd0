"""Open each solution notebook in JupyterLab in headless Chromium, Run All, and screenshot every figure.

    python tools/screenshots.py                       # all solutions, into screenshots/
    python tools/screenshots.py --out /tmp/shots 01 05

Needs Debian's chromium (``apt-get install chromium``) and Playwright for Python (``pip install
playwright``; no browser download: Chromium is launched from ``--chromium``). The notebooks are
copied into a temporary folder first, so the committed ones never get outputs. For each figure the
script saves a PNG and records its width against the output area's; it exits 1 if any figure
is wider than the output area (so the browser would scale it down) (``tests/test_plots.py`` checks the same from the saved PNGs, without a
browser, in CI) or if a notebook shows an error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(folder: Path, port: int, token: str) -> subprocess.Popen:
    # JupyterLab 4 keeps only the cells in view in the page ("windowing"); the script must see every
    # output, so a private settings folder turns windowing off (the user's own settings are not touched).
    settings = folder / ".lab-settings"
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True, exist_ok=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(folder / ".lab-workspaces"))
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", f"--IdentityProvider.token={token}",
           "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={folder}", "--allow-root"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    for _ in range(120):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("JupyterLab did not start within 60 s")


def run_notebook(page, url: str, name: str, out: Path, timeout_s: float) -> dict:
    page.goto(url)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000, state="attached")
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
    time.sleep(3)  # the kernel reports idle a moment before it takes requests
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    deadline = time.time() + timeout_s
    while time.time() < deadline and not any(p.strip("[]: ") for p in page.locator(".jp-InputPrompt").all_inner_texts()):
        time.sleep(0.5)  # until the first cell has been taken up
    while time.time() < deadline:  # a cell still queued or running shows [*]
        prompts = page.locator(".jp-InputPrompt").all_inner_texts()
        if not any("*" in p for p in prompts):
            break
        time.sleep(1)
    notebook_width = page.locator(".jp-OutputArea-output").first.evaluate("n => n.clientWidth") \
        if page.locator(".jp-OutputArea-output").count() else 0
    figures = []
    for i, img in enumerate(page.locator(".jp-OutputArea-output img").all()):
        img.scroll_into_view_if_needed()
        box = img.bounding_box() or {"width": 0}
        natural = img.evaluate("n => n.naturalWidth")
        path = out / f"{Path(name).stem}__fig{i:02d}.png"
        img.screenshot(path=str(path))
        figures.append({"file": path.name, "shown_px": round(box["width"]), "natural_px": natural})
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count()
    shown_errors = [t for t in page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
                    .all_inner_texts() if not t.startswith(("[W", "[I"))]  # error outputs render as stderr text
    tracebacks = len(shown_errors)
    page.screenshot(path=str(out / f"{Path(name).stem}__end.png"))
    return {"notebook": name, "output_px": notebook_width, "figures": figures, "stderr_outputs": errors,
            "errors": tracebacks, "error_texts": [t.strip()[:300] for t in shown_errors]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", nargs="*", help="notebook name prefixes (default: every solution)")
    parser.add_argument("--out", default="screenshots", help="folder for the PNGs and report.json (created)")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per notebook")
    parser.add_argument("--folder", default="solutions", choices=("solutions", "labs"),
                        help="labs: the learner's notebooks as shipped (each must show one-line errors only)")
    args = parser.parse_args(argv)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("error: Playwright for Python is not installed: pip install playwright (no browser download needed)", file=sys.stderr)
        return 2
    if not Path(args.chromium).exists():
        print(f"error: {args.chromium}: no Chromium there; apt-get install chromium, or pass --chromium", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    notebooks = [p for p in sorted((ROOT / args.folder).glob("*.ipynb")) if not args.only or p.name.startswith(tuple(args.only))]
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for nb in notebooks:
            shutil.copy(nb, work / nb.name)
        port, token = free_port(), "screenshots"
        lab = start_lab(work, port, token)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=args.chromium, args=CHROMIUM_FLAGS)
                for nb in notebooks:
                    # A 1440-px-wide window, a common laptop screen: JupyterLab's output area is then
                    # about 1000 px wide, and a figure wider than it would be scaled down.
                    page = browser.new_page(viewport={"width": 1440, "height": 900})
                    url = f"http://127.0.0.1:{port}/lab/tree/{nb.name}?token={token}"
                    result = run_notebook(page, url, nb.name, out, args.timeout)
                    report.append(result)
                    wide = [f for f in result["figures"] if f["natural_px"] > result["output_px"]]
                    print(f"{nb.name}: {len(result['figures'])} figures, output area {result['output_px']} px, "
                          f"{len(wide)} wider than it, {result['errors']} error outputs")
                    page.close()
                browser.close()
        finally:
            lab.terminate()
            lab.wait(timeout=30)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    too_wide = [(r["notebook"], f["file"]) for r in report for f in r["figures"] if f["natural_px"] > r["output_px"]]
    if args.folder == "labs":  # unsolved: errors are expected, each one friendly line without a traceback
        failed = [r["notebook"] for r in report if not r["errors"] or any(
            "\n" in t or "Traceback" in t or "NameError" in t for t in r["error_texts"])]
    else:
        failed = [r["notebook"] for r in report if r["errors"]]
    if too_wide:
        print(f"figures wider than the notebook: {too_wide}", file=sys.stderr)
    if failed:
        print(f"notebooks showing errors: {failed}", file=sys.stderr)
    return 1 if too_wide or failed else 0


if __name__ == "__main__":
    sys.exit(main())
