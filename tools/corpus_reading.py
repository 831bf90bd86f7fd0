"""Read an outside trace by hand, without the toolkit: the figures a corpus judgement rests on.

The corpus (tests/corpus/) tests the diagnosis on traces other people recorded. Each trace is judged
from its own events before `python -m helpers diagnose` is run on it, so this script reads the file
directly (sqlite3 for an Nsight Systems export, json for a PyTorch-profiler trace) and imports nothing
from `helpers`. It prints what a person reading the timeline would tabulate:

- the capture: its span, the device, when the first CUDA call and the first GPU work happen;
- the GPU: kernel, copy and memset time, the union of busy time, the busiest kernels, per-stream totals;
- the host: the CUDA calls that block (synchronize, blocking copies, cudaMalloc/cudaFree) and their time;
- the shape over time: the capture cut into bins, with the GPU-busy share of each (start-up, a loop,
  teardown), and the repeat marks (ProfilerStep#N, NVTX ranges) when there are any.

    python tools/corpus_reading.py tests/corpus/FILE [--bins 20] [--window START_MS END_MS]
    python tools/corpus_reading.py FILE --gaps 50 [--window A B]   # GPU idle, and what the host does in it
    python tools/corpus_reading.py FILE --host --window A B         # what fills a stretch on the host
    python tools/corpus_reading.py data/published__dlrm_8gpu__v100 --ranks   # one line per rank

Times are in milliseconds from the capture's first event.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sqlite3
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

BLOCKING = ("Synchronize", "cudaMemcpy_", "cudaMemcpy2D_", "cudaMalloc", "cudaFree", "cudaHostAlloc",
            "cudaMallocHost", "cudaFreeHost", "cuCtxSynchronize", "cuStreamSynchronize", "cuMemAlloc",
            "cuMemFree", "cudaEventSynchronize", "cudaStreamWaitEvent")


def union_ms(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def busy_in(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    return union_ms([(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi])


def largest_gaps(intervals: list[tuple[float, float]], n: int = 5) -> list[tuple[float, float]]:
    gaps, end = [], None
    for s, e in sorted(intervals):
        if end is not None and s > end:
            gaps.append((s - end, end))
        end = e if end is None else max(end, e)
    return sorted(gaps, reverse=True)[:n]


def report(rec: dict, bins: int, window: tuple[float, float] | None) -> None:
    t0 = rec["t0"]
    span = rec["t1"] - t0
    kern, copies, sets, host = rec["kernels"], rec["copies"], rec["memsets"], rec["runtime"]
    if window:
        lo, hi = window
        clip = lambda xs: [x for x in xs if x[0] >= lo and x[0] < hi]  # noqa: E731
        kern, copies, sets, host = clip(kern), clip(copies), clip(sets), clip(host)
        span = hi - lo
        t0w = lo
    else:
        t0w = 0.0
    print(f"device: {rec['device']}")
    for k, v in rec.get("meta", {}).items():
        print(f"{k}: {v}")
    print(f"capture span {span:.3f} ms" + (f" (window {window[0]:.3f}-{window[1]:.3f})" if window else ""))
    gpu = [(s, e) for s, e, *_ in kern]
    gpu_all = gpu + [(s, e) for s, e, *_ in copies] + [(s, e) for s, e, *_ in sets]
    if host:
        print(f"first CUDA call at {min(h[0] for h in host):.3f} ms; last ends {max(h[1] for h in host):.3f} ms")
    if gpu_all:
        first, last = min(s for s, _ in gpu_all), max(e for _, e in gpu_all)
        print(f"GPU work {first:.3f} .. {last:.3f} ms ({last - first:.3f} ms)")
        print(f"kernels {len(kern)}: sum {sum(e - s for s, e in gpu):.3f} ms, union {union_ms(gpu):.3f} ms; "
              f"copies {len(copies)}: sum {sum(e - s for s, e, *_ in copies):.3f} ms; memsets {len(sets)}; "
              f"GPU busy (any) {union_ms(gpu_all):.3f} ms = {union_ms(gpu_all) / span:.1%} of the span, "
              f"{union_ms(gpu_all) / max(last - first, 1e-9):.1%} of first..last GPU work")
        print("largest GPU gaps (ms, at):", [(round(g, 3), round(a, 3)) for g, a in largest_gaps(gpu_all)])
    names = Counter()
    for s, e, n, *_ in kern:
        names[n] += e - s
    print("top kernels (ms, count):")
    counts = Counter(n for _, _, n, *_ in kern)
    for n, t in names.most_common(8):
        print(f"   {t:10.3f} {counts[n]:6d}  {n[:110]}")
    streams = defaultdict(float)
    for s, e, _, st in kern:
        streams[st] += e - s
    print("kernel time by stream:", {k: round(v, 3) for k, v in sorted(streams.items(), key=lambda kv: -kv[1])[:8]})
    if copies:
        by = defaultdict(lambda: [0, 0.0, 0])
        for s, e, kind, nbytes in copies:
            by[kind][0] += 1
            by[kind][1] += e - s
            by[kind][2] += nbytes or 0
        print("copies by kind (count, ms, MB):", {k: (v[0], round(v[1], 3), round(v[2] / 1e6, 2)) for k, v in by.items()})
    calls = defaultdict(lambda: [0, 0.0])
    for s, e, n in host:
        calls[n][0] += 1
        calls[n][1] += e - s
    print("CUDA calls by total time (count, ms):")
    for n, (c, t) in sorted(calls.items(), key=lambda kv: -kv[1][1])[:10]:
        mark = " <- blocks" if any(b in n for b in BLOCKING) else ""
        print(f"   {t:10.3f} {c:6d}  {n}{mark}")
    steps = rec.get("steps", [])
    if steps:
        durs = [e - s for s, e, _ in steps]
        print(f"step marks ({len(steps)}): " + ", ".join(f"{n} {e - s:.2f}ms@{s:.1f}" for s, e, n in steps[:12]))
        for s, e, n in steps[:12]:
            print(f"   {n}: {e - s:.3f} ms, GPU busy {busy_in(gpu_all, s, e) / max(e - s, 1e-9):.1%}")
        if len(durs) > 1:
            print(f"   step ms min {min(durs):.3f} median {sorted(durs)[len(durs) // 2]:.3f} max {max(durs):.3f}")
    comm = [(s, e) for s, e, n, _ in kern if "nccl" in n.lower() or "rccl" in n.lower()]
    if comm:
        compute = [(s, e) for s, e, n, _ in kern if not ("nccl" in n.lower() or "rccl" in n.lower())]
        both = union_ms(comm) + union_ms(compute) - union_ms(comm + compute)
        print(f"collective kernels {len(comm)}: union {union_ms(comm):.3f} ms, of which overlapped by compute kernels "
              f"{both:.3f} ms, exposed {union_ms(comm) - both:.3f} ms; compute kernels union {union_ms(compute):.3f} ms")
        for s0, e0, n0 in steps[:12]:
            c_in, k_in = busy_in(comm, s0, e0), busy_in(compute, s0, e0)
            ov = c_in + k_in - busy_in(comm + compute, s0, e0)
            print(f"   {n0}: compute busy {k_in:.2f} ms, collective {c_in:.2f} ms (exposed {c_in - ov:.2f} ms) "
                  f"of {e0 - s0:.2f} ms")
    ranges = rec.get("ranges", [])
    if ranges:
        rc = Counter(n for _, _, n in ranges)
        rt = defaultdict(float)
        for s, e, n in ranges:
            rt[n] += e - s
        print("annotations (count, ms):", [(n[:50], rc[n], round(rt[n], 2)) for n, _ in Counter(rt).most_common(12)])
    if span <= 0:
        print("no timed GPU or CUDA activity: nothing to cut into bins")
        return
    lo = t0w
    width = span / bins
    row = []
    for i in range(bins):
        a, b = lo + i * width, lo + (i + 1) * width
        row.append(f"{busy_in(gpu_all, a, b) / width:.0%}")
    print(f"GPU busy per {width:.2f} ms bin:", " ".join(row))
    hostrow = []
    for i in range(bins):
        a, b = lo + i * width, lo + (i + 1) * width
        blk = busy_in([(s, e) for s, e, n in host if any(x in n for x in BLOCKING)], a, b)
        hostrow.append(f"{blk / width:.0%}")
    print("host in blocking CUDA calls per bin:", " ".join(hostrow))


def read_sqlite(path: Path) -> dict:
    if path.suffix != ".gz":
        return _read_sqlite(path)
    with tempfile.TemporaryDirectory() as tmp:  # the export, unpacked, is removed with the folder
        db = Path(tmp) / "export.sqlite"
        db.write_bytes(gzip.decompress(path.read_bytes()))
        return _read_sqlite(db)


def _read_sqlite(path: Path) -> dict:
    con = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    strings = dict(con.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}

    def rows(sql: str) -> list:
        try:
            return con.execute(sql).fetchall()
        except sqlite3.Error:
            return []

    starts = []
    kern = []
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        kern = [(s, e, strings.get(n, str(n)), st) for s, e, n, st in
                rows("SELECT start, end, COALESCE(demangledName, shortName), streamId FROM CUPTI_ACTIVITY_KIND_KERNEL")]
    kinds = {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP", 11: "UM HtoD", 12: "UM DtoH"}
    copies = [(s, e, kinds.get(k, str(k)), b) for s, e, k, b in
              rows("SELECT start, end, copyKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY")]
    sets = [(s, e, "memset", b) for s, e, b in rows("SELECT start, end, bytes FROM CUPTI_ACTIVITY_KIND_MEMSET")]
    host = [(s, e, strings.get(n, str(n))) for s, e, n in rows("SELECT start, end, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME")]
    nvtx = [(s, e, t or strings.get(tid, "")) for s, e, t, tid in
            rows("SELECT start, end, text, textId FROM NVTX_EVENTS WHERE end IS NOT NULL AND end > start")]
    for xs in (kern, copies, sets, host, nvtx):
        starts += [x[0] for x in xs]
    device = "; ".join(f"{n}" for (n,) in rows("SELECT name FROM TARGET_INFO_GPU")) or \
        "; ".join(f"{n}" for (n,) in rows("SELECT name FROM TARGET_INFO_CUDA_DEVICE"))
    meta = {}
    det = rows("SELECT startTime, stopTime, duration FROM ANALYSIS_DETAILS")
    if det:
        meta["capture duration per ANALYSIS_DETAILS (ms)"] = round((det[0][2] or 0) / 1e6, 3)
    ver = rows("SELECT value FROM META_DATA_EXPORT WHERE name LIKE '%version%'")
    if ver:
        meta["export version"] = [v[0] for v in ver][:3]
    procs = rows("SELECT DISTINCT name FROM PROCESSES") if "PROCESSES" in tables else []
    if procs:
        meta["processes"] = [p[0] for p in procs][:6]
    t0 = min(starts) if starts else 0
    t1 = max([x[1] for xs in (kern, copies, sets, host, nvtx) for x in xs] or [0])
    ms = lambda v: (v - t0) / 1e6  # noqa: E731
    out = {
        "device": device or "not recorded",
        "meta": meta,
        "t0": 0.0,
        "t1": ms(t1),
        "kernels": [(ms(s), ms(e), n, st) for s, e, n, st in kern],
        "copies": [(ms(s), ms(e), k, b) for s, e, k, b in copies],
        "memsets": [(ms(s), ms(e), k, b) for s, e, k, b in sets],
        "runtime": [(ms(s), ms(e), n) for s, e, n in host],
        "ranges": [(ms(s), ms(e), n) for s, e, n in nvtx],
        "host_ops": [(ms(s), ms(e), "runtime", n) for s, e, n in host] + [(ms(s), ms(e), "nvtx", n) for s, e, n in nvtx],
    }
    con.close()
    return out


def read_kineto(path: Path) -> dict:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    doc = json.loads(raw)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    xs = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e]
    t0 = min(float(e["ts"]) for e in xs)
    t1 = max(float(e["ts"]) + float(e.get("dur", 0)) for e in xs)
    ms = lambda v: (float(v) - t0) / 1e3  # noqa: E731
    cat = lambda e: str(e.get("cat", "")).lower()  # noqa: E731
    kern, copies, sets, host, steps, ranges, host_ops = [], [], [], [], [], [], []
    cats = Counter(cat(e) for e in xs)
    for e in xs:
        c, s = cat(e), ms(e["ts"])
        end = s + float(e.get("dur", 0)) / 1e3
        a = e.get("args") or {}
        if c in ("cpu_op", "python_function", "user_annotation", "cuda_runtime", "cuda_driver", "runtime"):
            host_ops.append((s, end, c, str(e.get("name", ""))))
        if c == "kernel":
            kern.append((s, end, e.get("name", ""), a.get("stream", a.get("device"))))
        elif c == "gpu_memcpy":
            copies.append((s, end, e.get("name", ""), a.get("bytes", 0)))
        elif c == "gpu_memset":
            sets.append((s, end, "memset", a.get("bytes", 0)))
        elif c in ("cuda_runtime", "cuda_driver", "runtime", "driver"):
            host.append((s, end, e.get("name", "")))
        elif c in ("user_annotation", "gpu_user_annotation"):
            if str(e.get("name", "")).startswith("ProfilerStep#") and c == "user_annotation":
                steps.append((s, end, e["name"]))
            elif c == "user_annotation":
                ranges.append((s, end, e.get("name", "")))
        elif c == "cpu_op" and str(e.get("name", "")).startswith("ProfilerStep#"):
            steps.append((s, end, e["name"]))
    meta = {"categories": dict(cats.most_common(12))}
    if isinstance(doc, dict):
        for key in ("distributedInfo", "cuda_runtime_version", "cuda_driver_version", "schemaVersion"):
            if key in doc:
                meta[key] = doc[key]
    props = doc.get("deviceProperties", []) if isinstance(doc, dict) else []
    threads = Counter((e.get("pid"), e.get("tid")) for e in xs if cat(e) in ("cpu_op", "cuda_runtime", "python_function"))
    meta["host threads (pid, tid: events)"] = threads.most_common(6)
    return {"device": "; ".join(sorted({p.get("name", "?") for p in props})) or "not recorded",
            "meta": meta, "t0": 0.0, "t1": ms(t1), "kernels": kern, "copies": copies, "memsets": sets,
            "runtime": host, "steps": sorted(steps), "ranges": ranges, "host_ops": host_ops,
            "t0_abs_ms": t0 / 1e3, "rank": (doc.get("distributedInfo") or {}).get("rank") if isinstance(doc, dict) else None}


def gpu_gaps(rec: dict, lo: float, hi: float) -> list[tuple[float, float]]:
    """The stretches of [lo, hi] in which no kernel, copy or memset runs."""
    gpu = sorted((s, e) for s, e, *_ in rec["kernels"] + rec["copies"] + rec["memsets"] if e > lo and s < hi)
    out, end = [], lo
    for s, e in gpu:
        if s > end:
            out.append((end, s))
        end = max(end, e)
    if hi > end:
        out.append((end, hi))
    return out


def gaps_report(rec: dict, window: tuple[float, float] | None, min_us: float) -> None:
    """Where the GPU idles in the window, and what the host does then: the CUDA calls that overlap the idle
    stretches, and the innermost host event (op, Python frame, range or call) at the middle of each long one."""
    lo, hi = window or (min(s for s, *_ in rec["kernels"] + rec["copies"] + rec["memsets"]),
                        max(e for _, e, *_ in rec["kernels"] + rec["copies"] + rec["memsets"]))
    gaps = gpu_gaps(rec, lo, hi)
    long = [(a, b) for a, b in gaps if (b - a) * 1e3 > min_us]
    idle = sum(b - a for a, b in gaps)
    print(f"GPU idle {idle:.3f} ms of {hi - lo:.3f} ms ({idle / max(hi - lo, 1e-9):.1%}) in {len(gaps)} gaps; "
          f"{len(long)} gaps over {min_us:g} us hold {sum(b - a for a, b in long):.3f} ms")
    calls = defaultdict(float)
    for s, e, n in rec["runtime"]:
        for a, b in gaps:
            if e > a and s < b:
                calls[n] += min(e, b) - max(s, a)
    print("CUDA calls during the idle (ms):", {n: round(t, 3) for n, t in sorted(calls.items(), key=lambda kv: -kv[1])[:8]})
    ops = sorted(rec.get("host_ops", []))
    inner = Counter()
    for a, b in long:
        mid = (a + b) / 2
        covering = [(e - s, c, n) for s, e, c, n in ops if s <= mid <= e]
        inner[min(covering)[1:] if covering else ("none", "no host event covers it")] += 1
    print(f"innermost host event at the middle of the {len(long)} long gaps:")
    for (c, n), k in inner.most_common(10):
        print(f"   {k:5d}  {c}: {n[:100]}")


def host_top(rec: dict, window: tuple[float, float], n: int = 20) -> None:
    """The host events that fill the window longest, outermost first (what the host was doing then)."""
    lo, hi = window
    rows = [(min(e, hi) - max(s, lo), c, name) for s, e, c, name in rec.get("host_ops", []) if e > lo and s < hi]
    print(f"host events in {lo:.3f}-{hi:.3f} ms, by time inside the window:")
    for t, c, name in sorted(rows, reverse=True)[:n]:
        print(f"   {t:9.3f} ms  {c}: {name[:100]}")


def ranks_report(folder: Path) -> None:
    """One line per rank of a job folder, on the ranks' shared clock (times from the earliest step start)."""
    recs = [read_kineto(p) for p in sorted(folder.iterdir()) if p.name.endswith((".json", ".json.gz"))]
    origin = min(r["t0_abs_ms"] + (r["steps"][0][0] if r["steps"] else 0.0) for r in recs)
    print("rank  step_start  step_ms  kernel_ms_by_stream  collective_ms  first_collective(start, dur)  host_sync_ms")
    for r in sorted(recs, key=lambda r: (r["rank"] is None, r["rank"])):
        shift = r["t0_abs_ms"] - origin
        step = r["steps"][0] if r["steps"] else (0.0, r["t1"], "")
        streams = defaultdict(float)
        for s, e, _name, st in r["kernels"]:
            streams[st] += e - s
        comm = sorted((s, e) for s, e, name, _ in r["kernels"] if "nccl" in name.lower() or "rccl" in name.lower())
        sync = sum(e - s for s, e, name in r["runtime"] if "Synchronize" in name)
        first = f"{comm[0][0] + shift:.2f}, {comm[0][1] - comm[0][0]:.2f}" if comm else "-"
        print(f"{r['rank']!s:>4}  {step[0] + shift:10.2f}  {step[1] - step[0]:7.2f}  "
              f"{dict((k, round(v, 2)) for k, v in sorted(streams.items(), key=lambda kv: -kv[1]))}  "
              f"{union_ms(comm):6.2f}  {first}  {sync:.2f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace", type=Path, help="a trace file, or with --ranks a folder of one job's rank traces")
    p.add_argument("--bins", type=int, default=20)
    p.add_argument("--window", type=float, nargs=2, metavar=("START_MS", "END_MS"))
    p.add_argument("--gaps", type=float, metavar="MIN_US", help="where the GPU idles and what the host does then")
    p.add_argument("--host", action="store_true", help="the host events that fill --window longest")
    p.add_argument("--ranks", action="store_true", help="one line per rank of a job folder, on the shared clock")
    a = p.parse_args(argv)
    if a.ranks:
        ranks_report(a.trace)
        return 0
    if a.trace.suffix == ".gz":
        with gzip.open(a.trace) as f:
            head = f.read(16)
    else:
        head = a.trace.read_bytes()[:16]
    rec = read_sqlite(a.trace) if head.startswith(b"SQLite format 3") else read_kineto(a.trace)
    window = tuple(a.window) if a.window else None
    if a.gaps is not None:
        gaps_report(rec, window, a.gaps)
    elif a.host:
        host_top(rec, window or (rec["t0"], rec["t1"]))
    else:
        report(rec, a.bins, window)
    return 0


if __name__ == "__main__":
    sys.exit(main())
