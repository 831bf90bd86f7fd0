"""Lab 11 (call sites and the environment): each check passes the right work and refuses what a learner in a hurry
hands in, with what is missing named."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import own_capture

import helpers
from helpers import checks, course, environment
from helpers.checks import CheckFailed, lab11
from helpers.workloads import callsite, trainkit

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    return helpers.capture(callsite.make_step("broken", CPU), steps=2, warmup=1, with_stack=True,
                           out_dir=tmp_path_factory.mktemp("runs"))


def sync_sites(trace):
    ev = trace.events
    frames = ev[ev["kind"] == "python"]
    own = frames[~frames["name"].str.startswith(("torch/", "<built-in"))]
    counts = {}
    for _, r in checks.sync_rows(trace).iterrows():
        above = own[(own["rank"] == r["rank"]) & (own["tid"] == r["tid"]) & (own["start_us"] <= r["start_us"])
                    & (own["end_us"] >= r["end_us"])]
        site = above.sort_values("start_us")["name"].iloc[-1] if len(above) else "(no Python frame)"
        counts[site] = counts.get(site, 0) + 1
    return {k: v / len(trace.steps) for k, v in counts.items()}


def _inner(fn):
    """The function defined inside ``fn`` (a step function's ``step``)."""
    return next(c for c in fn.__code__.co_consts if hasattr(c, "co_firstlineno"))


def _frame(module, fn) -> str:
    """The profiler's name for a Python frame of ``fn``: the module's path from the repository root, its first line."""
    code = getattr(fn, "__code__", fn)
    return f"{module.__name__.replace('.', '/')}.py({code.co_firstlineno}): {code.co_name}"


def _refused(fn, *args, match: str = ""):
    with pytest.raises(CheckFailed, match=match):
        fn(*args)


def test_the_loops_syncs_are_in_the_library_and_the_scan_cannot_see_them(broken):
    from helpers import syncscan

    assert syncscan.scan(callsite.broken_step) == []
    sites = lab11._reference_sites(broken)
    assert sites == {_frame(trainkit, trainkit.masked_cross_entropy): 2.0,
                     _frame(callsite, _inner(callsite.broken_step)): 1.0,  # the mask index's backward
                     _frame(trainkit, trainkit.clip_gradients): 1.0,
                     _frame(trainkit, trainkit.LossMeter.update): 2.0}


def test_sync_sites_attribution_is_judged_on_the_learners_capture_and_another_loop(broken):
    assert checks.check_sync_sites(sync_sites, broken).startswith("passed")

    def outermost(trace):  # the outermost frame: the capture's own function, not the code that synced
        ev = trace.events
        frames = ev[ev["kind"] == "python"]
        out = {}
        for _, r in checks.sync_rows(trace).iterrows():
            above = frames[(frames["tid"] == r["tid"]) & (frames["start_us"] <= r["start_us"]) & (frames["end_us"] >= r["end_us"])]
            k = above.sort_values("start_us")["name"].iloc[0]
            out[k] = out.get(k, 0) + 1 / len(trace.steps)
        return out

    def with_builtins(trace):  # the innermost frame of all, built-ins included
        ev = trace.events
        frames = ev[ev["kind"] == "python"]
        out = {}
        for _, r in checks.sync_rows(trace).iterrows():
            above = frames[(frames["tid"] == r["tid"]) & (frames["start_us"] <= r["start_us"]) & (frames["end_us"] >= r["end_us"])]
            k = above.sort_values("start_us")["name"].iloc[-1]
            out[k] = out.get(k, 0) + 1 / len(trace.steps)
        return out

    answer = sync_sites(broken)

    def memorised(trace):  # the answer for the lab's loop, typed in
        return dict(answer)

    def totals(trace):  # counts over the capture, not a step
        return {k: v * len(trace.steps) for k, v in sync_sites(trace).items()}

    for wrong, words in ((outermost, "innermost"), (with_builtins, "innermost"), (memorised, "loop the check captured"),
                         (totals, "number of steps")):
        _refused(checks.check_sync_sites, wrong, broken, match=words)
    loaded = helpers.load(broken.source)  # the file this kernel's capture wrote, loaded again: still its capture
    assert checks.check_sync_sites(sync_sites, loaded).startswith("passed")


def test_the_backtrace_command_needs_cuda_sync_backtraces_python_frames_and_sampling():
    right = ("nsys profile --trace=cuda,nvtx,osrt --cudabacktrace=sync --python-backtrace=cuda -o callsite_broken "
             "python -m helpers.workloads.callsite --variant broken --steps 5")
    assert checks.check_backtrace_command(right).startswith("passed")
    assert checks.check_backtrace_command(right.replace("--cudabacktrace=sync", "--cudabacktrace all:500")).startswith("passed")
    for wrong, words in ((right.replace("cuda,nvtx,osrt", "nvtx,osrt"), "trace CUDA"),
                         (right.replace("--cudabacktrace=sync", "--cudabacktrace=kernel"), "synchronizing"),
                         (right.replace(" --python-backtrace=cuda", ""), "Python frames"),
                         (right.replace("-o callsite_broken", "-o callsite_broken --sample=none"), "sampling"),
                         (right.replace("helpers.workloads.callsite", "train"), "lab's loop"),
                         ("ncu " + right[5:], "nsys profile")):
        _refused(checks.check_backtrace_command, wrong, match=words)


def my_step(model, opt, xs, ys, log):
    running = {"total": torch.zeros(()), "count": torch.zeros(())}

    def step(i):
        x, y = xs[i % len(xs)], ys[i % len(ys)]
        with helpers.annotate("forward"):
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=trainkit.IGNORE)
        with helpers.annotate("backward"):
            loss.backward()
        with helpers.annotate("optimizer"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), callsite.MAX_NORM)
            opt.step()
            opt.zero_grad(set_to_none=True)
        with helpers.annotate("logging"):
            ok = torch.isfinite(loss.detach())
            running["total"] = running["total"] + torch.where(ok, loss.detach(), 0.0)
            running["count"] = running["count"] + ok
            if (i + 1) % callsite.LOG_EVERY == 0:
                log.append(f"loss={(running['total'] / running['count']).item():.4f}")
                running["total"], running["count"] = torch.zeros(()), torch.zeros(())

    return step


def test_the_fixed_loop_must_train_the_same_and_not_sync(broken, tmp_path):
    after = helpers.capture(my_step(*callsite.setup(CPU), []), steps=callsite.LOG_EVERY, warmup=1, out_dir=tmp_path)
    assert checks.check_callsites_fixed(my_step, broken, after).startswith("passed")

    def no_clipping(model, opt, xs, ys, log):
        def step(i):
            x, y = xs[i % len(xs)], ys[i % len(ys)]
            F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=trainkit.IGNORE).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step

    def padding_counted(model, opt, xs, ys, log):  # the loss over every position, padding clamped to a class
        def step(i):
            x, y = xs[i % len(xs)], ys[i % len(ys)]
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten().clamp(min=0))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), callsite.MAX_NORM)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if (i + 1) % callsite.LOG_EVERY == 0:
                log.append(f"loss={loss.item():.4f}")
        return step

    def wraps_the_course(model, opt, xs, ys, log):
        return callsite.fixed_step(model, opt, xs, ys, log)

    for wrong, words in ((no_clipping, "update differs"), (padding_counted, "update differs"), (wraps_the_course, "course's own")):
        _refused(checks.check_callsites_fixed, wrong, broken, after, match=words)
    still = own_capture(helpers.load(broken.source))
    _refused(checks.check_callsites_fixed, my_step, broken, still, match="still syncs")


def environment_pitfalls(s):
    found = set()
    if s["env"].get("CUDA_LAUNCH_BLOCKING", "0").strip() not in ("", "0"):
        found.add("launch_blocking")
    lo = s["loader"]
    if lo["num_workers"] > 0 and s["dev_shm_free_bytes"] is not None and \
            s["dev_shm_free_bytes"] < lo["num_workers"] * lo["prefetch_factor"] * lo["batch_bytes"]:
        found.add("shm_too_small")
    if s["torch_threads"] * s["processes_per_node"] > s["cores"]:
        found.add("oversubscribed")
    slowing = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
    if s["gpu"] is not None and slowing & set(s["gpu"]["clock_reasons"]):
        found.add("throttled")
    return found


def test_the_environment_checklist_on_thirteen_machines():
    assert checks.check_environment_pitfalls(environment_pitfalls).startswith("passed")

    def any_launch_blocking(s):  # "0" flagged too
        out = environment_pitfalls(s) - {"launch_blocking"}
        return out | ({"launch_blocking"} if "CUDA_LAUNCH_BLOCKING" in s["env"] else set())

    def threads_against_cpu_count(s):  # ignores the processes on the node
        out = environment_pitfalls(s) - {"oversubscribed"}
        return out | ({"oversubscribed"} if s["torch_threads"] > s["cores"] else set())

    def idle_is_throttled(s):
        out = environment_pitfalls(s)
        return out | ({"throttled"} if s["gpu"] and s["gpu"]["clock_reasons"] else set())

    def no_shm_is_too_small(s):
        out = environment_pitfalls(s)
        return out | ({"shm_too_small"} if s["dev_shm_free_bytes"] is None and s["loader"]["num_workers"] else set())

    for wrong, words in ((any_launch_blocking, "CUDA_LAUNCH_BLOCKING=0"), (threads_against_cpu_count, "8 ranks"),
                         (idle_is_throttled, "idle GPU"), (no_shm_is_too_small, "macOS")):
        _refused(checks.check_environment_pitfalls, wrong, match=words)


def test_the_snapshot_reads_this_machine_and_the_clock_reasons_decode():
    s = environment.snapshot(num_workers=2, batch_bytes=1000)
    assert s["cores"] >= 1 and s["torch_threads"] >= 1 and s["loader"]["num_workers"] == 2
    assert environment.clock_reasons(0x1 | 0x20) == ["gpu_idle", "sw_thermal_slowdown"]
    assert lab11._reference_pitfalls(s) <= set(checks.PITFALLS)


def test_sync_rows_on_a_gpu_recording_are_its_sync_calls():
    h200 = course.recorded("sync_stall", "broken")
    rows = checks.sync_rows(h200)
    assert len(rows) and rows["name"].str.startswith("cuda").all()
