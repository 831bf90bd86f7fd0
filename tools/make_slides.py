"""Build offline slides from the solution notebooks, for an instructor to present a lab, and the concept deck.

    python tools/make_slides.py                    # every lab -> build/slides/NN_name.slides.html
    python tools/make_slides.py --execute          # run each notebook first, so plots and figures show
    python tools/make_slides.py --out DIR 02 05    # some labs, into DIR (refuses to overwrite: --force)
    python tools/make_slides.py deck               # the concept deck -> build/slides/concepts.slides.html

The concept deck (execution model, streams, CUPTI/NVTX, the lanes, DDP buckets, CUDA Graphs, the
GPU-bound part) is built from docs/instructors/deck.md with every figure read from data/ at build time;
it is one HTML file with its CSS, script and drawings inline, so it shows with no network.

Each ``#``/``##`` heading starts a slide, and so does each ``###`` heading (an exercise; marked a sub-slide), and
everything between them follows on the same slide; the notebooks themselves are not changed (the
slide metadata is set on a copy). Every page is one HTML file with its CSS and script inline and its
figures as data: URIs, so it shows with no network (arrow keys to move, N notes, P print). ``--execute`` runs the copy with the machine's track, as a learner's
kernel would (a minute or two on a CPU); without it the slides show the code and text only.
"""

from __future__ import annotations

import argparse
import copy
import html
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def slide_type(cell: dict) -> str:
    """``slide`` at a top or section heading, ``subslide`` at an exercise heading, else ``-`` (same slide)."""
    if cell["cell_type"] != "markdown":
        return "-"
    first = "".join(cell["source"]).lstrip().split("\n", 1)[0]
    if first.startswith(("# ", "## ")):
        return "slide"
    if first.startswith("### "):
        return "subslide"
    return "-"


def as_slides(nb: dict) -> dict:
    """A copy of ``nb`` whose cells carry reveal.js slide types."""
    out = copy.deepcopy(nb)
    for cell in out["cells"]:
        cell.setdefault("metadata", {})["slideshow"] = {"slide_type": slide_type(cell)}
    return out


def _output_html(out: dict) -> str:
    """One cell output as HTML: images inline (data: URIs), tables as pandas wrote them, the rest as text."""
    kind = out.get("output_type")
    if kind == "stream":
        return f'<pre class="out">{_esc("".join(out.get("text", "")))}</pre>'
    if kind == "error":
        return f'<pre class="out err">{_esc(out.get("ename", ""))}: {_esc(out.get("evalue", ""))}</pre>'
    data = out.get("data", {})
    if "image/png" in data:
        png = "".join(data["image/png"]).replace("\n", "")
        return f'<img class="fig" alt="figure" src="data:image/png;base64,{png}">'
    if "image/svg+xml" in data:
        return "".join(data["image/svg+xml"])
    html_text = "".join(data.get("text/html", ""))
    if html_text and "<script" not in html_text and "http" not in html_text:
        return f'<div class="out">{html_text}</div>'
    if "text/plain" in data:
        return f'<pre class="out">{_esc("".join(data["text/plain"]))}</pre>'
    return ""


def render_notebook(nb: dict, title: str) -> str:
    """A notebook (with slide types set by :func:`as_slides`) as one offline HTML page, in the deck's look:
    a ``slide``/``subslide`` cell starts a section, the cells after it follow on the same one."""
    import mistune

    md = mistune.create_markdown(escape=False, plugins=["table"])
    sections: list[list[str]] = []
    for cell in nb["cells"]:
        kind = cell["metadata"].get("slideshow", {}).get("slide_type", "-")
        if kind in ("slide", "subslide") or not sections:
            sections.append([])
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            sections[-1].append(md(source))
        elif cell["cell_type"] == "code" and source.strip():
            sections[-1].append(f'<pre class="code"><code>{_esc(source)}</code></pre>')
            sections[-1].extend(_output_html(o) for o in cell.get("outputs", []))
    return _page(title, "".join(f"<section>{''.join(parts)}</section>" for parts in sections))


def build(notebook: Path, out_dir: Path, execute: bool = False, force: bool = False, timeout_s: int = 900) -> Path:
    import nbformat

    target = out_dir / f"{notebook.stem}.slides.html"
    if target.exists() or target.is_symlink():
        _write(target, None, force)  # said before a long --execute, not after it
    nb = nbformat.from_dict(as_slides(nbformat.read(notebook, as_version=4)))
    if execute:
        from nbclient import NotebookClient

        NotebookClient(nb, timeout=timeout_s, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(notebook.parent)}}).execute()
    return _write(target, render_notebook(nb, notebook.stem.replace("_", " ")), force)


def _write(target: Path, text: str | None, force: bool) -> Path:
    """``text`` into ``target`` as the toolkit writes every output (helpers.outputs: never through a symlink,
    never over a file without ``force``); with ``text`` None, only whether it may be written."""
    from helpers.outputs import check_output, write_output

    if text is None:
        return check_output(target, force)
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_output(target, lambda fh: fh.write(text.encode("utf-8")), force=force)


# --- the concept deck: one self-contained HTML file, no network -----------------------------------
DECK_SOURCE = ROOT / "docs" / "instructors" / "deck.md"
DECK_NAME = "concepts.slides.html"


def _entry(workload: str, variant: str, tag: str) -> dict:
    from helpers import course

    return course.entry(workload, variant, tag)


def deck_numbers() -> dict[str, str]:
    """Every figure the deck quotes, read from data/ when the deck is built (``{{n:KEY}}`` in the source)."""
    from helpers import course
    from helpers.checks.lab08 import ncu_long

    ms = lambda v: f"{v:.1f} ms"  # noqa: E731
    pct = lambda v: f"{v:.0%}" if v >= 0.1 else f"{v:.1%}"  # noqa: E731
    lo_b, lo_g = _entry("launch_overhead", "broken", "h200"), _entry("launch_overhead", "graphs", "h200")
    ss_b, ss_f = _entry("sync_stall", "broken", "h200"), _entry("sync_stall", "fixed", "h200")
    measured = json.loads((course.DATA / "gpu_bound__h200.measure.json").read_text())
    gb = measured["variants"]
    metrics = {v: json.loads((course.DATA / "nsight" / f"gpu_bound__{v}__h200.gpumetrics.json").read_text())["metrics"]
               for v in ("fp32", "bf16")}

    def ncu(name: str, metric: str) -> tuple[float, str]:
        t = ncu_long(course.DATA / "nsight" / f"gpu_bound__fp32__h200.{name}.ncu.csv")
        row = t[t["metric"] == metric].iloc[0]
        return float(row["value"]), str(row["unit"])

    def ncu_text(name: str, metric: str) -> str:
        value, unit = ncu(name, metric)
        return f"{value:.1f}%" if unit == "%" else f"{value:g} {unit.replace('Ghz', 'GHz')}"

    out = {
        "lo_broken_ms": ms(lo_b["step_ms"]), "lo_broken_profiled_ms": ms(lo_b["profiled_step_ms"]),
        "lo_graphs_ms": ms(lo_g["step_ms"]), "lo_speedup": f"{lo_b['step_ms'] / lo_g['step_ms']:.1f}x",
        "lo_broken_busy": pct(lo_b["gpu_utilization"]), "lo_graphs_busy": pct(lo_g["gpu_utilization"]),
        "ss_broken_ms": ms(ss_b["step_ms"]), "ss_fixed_ms": ms(ss_f["step_ms"]),
        "ss_fixed_profiled_ms": ms(ss_f["profiled_step_ms"]),
        "comm_manual_ms": ms(_entry("communication", "manual", "cpu")["step_ms"]),
        "comm_ddp_ms": ms(_entry("communication", "ddp", "cpu")["step_ms"]),
        "gb_date": measured["date"], "gb_fp32_busy": pct(gb["fp32"]["gpu_utilization"]),
        "gb_compile_cold_s": f"{gb['compile']['cold_two_steps_s']:.1f} s",
        "gm_fp32_tensor": f"{metrics['fp32']['Tensor Active [Throughput %]']:.1f}%",
        "gm_bf16_tensor": f"{metrics['bf16']['Tensor Active [Throughput %]']:.1f}%",
        "gm_fp32_gr": f"{metrics['fp32']['GR Active [Throughput %]']:.1f}%",
        "gm_bf16_gr": f"{metrics['bf16']['GR Active [Throughput %]']:.1f}%",
        "ncu_gemm_l1": ncu_text("gemm", "L1/TEX Cache Throughput"), "ncu_gemm_dram": ncu_text("gemm", "DRAM Throughput"),
        "ncu_gemm_sm": ncu_text("gemm", "Compute (SM) Throughput"), "ncu_gemm_occ": ncu_text("gemm", "Achieved Occupancy"),
        "ncu_gemm_ms": ncu_text("gemm", "Duration"), "ncu_gemm_ghz": ncu_text("gemm", "SM Frequency"),
        "ncu_gemm_free_ms": ncu_text("gemm_noclock", "Duration"), "ncu_gemm_free_ghz": ncu_text("gemm_noclock", "SM Frequency"),
        "ncu_ln_mem": ncu_text("layernorm", "Memory Throughput"), "ncu_ln_sm": ncu_text("layernorm", "Compute (SM) Throughput"),
    }
    for v in ("fp32", "tf32", "bf16", "fp16", "compile", "compile_ro"):
        out[f"gb_{v}_ms"] = ms(gb[v]["step_ms"])
    return out


# A small palette shared by the drawings (the course's timeline colours are matplotlib's defaults).
_C = {"host": "#4c78a8", "api": "#9ecae9", "kernel": "#54a24b", "copy": "#e45756", "sync": "#f58518",
      "range": "#b279a2", "idle": "#ffffff", "comm": "#eeca3b", "text": "#222222", "grid": "#dddddd"}


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def lanes_svg(lanes: list[tuple[str, list[tuple[float, float, str, str]]]], arrows: list[tuple[int, float, int, float]] = (),
              width: int = 900, label_w: int = 170, lane_h: int = 34, span: float = 100.0, caption: str = "") -> str:
    """An SVG of timeline lanes: each lane is ``(label, [(start, length, text, colour key), ...])`` on a 0..span
    axis; ``arrows`` join ``(lane, x)`` to ``(lane, x)`` (a launch to its kernel)."""
    scale = (width - label_w - 10) / span
    height = lane_h * len(lanes) + (26 if caption else 8)
    parts = [f'<svg viewBox="0 0 {width} {height}" class="fig" role="img">',
             '<defs><marker id="arr" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
             f'<path d="M0,0 L8,4 L0,8 z" fill="{_C["text"]}"/></marker></defs>']
    for i, (label, boxes) in enumerate(lanes):
        y = i * lane_h + 4
        parts.append(f'<rect x="{label_w}" y="{y}" width="{width - label_w - 10}" height="{lane_h - 8}" fill="#f7f7f7" '
                     f'stroke="{_C["grid"]}"/>')
        parts.append(f'<text x="{label_w - 8}" y="{y + lane_h / 2}" text-anchor="end" font-size="14" fill="{_C["text"]}">'
                     f'{_esc(label)}</text>')
        for start, length, text, colour in boxes:
            x, w = label_w + start * scale, max(length * scale, 1.5)
            parts.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{lane_h - 12}" rx="2" '
                         f'fill="{_C.get(colour, colour)}" stroke="#555" stroke-width="0.5"/>')
            if text and w > 7 * len(text):
                parts.append(f'<text x="{x + w / 2:.1f}" y="{y + lane_h / 2 + 1}" text-anchor="middle" font-size="12" '
                             f'fill="{"#555" if colour == "idle" else "#fff"}">{_esc(text)}</text>')
    for a_lane, a_x, b_lane, b_x in arrows:
        x1, x2 = label_w + a_x * scale, label_w + b_x * scale
        y1, y2 = a_lane * lane_h + lane_h - 6, b_lane * lane_h + 8
        parts.append(f'<line x1="{x1:.1f}" y1="{y1}" x2="{x2:.1f}" y2="{y2}" stroke="{_C["text"]}" stroke-width="1" '
                     'marker-end="url(#arr)" opacity="0.6"/>')
    if caption:
        parts.append(f'<text x="{label_w}" y="{height - 8}" font-size="13" fill="#555">{_esc(caption)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _fig_execution() -> str:
    launches = [(2 + 4 * k, 2.5, "", "api") for k in range(5)]
    kernels = [(6 + 9 * k, 8.5, f"k{k + 1}", "kernel") for k in range(5)]
    host = [(0, 22, "forward, backward", "host"), (22, 30, "waits", "idle"), (52, 6, "", "host"),
            (58, 22, "prepare next batch", "host"), (80, 20, "next step", "host")]
    api = [*launches, (22, 30, "cudaStreamSynchronize", "sync"), (82, 2.5, "", "api"), (86, 2.5, "", "api")]
    gpu = [*kernels, (86, 9, "k1", "kernel")]
    arrows = [(1, 3 + 4 * k, 2, 6 + 9 * k) for k in range(5)]
    return lanes_svg([("host (Python)", host), ("CUDA API", api), ("GPU stream", gpu)], arrows,
                     caption="the host queues k1-k5 and runs ahead; .item() waits; then the GPU idles while the host works")


def _fig_streams() -> str:
    compute = [(0, 18, "compute", "kernel"), (30, 18, "compute", "kernel"), (60, 18, "compute", "kernel")]
    copies = [(18, 12, "copy", "copy"), (48, 12, "copy", "copy"), (78, 12, "copy", "copy")]
    union = [(0, 90, "busy: kernels, copies and memsets on all streams", "#7f7f7f")]
    return lanes_svg([("stream 7", compute), ("stream 13", copies), ("GPU busy (union)", union)],
                     caption="each stream's lane is half white; the GPU is busy throughout")


def _fig_cupti() -> str:
    boxes = [(20, 40, 250, 'with annotate("forward"): ...', _C["host"]),
             (20, 110, 250, "NVTX range + record_function", _C["range"]),
             (20, 180, 250, "CUDA runtime: cudaLaunchKernel", _C["api"]),
             (320, 180, 220, "GPU: kernels, copies, memsets", _C["kernel"]),
             (590, 110, 300, "CUPTI: API callbacks, activity records", "#6f6f6f"),
             (590, 30, 145, "torch.profiler", _C["sync"]), (745, 30, 145, "Nsight Systems", _C["sync"])]
    parts = ['<svg viewBox="0 0 900 250" class="fig" role="img">',
             f'<defs><marker id="arr2" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto"><path d="M0,0 L8,4 '
             f'L0,8 z" fill="{_C["text"]}"/></marker></defs>']
    for x, y, w, text, colour in boxes:
        parts.append(f'<rect x="{x}" y="{y}" width="{w}" height="44" rx="6" fill="{colour}"/>'
                     f'<text x="{x + w / 2}" y="{y + 27}" text-anchor="middle" font-size="13" fill="#fff">{_esc(text)}</text>')
    for x1, y1, x2, y2 in [(145, 84, 145, 110), (145, 154, 145, 180), (270, 202, 320, 202), (270, 132, 590, 132),
                           (270, 196, 590, 146), (540, 196, 590, 150), (662, 110, 662, 74), (818, 110, 818, 74)]:
        parts.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{_C["text"]}" marker-end="url(#arr2)"/>')
    parts.append("</svg>")
    return "".join(parts)


def _fig_graphs() -> str:
    eager_api = [(1.5 + 3 * k, 2.2, "", "api") for k in range(30)]
    eager_gpu = [(3 + 3 * k, 0.6, "", "kernel") for k in range(30)]
    graph_api = [(1.5, 4, "cudaGraphLaunch", "api")]
    graph_gpu = [(6 + 0.7 * k, 0.6, "", "kernel") for k in range(30)]
    return lanes_svg([("eager: CUDA API", eager_api), ("eager: GPU", eager_gpu), ("graph: CUDA API", graph_api),
                      ("graph: GPU", graph_gpu)], caption="eager: a launch per kernel, the GPU waits for each; graph: one launch")


def _fig_ddp() -> str:
    back = [(k * 10, 9.5, f"L{8 - k}", "host") for k in range(8)]
    manual = [(80, 18, "all-reduce", "comm")]
    ddp = [(20, 12, "bucket 1", "comm"), (44, 12, "bucket 2", "comm"), (64, 12, "bucket 3", "comm"), (80, 6, "b4", "comm")]
    return lanes_svg([("backward", back), ("by hand", manual), ("DDP buckets", ddp)], span=100,
                     caption="backward: last layer first; DDP all-reduces each bucket once it is full")


def _fig_precision() -> str:
    from helpers import course

    gb = json.loads((course.DATA / "gpu_bound__h200.measure.json").read_text())["variants"]
    names = [("fp32", "fp32"), ("tf32", "TF32"), ("bf16", "bf16 autocast"), ("fp16", "fp16 + GradScaler"),
             ("compile", "bf16 + compile"), ("compile_ro", "+ reduce-overhead")]
    top = max(gb[v]["step_ms"] for v, _ in names)
    lanes = [(label, [(0, 100 * gb[v]["step_ms"] / top, f"{gb[v]['step_ms']:.1f} ms", "kernel" if v != "fp32" else "copy")])
             for v, label in names]
    return lanes_svg(lanes, caption="lab 08's step on the H200, timed without a profiler")


def _fig_lanes() -> str:
    """The course's own timeline of lab 03's broken loop (the H200 recording), as an inline PNG."""
    import base64
    import io

    import matplotlib

    matplotlib.use("Agg")
    from helpers import plots
    from helpers.course import recorded

    fig = plots.timeline(recorded("sync_stall", "broken"), step=1, title="lab 03's loop, one step (H200 recording)")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return f'<img class="fig" alt="timeline lanes" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


FIGURES = {"execution": _fig_execution, "streams": _fig_streams, "cupti": _fig_cupti, "lanes": _fig_lanes,
           "graphs": _fig_graphs, "ddp": _fig_ddp, "precision": _fig_precision}

_DECK_CSS = """
html,body{margin:0;height:100%;background:#1b1b1b;font-family:system-ui,-apple-system,"Segoe UI",sans-serif}
section{display:none;box-sizing:border-box;width:100vw;height:100vh;padding:4vh 6vw;background:#fff;color:#222;
  overflow:auto;font-size:clamp(14px,2.2vh,26px);line-height:1.35}
section.current{display:block}
section.part{display:none;flex-direction:column;justify-content:center;background:#4c78a8;color:#fff}
section.part.current{display:flex}
h1{font-size:2.2em;margin:.2em 0} h2{font-size:1.6em;margin:0 0 .5em;color:#4c78a8} section.part h2{color:#fff;font-size:2.2em}
code{background:#f1f1f1;padding:0 .2em;border-radius:3px;font-size:.92em}
.fig{display:block;max-width:100%;max-height:42vh;margin:.4em auto}
aside.notes{display:none;border-top:1px solid #ccc;margin-top:1em;padding-top:.5em;color:#555;font-size:.85em}
body.notes aside.notes{display:block}
#count{position:fixed;right:1em;bottom:.6em;color:#888;font-size:14px}
table{border-collapse:collapse} td,th{border:1px solid #ccc;padding:.2em .5em}
pre.code{background:#f6f6f6;border-left:3px solid #4c78a8;padding:.4em .6em;font-size:.8em;overflow:auto}
pre.out{font-size:.65em;color:#333;overflow:auto} pre.err{color:#b00}
details{margin:.3em 0} summary{cursor:pointer;color:#4c78a8}
@media print{section,section.part{display:block!important;height:auto;min-height:100vh;page-break-after:always}
  #count{display:none} body{background:#fff}}
"""

_DECK_JS = """
(function(){
  var s=document.querySelectorAll('section'), i=0, c=document.getElementById('count');
  function show(n){i=Math.max(0,Math.min(s.length-1,n));
    for(var k=0;k<s.length;k++){s[k].classList.toggle('current',k===i);}
    c.textContent=(i+1)+' / '+s.length; if(location.hash!=='#'+(i+1)){history.replaceState(null,'','#'+(i+1));}}
  document.addEventListener('keydown',function(e){
    if(['ArrowRight','PageDown',' ','ArrowDown'].indexOf(e.key)>=0){show(i+1);e.preventDefault();}
    else if(['ArrowLeft','PageUp','ArrowUp'].indexOf(e.key)>=0){show(i-1);e.preventDefault();}
    else if(e.key==='Home'){show(0);} else if(e.key==='End'){show(s.length-1);}
    else if(e.key==='n'||e.key==='N'){document.body.classList.toggle('notes');}
    else if(e.key==='f'||e.key==='F'){if(document.fullscreenElement){document.exitFullscreen();}
      else if(document.documentElement.requestFullscreen){document.documentElement.requestFullscreen();}}
    else if(e.key==='p'||e.key==='P'){window.print();}});
  document.addEventListener('click',function(e){if(e.target.tagName!=='A'){show(i+(e.clientX>innerWidth/3?1:-1));}});
  show(parseInt(location.hash.slice(1),10)-1||0);
})();
"""

_NUMBER = re.compile(r"\{\{n:(\w+)\}\}")
_FIGURE = re.compile(r"^\{\{figure:(\w+)\}\}$", re.MULTILINE)


def deck_slides(source: str) -> list[tuple[str, str]]:
    """The deck's slides as ``(markdown, notes)``, the source's preamble (before the first ``---``) left out."""
    chunks = re.split(r"^---[ \t]*$", source, flags=re.MULTILINE)[1:]
    slides = []
    for chunk in chunks:
        body, _, notes = chunk.partition("\nNote:")
        if body.strip():
            slides.append((body.strip(), notes.strip()))
    return slides


def render_deck(source: str, numbers: dict[str, str] | None = None) -> str:
    """The deck as one HTML page: CSS, script, SVG and PNG figures all inline, nothing fetched."""
    import mistune

    numbers = deck_numbers() if numbers is None else numbers
    md = mistune.create_markdown(escape=False, plugins=["table"])
    drawn: dict[str, str] = {}

    def number(m: re.Match) -> str:
        if m.group(1) not in numbers:
            raise KeyError(f"{DECK_SOURCE.name}: no figure named {m.group(1)!r}; the deck knows {', '.join(sorted(numbers))}")
        return numbers[m.group(1)]

    def figure(m: re.Match) -> str:
        name = m.group(1)
        if name not in FIGURES:
            raise KeyError(f"{DECK_SOURCE.name}: no drawing named {name!r}; the deck draws {', '.join(sorted(FIGURES))}")
        if name not in drawn:
            drawn[name] = FIGURES[name]()
        return f"\n\n<div>{drawn[name]}</div>\n\n"

    sections = []
    for body, notes in deck_slides(source):
        body = _FIGURE.sub(figure, _NUMBER.sub(number, body))
        part = ' class="part"' if re.match(r"^## Part \d", body) else ""
        aside = f'<aside class="notes">{md(_NUMBER.sub(number, notes))}</aside>' if notes else ""
        sections.append(f"<section{part}>{md(body)}{aside}</section>")
    return _page("Reading a GPU timeline: the concepts", "".join(sections))


def _page(title: str, sections: str) -> str:
    """The deck's page around ``sections``: its CSS and script inline, nothing fetched."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_esc(title)}</title><style>{_DECK_CSS}</style></head>"
            f"<body>{sections}<div id=\"count\"></div><script>{_DECK_JS}</script></body></html>\n")


def build_deck(out_dir: Path, force: bool = False, source: Path = DECK_SOURCE) -> Path:
    """Write the concept deck to ``out_dir``/concepts.slides.html (refusing to replace it without ``force``)."""
    return _write(out_dir / DECK_NAME, render_deck(source.read_text(encoding="utf-8")), force)


def main(argv: list[str] | None = None) -> int:
    from helpers.errors import TraceError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labs", nargs="*", help="lab numbers (00, 01, ...), or deck for the concept deck; default: all labs")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "slides")
    parser.add_argument("--execute", action="store_true", help="run each notebook first so outputs show")
    parser.add_argument("--force", action="store_true", help="replace slides that exist")
    args = parser.parse_args(argv)
    if "deck" in args.labs:
        try:
            print(build_deck(args.out, force=args.force))
        except TraceError as exc:  # an output that exists (without --force), a symlink, a folder
            print(f"error: {exc}", file=sys.stderr)
            return 2
        args.labs = [lab for lab in args.labs if lab != "deck"]
        if not args.labs:
            return 0
    notebooks = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
    if args.labs:
        wanted = {n.zfill(2) for n in args.labs}
        unknown = wanted - {p.name[:2] for p in notebooks}
        if unknown:
            print(f"error: no lab {', '.join(sorted(unknown))}; labs are {', '.join(p.name[:2] for p in notebooks)}", file=sys.stderr)
            return 2
        notebooks = [p for p in notebooks if p.name[:2] in wanted]
    for nb in notebooks:
        try:
            print(build(nb, args.out, execute=args.execute, force=args.force))
        except TraceError as exc:  # an output that exists (without --force), a symlink, a folder
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
