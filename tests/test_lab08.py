"""Lab 08 (the GPU is the bottleneck): the metrics read the H200 recordings right, and every check refuses wrong work."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from conftest import own_capture
from torch.utils.checkpoint import checkpoint

import helpers
from helpers import checks, course
from helpers import metrics as m
from helpers.checks import CheckFailed
from helpers.workloads import gpu_bound as gb

NS = course.DATA / "nsight"
CPU = torch.device("cpu")


def _bf16(model, opt, x, y):
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


# --- the recordings, read by the metrics ----------------------------------------------------------
def test_kernel_names_tell_the_math_units_apart():
    assert m.gemm_math("cutlass_80_simt_sgemm_256x128_8x4_nt_align1") == "fp32_ffma"
    assert m.gemm_math("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_ffma_aligna4") == "fp32_ffma"
    assert m.gemm_math("sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x256x32") == "tensor_core"
    assert m.gemm_math("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN") == "tensor_core"
    assert m.gemm_math("vectorized_layer_norm_kernel") is None


def test_the_recorded_precision_fix_moves_the_gemms_to_tensor_cores_and_is_3x_faster():
    fp32, bf16, tf32 = (course.recorded("gpu_bound", v) for v in ("fp32", "bf16", "tf32"))
    assert m.gemm_math_shares(fp32)["fp32_ffma"] == 1.0 and m.gemm_math_shares(fp32)["gemm_of_kernels"] > 0.8
    assert m.gemm_math_shares(bf16)["tensor_core"] == 1.0
    assert m.gemm_math_shares(tf32)["tensor_core"] > 0.9
    ms = {e["variant"]: e["step_ms"] for e in course.manifest() if e["workload"] == "gpu_bound"}
    assert ms["fp32"] / ms["bf16"] >= 3.0 and ms["fp32"] / ms["tf32"] >= 3.0  # the target, measured
    assert len(m.triton_kernels(course.recorded("gpu_bound", "compile"))) > 5
    assert m.api_calls_per_step(course.recorded("gpu_bound", "empty_cache"))["cudaMalloc"] > 10
    assert m.api_calls_per_step(bf16) == {"cudaMalloc": 0.0, "cudaFree": 0.0}


# --- 1. reading ----------------------------------------------------------------------------------
def test_gemm_reading_refuses_wrong_units_names_and_shares():
    t = course.recorded("gpu_bound", "fp32")
    top = m.gemm_kernels(t).iloc[0]["name"]
    share = m.gemm_math_shares(t)["gemm_of_kernels"]
    assert checks.check_gemm_reading({"top_gemm": top[:30], "math": "fp32_ffma", "gemm_share": share}, t).startswith("passed")
    for wrong in ({"top_gemm": top[:30], "math": "tensor_core", "gemm_share": share},
                  {"top_gemm": "vectorized_layer_norm", "math": "fp32_ffma", "gemm_share": share},
                  {"top_gemm": "gemm", "math": "fp32_ffma", "gemm_share": share},
                  {"top_gemm": top[:30], "math": "fp32_ffma", "gemm_share": share - 0.2}):
        with pytest.raises(CheckFailed):
            checks.check_gemm_reading(wrong, t)


# --- 2. precision --------------------------------------------------------------------------------
def test_same_training_passes_bf16_and_refuses_fp32_no_update_and_a_skipped_step():
    assert checks.check_same_training(_bf16, CPU).startswith("passed")

    def no_step(model, opt, x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.zero_grad()
        return loss.detach()

    def skip_first(model, opt, x, y):
        opt.n = getattr(opt, "n", 0) + 1
        if opt.n == 1:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return F.cross_entropy(model(x), y).detach()
        return _bf16(model, opt, x, y)

    def fp32_step(model, opt, x, y):  # the loop as first written, in the learner's own cell
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    for wrong, words in ((fp32_step, "still run in fp32"), (gb.train_step, "You passed the course's own train_step"),
                         (no_step, "left every parameter"), (skip_first, "unchanged at step")):
        with pytest.raises(CheckFailed, match=words):
            checks.check_same_training(wrong, CPU)


def test_tensor_core_check_refuses_the_recordings_and_fp32_and_passes_a_tensor_core_capture(tmp_path):
    fp32 = course.recorded("gpu_bound", "fp32")
    with pytest.raises(CheckFailed, match="recorded"):
        checks.check_tensor_cores(fp32, course.recorded("gpu_bound", "bf16"))
    mine = {}
    for v in ("fp32", "bf16"):
        shutil.copyfile(course.DATA / f"gpu_bound__{v}__h200.json.gz", tmp_path / f"{v}.json.gz")
        copied = helpers.load(tmp_path / f"{v}.json.gz")  # a recording copied out of data/: not a capture
        with pytest.raises(CheckFailed, match=r"fast_trace \(.*\) was not made in this notebook"):
            checks.check_tensor_cores(own_capture(fp32, of=("gpu_bound",), mine=False), copied)
        mine[v] = own_capture(copied, of=("gpu_bound",))  # as if the learner had captured it
    fp32_mine = own_capture(fp32, of=("gpu_bound",), mine=False)
    with pytest.raises(CheckFailed, match="tensor-core"):
        checks.check_tensor_cores(fp32_mine, mine["fp32"])
    assert checks.check_tensor_cores(fp32_mine, mine["bf16"]).startswith("passed")
    # the behaviour stage: the fast capture still runs backward through the model and all of its matrix products; its
    # optimizer steps are not counted (fp16's GradScaler rightly skips the update on a step whose gradients overflowed)
    bf16 = helpers.load(tmp_path / "bf16.json.gz")

    def without(name_test) -> helpers.model.Trace:  # the fast capture with some of its rows gone, its steps kept
        ev = bf16.events
        return own_capture(replace(bf16, events=ev[~name_test(ev["name"].astype(str))].reset_index(drop=True),
                                   metadata={k: v for k, v in bf16.metadata.items() if k != "capture"}, _memo={}),
                           of=("gpu_bound",))

    assert checks.check_tensor_cores(fp32_mine, without(lambda n: n.str.startswith("Optimizer.step#"))).startswith("passed")
    for dropped, words in (("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
                            "gradients accumulated a step"), ("aten::addmm", r"13\.0 matrix products a step")):
        with pytest.raises(CheckFailed, match=words):
            checks.check_tensor_cores(fp32_mine, without(lambda n, d=dropped: n == d))
    # the speed judged against the recording's H200 (tests/test_capability.py injects other devices)
    with pytest.raises(CheckFailed, match="NVIDIA H200"):
        checks.check_precision_speedup(25.8, 13.0, live=False, fp32_trace=fp32)
    assert checks.check_precision_speedup(25.8, 5.6, live=False, fp32_trace=fp32).startswith("passed")


# --- 3. torch.compile ----------------------------------------------------------------------------
def test_graph_break_checks():
    import torch._dynamo

    torch._dynamo.reset()
    ex = torch._dynamo.explain(gb.Net(32, gb.DEPTH, item_break=True))(torch.randn(4, 32))
    assert ex.graph_break_count >= 1
    assert checks.check_graph_breaks({"graphs": ex.graph_count, "breaks": ex.graph_break_count}, ex).startswith("passed")
    with pytest.raises(CheckFailed):
        checks.check_graph_breaks({"graphs": 1, "breaks": 0}, ex)

    class StillBreaks(gb.Net):
        def __init__(self, width, depth):
            super().__init__(width, depth, item_break=True)

    class Different(gb.Net):
        def forward(self, x):
            return self.head(x)

    class Fixed(gb.Net):
        def forward(self, x):
            for k, block in enumerate(self.blocks):
                x = block(x)
                if k == 0:
                    self.seen.append(x.detach().mean())
            return self.head(x)

    for wrong in (StillBreaks, Different):
        with pytest.raises(CheckFailed):
            checks.check_break_fixed(wrong)
    assert checks.check_break_fixed(Fixed).startswith("passed")


def test_compile_seconds_from_the_cold_capture():
    cold = helpers.load(course.DATA / "gpu_bound__compile_cold__h200.json.gz")
    want = m.compile_time_us(cold) / 1e6
    assert 1.0 < want < 60.0
    assert checks.check_compile_seconds(want, cold).startswith("passed")
    for wrong in (want * 1.5, want * 1e6, cold.steps["dur_us"].iloc[0] / 1e6 * 2):
        with pytest.raises(CheckFailed):
            checks.check_compile_seconds(wrong, cold)


# --- 4. Nsight Compute ---------------------------------------------------------------------------
def test_ncu_readings():
    gemm = checks.ncu_long(NS / "gpu_bound__fp32__h200.gemm.ncu.csv")
    free = checks.ncu_long(NS / "gpu_bound__fp32__h200.gemm_noclock.ncu.csv")
    ln = checks.ncu_long(NS / "gpu_bound__fp32__h200.layernorm.ncu.csv")
    right = {"gemm": "compute", "layernorm": "latency", "gemm_busiest_memory": "L1"}
    assert checks.check_ncu_reading(right, gemm, ln).startswith("passed")
    for k, bad in (("gemm", "memory"), ("layernorm", "memory"), ("gemm_busiest_memory", "DRAM")):
        with pytest.raises(CheckFailed, match=k):
            checks.check_ncu_reading({**right, k: bad}, gemm, ln)
    dur = lambda t: t.loc[t["metric"] == "Duration", "value"].iloc[0]  # noqa: E731
    assert 1.2 < dur(gemm) / dur(free) < 1.45  # base 1.50 GHz vs boost 1.98 GHz
    assert checks.check_clock_ratio(dur(gemm) / dur(free), gemm, free).startswith("passed")
    with pytest.raises(CheckFailed):
        checks.check_clock_ratio(dur(free) / dur(gemm), gemm, free)
    stalls = checks.ncu_stalls(NS / "gpu_bound__fp32__h200.layernorm.raw.csv")
    assert stalls.index[0] == "long_scoreboard"


# --- 5. memory -----------------------------------------------------------------------------------
def test_activation_saving_refuses_one_block_and_plain_and_passes_every_block():
    def every(model, x):
        for block in model.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return model.head(x)

    def one(model, x):
        x = checkpoint(model.blocks[0], x, use_reentrant=False)
        for block in model.blocks[1:]:
            x = block(x)
        return model.head(x)

    def skips_a_block(model, x):
        for block in model.blocks[1:]:
            x = checkpoint(block, x, use_reentrant=False)
        return model.head(x)

    assert checks.check_activation_saving(every).startswith("passed")
    for wrong in (one, lambda model, x: model(x), skips_a_block):
        with pytest.raises(CheckFailed):
            checks.check_activation_saving(wrong)


def test_alloc_churn_and_gpu_metrics_readings():
    churn = course.recorded("gpu_bound", "empty_cache")
    per = m.api_calls_per_step(churn)
    assert checks.check_alloc_churn(per, churn).startswith("passed")
    with pytest.raises(CheckFailed):
        checks.check_alloc_churn({k: v * len(churn.steps) for k, v in per.items()}, churn)  # totals, not per step
    fp32, bf16 = (checks.gpu_metrics(NS / f"gpu_bound__{v}__h200.gpumetrics.json") for v in ("fp32", "bf16"))
    key = "Tensor Active [Throughput %]"
    right = {"busier": "fp32", "tensor_active": {"fp32": fp32[key], "bf16": bf16[key]}}
    assert checks.check_gpu_metrics_reading(right, fp32, bf16).startswith("passed")
    for wrong in ({**right, "busier": "bf16"}, {**right, "tensor_active": {"fp32": bf16[key], "bf16": fp32[key]}}):
        with pytest.raises(CheckFailed):
            checks.check_gpu_metrics_reading(wrong, fp32, bf16)
