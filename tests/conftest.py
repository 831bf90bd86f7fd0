import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
sys.path.insert(0, str(Path(__file__).parent))

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Run every test in its own folder, so runs/ and .selfcheck.json never land in the repo."""
    monkeypatch.chdir(tmp_path)
