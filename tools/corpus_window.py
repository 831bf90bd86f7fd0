"""Cut a published Kineto trace down to a contiguous time window, for tests/corpus/ (whose clone budget a
whole trace of thirty steps would take too much of).

What is kept, and why (the manifest entry's ``slice`` says the window and the counts this prints):

- every metadata event (``ph: M``: process and thread names), and the top-level members (device properties,
  schemaVersion, distributedInfo) as published;
- every other event that lies wholly inside the window: host ops, ranges, CUDA calls, kernels, copies, flow
  ends (``ph: s/f``) and instants. An event that crosses an edge is left out, not clipped, so no duration is
  made up; cut where the host waits and the GPU is idle (the start of a DataLoader wait, say), and nothing of a
  step is lost but the launches whose kernels run past the end;
- the profiler's own span (``cat: Trace``, "PyTorch Profiler (0)"), clipped to the window: it spans the whole
  capture, and the readers take the capture's extent from it.

Times stay as published (absolute microseconds). Imports nothing from ``helpers``: the cut is made before,
and independently of, the toolkit that is then judged on it.

    python tools/corpus_window.py IN.json[.gz] OUT.json.gz START_MS END_MS   # ms from the first timed event
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
from pathlib import Path


def _load(path: Path) -> tuple[bytes, dict]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    if isinstance(doc, list):  # Chrome's bare-array form
        doc = {"traceEvents": doc}
    return raw, doc


def cut(doc: dict, start_ms: float, end_ms: float) -> tuple[dict, int, int]:
    """The document with only the window's events (see the module's note); with the kept and original counts."""
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    t0 = min(float(e["ts"]) for e in timed)
    lo, hi = t0 + start_ms * 1e3, t0 + end_ms * 1e3
    kept = []
    for e in events:
        if not isinstance(e, dict):
            continue
        ph, ts = e.get("ph"), e.get("ts")
        if ph == "M":
            kept.append(e)
            continue
        if not isinstance(ts, (int, float)):
            continue
        end = ts + float(e.get("dur") or 0.0)
        if str(e.get("cat", "")).lower() == "trace" and ph == "X":  # the profiler's own span: clipped
            if ts < hi and end > lo:
                s = max(float(ts), lo)
                kept.append({**e, "ts": s, "dur": min(end, hi) - s})
            continue
        if lo <= ts and end <= hi:
            kept.append(e)
    return {**doc, "traceEvents": kept}, len(kept), len(events)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("start_ms", type=float)
    ap.add_argument("end_ms", type=float)
    a = ap.parse_args(argv)
    if a.dst.exists():
        print(f"{a.dst}: already exists; choose another name", file=sys.stderr)
        return 2
    try:
        raw, doc = _load(a.src)
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        print(f"{a.src}: not a Kineto JSON trace this tool can cut ({type(exc).__name__})", file=sys.stderr)
        return 2
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        print(f"{a.src}: no traceEvents list to cut", file=sys.stderr)
        return 2
    out, kept, total = cut(doc, a.start_ms, a.end_ms)
    body = json.dumps(out, separators=(",", ":")).encode()
    a.dst.write_bytes(gzip.compress(body, compresslevel=9, mtime=0))
    print(json.dumps({"what": f"the events wholly inside {a.start_ms:g}-{a.end_ms:g} ms from the first timed event "
                              "(metadata kept, the profiler's span clipped to the window)",
                      "kept_events": kept, "of_events": total,
                      "sha256_original": hashlib.sha256(raw).hexdigest(),
                      "uncompressed_bytes": len(body), "stored_bytes": a.dst.stat().st_size,
                      "sha256_uncompressed": hashlib.sha256(body).hexdigest()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
