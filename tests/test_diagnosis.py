"""The diagnosis on real traces recorded for the course: each broken loop named, each fixed one not."""

import pytest
from conftest import DATA

import helpers
from helpers.course import recorded

# (workload, variant, tag): (pattern that must be the top finding or None, patterns that must be absent)
EXPECTED = {
    ("data_stall", "broken", "h200"): ("data_stall", []),
    ("data_stall", "fixed", "h200"): (None, ["data_stall"]),
    ("h2d_copy", "broken", "h200"): ("h2d_copy", []),
    ("h2d_copy", "fixed", "h200"): (None, ["h2d_copy", "data_stall", "sync_stall"]),
    ("launch_overhead", "broken", "h200"): ("launch_overhead", []),
    ("launch_overhead", "foreach", "h200"): ("launch_overhead", []),
    ("launch_overhead", "graphs", "h200"): (None, ["launch_overhead"]),
    ("sync_stall", "broken", "h200"): ("sync_stall", []),
    ("sync_stall", "fixed", "h200"): (None, ["sync_stall"]),
    ("mystery", "broken", "h200"): ("data_stall", []),
    ("mystery", "data_fixed", "h200"): ("sync_stall", []),  # the loader fixed, the syncs show first
    ("mystery", "fixed", "h200"): (None, ["data_stall", "sync_stall"]),
    ("data_stall", "broken", "cpu"): ("data_stall", []),
    ("data_stall", "fixed", "cpu"): (None, ["data_stall"]),
    ("communication", "manual", "cpu"): ("communication", ["load_imbalance"]),
    ("communication", "ddp", "cpu"): (None, ["load_imbalance"]),
    ("communication", "imbalance", "cpu"): ("load_imbalance", []),
}


@pytest.mark.parametrize("key", list(EXPECTED), ids=lambda k: ":".join(k))
def test_recorded_trace_diagnosis(key):
    top, absent = EXPECTED[key]
    findings = helpers.diagnose(recorded(*key))
    patterns = [f.pattern for f in findings]
    if top:
        assert patterns and patterns[0] == top, patterns
    for p in absent:
        assert p not in patterns, patterns
    for f in findings:
        assert 0 <= f.cost <= 1 and f.fix and f.summary and f.evidence


def test_mystery_data_fix_uncovers_the_sync_stall():
    patterns = [f.pattern for f in helpers.diagnose(recorded("mystery", "data_fixed"))]
    assert "sync_stall" in patterns, patterns


def test_gpu_bound_loop_is_not_a_sync_stall():
    # h2d fixed: the host waits in syncs for a GPU that is busy all the time.
    patterns = [f.pattern for f in helpers.diagnose(recorded("h2d_copy", "fixed"))]
    assert patterns and patterns[0] == "gpu_bound" and "sync_stall" not in patterns


def test_every_manifest_entry_loads_and_matches():
    import json

    man = json.loads((DATA / "manifest.json").read_text())["traces"]
    assert len(man) >= 20
    for e in man:
        t = helpers.load(DATA / e["file"])
        assert len(t.events) == e["events"], e["file"]
        assert {"workload", "variant", "device", "torch", "date", "command", "step_ms"} <= set(e)


def test_cpu_only_data_stall_fix_does_not_say_gpu():
    f = helpers.diagnose(recorded("data_stall", "broken", "cpu"))[0]
    assert f.pattern == "data_stall" and "GPU" not in f.fix
