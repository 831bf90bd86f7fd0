"""Both trace formats agree: the profiler trace and the nsys export of one loop give the same top finding,
synthetic and recorded (every pair in data/manifest.json, the blind-triage loops)."""

import json

from conftest import DATA
from synth import host_bound_loop, idle_capture, two_step_loop, write_json, write_sqlite

import helpers


def _both(events, tmp_path, name="t"):
    return (helpers.load(write_json(events, tmp_path / f"{name}.json")),
            helpers.load(write_sqlite(events, tmp_path / f"{name}.sqlite")))


def test_both_formats_give_the_same_top_finding(tmp_path):
    for i, events in enumerate((host_bound_loop(), host_bound_loop(gpu_us=2000, host_us=20), idle_capture(), two_step_loop())):
        a, b = _both(events, tmp_path, f"t{i}")
        pa, pb = [f.pattern for f in helpers.diagnose(a)], [f.pattern for f in helpers.diagnose(b)]
        assert pa[:1] == pb[:1], (pa, pb)


def _manifest_pairs():
    doc = json.loads((DATA / "manifest.json").read_text())
    runs: dict[str, dict[str, str]] = {}
    for e in doc["traces"] + doc.get("recordings", []):  # the H200 pairs are listed under "recordings"
        if "run" in e:
            runs.setdefault(e["run"], {})[e.get("format", "kineto")] = e["file"]
    return runs


#: Pairs whose two formats do not agree. Agreeing now: data_stall:fixed and sync_stall:fixed since the nsys
#: exports' steady state is found (they have no step ranges, so start-up was judged with the loop);
#: data_stall:fixed and launch_overhead:compile since launch-dense NVTX ranges count as dispatching in
#: traces without framework ops (the compiled step's host time between launches read as host_bound);
#: launch_overhead:graphs and triage t3 since gpu_bound's bar counts a CUDA-Graph replay's span in both formats
#: (the busy figure counts its kernels only: the graph-level nsys export keeps no kernels, only the replay).
#: mystery:fixed since it was recorded again (2026-12-03): its first twin's loader workers did not keep up
#: (data_stall 36%) while the exports of the session before ran beside the recording; exports now run after
#: the last recording. The test fails if any pair disagrees.
#: The DDP job with 1 MB buckets, the fastest of lab 04's variants: under the profiler its all-reduces still leave 9.8%
#: of the step exposed and overlapping them would save 8.5% (above the 5% noise floor: communication, a small
#: finding); under nsys, with less overhead on each rank's one core, 3.4% is exposed and nothing stands out.
KNOWN_DISAGREEMENTS: set[str] = {"communication__tiny_buckets__h200cpu@2026-12-03"}


def test_recorded_pairs_agree():
    """Every profiler/nsys pair of one command in data/ gives the same top finding, except the known ones."""
    pairs = {run: sides for run, sides in _manifest_pairs().items() if len(sides) >= 2}
    assert len(pairs) >= 20, f"only {len(pairs)} recorded pairs in data/manifest.json"
    disagree = set()
    for run, sides in pairs.items():
        tops = {fmt: [f.pattern for f in helpers.diagnose(helpers.load(DATA / f))][:1] for fmt, f in sides.items()}
        if len({tuple(t) for t in tops.values()}) != 1:
            disagree.add(run)
    assert disagree == KNOWN_DISAGREEMENTS, (sorted(disagree - KNOWN_DISAGREEMENTS), sorted(KNOWN_DISAGREEMENTS - disagree))


def top(trace):
    return [f.pattern for f in helpers.diagnose(trace)][:1]


def test_triage_recordings_top_finding_is_the_truth_in_both_formats():
    """The blind-triage loops (docs/instructors/triage_key.json): the costliest pattern the check asks for comes first,
    from the profiler trace and from the nsys export (steps found) alike; t3's CUDA-Graph replay is GPU-bound in both.
    That pattern is the recorded truth's first, except where the key's note says what the trace shows instead
    (tests/test_triage.py holds the key to that)."""
    from conftest import TRIAGE_KEY

    doc = json.loads((DATA / "manifest.json").read_text())
    entries = [e for e in doc.get("recordings", []) if e["workload"] == "triage"]
    entries = entries or [e for e in doc["traces"] if e["workload"] == "triage"]
    assert len(entries) >= 10
    for e in entries:
        got = top(helpers.load(DATA / e["file"]))
        truth = TRIAGE_KEY[e["variant"]]["patterns"]
        assert got == truth[:1], (e["file"], got, truth)


def test_a_what_if_of_seconds_is_said_in_seconds():
    """A published nsys export of one 50 s kernel read 'what if: step 5.02e+04 ms -> about 32.9 ms'."""
    from types import SimpleNamespace

    from helpers import render
    f = SimpleNamespace(step_ms=50_173.9, step_ms_if_fixed=32.9, if_fixed="the GPU's kernels took no time")
    assert render.what_if_text(f).startswith("what if: step 50.2 s -> about 32.9 ms if")
    f = SimpleNamespace(step_ms=334.4, step_ms_if_fixed=999.7, if_fixed="x")
    assert render.what_if_text(f).startswith("what if: step 334 ms -> about 1 s if")


def test_a_busy_gpu_summary_ends_no_line_on_an_empty_list():
    """A GPU busy through its steps read 'GPU idle 0% of step time; by what the host was doing meanwhile (...): '
    with nothing after the colon (a published A100 GEMM loop)."""
    from helpers import render
    s = {"source": "t", "format": "kineto", "events": 1, "ranks": [0], "steps": 2, "steps_inferred": None,
         "device_names": ["GPU"], "has_gpu": True, "step_time_ms": 15.7, "gpu_utilization": 1.0,
         "idle_share_by_cause": {"sync": 0.0, "launch": 0.001}, "kernels": {"per_step": 1, "median_us": 15720.2,
                                                                          "share_under_10us": 0.0},
         "copies": [], "sync": {"sync_points_per_step": 0.0, "blocked_us_per_step": 0.0},
         "data_wait_us_per_step": 0.0, "data_wait_share": 0.0}
    lines = render.summary_text(s).splitlines()
    idle = [x for x in lines if "GPU idle" in x]
    assert idle == ["  GPU idle 0% of step time"], lines
