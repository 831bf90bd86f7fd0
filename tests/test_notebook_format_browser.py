"""The committed notebooks are in JupyterLab's save format: open each lab in JupyterLab (headless Chromium),
let its kernel start, save with Ctrl+S, and the file is byte-identical.

JupyterLab writes the kernel's language_info into the notebook when the kernel starts; the committed
notebooks carry what ipykernel reports, so nothing marks them changed. The one field that depends on the
machine is the Python version: on a Python other than the committed one, the saved file is compared with that
line replaced. Skipped with the reason where Chromium, JupyterLab or Playwright is missing (as in CI).
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import shipped_notebook

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (apt-get install chromium)")
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -r requirements-browser.txt)")
NAMES = ["labs/00_tools_and_first_profile.ipynb", "solutions/05_workflow_capstone.ipynb"]


def test_saved_unchanged_in_jupyterlab():
    sys.path.insert(0, str(ROOT / "tools"))
    from make_labs import PYTHON_VERSION

    tmp = Path(tempfile.mkdtemp(prefix="nbformat-browser-"))
    for name in NAMES:
        (tmp / name).parent.mkdir(exist_ok=True)
        (tmp / name).write_text(shipped_notebook(name), encoding="utf-8")  # as shipped, never a learner's saved lab
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "format-test-token"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_CONFIG_DIR": str(tmp / ".config"), "JUPYTER_RUNTIME_DIR": str(tmp / ".runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp / ".settings"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp / ".workspaces")}
    proc = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
                             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp}", "--LabApp.expose_app_in_browser=True",
                             *(["--allow-root"] if os.geteuid() == 0 else [])],
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
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                                                        "--disable-background-networking", "--disable-component-update", "--disable-sync"])
            page = browser.new_page()
            for name in NAMES:
                page.goto(f"http://127.0.0.1:{port}/lab/tree/{name}?token={token}")
                page.wait_for_function("() => window.jupyterapp && document.querySelector('.jp-Notebook .jp-Cell')", timeout=120_000)
                # until the kernel has answered kernel_info: JupyterLab writes its language_info then
                page.wait_for_function("""() => { const w = window.jupyterapp.shell.currentWidget;
                    const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
                    return k && k.info && w.sessionContext.session.kernel.connectionStatus === 'connected'; }""", timeout=120_000)
                page.wait_for_function("() => window.jupyterapp.shell.currentWidget.model.getMetadata('language_info').version",
                                       timeout=60_000)
                dirty = page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty")
                mtime = (tmp / name).stat().st_mtime_ns
                page.keyboard.press("Control+s")
                deadline = time.time() + 30
                while (tmp / name).stat().st_mtime_ns == mtime and time.time() < deadline:
                    time.sleep(0.2)
                saved = (tmp / name).read_text(encoding="utf-8")
                want = shipped_notebook(name)
                if platform.python_version() != PYTHON_VERSION:
                    want = want.replace(f'"version": "{PYTHON_VERSION}"', f'"version": "{platform.python_version()}"')
                else:
                    assert not dirty, f"{name}: JupyterLab marks it changed as soon as the kernel starts"
                assert saved == want, f"{name}: JupyterLab's save differs from the committed file"
            browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
