"""``python -m helpers``: summarise, diagnose, plot, compare and export traces; run the self-check.

Every command takes a PyTorch-profiler trace (.json / .json.gz), a folder of per-rank traces, or
an Nsight Systems SQLite export. Bad input prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import metrics
from .diagnosis import diagnose
from .errors import TraceError
from .readers import load

JSON_SCHEMA_DOC = """\
diagnose --json prints one object:
  {"trace": str, "summary": {...metrics.summary...},
   "findings": [{"pattern": str, "cost": float, "summary": str, "evidence": {...}, "fix": str,
                 "window": [start_us, end_us] | null}]}
pattern is one of data_stall, launch_overhead, sync_stall, h2d_copy, communication, load_imbalance, gpu_bound.
"""


def _window(text: str | None) -> tuple[float, float] | None:
    """``START:END`` in milliseconds -> microseconds."""
    if not text:
        return None
    try:
        a, b = (float(x) for x in text.split(":"))
    except ValueError:
        raise TraceError(f"--window {text!r}: write it as START:END in milliseconds, e.g. 10:25") from None
    if b <= a:
        raise TraceError(f"--window {text!r}: END must be after START")
    return a * 1e3, b * 1e3


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN -> null, numpy scalars -> Python numbers."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _no_clobber(path: Path) -> Path:
    if path.exists():
        raise TraceError(f"{path}: already exists; choose another output name (existing files are never overwritten)")
    return path


def cmd_summary(args: argparse.Namespace) -> int:
    trace = load(args.trace, args.steps)
    s = metrics.summary(trace)
    if args.json:
        print(json.dumps(_clean(s), indent=1))
        return 0
    print(f"{trace.source}  ({trace.format}, {s['events']} events, ranks {s['ranks']}, {s['steps']} steps)")
    if s["device_names"]:
        print(f"  device: {', '.join(n for n in s['device_names'] if n)}")
    print(f"  step time (mean): {s['step_time_ms']:.3f} ms")
    if trace.has_gpu:
        print(f"  GPU utilization:    {s['gpu_utilization']:.1%}")
        idle = s["idle_by_cause_us"]
        total = sum(idle.values()) or 1.0
        print("  GPU idle, by what the host was doing: " + ", ".join(f"{k} {v / total:.0%}" for k, v in idle.items() if v))
        k = s["kernels"]
        print(f"  kernels: {k['per_step']:.0f}/step, median {k['median_us']:.1f} us, {k['share_under_10us']:.0%} under 10 us")
        for c in s["copies"]:
            print(f"  {c['copy_kind']} {c['host_memory'] or ''} copies: {c['time_per_step_us'] / 1e3:.2f} ms/step at "
                  f"{c['gb_per_s']:.1f} GB/s, {c['overlap_share']:.0%} overlapped with compute")
        print(f"  syncs: {s['sync']['sync_points_per_step']:.1f}/step, host blocked {s['sync']['blocked_us_per_step'] / 1e3:.2f} ms/step")
    else:
        print(f"  {s['note']}")
    print(f"  data wait: {s['data_wait_us_per_step'] / 1e3:.2f} ms/step ({s['data_wait_share']:.0%} of the step)")
    if "communication" in s:
        c = s["communication"]
        print(f"  communication: {c['collective_us_per_step'] / 1e3:.2f} ms/step, exposed {c['exposed_us_per_step'] / 1e3:.2f} ms/step "
              f"({c['exposed_share']:.0%}), compute spread across ranks {c['compute_spread']:.0%}")
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    trace = load(args.trace, args.steps)
    findings = diagnose(trace)
    if args.json:
        doc = {"trace": trace.source, "summary": metrics.summary(trace), "findings": [f.to_dict() for f in findings]}
        print(json.dumps(_clean(doc), indent=1))
        return 0
    if not findings:
        print(f"{trace.source}: nothing stands out" + ("" if trace.has_gpu else " (CPU-only trace: host-side checks only)"))
    for i, f in enumerate(findings, 1):
        print(f"{i}. {f.pattern} ({f.share:.0%} of step time)")
        print(f"   {f.summary}")
        for k, v in f.evidence.items():
            if isinstance(v, float):
                v = f"{v:.3g}"
            elif isinstance(v, (list, dict)):
                v = json.dumps(_clean(v))[:120]
            print(f"     - {k}: {v}")
        if f.window:
            print(f"   where: {f.window[0] / 1e3:.2f}-{f.window[1] / 1e3:.2f} ms (python -m helpers plot TRACE --window "
                  f"{f.window[0] / 1e3:.1f}:{f.window[1] / 1e3:.1f})")
        print(f"   fix: {f.fix}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from . import plots

    out = _no_clobber(Path(args.output))
    trace = load(args.trace, args.steps)
    fig = plots.timeline(trace, window=_window(args.window), step=args.step,
                         findings=diagnose(trace) if args.findings else (), title=str(args.trace))
    fig.savefig(out)
    print(out)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    before, after = load(args.before, args.steps), load(args.after, args.steps)
    table = metrics.comparison(before, after)
    print(table.to_string(index=False))
    if args.output:
        from . import plots

        out = _no_clobber(Path(args.output))
        plots.compare(before, after).savefig(out)
        print(out)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .export import export

    print(export(load(args.trace, args.steps), args.output))
    return 0


def cmd_selfcheck(args: argparse.Namespace) -> int:
    from .selfcheck import run_selfcheck

    return run_selfcheck(Path(args.labs), run=args.run)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m helpers", description=__doc__.splitlines()[0],
                                epilog=JSON_SCHEMA_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def with_trace(name: str, help_text: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_text)
        sp.add_argument("trace", help="trace file, folder of per-rank traces, or nsys SQLite export")
        sp.add_argument("--steps", metavar="REGEX", help="annotation ranges that mark steps (default: ProfilerStep#N)")
        return sp

    sp = with_trace("summary", "headline figures")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_summary)
    sp = with_trace("diagnose", "name the bottlenecks, with evidence and fixes")
    sp.add_argument("--json", action="store_true", help="machine-readable output (schema below)")
    sp.set_defaults(func=cmd_diagnose)
    sp = with_trace("plot", "draw the timeline")
    sp.add_argument("-o", "--output", default="timeline.png")
    sp.add_argument("--window", metavar="START:END", help="milliseconds from the trace start")
    sp.add_argument("--step", type=int, help="draw one step (0 = first profiled step)")
    sp.add_argument("--findings", action="store_true", help="shade where each finding shows")
    sp.set_defaults(func=cmd_plot)
    sp = sub.add_parser("compare", help="before/after table (and figure with -o)")
    sp.add_argument("before")
    sp.add_argument("after")
    sp.add_argument("-o", "--output")
    sp.add_argument("--steps", metavar="REGEX")
    sp.set_defaults(func=cmd_compare)
    sp = with_trace("export", "write as Chrome-trace JSON for Perfetto UI / chrome://tracing")
    sp.add_argument("-o", "--output", required=True)
    sp.set_defaults(func=cmd_export)
    sp = sub.add_parser("selfcheck", help="the syllabus's self-check list, from your lab notebooks")
    sp.add_argument("labs", nargs="?", default="labs")
    sp.add_argument("--run", action="store_true", help="execute the notebooks first (takes minutes)")
    sp.set_defaults(func=cmd_selfcheck)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (TraceError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. piped into head
        return 0
