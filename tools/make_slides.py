"""Build reveal.js slides from the solution notebooks, for an instructor to present a lab.

    python tools/make_slides.py                    # every lab -> build/slides/NN_name.slides.html
    python tools/make_slides.py --execute          # run each notebook first, so plots and figures show
    python tools/make_slides.py --out DIR 02 05    # some labs, into DIR (refuses to overwrite: --force)

Each ``#``/``##`` heading starts a slide, each ``###`` heading (an exercise) a sub-slide, and
everything between them follows on the same slide; the notebooks themselves are not changed (the
slide metadata is set on a copy). ``--execute`` runs the copy with the machine's track, as a learner's
kernel would (a minute or two on a CPU); without it the slides show the code and text only.
"""

from __future__ import annotations

import argparse
import copy
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


def build(notebook: Path, out_dir: Path, execute: bool = False, force: bool = False, timeout_s: int = 900) -> Path:
    import nbformat
    from nbconvert import SlidesExporter

    target = out_dir / f"{notebook.stem}.slides.html"
    if target.exists() and not force:
        raise FileExistsError(f"{target} exists; pass --force to replace it")
    nb = nbformat.from_dict(as_slides(nbformat.read(notebook, as_version=4)))
    if execute:
        from nbclient import NotebookClient

        NotebookClient(nb, timeout=timeout_s, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(notebook.parent)}}).execute()
    body, _ = SlidesExporter(reveal_scroll=True).from_notebook_node(nb)
    out_dir.mkdir(parents=True, exist_ok=True)
    target.write_text(body, encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labs", nargs="*", help="lab numbers (00, 01, ...); default: all")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "slides")
    parser.add_argument("--execute", action="store_true", help="run each notebook first so outputs show")
    parser.add_argument("--force", action="store_true", help="replace slides that exist")
    args = parser.parse_args(argv)
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
        except FileExistsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
