"""Copy an H200 Nsight session's outputs into data/ and add their manifest entries.

    python tools/collect_nsys.py DIR [DIR ...]

DIR holds what ``tools/record_traces.py --nsys`` / ``--torch-pairs`` wrote there (NAME.meta.json,
NAME.sqlite.gz, NAME.nsys-rep, NAME.stats.txt, NAME.analyze.txt, NAME.torch.meta.json, NAME.json.gz,
*.ncu.csv). Nsight files go to data/nsys/; the PyTorch-profiler twins of the course's existing
workloads to data/pairs/; those of new workloads (host_bound, triage) to data/ beside the other
traces. Manifest: nsys entries and twins go under "recordings" (one "run" key per pair), new
workloads' twins also under "traces" (the key helpers.course reads).
"""

from __future__ import annotations

import datetime
import gzip
import json
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "data"
NEW_WORKLOADS = ("host_bound", "triage")
PAIR_NOTE = ("nsys and torch.profiler cannot share one process (Kineto: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, "
             "its trace then has no GPU events): both are recorded from the same command and seed, one process each, "
             "in the same device session")


GLOO_NOTE = ("a two-rank gloo job on CPU cores: Nsight Systems sees neither gloo's collectives nor the PyTorch "
             "profiler's steps, so the ranks mark each all-reduce (an NVTX start/end range from issue to completion, "
             "helpers.workloads.communication.marked_hook) and their rank (an NVTX mark) and nsys captures the whole "
             "run; the twin runs the same marked job under torch.profiler, one trace per rank")


def sqlite_counts(path: Path) -> dict:
    """Row counts of the tables the readers use (what a test can check a loaded export against)."""
    with tempfile.NamedTemporaryFile(suffix=".sqlite") as tmp:
        with gzip.open(path) as src:
            shutil.copyfileobj(src, tmp)
        tmp.flush()
        db = sqlite3.connect(tmp.name)
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        counts = {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in (
            "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME",
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS", "OSRT_API") if t in names}
        db.close()
    return counts


def _merged(kept: list[dict], updated: dict[str, dict], key) -> list[dict]:
    """``kept`` in its own order, each entry replaced by its update (same file); the new files' entries after it, sorted."""
    files = {e["file"] for e in kept}
    return [updated[e["file"]] for e in kept] + sorted((e for f, e in updated.items() if f not in files), key=key)


def _ncu_made(csv: Path) -> dict[str, str]:
    """The device and date of an ncu CSV: those of the nsys recording of the same loop made beside it
    (``nsys_session.sh`` runs ncu right after it), else the CSV's own UTC modification date on the tag's device."""
    meta_path = csv.with_name(csv.name.replace(".ncu.csv", ".meta.json"))
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("device") and meta.get("date"):
            return {"device": meta["device"], "date": meta["date"]}
    made = datetime.datetime.fromtimestamp(csv.stat().st_mtime, datetime.timezone.utc)
    return {"device": "NVIDIA H200", "date": made.date().isoformat()}


def main(argv: list[str]) -> int:
    from helpers import load, metrics

    manifest_path = DATA / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    recordings = {e["file"]: e for e in manifest.get("recordings", [])}
    traces = {e["file"]: e for e in manifest["traces"]}
    (DATA / "nsys").mkdir(exist_ok=True)
    (DATA / "pairs").mkdir(exist_ok=True)
    ncu_made: dict[str, str] | None = None  # where and when the ncu CSV of this collection was taken
    for d in map(Path, argv):
        for f in d.glob("*.ncu.csv"):
            shutil.copyfile(f, DATA / "nsys" / f.name)
            if f.name == "sync_stall__fixed__h200.ncu.csv":
                ncu_made = _ncu_made(f)
        for meta_path in sorted(d.glob("*.meta.json")):
            meta = json.loads(meta_path.read_text())
            name = meta["name"]
            if meta_path.name.endswith(".torch.meta.json"):
                if not meta.get("file"):
                    continue
                new = meta["workload"] in NEW_WORKLOADS
                rel = f"{name}.json.gz" if new else f"pairs/{name}.json.gz"
                if (d / meta["file"]).is_dir():  # a multi-rank job: its folder of one trace per rank
                    rel = f"pairs/{name}"
                    shutil.rmtree(DATA / rel, ignore_errors=True)
                    shutil.copytree(d / meta["file"], DATA / rel)
                else:
                    shutil.copyfile(d / meta["file"], DATA / rel)
                trace = load(DATA / rel)
                steps = trace.steps
                entry = {k: meta[k] for k in ("workload", "variant", "tag", "device", "torch", "python", "date",
                                              "command", "run", "profiled_steps", "warmup_steps")}
                # step_ms (a timed run without a profiler) was not measured in these runs: None, not a guess.
                entry.update(file=rel, format="torch-json", events=int(len(trace.events)),
                             pair_note=GLOO_NOTE if meta["workload"] == "communication" else PAIR_NOTE,
                             step_ms=None, timed_steps=0,
                             profiled_step_ms=round(float(steps["dur_us"].median()) / 1e3, 3) if len(steps) else None,
                             gpu_utilization=round(metrics.gpu_utilization(trace), 4) if trace.has_gpu else None)
                # triage entries carry no answer: the key is docs/instructors/triage_key.json, outside the package
                if meta.get("step_ms_unprofiled") is not None:  # the gloo job's timed steps before its profiled ones
                    entry.update(step_ms=round(meta["step_ms_unprofiled"], 3), timed_steps=meta["profiled_steps"],
                                 per_rank_step_ms=[round(x, 3) for x in meta["per_rank_ms_unprofiled"]])
                recordings[rel] = entry
                if new:
                    traces[rel] = entry
            else:
                rel = f"nsys/{name}.sqlite.gz"
                shutil.copyfile(d / f"{name}.sqlite.gz", DATA / rel)
                extra = {}
                for suffix, key in ((".nsys-rep", "report"), (".stats.txt", "stats"), (".analyze.txt", "analyze")):
                    if (d / f"{name}{suffix}").exists():
                        shutil.copyfile(d / f"{name}{suffix}", DATA / "nsys" / f"{name}{suffix}")
                        extra[key] = f"nsys/{name}{suffix}"
                entry = {k: meta[k] for k in ("workload", "variant", "tag", "device", "torch", "python", "nsys", "date",
                                              "command", "run", "profiled_steps", "warmup_steps")}
                entry.update(file=rel, format="nsys-sqlite", table_rows=sqlite_counts(DATA / rel), **extra)
                if meta["workload"] == "communication":
                    entry["pair_note"] = GLOO_NOTE
                recordings[rel] = entry
    if ncu_made:  # the collected ncu CSV: its entry replaces the one of that file, the others stay
        ncu = {e["file"]: e for e in manifest.get("ncu", [])}
        ncu["nsys/sync_stall__fixed__h200.ncu.csv"] = {
            "file": "nsys/sync_stall__fixed__h200.ncu.csv", "workload": "sync_stall", "variant": "fixed", "tag": "h200",
            **ncu_made,
            "command": "ncu --csv --page details --set basic -k regex:<top kernel of its nsys export> -c 3 "
                       "--clock-control none --log-file FILE python -m helpers.workloads.sync_stall --variant fixed "
                       "--steps 3 --warmup 2  (tools/nsys_session.sh)",
        }
        manifest["ncu"] = _merged(manifest.get("ncu", []), ncu, key=lambda e: e["file"])
    # A re-recording replaces its files' entries where they stand; nothing else in the manifest moves.
    manifest["traces"] = _merged(manifest["traces"], traces, key=lambda e: (e["tag"], e["workload"], e["variant"]))
    manifest["recordings"] = _merged(manifest.get("recordings", []), recordings,
                                     key=lambda e: (e["workload"], e["variant"], e["format"]))
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(recordings)} recordings, {len(traces)} traces in {manifest_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
