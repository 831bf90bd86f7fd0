"""Which math units a trace's matrix products ran on: fp32 FFMA pipes or tensor cores, read off kernel names.

cuBLAS, CUTLASS and Triton name their GEMM kernels after the instructions they use; the tokens below
are the ones seen in the course's H200 recordings (data/gpu_bound__*__h200.json.gz, torch 2.11 + CUDA 13):
``cutlass_80_simt_sgemm_...`` and ``sm80_xmma_gemm_f32f32_f32f32_..._ffma_...`` (fp32 on FFMA),
``sm90_xmma_gemm_f32f32_tf32f32_...`` (TF32), ``nvjet_sm90_tst_...`` / ``..._hsh_...`` and
``cutlass_80_tensorop_..._s16816gemm_bf16...`` (bf16/fp16 on tensor cores).
"""

from __future__ import annotations

import re

import pandas as pd

from ..model import Trace, kind_in

#: A kernel that computes a matrix product (a GEMM), by its name.
GEMM_NAME = re.compile(r"gemm|nvjet|xmma|cutlass|triton_tem_fused_mm|_mm_", re.IGNORECASE)
#: A GEMM on tensor cores: TF32/bf16/fp16 instruction tokens (checked before the fp32 ones).
TENSOR_CORE_NAME = re.compile(r"tf32|tensorop|nvjet|wmma|hmma|gmma|s16816|s1688|s161616|bf16|f16", re.IGNORECASE)
#: A GEMM on the fp32 FFMA pipes.
FP32_FFMA_NAME = re.compile(r"sgemm|ffma|simt|f32f32_f32f32", re.IGNORECASE)


def gemm_math(name: str) -> str | None:
    """``"tensor_core"``, ``"fp32_ffma"`` or ``"other_gemm"`` for a GEMM kernel's name; None if not a GEMM."""
    if not GEMM_NAME.search(name):
        return None
    if TENSOR_CORE_NAME.search(name):
        return "tensor_core"
    if FP32_FFMA_NAME.search(name):
        return "fp32_ffma"
    return "other_gemm"


def gemm_kernels(trace: Trace) -> pd.DataFrame:
    """Every GEMM kernel of the trace by name: ``name, math, count, total_us``, longest first."""
    ev = trace.events
    k = ev[kind_in(ev, ("kernel",))]
    by = k.groupby("name", observed=True)["dur_us"].agg(["count", "sum"]).reset_index()
    by["math"] = by["name"].map(gemm_math)
    by = by[by["math"].notna()].rename(columns={"sum": "total_us"})
    return by[["name", "math", "count", "total_us"]].sort_values("total_us", ascending=False).reset_index(drop=True)


def gemm_math_shares(trace: Trace) -> dict[str, float]:
    """Shares of GEMM time on ``tensor_core`` / ``fp32_ffma`` / ``other_gemm``, and ``gemm_of_kernels``:
    GEMM time over all kernel time (each 0..1; 0 when the trace has no GEMM)."""
    ev = trace.events
    kernel_us = float(ev.loc[ev["kind"] == "kernel", "dur_us"].sum())
    g = gemm_kernels(trace)
    gemm_us = float(g["total_us"].sum())
    out = {m: (float(g.loc[g["math"] == m, "total_us"].sum()) / gemm_us if gemm_us else 0.0)
           for m in ("tensor_core", "fp32_ffma", "other_gemm")}
    out["gemm_of_kernels"] = gemm_us / kernel_us if kernel_us else 0.0
    return out


def triton_kernels(trace: Trace) -> pd.DataFrame:
    """Kernels Inductor generated (names starting ``triton_``): ``name, count, total_us``, longest first."""
    ev = trace.events
    k = ev[(ev["kind"] == "kernel") & ev["name"].astype(str).str.startswith("triton_")]
    by = k.groupby("name", observed=True)["dur_us"].agg(["count", "sum"]).reset_index()
    return by.rename(columns={"sum": "total_us"}).sort_values("total_us", ascending=False).reset_index(drop=True)


#: The host-side ranges torch.compile's first call records (dynamo_timed), outermost first.
COMPILE_RANGES = ("entire_frame_compile", "_compile.compile_inner (dynamo_timed)")


def compile_time_us(trace: Trace) -> float:
    """Host time inside torch.compile's compilation: the union of its outermost ``entire_frame_compile``
    ranges (forward; backward's compile runs inside the first backward, under ``CompiledFunctionBackward``)."""
    from .intervals import merge_intervals

    ev = trace.events
    c = ev[ev["name"].isin(COMPILE_RANGES)]
    if c.empty:
        return 0.0
    starts, ends = merge_intervals(c["start_us"].to_numpy(), c["end_us"].to_numpy())
    return float((ends - starts).sum())


def api_calls_per_step(trace: Trace, names: tuple[str, ...] = ("cudaMalloc", "cudaFree")) -> dict[str, float]:
    """How many of each CUDA runtime call a trace makes per profiled step (its steps, or 1 if none)."""
    ev = trace.events
    steps = max(len(trace.steps), 1)
    return {n: float((ev["name"] == n).sum()) / steps for n in names}
