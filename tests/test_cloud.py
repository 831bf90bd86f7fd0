"""The way in from a free cloud notebook: each lab's setup cell clones the course, installs only what the image
lacks (never its torch), and the doctor says what the machine gives. Run here on a local clone, with a copy of
the course that the cell must not find installed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, shipped_notebook

sys.path.insert(0, str(ROOT / "tools"))
import cloud_cell  # noqa: E402
import cloud_setup  # noqa: E402

PINNED = cloud_setup.pins(ROOT / "requirements.txt")


def test_every_lab_starts_with_the_setup_cell():
    for folder in ("solutions", "labs"):
        for path in sorted((ROOT / "solutions").glob("*.ipynb")):
            cells = json.loads(shipped_notebook(f"{folder}/{path.name}"))["cells"]  # labs: as shipped, not a learner's copy
            assert cells[1]["id"] == cloud_cell.CELL_ID and "".join(cells[1]["source"]) == cloud_cell.SOURCE, path


def test_the_plan_keeps_what_the_image_has_above_all_its_torch():
    colab = {"torch": "2.9.0+cu126", "numpy": "2.0.2", "pandas": "2.2.2", "matplotlib": "3.10.0", "ipykernel": "6.17.1",
             "nbformat": "5.10.4", "nbclient": "0.10.2"}
    plan = cloud_setup.plan(PINNED, colab, gpu=True)
    assert ("torch", "2.9.0+cu126") in plan["keep"] and plan["torch_index"] is None
    assert plan["install"] == [f"{n}=={PINNED[n]}" for n in ("nvtx", "orjson", "msgspec", "anywidget")]
    assert not any(a.split("==")[0] in ("jupyterlab", "pytest", "ruff", "hypothesis", "nbval", "dask") for a in plan["install"])
    # no torch at all: the pinned build, from PyTorch's CPU index where no NVIDIA driver is present
    bare = cloud_setup.plan(PINNED, {}, gpu=False)
    assert f"torch=={PINNED['torch']}" in bare["install"] and bare["torch_index"] == cloud_setup.CPU_INDEX
    assert cloud_setup.plan(PINNED, {}, gpu=True)["torch_index"] is None


def test_a_cell_without_the_url_says_what_to_set(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "helpers" else real(name, *a))
    with pytest.raises(SystemExit, match="set COURSE_URL in this cell"):
        exec(compile(cloud_cell.SOURCE, "setup-cell", "exec"), {})


def test_the_setup_cell_clones_installs_nothing_it_has_and_the_doctor_reports(tmp_path, monkeypatch, capfd):
    """A cloud notebook opened on its own: the cell clones the course (here from this checkout), runs the setup,
    which keeps this machine's torch, and the doctor names the track and the notebook service."""
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: nothing to clone from")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLAB_RELEASE_TAG", "test")  # as Colab's kernels have it
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "helpers" else real(name, *a))
    monkeypatch.setattr(sys, "path", list(sys.path))
    source = cloud_cell.SOURCE.replace(f'COURSE_URL = "{cloud_cell.COURSE_URL}"', f'COURSE_URL = "file://{ROOT}"')
    exec(compile(source, "setup-cell", "exec"), {})
    out = capfd.readouterr().out
    home = tmp_path / "gpu-timeline-labs"
    assert (home / "labs").is_dir() and os.getcwd() == str(home / "labs") and sys.path[0] == str(home)
    import torch

    assert f"keeps: torch {torch.__version__}" in out and "installs: nothing" in out
    assert "CPU track" in out or "GPU track" in out
    assert "Google Colab: its notebook service runs the labs" in out and "ready" in out.splitlines()[-1]


@pytest.mark.parametrize("cc, status, says", [((7, 5), "note", "fp16 with a GradScaler"), ((9, 0), "ok", "step is bf16"),
                                              ((6, 1), "note", "cannot show a precision speed-up")])
def test_doctor_reports_the_device_and_the_notebook_service(monkeypatch, cc, status, says):
    """What a Colab T4 (or another GPU) gives the labs, as the doctor words it: here torch's CUDA calls are stood in for."""
    from types import SimpleNamespace

    import torch

    from helpers import doctor

    props = SimpleNamespace(name="NVIDIA T4", major=cc[0], minor=cc[1], total_memory=15 * 2**30, multi_processor_count=40)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: props.name)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: props)
    monkeypatch.setenv("COLAB_RELEASE_TAG", "test")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jupyterlab" else real(name, *a))
    found = {f.name: f for f in doctor.examine(ROOT / "labs")}
    assert found["track"].detail.startswith("GPU track: NVIDIA T4")
    dev = found["device"]
    assert dev.status == status and says in dev.detail and f"compute capability {cc[0]}.{cc[1]}" in dev.detail
    assert found["notebook"].detail.startswith("Google Colab") and found["packages"].status == "ok"  # no JupyterLab needed
    assert "root" not in found
    monkeypatch.delenv("COLAB_RELEASE_TAG")
    found = {f.name: f for f in doctor.examine(ROOT / "labs")}
    assert "notebook" not in found and found["packages"].status == "fail" and "jupyterlab" in found["packages"].detail
