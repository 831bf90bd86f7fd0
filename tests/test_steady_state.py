"""The steady state of a trace without step markers: the period found in what repeats (host ranges, else
kernels, else ops), checked on recorded traces with their markers taken away and on nsys exports."""

import json

import numpy as np
import pytest
from conftest import DATA
from synth import Ev, write_json

import helpers
from helpers import metrics as m
from helpers import render
from helpers.course import recorded
from helpers.model import finish


def unmarked(trace, ranges_too=False):
    """The same recorded events without their ProfilerStep ranges (and, with ``ranges_too``, without
    any range), read back as a trace: what a capture without step markers looks like."""
    ev = trace.events
    drop = ev["name"].str.startswith("ProfilerStep#") & ev["kind"].isin(("annotation", "gpu_annotation"))
    if ranges_too:
        drop |= ev["kind"].isin(("annotation", "gpu_annotation"))
    md = {k: v for k, v in trace.metadata.items() if k != "steps"}
    t = finish(ev[~drop].reset_index(drop=True).copy(), trace.source, trace.format, md)
    assert t.steps.empty
    return t


def top(trace):
    return [f.pattern for f in helpers.diagnose(trace)][:1]


# --- period detection ---------------------------------------------------------------------------
def test_find_period_exact_with_prefix_and_noise():
    assert m.find_period(np.array([0, 1, 2, 3] * 5)) == {"period": 4, "start": 0, "repeats": 5, "match": 1.0}
    found = m.find_period(np.array([9, 8] + [0, 1, 2] * 6))  # a start-up prefix, then the loop
    assert (found["period"], found["start"], found["repeats"]) == (3, 2, 6)
    seq = np.tile(np.arange(10), 12)
    seq[57] = 99  # one kernel that differs once (an allocator memset, an algorithm switch)
    found = m.find_period(seq)
    assert found["period"] == 10 and found["repeats"] >= 11 and found["match"] > 0.95
    assert m.find_period(np.array([0, 0, 0, 0, 0]))["period"] == 1
    assert m.find_period(np.arange(50)) is None  # nothing repeats
    assert m.find_period(np.array([0, 1, 0, 1])) is None  # two repeats are not a loop (STEADY_MIN_REPEATS)


def test_find_period_prefers_the_step_over_a_repeated_layer():
    # 12 identical layers then an optimizer kernel, 6 steps: the layer repeats too (11 in 12 match), the step exactly.
    step = [1, 2, 3] * 12 + [7, 8]
    assert m.find_period(np.array(step * 6))["period"] == len(step)


def test_long_kernel_sequences_try_few_candidates():
    rng = np.random.default_rng(0)
    step = list(rng.integers(0, 40, 3000))  # 3000 kernels a step, names from a small set
    found = m.find_period(np.array(step * 5))
    assert found["period"] == 3000 and found["repeats"] == 5


# --- recorded traces with their step markers taken away ------------------------------------------
RANGED = [("data_stall", "broken", "h200"), ("data_stall", "fixed", "h200"), ("sync_stall", "broken", "h200"),
          ("sync_stall", "fixed", "h200"), ("host_bound", "broken", "h200"), ("host_bound", "fixed", "h200"),
          ("launch_overhead", "broken", "h200"), ("mystery", "broken", "h200"), ("h2d_copy", "broken", "h200"),
          ("h2d_copy", "fixed", "h200"), ("data_stall", "broken", "cpu"), ("mystery", "broken", "cpu")]


@pytest.mark.parametrize("key", RANGED, ids=lambda k: ":".join(k))
def test_steady_state_from_ranges_matches_the_marked_steps(key):
    stepped = recorded(*key)
    bare = unmarked(stepped)
    info = m.summary(bare)["steps_inferred"]
    assert info and info["source"] == "ranges", info
    assert top(bare) == top(stepped)
    # within 5%, or within the marked steps' own spread when they vary more than that
    d = stepped.steps["dur_us"]
    spread = float(d.std() / d.mean()) if len(d) > 1 else 0.0
    assert m.step_time_ms(m.stepped(bare)) == pytest.approx(m.step_time_ms(stepped), rel=max(0.05, spread))
    findings = helpers.diagnose(bare)
    assert all(f.evidence["steps_inferred"] == info for f in findings)  # every finding says where its steps came from


# Without any range the data waits are invisible, so only loops whose pattern needs no range name.
KERNEL_ONLY = [("sync_stall", "broken", "h200"), ("host_bound", "broken", "h200"), ("launch_overhead", "broken", "h200"),
               ("h2d_copy", "broken", "h200"), ("sync_stall", "fixed", "h200")]


@pytest.mark.parametrize("key", KERNEL_ONLY, ids=lambda k: ":".join(k))
def test_steady_state_from_kernels_when_no_range_is_left(key):
    stepped = recorded(*key)
    bare = unmarked(stepped, ranges_too=True)
    info = m.stepped(bare).metadata["steps_inferred"]
    assert info["source"] == "kernels", info
    assert top(bare) == top(stepped)
    assert m.step_time_ms(m.stepped(bare)) == pytest.approx(m.step_time_ms(stepped), rel=0.20)


def _nsys_exports():
    doc = json.loads((DATA / "manifest.json").read_text())
    return sorted(e["file"] for e in doc.get("recordings", []) if e.get("format") == "nsys-sqlite" and e["file"].startswith("nsys/"))


def test_nsys_exports_recorded_under_nsys_range_get_their_steps():
    """Exports recorded before the workloads marked steps (2026-12-02) have no step ranges; each repeats its
    NVTX ranges once per step. Those recorded since carry an NVTX "step N" range per step."""
    files = _nsys_exports()
    assert len(files) >= 20
    marked = 0
    for f in files:
        t = helpers.load(DATA / f)
        if not t.steps.empty:  # recorded with helpers.workloads.common's NVTX step ranges
            marked += 1
            assert len(t.steps) >= 2 and m.summary(t).get("steps_inferred") is None, f
            continue
        info = m.summary(t)["steps_inferred"]
        assert info and info["source"] == "ranges" and info["steps"] >= 2, (f, info)
        text = render.summary_text(m.summary(t))
        assert "none marked" in text and "taken as the steps" in text
    assert marked < len(files)  # both kinds are tested


def test_stepped_trace_is_cached_and_follows_reassigned_events():
    bare = unmarked(recorded("sync_stall", "broken", "h200"))
    assert m.stepped(bare) is m.stepped(bare)
    assert m.stepped(m.stepped(bare)) is m.stepped(bare)
    before = m.step_time_ms(m.stepped(bare))
    ev = bare.events
    bare.events = ev[ev["kind"] != "annotation"].reset_index(drop=True)  # now only kernels can show the loop
    assert m.stepped(bare).metadata["steps_inferred"]["source"] == "kernels"
    assert m.step_time_ms(m.stepped(bare)) != before


def test_steady_state_of_a_long_recorded_kernel_sequence():
    """The benchmark's launch-bound H200 trace (14 steps of 1,053 kernels) without any range."""
    marked = helpers.load(DATA / "bench" / "launch_overhead_long__h200.json.gz")
    bare = unmarked(marked, ranges_too=True)
    info = m.stepped(bare).metadata["steps_inferred"]
    assert (info["source"], info["period_length"]) == ("kernels", 1053) and info["steps"] >= len(marked.steps) - 1
    assert m.step_time_ms(m.stepped(bare)) == pytest.approx(m.step_time_ms(marked), rel=0.05)
    assert top(bare) == top(marked) == ["launch_overhead"]


def test_a_range_per_layer_is_grouped_into_steps(tmp_path):
    """NVTX ranges once per layer (4 a step) and an optimizer kernel outside them: the ranges repeat every
    layer, the kernels every step; a step is 4 layer ranges."""
    us, out, t = 1000, [], 0
    for i in range(6):
        for j in range(4):
            s = t + j * 200 * us
            out += [Ev("annotation", "layer", s, s + 150 * us),
                    Ev("runtime", "cudaLaunchKernel", s + 10 * us, s + 15 * us, correlation=1000 + 10 * i + j),
                    Ev("kernel", f"gemm_{j % 2}", s + 20 * us, s + 140 * us, correlation=1000 + 10 * i + j)]
        s = t + 800 * us
        out += [Ev("runtime", "cudaLaunchKernel", s, s + 5 * us, correlation=2000 + i),
                Ev("kernel", "adam", s + 10 * us, s + 60 * us, correlation=2000 + i)]
        t += 1000 * us
    trace = helpers.load(write_json(out, tmp_path / "t.json"))
    info = m.stepped(trace).metadata["steps_inferred"]
    assert (info["source"], info["period_length"]) == ("ranges", 4), info
    assert m.step_time_ms(m.stepped(trace)) == pytest.approx(1.0, rel=0.1)


def _with_migrations(path, n: int, first_ns: int = 5_000_000):
    """Add ``n`` unified-memory migrations (nsys copyKind 11/12: page faults move managed pages, no launch queued
    them) to an nsys export, one every 200 us from ``first_ns`` on, alternating host-to-device and device-to-host."""
    import sqlite3
    con = sqlite3.connect(path)
    for i in range(n):
        start = first_ns + i * 200_000 + 37_000
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY(start, end, deviceId, contextId, streamId, correlationId, bytes, "
                    "copyKind, srcKind, dstKind) VALUES (?,?,0,1,7,?,65536,?,7,7)", (start, start + 20_000, 10_000 + i, 11 + i % 2))
    con.commit()
    con.close()
    return path


def test_unified_memory_migrations_are_not_a_loop(tmp_path):
    """A program that runs one kernel on managed memory: the page faults around it move pages in hundreds of
    migrations, which repeat but were queued by no launch. They are no loop of one "kernel": the capture is a
    single cold call (a published T4 export read "3 repeats of 1 kernels (Unified Memory Memcpy HtoD ...)" as its
    steps, and a launch-overhead finding of 0 kernels a step). A real kernel loop beside migrations keeps its steps."""
    from synth import write_sqlite

    from helpers.readers import load
    one = [Ev("runtime", "cudaLaunchKernel", 1_000_000, 1_010_000, correlation=1),
           Ev("kernel", "softmax_fused", 1_020_000, 36_000_000, correlation=1)]
    t = load(_with_migrations(write_sqlite(one, tmp_path / "one.sqlite"), 600))
    assert m.steady_steps(t)[0].empty
    found = helpers.diagnose(t)
    assert found[0].pattern == "capture_window" and found[0].evidence["reason"] == "cold", found[0]
    assert "holds 1 kernel in 1 iteration and" in found[0].summary  # it read "1 kernels in 1 iteration(s)"
    loop = []
    for i in range(8):  # eight steps of three kernels, 10 ms apart
        t0 = 200_000_000 + i * 10_000_000
        for j, name in enumerate(("fwd", "bwd", "opt")):
            c = 100 + i * 3 + j
            loop += [Ev("runtime", "cudaLaunchKernel", t0 + j * 50_000, t0 + j * 50_000 + 5_000, correlation=c),
                     Ev("kernel", name, t0 + j * 1_000_000 + 100_000, t0 + j * 1_000_000 + 900_000, correlation=c)]
    steps, info = m.steady_steps(load(_with_migrations(write_sqlite(loop, tmp_path / "loop.sqlite"), 400, 200_000_000)))
    assert info["source"] == "kernels" and info["period_length"] == 3 and len(steps) >= 7


def test_the_repeat_count_said_is_the_one_found_when_the_first_is_left_out():
    """Three repeats found, the first dropped as ramp-up, two kept: the text read "2 repeats ... taken as the steps,
    the first repeat left out", as if one step were left."""
    info = {"source": "ranges", "period": ["MoE"], "period_length": 1, "steps": 2, "ramp_up_dropped": True}
    text = render.steady_text(info)
    assert text.startswith("3 repeats of 1 host ranges (MoE)") and "the other 2 taken as the steps" in text
    assert render.steady_text({**info, "ramp_up_dropped": False}).startswith("2 repeats of 1 host ranges (MoE) taken")
