"""``python -m helpers``: summarise, diagnose, plot, compare and export traces; run the self-check.

Every command takes a PyTorch-profiler trace (.json / .json.gz), a folder of per-rank traces, or
an Nsight Systems SQLite export. Bad input prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import shlex
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import metrics, render
from .diagnosis import diagnose
from .errors import Interrupted, TraceError
from .interrupts import signals_as_exceptions, stopped
from .model import check_step_pattern
from .outputs import check_output, write_output
from .paths import os_error_text, terminal_safe, working_folder
from .readers import MAX_BYTES, MAX_EVENTS
from .readers import load as _load

#: The parser's description: written out, not taken from the docstring (python -OO strips docstrings).
DESCRIPTION = "python -m helpers: summarise, diagnose, plot, compare and export traces; run the self-check."
FIGURE_FORMATS = ("png", "pdf", "svg", "jpg", "jpeg", "webp", "eps", "ps", "tif", "tiff")

JSON_SCHEMA_DOC = render.json_schema_doc()  # generated from diagnosis.PATTERNS


def _window(text: str | None) -> tuple[float, float] | None:
    """``START:END`` in milliseconds on the timeline's axis."""
    if not text:
        return None
    try:
        a, b = (float(x) for x in text.split(":"))
    except ValueError:
        raise TraceError(f"--window {_shown(text)}: write it as START:END in milliseconds, e.g. 10:25") from None
    if not all(math.isfinite(x) for x in (a, b, (b - a) * 1e3, a * 1e3, b * 1e3)):  # (the timeline is in us)
        raise TraceError(f"--window {_shown(text)}: START and END must be finite numbers of milliseconds, e.g. 10:25")
    if b <= a:
        raise TraceError(f"--window {_shown(text)}: END must be after START")
    return a, b


def load(path: str, args: argparse.Namespace):
    """Load with the command line's --steps and size limits (a folder's ranks together)."""
    max_bytes, max_events = _limits_given(args)
    return _load(path, _step_pattern(args.steps), max_bytes=MAX_BYTES if max_bytes is None else max_bytes,
                 max_events=MAX_EVENTS if max_events is None else max_events)


def _limits_given(args: argparse.Namespace) -> tuple[int | None, int | None]:
    """--max-mb in bytes and --max-events, or None for each one not given (the defaults then apply)."""
    return args.max_mb, args.max_events  # (--max-mb is read as bytes)


def _step_pattern(text: str | None) -> str | None:
    return check_step_pattern(text, "--steps")


def _figure_path(text: str, force: bool, inputs: Sequence[str] = ()) -> Path:
    """The exact file a figure will be written to: ``.png`` is added when the name has no suffix."""
    p = Path(text)
    if p.exists() and not p.is_file():  # a folder or /dev/null: not a figure name, whatever suffix is added
        raise TraceError(f"{text}: is a folder or a device, not a file name; give the figure's file, e.g. -o timeline.png")
    fmt = p.suffix[1:].lower()
    if not fmt:
        p, fmt = p.with_name(p.name + ".png"), "png"
    if fmt not in FIGURE_FORMATS:
        raise TraceError(f"{text}: cannot draw a figure as .{fmt}; use one of " + ", ".join("." + f for f in FIGURE_FORMATS))
    return check_output(p, force, inputs)


def _one_line(path: str | os.PathLike) -> str:
    """A written file's name as the one line the command prints: a line break or tab in it shown as ``\\xNN``."""
    return os.fspath(path).replace("\n", "\\x0a").replace("\r", "\\x0d").replace("\t", "\\x09")


def _save_figure(fig: Any, out: Path, force: bool) -> Path:
    fmt = out.suffix[1:].lower()
    return write_output(out, lambda fh: fig.savefig(fh, format=fmt), force)


def cmd_summary(args: argparse.Namespace) -> int:
    trace = load(args.trace, args)
    s = metrics.summary(trace)
    print(render.to_json(s) if args.json else render.summary_text(s))
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    from .jobs import rank_by_rank

    why = rank_by_rank(args.trace)
    if why is not None:  # too large to hold as one timeline: each rank diagnosed on its own, in bounded memory
        return _diagnose_rank_by_rank(args, why)
    trace = load(args.trace, args)
    findings = diagnose(trace)
    if args.json:
        print(render.to_json({"trace": trace.source, "summary": metrics.summary(trace), **findings.to_dict()}))
        return 0
    part = trace.metadata.get("job_world_size")
    if part:  # a folder of part of its job's ranks: said before any finding, which is of these ranks only
        print(render.part_of_job_text(int(part), list(trace.ranks)))
    print(render.diagnose_text(str(args.trace), findings, trace.has_gpu, origin_us=metrics.time_origin_us(metrics.stepped(trace))))
    return 0


def _diagnose_rank_by_rank(args: argparse.Namespace, why: str) -> int:
    """``diagnose FOLDER`` of a job too large to read as one timeline: the cross-rank report of ``ranks``."""
    from .jobs import analyse_job, stderr_progress

    max_bytes, max_events = _limits_given(args)
    report = analyse_job(args.trace, step_pattern=_step_pattern(args.steps), max_bytes=max_bytes, max_events=max_events,
                         progress=stderr_progress())
    read = (f"{why}, so read rank by rank: each rank is diagnosed on its own, as python -m helpers ranks does "
            "(diagnose one rank's file for its whole diagnosis)")
    if args.json:
        print(render.to_json({"trace": str(args.trace), "read": read, **report,
                              "per_rank": report["per_rank"].to_dict(orient="records")}))
    else:
        print(f"{args.trace}: {read}\n{render.job_text(report)}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from . import plots

    out = _figure_path(args.output, args.force, [args.trace])
    window = _window(args.window)
    trace = load(args.trace, args)
    if trace.events.empty:  # nothing a step or window could pick
        raise TraceError(f"{args.trace}: the trace holds no events, so there is nothing to draw; python -m helpers "
                         "diagnose says why (the profiler recorded none of the loop)")
    try:
        fig = plots.timeline(trace, window_ms=window, step=args.step,
                             findings=diagnose(trace) if args.findings else (), title=str(args.trace))
    except ValueError as exc:  # plots' way of saying a --step or --window is not in the trace
        raise TraceError(f"{args.trace}: {exc}; pick a step or window the trace has") from None
    print(_one_line(_save_figure(fig, out, args.force)))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    out = _figure_path(args.output, args.force, [args.before, args.after]) if args.output else None
    before, after = load(args.before, args), load(args.after, args)
    from .diff import work_diff

    print(render.compare_text(metrics.comparison(before, after)))
    print()
    print(render.diff_text(work_diff(before, after)))
    if out is not None:
        from . import plots

        print(_one_line(_save_figure(plots.compare(before, after), out, args.force)))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from . import report
    from .jobs import stderr_progress

    inputs = [args.trace] + ([args.after] if args.after else [])
    out = Path(args.output)
    if out.suffix.lower() not in (".html", ".htm"):
        raise TraceError(f"{args.output}: a report is an HTML file; give a name ending in .html, e.g. -o report.html")
    out = check_output(out, args.force, inputs)
    progress = stderr_progress("report")
    total = 2 * len(inputs)
    traces, shapes = [], []
    for i, path in enumerate(inputs):
        traces.append(load(path, args))
        if progress:
            progress(2 * i + 1, total + 6)
        shapes.append(report.input_shapes(path, _limits_given(args)[0] or MAX_BYTES))
        if progress:
            progress(2 * i + 2, total + 6)
    command = "python -m helpers report " + " ".join(shlex.quote(str(p)) for p in inputs)
    page = report.build(traces, shapes=shapes, detail_events=args.detail_events, command=command,
                        progress=(lambda done, n: progress(total + done * 6 // max(n, 1), total + 6)) if progress else None)
    written = write_output(out, lambda fh: fh.write(page.encode("utf-8")), args.force)
    print(f"{_one_line(written)} ({len(page.encode('utf-8')) / 1e6:.1f} MB)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .export import export

    check_output(args.output, args.force, [args.trace])
    print(_one_line(export(load(args.trace, args), args.output, force=args.force)))
    return 0


def cmd_ranks(args: argparse.Namespace) -> int:
    from .jobs import analyse_job, stderr_progress

    max_bytes, max_events = _limits_given(args)
    report = analyse_job(args.folder, workers=args.workers, scheduler=args.scheduler, step_pattern=_step_pattern(args.steps),
                         max_bytes=max_bytes, max_events=max_events, progress=stderr_progress())
    if args.json:
        doc = dict(report, per_rank=report["per_rank"].to_dict(orient="records"))
        print(render.to_json(doc))
    else:
        print(render.job_text(report))
    return 0


def cmd_selfcheck(args: argparse.Namespace) -> int:
    from .selfcheck import run_selfcheck

    return run_selfcheck(Path(args.labs), run=args.run)


def cmd_doctor(args: argparse.Namespace) -> int:
    from . import doctor

    findings = doctor.examine(args.labs)
    if args.probe:
        findings += doctor.probe()
    if args.json:
        print(render.to_json([vars(f) for f in findings]))
    else:
        print(render.doctor_text(findings))
    return doctor.exit_status(findings)


#: The largest --max-mb taken as given, in bytes: a limit above any disk (1e308 MB is infinite bytes, which no
#: count can be compared with as a whole number) is this one.
MAX_LIMIT_BYTES = 1 << 62


def _megabytes(text: str) -> int:
    """--max-mb as a whole number of bytes: at least one, at most :data:`MAX_LIMIT_BYTES`."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{_shown(text)}: give a positive number, e.g. 512")
    if value * 2**20 < 1:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: less than one byte; give a size in megabytes, e.g. 512")
    return int(min(value * 2**20, MAX_LIMIT_BYTES))


def _positive_int(text: str) -> int:
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()) or not digits.strip("0"):  # (str.isdigit also takes '²', which int refuses)
        raise argparse.ArgumentTypeError(f"{_shown(text)}: give a positive whole number, e.g. 4")
    if len(digits) > 100:  # (Python refuses to read more than 4,300 digits; no count here needs 100)
        raise argparse.ArgumentTypeError(f"{_shown(text)}: far larger than any count a command can use; give e.g. 4")
    return int(digits)


def _name(text: str) -> str:
    """A file or folder name as given; an empty one is refused (pathlib reads it as the current folder)."""
    if not text:
        raise argparse.ArgumentTypeError(f"{text!r}: an empty name; give a file or folder")
    return text


def _output_name(text: str) -> str:
    """-o's file name: not empty, not '-' (no command writes its file to standard output: that was a file named
    '-' in the current folder) and not a name ending in '/' (a folder's: pathlib drops the slash, and a file
    named like the folder was written)."""
    text = _name(text)
    if text == "-":
        raise argparse.ArgumentTypeError("'-': the output is written to a file, never to standard output; give a file "
                                         "name (a file named '-' is ./-)")
    if text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"{_shown(text)}: ends in '/', so it names a folder; give a file name inside "
                                         "it")
    return text


def _shown(text: str, limit: int = 40) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text):,} characters)"


class _Parser(argparse.ArgumentParser):
    """argparse's usage errors as every other error: one line, ``error: ...``, status 2 (not the usage block)."""

    def __init__(self, *args: typing.Any, **kwargs: typing.Any) -> None:
        super().__init__(*args, **kwargs)
        # a window before the timeline's zero (--window -5:-1) is a value, not an option: argparse takes only bare
        # negative numbers so ('expected one argument'); no option of these commands starts with '-' and a digit
        if hasattr(self, "_negative_number_matcher"):
            self._negative_number_matcher = re.compile(r"^-\d+$|^-\d*\.\d+$|^-(?:\d|\.\d)[\d.]*(?:[eE][+-]?\d+)?:-?[\d.]*(?:[eE][+-]?\d+)?$")

    def error(self, message: str) -> typing.NoReturn:
        text = " ".join(message.split())
        if len(text) > 200:  # argparse repeats what it was given (an unknown option, a choice): keep it short
            text = text[:200] + "..."
        self.exit(2, f"error: {text} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m helpers", description=DESCRIPTION,
                                epilog=JSON_SCHEMA_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def with_trace(name: str, help_text: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_text)
        sp.add_argument("trace", type=_name, help="trace file, folder of per-rank traces, or nsys SQLite export")
        sp.add_argument("--steps", metavar="REGEX", help="annotation ranges that mark steps (default: ProfilerStep#N)")
        _limits(sp)
        return sp

    def _limits(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--max-mb", type=_megabytes, metavar="MB",
                        help=f"refuse inputs larger than this after decompression, a folder's ranks together "
                             f"(default {MAX_BYTES >> 20}; for a job read rank by rank, each rank)")
        sp.add_argument("--max-events", type=_positive_int, metavar="N",
                        help=f"refuse inputs with more events, a folder's ranks together (default {MAX_EVENTS:,}; "
                             "for a job read rank by rank, each rank)")

    sp = with_trace("summary", "headline figures")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_summary)
    sp = with_trace("diagnose", "name the bottlenecks, with evidence and fixes")
    sp.add_argument("--json", action="store_true", help="machine-readable output (schema below)")
    sp.set_defaults(func=cmd_diagnose)
    sp = with_trace("plot", "draw the timeline")
    sp.add_argument("-o", "--output", type=_output_name, default="timeline.png")
    sp.add_argument("--window", metavar="START:END",
                    help="milliseconds on the timeline's axis (0 = the first profiled step's start, as the plot labels it)")
    sp.add_argument("--step", type=int, help="draw one step (0 = first profiled step)")
    sp.add_argument("--findings", action="store_true", help="shade where each finding shows")
    sp.add_argument("--force", action="store_true", help="replace an existing output file")
    sp.set_defaults(func=cmd_plot)
    sp = sub.add_parser("compare", help="before/after table (and figure with -o)")
    sp.add_argument("before", type=_name)
    sp.add_argument("after", type=_name)
    sp.add_argument("-o", "--output", type=_output_name)
    sp.add_argument("--steps", metavar="REGEX")
    sp.add_argument("--force", action="store_true", help="replace an existing output file")
    _limits(sp)
    sp.set_defaults(func=cmd_compare)
    sp = with_trace("report", "one self-contained HTML file: overview, diagnosis, tables, the interactive timeline "
                    "(and the diff with a second trace)")
    sp.add_argument("after", nargs="?", type=_name, help="a second trace (the after of a before/after): the report adds the diff")
    sp.add_argument("-o", "--output", type=_output_name, default="report.html", help="the HTML file to write (default report.html)")
    sp.add_argument("--detail-events", type=_positive_int, default=2_000_000, metavar="N",
                    help="events stored one by one for hover, search and the finest zoom (default 2,000,000); "
                         "beyond them the timeline is drawn from columns laid out per zoom level")
    sp.add_argument("--force", action="store_true", help="replace an existing output file")
    sp.set_defaults(func=cmd_report)
    sp = with_trace("export", "write as Chrome-trace JSON for Perfetto UI / chrome://tracing")
    sp.add_argument("-o", "--output", type=_output_name, required=True)
    sp.add_argument("--force", action="store_true", help="replace an existing output file")
    sp.set_defaults(func=cmd_export)
    sp = sub.add_parser("ranks", help="a folder of per-rank traces, rank by rank in parallel: stragglers, imbalance, "
                        "exposed communication per rank")
    sp.add_argument("folder", type=_name, help="folder with one trace per rank")
    sp.add_argument("--workers", type=_positive_int, metavar="N",
                    help="processes (default: one per core; 1 = one by one; never more than one per core or per file)")
    sp.add_argument("--scheduler", metavar="ADDRESS", help="run on a Dask distributed scheduler, e.g. tcp://host:8786")
    sp.add_argument("--steps", metavar="REGEX", help="annotation ranges that mark steps (default: ProfilerStep#N)")
    sp.add_argument("--json", action="store_true")
    _limits(sp)
    sp.set_defaults(func=cmd_ranks)
    sp = sub.add_parser("selfcheck", help="the syllabus's self-check list, from your lab notebooks")
    sp.add_argument("labs", nargs="?", type=_name, default="labs")
    sp.add_argument("--run", action="store_true", help="execute the notebooks first (takes minutes)")
    sp.set_defaults(func=cmd_selfcheck)
    sp = sub.add_parser("doctor", help="what this machine gives the labs: the track, torch, nsys/ncu, counter permissions")
    sp.add_argument("labs", nargs="?", type=_name, default="labs", help="the folder of lab notebooks (default: labs)")
    sp.add_argument("--probe", action="store_true", help="on a GPU, run nsys and ncu once each as this user")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_doctor)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit status. Never raises for anything a user can cause.

    Bad input: one line on stderr (``error: ...``), status 2. Stopped by Ctrl-C, SIGTERM or SIGHUP: one
    line, no partial output or temporary file left, status 128 + the signal's number. stdout a closed
    pipe (``| head``): quiet, status 0; stdout a full disk: one line, status 2. Text is printed as the
    terminal can show it: a file name's undecodable bytes as ``\\xNN``.
    """
    closed = _reopen_standard_descriptors()
    # Matplotlib warns in several lines when $HOME or MPLCONFIGDIR cannot be written (it then caches in a temporary
    # folder it removes at exit): a successful command says nothing on stderr.
    logging.getLogger("matplotlib").setLevel(logging.ERROR)
    out, err = sys.stdout, sys.stderr
    if err is None or 2 in closed:  # nowhere to say anything: the exit status alone tells
        err = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    if out is None or 1 in closed:  # checked before any work: a command that cannot print its result does nothing
        try:
            print("error: standard output is closed (>&-), so the command's result could not be printed; redirect it "
                  "to a file or a pipe instead, e.g. > out.txt", file=err, flush=True)
        except (OSError, ValueError):
            pass
        return 2
    sys.stdout, sys.stderr = guarded = _Stream(out, "stdout"), _Stream(err, "stderr")
    try:
        with signals_as_exceptions():  # (the try is outside: a signal may land as the handlers go in or out)
            return _run(argv)
    except Interrupted as exc:
        return stopped(exc)
    finally:
        sys.stdout, sys.stderr = out, err
        for stream in guarded:  # a library that kept a reference (a logging handler) gets a quiet stream
            stream.retire()


def _reopen_standard_descriptors() -> list[int]:
    """Descriptors 0-2 that were closed when the command started (``>&-``), each now open on the null device:
    else the next file the command opens takes that number, and a child process (nsys) that writes to its
    stdout or stderr would write into it."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
    for fd in closed:
        try:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        except OSError:  # pragma: no cover - no /dev/null: nothing better to do
            pass
    return closed


def _run(argv: Sequence[str] | None) -> int:
    try:
        try:
            args = build_parser().parse_args(argv)
            if working_folder() is None:  # relative paths, and some libraries' own loading, need it
                raise TraceError("the current folder no longer exists (it was deleted or moved); cd into a folder "
                                 "that exists and run the command again")
            status = args.func(args)
        except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        sys.stdout.flush()  # inside the guard: a full disk or a closed pipe is seen here, not at exit
        return status
    except TraceError as exc:
        return _fail(str(exc))
    except OutputLost as exc:
        _silence(exc.stream)
        if exc.name == "stderr" or isinstance(exc.error, BrokenPipeError):
            return 0 if exc.name == "stdout" else 2  # the reader went away (| head): nothing to say
        return _fail(f"cannot write to standard output ({exc.error.strerror or exc.error}); check the free space "
                     "where it goes, or redirect it elsewhere")
    except Interrupted:
        raise
    except OSError as exc:  # the system refused something no check above foresaw: say what, in one line
        return _fail(os_error_text(exc))


class OutputLost(Exception):
    """Writing to stdout or stderr failed (a closed pipe, a full disk): not an error of the input."""

    def __init__(self, name: str, stream, error: OSError) -> None:
        super().__init__(name, error)
        self.name, self.stream, self.error = name, stream, error


class _Stream:
    """``sys.stdout`` / ``sys.stderr`` while a command runs: text made printable (see
    :func:`helpers.paths.terminal_safe`: no name a trace holds can drive the terminal; a character the stream's
    encoding lacks is escaped), and a failed
    write raised as :class:`OutputLost`, so it is told apart from every other OSError."""

    def __init__(self, stream, name: str) -> None:
        self._stream, self._name, self._retired = stream, name, False

    def retire(self) -> None:
        self._retired = True

    def write(self, text: str) -> int:
        text = terminal_safe(text)
        if self._retired:
            try:
                return self._stream.write(text)
            except (OSError, ValueError, UnicodeError):
                return 0
        try:
            try:
                return self._stream.write(text)
            except UnicodeEncodeError:  # a terminal in a narrow encoding (latin-1, ascii)
                enc = getattr(self._stream, "encoding", None) or "ascii"
                return self._stream.write(text.encode(enc, "backslashreplace").decode(enc))
        except (OSError, ValueError) as exc:  # ValueError: the stream was closed
            raise OutputLost(self._name, self._stream, exc if isinstance(exc, OSError) else OSError(str(exc))) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError) as exc:
            if self._retired:
                return
            raise OutputLost(self._name, self._stream, exc if isinstance(exc, OSError) else OSError(str(exc))) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _fail(message: str) -> int:
    text = " ".join(message.split()) or "failed"  # one line, whatever the message held
    try:
        print(f"error: {text}", file=sys.stderr, flush=True)
    except OutputLost as exc:
        _silence(exc.stream)
    return 2


def _silence(stream) -> None:
    """Point a broken stream's descriptor at /dev/null so that Python's exit-time flush raises nothing."""
    try:
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no descriptor (a test's capture): nothing to flush later
        pass
