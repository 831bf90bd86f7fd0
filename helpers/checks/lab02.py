"""Lab 02: launch overhead."""

from __future__ import annotations

from .. import metrics as m
from ..diagnosis import diagnose
from ..model import Trace
from ._core import CheckFailed, _check, _close, _record, data_wait_share, learner_trace_problem  # noqa: F401

#: The self-check items this lab earns, per track, and the checks of the learner's work each needs.
CREDIT: dict[str, dict[str, tuple[str, ...]]] = {
    "launch": {"gpu": ("check_launch_fixes", "check_launch_fixed"), "cpu": ("check_launch_fixes", "check_launch_fixed")},
}


# --- lab 02 ----------------------------------------------------------------------------------
LAUNCH_FIX_ANSWERS = {"torch.compile": True, "CUDA Graphs": True, "a fused/foreach optimizer": True,
                      "more DataLoader workers": False, "removing torch.cuda.synchronize()": False,
                      "a bigger batch (when the model allows it)": True}


def check_launch_fixes(answers: dict[str, bool]) -> str:
    wrong = [k for k, v in LAUNCH_FIX_ANSWERS.items() if bool(answers.get(k)) != v]
    return _check("launch", "check_launch_fixes", not wrong,
                  f"Rethink: {wrong}. Launch overhead shrinks only if the GPU gets fewer, bigger launches "
                  "per unit of work: fusion, graphs, multi-tensor optimizers, bigger batches.")


def check_launch_diagnosed(trace: Trace) -> str:
    top = diagnose(trace)
    ok = bool(top) and top[0].pattern == "launch_overhead"
    return _check("launch", "check_launch_diagnosed", ok,
                  f"The top finding is {top[0].pattern if top else 'nothing'}; expected launch_overhead on the "
                  "broken loop. Look at kernels per step and their median length.")


def check_launch_fixed(before: Trace, after: Trace, min_speedup: float) -> str:
    """After the fix: step time at least ``min_speedup`` x better (GPU) / fewer ops per step (CPU)."""
    b, a = m.step_time_ms(before), m.step_time_ms(after)
    if before.has_gpu:
        found = [f.pattern for f in diagnose(after)]
        ok = a * min_speedup <= b and "launch_overhead" not in found
        msg = (f"Step time {b:.2f} -> {a:.2f} ms ({b / a:.1f}x, want >= {min_speedup}x); findings now {found}. "
               "Capture the whole step in a CUDA Graph (or compile it) so one launch replays hundreds of kernels.")
    else:
        ops = [m.host_op_stats(t)["top_level_ops_per_step"] for t in (before, after)]
        ok = ops[1] * min_speedup <= ops[0]
        msg = (f"Top-level PyTorch ops per step {ops[0]:.0f} -> {ops[1]:.0f} (want {min_speedup}x fewer). Use a foreach/fused "
               "optimizer so one call updates every parameter instead of one call per parameter.")
    return _check("launch", "check_launch_fixed", ok, msg)
