import json
import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
sys.path.insert(0, str(Path(__file__).parent))

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
#: Lab 07's answer key, as instructors keep it (outside the installed package; tests may know answers).
TRIAGE_KEY: dict[str, dict] = json.loads((ROOT / "docs" / "instructors" / "triage_key.json").read_text())["cases"]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Run every test in its own folder, so runs/ and .selfcheck.json never land in the repo."""
    monkeypatch.chdir(tmp_path)


def own_capture(trace):
    """Stands in for helpers.capture in this process: gives ``trace`` the token a capture made here carries.

    The package has no function that stamps a trace capture() did not write; the tests seal their made-up
    traces with the process's secret themselves (helpers.profiling._stamp refuses them, as it refuses a
    loaded file).
    """
    import hmac

    from helpers.profiling import _SECRET, events_digest

    digest = events_digest(trace)
    trace.metadata["capture"] = {"digest": digest, "token": hmac.new(_SECRET, digest.encode(), "sha256").hexdigest()}
    return trace
