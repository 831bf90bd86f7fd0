"""Record lab 11's GPU data on a CUDA machine (nsys on PATH for the backtrace report).

    python tools/record_callsites.py --out OUT           # a few minutes on an H100/H200
    python tools/record_callsites.py --out OUT --quick   # CPU dry run of the parts a CPU can run
    python tools/record_callsites.py --out OUT --merge   # list OUT's files in data/manifest.json ("recordings")

Writes into OUT (copy its contents over data/ afterwards; the nsys report is large: keep its SQLite export only if
the repository's size budget allows, else the JSON summary of its backtraces):
  callsite__broken__TAG.json.gz, callsite__fixed__TAG.json.gz
                        helpers.workloads.callsite, 3 profiled steps with_stack=True: the synchronizing CUDA calls
                        with the Python frames above them (the CPU track's sync_sites on a real GPU trace)
  callsite__sync_debug__TAG.json
                        torch.cuda.set_sync_debug_mode("warn") over one step of the broken loop: file:line of each
                        warning, in order (helpers.profiling.find_syncs_live)
  nsight/callsite__broken__TAG.nsys-rep (+ .sqlite.gz)
                        nsys profile --trace=cuda,nvtx,osrt --cudabacktrace=sync:1000 --python-backtrace=cuda of the
                        broken loop; callsite__backtraces__TAG.json: each synchronizing call's Python frames, read from
                        the export's backtrace tables (what a learner sees in the report's tooltip)
  env__launch_blocking__TAG.json, env__launch_blocking__TAG.json.gz
                        lab 08's bf16 step timed (20 steps) with CUDA_LAUNCH_BLOCKING unset and =1, each in a fresh
                        process, and a 3-step trace with it =1 (every launch as long as its kernel)
  callsites.manifest.json the manifest entries (device, torch, date, command)
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from record_gpu_bound import sh, today  # noqa: E402

from helpers.profiling import capture, device_name  # noqa: E402
from helpers.workloads import callsite  # noqa: E402

NSYS = ["nsys", "profile", "--trace=cuda,nvtx,osrt", "--cudabacktrace=sync:1000", "--python-backtrace=cuda",
        "--force-overwrite=false"]


def _tag(name: str) -> str:
    import re

    words = re.findall(r"[a-z]+\d+[a-z]*", name.lower())
    return words[0] if words else "gpu"


def _entry(workload: str, variant: str, tag: str, file: str, command: str, cuda: bool) -> dict:
    return {"workload": workload, "variant": variant, "tag": tag, "file": file,
            "device": device_name() if cuda else "CPU (dry run)", "torch": torch.__version__, "date": today(),
            "command": command}


def traces(device: torch.device, tag: str, out: Path) -> list[dict]:
    entries = []
    for variant in callsite.VARIANTS:
        t = capture(callsite.make_step(variant, device), steps=3, warmup=2, out_dir=tempfile.mkdtemp(), name=variant,
                    with_stack=True)
        target = out / f"callsite__{variant}__{tag}.json.gz"
        shutil.copyfile(t.source, target)
        entries.append(_entry("callsite", variant, tag, target.name,
                              f"python tools/record_callsites.py --out OUT  (variant {variant}, with_stack)", device.type == "cuda"))
    return entries


def sync_debug(device: torch.device, tag: str, out: Path) -> dict:
    from helpers.profiling import find_syncs_live

    step = callsite.make_step("broken", device)
    step(0)
    found = find_syncs_live(lambda: step(1))
    (out / f"callsite__sync_debug__{tag}.json").write_text(json.dumps({"warnings": found}, indent=1) + "\n")
    return _entry("callsite", "sync_debug", tag, f"callsite__sync_debug__{tag}.json",
                  "python tools/record_callsites.py --out OUT  (set_sync_debug_mode('warn') over one broken step)", True)


def backtraces(tag: str, out: Path, log: list[str]) -> list[dict]:
    """The nsys report with sync backtraces, its export, and each synchronizing call's frames as JSON."""
    (out / "nsight").mkdir(exist_ok=True)
    name = f"callsite__broken__{tag}"
    program = ["-m", "helpers.workloads.callsite", "--variant", "broken", "--steps", "5", "--warmup", "2"]
    with tempfile.TemporaryDirectory() as tmp:
        res = sh([*NSYS, "-o", f"{tmp}/{name}", sys.executable, *program], log, timeout=600)
        rep = Path(tmp) / f"{name}.nsys-rep"
        if not rep.exists():
            return []
        sq = Path(tmp) / f"{name}.sqlite"
        sh(["nsys", "export", "--type", "sqlite", "-o", str(sq), str(rep)], log)
        shutil.copyfile(rep, out / "nsight" / rep.name)
        with open(sq, "rb") as src, gzip.open(out / "nsight" / f"{name}.sqlite.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        summary = _backtrace_summary(sq)
    (out / f"callsite__backtraces__{tag}.json").write_text(json.dumps(summary, indent=1) + "\n")
    shown = " ".join([*NSYS, "-o", name, "python", *program])
    return [dict(_entry("callsite", "nsys_backtraces", tag, f"nsight/{name}.nsys-rep", shown, True), rc=res.returncode)]


def _backtrace_summary(sqlite_path: Path) -> dict:
    """Each synchronizing CUDA call with a backtrace: its name and the frames of its call chain (the tables differ
    between nsys versions: the ones present are read, and their names kept with the result)."""
    con = sqlite3.connect(sqlite_path)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    out: dict = {"tables": sorted(t for t in tables if "CALLCHAIN" in t or "BACKTRACE" in t or "PYTHON" in t), "calls": []}
    if "CUDA_CALLCHAINS" in tables and "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        rows = con.execute(
            "SELECT s.value, r.callchainId FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON r.nameId = s.id "
            "WHERE r.callchainId IS NOT NULL AND s.value LIKE '%Synchronize%' LIMIT 50").fetchall()
        for call, chain in rows:
            frames = con.execute("SELECT s.value FROM CUDA_CALLCHAINS c JOIN StringIds s ON c.symbol = s.id WHERE c.id = ? "
                                 "ORDER BY c.stackDepth", (chain,)).fetchall()
            out["calls"].append({"call": call, "frames": [f[0] for f in frames][:40]})
    con.close()
    return out


def launch_blocking(tag: str, out: Path) -> dict:
    times = {}
    for value in ("", "1"):
        env = {k: v for k, v in os.environ.items() if k != "CUDA_LAUNCH_BLOCKING"}
        if value:
            env["CUDA_LAUNCH_BLOCKING"] = value
        res = subprocess.run([sys.executable, "-m", "helpers.workloads.gpu_bound", "--variant", "bf16", "--steps", "20"],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
        line = next((x for x in res.stdout.splitlines() if x.startswith("{")), "{}")
        times["launch_blocking" if value else "default"] = json.loads(line).get("step_ms")
        if value:
            with tempfile.TemporaryDirectory() as tmp:
                subprocess.run([sys.executable, "-m", "helpers.workloads.gpu_bound", "--variant", "bf16", "--steps", "3",
                                "--profile", tmp], env=env, cwd=ROOT, timeout=600, check=False)
                found = sorted(Path(tmp).rglob("*.json.gz"))
                if found:
                    shutil.copyfile(found[0], out / f"env__launch_blocking__{tag}.json.gz")
    (out / f"env__launch_blocking__{tag}.json").write_text(json.dumps({"step_ms": times, "date": today()}, indent=1) + "\n")
    return _entry("env", "launch_blocking", tag, f"env__launch_blocking__{tag}.json.gz",
                  "CUDA_LAUNCH_BLOCKING=1 python -m helpers.workloads.gpu_bound --variant bf16 --steps 3 --profile DIR", True)


#: The format each kind of file is listed under in data/manifest.json's "recordings".
FORMATS = {".json.gz": "torch-json", ".nsys-rep": "nsys-rep", "sync_debug": "sync-debug-warnings",
           "backtraces": "nsys-backtrace-summary", "env__launch_blocking": "measurements"}


def _format(file: str) -> str:
    for key in ("sync_debug", "backtraces", ".json.gz", ".nsys-rep", "env__launch_blocking"):
        if key in file:
            return FORMATS[key]
    return "measurements"


def merge(src: Path) -> int:
    """List OUT/callsites.manifest.json's files in data/manifest.json's "recordings" (replacing earlier "callsite" and
    "env" entries), with the two JSON summaries it does not list: the backtraces read from the nsys export, and the
    launch-blocking step times. None of them has a step time measured without a profiler, so none is a "traces" entry.
    The SQLite export is left out unless it was copied into data/nsight/ (the summary holds what the lab reads)."""
    entries = json.loads((src / "callsites.manifest.json").read_text())["traces"]
    new = []
    for e in entries:
        new.append({**e, "format": _format(e["file"])})
        tag = e["tag"]
        if e["variant"] == "nsys_backtraces":
            sq = f"nsight/callsite__broken__{tag}.sqlite.gz"
            if (ROOT / "data" / sq).exists():
                new.append({**e, "file": sq, "format": "nsys-sqlite-export", "command": e["command"] + "; nsys export --type sqlite"})
            if (src / f"callsite__backtraces__{tag}.json").exists():
                new.append({**e, "variant": "nsys_backtraces", "file": f"callsite__backtraces__{tag}.json",
                            "format": "nsys-backtrace-summary",
                            "command": e["command"] + "; nsys export --type sqlite; tools/record_callsites.py's "
                            "_backtrace_summary (CUDA_CALLCHAINS of each synchronizing runtime call, the first 50)"})
        if e["workload"] == "env" and (src / f"env__launch_blocking__{tag}.json").exists():
            new.append({**e, "file": f"env__launch_blocking__{tag}.json", "format": "measurements",
                        "command": "python -m helpers.workloads.gpu_bound --variant bf16 --steps 20, with "
                        "CUDA_LAUNCH_BLOCKING unset and =1, each in a fresh process (tools/record_callsites.py)"})
    path = ROOT / "data" / "manifest.json"
    doc = json.loads(path.read_text())
    doc["recordings"] = [e for e in doc.get("recordings", []) if e.get("workload") not in ("callsite", "env")] + new
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"merged {len(new)} entries into {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="a new or empty folder for the recordings")
    p.add_argument("--quick", action="store_true", help="a CPU dry run of the parts a CPU can run")
    p.add_argument("--merge", action="store_true", help="list OUT's files in data/manifest.json")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.merge:
        return merge(out)
    if out.exists() and any(out.iterdir()):
        print(f"error: {out} exists and is not empty; give a new folder", file=sys.stderr)
        return 2
    cuda = torch.cuda.is_available() and not args.quick
    if not cuda and not args.quick:
        print("error: no CUDA GPU here; run on a GPU machine, or --quick for a CPU dry run", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if cuda else "cpu")
    tag = _tag(device_name()) if cuda else "cpu"
    entries = traces(device, tag, out)
    log: list[str] = []
    if cuda:
        entries.append(sync_debug(device, tag, out))
        if shutil.which("nsys"):
            entries += backtraces(tag, out, log)
        entries.append(launch_blocking(tag, out))
    (out / "callsites.manifest.json").write_text(json.dumps({"traces": entries}, indent=1) + "\n")
    (out / "record_callsites.log").write_text("\n\n".join(log))
    print(f"wrote {sorted(x.name for x in out.iterdir())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
