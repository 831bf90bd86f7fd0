"""Record lab 09's GPU data (tensor-core shapes, channels_last, attention) on a CUDA machine with ncu on PATH.

    python tools/record_kernels.py --out OUT            # a few minutes on an H100/H200
    python tools/record_kernels.py --out OUT --quick    # CPU dry run of the same code paths (no ncu)
    python tools/record_kernels.py --out OUT --merge    # fold OUT/kernels.manifest.json into data/manifest.json

Writes into OUT (copy its contents over data/ afterwards):
  shapes__VARIANT__TAG.json.gz       a PyTorch-profiler trace of 3 steady steps of each helpers.workloads.shapes
                                     variant (vocab_50257, vocab_50304, conv_nchw, conv_channels_last)
  attention__VARIANT__TAG.json.gz    eager and SDPA attention (helpers.workloads.attention), forward and backward,
                                     3 steps with profile_memory=True (the allocations lab 09 reads)
  nsight/attention__VARIANT__TAG.ncu.csv  ncu details (speed of light, memory workload) of the eager block's softmax
                                     kernel and of the fused attention kernel, one steady-state launch each
  kernels.manifest.json              the manifest entries: step time without a profiler (20 steps), peak memory
                                     above a step's start, device, torch, date and command of each
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from record_gpu_bound import sh, today  # noqa: E402

from helpers import metrics  # noqa: E402
from helpers.profiling import capture, device_name, time_steps  # noqa: E402
from helpers.workloads import attention, shapes  # noqa: E402

NCU_SECTIONS = ("SpeedOfLight", "SpeedOfLight_RooflineChart", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis",
                "Occupancy", "LaunchStats")
#: The kernel each attention variant is profiled at: eager's softmax (a pass over the score matrix) and the fused
#: kernel (FlashAttention's or the memory-efficient one, whichever PyTorch picks on this GPU).
NCU_KERNELS = {"eager": "softmax", "sdpa": "flash|fmha|efficient|attention"}


def _peak_above_start_mb(step, device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step(0)
    torch.cuda.synchronize()
    return round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)


def record_one(workload: str, module, variant: str, device: torch.device, tag: str, out: Path, quick: bool) -> dict:
    step = module.make_step(variant, device)
    cuda = device.type == "cuda"
    steps = 3 if quick else 20
    entry: dict = {"workload": workload, "variant": variant, "tag": tag,
                   "step_ms": round(time_steps(step, steps=steps, warmup=3), 3), "timed_steps": steps,
                   "peak_above_start_mb": _peak_above_start_mb(step, device)}
    trace = capture(step, steps=3, warmup=2, wait=1, out_dir=tempfile.mkdtemp(), name=variant,
                    profile_memory=workload == "attention")
    target = out / f"{workload}__{variant}__{tag}.json.gz"
    shutil.copyfile(trace.source, target)
    st = trace.steps
    entry.update({
        "file": target.name, "device": device_name() if cuda else "CPU (dry run)", "torch": torch.__version__,
        "date": today(), "command": f"python tools/record_kernels.py --out OUT  ({workload}, variant {variant})",
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


def record_ncu(tag: str, out: Path, log: list[str]) -> list[dict]:
    from helpers.profiling import shell

    entries = []
    (out / "nsight").mkdir(exist_ok=True)
    base = ["ncu", *[a for s in NCU_SECTIONS for a in ("--section", s)]]
    for variant, kernel in NCU_KERNELS.items():
        name = f"attention__{variant}__{tag}"
        program = ["-m", "helpers.workloads.attention", "--variant", variant, "--steps", "3", "--warmup", "2"]
        # skip the warm-up steps' launches (forward and backward run the kernel at most twice a step)
        opts = ["-k", f"regex:{kernel}", "-s", "4", "-c", "1"]
        with tempfile.TemporaryDirectory() as tmp:
            rep = Path(tmp) / "r.ncu-rep"
            res = sh([*base, *opts, "-o", str(rep.with_suffix("")), sys.executable, *program], log)
            if not rep.exists():
                continue
            csv = sh(["ncu", "--import", str(rep), "--csv", "--page", "details"], log)
            p = out / "nsight" / f"{name}.ncu.csv"
            p.write_text(csv.stdout)
        entries.append({"file": f"nsight/{p.name}", "workload": "attention", "variant": variant, "tag": tag,
                        "device": device_name(), "date": today(), "rc": res.returncode,
                        "command": shell([*base, *opts, "-o", name, "python", *program])
                        + f"; ncu --import {name}.ncu-rep --csv --page details"})
    return entries


def merge(src: Path) -> int:
    """Fold OUT/kernels.manifest.json into data/manifest.json (replacing earlier shapes/attention entries)."""
    new = json.loads((src / "kernels.manifest.json").read_text())
    path = ROOT / "data" / "manifest.json"
    doc = json.loads(path.read_text())
    ours = {"shapes", "attention"}
    for key in ("traces", "ncu"):
        doc[key] = [e for e in doc.get(key, []) if e.get("workload") not in ours] + new.get(key, [])
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"merged {sum(len(v) for v in new.values())} entries into {path}")
    return 0


def _device_tag(name: str) -> str:
    """"h200" for "NVIDIA H200", "a100" for "NVIDIA A100-SXM4-80GB": the model's word, as data/'s file names have it."""
    import re

    words = re.findall(r"[a-z]+\d+[a-z]*", name.lower())
    return words[0] if words else "gpu"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="a new or empty folder for the recordings")
    p.add_argument("--tag", default=None, help="the device tag in file names (default: h100/h200/... from the GPU)")
    p.add_argument("--quick", action="store_true", help="a CPU dry run of the code paths (no ncu)")
    p.add_argument("--merge", action="store_true", help="fold OUT's manifest entries into data/manifest.json")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.merge:
        return merge(out)
    if out.exists() and any(out.iterdir()):
        print(f"error: {out} exists and is not empty; give a new folder", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available() and not args.quick
    if not cuda and not args.quick:
        print("error: no CUDA GPU here; run on a GPU machine, or --quick for a CPU dry run", file=sys.stderr)
        return 2
    device = torch.device("cuda" if cuda else "cpu")
    tag = args.tag or ("cpu" if not cuda else _device_tag(device_name()))
    traces = [record_one("shapes", shapes, v, device, tag, out, args.quick) for v in shapes.VARIANTS]
    traces += [record_one("attention", attention, v, device, tag, out, args.quick) for v in attention.VARIANTS]
    log: list[str] = []
    ncu = record_ncu(tag, out, log) if cuda and shutil.which("ncu") else []
    (out / "kernels.manifest.json").write_text(json.dumps({"traces": traces, "ncu": ncu}, indent=1) + "\n")
    (out / "record_kernels.log").write_text("\n\n".join(log))
    print(f"wrote {len(traces)} traces and {len(ncu)} ncu reports into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
