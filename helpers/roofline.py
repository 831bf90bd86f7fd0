"""A GPU's published peaks, and the roofline figure: the ceilings a kernel's achieved rate is judged against.

The figures are NVIDIA's datasheet numbers for **dense** math (the datasheets print tensor-core figures
"with sparsity", twice the dense rate; the table holds half of those), at the boost clock the datasheet
assumes, and the memory bandwidth of the board's HBM/GDDR. They are ceilings, not what a kernel gets: on the
course's H200 recordings the largest bf16 GEMM reaches 78% of the tensor-core figure and GELU 87% of the bandwidth
(lab 09).
A device not in the table gets ``None``: read its datasheet and pass the figures yourself.

``figure(peaks, points)`` draws the roofline (attainable rate = min(peak FLOP/s, intensity x bandwidth),
both axes logarithmic) with the points it is given; it computes nothing about them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peaks:
    """One GPU's ceilings: dense TFLOP/s per math kind (None where the GPU has no such unit) and TB/s of memory."""

    name: str
    fp32: float  # FFMA pipes, no tensor cores
    tf32: float | None  # tensor cores, fp32 inputs rounded to TF32
    bf16: float | None  # tensor cores, bf16 inputs, fp32 accumulate
    fp16: float | None  # tensor cores, fp16 inputs, fp32 accumulate
    memory_tb_s: float
    source: str

    def flops(self, math: str) -> float:
        """Peak FLOP/s (not TFLOP/s) for ``math`` ("fp32", "tf32", "bf16" or "fp16"); a ValueError when this GPU
        has no such unit."""
        value = getattr(self, math, None) if math in ("fp32", "tf32", "bf16", "fp16") else None
        if value is None:
            raise ValueError(f"{self.name} has no {math!r} tensor-core rate in its datasheet"
                             + (" (use fp16 on this GPU)" if math in ("bf16", "tf32") and self.fp16 else ""))
        return value * 1e12

    @property
    def tensor_flops(self) -> float:
        """The 16-bit tensor-core peak in FLOP/s (bf16, or fp16 on a GPU without bf16 tensor cores): what a training
        step of matrix products could use, the peak MFU is taken against."""
        return self.flops("bf16" if self.bf16 else "fp16")

    @property
    def bytes_per_s(self) -> float:
        return self.memory_tb_s * 1e12


_H100 = "NVIDIA H100 Tensor Core GPU datasheet (2023): sparsity figures halved"
_A100 = "NVIDIA A100 datasheet (2021), dense figures"
#: Matched in order against the words of ``torch.cuda.get_device_name()`` (lower case, split at anything not a
#: letter or digit): the first entry all of whose words are in the name wins, so "NVIDIA A10G" matches no A10.
TABLE: tuple[tuple[tuple[str, ...], Peaks], ...] = (
    (("h200", "nvl"), Peaks("NVIDIA H200 NVL", 60.0, 417.5, 835.5, 835.5, 4.8,
                            "NVIDIA H200 Tensor Core GPU datasheet (2024), NVL column: sparsity figures halved")),
    (("h200",), Peaks("NVIDIA H200 SXM", 67.0, 494.5, 989.5, 989.5, 4.8,
                      "NVIDIA H200 Tensor Core GPU datasheet (2024), SXM column: sparsity figures halved")),
    (("h100", "nvl"), Peaks("NVIDIA H100 NVL", 60.0, 417.5, 835.5, 835.5, 3.9, _H100 + ", NVL column")),
    (("h100", "pcie"), Peaks("NVIDIA H100 PCIe", 51.0, 378.0, 756.5, 756.5, 2.0, _H100 + ", PCIe column")),
    (("h100",), Peaks("NVIDIA H100 SXM", 67.0, 494.5, 989.5, 989.5, 3.35, _H100 + ", SXM column")),
    (("a100", "80gb", "pcie"), Peaks("NVIDIA A100 80GB PCIe", 19.5, 156.0, 312.0, 312.0, 1.935, _A100)),
    (("a100", "80gb"), Peaks("NVIDIA A100 80GB SXM", 19.5, 156.0, 312.0, 312.0, 2.039, _A100)),
    (("a100",), Peaks("NVIDIA A100 40GB", 19.5, 156.0, 312.0, 312.0, 1.555, _A100)),
    (("l40s",), Peaks("NVIDIA L40S", 91.6, 183.0, 366.5, 366.5, 0.864, "NVIDIA L40S datasheet (2023): sparsity figures halved")),
    (("l4",), Peaks("NVIDIA L4", 30.3, 60.0, 121.0, 121.0, 0.300, "NVIDIA L4 datasheet (2023): sparsity figures halved")),
    (("a10",), Peaks("NVIDIA A10", 31.2, 62.5, 125.0, 125.0, 0.600, "NVIDIA A10 datasheet (2021): sparsity figures halved")),
    (("t4",), Peaks("NVIDIA T4", 8.1, None, None, 65.0, 0.320,
                    "NVIDIA T4 datasheet (2019): Turing has no TF32 or bf16 tensor cores; fp16 mixed precision 65 TFLOP/s")),
    (("v100", "pcie"), Peaks("NVIDIA V100 PCIe", 14.0, None, None, 112.0, 0.900,
                             "NVIDIA V100 datasheet (2020), PCIe: Volta has no TF32 or bf16 tensor cores")),
    (("v100",), Peaks("NVIDIA V100 SXM2", 15.7, None, None, 125.0, 0.900,
                      "NVIDIA V100 datasheet (2020), SXM2: Volta has no TF32 or bf16 tensor cores")),
)


def device_peaks(device_name: str) -> Peaks | None:
    """The datasheet ceilings of the GPU called ``device_name`` (as ``torch.cuda.get_device_name()`` spells it),
    or None when it is not in :data:`TABLE`."""
    import re

    words = set(re.split(r"[^a-z0-9]+", str(device_name).lower()))
    for keys, peaks in TABLE:
        if all(k in words for k in keys):
            return peaks
    return None


def measured_peaks(profile) -> Peaks:  # noqa: ANN001 - a helpers.capability.DeviceProfile
    """Ceilings from a device probe (:func:`helpers.capability.probe`: a large GEMM in each precision, a device copy)
    for a GPU the table does not know: what this GPU reached, a lower roof than its datasheet's."""
    t = profile.gemm_tflops
    return Peaks(profile.name + " (measured)", t.get("fp32", float("nan")), t.get("tf32"), t.get("bf16"), t.get("fp16"),
                 profile.memory_gbps / 1000, f"measured on this machine: {profile.cite}")


#: The device the course's GPU recordings were made on (data/manifest.json: "NVIDIA H200").
RECORDED = device_peaks("NVIDIA H200")


def attainable(intensity: float, peak_flops: float, peak_bytes_per_s: float) -> float:
    """The roofline: FLOP/s a kernel of ``intensity`` FLOP/byte can reach at most on this device."""
    return min(peak_flops, intensity * peak_bytes_per_s)


def figure(peak_flops: float, peak_bytes_per_s: float, points: dict[str, tuple[float, float]], title: str = "roofline"):
    """The roofline of one device (``peak_flops`` FLOP/s, ``peak_bytes_per_s``) with ``points``:
    ``{label: (intensity FLOP/byte, achieved FLOP/s)}``. Returns a matplotlib Figure."""
    import numpy as np

    from .lanes import _plt

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=100)
    ridge = peak_flops / peak_bytes_per_s
    finite = [p for p in points.values() if all(np.isfinite(v) and v > 0 for v in p)]
    lo = min([ridge / 100] + [p[0] / 3 for p in finite])
    hi = max([ridge * 30] + [p[0] * 3 for p in finite])
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    ax.loglog(x, np.minimum(peak_flops, x * peak_bytes_per_s) / 1e12, color="0.2", lw=2, label="roofline (datasheet peaks)")
    ax.axvline(ridge, color="0.6", ls=":", lw=1)
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, peak_flops / 1e12 / 30), textcoords="offset points", xytext=(4, 0),
                fontsize=8, color="0.4")
    for label, (ai, achieved) in points.items():
        if np.isfinite(ai) and np.isfinite(achieved) and ai > 0 and achieved > 0:
            ax.plot([ai], [achieved / 1e12], "o", ms=7, fillstyle="none", mew=2)
            ax.annotate(label, (ai, achieved / 1e12), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of memory traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
