"""What the learner's GPU can do, measured: the yardstick the GPU track's speed checks judge by.

A speed-up a lab asks for is a property of the device as much as of the fix. Lab 08's precision change
buys 4.6x on an H200, whose bf16 tensor cores run the loop's GEMM about 15 times faster than its FP32
pipes; a T4 has no TF32 and no native bf16 (autocast to bf16 there is emulated), and a card without
tensor cores cannot show the effect at all. So before judging a step time, the checks measure the
device (:func:`probe`: a short GEMM in each precision at the lab's own shape, the compute capability,
a device-to-device copy for memory bandwidth) and turn that into what the learner's loop can gain
(:func:`precision_expectation`: Amdahl's law over the GEMM share of the learner's own fp32 step).

Layers as elsewhere: :func:`probe` measures (GPU only), :class:`DeviceProfile` holds the figures,
:func:`precision_expectation` and :func:`tensor_core_expectation` are pure functions of them, and the
checks in :mod:`helpers.checks.lab08` call those. Tests inject profiles (:func:`reference_profiles`:
a T4-, an A100- and an H100-class device from the datasheets in :mod:`helpers.roofline`, and the H200 of the
recordings from ``data/device_profiles.json``, each with its source).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from . import thresholds as th

DATA = Path(__file__).resolve().parents[1] / "data"
#: The precisions the probe times; ``tf32`` is fp32 tensors with TF32 matmuls allowed.
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
#: The probe's GEMM: lab 08's own (batch 2048 x width 4096 by 4096 x 4096), so its figures are the loop's.
PROBE_SHAPE = (2048, 4096, 4096)
#: Bytes the bandwidth probe copies (read once and written once).
PROBE_COPY_BYTES = 256 * 2**20


@dataclass(frozen=True)
class DeviceProfile:
    """What one GPU does: GEMM throughput by precision (TFLOP/s on :data:`PROBE_SHAPE`), memory bandwidth.

    ``source`` says where the figures come from: ``probe`` (measured on this machine), ``recorded`` (read off
    the course's own traces) or ``published`` (the vendor's datasheet peak, with the citation)."""

    name: str
    compute_capability: tuple[int, int]
    gemm_tflops: dict[str, float] = field(default_factory=dict)
    memory_gbps: float = float("nan")
    source: str = "probe"
    cite: str = ""

    @property
    def tensor_cores(self) -> bool:
        """Tensor cores (fp16 matrix units) exist from Volta, compute capability 7.0."""
        return self.compute_capability >= (7, 0)

    @property
    def native_bf16(self) -> bool:
        """bf16 matrix math in hardware from Ampere (8.0); before it torch emulates bf16 (slowly)."""
        return self.compute_capability >= (8, 0)

    @property
    def has_tf32(self) -> bool:
        """TF32 exists from Ampere (8.0): before it the TF32 switch changes nothing."""
        return self.compute_capability >= (8, 0)

    @property
    def lowp(self) -> str:
        """The low precision a training step should take here: bf16 where native, else fp16 (+ GradScaler)."""
        return "bf16" if self.native_bf16 else "fp16"

    def gemm_gain(self, precision: str) -> float:
        """How many times faster the probe GEMM runs in ``precision`` than in true fp32 (nan if unmeasured)."""
        base, fast = self.gemm_tflops.get("fp32", float("nan")), self.gemm_tflops.get(precision, float("nan"))
        return fast / base if base > 0 and math.isfinite(fast) else float("nan")

    def describe(self) -> str:
        """One line of figures: name, capability, each precision's TFLOP/s, bandwidth, and the source."""
        cc = ".".join(map(str, self.compute_capability))
        tf = ", ".join(f"{p} {self.gemm_tflops[p]:.1f}" for p in PRECISIONS if p in self.gemm_tflops)
        bw = f"; memory {self.memory_gbps:,.0f} GB/s" if math.isfinite(self.memory_gbps) else ""
        return f"{self.name} (compute capability {cc}): GEMM TFLOP/s {tf}{bw} [{self.source}]"

    def to_dict(self) -> dict:
        return {"name": self.name, "compute_capability": list(self.compute_capability),
                "gemm_tflops": dict(self.gemm_tflops), "memory_gbps": self.memory_gbps, "source": self.source,
                "cite": self.cite}

    @classmethod
    def from_dict(cls, d: dict) -> DeviceProfile:
        cc = d["compute_capability"]
        return cls(name=str(d["name"]), compute_capability=(int(cc[0]), int(cc[1])),
                   gemm_tflops={str(k): float(v) for k, v in d.get("gemm_tflops", {}).items()},
                   memory_gbps=float(d.get("memory_gbps", float("nan"))), source=str(d.get("source", "")),
                   cite=str(d.get("cite", "")))


# --- measuring (GPU only) --------------------------------------------------------------------------
def set_tf32(on: bool) -> None:
    """Allow (or forbid) TF32 in fp32 matmuls, with PyTorch's current switch where it has one.

    PyTorch 2.9 added ``torch.backends.cuda.matmul.fp32_precision`` ("tf32" / "ieee") and marks
    ``allow_tf32`` for deprecation; once the new switch is set, reading the old one raises (mixing the two
    APIs is refused), so everything in the course sets and reads TF32 through these two functions."""
    import torch

    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "tf32" if on else "ieee"
    else:  # torch before 2.9
        matmul.allow_tf32 = on


def tf32_enabled() -> bool:
    """Whether fp32 matmuls may use TF32, read with the switch :func:`set_tf32` sets (either API's setting)."""
    import torch

    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        own = matmul.fp32_precision
        if own == "none":  # inherits the global setting
            return getattr(torch.backends, "fp32_precision", "ieee") == "tf32"
        return own == "tf32"
    return bool(matmul.allow_tf32)


def _time_ms(fn, device, min_ms: float = 20.0, max_reps: int = 50) -> float:  # noqa: ANN001 - a callable, a device
    """Median milliseconds of ``fn()`` on ``device`` over CUDA events, after two warm-up calls."""
    import torch

    for _ in range(2):
        fn()
    torch.cuda.synchronize(device)
    times: list[float] = []
    spent, t0 = 0.0, time.perf_counter()
    while len(times) < 3 or (spent < min_ms and len(times) < max_reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        spent = (time.perf_counter() - t0) * 1e3
    times.sort()
    return times[len(times) // 2]


def probe(device: object = None, shape: tuple[int, int, int] = PROBE_SHAPE) -> DeviceProfile:
    """Measure this GPU: the probe GEMM in each of :data:`PRECISIONS`, its compute capability, and the
    bandwidth of a device-to-device copy. About a second on a T4, less on bigger GPUs; needs CUDA.

    TF32 is measured with the switch on and restored afterwards; bf16 is measured even where it is not
    native, so the figures show what emulation costs (a precision the GPU's libraries refuse is left out)."""
    import torch

    from .errors import NoGPUError

    if not torch.cuda.is_available():
        raise NoGPUError("the device probe measures a CUDA GPU, and torch sees none here")
    device = torch.device(device if device is not None else "cuda")
    index = device.index if device.index is not None else torch.cuda.current_device()
    m, n, k = shape
    dtypes = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    was_tf32 = tf32_enabled()
    gemm_ms: dict[str, float] = {}
    try:
        for precision in PRECISIONS:
            set_tf32(precision == "tf32")
            try:
                a = torch.randn(m, k, device=device, dtype=dtypes[precision])
                b = torch.randn(k, n, device=device, dtype=dtypes[precision])
                gemm_ms[precision] = _time_ms(lambda a=a, b=b: a @ b, device)
            except RuntimeError:  # a precision this GPU's libraries refuse (bf16 on an old card): not one it has
                pass
            a = b = None
        src = torch.empty(PROBE_COPY_BYTES // 4, device=device)
        dst = torch.empty_like(src)
        copy_ms = _time_ms(lambda src=src, dst=dst: dst.copy_(src), device)
        del src, dst
    finally:
        set_tf32(was_tf32)
    return profile_from_times(torch.cuda.get_device_name(index), torch.cuda.get_device_capability(index), gemm_ms, copy_ms,
                              shape, f"helpers.capability.probe, GEMM {m}x{k} @ {k}x{n}, torch {torch.__version__}")


def profile_from_times(name: str, compute_capability: tuple[int, int], gemm_ms: dict[str, float], copy_ms: float,
                       shape: tuple[int, int, int] = PROBE_SHAPE, cite: str = "") -> DeviceProfile:
    """The probe's timings as figures: a GEMM of ``shape`` (m, n, k) is 2mnk FLOP; the copy reads and writes
    :data:`PROBE_COPY_BYTES` once each."""
    m, n, k = shape
    tflops = {p: 2.0 * m * n * k / (ms * 1e-3) / 1e12 for p, ms in gemm_ms.items() if ms > 0}
    gbps = 2 * PROBE_COPY_BYTES / (copy_ms * 1e-3) / 1e9 if copy_ms > 0 else float("nan")
    return DeviceProfile(name, tuple(compute_capability), tflops, gbps, "probe", cite)


@lru_cache(maxsize=8)
def _probe_cached(device: str) -> DeviceProfile:
    return probe(device)


def device_profile(device: object = None) -> DeviceProfile:
    """This machine's GPU, probed once per process and device (the figures do not change within a session)."""
    import torch

    d = torch.device(device if device is not None else "cuda")
    if d.type == "cuda" and d.index is None and torch.cuda.is_available():
        d = torch.device("cuda", torch.cuda.current_device())
    probed = _probe_cached(str(d))
    # the caller's copy of the figures: an edit of its dict never changes what the precision checks read next
    return replace(probed, gemm_tflops=dict(probed.gemm_tflops))


# --- the figures other devices give (tests, the CPU track) -----------------------------------------
#: GPU classes lab 08 shows beside the recording and the tests judge against: (key, the name helpers.roofline's
#: datasheet table knows it by, its compute capability from NVIDIA's CUDA GPUs list).
CLASSES = (("t4", "NVIDIA T4", (7, 5)), ("a100", "NVIDIA A100 80GB SXM", (8, 0)), ("h100", "NVIDIA H100 SXM", (9, 0)))


@lru_cache(maxsize=1)
def _recorded_doc() -> dict:
    from .outputs import shipped_json

    return shipped_json(DATA / "device_profiles.json")


def published_profile(name: str, compute_capability: tuple[int, int]) -> DeviceProfile | None:
    """A GPU's datasheet figures (helpers.roofline's table: dense peaks) as a profile, or None if it is not there.
    Peaks, not what a GEMM reaches (60-80% of them): their ratios are what the precision judgement uses."""
    from .roofline import device_peaks

    peaks = device_peaks(name)
    if peaks is None:
        return None
    tflops = {k: float(v) for k in PRECISIONS if (v := getattr(peaks, k)) is not None}
    return DeviceProfile(peaks.name, compute_capability, tflops, peaks.memory_tb_s * 1000, "published", peaks.source)


def reference_profiles() -> dict[str, DeviceProfile]:
    """Device classes the course knows figures of, by key (``t4``, ``a100``, ``h100``, ``h200``): the H200's read off
    its recordings (:func:`recorded_gemm_tflops`), the others the datasheets' dense peaks (helpers.roofline)."""
    out = {key: published_profile(name, cc) for key, name, cc in CLASSES}
    out = {k: v for k, v in out.items() if v is not None}
    out["h200"] = recorded_profile()
    return out


def recorded_profile() -> DeviceProfile:
    """The H200 the CPU track's recordings were made on, with the GEMM figures its traces show."""
    return DeviceProfile.from_dict(_recorded_doc()["devices"]["h200"])


def recorded_gemm_tflops(trace, shape: tuple[int, int, int] = PROBE_SHAPE) -> float:  # noqa: ANN001 - a Trace
    """TFLOP/s of the trace's GEMM kernels of ``shape`` (lab 08's loop: three 2048x4096x4096 products a block,
    forward and backward), from their mean duration. The big products are the GEMM kernels whose mean launch
    takes at least half as long as the longest one's; the 4096x10 head's take microseconds."""
    from .metrics import gemm_kernels

    g = gemm_kernels(trace)
    if g.empty:
        return float("nan")
    per = g["total_us"] / g["count"]
    big = g[per >= 0.5 * per.max()]
    per_launch_us = float(big["total_us"].sum() / big["count"].sum())
    m, n, k = shape
    return 2.0 * m * n * k / (per_launch_us * 1e-6) / 1e12


# --- what a device lets a loop gain ------------------------------------------------------------------
@dataclass(frozen=True)
class Expectation:
    """What the precision change can buy on one device, and the bar a learner's step must reach."""

    precision: str          # the low precision judged (bf16 where native, else fp16)
    gemm_gain: float        # the device's probe GEMM, that precision over fp32
    gemm_share: float       # the share of the fp32 step its GEMMs take (the learner's own trace)
    expected: float         # Amdahl: 1 / ((1 - share) + share / gain)
    required: float         # 1 + PRECISION_GAIN_SHARE x (expected - 1)
    showable: bool          # expected >= PRECISION_MIN_SHOWABLE: the device can show the effect
    profile: DeviceProfile

    def figures(self) -> str:
        """The figures the verdict rests on, for the message."""
        tf = self.profile.gemm_tflops
        return (f"{self.profile.name} ({self.profile.source}): GEMM fp32 {tf.get('fp32', float('nan')):.1f} TFLOP/s, "
                f"{self.precision} {tf.get(self.precision, float('nan')):.1f} TFLOP/s ({self.gemm_gain:.1f}x); GEMMs "
                f"{self.gemm_share:.0%} of the fp32 step, so the step can gain up to {self.expected:.1f}x")


def precision_expectation(profile: DeviceProfile, gemm_share: float, precision: str | None = None) -> Expectation:
    """The step speed-up a precision change can show on ``profile``'s device for a loop whose fp32 step spends
    ``gemm_share`` of its time in GEMMs: only the GEMMs get faster (Amdahl), by the probe's measured ratio."""
    precision = precision or profile.lowp
    gain = profile.gemm_gain(precision)
    share = min(max(float(gemm_share), 0.0), 1.0) if math.isfinite(gemm_share) else 0.0
    expected = 1.0 / ((1.0 - share) + share / gain) if math.isfinite(gain) and gain > 0 else float("nan")
    showable = math.isfinite(expected) and expected >= th.PRECISION_MIN_SHOWABLE
    required = 1.0 + th.PRECISION_GAIN_SHARE * (expected - 1.0) if showable else float("nan")
    return Expectation(precision, gain, share, expected, required, showable, profile)


def precision_verdict(exp: Expectation, fp32_ms: float, fast_ms: float) -> tuple[bool, str]:
    """Judge measured step times against ``exp``: (passed, message). Where the device cannot show the effect
    the verdict passes on structure and says so (the same-training and kernel checks judge the step)."""
    ratio = fp32_ms / fast_ms if fast_ms > 0 and math.isfinite(fp32_ms) else float("nan")
    measured = f"{fp32_ms:.2f} -> {fast_ms:.2f} ms a step is {ratio:.2f}x"
    if not exp.showable:
        return True, (f"not judged on speed: this device cannot show the precision gain ({exp.figures()}, under "
                      f"{th.PRECISION_MIN_SHOWABLE:g}x). Your step is judged on structure: the same training and its "
                      f"kernels. Measured: {measured}.")
    ok = math.isfinite(ratio) and ratio >= exp.required
    if ok:
        return True, f"{measured}, at least the {exp.required:.2f}x asked on this device ({exp.figures()})."
    hint = ("time both steps with helpers.profiling.time_steps (no profiler attached), TF32 off for the fp32 run, "
            "and keep the step free of host syncs (.item(), printing)")
    p = exp.profile
    if p.tensor_cores and not p.native_bf16:
        cc = ".".join(map(str, p.compute_capability))
        hint = (f"this GPU (compute capability {cc}) has no native bf16: bf16 runs emulated at "
                f"{p.gemm_tflops.get('bf16', float('nan')):.1f} TFLOP/s against fp16's "
                f"{p.gemm_tflops.get('fp16', float('nan')):.1f}; autocast to fp16 with a GradScaler. Else " + hint)
    return False, (f"{measured}, under the {exp.required:.2f}x this device allows you to show (half the "
                   f"{exp.expected:.1f}x its GEMMs make possible: {exp.figures()}): {hint}.")


def tensor_core_expectation(profile: DeviceProfile) -> str | None:
    """None where a fixed step's GEMMs should run on tensor cores; else why they cannot (the check then judges
    that the GEMMs left the fp32 FFMA kernels)."""
    if profile.tensor_cores:
        return None
    cc = ".".join(map(str, profile.compute_capability))
    return f"{profile.name} (compute capability {cc}) has no tensor cores: they arrived with compute capability 7.0"


def gemm_step_share(trace) -> float:  # noqa: ANN001 - a Trace
    """The share of a captured step's time its GEMM kernels take: GEMM time over kernel time, times the share
    of the step the GPU is busy (the part of the step that precision can shorten)."""
    from .metrics import gemm_math_shares, gpu_utilization

    return float(gemm_math_shares(trace)["gemm_of_kernels"]) * float(gpu_utilization(trace))


def lowp_dtype(device: object = None):  # noqa: ANN201 - a torch.dtype
    """The autocast dtype a training step should use on ``device``: bf16 on a CPU and on GPUs with native bf16
    (compute capability 8.0+), fp16 (with a GradScaler) on older GPUs. Reads the compute capability only."""
    import torch

    d = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if d.type != "cuda":
        return torch.bfloat16
    return torch.bfloat16 if torch.cuda.get_device_capability(d) >= (8, 0) else torch.float16
