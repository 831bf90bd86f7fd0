"""``python -m helpers``: summarise, diagnose, plot, compare and export traces; run the self-check.

Every command takes a PyTorch-profiler trace (.json / .json.gz), a folder of per-rank traces, or
an Nsight Systems SQLite export. Bad input prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from . import metrics, render
from .diagnosis import diagnose
from .errors import TraceError
from .readers import load

JSON_SCHEMA_DOC = render.json_schema_doc()  # generated from diagnosis.PATTERNS


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


_clean = render.clean  # kept for callers of the old name


def _no_clobber(path: Path) -> Path:
    if path.exists():
        raise TraceError(f"{path}: already exists; choose another output name (existing files are never overwritten)")
    return path


def cmd_summary(args: argparse.Namespace) -> int:
    trace = load(args.trace, args.steps)
    s = metrics.summary(trace)
    print(render.to_json(s) if args.json else render.summary_text(s))
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    trace = load(args.trace, args.steps)
    findings = diagnose(trace)
    if args.json:
        print(render.to_json({"trace": trace.source, "summary": metrics.summary(trace), "findings": [f.to_dict() for f in findings]}))
        return 0
    print(render.diagnose_text(str(args.trace), findings, trace.has_gpu))
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
    print(render.compare_text(metrics.comparison(before, after)))
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
    p = argparse.ArgumentParser(prog="python -m helpers", description=__doc__.splitlines()[0].replace("``", ""),
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
