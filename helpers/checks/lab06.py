"""Lab 06: nsys stats / analyze next to helpers.diagnose, and Nsight Compute."""

from __future__ import annotations

import re

import pandas as pd

from ..diagnosis import diagnose
from ..model import Trace
from ._core import CheckFailed, _check, _close, _record, data_wait_share, learner_trace_problem  # noqa: F401

#: The self-check items this lab earns, per track, and the checks of the learner's work each needs.
# The credit this lab's exercises earn is declared in helpers.checks.exercise.EXERCISES.


# --- lab 06: nsys stats / analyze next to helpers.diagnose, and Nsight Compute ---------------------
#: The ``nsys analyze`` rules, and the helpers.diagnose patterns that would make each one matter.
ANALYZE_RULE_PATTERNS = {
    "cuda_memcpy_async": ("h2d_copy",),  # pageable async copies: costly only when the copies are big and exposed
    "cuda_memcpy_sync": ("h2d_copy", "sync_stall"),
    "cuda_memset_sync": ("sync_stall",),
    "cuda_api_sync": ("sync_stall",),  # fires on any cudaDeviceSynchronize / cudaStreamSynchronize
    "gpu_gaps": ("data_stall", "sync_stall", "launch_overhead", "h2d_copy", "communication"),
    "gpu_time_util": ("data_stall", "sync_stall", "launch_overhead", "h2d_copy", "communication"),
}
_ANALYZE_RULE = re.compile(r"^\s*\*\*\s*(?P<title>.+?)\s*\((?P<rule>\w+)\):\s*$")
_NO_PROBLEM = re.compile(r"no problems were (?:detected|found)|there were no problems|skipped|does not contain", re.IGNORECASE)


def analyze_findings(text: str) -> dict[str, str]:
    """The rules that reported something in ``nsys analyze`` output: {rule id: its first lines}."""
    found: dict[str, str] = {}
    rule, body = None, []
    for line in [*text.splitlines(), "** end (end):"]:
        m = _ANALYZE_RULE.match(line)
        if m:
            if rule and body and not _NO_PROBLEM.search(" ".join(body[:3])):
                found[rule] = " ".join(body[:3])[:300]
            rule, body = m.group("rule"), []
        elif rule and line.strip() and not line.startswith("Processing "):
            body.append(line.strip())
    return found


def _analyze_rule_matters(rule: str, trace: Trace) -> bool:
    """An analyze warning matters when helpers.diagnose finds the pattern behind it in the same run (private:
    the check's reasoning, not a function that hands out the verdicts)."""
    found = {f.pattern for f in diagnose(trace)}
    return bool(found & set(ANALYZE_RULE_PATTERNS.get(rule, ())))


def check_analyze_verdicts(verdicts: dict[str, bool], fired: list[str], trace: Trace, label: str) -> str:
    """For each analyze rule that ``fired`` on ``trace``'s report: does it point at this loop's bottleneck?"""
    wrong = [r for r in fired if r not in verdicts or bool(verdicts[r]) != _analyze_rule_matters(r, trace)]
    found = [f.pattern for f in diagnose(trace)]
    return _check("nsight", f"check_analyze_verdicts[{label}]", not wrong,
                  f"Rethink {wrong}: a warning matters only if fixing it would shorten this loop's step. "
                  f"Here the step is bound by {found[:2]}; ask whether the sync or copy analyze flags is what "
                  "the GPU waits for (long gaps next to it) or a short, harmless one.")


def _loose_same(answer: str, truth: str) -> bool:
    """``answer`` names ``truth``: a part of it at least 6 characters long (nsys stats cuts long names with '…')."""
    a = answer.replace("…", "").replace("...", "").strip().lower()
    return len(a) >= 6 and a in truth.strip().lower()


def check_stats_reading(answers: dict[str, str], trace: Trace) -> str:
    """The CUDA API call and the kernel with the most total time, as read off ``nsys stats``."""
    ev = trace.events
    want, ranked = {}, {}
    for key, kind in (("top_api_call", "runtime"), ("top_kernel", "kernel")):
        sel = ev[ev["kind"] == kind]
        ranked[key] = sel.groupby("name")["dur_us"].sum().sort_values(ascending=False)
        want[key] = str(ranked[key].index[0]) if not sel.empty else ""
    if not isinstance(answers, dict):
        return _check("nsight", "check_stats_reading", False, 'Give a dict: {"top_api_call": "...", "top_kernel": "..."}.')
    wrong = [k for k in want if not _loose_same(str(answers.get(k, "")), want[k])]
    seen = []
    for k in wrong:  # what the learner's name is in this report, so the message says what they read
        table = ranked[k]
        hit = [i for i, name in enumerate(table.index) if _loose_same(str(answers.get(k, "")), str(name))]
        total = float(table.sum()) or 1.0
        if hit:
            seen.append(f"{k}: {answers.get(k)!r} is row {hit[0] + 1} by time ({table.iloc[hit[0]] / total:.0%}); "
                        f"row 1 has {table.iloc[0] / total:.0%}")
        else:
            seen.append(f"{k}: {answers.get(k)!r} names no {'CUDA API call' if k == 'top_api_call' else 'kernel'} of this report")
    return _check("nsight", "check_stats_reading", not wrong,
                  "; ".join(seen) + ". Both summaries are sorted by 'Time (%)': the first row of cuda_api_sum is the "
                  "call the host spends most time in, of cuda_gpu_kern_sum the kernel the GPU spends most time in.")


def _kernel_limiter(row: dict | object) -> str:
    """``"compute"``, ``"memory"`` or ``"latency"`` for one ncu launch (a row of helpers.readers.ncu.read_ncu).
    Private: it is check_kernel_limiter's answer; the learner reads the figures, not this function."""
    from ..thresholds import NCU_LATENCY_BOUND_PCT

    compute = float(row["compute_throughput_pct"])  # type: ignore[index]
    memory = float(row["memory_throughput_pct"])  # type: ignore[index]
    if max(compute, memory) < NCU_LATENCY_BOUND_PCT:
        return "latency"
    return "compute" if compute >= memory else "memory"


def _memory_units(row) -> str:  # noqa: ANN001 - a row of read_ncu's table
    """Which memory unit the 'memory' figure is (ncu's Memory Throughput is the busiest unit's share of its peak)."""
    units = {"L1/TEX": row.get("l1_throughput_pct"), "L2": row.get("l2_throughput_pct"), "DRAM": row.get("dram_throughput_pct")}
    known = {k: float(v) for k, v in units.items() if v is not None and v == v}
    if not known:
        return ""
    return " (memory is the busiest unit's figure; by unit: " + ", ".join(f"{k} {v:.1f}%" for k, v in known.items()) + ")"


def check_kernel_limiter(answer: str, ncu_table: pd.DataFrame) -> str:
    """What limits the profiled kernel, from its ncu speed-of-light figures (first launch)."""
    want = _kernel_limiter(ncu_table.iloc[0])
    row = ncu_table.iloc[0]
    return _check("nsight", "check_kernel_limiter", str(answer).strip().lower() == want,
                  f"{answer!r} is not what the figures say: compute {row['compute_throughput_pct']:.0f}% and memory "
                  f"{row['memory_throughput_pct']:.0f}% of peak{_memory_units(row)}. The higher one limits the kernel if it "
                  "is near peak; "
                  "if both are well below (under ~60%), the kernel is latency-bound (occupancy, dependencies).")


def check_data_wait_share(answer: float, trace: Trace, label: str) -> str:
    """The GPU's data-wait share of the time, read from one trace (3 percentage points)."""
    want = data_wait_share(trace)
    return _check("nsight", f"check_data_wait_share[{label}]", _close(float(answer), want, 0.0, 0.03),
                  f"{answer:.3f} is off for the {label} trace. Take its steps first (steps, _ = "
                  "helpers.steady_state(trace): an Nsight export marks none, so they are found from what repeats), "
                  "then metrics.idle_by_cause(steps)['data_wait'] (microseconds the GPU idles while the host is in "
                  "the DataLoader) over the analysed time, metrics.windows(steps)['dur_us'].sum().")
