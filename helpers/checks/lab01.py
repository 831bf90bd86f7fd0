"""Lab 01: the first loop's input pipeline and the second loop's host-to-device copies.

Each part opens with the learner's own reading (:func:`helpers.checks.check_reading`, items
``data`` and ``h2d``); the checks here judge the learner's fix from the trace of their own loop and,
when it does not hold, say what that trace shows. On a CPU-only trace only what a CPU shows is
judged (the data-wait share, the loader's worker processes); pinned memory and the copy call are
judged on GPU traces only.
"""

from __future__ import annotations

import math

from .. import metrics as m
from .. import thresholds as th
from ..diagnosis import diagnose
from ..model import Trace
from . import _core, behaviour
from ._core import (  # noqa: F401
    CheckFailed,
    _check,
    _close,
    _record,
    course_bar,
    data_wait_share,
    learner_trace_problem,
    own_capture_problem,
    unit_slip,
)
from .speed import slower_problem, speed_note, speed_verdict

#: The self-check items this lab earns, per track, and the checks of the learner's work each needs.
#: On the CPU track the copy fix cannot run (no copy engine), so "h2d" there is the two readings.
# The credit this lab's exercises earn is declared in helpers.checks.exercise.EXERCISES.

#: The PyTorch ops a device copy runs in; a sync call inside one is a copy that made the host wait.
COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_"})
SINGLE, MULTI = "_SingleProcessDataLoaderIter", "_MultiProcessingDataLoaderIter"


# --- what a trace shows about its input pipeline ---------------------------------------------
def _timing_note(before: Trace, after: Trace, min_speedup: float, workers: int | None = None) -> str:
    """The step times as context: one run each cannot tell a slower fix from a busier machine. The figures
    are :func:`helpers.metrics.step_time_band`'s medians, the ones the comparison table shows. Where the machine
    has too few cores for the ``workers`` asked, :func:`helpers.checks.speed.speed_note` says why the time is not
    judged, so the note does not say it a second time."""
    band = m.step_time_band(before, after)
    b, a = band["before_ms"], band["after_ms"]
    if not (b > 0 and a > 0):  # NaN (no steps, no events) or a zero-length step: no ratio to quote
        return ""
    note = f"median step time {b:.1f} -> {a:.1f} ms ({b / a:.2f}x)"
    if b < a * min_speedup:
        note += f", below the {min_speedup}x a quiet machine shows"
        if speed_note(workers):
            return note
        note += ("; other work on this machine slows worker "
                 "processes, so the timing is not judged beyond its noise band, the structure is")
    return note


def _data_wait_share(t: Trace) -> float:
    """Share of step time lost to data: GPU idle while the host loads (GPU traces), host time in the loader (CPU)."""
    return data_wait_share(t) if t.has_gpu else m.data_wait(t)["data_wait_share"]


def _uses_loader_workers(t: Trace) -> bool:
    """The trace's DataLoader ranges come from worker processes (``_MultiProcessingDataLoaderIter``)."""
    return bool(t.events["name"].str.contains(MULTI, regex=False).any())


def loader_kind(t: Trace) -> str | None:
    """Which DataLoader iterator the trace's ranges name: ``_MultiProcessingDataLoaderIter`` (worker
    processes), ``_SingleProcessDataLoaderIter`` (the training process itself), or None (no DataLoader range)."""
    names = t.events["name"]
    for kind in (MULTI, SINGLE):
        if names.str.contains(kind, regex=False).any():
            return kind
    return None


def workers_needed(before: Trace) -> int | None:
    """How many DataLoader worker processes keep up with this loop, read off its trace with the
    single-process loader: making a batch takes P = w * step, the rest of the step C = (1 - w) * step
    (w the data-wait share), and n workers make n batches per P while the step takes one per C, so n
    must reach P / C = w / (1 - w) (``thresholds.DATA_KEEP_UP_RATIO``; less ``DATA_WORKERS_SLACK`` for a
    short trace's noise, at least 1, at most ``DATA_WORKERS_CAP``). None when the trace's loader is not
    the single-process one or it shows no data wait."""
    if loader_kind(before) != SINGLE:
        return None
    w = _data_wait_share(before)
    if not w > 0:  # NaN or no wait: nothing to size from
        return None
    if w >= 1:
        return th.DATA_WORKERS_CAP
    ratio = th.DATA_KEEP_UP_RATIO * w / (1 - w)
    return int(min(th.DATA_WORKERS_CAP, max(1, math.ceil(ratio - th.DATA_WORKERS_SLACK))))


def _num_workers(loader: object) -> int | None:
    """The worker processes a torch DataLoader was given; None for anything else (a custom iterable is
    not sized by :func:`workers_needed`)."""
    from torch.utils.data import DataLoader

    return int(loader.num_workers) if isinstance(loader, DataLoader) else None


def _too_few_workers(before: Trace, n: int | None) -> str:
    """A line when the learner's DataLoader has fewer worker processes (``n``) than their before trace
    needs, in that trace's terms, or ''."""
    need = workers_needed(before)
    if n is None or need is None or n >= need:
        return ""
    w = _data_wait_share(before)
    step = m.step_time_ms(before)
    p, c = w * step, max(1 - w, 0.0) * step
    ratio = f"{p / c:.1f}x" if c > 0 else "all of"
    line = (f"too few worker processes for this loop: your before trace shows making a batch takes {ratio} "
            f"the rest of the step (data wait {w:.0%}: ~{p:.1f} ms a batch, ~{c:.1f} ms the rest), so ")
    if n == 0:
        line += f"with num_workers=0 the training process still makes every batch itself, ~{p:.1f} ms between steps"
    else:
        line += (f"with {n} worker process{'es' if n > 1 else ''} a batch comes every ~{p / n:.1f} ms while the step "
                 f"wants one every ~{c:.1f} ms")
    return line + f"; at least {need} workers keep up"


def blocking_copies_per_step(t: Trace) -> float:
    """Host syncs per step made inside a device copy (``.to(device)`` without ``non_blocking=True``
    calls ``cudaStreamSynchronize`` after its ``cudaMemcpyAsync``)."""
    causes = m.sync_stats(t)["causes"]
    n_steps = max(int((m.windows(t)["step"] >= 0).sum()), 1)
    return sum(v for k, v in causes.items() if k in COPY_OPS) / n_steps


def _copy_words(t: Trace) -> str:
    """The H2D copies of a GPU trace in words: how many bytes from which memory, at what bandwidth."""
    c = m.copy_stats(t)
    h = c[c["copy_kind"] == "H2D"]
    if h.empty:
        return "no host-to-device copies"
    parts = [f"memcpy H2D from {r.host_memory.capitalize() or 'unknown'} memory, {r.gb_per_s:.1f} GB/s"
             for r in h.sort_values("bytes", ascending=False).itertuples()]
    return "; ".join(parts)


def _busy(before: Trace, after: Trace, workers: int | None = None) -> str:
    """What measured says this machine is too busy to judge timing (the steps' own spread, the load average), or ''."""
    band = m.step_time_band(before, after)
    spread = max(band["before_spread"], band["after_spread"])
    if spread > th.NOISE_BUSY_SPREAD:
        return f"the steps spread {spread:.0%} around their median (over {th.NOISE_BUSY_SPREAD:.0%} is a busy machine)"
    return _core._cores_busy(workers)


def _slower(before: Trace, after: Trace, workers: int | None = None) -> str:
    """A line when the fix made the median step slower beyond the noise band, else '' (on every machine but one
    with too few cores for the ``workers`` asked, where the verdict says so: helpers.checks.speed)."""
    return slower_problem(before, after, workers)


def _data_verdict(before: Trace, after: Trace, found: list[str], enough_workers: bool = True,
                  workers: int | None = None) -> tuple[bool, str]:
    """Whether the data side is fixed, and a line saying on what evidence.

    The data-wait share is the main evidence. On a busy machine the workers compete with other work
    for the cores and the share may not fall; then the loader's structure (worker processes prefetching,
    as many as the before trace needs: ``enough_workers``) decides, and the line says the machine was too
    busy to judge the wait.
    """
    wb, wa = _data_wait_share(before), _data_wait_share(after)
    shown = ".0%" if f"{wb:.0%}" != f"{wa:.0%}" else ".1%"  # a wait that fell a little never reads "52% -> 52%"
    line = f"data wait {wb:{shown}} -> {wa:{shown}} of step time"
    if "data_stall" not in found and wa * th.PASS_DATA_WAIT_DROP <= wb:
        return True, line
    busy = _busy(before, after, workers)
    if enough_workers and _uses_loader_workers(after) and wa < wb and busy and not _slower(before, after, workers):
        return True, (line + f", not the {th.PASS_DATA_WAIT_DROP:g}x drop a quiet machine shows: this machine was measured too "
                      f"busy to judge the wait ({busy}), so the verdict falls back to the structure, the loader using worker "
                      "processes")
    return False, line


def _pipeline_problems(before: Trace, after: Trace, data_ok: bool, too_few: str = "") -> list[str]:
    """What the learner's trace shows that is not fixed yet, each in the trace's own terms (``too_few``:
    the line sizing the learner's worker pool from the before trace, when it is too small)."""
    problems = []
    kind = loader_kind(after)
    wb, wa = _data_wait_share(before), _data_wait_share(after)
    if not data_ok:
        where = "the GPU idles while the host is in the DataLoader" if after.has_gpu else "the loop waits for its next batch"
        problems.append(f"data wait still {wa:.0%} of the step (was {wb:.0%}; a fix shows {th.PASS_DATA_WAIT_DROP:g}x less): "
                        f"{where}")
        if kind == SINGLE:
            problems.append(f"no worker processes: the DataLoader ranges are {SINGLE}.__next__, so every sample is "
                            "still prepared in the training process, between steps")
        elif kind == MULTI and too_few:
            pass  # the sizing line below says how many keep up
        elif kind == MULTI:
            problems.append(f"worker processes prefetch ({MULTI}) but cannot keep up: each batch takes longer to "
                            "make than a step; more workers, a deeper prefetch_factor, or less work per sample")
        else:
            problems.append("no DataLoader range in this trace: capture the step that takes its batches from your loader")
    if too_few:  # even when the wait fell: too few workers fall behind as soon as the machine is busier
        problems.append(too_few)
    if after.has_gpu:  # pinned memory and the copy call exist only on a GPU
        h = m.h2d_stats(after)
        if h and h["pageable_byte_share"] > 0:
            lead = "workers raised but " if kind == MULTI else ""
            problems.append(f"{lead}copies still pageable ({_copy_words(after)}): a pageable copy is staged by the host "
                            "through a bounce buffer; have the loader hand over pinned batches")
        blocking = blocking_copies_per_step(after)
        if blocking > 0:
            problems.append(f"copies still blocking: {blocking:.1f} cudaStreamSynchronize per step inside the device copy "
                            "(aten::to): a copy without non_blocking=True makes the host wait for it")
    return problems


def _probe_dataset():
    """A small copy of the lab's dataset (the same class, small images) to run the learner's loader over."""
    from ..workloads import data_stall

    return data_stall.AugmentedImages(length=4 * data_stall.BATCH_SIZE, size=8, blur_passes=1)


def check_data_stall_fixed(before: Trace, after: Trace, min_speedup: float, make_loader=None, to_device=None) -> str:
    """Your fixed input pipeline, judged first by what it does, then from your own traces (``before``: the
    loop as first written).

    First the behaviour: ``make_loader(dataset, batch_size)`` is run over a small copy of the lab's
    dataset and must yield its own samples, each once an epoch (shuffled or in order), and
    ``to_device`` must hand back the same values; a loader over a cached sample is refused. A DataLoader
    with fewer worker processes than ``before`` shows the loop needs (:func:`workers_needed`) fails, busy
    machine or not. Then passes when the data-wait share falls ``PASS_DATA_WAIT_DROP`` x with no data_stall finding left (on
    a busy machine: falls, with worker processes prefetching) and, on a GPU trace, the batches are
    copied from pinned memory without the host waiting for each copy. Last the speed: a step slower than
    ``before`` beyond the noise band never passes, on a machine of any core count that has a core for each
    worker and the training process; one that has not cannot show the loader's gain, and the verdict says so
    (the speed-up itself is reported, not judged: ``min_speedup`` is what a quiet machine shows).
    """
    refused = own_capture_problem(after, before)
    if refused is None and not callable(make_loader):
        refused = ("pass your loader function too: check_data_stall_fixed(broken, fixed, MIN_SPEEDUP, make_my_loader, "
                   "my_to_device); the check runs it to see that the loop still gets the dataset's samples")
    if refused is None:
        from ..workloads import data_stall

        made: list = []
        refused = behaviour.loader_problem(make_loader, to_device, _probe_dataset, data_stall.BATCH_SIZE, made=made)
        workers = _num_workers(made.pop() if made else None)  # the probe loader goes now: its workers end here,
        # not in whatever later cell a collection finds it (a failed check's traceback would keep it alive)
    if refused:
        _record("data", "check_data_stall_fixed", False)
        raise CheckFailed(refused)
    too_few = _too_few_workers(before, workers)
    found = [f.pattern for f in diagnose(after)]
    data_ok, evidence = _data_verdict(before, after, found, enough_workers=not too_few, workers=workers)
    problems = _pipeline_problems(before, after, data_ok, too_few)
    slower, paced = speed_verdict(before, after, workers)  # paced: the machine's measured slowdown explained the step
    if slower:
        problems.insert(0, slower)
    note = _timing_note(before, after, min_speedup, workers)
    _check("data", "check_data_stall_fixed", not problems,
           "Your trace shows: " + "; ".join(problems) + f". ({evidence}; {note or 'no step times'}.)")
    structure = f"loader {loader_kind(after) or 'none'}"
    if after.has_gpu:
        structure += f", {_copy_words(after)}, {blocking_copies_per_step(after):.0f} blocking copies per step"
    return f"passed: check_data_stall_fixed ({evidence}; {structure}; {'; '.join(filter(None, (note, paced, speed_note(workers))))})"


# --- the second loop: host-to-device copies --------------------------------------------------
def _h2d_memory(trace: Trace) -> str:
    """The host memory most H2D bytes come from (``pageable`` / ``pinned``), or "" without copies."""
    c = m.copy_stats(trace)
    h = c[c["copy_kind"] == "H2D"]
    if h.empty:
        return ""
    return str(h.groupby("host_memory")["bytes"].sum().idxmax())


def check_read_h2d_bandwidth(answer_gb_per_s: float, trace: Trace, host_memory: str | None = None) -> str:
    """The H2D copies' bandwidth in GB/s read off the trace (10% tolerance), and the host memory they come from."""
    stats = m.h2d_stats(trace)
    if stats is None:
        _record("h2d", "check_read_h2d_bandwidth", False)
        raise CheckFailed("this trace has no host-to-device copies: read the trace of the second loop")
    problems = []
    try:
        answer = float(answer_gb_per_s)
    except (TypeError, ValueError):
        answer = float("nan")
    if not _close(answer, stats["gb_per_s"], 0.10):
        problems.append(f"{answer_gb_per_s} GB/s is off{unit_slip(answer, stats['gb_per_s'])}: sum the H2D memcpy events' bytes and durations "
                        "(kind == 'memcpy', copy_kind == 'H2D'); bytes / microseconds / 1000 = GB/s")
    if host_memory is not None:
        want = _h2d_memory(trace)
        if str(host_memory).strip().lower() != want:
            problems.append(f"{host_memory!r} is not the memory these copies come from: read the copy's name on the "
                            "memcpy lane ('Memcpy HtoD (<memory> -> Device)') or the events' host_memory column")
    return _check("h2d", "check_read_h2d_bandwidth", not problems, "; ".join(problems) + ".")


def _copy_streams(trace: Trace) -> tuple[set[int], set[int]]:
    ev = trace.events
    on_gpu = ev["device"] >= 0
    copies = set(ev.loc[on_gpu & (ev["kind"] == "memcpy") & (ev["copy_kind"] == "H2D"), "stream"].astype(int))
    kernels = set(ev.loc[on_gpu & (ev["kind"] == "kernel"), "stream"].astype(int))
    return copies, kernels


#: How many times the broken loop's copy bandwidth a fixed loop reaches at least: the course's bar, never loosened.
#: Pinned memory took the H200 recordings from 6.7 to 55.3 GB/s (8.3x; 54.9 GB/s pinned but blocking), so a third
#: of that gain leaves room for slower hosts and buses while pageable copies (1x) fail it.
MIN_BANDWIDTH_GAIN = 3.0


def check_h2d_fixed(before: Trace, after: Trace | None, min_bandwidth_gain: float = MIN_BANDWIDTH_GAIN) -> str:
    """Your step's copies: from pinned memory, at least ``min_bandwidth_gain`` x the broken loop's bandwidth,
    and hidden behind compute (no h2d_copy finding left), judged from your own GPU trace; and the step not slower than
    ``before`` beyond the noise band of the two captures.

    ``after=None`` on a machine without a CUDA GPU: not judged (there is no copy engine to use), and
    nothing is recorded; on the CPU track the item is earned by the readings.
    """
    min_bandwidth_gain = course_bar(min_bandwidth_gain, MIN_BANDWIDTH_GAIN, at_least=True)  # a learner's bar is never looser
    if after is None:
        import torch

        if not torch.cuda.is_available():
            return ("not judged on the CPU track: a CPU has no copy engine and no pinned memory, so the fix runs on a GPU "
                    "only. Your readings (Exercises 3 and 4) earn the 'h2d' item here; the H200 recording of the fix "
                    "is drawn above.")
        _record("h2d", "check_h2d_fixed", False)
        raise CheckFailed("pass the trace of your own step: h2d_fixed = helpers.capture(...)")
    refused = learner_trace_problem(before, after)
    if refused:
        _record("h2d", "check_h2d_fixed", False)
        raise CheckFailed(refused)
    if not after.has_gpu or m.h2d_stats(after) is None:
        _record("h2d", "check_h2d_fixed", False)
        raise CheckFailed("this trace has no host-to-device copies on a GPU: capture your step on the GPU")
    none = {"gb_per_s": float("nan"), "bytes": 0.0, "pageable_byte_share": 0.0, "overlap_with_compute": 0.0,
            "exposed_us": 0.0}
    hb, ha = m.h2d_stats(before) or none, m.h2d_stats(after)
    bw_b, bw_a = hb["gb_per_s"], ha["gb_per_s"]
    n_steps = max(int((m.windows(after)["step"] >= 0).sum()), 1)
    found = [f.pattern for f in diagnose(after)]
    problems = []
    if ha["pageable_byte_share"] > 0:
        problems.append(f"copies still from pageable memory ({ha['pageable_byte_share']:.0%} of H2D bytes; {_copy_words(after)}, "
                        f"was {bw_b:.1f} GB/s): pin the host batches, once, before the loop")
    elif not bw_a >= min_bandwidth_gain * bw_b:
        problems.append(f"pinned copies at {bw_a:.1f} GB/s, only {bw_a / bw_b:.1f}x the {bw_b:.1f} GB/s before "
                        f"(want {min_bandwidth_gain:g}x)")
    if "h2d_copy" in found or ha["overlap_with_compute"] < th.H2D_MIN_OVERLAP:
        line = (f"copies not hidden: {ha['overlap_with_compute']:.0%} of copy time has a kernel running beside it, "
                f"{ha['exposed_us'] / n_steps / 1e3:.2f} ms per step exposed")
        blocking = blocking_copies_per_step(after)
        copy_streams, kernel_streams = _copy_streams(after)
        if blocking > 0:
            line += (f"; {blocking:.1f} cudaStreamSynchronize per step inside the copy (aten::to): without "
                     "non_blocking=True the host waits for every copy")
        if copy_streams & kernel_streams:
            line += (f"; the copies run on stream {', '.join(map(str, sorted(copy_streams & kernel_streams)))}, the stream "
                     "the compute uses, so each waits for the previous batch's compute and the compute waits for it: "
                     "copy batch i+1 on a side stream while batch i computes")
        problems.append(line)
    slower, paced = behaviour.machine_verdict(before, after)  # a copy hidden behind compute never makes it slower
    if slower:
        problems.insert(0, slower)
    _check("h2d", "check_h2d_fixed", not problems, "Your trace shows: " + " | ".join(problems) + ".")
    return (f"passed: check_h2d_fixed (H2D {bw_b:.1f} -> {bw_a:.1f} GB/s, pinned, "
            f"{ha['overlap_with_compute']:.0%} of copy time overlapped by compute{'; ' + paced if paced else ''})")
