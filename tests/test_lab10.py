"""Lab 10 (GPU memory): every check passes the right work and refuses the wrong work a learner in a hurry hands
in; the out-of-memory rules give each published message the cause judged by hand."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from helpers import checks, course, memory
from helpers.checks import CheckFailed, lab10

MiB = 2**20


# --- the learner's functions, right ------------------------------------------------------------------
def memory_state(snap):
    seg, bl = memory.segments(snap), memory.blocks(snap)
    free = bl[bl["state"] == "inactive"]["size"]
    return {"reserved_mib": seg["total_size"].sum() / MiB,
            "allocated_mib": bl.loc[bl["state"] == "active_allocated", "size"].sum() / MiB,
            "free_cached_mib": free.sum() / MiB, "largest_free_block_mib": (free.max() if len(free) else 0) / MiB}


def allocated_over_time(events):
    delta = events["size"].where(events["action"] == "alloc", 0) - events["size"].where(events["action"] == "free_completed", 0)
    return pd.Series(delta.cumsum().to_numpy(), index=events["time_us"])


def transient_bytes(work, device):
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        work()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - start
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            work()
        prof.export_chrome_trace(str(Path(tmp) / "t.json"))
        a = memory.allocations(Path(tmp) / "t.json")
    return a["bytes"].cumsum().max() if len(a) else 0


def attach_optimizer_in_backward(model, lr):
    opts = {}
    for p in model.parameters():
        opt = torch.optim.Adam([p], lr=lr)

        def hook(param, opt=opt):
            opt.step()
            opt.zero_grad(set_to_none=True)

        p.register_post_accumulate_grad_hook(hook)
        opts[p] = opt
    return opts


def oom_cause(f):
    this = f["this_process"] if f["this_process"] is not None else f["allocated"] + f["reserved_unallocated"]
    if f["capacity"] - f["free"] - this >= 0.25 * f["capacity"]:
        return "other_processes"
    if f["requested"] > f["free"] + f["reserved_unallocated"]:
        return "too_big"
    if f["reserved_unallocated"] >= f["requested"]:
        return "fragmentation"
    return "too_much"


def _refused(fn, *args, match: str = ""):
    with pytest.raises(CheckFailed, match=match):
        fn(*args)


# --- 1. allocated and reserved ------------------------------------------------------------------------
def test_memory_state_on_the_shipped_and_built_snapshots():
    assert checks.check_memory_state(memory_state).startswith("passed")

    def pending_counted_free(snap):
        out = memory_state(snap)
        bl = memory.blocks(snap)
        out["free_cached_mib"] = bl.loc[bl["state"] != "active_allocated", "size"].sum() / MiB
        return out

    def allocated_from_segments(snap):  # allocated_size of the segments: right, unless a block waits on a stream
        return {**memory_state(snap), "allocated_mib": memory.segments(snap)["allocated_size"].sum() / MiB + 1}

    def in_bytes(snap):
        return {k: v * MiB for k, v in memory_state(snap).items()}

    _refused(checks.check_memory_state, pending_counted_free, match="pending")
    _refused(checks.check_memory_state, allocated_from_segments, match="active_allocated")
    _refused(checks.check_memory_state, in_bytes, match="million")
    real = lab10._reference_state(memory.load_snapshot(course.DATA / "gpu_bound__bf16__h200.memsnap.pickle.gz"))
    assert round(real["reserved_mib"]) == 4022 and round(real["allocated_mib"]) == 1732 and real["largest_free_block_mib"] == 64


# --- 2. the timeline and its peak ---------------------------------------------------------------------
def test_allocated_over_time_counts_alloc_and_free_completed_only():
    assert checks.check_allocated_over_time(allocated_over_time).startswith("passed")

    def at_free_requested(events):
        delta = events["size"].where(events["action"] == "alloc", 0) - events["size"].where(events["action"] == "free_requested", 0)
        return pd.Series(delta.cumsum().to_numpy(), index=events["time_us"])

    def every_event(events):
        sign = events["action"].map(lambda a: -1 if "free" in a else 1)
        return pd.Series((sign * events["size"]).cumsum().to_numpy(), index=events["time_us"])

    def allocs_only(events):
        return pd.Series(events["size"].where(events["action"] == "alloc", 0).cumsum().to_numpy(), index=events["time_us"])

    for wrong in (at_free_requested, every_event, allocs_only):
        _refused(checks.check_allocated_over_time, wrong, match="free_completed")


def test_the_snapshots_peak_is_the_gradients_and_foreach_adams_temporaries():
    snap = memory.load_snapshot(course.DATA / "gpu_bound__bf16__h200.memsnap.pickle.gz")
    want = lab10._reference_peak(snap)
    assert want["phase"] == "optimizer" and round(want["peak_mib"], 1) == 768.9
    assert set(want["owners"]) == {memory.AUTOGRAD_ENGINE, "adam.py:791 _multi_tensor_adam"}
    assert all(abs(v - 384.4) < 0.1 for v in want["owners"].values())  # each exactly the parameters' bytes
    assert checks.check_peak_reading(want, snap).startswith("passed")
    for wrong, words in (({**want, "phase": "backward"}, "phase"), ({**want, "peak_mib": 4022.0}, "peak_mib"),
                         ({**want, "owners": {"adam.py:791 _multi_tensor_adam": 384.4}}, "owners")):
        _refused(checks.check_peak_reading, wrong, snap, match=words)


# --- 3. transients and the optimizer in backward -------------------------------------------------------
def test_transient_bytes_measures_what_is_live_at_once():
    assert checks.check_transient_bytes(transient_bytes, "cpu").startswith("passed")

    def net_change(work, device):  # what is left at the end, not the peak
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            work()
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            prof.export_chrome_trace(str(Path(tmp) / "t.json"))
            return memory.allocations(Path(tmp) / "t.json")["bytes"].sum()

    def sum_of_allocations(work, device):
        import tempfile
        from pathlib import Path

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            work()
        with tempfile.TemporaryDirectory() as tmp:
            prof.export_chrome_trace(str(Path(tmp) / "t.json"))
            a = memory.allocations(Path(tmp) / "t.json")
        return a.loc[a["bytes"] > 0, "bytes"].sum()

    _refused(checks.check_transient_bytes, net_change, "cpu", match="largest running total")
    _refused(checks.check_transient_bytes, sum_of_allocations, "cpu", match="largest running total")
    _refused(checks.check_transient_bytes, lambda work, device: 3 * MiB, "cpu", match="largest running total")


def test_optimizer_in_backward_trains_like_adam_and_frees_each_gradient():
    assert checks.check_optimizer_in_backward(attach_optimizer_in_backward).startswith("passed")

    def keeps_grads(model, lr):  # grads accumulate from step to step: the training differs
        for p in model.parameters():
            opt = torch.optim.Adam([p], lr=lr)
            p.register_post_accumulate_grad_hook(lambda param, opt=opt: opt.step())
        return None

    def zeroes_in_place(model, lr):  # the same training, every gradient kept alive as zeros
        for p in model.parameters():
            opt = torch.optim.Adam([p], lr=lr)

            def hook(param, opt=opt):
                opt.step()
                opt.zero_grad(set_to_none=False)

            p.register_post_accumulate_grad_hook(hook)

    def one_optimizer_at_the_last_hook(model, lr):  # all gradients kept until the first layer's arrives
        params = list(model.parameters())
        opt = torch.optim.Adam(params, lr=lr)

        def hook(param):
            opt.step()
            opt.zero_grad(set_to_none=True)

        params[0].register_post_accumulate_grad_hook(hook)

    def sgd(model, lr):
        for p in model.parameters():
            opt = torch.optim.SGD([p], lr=lr)

            def hook(param, opt=opt):
                opt.step()
                opt.zero_grad(set_to_none=True)

            p.register_post_accumulate_grad_hook(hook)

    def no_hooks(model, lr):
        return torch.optim.Adam(model.parameters(), lr=lr, fused=True)

    _refused(checks.check_optimizer_in_backward, keeps_grads, match="plain Adam")
    _refused(checks.check_optimizer_in_backward, zeroes_in_place, match="still hold a .grad")
    _refused(checks.check_optimizer_in_backward, one_optimizer_at_the_last_hook, match="not under")
    _refused(checks.check_optimizer_in_backward, sgd, match="plain Adam")
    _refused(checks.check_optimizer_in_backward, no_hooks, match="not moved")


# --- 4. out of memory ---------------------------------------------------------------------------------
#: Each published message's cause, judged by hand from its figures and its thread (what the poster or a maintainer
#: found): the rules of the lab must agree with every one.
HAND_JUDGED = {
    "m01": "too_big",          # 22.78 GiB asked with 12.73 free and 9.35 cached: one tensor bigger than all of it
    "m02": "fragmentation",    # 40.69 GiB reserved but unallocated, 35.60 asked: in pieces too small
    "m03": "too_big",          # 30.29 GiB on a 10.74 GiB GPU
    "m04": "too_big",          # 124.68 GiB on a 95.22 GiB GPU (the thread asks about flash-attention)
    "m05": "fragmentation",    # 2.30 GiB cached, 1.70 asked, 0 free
    "m06": "fragmentation",    # 737 MiB cached, 546 asked (the issue asks for expandable_segments by default)
    "m07": "too_much",         # 4.22 asked; 3.71 free + 0.75 cached is not one block: the program needs more
    "m08": "fragmentation",    # 8.71 GiB cached, 7.50 asked, after empty_cache() everywhere
    "m09": "fragmentation",    # 910 MiB cached, 158 asked, the GPU 97% full
    "m10": "fragmentation",    # 195 MiB cached, 22 asked, the GPU full
    "m11": "other_processes",  # 3.06 GiB reserved by PyTorch on a 7.93 GiB GPU with 25 MiB free
    "m12": "other_processes",  # 530 MiB reserved on an 11.17 GiB GPU with 12.5 MiB free (a maintainer's answer)
    "m13": "too_much",         # a 4 GiB GPU full of this process
    "m14": "too_much",         # 36 GiB allocated of 39.5, 321 MiB cached, 572 MiB asked
    "m15": "too_much",         # 75.3 GiB allocated of 79.2 (the PR reserves headroom)
    "m16": "too_big",          # 16 GiB asked with 0.5 GiB free or cached (vLLM's preallocated cache)
    "m17": "other_processes",  # 82 GiB of a 256 GiB GPU held by other tests (the PR reads the real free memory)
    "m18": "fragmentation",    # 410 MiB cached, 138 asked (PyTorch's own example for its new message)
}


def test_the_rules_give_every_published_message_its_hand_judged_cause():
    msgs = lab10.oom_messages()
    assert [m["id"] for m in msgs] == sorted(HAND_JUDGED)
    for m in msgs:
        f = memory.parse_oom(m["text"])
        assert f is not None and f["requested"] > 0 and f["capacity"] > 0, m["id"]
        assert lab10._reference_cause(f) == HAND_JUDGED[m["id"]], m["id"]
        assert m["source"].startswith("https://github.com/")
    assert {lab10._reference_cause(memory.parse_oom(m["text"])) for m in msgs} == {
        "too_big", "fragmentation", "too_much", "other_processes"}


def test_oom_triage_follows_the_rules_in_their_order():
    assert checks.check_oom_triage(oom_cause).startswith("passed")

    def fragmentation_first(f):
        return "fragmentation" if f["reserved_unallocated"] >= f["requested"] else oom_cause(f)

    def ignores_old_messages(f):
        this = f["this_process"] or 0
        return "other_processes" if f["capacity"] - f["free"] - this >= 0.25 * f["capacity"] else oom_cause(f)

    def always_fragmentation(f):
        return "fragmentation"

    for wrong in (fragmentation_first, ignores_old_messages, always_fragmentation):
        _refused(checks.check_oom_triage, wrong, match="rules")


def test_parse_oom_reads_both_wordings_and_refuses_other_text():
    new = memory.parse_oom(lab10.oom_messages()[13]["text"])
    assert new["this_process"] == round(37.46 * 2**30) and len(new["processes"]) == 4
    old = memory.parse_oom(lab10.oom_messages()[11]["text"])
    assert old["this_process"] is None and old["reserved_unallocated"] == round(530 * MiB) - round(505.96 * MiB)
    assert memory.parse_oom("RuntimeError: CUDA error: an illegal memory access was encountered") is None
    assert memory.parse_oom("Tried to allocate 2.00 MiB but nothing else") is None
