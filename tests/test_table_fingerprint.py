"""The events table the reader builds, held to fingerprints taken before the reader's speed work: every column's
name, dtype and values (a categorical's categories and codes), the steps table and the metadata, for the course's
recorded traces (data/), the corpus' traces (tests/corpus/) and the tests' synthetic loops (Kineto JSON and
SQLite). A change to how a trace is read that changes any of them fails here; a change meant to change the table
regenerates the fingerprints (``python tests/test_table_fingerprint.py --write``) and says why in its commit."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from synth import host_bound_loop, idle_capture, two_step_loop, write_json, write_sqlite  # noqa: E402

import helpers  # noqa: E402
from helpers.readers import kineto  # noqa: E402

FINGERPRINTS = ROOT / "tests" / "table_fingerprints.json"


def recorded() -> list[Path]:
    """The recorded traces: the course's Kineto JSON (one process and, past the size, two), its Nsight exports,
    the corpus."""
    data = ROOT / "data"
    return sorted([*data.glob("*.json.gz"), *(data / "bench").glob("*.json.gz"), *(data / "nsight").glob("*.sqlite*"),
                   *(ROOT / "tests" / "corpus").glob("*.json.gz")])


def synthetic(folder: Path) -> dict[str, Path]:
    """The tests' synthetic loops, written as Kineto JSON (plain and gzipped) and as an Nsight SQLite export."""
    return {
        "two_step_loop.json": write_json(two_step_loop(), folder / "a.json"),
        "host_bound_loop.json.gz": write_json(host_bound_loop(steps=6, sync=True), folder / "b.json.gz", gz=True),
        "idle_capture.json": write_json(idle_capture(seconds=5, kernels=30), folder / "c.json"),
        "two_step_loop.sqlite": write_sqlite(two_step_loop(), folder / "d.sqlite"),
        "host_bound_loop.sqlite": write_sqlite(host_bound_loop(steps=6), folder / "e.sqlite"),
    }


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()[:24]


def _column(values: pd.Series) -> str:
    if isinstance(values.dtype, pd.CategoricalDtype):
        cats = values.cat.categories
        return (f"category[{cats.dtype}] " +
                _digest("\x00".join(map(str, cats)).encode(), np.ascontiguousarray(values.cat.codes.to_numpy()).tobytes()))
    arr = values.to_numpy()
    if arr.dtype == object:
        return f"object {_digest(repr(arr.tolist()).encode())}"
    return f"{arr.dtype} {_digest(np.ascontiguousarray(arr).tobytes())}"


def fingerprint(path: Path) -> dict:
    """What the reader makes of ``path``: every column of the events and steps tables, and the metadata."""
    trace = helpers.load(path)
    # "capture" is this process's provenance stamp (helpers.stamps: a file made here by an earlier test), not the reader's
    meta = {k: v for k, v in trace.metadata.items() if k not in ("steps", "capture")}
    return {
        "rows": len(trace.events),
        "events": {c: _column(trace.events[c]) for c in trace.events.columns},
        "index": _digest(np.asarray(trace.events.index).tobytes()),
        "steps": {c: _column(trace.steps[c]) for c in trace.steps.columns},
        "metadata": _digest(json.dumps(meta, sort_keys=True, default=repr).encode()),
    }


def all_fingerprints(folder: Path) -> dict:
    out = {p.relative_to(ROOT).as_posix(): fingerprint(p) for p in recorded()}
    out.update({name: fingerprint(p) for name, p in synthetic(folder).items()})
    return out


@pytest.fixture
def one_process(monkeypatch):
    monkeypatch.setattr(kineto, "core_to_spare", lambda: False)


@pytest.fixture
def two_processes(monkeypatch):
    """Every Kineto document read with the helper process, in segments small enough that each trace has several."""
    monkeypatch.setattr(kineto, "PARALLEL_FROM_BYTES", 0)
    monkeypatch.setattr(kineto, "core_to_spare", lambda: True)
    monkeypatch.setattr(kineto, "_segment_size", lambda size_hint: 256 << 10)


def _compare(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want), "the traces fingerprinted changed: regenerate with --write"
    for name in want:
        assert got[name] == want[name], f"{name}: the table read differs from the one recorded before"


def test_the_table_is_the_one_read_before(tmp_path, one_process):
    _compare(all_fingerprints(tmp_path), json.loads(FINGERPRINTS.read_text()))


@pytest.mark.skipif(not kineto.parallel_decoding(), reason="parallel decoding needs Linux and two cores")
def test_the_table_read_by_two_processes_is_the_one_read_before(tmp_path, two_processes):
    want = json.loads(FINGERPRINTS.read_text())
    big = ["data/bench/launch_overhead_long__h200.json.gz", "data/launch_overhead__broken__h200.json.gz"]
    got = {name: fingerprint(ROOT / name) for name in big}
    _compare(got, {name: want[name] for name in big})


if __name__ == "__main__":  # python tests/test_table_fingerprint.py --write
    import tempfile

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_table_fingerprint.py --write")
    kineto.core_to_spare = lambda: False
    with tempfile.TemporaryDirectory() as tmp:
        FINGERPRINTS.write_text(json.dumps(all_fingerprints(Path(tmp)), indent=1, sort_keys=True) + "\n")
