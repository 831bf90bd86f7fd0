"""Thresholds the diagnosis uses, with where each number came from.

Each is a share of step time (or a plain figure) that separates the recorded broken and fixed
traces in ``data/``. ``python tools/calibrate_thresholds.py`` recomputes the figures behind them
from every trace in the manifest and writes ``data/thresholds.md``; the values below sit between
the broken and the fixed traces' figures listed there.
"""

from __future__ import annotations

#: GPU idle time blamed on waiting for data, as a share of step time.
DATA_STALL_SHARE = 0.10
#: A sync stall: at least this many sync points per step ...
SYNC_POINTS_PER_STEP = 1.0
#: ... the host blocked in them at least this share of the step ...
SYNC_BLOCKED_SHARE = 0.10
#: ... while the GPU is idle at least this share (else the GPU is simply the bottleneck).
SYNC_GPU_IDLE_SHARE = 0.10
#: GPU idle time while the host is dispatching / launching, as a share of step time.
LAUNCH_IDLE_SHARE = 0.20
#: ... when launching is the main cause of the GPU's idle time (the launch gaps' share of all idle) ...
#: The course's launch_overhead broken H200 trace puts 0.9+ of its idle on launches; a steady window
#: 40% idle with 99% of it on launches and a median kernel of 24.9 us is launch-bound too (the kernel
#: size gate this replaced, median <= 20 us, missed it). Loops with other problems put most idle elsewhere.
LAUNCH_SHARE_OF_IDLE = 0.5
#: ... when most kernels are launched one by one (not replayed from a CUDA Graph).
LAUNCH_INDIVIDUAL_SHARE = 0.5
#: Copy time between host and device (both directions) that no compute hides, as a share of step time.
H2D_EXPOSED_SHARE = 0.10
#: ... and fixable: this share of bytes from pageable memory, or less than this overlap with compute.
H2D_PAGEABLE_SHARE = 0.5
H2D_MIN_OVERLAP = 0.5
#: Collective time that no compute hides, as a share of step time.
COMM_EXPOSED_SHARE = 0.10
#: (slowest - fastest) / slowest rank's compute time per step. Balanced gloo jobs on two pinned
#: CPU cores measured 0.00-0.42 (data/thresholds.md); the imbalance variant (4x the batch on one
#: rank) 0.59-0.63. Two ranks sharing two cores are noisy: on GPUs expect a cleaner separation.
IMBALANCE_SPREAD = 0.50
#: A GPU busy this much of the step is the bottleneck itself.
GPU_BOUND_BUSY = 0.85
#: On CPU-only traces: host time in data loading, as a share of step time.
CPU_DATA_WAIT_SHARE = 0.30
#: A loop is host-bound when the GPU idles this share of the step while the host is in none of
#: data loading, launching, syncs or collectives (summary's ``other``). The recorded H200 host_bound
#: traces (issue 11, profiler and nsys of each run) measured: broken 0.76 / 0.80, synced (a .item()
#: before the host work) 0.72 / 0.79, fixed 0.32 / 0.35; the course's other traces 0.00-0.30
#: (data_stall fixed 0.28, launch compile 0.30, data/thresholds.md). The bar sits between.
HOST_BOUND_IDLE_SHARE = 0.45

# --- capture window -------------------------------------------------------------------------
#: Without step markers, a capture whose GPU is busy less than this share of it ... The course's
#: most GPU-idle real loops (data_stall broken, launch_overhead broken on the H200) run at 2-4%,
#: also in their Nsight-only exports; the public AlexNet capture at 0.2%.
CAPTURE_IDLE_GPU_SHARE = 0.01
#: ... and whose host is in recorded ops / CUDA calls less than this share is mostly idle:
#: the figures describe the capture, not the loop (the public AlexNet trace: 0.2% GPU over 43 s).
CAPTURE_IDLE_HOST_SHARE = 0.5

#: A capture whose host spends at least this share of it in CUDA start-up or teardown calls (context
#: creation inside the first CUDA call, allocations, module loading and unloading) describes the
#: program's start or end, not its loop. The corpus's start-up captures (tests/corpus: HTA's AlexNet
#: and simple-add examples, a 20 s capture of four kernels) spend 0.81-0.99 of the capture there;
#: its real loops 0.00-0.38 (a ResNet-50 whose first step allocates: 0.38); the course's traces 0.00-0.01.
CAPTURE_STARTUP_SHARE = 0.5
#: With at most CAPTURE_COLD_STEPS steps, fewer kernels than this in the whole capture are first calls:
#: the host time around them is lazy initialisation (module loading, allocator, library handles), not
#: a loop's. Real steps in the corpus launch 41-1,500 kernels (the smallest, a BERT-small forward: 60);
#: its one- or two-iteration captures of 1-14 kernels are all cold starts.
CAPTURE_MIN_KERNELS = 32
CAPTURE_COLD_STEPS = 2
#: ... while the GPU is busy less than this share of the capture (the corpus's cold starts: 0-2%; a
#: CUDA Graph replayed from a graph-level nsys export has a few rows and a GPU busy 74% of the time).
CAPTURE_COLD_GPU_SHARE = 0.5

#: The capture checked first (helpers.capture): a share of kernel launches with no kernel recorded, or of kernels
#: that start before their launch call, at least this large is reported (measured below, in CAPTURE_* notes).
CAPTURE_LOST_LAUNCH_SHARE = 0.05
#: ... a kernel counts as starting before its call when it does by more than this (microseconds): timestamps of
#: the host and the GPU are each rounded to a microsecond in Kineto's JSON.
CAPTURE_CLOCK_TOLERANCE_US = 2.0
#: Steps whose lengths have a coefficient of variation at least this large do different work: their mean describes
#: none of them.
CAPTURE_STEP_SPREAD = 0.5
#: A capture whose kept steps spend at least this share of their critical path compiling shows the compiler, not the
#: loop (with CAPTURE_STARTUP_SHARE's reasoning: the loop's own figures are the minority).
CAPTURE_COMPILE_SHARE = 0.5
#: A capture in which at least this share of kernel launches ran no kernel, with stream-capture calls in it, recorded
#: a CUDA Graph being captured: its launches went into the graph, not to the GPU.
CAPTURE_GRAPH_LAUNCH_SHARE = 0.5

# --- metric constants (moved here from metrics.py, still importable there) ------------------
#: The first GPU work of a capture that starts this long (microseconds) after its launch call returned
#: was queued behind work the capture did not record (launched before the profiler started). Idle GPUs
#: start their first work 0.3-24 us after the call in the corpus and the course's H200 traces (the
#: largest: a first kernel on an MI300X); the published vLLM full-graph decode capture (tests/corpus)
#: queues its first copy 7.8 ms ahead while the previous, unrecorded step still runs. A lazily loaded
#: module delays a first kernel by milliseconds too (HTA's simple-add capture: 3.9 ms), which leaves
#: that stretch just as unexplained by the host, so 1 ms sits well above launch latency and below both.
QUEUED_BEFORE_RECORD_US = 1000.0
#: The GPU paces a loop (its steps, not the host's, are the analysis windows) when its steps are this many
#: times longer than the host's and every step's GPU work ends after the host started the next one. The
#: course's GPU-bound H200 recordings: GPU steps 1.4-5.2x the host's profiled steps (sync_stall fixed 13.8 vs
#: 9.6 ms, h2d_copy fixed 2.9 vs 0.56 ms), and their unprofiled step times (data/manifest.json step_ms) are the
#: GPU's; in a host-paced loop both run at the same period (ratio 1.0), so 1.1 leaves room for jitter.
GPU_PACED_RATIO = 1.1
#: Kernels shorter than this (microseconds) are "small": launch cost rivals their run time.
SMALL_KERNEL_US = 10.0
#: A GPU gap counts as starting "as a sync returns" when the sync ends up to this long before it ...
GAP_AFTER_SYNC_TOLERANCE_US = 50.0
#: ... or up to this long after the GPU went idle (microseconds).
SYNC_RETURN_US = 500.0
#: On traces without framework ops (Nsight-only), launch calls this close (microseconds) are one
#: stretch of dispatching: PyTorch's per-op host cost between launches is 10-30 us on the H200
#: traces (median launch call 6.9 us, 19,932 calls in the issue's tiny-transformer export).
LAUNCH_DISPATCH_BRIDGE_US = 30.0

# --- the critical path (helpers.critical) ----------------------------------------------------------
#: A GPU op that starts this soon (microseconds) after work on another stream of its device ends, later than its
#: own launch and stream predecessor allow, waited for that work (an event record / stream wait). Streams that
#: wait on an event start their next op 1.6-4 us after the recorded work ends in the course's H200 prefetching
#: loop (data/h2d_copy__fixed__h200.json.gz); 20 us leaves room for slower GPUs and stays below a launch gap.
CROSS_STREAM_TOL_US = 20.0
#: The GPU's own gap between two kernels it runs back to back with nothing to wait for: the median gap between
#: the kernels of one CUDA Graph replay in the course's H200 recording (data/launch_overhead__graphs__h200:
#: 0.26 us, 10th-90th percentile 0.22-0.29 us over 2,008 kernels). Used where a trace shows no such gap of its own
#: (every kernel launch-bound): what launches as one graph replay would leave between them.
GRAPH_NODE_GAP_US = 0.26
#: Copies between the host and pinned memory run at this many GB/s where a trace has none of its own to measure:
#: the course's H200 (PCIe 5) moved the h2d_copy loop's 64 MB batches at 55.3 GB/s from pinned memory against 6.7
#: GB/s from pageable memory (python -m helpers summary data/h2d_copy__fixed__h200.json.gz, and __broken__).
PINNED_COPY_GB_PER_S = 55.3
#: A matrix product in the device's low precision runs this many times faster than on its fp32 FFMA pipes where no
#: device profile names the trace's GPU: the H200's, read off the course's recordings (data/device_profiles.json,
#: bf16 784.1 / fp32 51.6 TFLOP/s at lab 08's 2048x4096x4096 shape).
LOWP_GEMM_SPEEDUP = 15.2
#: A fix that saves less than this share of the step is within the noise of what the step's graph can tell: the
#: what-if of the course's recorded fixes is off by a median 2% of the fixed step (docs/benchmarks.md, "What-if
#: against the measured fixes"), and the fixed GPU loops keep at most 3% of gain for the cause they fixed
#: (data_stall 0.03, h2d_copy 0.03, sync_stall 0.00, launch_overhead graphs 0.02). The same plan recorded on an H100
#: (2026-12-05, docs/gpu-track/README.md) keeps 0.06 of data_stall fixed's step in its data wait, one of its five
#: steps loading for 0.56 ms against 0.16-0.25 in the others: one trace over the bar, which stays where it is.
GAIN_FLOOR_SHARE = 0.05
#: ... on a trace without GPU rows (a CPU loop), the data wait and the host's own code: there the host is the only
#: device, and its loader's workers share its cores. The course's fixed CPU loops keep 0.09-0.19 of the step in
#: them (data_stall fixed 0.09 data, mystery fixed 0.19 host code, 2 cores), the broken ones 0.37-0.50 (data_stall
#: and mystery broken 0.48 / 0.50): the bar sits between (the data-wait rule's earlier bar, 0.30, measured the same).
CPU_GAIN_FLOOR_SHARE = 0.30
#: Two fixes whose predicted steps are closer than this share of the smaller are not told apart by the what-if:
#: its error on the course's recorded fixes (GPU track, profiler and nsys) is at most 20% at its 80th percentile.
#: Between them the larger share of GPU idle time the trace shows for each (the pattern's cost figure) decides.
WHAT_IF_TIE_SHARE = 0.20
#: A CUDA call not named a sync waited for the GPU (``cudaFree``'s implicit device sync, an allocation that
#: frees cached blocks) when it returned within this long after all GPU work launched before it had finished ...
#: Named syncs in the course's H200 traces return 3.1-12.9 us after the work they waited for (sync_stall and
#: mystery broken, 67 syncs); the public negative-queue trace's median is 7 us.
IMPLICIT_SYNC_RETURN_US = 20.0
#: ... and took at least this long (a call of a few microseconds that happens to end as the GPU drains is no wait).
IMPLICIT_SYNC_MIN_US = 10.0

#: Nsight Compute: a kernel whose compute and memory throughput are both below this share of peak
#: (percent) is latency-bound, not limited by either unit. The figure is ncu's own SpeedOfLight
#: rule ("below 60.0% of peak typically indicate latency issues").
NCU_LATENCY_BOUND_PCT = 60.0


# --- pass bars of the labs' checks -------------------------------------------------------------
# The checks judge the fix from evidence a busy machine does not change (shares, counts, ratios);
# step-time speed-ups are reported beside the verdict, never the reason a fixed loop fails.
#: Lab 01/05: the fixed loop's data-wait share (host time in DataLoader.__next__ / step time) must
#: fall at least this many times below the broken loop's. Broken CPU loop ~0.6-0.7, fixed 0.12-0.15
#: (commit 726791d's calibration on 2 cores), so 2x leaves margin for a hog on one core.
PASS_DATA_WAIT_DROP = 2.0
#: Lab 01: how many loader worker processes a fix needs, from the learner's own broken trace. With the
#: single-process loader the data-wait share w splits a step into making a batch, P = w * step, and the
#: rest, C = (1 - w) * step. n worker processes make n batches every P while the step takes one every C,
#: so they keep up when n * C >= DATA_KEEP_UP_RATIO * P: n >= w / (1 - w). Measured 2026-12-04 on 2 cores
#: (CPU track, 10-step runs): P ~20.9 ms, C ~14.3 ms, w 0.56-0.66 quiet or with a hog on one core
#: (P/C 1.29-1.95); num_workers=1 stayed slow (29.3 ms quiet, 72.4 ms hogged against the broken 59.1 ms,
#: w 0.47 / 0.33), num_workers=2 kept up (w 0.14 quiet, 0.11 hogged). The recorded H200 broken trace has
#: w 0.84 (P/C 5.3), the recorded CPU one 0.48 (P/C 0.91).
DATA_KEEP_UP_RATIO = 1.0
#: ... less this much of P/C before rounding up: one short trace places w only within a few points (six
#: broken 4- and 10-step captures on 2 cores, 2026-12-04: w 0.587-0.666, P/C 1.42-2.00), and near
#: w = 2/3 a point moves P/C by 0.1, so a count that keeps up on average is not refused for one noisy
#: trace. It stays below the 1.29 smallest measured P/C, so one worker still fails there.
DATA_WORKERS_SLACK = 0.15
#: ... and never more than this: as w -> 1 the ratio has no bound, and past the lab solution's
#: min(8, cores) more processes are not the fix (the per-sample work is; the check's message says so).
DATA_WORKERS_CAP = 8


# --- the learner's reading of a timeline (helpers.checks.reading) ------------------------------
# A reading states pattern, window, a proving figure and the cost; these are how close each must be.
# Set so that a learner reading by eye off the course's plots passes (the figures there are printed
# to two digits, the axis ticks every few ms), while naming the wrong stretch or figure does not.
#: A window must lie on the pattern: more than this share of its length inside the pattern's stretches
#: (gaps of that cause, its copies or collectives), "most of it". At the earlier 0.25 "the second step,
#: start to end" passed on every lab trace: its cover on the eight of tests/test_reading_seal.py is
#: 0.50-0.86 (2026-12-05), so the stretch rule below is what refuses it; a window on the pattern's
#: longest stretch passes on each of them (the same tests).
READING_WINDOW_MIN_COVER = 0.5
#: ... and point at it, not at a whole step around it: a window longer than this share of its step must
#: not reach further than READING_WINDOW_STRETCH_SLACK of the step past the pattern's longest stretch
#: in that step (a data wait that fills 86% of the step may be read as that 86%, not as the step).
#: gpu_bound is exempt: its pattern is the busy step itself.
READING_WINDOW_MAX_STEP_SHARE = 0.5
READING_WINDOW_STRETCH_SLACK = 0.05
#: ... and lie inside one step: "where it shows", not the whole capture. It may reach this share of
#: that step's length past either edge: a window read by eye off a plot whose ticks are a few ms apart,
#: and an idle stretch after an end-of-step sync that carries on into the next step.
READING_WINDOW_STEP_SLACK = 0.10
#: A figure that is a share passes within this many points (absolute) ...
READING_SHARE_ABS = 0.05
#: ... any figure within this relative error (ms, counts, GB/s read off a plot).
READING_FIGURE_REL = 0.20
#: The cost passes within 5 points of step time or 10% of the trace's cost, whichever is wider. The
#: labs name the code that computes each cost (checks.reading.cost_howto), so a learner who runs it
#: is exact; the band leaves room for rounding to two digits and for reading a live rerun. At the
#: earlier 10 points / 30% a cost of 0.70 passed for a true 0.98.
READING_COST_ABS = 0.05
READING_COST_REL = 0.10
#: Besides the top finding, a reading may name any finding costing at least this share of step time
#: and at least this fraction of the top finding's cost (a loop with two problems at once).
READING_MIN_COST = 0.10
READING_TIE_SHARE = 0.5

# --- steady state of a capture without step markers (helpers.metrics.steady) ------------------
#: A stretch repeats when at least this share of its elements (range, kernel or op names) equal the
#: element one period later: tolerates a kernel that changes now and then (an allocator's memset, a
#: cuBLAS algorithm switch), not a different loop. The course's nsys exports repeat exactly (1.00).
STEADY_MIN_MATCH = 0.9
#: ... at least this many times (two repeats are a coincidence as often as a loop).
STEADY_MIN_REPEATS = 3
#: Periods covering at least this share of what the best-covering period covers compete on match.
STEADY_NEAR_COVER = 0.8
#: Long kernel sequences: try at most about this many candidate periods (spacings of rare kernels).
STEADY_MAX_CANDIDATES = 300
#: Repeats whose span holds less than this share of the capture's GPU work are not the capture's loop: a program that
#: copies a few inputs, then runs one long kernel (a 50 s solver, a 120 ms GEMM), repeats its copies and nothing else.
#: Traces whose repeats are their loop keep 0.68-1.0 of their GPU work in them (the course's nsys exports and the
#: corpus's unmarked traces; the lowest, ext_switch_transformers, 0.68); two captures that compile rather than loop
#: keep 0.0 and 0.34 (nsys_nvfuser_h200_nvrtc_compile, tl_mi300_xdit_flux_compile_warmup).
STEADY_MIN_GPU_WORK = 0.5
#: With more repeats than this, the first is dropped as ramp-up (the GPU queue starts empty where the
#: capture starts). 2 keeps every repeat of a 2-repeat capture and at least 2 steps otherwise.
STEADY_DROP_FIRST_ABOVE = 2
#: On traces without framework ops (Nsight-only), an innermost NVTX range with at least this many
#: launch calls per millisecond is the host dispatching GPU work throughout it. The course's nsys
#: exports: forward / backward / optimizer ranges 6-57 launches per ms; data 0.0-2.4, logging 0.2,
#: the host-bound bookkeeping 0.
LAUNCH_RANGE_PER_MS = 5.0
#: CPU-only traces: a loop is host-bound when the host spends at least this share of the step
#: outside PyTorch ops, data waits and collectives, i.e. more than in the model's ops and loading
#: together. The course's CPU recordings measured 0.02-0.11 (host_bound broken 0.11: on a CPU the
#: model's own ops take 89% of its step, so the bookkeeping that starves an H200 is a small part
#: here), launch_overhead broken 0.36 (Python between hundreds of tiny ops), mystery fixed 0.18.
CPU_HOST_BOUND_SHARE = 0.5
#: ... and the repeating stretch must hold at least this share of the sequence (a few equal names in
#: a row are no loop; start-up and tail may take the rest).
STEADY_MIN_COVER = 0.5
#: An idle capture's finding points at the steady state found in it when that spans less than this
#: share of the capture (else the repeats are spread over all of it, idle between them).
CAPTURE_STEADY_SPAN_SHARE = 0.5

# --- noise bands of before/after timings (metrics.step_time_band, render.change_text) ---
#: A change of the median step time is "better"/"worse" only outside this many standard errors of the
#: difference of two medians (each from the steps' MAD, 1.4826 * MAD ~ sigma for normal noise, and the
#: median's standard error 1.2533 sigma / sqrt(n)): 3 keeps a no-op change (pin_memory with no workers on a
#: CPU read 1.39x "better" from one 5-step baseline) inside the band for all but ~0.3% of normal noise.
NOISE_BAND_SE = 3.0
#: Fewer steps than this on either side give no noise band: a median and a spread need a handful of steps.
NOISE_MIN_STEPS = 5
#: A run whose steps spread (1.4826 * MAD / median) more than this is too noisy to judge timing by: the
#: machine is busy. Steady steps of the course's loops on a quiet machine spread under 10%. It decides a
#: before/after only where the noisy run is the slower one (metrics.timing_verdict): short fixed steps spread most
#: (recordings of 2026-12-05: host_bound fixed 19% of 2.6 ms on the H200 and 24% of 2.1 ms on an H100, data_stall
#: fixed 27% of 2.6 ms on the H100 beside its broken run's 1% of 15.1 ms), and a busy machine only lengthens steps,
#: so a fix 5.8x faster than a quiet broken run was called "too noisy to tell" for the spread of its own fast steps.
NOISE_BUSY_SPREAD = 0.25
#: A fix's step may be slower than the loop's as first written by the noise band (NOISE_BAND_SE standard
#: errors, from both runs' own spread) or by this share of the step, whichever is wider, before a check
#: calls it slower: the profiler's own overhead moves a short step by a few percent from capture to capture.
#: Judged on every machine: a slower fix never passes, whatever the cores (at 2 cores the check once looked
#: away, and num_workers=1 passed lab 01 with its step 0.68x as fast).
SPEED_SLOWER_FLOOR = 0.05
#: Where either run has too few steps for a band, a step this much slower is beyond any noise seen here.
SPEED_NO_BAND_REL = 0.25
#: The pace probe (helpers.profiling.pace_probe, run by helpers.capture just before and just after its profiled
#: steps): PACE_TINY_OPS in-place adds on 8 floats (Python-level op calls) and PACE_BIG_OPS rounds of a
#: PACE_MATRIX-square matmul, relu and two elementwise ops (over torch's grain size: intra-op threads), PACE_REPS
#: runs, mean. `python tools/measure_pace.py [--hog]`, 2026-12-05, the 2-core machine with other work on it
#: (load 1.6-2.2): a run 0.69 ms (p10 0.65, p90 1.07), a call 15.5 ms (p90 24.8): about 31 ms a capture; with one
#: core kept busy as CI runs the tests, a run 1.20 ms (p90 239: a parallel op waiting a time slice for its
#: thread), a call 146 ms (p90 968) before PACE_MAX_S.
PACE_TINY_OPS = 100
PACE_BIG_OPS = 4
PACE_MATRIX = 192
PACE_REPS = 16
#: ... stopping after this many seconds (at least three runs): on a machine so busy that a run takes 100x its
#: quiet time the probe would otherwise cost a second a call.
PACE_MAX_S = 0.1
#: A fix's capture counts as made on a slower machine only where the pace probe ran more than this many times
#: slower at both its ends than at either end of the first capture (helpers.checks.speed.machine_pace); below it
#: the probe's own spread could say it. Measured with tools/measure_pace.py (pairs 0.3 s apart, read as two
#: captures would be): at the machine's own load the reading had median 0.95, p90 1.00, max 1.60, above 1.5 in
#: 1 of 29; with a core kept busy median 0.98, p90 1.25, above 1.5 in 2 of 29 (a stall caught at both ends of a
#: pair: max 27). So a steady machine reads as slower now and then; the slack it then gives is bounded by the
#: figure itself and PACE_FACTOR_ERROR, and a fix slower than that still fails.
PACE_MIN_RATIO = 1.5
#: A step slows with the machine only roughly as the probe does (its own mix of ops, the scheduler's time slices):
#: where the probe's factor decides, the step may exceed the loop as first written at that factor by this share.
#: Measured 2026-12-05 on the 2-core machine (tests/test_pace.py's loop, one core, two spinning processes on it
#: during the second capture): probe 2.6-3.2x, steps 3.3-3.4x, 1.13-1.18x the probe's factor in 3 of 4 runs
#: (1.8x in the fourth); 0.25 keeps the three while a fix twice as slow as the loop on a machine measured even
#: 1.8x slower still fails (1.8 x 1.25 = 2.25 < 3). The same holds where the ops both loops run measure the slowdown
#: (behaviour.machine_drift): CI, 2026-12-06, one core kept busy, lab 03's fixed step took 3.37x the loop as first
#: written while the ops they share took 2.71x longer (1.24x the factor).
PACE_FACTOR_ERROR = 0.25
#: A machine with at most this many cores cannot show a loader's full gain: its worker processes and the
#: training process share the same cores, so the data-wait share falls less than on a machine with cores to
#: spare. On 2 cores the lab 01 solution's loader measured 61% -> 32% (CI, 2026-12-04) against 0.12-0.15 in
#: the calibration runs; a 16-core H200 host showed 85% -> 13%.
FEW_CORES = 2

#: Many-rank jobs (helpers.jobs): a straggler computes more per step than the median rank by at least this
#: share. Derived from IMBALANCE_SPREAD's measurements: with two ranks, a spread s puts the slower rank
#: s / (2 - s) above their median, so the balanced gloo jobs' 0.42 is 0.27 and the imbalance variant's
#: 0.59 is 0.42; 0.33 lies between them.
STRAGGLER_EXCESS = 0.33
#: Lab 00's time-window check (nsys --delay/--duration): the window must start after the script's start-up
#: and end before the program does. Start-up of `python -m helpers.workloads.data_stall` before its first
#: step, measured 2026-12-04 with `python tools/benchmark.py --startup` and `--steps 0` runs on the 2-core CPU
#: machine: 6.9-8.0 s at load 3, 30-45 s at load 7-8; on the H200 the nsys runs of the course's scripts took
#: 13-20 s each in all, under 1 s of it steps (docs/gpu-track/nsys-recordings.md). The window may start no
#: earlier than this: it is why a capture range, which waits for the steps themselves, is preferred.
NSYS_WINDOW_STARTUP_MAX_S = 20.0
#: ... and the program is assumed to end no earlier than this start-up plus its steps at the fastest recorded
#: step time of its workload and variant (data/manifest.json): torch's import alone took 5.4-5.9 s here, so
#: 1 s is a start-up no machine beats.
NSYS_WINDOW_STARTUP_MIN_S = 1.0

# --- lab 00: the launch queue (helpers.checks.check_launch_queue) ----------------------------------------
#: A median launch-to-start offset (kernel start minus the start of the API call that launched it) below this
#: says the queue was empty: each kernel started as soon as the host launched it. The recorded H200 traces
#: (`m.launch_stats(recorded(W, V))["median_launch_to_start_us"]`, 2026-12-04): launch_overhead broken 9.0 µs
#: (its cudaLaunchKernel calls take 7.4 µs of that), data_stall broken 11.7 µs; 50 µs is four times the larger.
LAUNCH_QUEUE_EMPTY_US = 50.0
#: ... and above this the host runs ahead of the GPU by milliseconds of queued work: gpu_bound fp32 72 ms,
#: sync_stall broken 5.3 ms (the queue drains at each of its syncs). Offsets in between are neither reading.
LAUNCH_QUEUE_DEEP_US = 1000.0

# --- lab 08 (helpers.checks.lab08), from tools/record_gpu_bound.py on the H200, 2026-12-04 -----------
#: The precision fix is judged against the learner's own device (helpers.capability): the probe GEMM's
#: low-precision gain G over fp32 and the GEMM share f of the learner's fp32 step bound the step's gain by
#: Amdahl's law, E = 1 / ((1 - f) + f / G); the step must show at least this share of E's gain over 1x,
#: i.e. reach 1 + share x (E - 1). On the H200 (data/device_profiles.json, recorded; f = 0.874 in
#: data/gpu_bound__fp32__h200.json.gz) bf16's G = 15.2 gives E = 5.4 and a bar of 3.2x against the measured
#: 4.6x (25.8 -> 5.6 ms); TF32's G = 6.4 gives E = 3.8, a bar of 2.4x against 3.9x. The measured steps reach
#: 0.81 and 1.0 of E's gain (bf16's own cast kernels are the rest), so half keeps both clear of the bar
#: while a step that gives back most of the gain (a host sync each step, the casts redone) fails it.
PRECISION_GAIN_SHARE = 0.5
#: A device whose GEMMs let the step gain less than this (E above) cannot show the precision effect (no
#: tensor cores, bf16 emulated without fp16 help): the lab says so and judges the step on its structure.
PRECISION_MIN_SHOWABLE = 1.5
#: The learner's low-precision step is compared with the course's step in the same precision (bf16 with bf16,
#: fp16 + GradScaler with fp16 + GradScaler of the learner's settings), from the same seed
#: (helpers.checks.behaviour.lowp_step_problem). Its tolerance is measured from the reference's own spread: runs
#: of the same step whose arithmetic rounds differently, as another order of the same sums (or a GPU's
#: reductions from one run to the next) does. They start from initial weights each multiplied by 1 + e, e
#: normal with this standard deviation: fp32's unit of rounding, 2**-23.
LOWP_SPREAD_PERTURBATION = 2.0**-23
#: ... in this many runs (seeds 1..N; on a GPU one more, unperturbed). Measured on the CPU sizes, 4 steps, one
#: thread (`python tools/same_kind_spread.py`, 2026-12-05): 16 such bf16 runs land 0.31-3.18% of the update's
#: norm from the reference (two groups: 0.3-1.5% and 2.7-3.2%), fp16 + GradScaler 1.17-1.58%; the largest of 4
#: is at least 1.46% in all but about 2% of draws.
LOWP_SPREAD_RUNS = 4
#: The learner's losses and parameters' change may differ from the reference's by this many times the largest
#: spread of those runs (or the floors below, whichever is wider): 2.5 x 1.46% = 3.7% still passes the
#: largest run seen (3.18%), while a learning rate 20% off lands 20% away (10% off: 10%; a step that keeps
#: the gradients: 46%; pure bf16 weights: 90%; fp32 against bf16: 6.7%, which the Linear dtypes refuse first).
LOWP_SPREAD_TIMES = 2.5
#: ... at least these: the parameters' change within 1% of its norm, the losses within 0.1% (a same-seed
#: rerun of the same step on a CPU is exact; the perturbed runs move the losses up to 0.041%).
LOWP_SAME_KIND_UPDATE_FLOOR = 0.01
LOWP_SAME_KIND_LOSS_FLOOR = 0.001
#: The gradients backward delivers (and those the optimizer steps on) must be within this factor of the
#: reference's at the same step, times the GradScaler's scale: a backward on the unscaled loss is 65536x off,
#: an optimizer stepping on scaled gradients as much; the same step's gradients differ by under 1%.
LOWP_GRADIENT_FACTOR = 2.0
#: A capture counts as "on tensor cores" (or "on FFMA") when this share of its GEMM time is: the
#: TF32 recording keeps 0.6% on an fp32 SIMT kernel (the 4096x10 head), bf16 0%.
TENSOR_CORE_GEMM_SHARE = 0.9
#: Checkpointing every block must keep at most this share of the memory a plain forward keeps alive for
#: backward (helpers.checks.behaviour.kept_for_backward; measured 0.33 at width 128, batch 256, depth 6,
#: `python tools/same_kind_spread.py`, 2026-12-05; 0.32 of the saved-tensor bytes: each block keeps its
#: input, not its four intermediate tensors).
CHECKPOINT_SAVED_SHARE = 0.5

#: A compression hook's all-reduces send this share of the plain job's bytes or more, and at most
#: (1 + this) x half of them: every gradient goes over the wire once, in 2 bytes instead of 4. The
#: bucket layout does not change what a step sends in total (measured on lab 04's job, 2026-12-04, 2 gloo
#: ranks, bucket_cap_mb=25: 16,793,600 B a step per rank in c10::Half with PyTorch's fp16_compress_hook
#: against 33,587,200 B in float without it, exactly half; tests/test_lab04.py::test_comm_hook re-measures it);
#: 10% leaves room for a different bucket_cap_mb or a parameter left out of DDP's buckets.
COMM_HOOK_WIRE_TOLERANCE = 0.10

# --- lab 09 (helpers.checks.lab09) ------------------------------------------------------------------
#: A reading of a kernel's achieved rate, intensity or share of the roof may differ from the check's own by this
#: share: the learner and the check take the same mean duration from the same trace, so only rounding differs
#: (a figure read off a printed table with three digits is within 0.5%); the next kernel of another name differs
#: by 3% or more in the recordings (bf16 nvjet kernels 86.2, 87.7 and 89.0 us).
KERNEL_READING_RTOL = 0.01

# --- lab 10 (helpers.checks.lab10) ------------------------------------------------------------------
#: Out-of-memory triage: memory the rest of the GPU's users hold (capacity - free - this process) counts as the cause
#: from this share of the GPU. In the 18 published messages of data/oom_messages.json the three that other processes
#: caused have 32-95% held elsewhere; every other message has 16% or less (a CUDA context, cuBLAS's workspace and a
#: second small process); tests/test_lab10.py keeps each message's hand-judged cause.
OOM_OTHER_SHARE = 0.25
#: An optimizer applied in backward must leave the parameters where plain Adam puts them, up to this (absolute, on
#: parameters of order 0.1): the same per-tensor arithmetic gives 0.0 on a CPU; a skipped or repeated step moves
#: them by about the learning rate (1e-3).
OIB_PARAM_ATOL = 1e-6

# --- lab 04: the same training as plain DDP (tools/ddp_same_training.py, 2026-12-05, gloo, 2 ranks, 6 steps) ---------
#: A learner's DDP job trains the course's model from seed 0; the course's job with plain DistributedDataParallel
#: trains the same steps beside it in the same ranks (helpers.workloads.communication.training_record), and the
#: distances are shares of how far that reference moved the parameters. The ranks of a DDP job step on one averaged
#: gradient: their parameters are equal (0.00% apart in every right job measured, plain, 1 MB buckets and the fp16,
#: bf16 and divide-then-cast hooks); a hook that never copies its result back leaves them 203% apart.
DDP_RANKS_APART = 1e-4
#: A job without a comm hook lands where plain DDP does (0.00% for the learner's DDP and 1 MB buckets: the sum of two
#: ranks' gradients adds the same way whatever the bucket); at most this far.
DDP_SAME_TRAINING_FLOOR = 0.01
#: A job with a comm hook is held to the reference of its kind: at most this many times as far from plain DDP as
#: PyTorch's own fp16_compress_hook lands in the same job (4.44%: fp16's rounding and its small gradients below
#: 6e-5 losing bits); the lab's fp16 hook lands 4.44%, dividing before the cast 3.72%, a bf16 hook 1.24%, while a
#: hook that never divides by the world size lands 102% away (2.00x as far), one that divides twice 51%, one that
#: never copies its result back 102%.
DDP_HALF_TIMES = 2.0
#: A finding's summary quotes the GPU idle share the cost model gives its pattern only where that share is at least
#: this much of what the fix saves on the critical path (its what-if). Below it the idle time is counted to another
#: cause that closes the same gap (a batch loaded right after a sync: either fix closes it), and the summary says so
#: instead of quoting "0% of step time it sits idle" under "its fix saves about 24%". Measured 2026-12-05 on the
#: recorded H200 traces (data/): where a fix saves 5% or more, share over saving is 0.73-1.31 for the data and sync
#: stalls their labs teach, and 0.0 on two (a data stall saving 24.5% whose idle time is counted to the sync before
#: the loading; a sync stall saving 23.4% whose gaps are counted to what the host did next). The host's own code
#: (host_bound) is said the same way: sync_stall broken recorded on an H100 (2026-12-05), whose faster host prepares
#: the batch in 4.5 ms right after each step's sync, read "The GPU idles 0% of the step" beside a 23% saving.
SHARE_QUOTED_MIN_OF_GAIN = 0.5
