"""The pattern catalogue: everything the toolkit knows about one bottleneck pattern, in one record, and the
vocabulary its records share.

* :data:`CAUSES`: what a stretch of a step's critical path was spent on (:func:`helpers.critical_path`), with its
  words and colour; the idle causes among them are also the labels of the GPU's idle gaps
  (:func:`helpers.metrics.idle_gaps`). Every other module takes the list, the words and the colours from here.
* :data:`SIGNALS`: each figure a reading can name, declared once: what it is and the code a learner runs to compute
  it (:func:`helpers.diagnosis.signals` computes the same; :mod:`helpers.checks.reading` builds its tables from it).
* :data:`CATALOGUE`: one :class:`Pattern` a pattern: its name, the causes it owns, what its fix changes on the
  step's graph (:class:`WhatIf`: the saving that ranks it), where it shows (``locate``: a key of
  :data:`helpers.diagnosis.LOCATORS`, the one function that gives both its finding's window and the stretches a
  learner's reading is held to), its fix (GPU and CPU wording), its colour and its :class:`Rule` s. A rule is how the
  pattern is found on one kind of trace: a named predicate over named signals (:class:`Signals`); for a pattern that
  is a fix, that its fix saves more of the step than noise (:func:`floor`). Captures that hold no loop are the
  ``capture_window`` pattern's rules, judged before any other.

How to add a pattern
--------------------
1. Say what its fix changes: a :class:`WhatIf` over the causes (``factors``), the causes or op groups it moves off
   the path (``overlapped``) or runs at another rate (``rates``). If it owns a cause no record has, add a
   :class:`Cause` to :data:`CAUSES` and teach :mod:`helpers.critical` which host time or GPU work it is.
2. If its rule, sentence or evidence needs a figure no signal has, compute it in :func:`helpers.diagnosis.signals`,
   declare its type in :class:`Signals`, and, if a learner should be able to name it in a reading, a
   :class:`Signal` in :data:`SIGNALS` (what it is, the code that computes it); thresholds go to
   :mod:`helpers.thresholds` with where the number came from.
3. Its rule: ``_saves("my_pattern")`` for a fix (found when its saving is above the noise floor), or a named
   predicate over the signals (``def _my_rule(s: Signals) -> bool``).
4. Add one :class:`Pattern` record to :data:`CATALOGUE`: rules, fix, colour, ``causes``, ``what_if`` and
   ``locate`` (an existing key of :data:`helpers.diagnosis.LOCATORS`, or a new locate function registered there).
   Its place in the tuple is its place in :data:`PATTERNS`.
5. Test it: a synthetic trace (``tests/synth.py``) that shows it and one that must not.

``compilation`` was added this way: its cause ``compile`` (which host ranges are compilation:
:data:`helpers.critical.COMPILE_RANGE`), its :class:`WhatIf` (compilation done before the steps), its rule
``_saves("compilation")``, its signals ``compile_share`` and ``compile_ms_per_step``, its locate function
``compile`` (the compilation on the critical path), and tests/test_diagnosis_capture.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

from . import thresholds as th


class Signals(TypedDict, total=False):
    """Every figure the rules read, named like the thresholds they are held to.

    Shares are of step time summed over (rank, device) pairs; ``_ms_per_step`` figures are means
    over the analysis steps. GPU figures are present on GPU traces only, ``cpu_*`` on CPU-only ones,
    copy and communication figures when the trace has copies / collectives.
    """

    has_gpu: bool
    has_steps: bool
    has_step_markers: bool
    steps: int
    steps_inferred: dict[str, Any]
    steady_window: tuple[float, float]
    capture_ms: float
    capture_host_share: float
    capture_idle_gpu_share: float
    capture_kernels: int
    capture_events: int
    startup_share: float
    teardown_share: float
    gpu_calls_without_gpu: int
    other_accelerator_events: int
    other_accelerator_categories: dict[str, int]
    cpu_data_wait_share: float
    host_data_wait_ms_per_step: float
    gpu_utilization: float
    gpu_bound_busy: float
    graph_span_share: float
    gpu_kernel_share: float
    data_stall_share: float
    sync_stall_share: float
    launch_idle_share: float
    host_bound_idle_share: float
    collective_idle_share: float
    gpu_idle_ms_per_step: dict[str, float]
    sync_points_per_step: float
    sync_blocked_share: float
    host_blocked_ms_per_step: float
    sync_gpu_idle_share: float
    sync_caused_by: dict[str, Any]
    kernels_per_step: float
    launch_median_kernel_us: float
    share_kernels_under_10us: float
    median_launch_call_us: float
    launch_individual_share: float
    launch_share_of_idle: float
    h2d_exposed_share: float
    h2d_pageable_share: float
    h2d_overlap: float
    h2d_gb_per_s: float
    h2d_ms_per_step: float
    copy_exposed_share: float
    copy_pageable_share: float
    copy_overlap: float
    d2h_ms_per_step: float
    cpu_host_other_share: float
    cpu_op_share: float
    host_other_ms_per_step: float
    comm_exposed_share: float
    imbalance_spread: float
    ranks: int
    collective_ms_per_step: float
    exposed_ms_per_step: float
    slowest_rank: int
    fastest_rank: int
    imbalance_cost_share: float
    compute_ms_per_step_by_rank: dict[int, float]
    exposed_collective_ms_per_step_by_rank: dict[int, float]
    top_kernels: list[dict[str, Any]]
    host_busy_in: dict[str, float]
    step_ms: float
    path_ms_per_step: dict[str, float]
    work_ms_per_step: dict[str, float]
    gains: dict[str, float]
    step_ms_if_fixed: dict[str, float]
    gpu_path_share: float
    gpu_lowp: bool
    compile_share: float
    compile_ms_per_step: float
    step_ms_if_all_fixed: float
    startup_judged_share: float
    compile_capture_share: float
    launches_without_kernels: float
    stream_capture_calls: float


@dataclass(frozen=True)
class Cause:
    """What a stretch of a step's critical path (:func:`helpers.critical_path`) was spent on, or what the
    host did while the GPU idled (:func:`helpers.metrics.idle_gaps`' labels, the causes with ``idle``)."""

    name: str
    label: str  # in words, as a clause: "the host waiting for the next batch"
    on: str  # "gpu": the GPU's own work; "host": the host's
    colour: str
    idle: bool = False  # also a label of the GPU's idle gaps (what the host was doing meanwhile) ...
    host_was: str = ""  # ... said after "the GPU idled while the host was": "in the DataLoader"


#: Every cause, in the order figures list them. The idle causes come first, in the order the idle
#: breakdowns have always listed them; the pattern that owns a cause is named in its record below
#: (:attr:`Pattern.causes`), never here.
CAUSES: tuple[Cause, ...] = (
    Cause("sync", "the host in (or just back from) a sync", "host", "#c44e52", idle=True, host_was="just back from a sync"),
    Cause("data_wait", "the host waiting for the next batch", "host", "#dd8452", idle=True, host_was="in the DataLoader"),
    Cause("collective", "a collective", "gpu", "#9467bd", idle=True, host_was="in a collective"),
    Cause("launch", "the host launching (CUDA calls, framework dispatch, the launch queue)", "host", "#4c72b0", idle=True,
          host_was="launching kernels"),
    Cause("graph", "the GPU between kernels it runs back to back (a CUDA Graph's own gaps)", "gpu", "#8fbc8f", idle=True,
          host_was="replaying a CUDA Graph (gaps between its kernels)"),
    Cause("other", "the host in its own code (Python, NumPy, logging)", "host", "#ccb974", idle=True,
          host_was="in other code"),
    Cause("gemm", "matrix-multiply kernels", "gpu", "#2e7d32"),
    Cause("kernel", "other kernels", "gpu", "#55a868"),
    Cause("copy", "copies and memsets", "gpu", "#ff7f0e"),
    Cause("compile", "compilation (torch.compile, Triton autotuning)", "host", "#17becf"),
    Cause("startup", "start-up and teardown calls (context, allocations, module loading)", "host", "#7f7f7f"),
    Cause("cpu_compute", "the model's own ops on the CPU (no GPU recorded)", "host", "#8c8c8c"),
)
#: cause name -> its record.
CAUSE: dict[str, Cause] = {c.name: c for c in CAUSES}
#: The labels of the GPU's idle gaps, in order (``helpers.metrics.CAUSES``).
IDLE_CAUSES: tuple[str, ...] = tuple(c.name for c in CAUSES if c.idle)
#: The causes of a critical path's stretches, in order.
PATH_CAUSES: tuple[str, ...] = tuple(c.name for c in CAUSES)


def get(s: Signals, key: str) -> float:
    """A signal as a number: 0.0 when absent or NaN (a rule on a missing figure does not fire)."""
    v = s.get(key)  # type: ignore[misc]
    return float(v) if isinstance(v, (int, float)) and v == v else 0.0


@dataclass(frozen=True)
class Rule:
    """How a pattern is found on one kind of trace."""

    when: Callable[[Signals], bool]  # a named predicate below, over the signals in ``reads``
    reads: tuple[str, ...]  # the signals ``when`` reads
    cost: str  # the signal that is its cost (share of step time a fix would save at most)
    say: Callable[[Signals], str]  # one sentence a learner can read
    evidence: tuple[str, ...]  # the signals shown with the finding (and that can prove it in a reading)
    window: str  # where it shows: a key of :data:`WINDOWS`
    on: str = "gpu"  # "gpu": GPU traces only; "cpu": CPU-only traces only; "any": both
    fix: str = ""  # this rule's own fix, when it differs from the pattern's ("" = the pattern's)
    reason: str = ""  # which of the pattern's cases it is (shown as evidence ``reason``), when it has several


@dataclass(frozen=True)
class WhatIf:
    """What a pattern's fix changes on the step's graph, replayed by :func:`helpers.critical.fix_step_ms`: causes
    scaled (``factors``; 0 removes one), causes or op groups moved off the path (``overlapped``), op groups run at
    another rate (``rates``: ``pinned`` copies, ``low_precision`` matrix products; groups in
    :data:`helpers.critical.OP_GROUPS`). ``words`` completes "the step would take about N ms if ..."."""

    words: str
    factors: tuple[tuple[str, float], ...] = ()
    overlapped: tuple[str, ...] = ()
    rates: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Pattern:
    """One bottleneck pattern: what finds it, what it costs, what it is called and how it is fixed."""

    name: str
    label: str  # its name in words
    rules: tuple[Rule, ...]
    fix: str  # worded for a GPU loop
    colour: str  # its band on a timeline, its bar in the idle histogram
    cpu_fix: str = ""  # worded for a CPU-only loop ("" = the GPU wording fits)
    cause: str | None = None  # the idle cause it owns (helpers.metrics.CAUSES) ...
    host_is: str = ""  # ... what the host is doing in those gaps ("the host inside the DataLoader")
    during: str = ""  # ... the same as a clause ("while the host is in the DataLoader")
    exclusive: bool = False  # when it fires, no other pattern is judged (the figures describe no loop)
    causes: tuple[str, ...] = ()  # the causes of the critical path it owns (CAUSES)
    what_if: WhatIf | None = None  # what its fix changes on the step's graph (its gain ranks the findings)
    locate: str = ""  # where it shows: a key of helpers.diagnosis.LOCATORS (its finding's window, a reading's stretches)

    def fix_for(self, has_gpu: bool) -> str:
        return self.fix if has_gpu or not self.cpu_fix else self.cpu_fix

    @property
    def evidence(self) -> tuple[str, ...]:
        """Every signal any of its rules shows, in order, once."""
        out: list[str] = []
        for r in self.rules:
            out += [e for e in r.evidence if e not in out]
        return tuple(out)


#: Where a finding shows, by rule, for a pattern without a locate function of its own (``capture_window``'s rules,
#: a pattern under test): how :func:`helpers.diagnosis.diagnose` picks its window. A pattern with ``locate`` takes
#: its window from :data:`helpers.diagnosis.LOCATORS`; its rules' ``window`` says which kind it is, for the record.
WINDOWS = {
    "idle_gap": "the longest GPU gap of the pattern's cause",
    "longest_sync": "the longest GPU gap after a sync, else the longest sync call",
    "host_other": "the longest stretch the host is outside ops, data waits and collectives (CPU-only)",
    "largest_h2d": "the longest host-to-device copy",
    "longest_step": "the longest step",
    "worst_comm_step": "the step with the most exposed collective time",
    "steady_state": "the steady state found in the capture, if any",
    "compile_range": "the longest stretch of compilation on the critical path",
    "none": "no window",
}


# --- predicates: each a named rule over named signals, thresholds from helpers.thresholds ----------
@dataclass(frozen=True)
class Signal:
    """A figure a learner reads off a trace, declared once: what it is, and the code that computes it (``t`` a
    trace over its steps, ``metrics`` :mod:`helpers.metrics`). :func:`helpers.diagnosis.signals` computes the same
    figure (a test holds each formula to it on the course's traces); the reading check's tables
    (:mod:`helpers.checks.reading`: which figures prove a pattern, how to measure each) are built from these."""

    name: str
    description: str  # what it is, in words ("" for a cost figure that proves nothing on its own)
    formula: str  # the code a learner runs to compute it
    proves: bool = True  # whether it can prove a pattern in a reading (else it is only a pattern's cost figure)


_STEPS_US = 'metrics.windows(t)["dur_us"].sum()'  # all analysed steps together (a trace's "step time")

#: Every figure a reading can name, by name: the figures that prove a pattern (a rule's evidence) and the cost figures.
#: The idle shares come from :func:`helpers.metrics.idle_cost_by_cause`, the GPU idle time by what a fix would buy
#: back: a sync's share counts at most the time the host sat blocked in it, the rest of the gaps after it goes to
#: what the host did next (:func:`helpers.metrics.idle_gaps` lists the same gaps one by one).
SIGNALS: dict[str, Signal] = {s.name: s for s in (
    Signal('data_stall_share',
           'share of step time the GPU idles while the host is inside the DataLoader (what a loader fix buys back)',
           'metrics.idle_cost_by_cause(t)["data_wait"] / metrics.windows(t)["dur_us"].sum()'),
    Signal('cpu_data_wait_share',
           'share of step time the loop waits for the next batch (CPU-only trace)',
           'metrics.data_wait(t)["data_wait_share"]'),
    Signal('host_data_wait_ms_per_step',
           'ms per step the host spends fetching batches (DataLoader ranges)',
           'metrics.data_wait(t)["data_wait_us_per_step"] / 1e3'),
    Signal('sync_stall_share',
           'share of step time the GPU idles because of syncs: the idle time after a sync returns, at most the time the host sat blocked in syncs (the rest is what the host did next)',
           'metrics.idle_cost_by_cause(t)["sync"] / metrics.windows(t)["dur_us"].sum()'),
    Signal('sync_points_per_step',
           'host synchronizations (cudaStreamSynchronize / cudaDeviceSynchronize / blocking copies; a copy to pageable memory and the stream sync right after it are one) per step',
           'metrics.sync_stats(t)["sync_points_per_step"]'),
    Signal('host_blocked_ms_per_step',
           'ms per step the host sits blocked in sync calls',
           'metrics.sync_stats(t)["blocked_us_per_step"] / 1e3'),
    Signal('sync_blocked_share',
           'share of step time the host sits blocked in sync calls',
           'metrics.sync_stats(t)["blocked_share"]'),
    Signal('launch_idle_share',
           'share of step time the GPU idles between kernels while the host is launching',
           'metrics.idle_cost_by_cause(t)["launch"] / metrics.windows(t)["dur_us"].sum()'),
    Signal('kernels_per_step',
           'kernels launched per step',
           'metrics.kernel_stats(t)["per_step"]'),
    Signal('launch_median_kernel_us',
           'median kernel duration in microseconds',
           'metrics.kernel_stats(t)["median_us"]'),
    Signal('share_kernels_under_10us',
           'share of kernels shorter than 10 us',
           'metrics.kernel_stats(t)["share_under_10us"]'),
    Signal('median_launch_call_us',
           'median cudaLaunchKernel call duration in microseconds',
           'metrics.launch_stats(t)["median_launch_call_us"]'),
    Signal('h2d_exposed_share',
           'share of step time host-to-device copies run with no kernel beside them',
           'metrics.h2d_stats(t)["exposed_us"] / metrics.windows(t)["dur_us"].sum()'),
    Signal('h2d_ms_per_step',
           'ms per step of host-to-device copies',
           'metrics.h2d_stats(t)["time_us"] / (metrics.windows(t)["step"] >= 0).sum() / 1e3'),
    Signal('h2d_gb_per_s',
           'host-to-device copy bandwidth in GB/s (bytes / duration)',
           'metrics.h2d_stats(t)["gb_per_s"]'),
    Signal('h2d_pageable_share',
           'share of copied bytes that come from pageable (not pinned) memory',
           'metrics.h2d_stats(t)["pageable_byte_share"]'),
    Signal('host_bound_idle_share',
           "share of step time the GPU idles while the host runs other code (not data, launches, syncs; after a short sync, the host's own work that follows it)",
           'metrics.idle_cost_by_cause(t)["other"] / metrics.windows(t)["dur_us"].sum()'),
    Signal('comm_exposed_share',
           'share of step time spent in collectives that no compute overlaps',
           'metrics.comm_stats(t)["exposed_us"].sum() / metrics.comm_stats(t)["window_us"].sum()'),
    Signal('collective_ms_per_step',
           'ms per step of collectives (all-reduce etc.)',
           'metrics.comm_stats(t).groupby("step")["collective_us"].mean().mean() / 1e3'),
    Signal('exposed_ms_per_step',
           'ms per step of collectives that no compute overlaps',
           'metrics.comm_stats(t).groupby("step")["exposed_us"].mean().mean() / 1e3'),
    Signal('imbalance_spread',
           "(slowest - fastest rank's compute per step) / slowest",
           'metrics.rank_imbalance(t)["compute_spread"]'),
    Signal('gpu_bound_busy',
           'share of step time the GPU is busy (kernels, copies, memsets on all streams)',
           'metrics.gpu_utilization(t)'),
    Signal('graph_span_share',
           "share of step time that is busy or inside a CUDA Graph replay's first-to-last-kernel span",
           'metrics.gpu_busy(t)["graph_span_us"].sum() / metrics.gpu_busy(t)["window_us"].sum()'),
    Signal('compile_share',
           'share of the steps\' critical path spent compiling (torch.compile, Triton autotuning, NVRTC)',
           'helpers.critical_path(t).ms_per_step["compile"] / helpers.critical_path(t).step_ms'),
    Signal('compile_ms_per_step',
           'ms per step of compilation on the critical path',
           'helpers.critical_path(t).ms_per_step["compile"]'),
    Signal('gpu_kernel_share',
           'share of step time kernels run',
           'metrics.gpu_busy(t)["kernel_us"].sum() / metrics.gpu_busy(t)["window_us"].sum()'),
    Signal('copy_exposed_share',
           '',
           'metrics.host_copy_stats(t)["exposed_us"] / metrics.windows(t)["dur_us"].sum()', proves=False),
    Signal('cpu_host_other_share',
           '',
           'metrics.step_breakdown(t)["other_us"].sum() / metrics.step_breakdown(t)["step_us"].sum()', proves=False),
    Signal('imbalance_cost_share',
           '',
           "the fastest rank's exposed collective time over its step: metrics.comm_stats(t) on that rank, exposed_us.sum() / window_us.sum()", proves=False),
)}


def gain(s: Signals, pattern: str) -> float:
    """The share of the step ``pattern``'s fix saves on the critical path (:data:`Pattern.what_if` replayed by
    :func:`helpers.what_if`; 0 when the trace has no steps to replay)."""
    v = (s.get("gains") or {}).get(pattern)
    return float(v) if isinstance(v, (int, float)) and v == v else 0.0


def floor(s: Signals, pattern: str) -> float:
    """The gain under which a fix's saving is noise (:data:`helpers.thresholds.GAIN_FLOOR_SHARE`; the host's own
    waits and code on a trace without GPU rows have their own, :data:`~helpers.thresholds.CPU_GAIN_FLOOR_SHARE`)."""
    if pattern in ("data_stall", "host_bound") and not s.get("has_gpu"):
        return th.CPU_GAIN_FLOOR_SHARE
    return th.GAIN_FLOOR_SHARE


def _saves(pattern: str, on: str = "any") -> Callable[[Signals], bool]:
    """The rule of a pattern that is a fix: it fires when its fix saves more of the step than noise (on a trace with
    GPU rows, one without, or ``any``)."""
    def rule(s: Signals) -> bool:
        right_kind = on == "any" or bool(s.get("has_gpu")) == (on == "gpu")
        return right_kind and gain(s, pattern) >= floor(s, pattern)
    rule.__name__ = f"_{pattern}_saves_more_than_noise" + ("" if on == "any" else f"_{on}")
    return rule


_data_stall_gpu, _data_stall_cpu = _saves("data_stall", "gpu"), _saves("data_stall", "cpu")
_sync_stall = _saves("sync_stall")
_launch_overhead = _saves("launch_overhead")
_host_bound_gpu, _host_bound_cpu = _saves("host_bound", "gpu"), _saves("host_bound", "cpu")
_compilation = _saves("compilation")


def _h2d_copy(s: Signals) -> bool:
    return gain(s, "h2d_copy") >= floor(s, "h2d_copy") and "copy_exposed_share" in s


def _idle_counted_elsewhere(s: Signals, pattern: str, share: str) -> bool:
    """Whether the GPU idle time the cost model gives ``pattern`` (``share``) is well under what its fix saves on
    the critical path: the idle time it leaves is counted to another cause (``idle_cost_by_cause`` gives each idle
    stretch one cause, the what-if replays each fix), so quoting the share alone beside the saving would read as a
    contradiction (a batch loaded right after a sync: either fix closes the same gap)."""
    return get(s, share) < gain(s, pattern) * th.SHARE_QUOTED_MIN_OF_GAIN


def _say_data_stall(s: Signals) -> str:
    if not _idle_counted_elsewhere(s, "data_stall", "data_stall_share"):
        return (f"The GPU waits for data: {s['data_stall_share']:.0%} of step time it sits idle while the host loads the "
                "next batch.")
    after_sync = get(s.get("gpu_idle_ms_per_step") or {}, "sync") > 0
    return (f"The host loads the next batch for {get(s, 'host_data_wait_ms_per_step'):.1f} ms a step on the step's critical "
            f"path while the GPU waits; "
            + ("that idle time is counted to the sync just before the loading (sync_stall): with either fixed, the "
               "loading overlaps the GPU's work." if after_sync else
               f"only {s['data_stall_share']:.0%} of the step is GPU idle time counted to it, the rest of the wait "
               "overlapping GPU work the step still waits for."))


def _say_host_bound(s: Signals) -> str:
    """The host's own code in words: its GPU idle share, or, where the cost model counts that idle time to another
    cause (the host's code right after a sync: either fix closes the same gap), what its saving is instead."""
    what = "code that is neither data loading, kernel launching nor a sync (Python, NumPy, logging or metric work"
    if not _idle_counted_elsewhere(s, "host_bound", "host_bound_idle_share"):
        return f"The GPU idles {s['host_bound_idle_share']:.0%} of the step while the host runs {what} between steps)."
    after_sync = get(s.get("gpu_idle_ms_per_step") or {}, "sync") > 0
    return (f"The host runs {what}) on the step's critical path while the GPU waits; "
            + ("that idle time is counted to the sync just before it (sync_stall): with either fixed, the host's code "
               "overlaps the GPU's work." if after_sync else
               f"only {s['host_bound_idle_share']:.0%} of the step is GPU idle time counted to it, the rest of it "
               "overlapping GPU work the step still waits for."))


def _shown(value: float, fmt: str) -> str | None:
    """``value`` as ``fmt`` shows it, or None where that shows a zero: a figure that rounds to 0 is never quoted as
    evidence ("0.0 host syncs per step" beside a sync stall whose waits are not named syncs)."""
    text = format(value, fmt)
    return text if any(c in "123456789" for c in text) else None


def _say_sync_stall(s: Signals) -> str:
    """The sync stall in words. The cost model counts as syncs the calls named so and the frees made once the GPU has
    work (critical.freeing_after_gpu_work: cudaFree synchronizes the device); the sync figures count named syncs
    only, so where those round to 0 the waits are frees, and are said to be."""
    count = _shown(get(s, "sync_points_per_step"), ".1f")
    waits = _shown(get(s, "sync_blocked_share"), ".0%")
    idle = f"{s['sync_gpu_idle_share']:.0%}"
    if count is None:
        return ("The host waits for the GPU in calls that free GPU memory (cudaFree synchronizes the device: "
                "torch.cuda.empty_cache() in the loop, or the allocator giving memory back), not in named syncs; the GPU "
                f"then idles {idle} of the step waiting for the host; they take turns instead of overlapping"
                f"{_sync_share_words(s)}.")
    blocked = (f"the host waits {waits} of the step for the GPU, and the GPU then idles {idle} of it" if waits else
               f"the host's waits are short, and the GPU then idles {idle} of the step")
    return (f"{count} host syncs per step: {blocked} waiting for the host; they take turns instead of overlapping"
            f"{_sync_share_words(s)}.")


def _sync_share_words(s: Signals) -> str:
    if _idle_counted_elsewhere(s, "sync_stall", "sync_stall_share"):
        return ("; the GPU's idle time after them is counted to what the host does next, which removing the syncs "
                "would let overlap the GPU")
    return f" (at most {s['sync_stall_share']:.0%} to win back)"


def _say_copies(s: Signals) -> str:
    parts = []
    if "h2d_ms_per_step" in s:
        parts.append(f"Host-to-device copies take {s['h2d_ms_per_step']:.2f} ms per step at {s['h2d_gb_per_s']:.1f} GB/s")
    if get(s, "d2h_ms_per_step") >= 0.01:
        parts.append(f"device-to-host copies {s['d2h_ms_per_step']:.2f} ms per step")
    return (("; ".join(parts) or "Copies between host and device take time") + f" ({s['copy_pageable_share']:.0%} of bytes "
            f"from pageable memory), and {s['copy_exposed_share']:.0%} of the step no compute runs beside them.")


def _imbalanced(s: Signals) -> bool:
    return "comm_exposed_share" in s and get(s, "ranks") >= 2 and get(s, "imbalance_spread") >= th.IMBALANCE_SPREAD


def _communication(s: Signals) -> bool:
    return gain(s, "communication") >= floor(s, "communication") and "comm_exposed_share" in s and not _imbalanced(s)


def _gpu_bound(s: Signals) -> bool:
    # Busy counts a CUDA Graph replay's kernels only; the replay's whole span is the GPU's own work too. The GPU is
    # computing, not only copying: its kernels are at least half its busy time (a loop waiting on PCIe with its copy
    # engines busy is not GPU-bound).
    busy = max(get(s, "gpu_bound_busy"), get(s, "graph_span_share"))
    return busy >= th.GPU_BOUND_BUSY and get(s, "gpu_kernel_share") >= 0.5 * get(s, "gpu_bound_busy")


def _gpu_bound_says(s: Signals) -> str:
    busy, span = s["gpu_bound_busy"], s.get("graph_span_share", s["gpu_bound_busy"])
    if span - busy < 0.02:
        return f"The GPU is busy {busy:.0%} of the step: it is the bottleneck itself."
    return (f"The GPU is busy {busy:.0%} of the step with kernels, and CUDA Graph replays span {span:.0%} of it: the rest "
            f"of each replay is the gaps between its {s['kernels_per_step']:.0f} kernels a step, the GPU's own per-kernel "
            "cost. No host change removes them; fewer, bigger kernels do (fuse them: torch.compile, bigger batches) "
            "before Nsight Compute.")


def _capture_is_idle(s: Signals) -> bool:
    """No steps marked, and neither the GPU nor the host did much in the capture (a steady state found
    in it does not change that: the capture then holds a little loop in a lot of idle time)."""
    gpu_idle = (not s.get("has_gpu")) or get(s, "capture_idle_gpu_share") < th.CAPTURE_IDLE_GPU_SHARE
    return not s.get("has_step_markers") and gpu_idle and get(s, "capture_host_share") < th.CAPTURE_IDLE_HOST_SHARE


def _nothing_recorded(s: Signals) -> bool:
    """No op, kernel, call or range beyond the step markers: the profiler recorded nothing of the loop."""
    return get(s, "capture_events") == 0


def _other_accelerator(s: Signals) -> bool:
    """No CUDA/HIP GPU row, but rows in Kineto's categories for another accelerator (MTIA, XPU, HPU, ...):
    the device did work this tool does not read, so its idle time cannot be judged."""
    return not s.get("has_gpu") and get(s, "other_accelerator_events") >= 1


def _gpu_not_recorded(s: Signals) -> bool:
    """CUDA / HIP launches or GPU-only ops on the host, but no GPU row: the profiler did not record the GPU."""
    return not s.get("has_gpu") and get(s, "gpu_calls_without_gpu") >= 1


def _startup(s: Signals) -> bool:
    # judged on the part of the capture the diagnosis keeps when it kept a loop (context creation before an
    # 863-iteration loop is start-up the steps never pay), on the whole capture when it found none
    return get(s, "startup_judged_share") >= th.CAPTURE_STARTUP_SHARE and get(s, "capture_idle_gpu_share") < th.GPU_BOUND_BUSY


def _compiling(s: Signals) -> bool:
    """The kept steps' critical path is mostly compilation: the capture shows the compiler, not the loop."""
    return get(s, "compile_capture_share") >= th.CAPTURE_COMPILE_SHARE


def _graph_capture(s: Signals) -> bool:
    """Most kernel launches ran nothing, and the trace records stream capture: a CUDA Graph being built."""
    return get(s, "launches_without_kernels") >= th.CAPTURE_GRAPH_LAUNCH_SHARE and get(s, "stream_capture_calls") >= 1


def _cold(s: Signals) -> bool:
    # a busy GPU is its own figure however few its kernels; an idle one around a few first calls is no loop
    return (bool(s.get("has_gpu")) and get(s, "capture_kernels") < th.CAPTURE_MIN_KERNELS
            and get(s, "steps") <= th.CAPTURE_COLD_STEPS and get(s, "capture_idle_gpu_share") < th.CAPTURE_COLD_GPU_SHARE)


# --- sentences ----------------------------------------------------------------------------------
def _capture_length(ms: float) -> str:
    """A capture's length in the unit that shows it: a 14.6 ms capture printed in seconds read "0.0 s"."""
    return f"{ms / 1e3:.1f} s" if ms >= 999.5 else f"{ms:.3g} ms"


def _say_compilation(s: Signals) -> str:
    per = get(s, "compile_ms_per_step")
    return (f"The host compiles for {per:.1f} ms a step on the critical path ({s['compile_share']:.0%} of the steps): "
            "torch.compile or Triton autotuning at work, not the loop; the steps' own figures are what remains.")


def _say_capture(s: Signals) -> str:
    gpu = f"the GPU is busy {s['capture_idle_gpu_share']:.1%} of it" if s.get("has_gpu") else "no GPU work is recorded"
    text = (f"The capture spans {_capture_length(s['capture_ms'])} without step markers; {gpu} and the host is in recorded "
            f"ops, CUDA calls or ranges {s['capture_host_share']:.0%} of it: the figures describe an idle capture, not a training loop.")
    steady, window = s.get("steps_inferred"), s.get("steady_window")
    if steady and window:
        if (window[1] - window[0]) / 1e3 < th.CAPTURE_STEADY_SPAN_SHARE * s["capture_ms"]:
            text += (f" A loop repeats {steady['steps']} times at {window[0] / 1e3:.0f}-{window[1] / 1e3:.0f} ms: "
                     "scope the capture to it.")
        else:
            text += (f" Something repeats {steady['steps']} times across the capture, idle between repeats on host and "
                     "GPU alike (a sleep, I/O or another process): the trace cannot show what the program waited for.")
    return text


def _say_nothing_recorded(s: Signals) -> str:
    steps = int(get(s, "steps"))
    beside = f" beside its {steps} step marker{'s' if steps != 1 else ''}" if steps else ""
    return (f"The trace holds no recorded ops, kernels, CUDA calls or ranges{beside}: the profiler recorded nothing of "
            "the loop, so there is nothing to diagnose.")


def _say_not_recorded(s: Signals) -> str:
    return (f"The host makes {s['gpu_calls_without_gpu']} CUDA/HIP launches, copies, NCCL collectives or GPU-only ops, but the trace holds no "
            "GPU activity: the GPU was used and not recorded, so no figure about it can be read here.")


def _say_other_accelerator(s: Signals) -> str:
    cats = ", ".join(f"{c} {n}" for c, n in sorted(s.get("other_accelerator_categories", {}).items(), key=lambda x: -x[1]))
    return (f"The trace holds {s['other_accelerator_events']} events of an accelerator this tool does not read ({cats}) "
            "and no CUDA or ROCm GPU activity: the device's own work is not in the figures, so neither its idle time nor "
            "what the host costs it can be read here.")


def _say_compiling(s: Signals) -> str:
    return (f"The steps spend {s['compile_capture_share']:.0%} of their critical path compiling (torch.compile, Inductor, "
            "Triton autotuning, NVRTC): the capture shows the compiler at work, not the loop.")


def _say_graph_capture(s: Signals) -> str:
    return (f"{s['launches_without_kernels']:.0%} of the kernel launches ran no kernel, and the host calls stream capture "
            f"{int(get(s, 'stream_capture_calls'))} times: launches made while a CUDA Graph is captured are recorded into "
            "the graph, not run. The capture shows graphs being built, not the loop that replays them.")


def _say_startup(s: Signals) -> str:
    what = "teardown (module unloading at exit)" if get(s, "teardown_share") >= 0.5 * get(s, "startup_share") else \
        "start-up (CUDA context creation inside the first CUDA call, allocations, module loading)"
    return (f"The host spends {s['startup_share']:.0%} of the {_capture_length(s['capture_ms'])} capture in CUDA {what}: the "
            "capture shows the program starting or ending, not its loop.")


def _say_cold(s: Signals) -> str:
    k, n = int(s["capture_kernels"]), max(int(s.get("steps", 0)), 1)
    return (f"The capture holds {k} kernel{'s' if k != 1 else ''} in {n} iteration{'s' if n != 1 else ''} and the GPU is busy "
            f"{s['capture_idle_gpu_share']:.0%} of it: these are first calls, whose host time is lazy initialisation "
            "(module loading, the allocator, library handles) that a warm loop does not pay.")


_FIX_OTHER_ACCELERATOR = ("Read this trace where the accelerator's rows are drawn: Perfetto (ui.perfetto.dev) or "
                          "chrome://tracing show every category, and the accelerator's vendor tools analyse them. This "
                          "tool analyses CUDA and ROCm GPUs; its host-side figures alone would leave the device out.")
_FIX_RECORD_GPU = ("Record the GPU: torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) (on ROCm "
                   "the same flag records HIP kernels), or nsys profile --trace=cuda; if it is already set, look for a "
                   "CUPTI error in the profiler's log (another profiler attached, or no permission for GPU counters).")
# An empty torch.profiler trace, both ways seen with torch 2.13: schedule(wait=1, warmup=1, active=3) with 2
# prof.step() calls, and 7 steps of the same repeating schedule without on_trace_ready ("Profiler clears events at
# the end of each cycle"): each exported only a ProfilerStep range after the with block.
_FIX_NOTHING_RECORDED = ("Usually one of two. The profiler's schedule never reached its active steps: call prof.step() "
                         "after every step and run at least wait + warmup + active of them (schedule(wait=1, warmup=1, "
                         "active=3) needs 5). Or no on_trace_ready with a schedule that repeats (repeat=0, the default): "
                         "each cycle's events are cleared when the next begins, so export_chrome_trace after the with "
                         "block finds none; pass on_trace_ready=torch.profiler.tensorboard_trace_handler(DIR), or "
                         "schedule(..., repeat=1) as helpers.capture does.")
_FIX_COMPILE_WARM_UP = ("Capture after compilation: run the compiled step a few times first (its first call compiles "
                        "the forward, its first backward the backward; CUDA Graph trees record on the next calls), then "
                        "capture steady steps (torch.profiler.schedule(wait=1, warmup=2, active=3), or nsys "
                        "--capture-range=cudaProfilerApi around them). To time compilation itself, read its ranges: "
                        "helpers.metrics.compile_time_us(trace).")
_FIX_GRAPH_REPLAY = ("Capture the replays, not the capture: start the profiler after the graphs are built (the warm-up and "
                     "capture runs first), so each step shows a graph launch and its kernels (with nsys, "
                     "--cuda-graph-trace=node shows the kernels of each replay).")
_FIX_WARM_UP = ("Warm up before capturing: run a few steps first, then capture several steady ones: torch.profiler.schedule("
                "wait=1, warmup=2, active=3) with prof.step() each step, or nsys profile --capture-range=cudaProfilerApi "
                "around the steady steps; stop the capture before the program exits.")


CATALOGUE: tuple[Pattern, ...] = (
    Pattern(
        "data_stall", "data loading stall",
        rules=(
            Rule(_data_stall_gpu, ("gains",), "data_stall_share", _say_data_stall,
                 ("data_stall_share", "host_data_wait_ms_per_step", "gpu_idle_ms_per_step"), "idle_gap"),
            Rule(_data_stall_cpu, ("gains",), "cpu_data_wait_share",
                 lambda s: (f"The loop spends {s['cpu_data_wait_share']:.0%} of each step waiting for the next batch "
                            "(CPU-only trace: no GPU activity recorded)."),
                 ("cpu_data_wait_share", "host_data_wait_ms_per_step"), "longest_step", on="cpu"),
        ),
        fix="Feed the GPU faster: DataLoader(num_workers>0, pin_memory=True, prefetch_factor, "
            "persistent_workers=True) and .to(device, non_blocking=True); move heavy per-sample work out of the loop.",
        cpu_fix="Load batches ahead of the loop: DataLoader(num_workers>0, prefetch_factor, persistent_workers=True) "
                "so workers prepare the next batch while this one trains; move heavy per-sample work out of the loop.",
        colour="#dd8452", cause="data_wait", host_is="the host inside the DataLoader",
        during="while the host is in the DataLoader", causes=("data_wait",),
        what_if=WhatIf("the next batch were ready when the step asks for it", factors=(("data_wait", 0.0),)), locate="idle_gaps"),
    Pattern(
        "launch_overhead", "launch overhead",
        rules=(Rule(_launch_overhead, ("gains",), "launch_idle_share",
                    lambda s: (f"{s['kernels_per_step']:.0f} kernels per step, median {s['launch_median_kernel_us']:.1f} us: the GPU "
                               f"finishes each faster than the host launches the next, so it idles {s['launch_idle_share']:.0%} of the step."),
                    ("launch_idle_share", "launch_share_of_idle", "kernels_per_step", "launch_median_kernel_us",
                     "share_kernels_under_10us", "median_launch_call_us", "launch_individual_share"), "idle_gap"),),
        fix="Launch fewer, bigger kernels: torch.compile (fuses ops), CUDA Graphs (one launch replays "
            "the whole step), fused/foreach optimizers, or a bigger batch so each kernel does more work.",
        colour="#4c72b0", cause="launch", host_is="the host launching kernels", during="while the host launches kernels",
        causes=("launch",), what_if=WhatIf("the launches were one graph replay", factors=(("launch", 0.0),)), locate="idle_gaps"),
    Pattern(
        "sync_stall", "synchronization stall",
        rules=(Rule(_sync_stall, ("gains",), "sync_stall_share",
                    _say_sync_stall,
                    ("sync_stall_share", "sync_points_per_step", "host_blocked_ms_per_step", "sync_blocked_share",
                     "sync_caused_by"), "longest_sync"),),
        fix="Remove syncs from the hot loop: drop torch.cuda.synchronize(), keep losses/metrics on the GPU "
            "and call .item()/.cpu()/print only every N steps; avoid branching on GPU values.",
        colour="#c44e52", cause="sync", host_is="the host just back from a sync", during="just after a host sync",
        causes=("sync",), what_if=WhatIf("the syncs were asynchronous", factors=(("sync", 0.0),)), locate="syncs"),
    Pattern(
        "h2d_copy", "long host-to-device copies",
        rules=(Rule(_h2d_copy, ("gains", "copy_exposed_share"), "copy_exposed_share", _say_copies,
                    ("h2d_exposed_share", "h2d_ms_per_step", "h2d_gb_per_s", "h2d_pageable_share", "h2d_overlap",
                     "copy_exposed_share", "d2h_ms_per_step"),
                    "largest_h2d"),),
        fix="Make copies fast and hidden: pinned host memory (pin_memory=True or tensor.pin_memory()), "
            ".to(device, non_blocking=True), and prefetch the next batch on a side stream while this one computes.",
        colour="#ff7f0e", causes=("copy",),
        what_if=WhatIf("the copies were from pinned memory and each batch prefetched beside the compute",
                       overlapped=("h2d_copies",), rates=(("pageable_copies", "pinned"),)), locate="h2d_copies"),
    Pattern(
        "host_bound", "host-bound loop",
        rules=(
            Rule(_host_bound_gpu, ("gains",), "host_bound_idle_share", _say_host_bound,
                 ("host_bound_idle_share", "gpu_idle_ms_per_step", "host_busy_in"), "idle_gap"),
            Rule(_host_bound_cpu, ("gains",), "cpu_host_other_share",
                 lambda s: (f"The host spends {s['cpu_host_other_share']:.0%} of each step ({s['host_other_ms_per_step']:.1f} ms) "
                            f"outside PyTorch ops, data loading and communication, more than in the model's ops "
                            f"({s['cpu_op_share']:.0%}): Python, NumPy, logging or metric code runs the loop. CPU-only trace: the "
                            "host is the only device, so it shows how long that work takes, not how long a GPU would sit idle for it."),
                 ("cpu_host_other_share", "host_other_ms_per_step", "cpu_op_share", "host_busy_in"), "host_other", on="cpu"),
        ),
        fix="Take the host work off the critical path: do it every N steps, on the GPU (torch ops instead of "
            "NumPy/Python), in a background thread, or in the DataLoader's workers; profile it with "
            "with_stack=True (or py-spy) to see which Python code it is.",
        cpu_fix="Take the host work off the loop's critical path: run it every N steps, vectorise it (torch or NumPy "
                "array ops instead of Python loops), or move it to a background thread or the DataLoader's workers; "
                "profile it with with_stack=True (or py-spy) to see which Python code it is.",
        colour="#ccb974", cause="other", host_is="the host in other code", during="while the host runs other code",
        causes=("other",),
        what_if=WhatIf("the host's own code ran off the critical path (every N steps, in a worker, or on the GPU)",
                       factors=(("other", 0.0),)), locate="idle_gaps"),
    Pattern(
        "communication", "communication bottleneck",
        rules=(Rule(_communication, ("gains", "comm_exposed_share", "ranks", "imbalance_spread"), "comm_exposed_share",
                    lambda s: (f"Collectives take {s['collective_ms_per_step']:.2f} ms per step and {s['comm_exposed_share']:.0%} "
                               "of step time is spent in communication that nothing overlaps."),
                    ("comm_exposed_share", "collective_ms_per_step", "exposed_ms_per_step", "ranks"), "worst_comm_step",
                    on="any"),),
        fix="Overlap and shrink communication: let DDP bucket gradients and all-reduce during backward "
            "(tune bucket_cap_mb), compress gradients (bf16/fp16 comm hook), and all-reduce less often (no_sync with accumulation).",
        colour="#9467bd", cause="collective", host_is="a collective running", during="in collectives",
        causes=("collective",), what_if=WhatIf("the collectives overlapped the compute", overlapped=("collective",)), locate="collectives"),
    Pattern(
        "load_imbalance", "uneven load across ranks",
        rules=(Rule(_imbalanced, ("comm_exposed_share", "ranks", "imbalance_spread"), "imbalance_cost_share",
                    lambda s: (f"Rank {s['slowest_rank']} computes {s['compute_ms_per_step_by_rank'][s['slowest_rank']]:.1f} ms per "
                               f"step, rank {s['fastest_rank']} only {s['compute_ms_per_step_by_rank'][s['fastest_rank']]:.1f} ms "
                               f"({s['imbalance_spread']:.0%} spread): the fast ranks wait in the all-reduce."),
                    ("imbalance_spread", "exposed_ms_per_step", "slowest_rank", "fastest_rank",
                     "compute_ms_per_step_by_rank", "exposed_collective_ms_per_step_by_rank"), "worst_comm_step",
                    on="any"),),
        fix="Give every rank the same work: even shards and batch sizes, the same sequence lengths per rank, "
            "or a better parallelism strategy; the fast ranks' waiting in all-reduce is the cost.",
        colour="#8c564b", locate="collectives"),
    Pattern(
        "gpu_bound", "GPU-bound",
        rules=(Rule(_gpu_bound, ("gpu_bound_busy", "graph_span_share", "gpu_kernel_share"), "gpu_kernel_share", _gpu_bound_says,
                    ("gpu_bound_busy", "graph_span_share", "gpu_kernel_share", "gpu_path_share", "top_kernels"), "none"),),
        fix="The GPU itself is the bottleneck: profile the top kernels with Nsight Compute "
            "(ncu --set full -k <kernel>) and make them faster (mixed precision, better shapes, fused kernels).",
        colour="#55a868", cause="graph", host_is="the GPU between a CUDA Graph's own kernels",
        during="between a CUDA Graph's own kernels", causes=("gemm", "kernel", "graph"),
        what_if=WhatIf("the fp32 matrix products ran at the device's low-precision rate on tensor cores",
                       rates=(("ffma_gemms", "low_precision"),)), locate="kernels"),
    Pattern(
        "compilation", "compilation in the steps",
        rules=(Rule(_compilation, ("gains",), "compile_share", _say_compilation,
                    ("compile_share", "compile_ms_per_step", "steps"), "compile_range", on="any"),),
        fix=("Compile before the steps you time: run a few warm-up steps after torch.compile (the first calls compile, "
             "and the backward compiles in the first backward), then capture. If compilation recurs in steady steps, "
             "the model recompiles: find why with TORCH_LOGS=recompiles,graph_breaks (changing shapes: "
             "torch._dynamo.mark_dynamic or dynamic=True; Python values that change each step), and keep compiled "
             "artefacts between runs (Inductor's FX graph cache) so start-up does not compile again."),
        colour="#17becf", causes=("compile",),
        what_if=WhatIf("the compilation were done before the steps", factors=(("compile", 0.0),)), locate="compile"),
    Pattern(
        "capture_window", "a capture that is not a training loop",
        rules=(Rule(_nothing_recorded, ("capture_events",), "none", _say_nothing_recorded, ("capture_events", "steps", "capture_ms"),
                    "none", on="any", fix=_FIX_NOTHING_RECORDED, reason="nothing_recorded"),
               Rule(_other_accelerator, ("has_gpu", "other_accelerator_events"), "none", _say_other_accelerator,
                    ("other_accelerator_events", "other_accelerator_categories", "capture_ms"), "none", on="cpu",
                    fix=_FIX_OTHER_ACCELERATOR, reason="other_accelerator"),
               Rule(_gpu_not_recorded, ("has_gpu", "gpu_calls_without_gpu"), "none", _say_not_recorded,
                    ("gpu_calls_without_gpu", "capture_ms"), "none", on="cpu", fix=_FIX_RECORD_GPU, reason="gpu_not_recorded"),
               Rule(_compiling, ("compile_capture_share",), "none", _say_compiling,
                    ("compile_capture_share", "capture_ms"), "compile_range", on="any", fix=_FIX_COMPILE_WARM_UP,
                    reason="compilation"),
               Rule(_graph_capture, ("launches_without_kernels", "stream_capture_calls"), "none", _say_graph_capture,
                    ("launches_without_kernels", "stream_capture_calls", "capture_ms"), "none", fix=_FIX_GRAPH_REPLAY,
                    reason="graph_capture"),
               Rule(_startup, ("startup_judged_share", "capture_idle_gpu_share"), "none", _say_startup,
                    ("startup_share", "teardown_share", "capture_ms", "capture_idle_gpu_share"), "none", on="any",
                    fix=_FIX_WARM_UP, reason="startup"),
               Rule(_cold, ("capture_kernels", "steps", "capture_idle_gpu_share"), "none", _say_cold,
                    ("capture_kernels", "steps", "capture_idle_gpu_share", "capture_ms"), "none", fix=_FIX_WARM_UP,
                    reason="cold"),
               Rule(_capture_is_idle, ("has_step_markers", "capture_idle_gpu_share", "capture_host_share"), "none",
                    _say_capture, ("capture_ms", "capture_host_share", "capture_idle_gpu_share", "has_step_markers",
                                   "steps_inferred"), "steady_state", on="any", reason="idle")),
        fix="Scope the capture to the training loop's steady state: torch.profiler.schedule(wait=1, warmup=1, "
            "active=3) with prof.step() each step, or nsys profile --capture-range=cudaProfilerApi / "
            "--delay and --duration; mark steps (ProfilerStep#N or an NVTX range) so figures are per step.",
        colour="#7f7f7f", exclusive=True),
)

#: pattern name -> its record.
BY_NAME: dict[str, Pattern] = {p.name: p for p in CATALOGUE}
#: The pattern names, in catalogue order.
PATTERNS: tuple[str, ...] = tuple(BY_NAME)
#: idle cause (helpers.metrics.CAUSES) -> the pattern that owns it.
BY_CAUSE: dict[str, Pattern] = {p.cause: p for p in CATALOGUE if p.cause}


def colour(pattern: str, default: str = "#999999") -> str:
    """A pattern's plot colour (``default`` for a name not in the catalogue)."""
    p = BY_NAME.get(pattern)
    return p.colour if p else default


__all__ = ["BY_CAUSE", "BY_NAME", "CATALOGUE", "CAUSE", "CAUSES", "IDLE_CAUSES", "PATH_CAUSES", "PATTERNS", "WINDOWS", "Cause",
           "Pattern", "Rule", "SIGNALS", "Signal", "Signals", "WhatIf", "colour", "floor", "gain", "get"]
