import functools
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


def own_capture(trace, by: str = "capture", of: tuple[str, ...] | None = None, mine: bool = True, like: dict | None = None):
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
    like = stamps.stamp_of(trace) if like is None else like  # a capture made here: its loop held and was fed the same
    how.update({k: like[k] for k in ("holds", "loaders") if k in (like or {})})
    return stamps.stamp(trace, how)


def as_learners(trace):
    """A copy of ``trace`` stamped as a capture of a step of the learner's own (a stand-in for a learner who
    wrote their step so that it still does what ``trace``'s loop did): what the checks judge past provenance."""
    from dataclasses import replace

    from helpers import stamps

    made = trace.metadata.get("capture")
    by = made.get("how", {}).get("by", "capture") if isinstance(made, dict) else "capture"  # the tool it stands in for
    copy = replace(trace, events=trace.events.copy(), metadata={k: v for k, v in trace.metadata.items() if k != "capture"},
                   _memo={})
    return own_capture(copy, by=by, like=stamps.stamp_of(trace))



@pytest.fixture(autouse=True)
def _untied(request, monkeypatch):
    """A fix's capture must be of the step the check judges (helpers.checks.provenance's tie: the capture's entry among
    the judged function's step codes). The tests' stand-in captures (own_capture, as_learners) are of no step, so the tie
    is lifted in every test but those marked ``@pytest.mark.tied``, which hold it, from no function judged yet."""
    from helpers.checks import provenance

    monkeypatch.setattr(provenance, "JUDGED", {})
    monkeypatch.setattr(provenance, "JUDGED_NAMES", {})
    if not request.node.get_closest_marker("tied"):
        monkeypatch.setattr(provenance, "_tie_problem", lambda *a, **k: None)
    yield


@pytest.fixture(autouse=True)
def _seals_open(request):
    """The tests read the triage traces' diagnosis as their oracle: seals (helpers.seal) are open in every test but
    those marked ``@pytest.mark.sealed``, which hold the seal itself, starting from no lab seal and none opened."""
    from helpers import seal

    seal._reset()
    if request.node.get_closest_marker("sealed"):
        yield
        seal._reset()
        return
    token = seal._IN_CHECK.set(True)
    yield
    seal._IN_CHECK.reset(token)
    seal._reset()


def assert_tables_equal(a, b) -> None:
    """``pd.testing.assert_frame_equal(a, b)`` for events tables, its categorical columns compared by categories (in
    order) and codes: the same verdict, without turning each category column into Python strings (2.3 s of a
    100,000-event table's 2.4 s)."""
    import numpy as np
    import pandas as pd

    assert list(a.columns) == list(b.columns), (list(a.columns), list(b.columns))
    pd.testing.assert_index_equal(a.index, b.index)
    for col in a.columns:
        x, y = a[col], b[col]
        if isinstance(x.dtype, pd.CategoricalDtype) and isinstance(y.dtype, pd.CategoricalDtype):
            assert x.dtype.ordered == y.dtype.ordered, col
            pd.testing.assert_index_equal(x.cat.categories, y.cat.categories, obj=f"{col}'s categories")
            assert np.array_equal(x.cat.codes.to_numpy(), y.cat.codes.to_numpy()), f"{col}: the values differ"
        else:
            pd.testing.assert_series_equal(x, y, obj=col)


@functools.cache
def shipped_notebook(relpath: str) -> str:
    """A notebook's text as the course ships it, never the learner's working copy: tests about the shipped labs read
    this, so a learner's work saved in labs/ never fails the README's ``pytest``. For ``labs/`` it is the copy
    generated from ``solutions/`` (tools/make_labs.py's ``learner_notebook``, what ``make_labs --check`` holds the
    committed labs to); any other notebook is read from its file (the solutions are the maintainers')."""
    if not relpath.startswith("labs/"):
        return (ROOT / relpath).read_text(encoding="utf-8")
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    from make_labs import learner_notebook, render

    solution = ROOT / "solutions" / relpath.removeprefix("labs/")
    return render(learner_notebook(json.loads(solution.read_text(encoding="utf-8"))))


def shipped_labs(folder: Path) -> Path:
    """Every lab as shipped (:func:`shipped_notebook`), written into ``folder / "labs"``; returns that folder."""
    labs = folder / "labs"
    labs.mkdir(parents=True, exist_ok=True)
    for sol in sorted((ROOT / "solutions").glob("*.ipynb")):
        (labs / sol.name).write_text(shipped_notebook(f"labs/{sol.name}"), encoding="utf-8")
    return labs


def committed(relpath: str) -> str | None:
    """``relpath``'s text at the checkout's HEAD (``git show``), or None where the folder is no git checkout."""
    import subprocess

    try:
        out = subprocess.run(["git", "show", f"HEAD:{relpath}"], cwd=ROOT, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.decode("utf-8") if out.returncode == 0 else None


def committed_names(folder: str) -> list[str] | None:
    """The names of the files git HEAD holds directly in ``folder``, or None where the folder is no git checkout."""
    import subprocess

    try:
        out = subprocess.run(["git", "ls-tree", "--name-only", f"HEAD:{folder}"], cwd=ROOT, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.decode("utf-8").split() if out.returncode == 0 else None
