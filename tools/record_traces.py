"""Record the course's reference traces into data/ and update data/manifest.json.

    python tools/record_traces.py --tag h200            # on a CUDA machine: every GPU workload
    python tools/record_traces.py --tag cpu             # on a CPU: the workloads a CPU shows honestly
    python tools/record_traces.py --tag h200 --only launch_overhead:broken

Each entry: time the loop without a profiler (mean step time over --steps steps, one GPU sync
at each end), then profile a few steps with torch.profiler and keep the gzipped trace.
Existing traces are replaced only for the entries recorded in this run.

    python tools/record_traces.py --tag h200 --nsys --out OUT    # on the H200 with nsys on PATH

--nsys runs every GPU workload under the course's own ``nsys profile`` command line
(helpers.profiling.nsys_command, --nsys-range) with torch.profiler attached to the same steps of
the same process, exports the report to SQLite and writes ``nsys stats`` / ``nsys analyze`` text;
each run's facts go to OUT/NAME.meta.json (tools/collect_nsys.py turns them into manifest entries).

    python tools/record_traces.py --tag h200cpu --comm --nsys --out OUT         # the gloo jobs under nsys
    python tools/record_traces.py --tag h200cpu --comm --torch-pairs --out OUT  # and their twins

--comm records the two-rank gloo jobs (helpers.workloads.communication) on the machine's CPU cores
with each collective and each rank marked in NVTX (--mark-collectives / --nsys-range), which is
what lets Nsight Systems see them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers import metrics  # noqa: E402
from helpers.profiling import capture, device_name, time_steps  # noqa: E402

# (workload, variant, profiled steps)
GPU_PLAN = [
    ("data_stall", "broken", 5), ("data_stall", "fixed", 5),
    ("h2d_copy", "broken", 5), ("h2d_copy", "fixed", 5), ("h2d_copy", "pinned_blocking", 5),
    ("launch_overhead", "broken", 3), ("launch_overhead", "foreach", 3), ("launch_overhead", "compile", 3),
    ("launch_overhead", "compile_foreach", 3), ("launch_overhead", "graphs", 3), ("launch_overhead", "bigbatch", 3),
    ("sync_stall", "broken", 5), ("sync_stall", "fixed", 5),
    ("mystery", "broken", 5), ("mystery", "data_fixed", 5), ("mystery", "fixed", 5),
    ("host_bound", "broken", 5), ("host_bound", "synced", 5), ("host_bound", "fixed", 10),
]
# The blind-triage lab's unlabelled loops (tools/triage_cases.py; what each is: docs/instructors/triage_key.json).
TRIAGE_PLAN = [("triage", f"t{k}", 5) for k in range(1, 11)]
CPU_PLAN = [
    ("data_stall", "broken", 5), ("data_stall", "fixed", 5),
    ("launch_overhead", "broken", 3), ("launch_overhead", "foreach", 3),
    ("communication", "manual", 5), ("communication", "ddp", 5), ("communication", "tiny_buckets", 5),
    ("communication", "fp16_hook", 5), ("communication", "no_sync", 5), ("communication", "imbalance", 5),
    ("mystery", "broken", 5), ("mystery", "fixed", 5),
    ("host_bound", "broken", 5), ("host_bound", "fixed", 10),
]
# The two-rank gloo jobs on the GPU machine's CPU cores (one GPU cannot hold two NCCL ranks):
# under nsys with --trace=nvtx,osrt, and their PyTorch-profiler twins (tag h200cpu).
COMM_PLAN = [("communication", v, 5) for v in ("manual", "ddp", "tiny_buckets", "fp16_hook", "no_sync", "imbalance")]
# One core a rank, as the course's CPU recordings ran on two cores: at 8 cores a rank the 4x batch of
# `imbalance` took only 1.3-2.1x the compute (H200 machine, 2026-12-03) and the imbalance blurred.
COMM_ARGS = {"communication": ["--cores-per-rank", "1"]}
#: Where each workload's loops live: the course's in helpers.workloads; the triage cases outside the
#: installed package (tools/triage_cases.py), so nothing a learner imports says which case is which loop.
MODULE = {"triage": "tools.triage_cases"}
TIMED_STEPS = {"data_stall": 30, "mystery": 30, "communication": 10}
# DataLoader workers need a few batches to fill their prefetch queues before the steady state
# (triage: some of its cases are those loaders).
WARMUP = {"data_stall": 10, "mystery": 10, "triage": 10,
          # the fixed sync loop took ~5 steps to settle on the H200 on 2026-12-03 (24.5 -> 13.3 ms)
          "sync_stall": 10}


def record_one(workload: str, variant: str, active: int, tag: str, out: Path, timed_steps: int) -> dict:
    name = f"{workload}__{variant}__{tag}"
    cmd = f"python tools/record_traces.py --tag {tag} --only {workload}:{variant}"
    with tempfile.TemporaryDirectory() as tmp:
        if workload == "communication":
            from helpers.workloads import communication

            res = communication.run(variant, world_size=2, steps=timed_steps, warmup=3, profile_dir=tmp)
            step_ms = res["step_ms"]
            target = out / name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(res["trace_dir"], target)
            rel = f"{name}/"
            from helpers import load

            trace = load(target)
        else:
            mod = importlib.import_module(MODULE.get(workload, f"helpers.workloads.{workload}"))
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            step = mod.make_step(variant, device)
            step_ms = time_steps(step, steps=timed_steps, warmup=WARMUP.get(workload, 3))
            trace = capture(step, steps=active, warmup=max(2, WARMUP.get(workload, 2)), wait=1, out_dir=tmp, name=name)
            del step
            gc.collect()
            target = out / f"{name}.json.gz"
            shutil.copyfile(trace.source, target)
            rel = target.name
    steps = trace.steps
    entry = {
        "file": rel, "workload": workload, "variant": variant, "tag": tag,
        "device": device_name() if tag != "cpu" else f"CPU ({platform.machine()}, {os.cpu_count()} cores)",
        "torch": torch.__version__, "python": platform.python_version(), "date": dt.date.today().isoformat(),
        "command": cmd, "step_ms": round(step_ms, 3), "timed_steps": timed_steps,
        "profiled_steps": int(len(steps)),
        "profiled_step_ms": round(float(steps["dur_us"].median()) / 1e3, 3) if len(steps) else None,
        "events": int(len(trace.events)),
        "gpu_utilization": None if not trace.has_gpu else round(metrics.gpu_utilization(trace), 4),
    }
    print(json.dumps(entry), flush=True)
    return entry


NSYS_STATS = "cuda_api_sum,cuda_gpu_kern_sum,nvtx_sum"
#: What nsys stats reports for a gloo job (no CUDA): its NVTX ranges and OS runtime calls.
NSYS_STATS_HOST = "nvtx_sum,osrt_sum"


def _device_of(workload: str) -> str:
    """Where a recording ran: the GPU, or for the gloo jobs the CPU cores of the GPU's machine."""
    if workload == "communication":
        return f"CPU ({platform.machine()}, {os.cpu_count()} cores) of the {device_name()} machine: 2 gloo ranks, 1 core each"
    return device_name()


def _postprocess_nsys(report: Path, stats: str = NSYS_STATS) -> str:
    """Export one report to SQLite (gzipped beside it) and write its stats/analyze text."""
    sqlite = report.with_suffix(".sqlite")
    log = []
    for cmd, out_txt in (
        (["nsys", "export", "--type", "sqlite", "-o", str(sqlite), "-f", "true", str(report)], None),
        (["nsys", "stats", "--report", stats, str(sqlite)], report.with_suffix(".stats.txt")),
        (["nsys", "analyze", str(sqlite)], report.with_suffix(".analyze.txt")),
    ):
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        log.append(f"{' '.join(cmd[:2])}: rc {res.returncode}")
        if out_txt is not None:
            out_txt.write_text(f"$ {' '.join(cmd[:-1])} {report.stem}.sqlite\n" + res.stdout
                               + (f"\n[stderr]\n{res.stderr}" if res.stderr.strip() else ""))
        elif res.returncode:
            log.append(res.stderr[-2000:])
    if sqlite.exists():
        subprocess.run(["gzip", "-f", "-6", str(sqlite)], check=False)
    return f"{report.name}: " + "; ".join(log)


def record_nsys(plan: list[tuple[str, str, int]], tag: str, out: Path) -> int:
    """Every plan entry under nsys profile, one after another; then their exports, in parallel."""
    from concurrent.futures import ThreadPoolExecutor

    from helpers.profiling import nsys_command, shell

    out.mkdir(parents=True, exist_ok=True)
    nsys_version = subprocess.run(["nsys", "--version"], capture_output=True, text=True).stdout.strip()
    pool = ThreadPoolExecutor(max_workers=6)
    jobs = []
    # torch.compile's start-up is slow under nsys: record it last so the rest is safe.
    for workload, variant, active in sorted(plan, key=lambda p: p[1] == "compile"):
        name = f"{workload}__{variant}__{tag}"
        warmup = WARMUP.get(workload, 3)
        program = ["-m", MODULE.get(workload, f"helpers.workloads.{workload}"), "--variant", variant, "--steps", str(active),
                   "--warmup", str(warmup), "--nsys-range", *COMM_ARGS.get(workload, [])]
        # A gloo job uses no CUDA: no profiler range to capture between, so the whole run (its steps
        # are NVTX ranges), and only NVTX and OS runtime calls to trace.
        # Without CPU sampling and the microsecond OS calls of Python's imports, a whole-run report of
        # three processes is 0.3 MB of gzipped SQLite instead of 4.5 MB (measured on ddp 2026-12-03).
        how = (dict(capture_range=None, trace="nvtx,osrt", cpu_sampling=False, osrt_threshold_ns=10_000)
               if workload == "communication" else {})
        with tempfile.TemporaryDirectory() as tmp:
            # No torch.profiler inside: under nsys its CUPTI start fails (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_
            # NOT_SUPPORTED, seen on the H200 2026-12-02) and its trace has no GPU events; --torch-pairs
            # records the PyTorch-profiler twin from the same command and seed in its own process.
            cmd = nsys_command([sys.executable, *program], output=str(out / name), stats=False, **how)
            shown = nsys_command(["python", *program], output=name, stats=False, **how)
            t0 = dt.datetime.now()
            res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=400)
            wall_s = (dt.datetime.now() - t0).total_seconds()
            del tmp
        meta = {
            "name": name, "workload": workload, "variant": variant, "tag": tag, "run": f"{name}@{dt.date.today().isoformat()}",
            "device": _device_of(workload), "torch": torch.__version__, "python": platform.python_version(),
            "nsys": nsys_version, "date": dt.date.today().isoformat(), "command": shell(shown),
            "profiled_steps": active, "warmup_steps": warmup,
            "rc": res.returncode, "wall_s": round(wall_s, 1),
            "report": f"{name}.nsys-rep" if (out / f"{name}.nsys-rep").exists() else None,
        }
        (out / f"{name}.meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        (out / f"{name}.log").write_text(res.stdout[-20000:] + "\n[stderr]\n" + res.stderr[-20000:])
        print(json.dumps({k: meta[k] for k in ("name", "rc", "wall_s", "report")}), flush=True)
        if meta["report"]:
            jobs.append((out / meta["report"], NSYS_STATS_HOST if workload == "communication" else NSYS_STATS))
    # Exports after the last recording: run beside one, they took the cores its DataLoader workers
    # (and the gloo ranks, 8 cores each) needed, and the recording measured that contention.
    jobs = [pool.submit(_postprocess_nsys, report, stats) for report, stats in jobs]
    for job in jobs:
        print(job.result(), flush=True)
    pool.shutdown()
    return 0


def record_torch_pairs(plan: list[tuple[str, str, int]], tag: str, out: Path) -> int:
    """The PyTorch-profiler twin of each --nsys recording: the same workload command and seed, its own process."""
    out.mkdir(parents=True, exist_ok=True)
    for workload, variant, active in sorted(plan, key=lambda p: p[1] == "compile"):
        name = f"{workload}__{variant}__{tag}"
        warmup = WARMUP.get(workload, 3)
        program = ["-m", MODULE.get(workload, f"helpers.workloads.{workload}"), "--variant", variant, "--steps", str(active),
                   "--warmup", str(warmup)]
        if workload == "communication":  # the same marked job its nsys side ran, one trace per rank
            program += ["--mark-collectives", *COMM_ARGS[workload]]
        program.append("--profile")
        kept = f"{name}.json.gz" if workload != "communication" else name
        with tempfile.TemporaryDirectory() as tmp:
            t0 = dt.datetime.now()
            res = subprocess.run([sys.executable, *program, tmp], capture_output=True, text=True, cwd=ROOT, timeout=300)
            wall_s = (dt.datetime.now() - t0).total_seconds()
            info = next((json.loads(x) for x in res.stdout.splitlines() if x.startswith("{") and '"trace' in x), {})
            if info.get("trace") and Path(info["trace"]).exists():
                shutil.copyfile(info["trace"], out / kept)
            elif info.get("trace_dir") and Path(info["trace_dir"]).is_dir():
                shutil.rmtree(out / kept, ignore_errors=True)
                shutil.copytree(info["trace_dir"], out / kept)
        meta = {
            "name": name, "workload": workload, "variant": variant, "tag": tag, "run": f"{name}@{dt.date.today().isoformat()}",
            "device": _device_of(workload), "torch": torch.__version__, "python": platform.python_version(),
            "date": dt.date.today().isoformat(), "command": " ".join(["python", *program, "runs"]),
            "profiled_steps": active, "warmup_steps": warmup, "rc": res.returncode, "wall_s": round(wall_s, 1),
            "file": kept if (out / kept).exists() else None,
        }
        if workload == "communication":
            meta["step_ms_unprofiled"] = info.get("step_ms")
            meta["per_rank_ms_unprofiled"] = info.get("per_rank_ms")
        (out / f"{name}.torch.meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        if res.returncode:
            (out / f"{name}.torch.log").write_text(res.stdout[-5000:] + "\n[stderr]\n" + res.stderr[-10000:])
        print(json.dumps({k: meta[k] for k in ("name", "rc", "wall_s", "file")}), flush=True)
    return 0


def record_bench(tag: str, out: Path) -> int:
    """A large launch-bound trace (about 70k events, 20 MB of JSON) to time the readers against."""
    from helpers.workloads import launch_overhead

    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        trace = capture(launch_overhead.make_step("broken", device), steps=14, warmup=2, wait=1, out_dir=tmp, name="bench")
        target = out / f"launch_overhead_long__{tag}.json.gz"
        shutil.copyfile(trace.source, target)
    print(json.dumps({"file": str(target.relative_to(ROOT)) if target.is_relative_to(ROOT) else str(target),
                      "events": len(trace.events), "command": f"python tools/record_traces.py --tag {tag} --bench"}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", required=True, help="h200 (or another GPU name) for the GPU plan, cpu for the CPU plan")
    parser.add_argument("--only", action="append", default=[], help="workload:variant (repeatable)")
    parser.add_argument("--out", default=str(ROOT / "data"))
    parser.add_argument("--bench", action="store_true",
                        help="instead, record data/bench/launch_overhead_long__TAG.json.gz (10 profiled steps) for tools/benchmark.py")
    parser.add_argument("--nsys", action="store_true",
                        help="record the plan under nsys profile (+ torch.profiler on the same steps) into --out")
    parser.add_argument("--torch-pairs", action="store_true",
                        help="record the PyTorch-profiler twin of each --nsys recording into --out")
    parser.add_argument("--triage", action="store_true", help="the triage lab's cases (with --only: those too)")
    parser.add_argument("--comm", action="store_true",
                        help="with --nsys / --torch-pairs: the two-rank gloo jobs on this machine's CPU cores")
    args = parser.parse_args(argv)
    if args.bench:
        return record_bench(args.tag, Path(args.out) / "bench")
    plan = CPU_PLAN if args.tag == "cpu" else GPU_PLAN + TRIAGE_PLAN
    if args.tag != "cpu" and not args.comm and not torch.cuda.is_available():
        print("record_traces: the GPU plan needs a CUDA GPU; use --tag cpu on this machine", file=sys.stderr)
        return 2
    if args.comm:
        plan = [p for p in COMM_PLAN if not args.only or f"{p[0]}:{p[1]}" in args.only]
    elif args.only or args.triage:  # --triage adds the triage cases to what --only names
        wanted = {tuple(o.split(":", 1)) for o in args.only}
        plan = [p for p in plan if (p[0], p[1]) in wanted or (args.triage and p[0] == "triage")]
    else:
        plan = [p for p in plan if p[0] != "triage"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.nsys:
        return record_nsys(plan, args.tag, out)
    if args.torch_pairs:
        return record_torch_pairs(plan, args.tag, out)
    if len(plan) > 1:  # one fresh process per entry: workloads set process-wide state (threads, CUDA caches)
        for workload, variant, _ in plan:
            rc = subprocess.run([sys.executable, __file__, "--tag", args.tag, "--out", str(out), "--only",
                                 f"{workload}:{variant}"]).returncode
            if rc:
                return rc
        return 0
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"traces": []}
    for workload, variant, active in plan:
        entry = record_one(workload, variant, active, args.tag, out, TIMED_STEPS.get(workload, 30))
        manifest["traces"] = [e for e in manifest["traces"] if e["file"] != entry["file"]] + [entry]
        manifest["traces"].sort(key=lambda e: (e["tag"], e["workload"], e["variant"]))
        manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
