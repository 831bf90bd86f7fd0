"""``python -m helpers report``: one self-contained HTML file, its data, and the command's manners (no overwrite,
bad input in one line). The page itself is driven in a browser by tests/test_report_browser.py."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

import helpers
from helpers import cli
from helpers import metrics as m
from helpers.explore import Lanes
from helpers.report import build, input_shapes
from helpers.timeline_data import timeline_payload, varints

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


def _decode(blob: str) -> bytes:
    return gzip.decompress(base64.b64decode(blob))


def _read(data: bytes, ref: list[int], cumulative: bool = False) -> np.ndarray:
    """The page's varint reader, in Python."""
    offset, count = ref
    out, p = [], offset
    for _ in range(count):
        x, mul = 0, 1
        while True:
            b = data[p]
            p += 1
            x += (b & 127) * mul
            mul *= 128
            if not b & 128:
                break
        out.append(x)
    arr = np.array(out, dtype=np.float64)
    return np.cumsum(arr) if cumulative else arr


def test_varints_round_trip():
    values = np.array([0, 1, 127, 128, 300, 2**32 + 5, 2**52 + 1], dtype=np.uint64)
    data = varints(values)
    assert _read(data, [0, len(values)]).tolist() == values.astype(float).tolist()
    assert len(varints(np.array([5, 127], dtype=np.uint64))) == 2


def test_timeline_payload_holds_every_event_and_thins_by_level():
    trace = m.stepped(helpers.load(DATA / "launch_overhead__broken__h200.json.gz"))
    payload = timeline_payload(trace, "t")
    meta, data = payload["meta"], _decode(payload["blob"])
    lanes = Lanes(trace, max_lanes=64)
    assert meta["labels"] == lanes.labels and meta["detail_ms"] is None
    for ln, entry in zip(lanes.lanes, meta["lanes"]):
        starts = _read(data, entry["s"], cumulative=True) / 1e6 + meta["t0_ms"]
        want = lanes.to_ms(ln.start[ln.depth <= 2] if ln.is_ranges else ln.start)
        assert np.allclose(starts, want, atol=1e-6), ln.lane
        names = [meta["names"][int(i)] for i in _read(data, entry["m"])[:5]]
        assert names == [str(n) for n in trace.events["name"].to_numpy()[ln.rows[:5]]]
    # level 0 is the whole trace in COLUMNS columns; each level's busy time is the lane's
    gpu = next(i for i, ln in enumerate(lanes.lanes) if ln.kind == "gpu")
    ln = lanes.lanes[gpu]
    us, ue = m.merge_intervals(ln.start, ln.end)
    for level in meta["levels"]:
        runs = level["lanes"][gpu]
        if runs is None:
            continue
        busy = float((_read(data, runs["n"]) * _read(data, runs["f"]) / 100).sum()) * level["px_ms"]
        assert busy == pytest.approx(float((ue - us).sum()) / 1e3, rel=0.02)
    coarse = meta["levels"][0]["lanes"][gpu]["n"][1]
    assert coarse <= 2048 < ln.rows.size  # thinned: fewer runs than events


def test_detail_is_bounded_and_the_levels_cover_the_rest():
    trace = m.stepped(helpers.load(DATA / "launch_overhead__broken__h200.json.gz"))
    payload = timeline_payload(trace, "t", detail_events=5000)
    meta = payload["meta"]
    a, b = meta["detail_ms"]
    assert meta["full_ms"][0] <= a < b <= meta["full_ms"][1]
    assert sum(e["n"] for e, info in zip(meta["lanes"], meta["lane_info"]) if info["kind"] != "ranges") <= 5000 + 50
    assert len(meta["levels"]) >= 3  # the levels go finer where the events are not kept


@pytest.fixture(scope="module")
def page():
    trace = helpers.load(DATA / "data_stall__broken__h200.json.gz")
    return build([trace], command="python -m helpers report data_stall__broken__h200.json.gz")


def test_the_page_is_self_contained(page):
    assert page.startswith("<!doctype html>")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page)  # nothing fetched
    assert "url(" not in page and "@import" not in page
    assert '<script type="module">' in page and "DecompressionStream" in page
    meta = json.loads(re.search(r'id="gtl-timelines">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
    assert meta[0]["title"] == "data_stall__broken__h200" and meta[0]["overlays"][0]["name"] == "critical path"


def test_the_pages_regex_search_runs_bounded_in_a_worker(page):
    # a /regex/ from the search box can backtrack for hours: the page matches it in a Web Worker it terminates at a
    # time limit (driven for real in test_report_browser.py); in the page's own thread it is only parsed
    js = page[page.index('<script type="module">'):]
    assert "new Worker(" in js and ".terminate()" in js and "SEARCH_TIMEOUT_MS" in js
    assert "did not finish within" in js
    body = js[js.index("  search(q) {"):js.index("  matchesOf(hit)")]
    assert "new RegExp(q.slice(1, -1)" in body and "this.matcher.run(q.slice(1, -1))" in body
    assert ".test(" not in body.split("matcher.run")[0].split("new RegExp(q.slice(1, -1)")[1]


HOSTILE_NAMES = ["<!--<script>", "</script><script>window.__pwned=1</script>", "<img src=x onerror=window.__pwned=2>",
                 "a\u2028b<!--", "]]></SCRIPT>"]


def test_names_that_are_html_never_end_or_escape_the_pages_scripts(tmp_path):
    # a trace's names are anyone's text: '<!--<script>' kept the real '</script>' from ending the data element, so the
    # page's code was read as data and nothing was drawn
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from synth import host_bound_loop, write_json

    events = host_bound_loop(steps=6)
    for e, name in zip([e for e in events if e.kind == "kernel"], HOSTILE_NAMES):
        e.name = name
    trace = helpers.load(write_json(events, tmp_path / "<b>t<i>.json"))
    page = build([trace], command="python -m helpers report t.json")
    scripts = re.findall(r"<script\b[^>]*>(.*?)</script>", page, re.S | re.I)
    assert len(scripts) == page.lower().count("<script") == page.lower().count("</script>")
    for body in scripts[:-1]:  # the data elements (the last is the page's code)
        assert "<" not in body
    meta = json.loads(re.search(r'id="gtl-timelines">(.*?)</script>', page, re.S).group(1))
    assert set(HOSTILE_NAMES) <= set(meta[0]["names"])
    assert "<b>t<i>" not in page and "<img src=x" not in page.replace("\\u003c", "")


def test_the_page_has_every_section(page):
    for heading in ("The trace", "Step overview", "Diagnosis", "Timeline", "Operators and kernels"):
        assert f">{heading}</h2>" in page, heading
    assert "TensorBoard's categories" in page and "DataLoader" in page
    assert "1. data_stall" in page and "show on the timeline" in page and "fix:" in page
    assert 'table class="sortable"' in page and "enumerate(DataLoader)" in page
    assert "What the step waited on (critical path)" in page
    assert "Ranks</h2>" not in page  # one rank


def test_a_folder_of_ranks_gets_the_heatmap_and_stragglers():
    trace = helpers.load(DATA / "communication__imbalance__cpu")
    html = build([trace])
    assert ">Ranks</h2>" in html and "Step time, rank by step" in html
    steps = int((m.windows(m.stepped(trace))["step"] >= 0).sum())
    assert html.count('class="cell"') == 2 * steps  # two heatmaps, a cell per (rank, step)
    assert "Stragglers:" in html or "No straggler" in html


def test_two_traces_get_the_diff():
    before = helpers.load(DATA / "sync_stall__broken__h200.json.gz")
    after = helpers.load(DATA / "sync_stall__fixed__h200.json.gz")
    html = build([before, after])
    assert 'id="diff"' in html and "faster: " in html and "aten::item" in html
    assert html.count('class="timeline-host"') == 2 and 'id="link-views"' in html
    assert "After: sync_stall__fixed__h200" in html and "Before: sync_stall__broken__h200" in html


def test_input_shapes_where_recorded():
    shapes = input_shapes(ROOT / "tests" / "corpus" / "hta_mi250_minitoy_train.json.gz", 2**30)
    assert shapes["aten::zeros_like"] == [("[5, 128]", 1)]
    assert input_shapes(DATA / "data_stall__broken__h200.json.gz", 2**30) == {}  # none recorded
    assert input_shapes(DATA / "nsight" / "sync_stall__fixed__h200.sqlite.gz", 2**30) == {}


def test_cli_writes_once_and_never_overwrites(tmp_path, capsys):
    out = tmp_path / "r.html"
    trace = str(DATA / "h2d_copy__fixed__h200.json.gz")
    assert cli.main(["report", trace, "-o", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    first = out.read_bytes()
    assert cli.main(["report", trace, "-o", str(out)]) == 2  # exists: refused, untouched
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and out.read_bytes() == first
    assert cli.main(["report", trace, "-o", str(out), "--force"]) == 0
    assert cli.main(["report", trace, "-o", str(tmp_path / "r.png")]) == 2
    assert "HTML" in capsys.readouterr().err and not (tmp_path / "r.png").exists()


def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = tmp_path / "r.html"
    for argv in (["report", str(bad), "-o", str(out)], ["report", str(tmp_path / "missing.json"), "-o", str(out)],
                 ["report", str(DATA / "h2d_copy__fixed__h200.json.gz"), str(bad), "-o", str(out)]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: "), err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]
    assert bad.read_text() == "{not json"


def test_progress_goes_to_its_end():
    seen = []
    build([helpers.load(DATA / "h2d_copy__fixed__h200.json.gz")], progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] and [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_save_from_python_keeps_what_exists(tmp_path):
    from helpers.errors import TraceError
    from helpers.report import save

    before, after = (helpers.load(DATA / f"h2d_copy__{v}__h200.json.gz") for v in ("broken", "fixed"))
    out = save([before, after], tmp_path / "fix.html")
    assert out.read_text().startswith("<!doctype html>") and 'id="diff"' in out.read_text()
    first = out.read_bytes()
    with pytest.raises(TraceError, match="already exists"):
        save([after], out)
    assert out.read_bytes() == first
    with pytest.raises(TraceError):
        save([after], tmp_path / "fix.txt")
    with pytest.raises(TraceError):
        save([], tmp_path / "none.html")


def test_a_report_of_a_trace_with_nothing_or_almost_nothing_in_it(tmp_path, capsys):
    # an empty trace loads (summary and diagnose say nothing was recorded), and its report said IndexError
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from synth import host_bound_loop, kineto_doc

    def trace(name: str, doc: dict) -> Path:
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(doc))
        return p

    full = kineto_doc(host_bound_loop())
    kinds = {"kernels_only": {"kernel"}, "runtime_only": {"cuda_runtime"}, "steps_only": {"user_annotation"}}
    files = [trace("empty", {"traceEvents": []}), trace("full", full),
             trace("zero_length", {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": 0, "pid": 0,
                                                    "tid": 7, "args": {"device": 0, "stream": 7, "correlation": 1}}]}),
             *(trace(n, {"traceEvents": [e for e in full["traceEvents"] if e.get("cat") in k]}) for n, k in kinds.items())]
    for f in files:
        for k, pair in enumerate(([f], [f, files[1]], [files[1], f])):
            out = tmp_path / f"r-{f.stem}-{k}.html"
            assert cli.main(["report", *map(str, pair), "-o", str(out)]) == 0, (f, capsys.readouterr().err)
    page = build([helpers.load(files[0])])
    assert "none (no events)" in page and "nothing_recorded" in page
