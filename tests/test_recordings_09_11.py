"""The recordings labs 09-11 read on the CPU track: listed with how they were made, found by the course's accessors,
and the nsys backtrace summary read by operator."""

from __future__ import annotations

import json

import pytest

from helpers import course, syncscan
from helpers.errors import TraceError

NEW = {("memory", "optimizers", "measurements"), ("memory", "fragmentation", "measurements"),
       ("memory", "oom", "torch-memory-snapshot"), ("memory", "oom", "oom-message"), ("callsite", "broken", "torch-json"),
       ("callsite", "fixed", "torch-json"), ("callsite", "sync_debug", "sync-debug-warnings"),
       ("callsite", "nsys_backtraces", "nsys-rep"), ("callsite", "nsys_backtraces", "nsys-backtrace-summary"),
       ("env", "launch_blocking", "torch-json"), ("env", "launch_blocking", "measurements")}


@pytest.mark.parametrize("key", sorted(NEW))
def test_each_recording_is_listed_with_how_it_was_made_and_ships(key):
    e = course.recording(*key)
    assert (e["device"], e["torch"], e["date"]) == ("NVIDIA H200", "2.11.0+cu130", "2026-12-05") and e["command"]
    assert course.recording_path(*key).is_file()


def test_the_kernel_recordings_are_traces_with_their_step_times():
    for w, variants in (("shapes", ("vocab_50257", "vocab_50304", "conv_nchw", "conv_channels_last")), ("attention", ("eager", "sdpa"))):
        for v in variants:
            e = course.entry(w, v)
            assert e["device"] == "NVIDIA H200" and e["date"] == "2026-12-05" and e["step_ms"] > 0
            assert len(course.recorded(w, v).events) == e["events"]


def test_recording_refuses_what_is_not_listed_in_one_line():
    with pytest.raises(TraceError, match="no recording of memory:oom in format 'nsys-rep'.*oom-message"):
        course.recording("memory", "oom", "nsys-rep")
    with pytest.raises(TraceError, match="of nothing: none"):
        course.recording("nothing", "x", "measurements")
    with pytest.raises(TraceError):
        course.recording_path("memory", 3, "measurements")  # type: ignore[arg-type]


def test_recording_hands_out_a_copy():
    course.recording("memory", "oom", "oom-message")["file"] = "elsewhere"
    assert course.recording("memory", "oom", "oom-message")["file"] == "memory__oom__h200.txt"


def _chain(*frames: str) -> dict:
    return {"call": "cudaStreamSynchronize", "frames": ["0x7f01", "cudaStreamSynchronize", *frames, "_start"]}


def test_backtrace_sites_names_the_outermost_operator_and_its_caller():
    summary = {"calls": [
        _chain("at::native::item(at::Tensor const&)", "at::_ops::_local_scalar_dense::call(at::Tensor const&)",
               "at::_ops::item::call(at::Tensor const&)", "torch::autograd::THPVariable_item(_object*, _object*)",
               "_PyEval_EvalFrameDefault"),
        _chain("at::_ops::nonzero::call(at::Tensor const&)", "at::_ops::_index_put_impl_::call(at::Tensor&)",
               "torch::autograd::generated::IndexBackward0_apply_functional(x)", "torch::autograd::Engine::thread_main()"),
        _chain("at::_ops::item::call(at::Tensor const&)", "torch::autograd::THPVariable_item(_object*, _object*)"),
        {"call": "cudaDeviceSynchronize", "frames": ["c10::cuda::device_synchronize()", "THCPModule_cudaSynchronize(_object*, _object*)"]},
    ]}
    t = syncscan.backtrace_sites(summary)
    rows = {(r.call, r.operator, r.caller): r.count for r in t.itertuples()}
    assert rows == {("cudaStreamSynchronize", "item", "THPVariable_item"): 2,
                    ("cudaStreamSynchronize", "_index_put_impl_", "autograd engine (IndexBackward0)"): 1,
                    ("cudaDeviceSynchronize", "(none)", "THCPModule_cudaSynchronize"): 1}
    assert list(t["count"]) == sorted(t["count"], reverse=True)
    assert syncscan.backtrace_sites({"calls": []}).empty


def test_backtrace_sites_on_the_shipped_summary_and_refusals():
    summary = json.loads(course.recording_path("callsite", "nsys_backtraces", "nsys-backtrace-summary").read_text())
    t = syncscan.backtrace_sites(summary)
    assert t["count"].sum() == len(summary["calls"]) == 50
    for bad in ([], {"calls": "x"}, {"calls": [{"call": "c"}]}, {"nothing": 1}):
        with pytest.raises(TraceError, match="backtrace summary"):
            syncscan.backtrace_sites(bad)
