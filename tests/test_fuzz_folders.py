"""A seeded fuzzer of folders of ranks: each case picks 1-4 rank files from a pool of odd but plausible ranks (no
events, CPU work only, an Nsight export beside JSON ones, a clock far from the others, a rank id in the file that is
text, negative, huge or a float, the same rank twice, a gzipped or UTF-16 rank, a cut-off gzip) and reads the
folder both ways, as one timeline (helpers.load + diagnose) and rank by rank (jobs.analyse_job). The promise: a
result or one TraceError line, the same verdict either way on whether the folder can be read."""

from __future__ import annotations

import gzip
import json
import random

from synth import host_bound_loop, kineto_doc, write_sqlite

import helpers
from helpers import TraceError
from helpers.jobs import analyse_job


def _doc(rank=None, shift: float = 0.0, dist: dict | None = None) -> dict:
    d = kineto_doc(host_bound_loop(), rank=rank, world=4)
    for e in d["traceEvents"]:
        if "ts" in e:
            e["ts"] += shift
    if dist is not None:
        d["distributedInfo"] = dist
    return d


POOL = {
    "good": lambda r: json.dumps(_doc(r)).encode(),
    "no_events": lambda r: b'{"traceEvents": []}',
    "cpu_only": lambda r: json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 1,
                                                       "dur": 2, "pid": 1, "tid": 1}]}).encode(),
    "clock_far": lambda r: json.dumps(_doc(r, shift=1e12)).encode(),
    "clock_negative": lambda r: json.dumps(_doc(r, shift=-1e9)).encode(),
    "rank_text": lambda r: json.dumps(_doc(None, dist={"rank": str(r), "world_size": 4})).encode(),
    "rank_negative": lambda r: json.dumps(_doc(None, dist={"rank": -1, "world_size": 4})).encode(),
    "rank_huge": lambda r: json.dumps(_doc(None, dist={"rank": 2**70, "world_size": 4})).encode(),
    "rank_float": lambda r: json.dumps(_doc(None, dist={"rank": r + 0.5, "world_size": 4})).encode(),
    "rank_zero": lambda r: json.dumps(_doc(0)).encode(),
    "gzipped": lambda r: gzip.compress(json.dumps(_doc(r)).encode()),
    "utf16": lambda r: json.dumps(_doc(r)).encode("utf-16"),
    "cut_gzip": lambda r: gzip.compress(json.dumps(_doc(r)).encode())[:-40],
    "sqlite": None,  # written by write_sqlite
}


def _verdict(call) -> str:
    try:
        call()
        return "read"
    except TraceError as exc:
        text = str(exc).strip()
        assert text and "\n" not in text and len(text) < 1000, text
        return "refused"


def test_a_seeded_sample_of_odd_folders(tmp_path):
    rng = random.Random(20261205)
    kinds = sorted(POOL)
    for case in range(24):
        folder = tmp_path / f"job{case}"
        folder.mkdir()
        picked = [rng.choice(kinds) for _ in range(rng.randint(1, 4))]
        for r, kind in enumerate(picked):
            name = f"rank{r}" + (".json.gz" if kind in ("gzipped", "cut_gzip") else ".sqlite" if kind == "sqlite" else ".json")
            if kind == "sqlite":
                write_sqlite(host_bound_loop(), folder / name)
            else:
                (folder / name).write_bytes(POOL[kind](r))
        whole = _verdict(lambda f=folder: helpers.diagnose(helpers.load(f)))
        by_rank = _verdict(lambda f=folder: analyse_job(f, workers=1))
        assert whole == by_rank, (picked, whole, by_rank)
        if "cut_gzip" in picked:  # a damaged file is refused either way
            assert whole == "refused", picked
