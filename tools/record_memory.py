"""Record lab 10's GPU memory data on a CUDA machine (no nsys or ncu needed).

    python tools/record_memory.py --out OUT           # about a minute on an H100/H200
    python tools/record_memory.py --out OUT --quick   # CPU dry run of the parts a CPU can run (the optimizer peaks)
    python tools/record_memory.py --out OUT --merge   # list OUT's files in data/manifest.json ("recordings")

Writes into OUT (copy its contents over data/ afterwards):
  memory__fragmentation__TAG.json     helpers.workloads.fragmentation both ways (default allocator, then
                                      expandable_segments), each in a fresh process: reserved, allocated, cudaMalloc calls
  memory__optimizers__TAG.json        lab 08's bf16 step at full size with foreach Adam, fused Adam and Adam applied in
                                      backward: peak allocated above the step's start (max_memory_allocated), step time
  memory__oom__TAG.memsnap.pickle.gz  a memory snapshot taken at a real out-of-memory error: the bf16 step at batch
  memory__oom__TAG.txt                8192 under torch.cuda.set_per_process_memory_fraction(0.02) (the history,
                                      the segments at the failure, and the message PyTorch raised)
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from record_gpu_bound import today  # noqa: E402

from helpers.profiling import device_name  # noqa: E402
from helpers.workloads import gpu_bound as gb  # noqa: E402

MiB = 2**20
OOM_FRACTION, OOM_BATCH = 0.02, 8192


def _tag(name: str) -> str:
    import re

    words = re.findall(r"[a-z]+\d+[a-z]*", name.lower())
    return words[0] if words else "gpu"


def optimizer_peaks(device: torch.device, quick: bool) -> dict:
    """Peak memory above a step's start of the bf16 step with three ways of running Adam."""
    from helpers.checks.lab09 import _peak_during

    width, batch = (gb.WIDTH, gb.BATCH) if device.type == "cuda" else (256, 64)
    x = torch.randn(batch, width, device=device)
    y = torch.randint(0, gb.CLASSES, (batch,), device=device)
    rows = []
    for label in ("foreach", "fused", "in_backward"):
        torch.manual_seed(0)
        model = gb.Net(width, gb.DEPTH).to(device)
        if label == "in_backward":
            for p in model.parameters():
                opt = torch.optim.Adam([p], lr=gb.LR)

                def hook(param, opt=opt):
                    opt.step()
                    opt.zero_grad(set_to_none=True)

                p.register_post_accumulate_grad_hook(hook)
            step_opt = None
        else:
            step_opt = torch.optim.Adam(model.parameters(), lr=gb.LR, **{label: True})

        def step(model=model, step_opt=step_opt):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            if step_opt is not None:
                step_opt.step()
                step_opt.zero_grad(set_to_none=True)

        for _ in range(3):
            step()
        peak = _peak_during(step, device)
        n = 3 if quick else 20
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        rows.append({"adam": label, "peak_above_start_mib": round(peak / MiB, 1),
                     "step_ms": round((time.perf_counter() - t0) * 1e3 / n, 3)})
        del model, step_opt
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return {"device": device_name() if device.type == "cuda" else "CPU (dry run)", "torch": torch.__version__,
            "date": today(), "width": width, "batch": batch,
            "command": "python tools/record_memory.py --out OUT", "variants": rows}


def oom_snapshot(out: Path, tag: str) -> dict:
    """In this (fresh) process: the bf16 step at batch OOM_BATCH under a 2% memory fraction, until it fails."""
    device = torch.device("cuda")
    torch.cuda.set_per_process_memory_fraction(OOM_FRACTION, 0)
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    message = ""
    try:
        model = gb.Net(gb.WIDTH, gb.DEPTH).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=gb.LR)
        x = torch.randn(OOM_BATCH, gb.WIDTH, device=device)
        y = torch.randint(0, gb.CLASSES, (OOM_BATCH,), device=device)
        for _ in range(3):
            gb.train_step(model, opt, x, y, dtype=torch.bfloat16)
    except torch.OutOfMemoryError as exc:
        message = str(exc)
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    with gzip.open(out / f"memory__oom__{tag}.memsnap.pickle.gz", "wb", compresslevel=6) as f:
        pickle.dump(snap, f)
    (out / f"memory__oom__{tag}.txt").write_text(message + "\n")
    return {"oom": bool(message), "fraction": OOM_FRACTION, "batch": OOM_BATCH, "message": message[:400]}


def merge(src: Path) -> int:
    """List OUT's recordings in data/manifest.json's "recordings" (replacing earlier "memory" entries). The files
    carry no manifest of their own: device and torch come from the optimizer peaks' file, written in the same run."""
    opt = next(src.glob("memory__optimizers__*.json"), None)
    if opt is None:
        print(f"error: {src} has no memory__optimizers__TAG.json; give the folder record_memory.py wrote", file=sys.stderr)
        return 2
    tag = opt.name.split("__")[2].removesuffix(".json")
    head = json.loads(opt.read_text())
    base = {"workload": "memory", "tag": tag, "device": head["device"], "torch": head["torch"], "date": head["date"]}
    oom = (f"python tools/record_memory.py --out OUT  (its child process: the bf16 step at batch {OOM_BATCH} under "
           f"torch.cuda.set_per_process_memory_fraction({OOM_FRACTION}), memory history on, until it fails)")
    plan = [(f"memory__optimizers__{tag}.json", "optimizers", "measurements", head["command"]),
            (f"memory__fragmentation__{tag}.json", "fragmentation", "measurements",
             "python tools/record_memory.py --out OUT  (helpers.workloads.fragmentation.compare(): each way in a fresh process)"),
            (f"memory__oom__{tag}.memsnap.pickle.gz", "oom", "torch-memory-snapshot", oom),
            (f"memory__oom__{tag}.txt", "oom", "oom-message", oom)]
    new = [{**base, "variant": variant, "file": name, "format": fmt, "command": command}
           for name, variant, fmt, command in plan if (src / name).exists()]
    path = ROOT / "data" / "manifest.json"
    doc = json.loads(path.read_text())
    doc["recordings"] = [e for e in doc.get("recordings", []) if e.get("workload") != "memory"] + new
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"merged {len(new)} entries into {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="a new or empty folder for the recordings")
    p.add_argument("--quick", action="store_true", help="a CPU dry run of the parts a CPU can run")
    p.add_argument("--merge", action="store_true", help="list OUT's files in data/manifest.json")
    p.add_argument("--oom-only", action="store_true", help=argparse.SUPPRESS)  # the child process of the OOM recording
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.merge:
        return merge(out)
    cuda = torch.cuda.is_available() and not args.quick
    if args.oom_only:
        print(json.dumps(oom_snapshot(out, _tag(device_name()))))
        return 0
    if out.exists() and any(out.iterdir()):
        print(f"error: {out} exists and is not empty; give a new folder", file=sys.stderr)
        return 2
    if not cuda and not args.quick:
        print("error: no CUDA GPU here; run on a GPU machine, or --quick for a CPU dry run", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if cuda else "cpu")
    tag = _tag(device_name()) if cuda else "cpu"
    (out / f"memory__optimizers__{tag}.json").write_text(json.dumps(optimizer_peaks(device, args.quick), indent=1) + "\n")
    if cuda:
        from helpers.workloads import fragmentation

        runs = fragmentation.compare()
        (out / f"memory__fragmentation__{tag}.json").write_text(json.dumps(
            {"date": today(), "command": "python tools/record_memory.py --out OUT", "runs": runs}, indent=1) + "\n")
        res = subprocess.run([sys.executable, __file__, "--out", str(out), "--oom-only"], capture_output=True, text=True,
                             cwd=ROOT, timeout=600)
        print(res.stdout[-1000:], res.stderr[-2000:], flush=True)
    print(f"wrote {sorted(p.name for p in out.iterdir())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
