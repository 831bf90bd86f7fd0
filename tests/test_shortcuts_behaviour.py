"""The shortcuts of issue 29 ("Why" 3 and 5, and the course's own code of "Why" 2), one test each, written as a
learner in a hurry or a deliberate cheater would write them, run through the lab's own check: each is refused with
a message that names what is missing. The right work passing through the same checks is tested beside each lab
(tests/test_lab0N.py, test_same_kind.py, test_speed_judged.py) and by the solution notebooks.

The list, in the issue's order:
 behaviour   fp16 autocast without a GradScaler; a graph break "fixed" by deleting its statistic; save_on_cpu offered
             as activation checkpointing; an fp16 DDP comm hook that never divides by the world size; one that never
             copies its result back; an fp32 step plus one discarded bf16 call; a 20% learning-rate change
 course code the capstone's `fixed` step wrapped in a def; torch's own Adam inside the hand-written update, and the
             course's foreach loop as the fixed trace; the course's Net (and a subclass running its forward) as the
             graph-break fix; the course's train_step as the low-precision step; the course's Net(ckpt=True) as the
             checkpointed forward; the course's loader in a def; the course's step reached by a getattr of a string;
             PyTorch's own fp16_compress_hook as the hook the learner writes
 speed       num_workers=1 on 2 cores making the step 0.68x slower; a fix slower beyond noise on any core count; too
             few cores: the verdict says so, judges the structure and never accepts a larger wait (28% -> 30%)
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_checks import mine
from test_fake_fixes import real_mystery_step
from test_lab01 import _loader
from test_noise_band import _scaled
from test_same_kind import DeletesIt, KeepsIt, bf16_step, every_block_plain, fp32_and_one_bf16_call, with_lr

from helpers import checks
from helpers import metrics as m
from helpers.checks import CheckFailed, behaviour, lab01, lab02, lab05, speed
from helpers.course import recorded
from helpers.workloads import gpu_bound as gb

CPU = torch.device("cpu")


# --- behaviour against a tight reference of the same kind ------------------------------------------------------
def fp16_without_a_scaler(model, opt, x, y):
    with torch.autocast(x.device.type, dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def test_fp16_autocast_without_a_gradscaler_is_refused_with_the_reason():
    with pytest.raises(CheckFailed, match=r"(?i)autocasts to fp16 without a GradScaler: fp16's 5-bit exponent .*flushes "
                                          r"gradients under about 6e-8 to zero"):
        checks.check_same_training(fp16_without_a_scaler, CPU)


def test_a_graph_break_fixed_by_deleting_the_statistic_is_refused():
    with pytest.raises(CheckFailed, match=r"(?i)recorded 0 values of the statistic in 3 forwards: the fix keeps the "
                                          r"statistic .*deleting it is not a fix"):
        checks.check_break_fixed(DeletesIt)


def saved_on_cpu(model, x):  # "checkpointing": the activations moved to host memory, not recomputed
    with torch.autograd.graph.save_on_cpu():
        return every_block_plain(model, x)


def test_save_on_cpu_offered_as_checkpointing_is_refused():
    with pytest.raises(CheckFailed, match=r"(?i)keeps [\d.]+ MiB alive for backward .*saved-tensor hooks see only 0.0 MiB "
                                          r"of it: the activations are stored somewhere else \(save_on_cpu"):
        checks.check_activation_saving(saved_on_cpu, width=64, batch=128)


def test_an_fp32_step_plus_one_discarded_bf16_call_is_refused():
    with pytest.raises(CheckFailed, match=r"28 of the 32 Linear calls of your 4 steps ran in \['torch.float32'\] beside "
                                          r"\['bf16'\]: every Linear of the step runs in the one low precision"):
        checks.check_same_training(fp32_and_one_bf16_call, CPU)


def test_a_20_percent_learning_rate_change_is_refused_by_the_references_own_spread():
    with pytest.raises(CheckFailed, match=r"parameters moved 2\d\.\d% away from where the course's step in bf16 moved "
                                          r"them \(the tolerance, from the reference's own spread: \d+\.\d%"):
        checks.check_same_training(with_lr(1.2), CPU)


# --- lab 04: DDP hooks against plain DDP, in a real two-rank gloo job (tiny: one step) -------------------------
HOOK_CELL = '''
def never_divides(state, bucket):
    buffer = bucket.buffer()
    half = buffer.to(torch.float16)
    future = dist.all_reduce(half, async_op=True).get_future()

    def back(fut):
        buffer.copy_(fut.value()[0])
        return buffer
    return future.then(back)


def never_copies_back(state, bucket):
    buffer = bucket.buffer()
    half = buffer.to(torch.float16).div_(dist.get_world_size())
    return dist.all_reduce(half, async_op=True).get_future().then(lambda fut: buffer)


def wrap_pytorchs_own(model):  # PyTorch's fp16 compression, by its enum: no hook function named anywhere
    from torch.distributed.algorithms.ddp_comm_hooks import DDPCommHookType, register_ddp_comm_hook

    ddp = DDP(model)
    register_ddp_comm_hook(DDPCommHookType.FP16_COMPRESS, ddp)
    return ddp
''' + "".join(f"\n\ndef wrap_{h}(model):\n    ddp = DDP(model)\n    ddp.register_comm_hook(None, {h})\n    return ddp\n"
               for h in ("never_divides", "never_copies_back"))


def _hooked_job(name: str, tmp_path):
    """The learner's hook as a notebook cell defines it, run in the lab's two-rank job for one step."""
    import linecache

    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    import helpers
    from helpers.workloads import communication

    filename = "<ipython-input-4-hooks>"
    linecache.cache[filename] = (len(HOOK_CELL), None, HOOK_CELL.splitlines(True), filename)
    ns = {"__name__": "__main__", "torch": torch, "dist": dist, "DDP": DDP, "default_hooks": default_hooks}
    exec(compile(HOOK_CELL, filename, "exec"), ns)
    job = communication.run(wrap=ns[f"wrap_{name}"], world_size=2, steps=1, warmup=0, pin_cores=False, threads=1,
                            profile_dir=str(tmp_path))
    return helpers.load(job["trace_dir"])


@pytest.mark.parametrize("hook, words", [
    ("never_divides", r"parameters are 10\d\.\d% .* away from where plain DDP puts them .*your ranks moved them 2\.00x "
                      r"as far, the sum of 2 ranks' gradients, not their mean: divide by the world size"),
    ("never_copies_back", r"rank 1's parameters are \d+\.\d% .* away from rank 0's: the ranks stepped on different "
                          r"gradients.*copied back into the bucket's buffer"),
    ("pytorchs_own", r"runs PyTorch's own default_hooks\._compress_hook, default_hooks\.fp16_compress_hook .*write the "
                     r"hook itself"),
], ids=["never divides by the world size", "never copies its result back", "PyTorch's fp16 compression by its enum"])
def test_a_wrong_fp16_comm_hook_is_refused_against_plain_ddp(hook, words, tmp_path):
    hooked = _hooked_job(hook, tmp_path)
    for meta in hooked.metadata["ranks"].values():  # the record as the trace's metadata holds it, edited: the check
        meta["training"] = {"steps": 1.0, "from_plain_ddp": 0.0, "ranks_apart": 0.0, "moved": 1.0}  # reads the stamp's
    with pytest.raises(CheckFailed, match=words):
        checks.check_comm_hook(hooked, hooked)  # behaviour comes before what the traces show


# --- the course's own code where the learner is to write it ---------------------------------------------------
def capstone_fixed_in_a_def(device):
    from helpers.workloads import mystery

    return mystery.make_step("fixed", device)


def capstone_fixed_by_name(device):  # no name of the course's step in the source: a getattr of a string
    from helpers.workloads import mystery

    return getattr(mystery, "make_" + "step")("fi" + "xed", device)


@pytest.mark.parametrize("wrapped", [capstone_fixed_in_a_def, capstone_fixed_by_name], ids=["def", "getattr"])
def test_the_capstones_fixed_step_wrapped_is_refused(wrapped):
    problem = behaviour.capstone_problem(wrapped, steps=2)
    assert problem and "runs the course's own mystery.make_step" in problem and "earns no credit" in problem, problem


def test_the_capstone_check_refuses_the_wrapped_step(monkeypatch):
    from test_speed_judged import _mystery

    monkeypatch.setattr("helpers.checks._core.os.getloadavg", lambda: (0.1, 0.1, 0.1))
    before, after = _mystery()
    with pytest.raises(CheckFailed, match=r"Your fixed step runs the course's own mystery\.make_step"):
        checks.check_capstone(before, after, 1.3, capstone_fixed_in_a_def)


def torch_functional_adam(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps):
    from torch.optim import _functional

    steps = [torch.tensor(float(step)) for _ in params]
    _functional.adam(params, grads, exp_avgs, exp_avg_sqs, [], steps, foreach=True, amsgrad=False, beta1=beta1,
                     beta2=beta2, lr=lr, weight_decay=0.0, eps=eps, maximize=False)


def torch_fused_adam(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps):  # one C call, no Python
    torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], [torch.tensor(float(step)) for _ in params], lr=lr,
                       beta1=beta1, beta2=beta2, weight_decay=0.0, eps=eps, amsgrad=False, maximize=False)


@pytest.mark.parametrize("update, words", [
    (torch_functional_adam, "your update runs PyTorch's own torch.optim.adam.adam"),
    (torch_fused_adam, "your update runs PyTorch's own torch._fused_adam_"),
], ids=["functional adam", "fused adam op"])
def test_torchs_own_adam_as_the_hand_written_update_is_refused(update, words):
    err, problem = lab02.adam_update_problem(update)
    assert problem and words in problem, problem


def test_the_courses_foreach_loop_as_the_fixed_trace_is_refused():
    from test_fake_fixes import _adam

    before, fixed = mine((recorded("launch_overhead", "broken", "cpu"), recorded("launch_overhead", "foreach", "cpu")))
    with pytest.raises(CheckFailed, match=r"your trace's steps run Optimizer\.step#Adam\.step .*not your adam_update"):
        checks.check_launch_fixed(before, fixed, 1.5, update=_adam)


class RunsTheCoursesForward(gb.Net):  # the statistic by a hook, the course's forward doing the rest
    def __init__(self, width, depth):
        super().__init__(width, depth)
        self.blocks[0].register_forward_hook(lambda _m, _i, out: self.seen.append(out.detach().mean()))


@pytest.mark.parametrize("cls, words", [
    (gb.Net, r"gpu_bound\.Net is the course's own model, not yours"),
    (RunsTheCoursesForward, r"(?i)your forward without the break runs the course's own gpu_bound\.Net\.forward"),
], ids=["Net", "subclass on Net.forward"])
def test_the_courses_net_as_the_graph_break_fix_is_refused(cls, words):
    with pytest.raises(CheckFailed, match=words):
        checks.check_break_fixed(cls)
    assert checks.check_break_fixed(KeepsIt).startswith("passed")  # a forward of the learner's own


def train_step_wrapped(model, opt, x, y):
    return gb.train_step(model, opt, x, y, dtype=torch.bfloat16)


def test_the_courses_train_step_as_the_low_precision_step_is_refused():
    with pytest.raises(CheckFailed, match=r"(?i)your low-precision step runs the course's own gpu_bound\.train_step"):
        checks.check_same_training(train_step_wrapped, CPU)
    assert checks.check_same_training(bf16_step, CPU).startswith("passed")


def the_courses_checkpointing(model, x):
    model.ckpt = True
    try:
        return model(x)
    finally:
        model.ckpt = False


def test_the_courses_own_checkpointing_is_refused():
    with pytest.raises(CheckFailed, match=r"(?i)your checkpointed forward runs the course's own gpu_bound\.Net\.forward.*"
                                          r"Net\(ckpt=True\)"):
        checks.check_activation_saving(the_courses_checkpointing, width=64, batch=128)


def loader_in_a_def(dataset, batch_size):
    from helpers.workloads import data_stall

    return data_stall._fixed_loader(dataset, batch_size)


def test_the_courses_loader_in_a_def_is_refused():
    from helpers.workloads import data_stall

    problem = behaviour.loader_problem(loader_in_a_def, None, lab01._probe_dataset, data_stall.BATCH_SIZE)
    assert problem and "runs the course's own data_stall._fixed_loader" in problem, problem


def step_by_name(model, opt, xs, ys, log):  # lab 03: no name of the course's step in the source, a step of its own
    from helpers.workloads import sync_stall

    inner = getattr(sync_stall, "_fixed" + "_step")(model, opt, xs, ys, log)

    def step(i):
        return inner(i)
    return step


def test_the_courses_sync_free_step_by_a_string_is_refused():
    from helpers.workloads import sync_stall

    def setup():
        model, opt, xs, ys = sync_stall.setup(CPU)
        return model, opt, xs, ys

    problem = behaviour.same_training_problem(step_by_name, sync_stall.broken_step, setup, steps=4, log_every=2)
    assert problem and "runs the course's own sync_stall._fixed_step" in problem, problem


def flops_by_name(model, x):  # lab 09: the check's own answer, by a string (no name in the source)
    import importlib

    return getattr(importlib.import_module("helpers.checks.lab09"), "_reference_" + "matmul_flops")(model, x)


def memory_by_name(snap):  # lab 10
    import importlib

    return getattr(importlib.import_module("helpers.checks.lab10"), "_reference_" + "state")(snap)


def pitfalls_by_name(s):  # lab 11
    import importlib

    return getattr(importlib.import_module("helpers.checks.lab11"), "_reference_" + "pitfalls")(s)


@pytest.mark.parametrize("check, fn, words", [
    ("check_matmul_flops", flops_by_name, r"your matmul_flops runs the course's own lab09\._reference_matmul_flops"),
    ("check_memory_state", memory_by_name, r"your memory_state runs the course's own lab10\._reference_state"),
    ("check_environment_pitfalls", pitfalls_by_name,
     r"your environment_pitfalls runs the course's own lab11\._reference_pitfalls"),
], ids=["lab 09 FLOPs", "lab 10 memory state", "lab 11 pitfalls"])
def test_the_checks_own_answers_reached_by_a_string_are_refused(check, fn, words):
    with pytest.raises(CheckFailed, match=words):
        getattr(checks, check)(fn)


# --- speed on small machines ----------------------------------------------------------------------------------
@pytest.fixture
def machine(monkeypatch):
    def set_machine(cores: int, load: float) -> None:
        monkeypatch.setattr(speed, "cores", lambda: cores)
        monkeypatch.setattr("helpers.checks._core.os.getloadavg", lambda: (load, load, load))
    return set_machine


def test_one_worker_on_two_cores_068x_slower_fails_lab01(machine):
    machine(cores=2, load=2.0)
    before = mine((recorded("data_stall", "broken", "cpu"),))[0]
    fixed = recorded("data_stall", "fixed", "cpu")
    slower = _scaled(fixed, m.step_time_ms(before) / m.step_time_ms(fixed) / 0.68)  # the step 0.68x as fast as before
    assert m.step_time_ms(before) / m.step_time_ms(slower) == pytest.approx(0.68, abs=0.02)
    with pytest.raises(CheckFailed, match=r"your step is slower: median [\d.]+ -> [\d.]+ ms \(0\.6\dx\).*on any machine"):
        checks.check_data_stall_fixed(before, slower, 1.3, _loader(1))


@pytest.mark.parametrize("cores", [1, 2, 4, 64])
def test_a_fix_slower_beyond_noise_never_passes_on_any_core_count(machine, cores):
    """Lab 01's loader fix with no workers (the machine need not give them a core), the step slower beyond noise."""
    machine(cores=cores, load=float(cores))
    before = mine((recorded("data_stall", "broken", "cpu"),))[0]
    slower = _scaled(recorded("data_stall", "fixed", "cpu"), 3.0)
    assert m.timing_verdict(before, slower) == "slower"
    with pytest.raises(CheckFailed, match="your step is slower"):
        checks.check_data_stall_fixed(before, slower, 1.3, _loader(0))


def test_too_few_cores_says_so_judges_structure_and_refuses_a_larger_wait(machine, monkeypatch):
    machine(cores=2, load=3.0)
    before = mine((recorded("data_stall", "broken", "cpu"),))[0]
    after = _scaled(recorded("data_stall", "fixed", "cpu"), 2.2)
    out = checks.check_data_stall_fixed(before, after, 1.3, _loader(2))
    assert "step time not judged: 2 loader worker processes and the training process share 2 cores here" in out
    share = {id(before): 0.28, id(after): 0.30}
    monkeypatch.setattr(lab01, "_data_wait_share", lambda t: share[id(t)])
    with pytest.raises(CheckFailed, match=r"data wait still 30% of the step \(was 28%"):
        checks.check_data_stall_fixed(before, after, 1.3, _loader(2))


def test_the_capstones_busy_fallback_never_accepts_a_larger_wait(machine, monkeypatch):
    from test_speed_judged import _mystery

    machine(cores=2, load=3.0)
    before, after = _mystery()
    share = {id(before): 0.28, id(after): 0.30}
    for mod in (lab01, lab05):
        monkeypatch.setattr(mod, "_data_wait_share", lambda t: share[id(t)])
    with pytest.raises(CheckFailed, match="Data wait 28% -> 30%"):
        checks.check_capstone(before, after, 1.3, real_mystery_step)
