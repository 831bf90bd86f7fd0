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


def own_capture(trace, by: str = "capture", of: tuple[str, ...] | None = None, mine: bool = True):
    """Stands in for helpers.capture (or communication.run) in this process: gives ``trace`` the stamp a trace
    made here carries, as if made of every course workload (``of``) by a step of the learner's own (``mine``).

    The package has no function that stamps a trace its tools did not write; the tests stamp their made-up
    traces with the process's secret themselves (helpers.load stamps only files this process's tools made,
    as it refuses a copied recording).
    """
    import secrets

    from helpers import stamps

    workloads = sorted(p.stem for p in (ROOT / "helpers" / "workloads").glob("*.py")
                       if not p.stem.startswith("_")) if of is None else sorted(of)
    how = {"by": by, "step": secrets.token_hex(8), "workloads": workloads, "learner": ["a test's step"] if mine else []}
    return stamps.stamp(trace, how)


def as_learners(trace):
    """A copy of ``trace`` stamped as a capture of a step of the learner's own (a stand-in for a learner who
    wrote their step so that it still does what ``trace``'s loop did): what the checks judge past provenance."""
    from dataclasses import replace

    made = trace.metadata.get("capture")
    by = made.get("how", {}).get("by", "capture") if isinstance(made, dict) else "capture"  # the tool it stands in for
    copy = replace(trace, events=trace.events.copy(), metadata={k: v for k, v in trace.metadata.items() if k != "capture"},
                   _memo={})
    return own_capture(copy, by=by)
