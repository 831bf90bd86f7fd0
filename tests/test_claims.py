"""Figures the course states about its own recordings: GPU busy under CUDA Graphs, profiler overhead, lab 00's window."""

from __future__ import annotations

import re

import numpy as np
import pytest

import helpers
from helpers import metrics as m
from helpers.checks import CheckFailed
from helpers.course import DATA, entry, recorded


def test_graph_replay_span_is_not_busy():
    """A CUDA Graph replay counts through its kernels: lab 02's table says 79% for this trace, not the span's 98%."""
    trace = recorded("launch_overhead", "graphs")
    busy = m.gpu_utilization(trace)
    assert 0.77 <= busy <= 0.80, busy
    assert abs(busy - entry("launch_overhead", "graphs")["gpu_utilization"]) < 0.005
    spans = m.graph_spans(trace)
    assert len(spans) >= 3 and (spans["fill"] < 0.85).all() and (spans["kernels"] > 500).all()
    b = m.gpu_busy(trace)
    assert b["graph_span_us"].sum() / b["window_us"].sum() > 0.95  # the span, shown apart
    top = helpers.diagnose(trace)[0]
    # the GPU paces this loop, so its steps are the replays back to back: their span is (nearly) the whole step
    assert top.pattern == "gpu_bound" and "79%" in top.summary and "CUDA Graph replays span 100%" in top.summary
    assert "The GPU is busy 98%" not in top.summary and "The GPU is busy 100%" not in top.summary


def test_busy_without_graphs_is_unchanged():
    trace = recorded("sync_stall", "fixed")
    b = m.gpu_busy(trace)
    assert (b["graph_span_us"] == b["busy_us"]).all() and m.graph_spans(trace).empty


def test_profiled_vs_timed_figures_the_labs_quote():
    """Lab 00's hygiene section, lab 02 and lab 06 quote these from data/manifest.json and the traces."""
    ratio = {v: entry("launch_overhead", v)["profiled_step_ms"] / entry("launch_overhead", v)["step_ms"]
             for v in ("broken", "foreach", "bigbatch")}
    assert min(ratio.values()) >= 1.8 and max(ratio.values()) <= 2.35, ratio
    broken = entry("launch_overhead", "broken")
    assert round(broken["step_ms"], 1) == 18.6 and round(broken["profiled_step_ms"], 1) == 34.0
    fixed = entry("sync_stall", "fixed")  # an asynchronous loop: the host's step is shorter than the real one
    assert round(fixed["profiled_step_ms"], 1) == 9.6 and round(fixed["step_ms"], 1) == 14.3
    assert round(m.launch_stats(recorded("launch_overhead", "broken"))["median_launch_call_us"], 1) == 7.4
    nsys = helpers.load(DATA / "nsys" / "launch_overhead__broken__h200.sqlite.gz")
    assert round(m.launch_stats(nsys)["median_launch_call_us"], 1) == 5.6


def test_lab00_time_window_must_hold_steps():
    """The syllabus's --delay=10 --duration=30 on lab 00's 10-step script opens after the program ends."""
    from helpers import checks, profiling

    script = ["python", "-m", "helpers.workloads.data_stall", "--variant", "broken", "--steps", "10"]
    short = profiling.nsys_command(script, output="w", capture_range=None, delay_s=10, duration_s=30)
    problems = checks.nsys_command_problems("time window", short)
    assert any(re.search(r"--steps \d+ or more", p) for p in problems) and any("start-up" in p for p in problems)
    ok = profiling.nsys_command(script[:-1] + ["1500"], output="w", capture_range=None, delay_s=20, duration_s=5)
    assert checks.nsys_command_problems("time window", ok) == []
    with pytest.raises(CheckFailed, match=r"--steps \d+ or more"):
        checks.check_nsys_commands({
            "capture range": profiling.nsys_command(script + ["--nsys-range"], output="r"),
            "time window": short,
            "gpu metrics": profiling.nsys_command(script, output="m", capture_range=None, gpu_metrics_device=0)})


def test_the_comm_hook_variant_is_named_for_what_it_sends():
    """The recorded hook variant registers PyTorch's fp16 hook, so it is called fp16_hook (it was bf16_hook)."""
    import inspect

    from helpers.workloads import communication

    assert "fp16_hook" in communication.VARIANTS and not any(v.startswith("bf16") for v in communication.VARIANTS)
    src = inspect.getsource(communication)
    assert "default_hooks.fp16_compress_hook" in src and "bf16_compress_hook" not in src.split("def ", 1)[1]
    from helpers.course import manifest

    recorded_variants = {e["variant"] for e in manifest() if e["workload"] == "communication"}
    assert recorded_variants <= set(communication.VARIANTS), recorded_variants - set(communication.VARIANTS)


def test_memory_throughput_is_the_busiest_unit_not_dram():
    """Lab 06 and the deck: the GEMM's "Memory Throughput" 67% is L1/TEX's load, DRAM is at 2.7%."""
    from helpers import course
    from helpers.readers.ncu import read_ncu

    row = read_ncu(DATA / course.shipped_ncu_entries()[0]["ncu_csv"]).iloc[0]
    assert round(row["memory_throughput_pct"]) == 67 and round(row["dram_throughput_pct"], 1) == 2.7
    assert row["l1_throughput_pct"] > row["l2_throughput_pct"] > row["dram_throughput_pct"]
    assert round(row["compute_throughput_pct"]) == 86 and row["compute_throughput_pct"] > row["memory_throughput_pct"]


def test_lab08_precision_fix_is_at_least_3x_and_its_page_quotes_the_recording():
    """The GEMM loop's precision fix, measured on the H200 without a profiler; the instructor page's table agrees."""
    import json
    import re

    from conftest import ROOT

    measured = json.loads((DATA / "gpu_bound__h200.measure.json").read_text())["variants"]
    fp32 = measured["fp32"]["step_ms"]
    assert fp32 / measured["bf16"]["step_ms"] >= 3 and fp32 / measured["tf32"]["step_ms"] >= 3
    page = (ROOT / "docs" / "instructors" / "08_gpu_bound.md").read_text(encoding="utf-8")
    rows = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16 + GradScaler", "compile": "bf16 + compile",
            "compile_ro": "bf16 + compile, reduce-overhead"}
    for variant, label in rows.items():
        m_ = re.search(rf"^\| {re.escape(label)} \| ([\d.]+) \| ([\d.]+)x \|$", page, re.MULTILINE)
        assert m_, label
        step = measured[variant]["step_ms"]
        assert float(m_.group(1)) == round(step, 1) and float(m_.group(2)) == round(fp32 / step, 1), label


def test_instructor_pages_quote_the_recordings_and_one_definition_of_busy():
    """Lab 03's page gives the fixed loop's figures from the manifest; figures.md defines busy once, as the union."""
    from conftest import ROOT

    pages = ROOT / "docs" / "instructors"
    fixed = entry("sync_stall", "fixed")
    lab03 = " ".join((pages / "03_sync_stall.md").read_text(encoding="utf-8").split())
    assert f"fixed {fixed['step_ms']:.1f} ms, GPU busy {fixed['gpu_utilization']:.0%}" in lab03
    assert f"{fixed['profiled_step_ms']:.1f} ms" in lab03
    figures = " ".join((pages / "figures.md").read_text(encoding="utf-8").split())
    assert figures.count("*GPU busy* has one definition") == 1
    assert "union of kernels, copies and memsets on all streams" in figures and "never its first-to-last-kernel span" in figures
    assert "## Lab 08" in figures


# --- issue 31's claims: each figure recomputed by tools/claims.py and quoted by the text it corrects ------------
def _claims():
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "tools"))
    import claims

    return claims


def _text(relpath: str) -> str:
    """A notebook's or page's text with whitespace folded, so a quote may wrap anywhere."""
    import json

    from conftest import ROOT

    path = ROOT / relpath
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        raw = "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells)
    else:
        raw = path.read_text(encoding="utf-8")
    return " ".join(raw.split())


LAB08 = "solutions/08_gpu_bound.ipynb"


def test_checkpointing_cost_is_mostly_the_hosts():
    """Lab 08 §5: the GPU's work grew 21%, its busy share fell: the 2.2x is not 'each forward runs twice'."""
    c = _claims().checkpoint()
    assert (c["bf16_gpu_ms_per_step"], c["checkpoint_gpu_ms_per_step"], c["gpu_work_growth"]) == (5.3, 6.41, 0.21)
    assert (c["bf16_gpu_busy"], c["checkpoint_gpu_busy"], c["slowdown_fresh"]) == (0.78, 0.45, 2.2)
    text = _text(LAB08)
    for quote in ("2.2x slower (5.6 -> 12.3 ms)", "from 5.3 to 6.4 ms a step (+21%", "from 78% to 45%"):
        assert quote in text, quote
    assert "each block's forward runs twice" not in text


def test_the_peak_is_twice_the_parameters_in_mib():
    m_ = _claims().memory()
    assert m_["twice_param_mib"] == m_["peak_above_start_mib"] == m_["peak_above_start_checkpoint_mib"] == 768.9
    assert (m_["param_mib"], m_["weights_and_adam_gib"], m_["activations_batch2048_gib"]) == (384.4, 1.13, 0.45)
    for page in (LAB08, "docs/instructors/08_gpu_bound.md"):
        text = _text(page)
        assert "768.9 MiB" in text and "384.4 MiB" in text and "1.13 GiB" in text and "0.45 GiB" in text, page
        assert "768.9 MB" not in text and "1.6 GB" not in text, page


def test_default_compile_makes_the_size_dynamic_after_one_recompile():
    r = _claims().recompiles()
    assert (r["compiles_dynamic_None"], r["compiles_dynamic_False"]) == (2, 4), r
    assert "2 compiles by default and 4 with `dynamic=False`" in _text(LAB08)


def test_ncu_stall_and_issue_figures():
    n = _claims().ncu()
    assert n["layernorm_top_stall"] == "long_scoreboard" and n["layernorm_long_scoreboard_share"] == 0.36
    assert (n["layernorm_long_scoreboard_cycles"], n["layernorm_cycles_per_issue"]) == (8.9, 24.8)
    assert (n["gemm_cycles_per_issue"], n["gemm_warp_issuing_share"], n["gemm_eligible_warps"]) == (2.2, 0.45, 1.6)
    text = _text(LAB08)
    assert "8.9 of those cycles, 36%" in text and "issues in 45% of its cycles" in text
    assert "most of it (`CPIStall`)" not in text and "almost never stalled" not in text


def test_fp16_losses_lag_and_catch_up():
    f = _claims().fp16()
    diff = f["fp16_vs_fp32"]
    assert diff[:2] == [0.0, 0.0] and all(d > 0.03 for d in diff[2:6]) and f["largest_step"] == 5
    assert round(diff[5], 2) == 0.24 and diff[6] < 0 and abs(diff[9]) <= 0.001 and f["bf16_worst"] < 0.001
    text = _text(LAB08)
    assert "by up to 24%, at step 5" in text and "within 0.1% at step 9" in text
    assert "flat start" not in text and "first steps are skipped" not in text
    assert "so gradients do not underflow" not in text


def test_data_stall_idle_and_wait_figures():
    i = _claims().idle()
    assert (i["profiler_gpu_idle"], i["profiler_data_wait"]) == (0.979, 0.842)
    assert (i["nsys_gpu_idle"], i["nsys_data_wait"]) == (0.974, 0.841)
    assert 14.0 <= i["nsys_median_long_gap_ms"] <= 14.7
    assert "idle 97% of its steps in the export, 84% of each step waiting for data" in _text("README.md")
    assert "82% idle" not in _text("README.md")
    lab06 = _text("solutions/06_nsight_reports.ipynb")
    assert "gaps of about 14 ms" in lab06 and "about 17 ms" not in lab06


def test_triton_launches_are_counted():
    n = _claims().launches()
    assert (n["cudaLaunchKernel_per_step"], n["cudaLaunchKernelExC_per_step"], n["cuLaunchKernel_per_step"]) == (94, 47, 109)
    assert n["all_launch_calls_per_step"] == 250 and n["all_launch_ms_per_step"] == 1.75
    text = _text("solutions/02_launch_overhead.ipynb")
    assert "the 250 launch calls a step take 1.75 ms" in text and "109 `cuLaunchKernel`" in text


def test_pinning_alone_and_with_overlap():
    p = _claims().pinning()
    assert (round(p["broken"], 1), round(p["pinned_blocking"], 1), round(p["fixed"], 1)) == (11.5, 4.3, 2.9)
    assert "from 11.5 to 4.3 ms a step with pinning alone" in _text("solutions/06_nsight_reports.ipynb")
    assert "11.5 → 4.3 ms a step from pinning alone" in _text("docs/instructors/01_data_loading_stall.md")


def test_wording_claims_stay_corrected():
    """TF32 through PyTorch 2.9's switch; the profiler table's device column; with_stack; the workers bound."""
    lab08, lab06 = _text(LAB08), _text("solutions/06_nsight_reports.ipynb")
    assert 'torch.backends.cuda.matmul.fp32_precision = "tf32"' in lab08 and "allow_tf32 = True`, or" not in lab06
    lab00 = _text("solutions/00_tools_and_first_profile.ipynb")
    assert 'SORT_BY = "self_device_time_total"' in lab00 and 'SORT_BY = "self_cuda_time_total"' not in lab00
    lab01 = _text("solutions/01_data_loading_stall.ipynb")
    assert "`with_stack=True` does help" in lab01 and "cannot see is worker processes" in lab01
    assert "That is a lower bound" in lab01 and "need n + 1 cores" in lab01


# --- labs 09-11's H200 recordings (tools/record_kernels.py, record_memory.py, record_callsites.py) ------------
LAB09, LAB10, LAB11 = "solutions/09_kernel_efficiency.ipynb", "solutions/10_gpu_memory.ipynb", "solutions/11_call_sites_and_environment.ipynb"


def test_lab09_shapes_attention_and_ncu_figures():
    k = _claims().kernels09()
    assert (k["vocab_50257_step_ms"], k["vocab_50304_step_ms"]) == (14.717, 7.508)
    assert (k["conv_nchw_step_ms"], k["conv_channels_last_step_ms"]) == (20.734, 12.265)
    assert (k["conv_nchw_transposes"], k["conv_channels_last_transposes"]) == (50.0, 0.0)
    assert (k["eager_step_ms"], k["sdpa_step_ms"], k["eager_peak_mib"], k["sdpa_peak_mib"]) == (10.361, 1.072, 4228.0, 353.0)
    assert (k["ncu_eager_sm_pct"], k["ncu_eager_memory_pct"], k["ncu_sdpa_dram_pct"], k["ncu_sdpa_occupancy_pct"]) == (66.3, 24.3, 11.1, 14.1)
    text = _text(LAB09)
    for quote in ("50257 outputs: 14.72 ms a step; 50304: 7.51 ms", "NCHW: 20.73 ms a step, channels_last: 12.27 ms",
                  "50 layout transposes a step", "Eager: 10.36 ms a step and 4228 MiB", "SDPA: 1.07 ms and 353 MiB",
                  "24% of the memory throughput and 66% of the SM's", "DRAM 11%", "14% achieved occupancy"):
        assert quote in text, quote
    assert "no ncu report of attention is shipped yet" not in text


def test_lab10_optimizer_fragmentation_and_oom_figures():
    m_ = _claims().memory10()
    assert (m_["foreach_peak_mib"], m_["fused_peak_mib"], m_["in_backward_peak_mib"]) == (768.9, 736.1, 736.1)
    assert (m_["foreach_step_ms"], m_["fused_step_ms"], m_["in_backward_step_ms"]) == (5.565, 4.397, 12.048)
    assert (m_["expandable_False_reserved_mib"], m_["expandable_True_reserved_mib"]) == (1984.0, 200.0)
    assert (m_["expandable_False_cudamalloc"], m_["expandable_True_cudamalloc"]) == (16, 7)
    assert (m_["oom_allocated_mib"], m_["oom_request_mib"]) == (2722, 128) and "layer_norm" in m_["oom_frame"]
    text = _text(LAB10)
    for quote in ("Foreach Adam: 768.9 MiB above the step's start, 5.57 ms", "Fused Adam: 736.1 MiB, 4.40 ms",
                  "736.1 MiB, 12.05 ms", "1984 MiB reserved with the default allocator, after 16", "200 MiB after 7",
                  "asking 128 MiB (8192 x 4096 fp32) with 2722 MiB allocated"):
        assert quote in text, quote
    assert "no recording of it ships yet" not in text


def test_lab11_sync_debug_backtraces_and_launch_blocking_figures():
    c = _claims().callsites11()
    assert c["warnings"] == 7
    assert c["backtrace_ops"] == {"index_Tensor": 14, "is_nonzero": 14, "to_dtype_layout": 8, "_index_put_impl_": 7,
                                  "item": 6, "(none)": 1}
    assert (c["default_step_ms"], c["launch_blocking_step_ms"]) == (5.589, 11.278)
    assert (c["default_launch_call_us"], c["blocking_launch_call_us"]) == (6.4, 37.6)
    assert (c["default_launch_to_start_us"], c["blocking_launch_to_start_us"]) == (163.9, 8.7)
    assert (c["default_busy"], c["blocking_busy"]) == (0.78, 0.42)
    text = _text(LAB11)
    for quote in ("5.59 ms a step by default, 11.28 ms with `CUDA_LAUNCH_BLOCKING=1`", "from 6.4 us to 37.6 us",
                  "from 164 us to 8.7 us", "drops from 78% to 42%", "The eight `to_dtype_layout` rows"):
        assert quote in text, quote


def test_lab02_host_time_per_op_and_the_recorded_steps_it_quotes():
    """Lab 02 explains the CPU verdict's host time per op with the CPU recordings' figures, and its section 4 the
    eager recording's slow first step and the compare figure's median: each figure as the notebook states it."""
    import json

    from helpers.checks import lab02

    text = "".join("".join(c["source"]) for c in json.loads((DATA.parent / "solutions" / "02_launch_overhead.ipynb").read_text())["cells"])
    b, f = recorded("launch_overhead", "broken", "cpu"), recorded("launch_overhead", "foreach", "cpu")
    ops = [round(m.host_op_stats(t)["top_level_ops_per_step"]) for t in (b, f)]
    per_op = [lab02.host_us_per_op(t) for t in (b, f)]
    assert f"{ops[0]} → {ops[1]} top-level calls a step" in text
    assert f"{per_op[0]:.1f} → {per_op[1]:.1f} µs each" in text
    assert f"{ops[0] * per_op[0] / 1e3:.1f} → {ops[1] * per_op[1] / 1e3:.1f} ms a step in all" in text
    eager = m.step_times(m.stepped(recorded("launch_overhead", "broken")))
    assert f"{eager[0]:.1f} ms against {eager[1]:.1f} and {eager[2]:.1f}" in text and len(eager) == 3
    graph = m.step_times(m.stepped(recorded("launch_overhead", "graphs")))
    assert f"the {round(float(np.median(eager) / np.median(graph)))}x" in text
