"""Renderers: text and JSON for ``summary``, ``diagnose`` and ``compare``.

Metrics and the diagnosis return numbers; this module only formats them (nothing here measures).
"""

from __future__ import annotations

import json
import math
import re
import shlex
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from .diagnosis import PATTERNS, Finding, SteadyState
from .paths import printable

#: What a summary of a trace without GPU activity says instead of the GPU figures.
CPU_ONLY_NOTE = "the trace has no GPU activity: GPU figures are not available, host-side figures are"
#: ``summary`` of a trace with no events: no figure is zero, there is none (``diagnose`` names the usual causes).
EMPTY_NOTE = ("the trace holds no events: there are no figures to give; python -m helpers diagnose says what "
              "usually leaves a capture empty")


def clean(obj: Any) -> Any:
    """JSON-safe: NaN -> null, numpy scalars -> Python numbers, text printable (a file name's undecodable
    bytes as ``\\xNN``, not a lone surrogate that strict JSON readers refuse)."""
    if isinstance(obj, str):
        return printable(obj)
    if isinstance(obj, dict):
        return {printable(str(k)): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def to_json(doc: Any) -> str:
    return json.dumps(clean(doc), indent=1)


def json_schema_doc() -> str:
    """The ``diagnose --json`` shape, with the pattern list read from :data:`PATTERNS`."""
    return (
        "diagnose --json prints one object:\n"
        '  {"trace": str, "summary": {...metrics.summary...},\n'
        '   "findings": [{"pattern": str, "cost": float, "summary": str, "evidence": {...}, "fix": str,\n'
        '                 "window": [start_us, end_us] | null, "step_ms": float | null,\n'
        '                 "step_ms_if_fixed": float | null, "if_fixed": str, "ranked_above": str}],\n'
        '   "steady_state": {"source": "markers"|"inferred"|"capture", "steps": int, "capture_us": [a, b],\n'
        '                    "kept_us": [a, b], "kept_share": float, "left_out": [{"start_us", "end_us", "why"}]},\n'
        '   "critical_path": {"step_ms": float, "path_ms_per_step": {cause: ms}, "work_ms_per_step": {cause: ms},\n'
        '                     "step_ms_if_all_fixed": float},\n'
        '   "capture": [{"name": str, "figure": float, "says": str, "capture_instead": str}]}\n'
        "step_ms_if_fixed is the step the critical path predicts with the finding's fix applied (if_fixed says\n"
        "what that is); cost is the share of the step it saves (for gpu_bound, the share the kernels run). Findings\n"
        "are ranked by it; fixes overlap, so costs need not add up (step_ms_if_all_fixed: every fix together).\n"
        "Where two predictions lie within the what-if's error, the share of the step the trace shows for each\n"
        "decides, and ranked_above says so on the finding listed above the larger predicted saving.\n"
        "evidence.gpu_utilization is the GPU busy share (GPU traces); evidence.steps_inferred,\n"
        "on a trace without step markers, says which repeats were taken as its steps (source, period, steps).\n"
        f"pattern is one of {', '.join(PATTERNS)}.\n"
    )


def plural(n: int, word: str, many: str | None = None) -> str:
    """``n`` and the word in the number it takes: ``plural(1, "gap")`` -> "1 gap", ``plural(3, "gap")`` -> "3 gaps"."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def device_line(names: list[str]) -> str:
    """Each distinct device once, with its count: ``2x NVIDIA H200, 1x NVIDIA A100``."""
    counts = Counter(n for n in names if n)
    return ", ".join(f"{c}x {n}" if c > 1 else n for n, c in counts.items())


def summary_text(s: dict[str, Any]) -> str:
    lines = [f"{s['source']}  ({s['format']}, {plural(s['events'], 'event')}, ranks {s['ranks']}, {plural(s['steps'], 'step')})"]
    if s.get("ranks_without_events"):
        silent = s["ranks_without_events"]
        one = len(silent) == 1
        rest = ("no rank's file holds any: there are no figures to give" if len(silent) == len(s["ranks"]) else
                "the figures are of the other ranks")
        lines.append(f"  rank{'' if one else 's'} {', '.join(map(str, silent))} {'has' if one else 'have'} no events: "
                     f"{'its file was' if one else 'their files were'} read and held none; {rest}")
    if s.get("job_world_size"):
        lines.append("  " + part_of_job_text(int(s["job_world_size"]), list(s["ranks"])))
    if s.get("steps_inferred"):
        lines.append(f"  steps: none marked; {steady_text(s['steps_inferred'])}")
    if s["device_names"]:
        # nsys lists the machine's GPUs whether or not the job used them (a gloo job on CPU cores)
        unused = "" if s["has_gpu"] else " (on the machine; this trace did not use it)"
        lines.append(f"  device: {device_line(s['device_names'])}{unused}")
    if not s["events"]:
        lines.append(f"  {EMPTY_NOTE}")
        return "\n".join(lines)
    if s["step_time_ms"] is not None:
        lines.append(f"  {'step time (mean)' if s['steps'] else 'capture (no step markers)'}: {s['step_time_ms']:.3f} ms")
    # without steps the figures are over the whole capture (one window a rank), and say so
    per, of = ("/step", "step time") if s["steps"] else (" in the capture", "the capture")
    if s["has_gpu"]:
        lines.append(f"  GPU utilization:    {s['gpu_utilization']:.1%} of {of}")
        shares = s.get("idle_share_by_cause") or {}
        said = ", ".join(f"{k} {v:.0%}" for k, v in shares.items() if v >= 0.005)
        if said:  # the shares diagnose's costs are: of step time, not of the idle time
            lines.append(f"  GPU idle {sum(shares.values()):.0%} of {of}; by what the host was doing meanwhile "
                         f"(% of {of}, as diagnose's evidence gives them): {said}")
        elif shares:  # idle under half a percent of the step: no cause worth a figure
            lines.append(f"  GPU idle {sum(shares.values()):.0%} of {of}")
        k = s["kernels"]
        lines.append(f"  kernels: {k['per_step']:.0f}{per}, median {k['median_us']:.1f} us, {k['share_under_10us']:.0%} under 10 us")
        for c in s["copies"]:
            lines.append(f"  {c['copy_kind']} {c['host_memory'] or ''} copies: {c['time_per_step_us'] / 1e3:.2f} ms{per} at "
                         f"{c['gb_per_s']:.1f} GB/s, {c['overlap_share']:.0%} overlapped with compute")
        lines.append(f"  syncs: {s['sync']['sync_points_per_step']:.1f}{per}, host blocked "
                     f"{s['sync']['blocked_us_per_step'] / 1e3:.2f} ms{per}")
    else:
        lines.append(f"  {CPU_ONLY_NOTE}")
    lines.append(f"  data wait (the host's own time in the DataLoader or data ranges): {s['data_wait_us_per_step'] / 1e3:.2f} "
                 f"ms{per}, {s['data_wait_share']:.0%} of {of}")
    if "communication" in s:
        c = s["communication"]
        lines.append(f"  communication: {c['collective_us_per_step'] / 1e3:.2f} ms{per}, exposed "
                     f"{c['exposed_us_per_step'] / 1e3:.2f} ms{per} ({c['exposed_share']:.0%}), compute spread across ranks "
                     f"{c['compute_spread']:.0%}")
    return "\n".join(lines)


def steady_text(info: dict[str, Any]) -> str:
    """How the steady state's steps were found, in words."""
    what = {"ranges": "host ranges", "kernels": "kernels", "ops": "PyTorch ops"}.get(info.get("source"), "events")
    period = ", ".join(info.get("period") or [])
    found = f"repeats of {info.get('period_length')} {what} ({period})"
    if info.get("ramp_up_dropped"):  # ``steps`` counts the repeats kept: one more was found
        n = info.get("steps")
        n = n + 1 if isinstance(n, int) else n
        return f"{n} {found}: the first left out as ramp-up, the other {info.get('steps')} taken as the steps"
    return f"{info.get('steps')} {found} taken as the steps"


def steady_state_text(st: SteadyState) -> str:
    """What the figures are taken over, and what was left out and why (empty when that is all of it)."""
    if st.source == "capture" or (st.source == "markers" and st.kept_share >= STEADY_NOTE_BELOW):
        return ""
    what = "step markers" if st.source == "markers" else "repeats found in the capture"
    parts = [f"{(b.end_us - b.start_us) / 1e3:.1f} ms {b.why}" for b in st.left_out]
    return (f"figures over {st.steps} steps ({what}), {st.kept_share:.0%} of the capture"
            + (f"; left out: {'; '.join(parts)}" if parts else ""))


#: Marked steps covering less than this share of the capture get a line saying what was left out.
STEADY_NOTE_BELOW = 0.5


#: Lines of ``diagnose``'s text are wrapped at word boundaries to this width (a kernel name is never cut).
TEXT_WIDTH = 100


def figure_text(v: Any) -> str:
    """An evidence value in words: numbers to three significant digits, a dict as ``key value, ...``."""
    v = clean(v)
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {figure_text(x)}" for k, x in v.items()) or "none"
    if isinstance(v, (list, tuple)):
        return ", ".join(figure_text(x) for x in v) or "none"
    return str(v)


def _wrapped(text: str, indent: str, more: str = "  ") -> list[str]:
    """``text`` as lines of at most :data:`TEXT_WIDTH`, broken only between words."""
    return textwrap.wrap(text, TEXT_WIDTH, initial_indent=indent, subsequent_indent=indent + more,
                         break_long_words=False, break_on_hyphens=False) or [indent]


def _decimals(width_ms: float, least: int, more: int = 0) -> int:
    """Decimals that show about ``1 + more`` significant digits of a window's length: at least ``least``
    (also for a length that is not finite), at most 6."""
    if not math.isfinite(width_ms):
        return least
    return min(max(least, math.ceil(-math.log10(max(width_ms, 1e-6)) - 1e-9) + more), 6)


def window_arg(start_ms: float, end_ms: float) -> str:
    """``START:END`` for ``plot --window`` that covers the window and that the CLI accepts (END > START once
    printed): as many decimals as the window's length needs, the start rounded down and the end up."""
    digits = _decimals(end_ms - start_ms, 1)
    scale = 10 ** digits
    if not (math.isfinite(start_ms) and math.isfinite(end_ms)):
        return f"{start_ms}:{end_ms}"  # no window to round; plot --window refuses it with one line
    a, b = math.floor(start_ms * scale) / scale, math.ceil(end_ms * scale) / scale
    return f"{a:.{digits}f}:{b:.{digits}f}"


def window_text(start_ms: float, end_ms: float) -> str:
    """``START-END ms`` with two decimals, more when the window is shorter than they show (a launch gap of
    8 us is ``0.0040-0.0120 ms``, not ``0.00-0.01 ms``): about two significant digits of its length."""
    digits = _decimals(end_ms - start_ms, 2, more=1)
    return f"{start_ms:.{digits}f}-{end_ms:.{digits}f} ms"


def where_command(source: str | None, start_ms: float, end_ms: float, name: str = "where") -> str | None:
    """The ``plot`` command that draws a finding's window into ``NAME.png`` (never replacing a file: run
    again, it says the file exists), or None when ``source`` is not a file or folder the command could
    read (a capture held only in memory)."""
    if not source or not Path(source).exists():
        return None
    window = window_arg(start_ms, end_ms)
    sep = "=" if window.startswith("-") else " "  # before the first step: argparse reads "--window -3.0:1.0" as two options
    return (f"python -m helpers plot {shlex.quote(str(source))} --window{sep}{window} "
            f"-o {shlex.quote(name + '.png')}")


def finding_cost_text(f: Finding) -> str:
    """What a finding costs, in words (empty for a capture finding): ``its fix saves about 83% of the step``."""
    if f.pattern == "capture_window":
        return ""
    if f.pattern == "gpu_bound":
        return f"the GPU's kernels run {f.cost:.0%} of the step"
    return f"its fix saves about {f.cost:.0%} of the step"


def what_if_text(f: Finding) -> str:
    """The finding's what-if replay in words, or empty: ``what if: step 23.7 ms -> about 4.08 ms if ...``."""
    if getattr(f, "step_ms", None) and getattr(f, "step_ms_if_fixed", None) is not None and getattr(f, "if_fixed", ""):
        return f"what if: step {_duration(f.step_ms)} -> about {_duration(f.step_ms_if_fixed)} if {f.if_fixed}"
    return ""


def _duration(ms: float) -> str:
    """Milliseconds in words to three digits, in seconds from a second on: a 50 s step read '5.02e+04 ms'."""
    return f"{ms:.3g} ms" if abs(ms) < 999.5 else f"{ms / 1e3:.3g} s"


def diagnose_text(path: str, findings: list[Finding], has_gpu: bool, source: str | None = None,
                  origin_us: float = 0.0) -> str:
    """Findings as numbered text; the plot hint names the trace the user gave. A
    :class:`helpers.diagnosis.Diagnosis` also gets a line on its steady-state step.

    ``path`` heads the text (a label is fine); ``source`` is the trace's file for the ``where`` hint's
    command (default: ``path``), which is left out when it is no file. Windows are printed in ms on the
    timeline's axis, from ``origin_us`` (:func:`helpers.plots.time_origin_us`: the first step's start, of the steady state's steps where none is marked), as ``plot`` draws them.
    """
    source = path if source is None else source
    steady = steady_state_text(findings.steady) if hasattr(findings, "steady") else ""
    if not findings:
        return (f"{path}: nothing stands out" + ("" if has_gpu else " (CPU-only trace: host-side checks only)")
                + (f"\n   {steady}" if steady else ""))
    lines = _wrapped(steady, "   ") if steady else []
    sg = getattr(findings, "signals", {}) or {}
    for issue in getattr(findings, "capture", []) or []:
        lines += _wrapped(f"capture: {issue.says}; capture instead: {issue.capture_instead}", "   ")
    for i, f in enumerate(findings, 1):
        cost = finding_cost_text(f)
        head = f"{i}. {f.pattern}" + (f" ({cost})" if cost else "")
        lines += [head, *_wrapped(f.summary, "   ")]
        if what_if_text(f):
            lines += _wrapped(what_if_text(f), "   ")
        if getattr(f, "ranked_above", ""):  # a near-tie the trace's own figure decided: say so beside the numbers
            lines += _wrapped(f"order: {f.ranked_above}", "   ")
        for k, v in f.evidence.items():
            if k == "steps_inferred" and isinstance(v, dict):
                lines += _wrapped(f"- {k}: {steady_text(v)}", "     ")
            elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):  # e.g. top_kernels: one a line
                lines.append(f"     - {k}:")
                for x in v:
                    if {"name", "total_us", "share"} <= set(x):  # a kernel: its whole name, never cut
                        lines.append(f"         {x['share']:.0%} of kernel time, {x['total_us'] / 1e3:.3g} ms: {x['name']}")
                    else:
                        lines += _wrapped(figure_text(x), "         ")
            else:
                lines += _wrapped(f"- {k}: {figure_text(v)}", "     ")
        if f.window:
            a, b = (f.window[0] - origin_us) / 1e3, (f.window[1] - origin_us) / 1e3
            cmd = where_command(source, a, b, f.pattern)
            lines.append(f"   where: {window_text(a, b)}" + (", drawn by:" if cmd else ""))
            if cmd:  # on a line of its own, never wrapped: it must paste into a shell as printed
                lines.append(f"     {cmd}")
        lines += _wrapped(f"fix: {f.fix}", "   ")
    both = sg.get("step_ms_if_all_fixed")
    if len(findings) > 1 and isinstance(both, float) and math.isfinite(both):
        lines += _wrapped(f"all of these fixed together: step {sg['step_ms']:.3g} ms -> about {both:.3g} ms (the fixes "
                          "overlap: their savings do not add up)", "")
    return "\n".join(lines)


def number(v: Any) -> str:
    """A figure to three significant digits; blank for missing."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    if isinstance(v, float) and 0 < abs(v) < 1 and not v.is_integer():
        return f"{v:.3g}"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def change_text(before: float | None, after: float | None, better: str, noise: float | None = None) -> str:
    """How a figure moved, in words: ``2.00x less (better)``, ``2 -> 0 (better)``, ``same``; with a noise
    band (``noise``: the half-width a difference must leave), ``1.02x less (within noise)`` inside it."""
    if before is None or after is None or math.isnan(before) or math.isnan(after):
        return ""
    if before == after:
        return "same"
    if noise is not None and math.isfinite(noise) and abs(after - before) <= noise:
        ratio = after / before if before else float("nan")
        moved = f"{1 / ratio:.2f}x less" if 0 < ratio < 1 else f"{ratio:.2f}x more" if ratio >= 1 else "moved"
        return f"{moved} (within noise: +/- {number(noise)})"
    improved = (after < before) == (better == "lower")
    word = "better" if improved else "worse"
    if before == 0 or after == 0:  # a ratio to or from zero says nothing: show the move
        return f"{number(before)} -> {number(after)} ({word})"
    ratio = after / before
    if ratio < 1:
        return f"{1 / ratio:.2f}x less ({word})"
    return f"{ratio:.2f}x more ({word})"


def timing_text(bands: list[dict[str, float]], verdicts: list[str], busy_spread: float) -> str:
    """Repeated before/after timings in words, each round with its noise band, then what they allow one to say.

    ``bands`` and ``verdicts`` are :func:`helpers.metrics.step_time_band` and :func:`helpers.metrics.timing_verdict`
    of each round; ``busy_spread`` is the step spread above which a run is too noisy (``thresholds.NOISE_BUSY_SPREAD``).
    Noise decides, and the text says so, when a run was too noisy or the rounds disagree.
    """
    from .metrics.report import slack_ms
    from .thresholds import SPEED_SLOWER_FLOOR

    lines = []
    for i, (b, v) in enumerate(zip(bands, verdicts), 1):
        # the slack the verdict used (the band, at least SPEED_SLOWER_FLOOR of the step), as compare and the checks say it
        slack = slack_ms(b["band_ms"], b["before_ms"]) if math.isfinite(b["band_ms"]) else float("nan")
        band = (f"noise band +/- {slack:.3g} ms" + (f" (the runs' spread gives {b['band_ms']:.3g}; at least "
                                                   f"{SPEED_SLOWER_FLOOR:.0%} of the step)"
                                                   if slack > b["band_ms"] else "")
                if math.isfinite(slack) else "no noise band")
        lines.append(f"round {i}: step {b['before_ms']:.3g} -> {b['after_ms']:.3g} ms ({band}; steps spread "
                     f"{b['before_spread']:.0%} / {b['after_spread']:.0%}): {v}")
    kinds = set(verdicts)
    if not verdicts:
        say = "no timing taken"
    elif "too noisy" in kinds:
        say = (f"noise decides: a run's steps spread more than {busy_spread:.0%}, so the machine was too busy to judge "
               "the step time; re-run when it is quiet. The shares and counts above do not depend on its speed.")
    elif "unknown" in kinds:
        say = "too few steps for a noise band: record more steps (STEPS) before reading the step time"
    elif len(kinds) > 1:
        say = (f"noise decides: the rounds disagree ({', '.join(verdicts)}), so the step time moved with the machine, "
               "not only with the change; re-run with more rounds or on a quieter machine")
    elif kinds == {"within noise"}:
        say = "no change beyond the noise band in any round: the step time says nothing either way"
    else:
        say = f"{verdicts[0]} in every round, beyond the noise band"
    return "\n".join(lines + [f"timing: {say}"])


def compare_text(table: pd.DataFrame) -> str:
    rows = [(r["metric"], number(r["before"]), number(r["after"]),
             change_text(r["before"], r["after"], r["better"], r.get("noise")))
            for _, r in table.iterrows()]
    out = pd.DataFrame(rows, columns=["metric", "before", "after", "change"])
    return out.to_string(index=False)


#: Namespace qualifiers a C++ kernel name repeats (``at::native::``, ``(anonymous namespace)::``, ``std::``).
_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|\b[A-Za-z_]\w*)::(?=[A-Za-z_(~])")


def plain_kernel_name(name: str) -> str:
    """A C++ kernel name without what every such name repeats: the leading ``void``, namespace qualifiers and the
    parameter list after the template (``void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...>(
    at::native::(anonymous namespace)::TensorListMetadata<2>, ...)`` -> ``multi_tensor_apply_kernel<...>``), so
    what tells two kernels apart (the template's functor, often at its end) is what a cut keeps. Other names
    (``nvjet_sm90_...``, ``aten::mm``, any name without a template or ``void``) come back as they are."""
    name = str(name).strip()
    if not (name.startswith("void ") or ("<" in name and "::" in name)):  # not a C++ kernel: aten::mm stays
        return name
    name = name.removeprefix("void ")
    depth = 0
    for i, ch in enumerate(name):  # the first '(' outside every <...> opens the parameter list
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0 and i > 0 and not name.startswith("(anonymous namespace)", i):
            name = name[:i]
            break
    return _QUALIFIER.sub("", name).strip() or name


def cut_name(name: str, width: int = 70) -> str:
    """A name in at most ``width`` characters: a long C++ kernel name first without its repeated parts
    (:func:`plain_kernel_name`), then cut in the middle, its start and end kept."""
    name = str(name)
    if len(name) <= width:
        return name
    name = plain_kernel_name(name)
    if len(name) <= width:
        return name
    head = (width - 3) * 2 // 3
    return name[:head] + "..." + name[len(name) - (width - 3 - head):]


def verdict_text(step: dict[str, Any], steps: tuple[int, int]) -> str:
    """The step time's verdict of a before/after in words, with its noise band and where the band comes from, and,
    where both captures measured the machine's pace, whether a slower machine explains a slower step: the figures
    are :func:`helpers.metrics.pace.judge_step`'s, the ones every fix check judges a step by."""
    b, a, v = step["before_ms"], step["after_ms"], step["verdict"]
    moved = f"{number(b)} -> {number(a)} ms a step"
    if a and b and a > 0 and b > 0:
        moved += f" ({b / a:.2f}x less)" if a < b else f" ({a / b:.2f}x more)"
    j = step.get("judged") or {}
    if "slack_ms" not in step:  # a step dict without the slack (an older caller): the band alone
        step = {**step, "slack_ms": step["band_ms"]}
    source = _slack_source(step, steps)
    slack = number(step["slack_ms"])
    if j.get("explained"):
        return (f"slower, within the machine's own slowdown: {moved}; the machine ran {j['factor']:.2f}x slower during the "
                f"second capture ({slowdown_words(j.get('drift', 1.0), j['pace'], 'the second')}): the first run would "
                f"have taken {number(j['then_ms'])} ms a step then, and {number(a)} is inside its +/- "
                f"{number(j['allowed_ms'])} ms band, so the step itself is not shown slower")
    if v == "within noise":
        return f"within noise: {moved}, inside the +/- {slack} ms band ({source})"
    if v in ("faster", "slower"):
        text = f"{v}: {moved}, beyond the +/- {slack} ms noise band ({source})"
        if v == "slower" and j.get("factor", 1.0) > 1:
            return (text + f", and beyond the machine's own slowdown ({j['factor']:.2f}x, "
                    f"{slowdown_words(j.get('drift', 1.0), j['pace'], 'the second')}: the first run would have taken "
                    f"{number(j['then_ms'])} ms a step then, +/- {number(j['allowed_ms'])})")
        if v == "slower" and j and not math.isfinite(j["pace"]["ratio"]):  # files from disk: no probe to read
            return text + (", and no pace probe says whether the machine itself ran slower during the second capture "
                           "(helpers.capture records one for each capture in the session that makes it; a trace read "
                           "from a file carries none)")
        return text + (pace_words(j["pace"], "the second capture", "the second") if v == "slower" and j else "")
    if v == "too noisy":
        return (f"too noisy to tell: {moved}; a run's steps spread more than the machine allows for a verdict "
                f"(spread {step['before_spread']:.0%} and {step['after_spread']:.0%}): measure again on a quieter machine")
    text = f"no noise band: {moved}; a band needs at least {_min_steps()} steps a side ({steps[0]} and {steps[1]} here)"
    if j.get("slower"):  # slower than any noise measured here: what a check would call slower
        text += f"; slower by more than {slack} ms ({source}), beyond any noise measured here"
    return text


def slowdown_words(drift: float, pace: dict[str, float], yours: str = "yours") -> str:
    """The machine's measured slowdown in words: the same ops' drift and the pace probe's figures
    (:func:`helpers.metrics.pace.judge_step`); ``yours`` names the second capture."""
    parts = []
    if drift > 1:
        parts.append(f"the ops both loops run took {drift:.2f}x longer")
    if math.isfinite(pace["ratio"]):
        parts.append(pace_figures(pace, yours))
    return "; ".join(parts)


def pace_figures(pace: dict[str, float], yours: str = "yours") -> str:
    """The pace probe's figures of :func:`helpers.metrics.pace.machine_pace` in words."""
    words = (f"helpers.capture's pace probe {pace['before_ms']:.2f} -> {pace['after_ms']:.2f} ms a run, the slower "
             f"end of the first capture against the faster end of {yours}: {pace['ratio']:.2f}x")
    if pace["applied"] > 1 and pace["gpu_share"] > 0:
        words += (f", applied to the {1 - pace['gpu_share']:.0%} of the step the GPU sat idle: "
                  f"{pace['applied']:.2f}x")
    return words


def pace_words(pace: dict[str, float], during: str = "your capture", yours: str = "yours") -> str:
    """The pace probe's figures beside a plain verdict, where both captures have them: the machine was measured
    no slower (beyond the probe's own noise, ``thresholds.PACE_MIN_RATIO``) during the second capture
    (``during``), or slower but on a step that waits on the GPU."""
    from .thresholds import PACE_MIN_RATIO

    if not math.isfinite(pace["ratio"]):
        return ""
    if pace["ratio"] > PACE_MIN_RATIO:  # slower, but the step waits on a GPU the probe cannot see
        return (f", and the machine's host ran slower during {during} ({pace_figures(pace, yours)}) but the GPU was busy "
                f"{pace['gpu_share']:.0%} of the step: a slower host does not explain a step that waits on the GPU")
    return (f", and the machine was no slower during {during} beyond the probe's own noise "
            f"({pace_figures(pace, yours)}; up to {PACE_MIN_RATIO:g}x is noise)")


def _slack_source(step: dict[str, Any], steps: tuple[int, int]) -> str:
    """Where a before/after's slack comes from: the runs' spread, or the floor every check allows."""
    from .thresholds import SPEED_NO_BAND_REL, SPEED_SLOWER_FLOOR

    band, slack = step["band_ms"], step["slack_ms"]
    source = f"the runs' own step-to-step spread, {steps[0]} and {steps[1]} steps"
    if not math.isfinite(band):
        return f"{SPEED_NO_BAND_REL:.0%} of the step: too few steps for a band, {steps[0]} and {steps[1]}"
    if slack > band:
        return (f"{SPEED_SLOWER_FLOOR:.0%} of the step, wider than the +/- {number(band)} ms from {source}: the "
                "profiler's own overhead moves a step that much from capture to capture")
    return source


def _min_steps() -> int:
    from .thresholds import NOISE_MIN_STEPS

    return int(NOISE_MIN_STEPS)


def diff_text(diff: Any, top: int = 6) -> str:
    """:func:`helpers.diff.work_diff` in words: the verdict, then the operators whose time changed most."""
    lines = ["verdict: " + verdict_text(diff.step, diff.steps)]
    changes = diff.changes[:top]
    if not changes:
        lines.append("no operator or kernel changed beyond its own noise band (operators matched through the call tree)")
        return "\n".join(lines)
    lines.append("what changed most (operators matched through the call tree; host: the op's own time, gpu: the "
                 "work launched inside it; ms a step):")
    for i, c in enumerate(changes, 1):
        band = f"band +/- {number(c['band_ms'])}" if math.isfinite(c["band_ms"]) else "no band"
        calls = "" if c["calls_before"] == c["calls_after"] else f", calls {number(c['calls_before'])} -> {number(c['calls_after'])}"
        lines += _wrapped(f"{i}. {c['status']}: {c['path']} ({c['kind']}): {c['measure']} {number(c['before_ms'])} -> "
                          f"{number(c['after_ms'])} ms ({c['delta_ms']:+.3g}, {band}{calls})", "  ", "     ")
        for label, ks in (("kernels before", c["kernels_before"]), ("kernels after", c["kernels_after"])):
            if ks and (c["kernels_before"] != c["kernels_after"]):
                lines += _wrapped(f"{label}: " + "; ".join(f"{cut_name(k, 70)} {number(v)} ms"
                                                           for k, v in ks), "     ", "  ")
    return "\n".join(lines)


__all__ = ["CPU_ONLY_NOTE", "change_text", "clean", "compare_text", "device_line", "diagnose_text", "figure_text", "json_schema_doc",
           "number", "steady_state_text", "steady_text", "summary_text", "timing_text", "to_json", "where_command", "window_arg",
           "window_text", "verdict_text", "diff_text"]


def part_of_job_text(declared: int, held: list[int]) -> str:
    """The line a folder holding only part of its job's ranks carries wherever the job's figures are shown (the
    traces give the job's size: ``distributed.world_size``)."""
    shown = ", ".join(str(r) for r in held[:12]) + (", ..." if len(held) > 12 else "")
    return (f"note: the traces say their job had {declared} ranks; this folder holds {len(held)} (rank"
            f"{'s' if len(held) != 1 else ''} {shown}): every figure below is of these only, and a rank not here "
            "may be the one the others wait for")


def job_text(report: dict[str, Any], top: int = 8) -> str:
    """The cross-rank report of :func:`helpers.jobs.analyse_job`: the job's figures, the stragglers,
    and the ranks that wait most and compute most (the whole table is in ``--json``)."""
    r = report
    lines = [f"{r.get('folder', 'job')}: {r['ranks']} ranks, {r['events']:,} events"]
    if r.get("job_world_size"):
        lines.append("  " + part_of_job_text(int(r["job_world_size"]), sorted(int(x) for x in r["per_rank"]["rank"])))
    if r.get("has_collectives"):
        lines.append(f"  communication: {r['collective_ms_per_step']:.2f} ms per step, {r['exposed_ms_per_step']:.2f} ms of it "
                     f"exposed ({r['comm_exposed_share']:.0%} of step time)")
    else:
        lines.append("  communication: no collectives recorded")
    if "slowest_rank" in r:
        lines.append(f"  compute spread {r['compute_spread']:.0%}: slowest rank {r['slowest_rank']}, fastest {r['fastest_rank']}")
    lines.append("  stragglers: " + (", ".join(str(x) for x in r["stragglers"][:20]) + (" ..." if len(r["stragglers"]) > 20 else "")
                                    if r["stragglers"] else "none"))
    lines.append("  job findings: " + (", ".join(r["findings"]) or "nothing stands out across ranks"))
    pr: pd.DataFrame = r["per_rank"].assign(top_finding=lambda t: t["top_finding"].replace("", "-"))
    if "diagnosed" in pr:  # a job of many ranks: the others gave their figures only
        pr.loc[~pr["diagnosed"].astype(bool), "top_finding"] = "(figures only)"
    if len(pr):
        cols = ["rank", "steps", "step_ms", "compute_ms", "collective_ms", "exposed_ms", "top_finding"]
        for title, order in (("most compute per step", "compute_ms"), ("most exposed communication", "exposed_ms")):
            part = pr.sort_values([order, "rank"], ascending=[False, True]).head(top)[cols]
            lines += [f"  {title} (top {len(part)} of {len(pr)}):",
                      "    " + part.to_string(index=False, float_format=lambda v: f"{v:.2f}").replace("\n", "\n    ")]
        found = pr.loc[pr["top_finding"] != "(figures only)", "top_finding"].replace("-", "nothing").value_counts()
        diagnosed = int(found.sum())
        of = (f" (the {diagnosed} ranks diagnosed on their own: the stragglers, the ranks computing most and least and "
              "waiting most, and an even spread of the rest)") if diagnosed < len(pr) else ""
        lines.append(f"  each rank's own top finding{of}: " + ", ".join(f"{k} x{v}" for k, v in found.items()))
    return "\n".join(lines)


def doctor_text(findings: list[Any]) -> str:
    """``python -m helpers doctor``'s report: one line per finding (``helpers.doctor.Finding``), its fix under it."""
    marks = {"ok": "ok  ", "note": "note", "warn": "WARN", "fail": "FAIL"}
    lines = []
    for f in findings:
        lines.append(f"{marks.get(f.status, f.status)}  {f.name:<13} {f.detail}")
        if f.fix:
            lines.append(f"{'':19}-> {f.fix}")
    worst = {f.status for f in findings}
    verdict = ("the labs cannot start here: fix the FAIL lines first" if "fail" in worst
               else "ready; the WARN lines are parts of the course that will not run live" if "warn" in worst
               else "ready")
    return "\n".join([*lines, "", verdict])
