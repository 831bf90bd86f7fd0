"""A wrong reading is told which side it lies on and how to measure, never the figure it should have given."""

import pytest

from helpers import course, memory, roofline
from helpers.checks import CheckFailed, lab09, lab10


def _refusal(call) -> str:
    with pytest.raises(CheckFailed) as failed:
        call()
    return str(failed.value)


def test_peak_reading_refusals_never_print_the_peak_or_its_owners():
    snap = memory.load_snapshot(course.DATA / "gpu_bound__bf16__h200.memsnap.pickle.gz")
    want = lab10._reference_peak(snap)
    text = _refusal(lambda: lab10.check_peak_reading({"peak_mib": want["peak_mib"] * 0.5, "phase": "", "owners": {}}, snap))
    assert "below" in text and f"{want['peak_mib']:.1f}" not in text and f"{want['peak_mib']:.0f}" not in text, text
    wrong = dict(want, owners={k: v * 1.5 for k, v in want["owners"].items()})
    text = _refusal(lambda: lab10.check_peak_reading(wrong, snap))
    assert all(f"{v:.1f}" not in text and f"{v:.0f}" not in text for v in want["owners"].values()), text


def test_mfu_refusals_never_print_the_mfu():
    step_ms = {v: course.entry("gpu_bound", v)["step_ms"] for v in ("fp32", "bf16")}
    text = _refusal(lambda: lab09.check_mfu({"bf16": 0.9, "fp32": 0.9}, step_ms, roofline.RECORDED))
    assert "above" in text and "expected" not in text, text


def test_the_shipped_kernel_points_say_where_the_items_credit_comes_from():
    note = lab09._recorded_points_note()
    assert "earns no credit" in note and "GPU" in note and "check_matmul_flops" in note
    assert "check_kernel_points" not in note.split("comes from")[1]
