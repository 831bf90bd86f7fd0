"""Record lab 08's GPU-bound data (helpers.workloads.gpu_bound) on a CUDA machine with nsys and ncu on PATH.

    python tools/record_gpu_bound.py --out OUT            # about 5 minutes on an H200
    python tools/record_gpu_bound.py --out OUT --quick    # CPU dry run of the same code paths (no nsys/ncu)

Writes into OUT (copy its contents over data/ afterwards; OUT/gpu_bound.manifest.json holds the
manifest entries, tools/record_gpu_bound.py --merge OUT folds them into data/manifest.json):
  gpu_bound__VARIANT__TAG.json.gz        a PyTorch-profiler trace of 3 steady steps of each variant
  gpu_bound__compile_cold__TAG.json.gz   the first two steps of torch.compile (compile time inside)
  gpu_bound__TAG.measure.json            per variant: step time without a profiler (20 steps), peak
                                         memory (max_memory_allocated), 10 losses from seed 0
  gpu_bound__bf16__TAG.memsnap.pickle.gz a torch.cuda.memory._record_memory_history snapshot, 2 steps
  nsight/gpu_bound__{fp32,bf16}__TAG.gpumetrics.json  nsys --gpu-metrics-devices=0, per-metric means
                                         over the captured steps (from the report's GPU_METRICS table)
  nsight/gpu_bound__empty_cache__TAG.stats.txt  nsys stats (CUDA API sums: the cudaFree/cudaMalloc churn)
  nsight/gpu_bound__fp32__TAG.{gemm,gemm_noclock,layernorm}.ncu.csv  ncu details pages
  nsight/gpu_bound__fp32__TAG.layernorm.{ncu-rep.gz,raw.csv}  the LayerNorm's report and raw page

    python tools/record_gpu_bound.py --out OUT --memory   # gpu_bound__TAG.memory.json: activation
                                         # checkpointing and empty_cache, one fresh process a variant
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import gzip
import json
import os
import pickle
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers import metrics  # noqa: E402
from helpers.capability import set_tf32  # noqa: E402
from helpers.profiling import capture, device_name, time_steps  # noqa: E402
from helpers.workloads import gpu_bound  # noqa: E402

TRACED = ("fp32", "tf32", "bf16", "fp16", "compile", "compile_ro", "checkpoint", "empty_cache")
NCU_SECTIONS = ("SpeedOfLight", "SpeedOfLight_RooflineChart", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis",
                "WarpStateStats", "SchedulerStats", "Occupancy", "LaunchStats")
PROGRAM = ["-m", "helpers.workloads.gpu_bound", "--steps", "3", "--warmup", "2", "--nsys-range"]


def today() -> str:
    return dt.date.today().isoformat()


def sh(cmd: list[str], log: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    t0 = time.time()
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    log.append(f"$ {' '.join(cmd)}\nrc {res.returncode} in {time.time() - t0:.1f} s\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    print(log[-1][:600], flush=True)
    return res


def measure(variant: str, device: torch.device, tag: str, out: Path, quick: bool) -> dict:
    """Time, memory and losses of one variant (a fresh model), then its trace."""
    cuda = device.type == "cuda"
    cmd = f"python tools/record_gpu_bound.py --out OUT   (variant {variant})"
    entry: dict = {"workload": "gpu_bound", "variant": variant, "tag": tag}
    t0 = time.perf_counter()
    step = gpu_bound.make_step(variant, device)
    if variant in ("compile", "compile_ro"):
        # The cold start first, profiled: compile time is what the learner reads in this trace.
        trace = capture(step, steps=2, warmup=0, wait=0, out_dir=tempfile.mkdtemp(), name="cold")
        shutil.copyfile(trace.source, out / f"gpu_bound__{variant}_cold__{tag}.json.gz")
        entry["cold_two_steps_s"] = round(time.perf_counter() - t0, 2)
    steps = 3 if quick else 20
    entry["step_ms"] = round(time_steps(step, steps=steps, warmup=3), 3)
    entry["timed_steps"] = steps
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        for i in range(3):
            step(i)
        torch.cuda.synchronize()
        entry["max_memory_allocated_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        st = torch.cuda.memory_stats()
        entry["num_device_alloc"] = int(st.get("num_device_alloc", 0))
        entry["num_device_free"] = int(st.get("num_device_free", 0))
    trace = capture(step, steps=3, warmup=2, wait=1, out_dir=tempfile.mkdtemp(), name=variant)
    target = out / f"gpu_bound__{variant}__{tag}.json.gz"
    shutil.copyfile(trace.source, target)
    st = trace.steps
    entry.update({
        "file": target.name, "device": device_name() if cuda else f"CPU ({platform.machine()}, {os.cpu_count()} cores)",
        "torch": torch.__version__, "python": platform.python_version(), "date": today(), "command": cmd,
        "profiled_steps": int(len(st)),
        "profiled_step_ms": round(float(st["dur_us"].median()) / 1e3, 3) if len(st) else None,
        "events": int(len(trace.events)),
        "gpu_utilization": None if not trace.has_gpu else round(metrics.gpu_utilization(trace), 4),
    })
    del step
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    print(json.dumps(entry), flush=True)
    return entry


def loss_curves(device: torch.device, n: int) -> tuple[dict[str, list[float]], list[float]]:
    """n losses from seed 0 for fp32, tf32, bf16 and fp16 (the check's reference curves), and the fp16 GradScaler's
    scale after each of its steps: a step whose gradients overflowed halves it (and was skipped)."""
    curves, scales = {}, []
    for name, kw in (("fp32", {}), ("tf32", {}), ("bf16", {"dtype": torch.bfloat16}), ("fp16", {"dtype": torch.float16})):
        set_tf32(name == "tf32")
        step = gpu_bound.train_step
        if name == "fp16":
            scaler = torch.amp.GradScaler(device.type)

            def step(model, opt, x, y, scaler=scaler, **kw):  # noqa: ANN001, ANN202 - gpu_bound.train_step's signature
                loss = gpu_bound.train_step(model, opt, x, y, scaler=scaler, **kw)
                scales.append(float(scaler.get_scale()))
                return loss
        curves[name] = [round(x, 6) for x in gpu_bound.losses(step, device, steps=n, **kw)]
    set_tf32(False)
    return curves, scales


def memory_snapshot(device: torch.device, tag: str, out: Path) -> str | None:
    if device.type != "cuda":
        return None
    step = gpu_bound.make_step("bf16", device)
    step(0)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=20000)
    for i in range(1, 3):
        step(i)
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    path = out / f"gpu_bound__bf16__{tag}.memsnap.pickle.gz"
    with gzip.open(path, "wb", compresslevel=6) as f:
        pickle.dump(snap, f)
    del step
    gc.collect()
    torch.cuda.empty_cache()
    return path.name


def gpu_metrics_summary(sqlite_path: Path) -> dict:
    """Mean of each GPU metric over the samples between the capture's first and last kernel."""
    con = sqlite3.connect(sqlite_path)
    t0, t1 = con.execute("SELECT MIN(start), MAX(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    rows = con.execute(
        "SELECT i.metricName, AVG(m.value), COUNT(*) FROM GPU_METRICS m JOIN TARGET_INFO_GPU_METRICS i "
        "ON m.metricId = i.metricId AND m.typeId = i.typeId WHERE m.timestamp BETWEEN ? AND ? "
        "GROUP BY i.metricName", (t0, t1)).fetchall()
    con.close()
    return {"window_ms": round((t1 - t0) / 1e6, 3), "samples": max((r[2] for r in rows), default=0),
            "metrics": {name: round(float(avg), 3) for name, avg, _ in rows}}


def record_nsys(tag: str, out: Path, log: list[str]) -> list[dict]:
    from helpers.profiling import nsys_command, shell

    entries = []
    (out / "nsight").mkdir(exist_ok=True)
    version = subprocess.run(["nsys", "--version"], capture_output=True, text=True).stdout.strip()
    for variant, metrics_dev in (("fp32", 0), ("bf16", 0), ("empty_cache", None)):
        name = f"gpu_bound__{variant}__{tag}"
        with tempfile.TemporaryDirectory() as tmp:
            program = [*PROGRAM, "--variant", variant]
            cmd = nsys_command([sys.executable, *program], output=f"{tmp}/{name}", stats=False,
                               gpu_metrics_device=metrics_dev)
            shown = nsys_command(["python", *program], output=name, stats=False, gpu_metrics_device=metrics_dev)
            res = sh(cmd, log)
            rep = Path(tmp) / f"{name}.nsys-rep"
            if not rep.exists():
                continue
            sq = Path(tmp) / f"{name}.sqlite"
            sh(["nsys", "export", "--type", "sqlite", "-o", str(sq), "-f", "true", str(rep)], log)
            entry = {"workload": "gpu_bound", "variant": variant, "tag": tag, "device": device_name(),
                     "torch": torch.__version__, "nsys": version, "date": today(), "command": shell(shown),
                     "rc": res.returncode}
            if metrics_dev is not None and sq.exists():
                try:
                    summary = gpu_metrics_summary(sq)
                    p = out / "nsight" / f"{name}.gpumetrics.json"
                    p.write_text(json.dumps(dict(entry, **summary), indent=1) + "\n")
                    entry["file"] = f"nsight/{p.name}"
                except Exception as exc:  # a report without GPU_METRICS: keep the rest of the run
                    log.append(f"gpu metrics of {name}: {exc}")
            else:
                stats = sh(["nsys", "stats", "--report", "cuda_api_sum,cuda_gpu_kern_sum,nvtx_sum", str(sq)], log)
                p = out / "nsight" / f"{name}.stats.txt"
                p.write_text(f"$ nsys stats --report cuda_api_sum,cuda_gpu_kern_sum,nvtx_sum {name}.sqlite\n" + stats.stdout)
                entry["file"] = f"nsight/{p.name}"
            if entry.get("file"):
                entries.append(entry)
    return entries


def record_ncu(tag: str, out: Path, log: list[str]) -> list[dict]:
    from helpers.profiling import shell

    entries = []
    base = ["ncu", *[a for s in NCU_SECTIONS for a in ("--section", s)]]
    runs = {
        # a steady-state launch by count: skip the first 40 GEMM launches (2 warm-up steps), take one
        "gemm": ["-k", "regex:gemm", "-s", "40", "-c", "1"],
        "gemm_noclock": ["-k", "regex:gemm", "-s", "40", "-c", "1", "--clock-control", "none"],
        # a steady-state launch by NVTX range: the first LayerNorm kernel inside the range "step 1"
        "layernorm": ["--nvtx", "--nvtx-include", "step 1/", "-k", "regex:layer_norm", "-c", "1"],
    }
    for what, opts in runs.items():
        name = f"gpu_bound__fp32__{tag}.{what}"
        with tempfile.TemporaryDirectory() as tmp:
            rep = Path(tmp) / "r.ncu-rep"
            program = [*PROGRAM, "--variant", "fp32"]
            res = sh([*base, *opts, "-o", str(rep.with_suffix("")), sys.executable, *program], log)
            if not rep.exists() and what == "layernorm":  # NVTX filter matched nothing: count instead
                opts = ["-k", "regex:layer_norm", "-s", "12", "-c", "1"]
                res = sh([*base, *opts, "-o", str(rep.with_suffix("")), sys.executable, *program], log)
            if not rep.exists():
                continue
            csv = sh(["ncu", "--import", str(rep), "--csv", "--page", "details"], log)
            p = out / "nsight" / f"{name}.ncu.csv"
            p.write_text(csv.stdout)
            if what == "layernorm":  # its report (gzipped: 0.5 MB; the GEMM's is 4 MB) and its raw page (stalls)
                with open(rep, "rb") as src, gzip.open(out / "nsight" / f"{name}.ncu-rep.gz", "wb") as dst:
                    shutil.copyfileobj(src, dst)
                raw = sh(["ncu", "--import", str(rep), "--csv", "--page", "raw"], log)
                (out / "nsight" / f"{name}.raw.csv").write_text(raw.stdout)
        entries.append({"file": f"nsight/{p.name}", "workload": "gpu_bound", "variant": "fp32", "tag": tag,
                        "device": device_name(), "date": today(), "rc": res.returncode,
                        "command": shell(["ncu", *[a for s in NCU_SECTIONS for a in ("--section", s)], *opts,
                                          "-o", name, "python", *program])
                        + f"; ncu --import {name}.ncu-rep --csv --page details"})
    return entries


MEMORY_VARIANTS = ("bf16", "checkpoint", "empty_cache")


def memory_one(variant: str) -> dict:
    """In this (fresh) process: step time, the activation peak of forward+backward above the step's
    starting allocation, max_memory_allocated and the allocator's cudaMalloc/cudaFree calls a step."""
    device = torch.device("cuda")
    step = gpu_bound.make_step(variant, device)
    for i in range(3):
        step(i)
    torch.cuda.synchronize()
    ms = time_steps(step, steps=20, warmup=2)
    before = torch.cuda.memory_stats()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    steps = 5
    for i in range(steps):
        step(i)
    torch.cuda.synchronize()
    after = torch.cuda.memory_stats()
    return {"variant": variant, "step_ms": round(ms, 3), "timed_steps": 20,
            "peak_above_start_mb": round((torch.cuda.max_memory_allocated() - base) / 2**20, 1),
            "max_memory_allocated_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1),
            "cudamalloc_per_step": (after["num_device_alloc"] - before["num_device_alloc"]) / steps,
            "cudafree_per_step": (after["num_device_free"] - before["num_device_free"]) / steps}


def record_memory(tag: str, out: Path) -> int:
    """memory_one for each MEMORY_VARIANTS entry, each in its own process (compiled models and
    earlier variants' cached blocks would otherwise count in the next one's peak)."""
    rows = []
    for v in MEMORY_VARIANTS:
        res = subprocess.run([sys.executable, __file__, "--out", str(out), "--memory-one", v],
                             capture_output=True, text=True, cwd=ROOT, timeout=300)
        line = next((x for x in res.stdout.splitlines() if x.startswith("{")), None)
        print(line or res.stderr[-2000:], flush=True)
        if line:
            rows.append(json.loads(line))
    (out / f"gpu_bound__{tag}.memory.json").write_text(json.dumps(
        {"device": device_name(), "torch": torch.__version__, "date": today(),
         "command": "python tools/record_gpu_bound.py --out OUT --memory", "variants": rows}, indent=1) + "\n")
    return 0


def merge(src: Path) -> int:
    """Fold OUT/gpu_bound.manifest.json into data/manifest.json (replacing gpu_bound's old entries)."""
    new = json.loads((src / "gpu_bound.manifest.json").read_text())
    path = ROOT / "data" / "manifest.json"
    man = json.loads(path.read_text())
    for key in ("traces", "ncu", "recordings"):
        man[key] = [e for e in man.get(key, []) if e.get("workload") != "gpu_bound"] + new.get(key, [])
    path.write_text(json.dumps(man, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--tag", default="h200")
    p.add_argument("--quick", action="store_true", help="CPU dry run: fewer steps, no nsys/ncu")
    p.add_argument("--merge", action="store_true", help="fold OUT's manifest entries into data/manifest.json")
    p.add_argument("--memory", action="store_true", help="only the memory measurements, one process a variant")
    p.add_argument("--memory-one", metavar="VARIANT", help=argparse.SUPPRESS)
    p.add_argument("--only", action="append", default=[], help="variant to trace (repeatable)")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.merge:
        return merge(out)
    out.mkdir(parents=True, exist_ok=True)
    if args.memory_one:
        print(json.dumps(memory_one(args.memory_one)))
        return 0
    if args.memory:
        return record_memory(args.tag, out)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not args.quick:
        print("record_gpu_bound: needs a CUDA GPU (or --quick for a CPU dry run)", file=sys.stderr)
        return 2
    log: list[str] = []
    traces = [measure(v, device, args.tag, out, args.quick) for v in (args.only or TRACED)]
    meas = {"device": device_name() if device.type == "cuda" else "cpu", "torch": torch.__version__, "date": today(),
            "command": "python tools/record_gpu_bound.py --out OUT",
            "variants": {e["variant"]: {k: e.get(k) for k in ("step_ms", "timed_steps", "max_memory_allocated_mb",
                                                              "num_device_alloc", "num_device_free", "cold_two_steps_s",
                                                              "profiled_step_ms", "gpu_utilization")}
                         for e in traces},
            "memsnap": memory_snapshot(device, args.tag, out)}
    meas["losses_seed0"], meas["fp16_scale_seed0"] = loss_curves(device, 4 if args.quick else 10)
    (out / f"gpu_bound__{args.tag}.measure.json").write_text(json.dumps(meas, indent=1) + "\n")
    ncu, recs = [], []
    if not args.quick:
        for what, fn in (("nsys", record_nsys), ("ncu", record_ncu)):
            try:  # one tool failing must not lose what the others recorded
                (recs if what == "nsys" else ncu).extend(fn(args.tag, out, log))
            except Exception as exc:
                log.append(f"{what} failed: {exc!r}")
    (out / "gpu_bound.manifest.json").write_text(json.dumps({"traces": traces, "ncu": ncu, "recordings": recs}, indent=1) + "\n")
    (out / "record_gpu_bound.log").write_text("\n\n".join(log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
