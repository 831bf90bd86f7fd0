"""The GPU track judges speed against the learner's device (helpers.capability): recorded or published figures
of a T4-, an A100- and an H100/H200-class GPU are injected here, since no GPU runs the tests."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from helpers import capability, checks, course
from helpers.capability import DeviceProfile
from helpers.checks import CheckFailed, behaviour, lab08

PROFILES = capability.reference_profiles()
FP32_TRACE = course.recorded("gpu_bound", "fp32")
SHARE = capability.gemm_step_share(FP32_TRACE)
#: A GPU without tensor cores (Pascal, GTX 1080: FP32 8.9 TFLOPS, FP16 at 1/64 of it; NVIDIA GP104 whitepaper).
PASCAL = DeviceProfile("NVIDIA GeForce GTX 1080", (6, 1), {"fp32": 8.9, "fp16": 0.14}, 320.0, "published", "GP104")


def test_the_h200_figures_are_the_recordings_own():
    """data/device_profiles.json's H200 GEMM figures are what its recorded kernels show (python tools/claims.py device)."""
    h200 = PROFILES["h200"]
    assert h200.source == "recorded" and h200.compute_capability == (9, 0)
    for precision in capability.PRECISIONS:
        got = capability.recorded_gemm_tflops(course.recorded("gpu_bound", precision))
        assert round(got, 1) == h200.gemm_tflops[precision], precision
    assert round(SHARE, 3) == 0.874
    assert capability.recorded_profile() == h200


def test_device_classes_know_what_their_hardware_has():
    t4, a100, h100 = PROFILES["t4"], PROFILES["a100"], PROFILES["h100"]
    assert t4.tensor_cores and not t4.native_bf16 and not t4.has_tf32 and t4.lowp == "fp16"
    assert math.isnan(t4.gemm_gain("bf16")) and t4.gemm_gain("fp16") == pytest.approx(65 / 8.1)
    assert a100.native_bf16 and a100.has_tf32 and a100.lowp == "bf16" and a100.gemm_gain("tf32") == pytest.approx(8.0)
    assert h100.lowp == "bf16" and not PASCAL.tensor_cores
    assert all(p.cite and p.source in ("published", "recorded") for p in PROFILES.values())
    assert "compute capability 7.5" in t4.describe() and "fp16 65.0" in t4.describe()
    assert DeviceProfile.from_dict(t4.to_dict()) == t4
    from helpers import roofline  # one home for datasheet figures: the profiles are roofline's table
    assert h100.gemm_tflops["bf16"] == roofline.device_peaks("NVIDIA H100 80GB HBM3").bf16


def test_the_h200_bar_is_where_the_recordings_put_it():
    """bf16: the GEMMs 15.2x faster, 87% of the step -> up to 5.4x, bar 3.2x; the measured 4.6x passes."""
    exp = capability.precision_expectation(PROFILES["h200"], SHARE)
    assert exp.precision == "bf16" and round(exp.gemm_gain, 1) == 15.2
    assert round(exp.expected, 1) == 5.4 and round(exp.required, 1) == 3.2 and exp.showable
    measured = {v: course.entry("gpu_bound", v)["step_ms"] for v in ("fp32", "bf16", "tf32")}
    assert capability.precision_verdict(exp, measured["fp32"], measured["bf16"])[0]
    tf32 = capability.precision_expectation(PROFILES["h200"], SHARE, "tf32")
    assert round(tf32.expected, 1) == 3.8 and capability.precision_verdict(tf32, measured["fp32"], measured["tf32"])[0]
    ok, message = capability.precision_verdict(exp, 25.8, 13.0)
    assert not ok and "1.98x" in message and "3.22x" in message and "784.1 TFLOP/s" in message


@pytest.mark.parametrize("key, good, bad", [("t4", 2.8, 1.6), ("a100", 3.6, 2.0), ("h100", 3.6, 2.0), ("h200", 4.6, 2.0)])
def test_each_class_is_judged_by_its_own_gain(key, good, bad):
    """A T4 step 2.8x faster is a correct fp16 fix there (its GEMMs gain 8x, not 15x): the H200's fixed 3x refused it."""
    exp = capability.precision_expectation(PROFILES[key], SHARE)
    assert exp.showable and 1.5 < exp.required < good
    assert capability.precision_verdict(exp, 100.0, 100.0 / good)[0]
    ok, message = capability.precision_verdict(exp, 100.0, 100.0 / bad)
    assert not ok and PROFILES[key].name in message and f"{exp.required:.2f}x" in message


def test_a_device_that_cannot_show_the_gain_is_judged_on_structure():
    exp = capability.precision_expectation(PASCAL, SHARE)
    assert exp.precision == "fp16" and not exp.showable
    ok, message = capability.precision_verdict(exp, 100.0, 120.0)
    assert ok and "not judged on speed" in message and "cannot show" in message and "structure" in message
    assert "no tensor cores" in capability.tensor_core_expectation(PASCAL)
    assert capability.tensor_core_expectation(PROFILES["t4"]) is None


def test_bf16_on_a_gpu_without_native_bf16_is_told_to_take_fp16():
    t4 = DeviceProfile("NVIDIA T4", (7, 5), {"fp32": 4.5, "bf16": 3.9, "fp16": 26.0}, 250.0, "probe")
    ok, message = capability.precision_verdict(capability.precision_expectation(t4, SHARE), 280.0, 265.0)
    assert not ok and "no native bf16" in message and "GradScaler" in message and "3.9 TFLOP/s" in message


@pytest.fixture()
def on_device(monkeypatch):
    """Run lab 08's live checks as if on the given device: the probe is replaced by its figures."""
    def use(profile: DeviceProfile) -> None:
        monkeypatch.setattr(capability, "device_profile", lambda device=None: profile)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(lab08, "own_capture_problem", lambda *a, **k: None)
    return use


def test_the_speed_check_uses_the_probe_on_the_gpu_track(on_device):
    on_device(PROFILES["t4"])
    assert "NVIDIA T4" in checks.check_precision_speedup(280.0, 100.0, live=True, fp32_trace=FP32_TRACE)
    with pytest.raises(CheckFailed, match="NVIDIA T4"):
        checks.check_precision_speedup(280.0, 200.0, live=True, fp32_trace=FP32_TRACE)
    on_device(PASCAL)
    assert "not judged on speed" in checks.check_precision_speedup(100.0, 110.0, live=True, fp32_trace=FP32_TRACE)
    with pytest.raises(CheckFailed, match="fp32_trace"):
        checks.check_precision_speedup(100.0, 50.0, live=True)
    # the fast capture handed in as the fp32 one would shrink the GEMM share, and the bar with it
    with pytest.raises(CheckFailed, match="fp32 FFMA"):
        checks.check_precision_speedup(100.0, 110.0, live=True, fp32_trace=course.recorded("gpu_bound", "bf16"))


def test_without_tensor_cores_the_kernel_check_asks_only_that_gemms_left_fp32(on_device, tmp_path):
    import shutil

    from conftest import own_capture

    import helpers

    mine = {}
    for v in ("fp32", "bf16"):
        shutil.copyfile(course.DATA / f"gpu_bound__{v}__h200.json.gz", tmp_path / f"{v}.json.gz")
        mine[v] = own_capture(helpers.load(tmp_path / f"{v}.json.gz"), of=("gpu_bound",))  # as if captured here
    fp32 = own_capture(FP32_TRACE, of=("gpu_bound",), mine=False)
    on_device(PASCAL)
    with pytest.raises(CheckFailed, match="no tensor cores.*still on them"):
        checks.check_tensor_cores(fp32, mine["fp32"])
    assert checks.check_tensor_cores(fp32, mine["bf16"]).startswith("passed")


def test_tf32_switch_works_with_either_api():
    """PyTorch 2.9+ refuses to read allow_tf32 once fp32_precision is set: the course reads and sets through one place."""
    was = capability.tf32_enabled()
    try:
        capability.set_tf32(True)
        assert capability.tf32_enabled()
        if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
            assert torch.backends.cuda.matmul.fp32_precision == "tf32"
        capability.set_tf32(False)
        assert not capability.tf32_enabled()
        torch.backends.cuda.matmul.allow_tf32 = True  # a learner on the older switch
        assert capability.tf32_enabled()
    finally:
        capability.set_tf32(was)
    assert capability.lowp_dtype("cpu") == torch.bfloat16


def _fp16_step(scaler, per_optimizer=None):
    def step(model, opt, x, y):
        nonlocal scaler
        if per_optimizer is not None:  # a fresh scaler for each fresh model, as a training script has
            scaler = per_optimizer.setdefault(id(opt), torch.amp.GradScaler("cpu", init_scale=2.0**50, backoff_factor=2.0**-40))
        with torch.autocast(x.device.type, dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def test_fp16_needs_a_scaler_and_is_compared_with_the_same_skipped_steps():
    """A T4's step: fp16 + GradScaler, compared with the course's fp16 step and a GradScaler of the same settings,
    so a step the scaler skips (its gradients overflowed) is skipped in the reference too; fp16 without a scaler is refused."""
    cpu = torch.device("cpu")
    with pytest.raises(CheckFailed, match="without a GradScaler"):
        checks.check_same_training(_fp16_step(None), cpu)
    assert checks.check_same_training(_fp16_step(torch.amp.GradScaler("cpu")), cpu).startswith("passed")
    # a scale so large that the first gradients overflow: that step is skipped, the scale falls, training goes on
    behaviour._REFERENCES.clear()
    assert checks.check_same_training(_fp16_step(None, per_optimizer={}), cpu).startswith("passed")
    (settings, ref), = ((k[3], v) for k, v in behaviour._REFERENCES.items())
    assert settings[0] == 2.0**50 and not ref.records[0].moved, "the reference (the learner's scaler settings) skipped it too"

    def skips_on_purpose(model, opt, x, y):  # a scaler that never overflows, and a step left out by hand
        opt.calls = getattr(opt, "calls", 0) + 1
        if opt.calls == 2:
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.cross_entropy(model(x), y)
            torch.amp.GradScaler("cpu").scale(loss)
            opt.zero_grad(set_to_none=True)
            return loss.detach()
        return _fp16_step(torch.amp.GradScaler("cpu"))(model, opt, x, y)

    with pytest.raises(CheckFailed, match="unchanged at step.*yours did not"):
        checks.check_same_training(skips_on_purpose, cpu)


def test_probe_timings_become_figures():
    """The probe's arithmetic (its timings need a GPU): the H200's fp32 GEMM took 1.331 ms a launch in the recording."""
    p = capability.profile_from_times("NVIDIA H200", (9, 0), {"fp32": 1.331, "bf16": 0.0876}, 0.1398)
    assert round(p.gemm_tflops["fp32"], 1) == 51.6 and round(p.gemm_tflops["bf16"], 0) == 784
    assert round(p.memory_gbps) == 3840 and p.source == "probe" and p.lowp == "bf16"
    with pytest.raises(Exception, match="CUDA GPU"):
        if not torch.cuda.is_available():
            capability.probe()
        else:
            raise RuntimeError("a CUDA GPU is here: the probe itself runs in lab 08")
