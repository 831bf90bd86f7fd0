"""Lab 09 (roofline, MFU, tensor-core shapes, attention): every check passes the right work and refuses the wrong
work a learner in a hurry hands in, with a message naming what is missing."""

from __future__ import annotations

import gzip
import pickle
import shutil

import pytest
import torch
import torch.nn.functional as F
from conftest import own_capture
from torch import nn

import helpers
from helpers import checks, course, memory, roofline
from helpers import metrics as m
from helpers.checks import CheckFailed
from helpers.workloads import attention
from helpers.workloads import gpu_bound as gb

CPU = torch.device("cpu")


# --- the learner's functions, right ------------------------------------------------------------------
def matmul_flops(model, x):
    total = 0

    def count(layer, args, _out):
        nonlocal total
        total += 6 * (args[0].numel() // layer.in_features) * layer.in_features * layer.out_features

    hooks = [mod.register_forward_hook(count) for mod in model.modules() if isinstance(mod, nn.Linear)]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return total


def roofline_point(flops, nbytes, seconds, peak, bw):
    ai = flops / nbytes
    roof = min(peak, ai * bw)
    return {"intensity": ai, "achieved_flops": flops / seconds, "achieved_bytes_per_s": nbytes / seconds,
            "attainable_flops": roof, "bound": "compute" if ai >= peak / bw else "memory", "share_of_roof": flops / seconds / roof}


def pad_head(model, multiple):
    old = model.head
    rows = -(-old.out_features // multiple) * multiple

    class Padded(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(old.in_features, rows)
            with torch.no_grad():
                self.fc.weight.zero_()
                self.fc.bias.zero_()
                self.fc.weight[: old.out_features] = old.weight
                self.fc.bias[: old.out_features] = old.bias

        def forward(self, x):
            return self.fc(x)[..., : old.out_features]

    model.head = Padded()
    return model


def my_attention(q, k, v):
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)


def _refused(fn, *args, match: str = ""):
    with pytest.raises(CheckFailed, match=match):
        fn(*args)


# --- 1. FLOPs -------------------------------------------------------------------------------------------
def test_matmul_flops_passes_the_count_of_every_call_and_refuses_the_usual_slips():
    assert checks.check_matmul_flops(matmul_flops).startswith("passed")

    def forward_only(model, x):
        return matmul_flops(model, x) // 3

    def module_walk(model, x):  # misses a Linear called twice
        return sum(6 * (x.numel() // x.shape[-1]) * mod.in_features * mod.out_features
                   for mod in model.modules() if isinstance(mod, nn.Linear))

    def batch_only(model, x):  # forgets the sequence dimension
        return sum(6 * x.shape[0] * mod.in_features * mod.out_features for mod in model.modules() if isinstance(mod, nn.Linear))

    def autograd_count(model, x):
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as c:
            model(x).sum().backward()
        return c.get_total_flops()

    def full_size_constant(model, x):
        return 1237453897728

    for wrong, words in ((forward_only, "forward only"), (module_walk, "count the calls"), (batch_only, "tokens"),
                         (autograd_count, "FlopCounterMode"), (full_size_constant, "FLOPs, not")):
        _refused(checks.check_matmul_flops, wrong, match=words)
    _refused(checks.check_matmul_flops, lambda model, x: checks.lab09._reference_matmul_flops(model, x), match="check's own")
    _refused(checks.check_matmul_flops, checks.lab09._reference_matmul_flops, match="course's own code")


# --- 2. the roofline ------------------------------------------------------------------------------------
def test_roofline_point_is_judged_on_other_gpus_kernels():
    assert checks.check_roofline_point(roofline_point).startswith("passed")

    def strict_ridge(*a):
        out = roofline_point(*a)
        out["bound"] = "compute" if out["intensity"] > a[3] / a[4] else "memory"
        return out

    def share_of_peak(*a):
        return {**roofline_point(*a), "share_of_roof": a[0] / a[2] / a[3]}

    def in_tera(*a):
        return {**roofline_point(*a), "achieved_flops": a[0] / a[2] / 1e12}

    _refused(checks.check_roofline_point, strict_ridge, match="ridge")
    _refused(checks.check_roofline_point, share_of_peak, match="attainable")
    _refused(checks.check_roofline_point, in_tera, match="tera")
    _refused(checks.check_roofline_point, lambda *a: {"intensity": 1.0}, match="returns no")


def _points(trace, peaks, gemm_bytes=2):
    ev = trace.events
    by = ev[ev["kind"] == "kernel"].groupby("name", observed=True)["dur_us"].agg(["sum", "mean"])
    gemm_us = by[[m.gemm_math(n) is not None for n in by.index]].sort_values("sum").iloc[-1]["mean"]
    gelu = by[by.index.str.contains("GeluCUDAKernelImpl") & ~by.index.str.contains("Backward")]
    B, W = gb.BATCH, gb.WIDTH
    return {"gemm": roofline_point(2 * B * W * W, (2 * B * W + W * W) * gemm_bytes, gemm_us / 1e6, peaks.tensor_flops, peaks.bytes_per_s),
            "gelu": roofline_point(10 * B * W, 8 * B * W, gelu["mean"].iloc[0] / 1e6, peaks.tensor_flops, peaks.bytes_per_s)}


def test_kernel_points_read_the_recording_and_refuse_a_copy_other_peaks_and_an_fp32_trace(tmp_path):
    bf16 = course.recorded("gpu_bound", "bf16")
    out = checks.check_kernel_points(_points(bf16, roofline.RECORDED), bf16, roofline.RECORDED)
    assert out.startswith("passed") and "earns no credit" in out
    _refused(checks.check_kernel_points, _points(bf16, roofline.RECORDED, gemm_bytes=4), bf16, roofline.RECORDED, match="gemm")
    a100 = roofline.device_peaks("NVIDIA A100-SXM4-80GB")
    _refused(checks.check_kernel_points, _points(bf16, a100), bf16, a100, match="H200")
    copy = tmp_path / "mine.json.gz"
    shutil.copy(course.DATA / course.entry("gpu_bound", "bf16")["file"], copy)
    loaded = helpers.load(copy)
    _refused(checks.check_kernel_points, _points(loaded, roofline.RECORDED), loaded, roofline.RECORDED, match="loaded")
    fp32 = own_capture(helpers.load(course.DATA / course.entry("gpu_bound", "fp32")["file"]))
    fp32.source = str(copy)
    _refused(checks.check_kernel_points, _points(fp32, roofline.RECORDED), fp32, roofline.RECORDED, match="tensor cores")


def test_mfu_is_against_the_tensor_core_peak():
    step_ms = {v: course.entry("gpu_bound", v)["step_ms"] for v in ("fp32", "bf16")}
    flops = 1237453897728
    right = {v: flops / (ms / 1e3) / roofline.RECORDED.tensor_flops for v, ms in step_ms.items()}
    assert checks.check_mfu(right, step_ms, roofline.RECORDED).startswith("passed")
    assert 0.2 < right["bf16"] < 0.25 and 0.04 < right["fp32"] < 0.06  # the figures the lab's text quotes
    fp32_peak = {v: flops / (ms / 1e3) / roofline.RECORDED.flops("fp32") for v, ms in step_ms.items()}
    _refused(checks.check_mfu, fp32_peak, step_ms, roofline.RECORDED, match="fp32 peak")


# --- 3. shapes ------------------------------------------------------------------------------------------
def test_shape_miss_names_the_ffma_kernel_the_odd_size_and_the_heads_share():
    tf32, bf16 = course.recorded("gpu_bound", "tf32"), course.recorded("gpu_bound", "bf16")
    right = {"ffma_kernel": "cutlass_80_simt_sgemm_128x32", "dim": 10, "head_share": 0.0072}
    assert checks.check_shape_miss(right, tf32, bf16).startswith("passed")
    for wrong, words in (({**right, "ffma_kernel": "sm90_xmma_gemm_f32f32_tf32"}, "FFMA"), ({**right, "dim": 4096}, "multiple"),
                         ({**right, "head_share": 0.27}, "head_share")):
        _refused(checks.check_shape_miss, wrong, tf32, bf16, match=words)
    assert m.gemm_math_shares(tf32)["fp32_ffma"] > 0  # the recording really has the miss the lab reads


def test_padded_head_trains_the_same_and_refuses_what_only_looks_padded():
    assert checks.check_padded_head(pad_head).startswith("passed")

    def no_slice(model, multiple):
        old = model.head
        model.head = nn.Linear(old.in_features, 16)
        return model

    def random_rows(model, multiple):
        pad_head(model, multiple)
        with torch.no_grad():
            model.head.fc.weight.normal_()
        return model

    def beside(model, multiple):  # a padded Linear that runs but does not make the logits
        extra = nn.Linear(model.head.in_features, 16)
        head = model.head

        class Both(nn.Module):
            def __init__(self):
                super().__init__()
                self.head, self.extra = head, extra

            def forward(self, x):
                out = self.head(x)
                self.extra(x)
                return out

        model.head = Both()
        return model

    for wrong, words in ((lambda model, multiple: model, "pad it"), (no_slice, "slice"), (random_rows, "copy the head"),
                         (beside, "not come from it")):
        _refused(checks.check_padded_head, wrong, match=words)


# --- 4. attention ---------------------------------------------------------------------------------------
SMALL = (1, 256, 2, 32)


def _capture(attend, tmp_path):
    return helpers.capture(attention.make_step_with(attend, CPU, size=SMALL), steps=2, warmup=1, profile_memory=True,
                           out_dir=tmp_path)


def _reading(trace):
    a = memory.allocations(trace)
    peak = max(a[(a["time_us"] >= s.start_us) & (a["time_us"] <= s.end_us)]["bytes"].cumsum().max() for s in trace.steps.itertuples())
    scores = SMALL[0] * SMALL[2] * SMALL[1] ** 2 * 4
    return {"scores_bytes": scores, "peak_bytes": peak, "matrices": peak / scores}


def test_attention_reading_is_read_from_the_learners_own_eager_capture(tmp_path):
    eager = _capture(attention.attend_eager, tmp_path)
    right = _reading(eager)
    assert right["matrices"] > 2  # the eager block keeps several score matrices at its peak
    assert checks.check_attention_reading(right, eager, SMALL, 4).startswith("passed")
    _refused(checks.check_attention_reading, {**right, "scores_bytes": right["scores_bytes"] / 2}, eager, SMALL, 4, match="scores_bytes")
    _refused(checks.check_attention_reading, {**right, "peak_bytes": right["scores_bytes"]}, eager, SMALL, 4, match="peak_bytes")
    fused = _capture(my_attention, tmp_path)
    _refused(checks.check_attention_reading, _reading(fused), fused, SMALL, 4, match="not of the eager")
    loaded = helpers.load(eager.source)  # the file this kernel's capture wrote, loaded again: still its capture
    assert checks.check_attention_reading(right, loaded, SMALL, 4).startswith("passed")


def test_sdpa_attention_computes_the_same_without_the_scores_and_refuses_layout_and_copies():
    assert checks.check_sdpa_attention(my_attention, CPU).startswith("passed")

    def no_transpose(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def double_scale(q, k, v):
        return my_attention(q / q.shape[-1] ** 0.5, k, v)

    def not_causal(q, k, v):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)

    def detached(q, k, v):
        return my_attention(q.detach(), k.detach(), v.detach())

    def by_hand(q, k, v):  # right values, the T x T matrix in memory
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        s = s.masked_fill(torch.ones(s.shape[-1], s.shape[-1], dtype=torch.bool).triu(1), float("-inf"))
        return (s.softmax(-1) @ v).transpose(1, 2)

    def course_eager(q, k, v):
        return attention.attend_eager(q, k, v)

    for wrong, words in ((no_transpose, "differs"), (double_scale, "differs"), (not_causal, "differs"),
                         (detached, "autograd"), (by_hand, "score matrix"), (course_eager, "course's own")):
        _refused(checks.check_sdpa_attention, wrong, CPU, match=words)


# --- the toolkit pieces ---------------------------------------------------------------------------------
def test_device_peaks_match_names_as_torch_spells_them_and_refuse_missing_units():
    assert roofline.device_peaks("NVIDIA H100 80GB HBM3").name == "NVIDIA H100 SXM"
    assert roofline.device_peaks("NVIDIA A100-SXM4-40GB").memory_tb_s == 1.555
    assert roofline.device_peaks("NVIDIA A10G") is None and roofline.device_peaks("NVIDIA GeForce RTX 4090") is None
    t4 = roofline.device_peaks("Tesla T4")
    assert t4.tensor_flops == 65e12  # no bf16 tensor cores: the fp16 peak
    with pytest.raises(ValueError, match="fp16"):
        t4.flops("bf16")
    fig = roofline.figure(1e15, 4e12, {"gemm": (1024.0, 7.7e14), "gelu": (1.25, 5e12), "none": (0.0, float("nan"))})
    assert len(fig.axes) == 1


def test_snapshot_reader_reads_plain_data_and_refuses_code(tmp_path):
    snap = memory.load_snapshot(course.DATA / "gpu_bound__bf16__h200.memsnap.pickle.gz")
    seg = memory.segments(snap)
    assert round(seg["total_size"].sum() / 2**20) == 4022 and len(memory.blocks(snap)) >= len(seg)
    ev = memory.snapshot_events(snap)
    assert set(ev["action"]) == {"alloc", "free_requested", "free_completed"} and ev["time_us"].iloc[0] == 0
    assert list(memory.phases(snap)["name"][:3]) == ["forward", "backward", "optimizer"]

    class Boom:
        def __reduce__(self):
            return (print, ("ran code",))

    bad = tmp_path / "bad.pickle"
    bad.write_bytes(pickle.dumps({"segments": [Boom()]}))
    with pytest.raises(helpers.TraceError, match="plain data"):
        memory.load_snapshot(bad)
    junk = tmp_path / "junk.pickle.gz"
    junk.write_bytes(gzip.compress(b"not a pickle"))
    with pytest.raises(helpers.TraceError, match="not a memory snapshot"):
        memory.load_snapshot(junk)


def test_a_gpu_the_table_does_not_know_is_judged_by_its_measured_roof():
    from helpers import capability

    measured = roofline.measured_peaks(capability.recorded_profile())
    assert measured.tensor_flops == pytest.approx(capability.recorded_profile().gemm_tflops["bf16"] * 1e12)
    assert measured.bytes_per_s == pytest.approx(capability.recorded_profile().memory_gbps * 1e9)
    assert "measured" in measured.name and measured.tensor_flops < roofline.RECORDED.tensor_flops


def test_the_figures_the_lab_and_its_instructor_page_quote():
    """78% and 87% of the roofs, 1024 FLOP/byte, the head's 0.72%: what the lab's text and page say, from the recording."""
    bf16 = course.recorded("gpu_bound", "bf16")
    p = checks.lab09._kernel_points(bf16, roofline.RECORDED)
    assert p["gemm"]["intensity"] == 1024.0 and round(p["gemm"]["share_of_roof"], 2) == 0.78
    assert round(p["gelu"]["share_of_roof"], 2) == 0.87 and round(p["gelu"]["achieved_bytes_per_s"] / 1e12, 2) == 4.17
    assert round(checks.lab09._head_kernels(bf16)[1] * 100, 2) == 0.72
