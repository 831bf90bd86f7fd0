// Front end of helpers.explore (JupyterLab, through anywidget) and of the timeline in `python -m helpers report`'s
// HTML file (the same code, given a model that answers in the page). One canvas; the lanes as plots.timeline
// draws them. The model answers for the visible range (view_ms -> bins), the event under the pointer
// (probe -> hover_info), a click (pin -> pinned), a search (search_query -> search_result) and a selection
// (selection_ms -> figure_lines).
//
// Controls, as in Perfetto: a plain wheel scrolls the page; Ctrl/Cmd-wheel or W/S zoom at the pointer; drag,
// A/D or the arrow keys pan; shift-drag selects a stretch; click pins an event (Esc unpins); double-click or
// the "whole trace" button shows everything; a click on a lane's label collapses it; / goes to the search box,
// Enter / Shift-Enter to the next / previous match; F fits the pinned event.

const LABEL_W = 210, AXIS_H = 24, RIGHT = 12, LANE_H = 22, ROW_H = 17, COLLAPSED_H = 9, GROUP_H = 18;
const OVERLAY_H = 18, MIN_SPAN_MS = 0.0005, TIP_NAME = 110, SHADE_ALPHA = 0.16;

function niceStep(span, target) {
  const raw = span / target, p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const k of [1, 2, 5, 10]) if (k * p >= raw) return k * p;
  return 10 * p;
}

function fmtMs(v, step) {
  const digits = Math.max(0, Math.min(6, -Math.floor(Math.log10(step))));
  return (Math.abs(v) < step / 2 ? 0 : v).toFixed(digits);
}

function fmtDur(us) {
  if (us >= 1e6) return (us / 1e6).toFixed(3) + " s";
  if (us >= 1e3) return (us / 1e3).toFixed(3) + " ms";
  return us.toFixed(us < 10 ? 2 : 1) + " µs";
}

function fmtBytes(b) {
  if (b >= 1e9) return (b / 1e9).toFixed(2) + " GB";
  if (b >= 1e6) return (b / 1e6).toFixed(2) + " MB";
  if (b >= 1e3) return (b / 1e3).toFixed(1) + " kB";
  return b.toFixed(0) + " B";
}

function cut(name, n = TIP_NAME) {
  const s = String(name);
  if (s.length <= n) return s;
  const head = Math.ceil((n - 1) * 0.65), tail = n - 1 - head;
  return s.slice(0, head) + "…" + s.slice(s.length - tail);
}

const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));

function fitText(g, text, width) {
  // the longest prefix (with an ellipsis) of text that fits in width px; "" when not even 3 characters do
  if (g.measureText(text).width <= width) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (g.measureText(text.slice(0, mid) + "…").width <= width) lo = mid; else hi = mid - 1;
  }
  return lo >= 3 ? text.slice(0, lo) + "…" : "";
}

export function mount(el, model, opts = {}) {
  const make = (tag, cls, text) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text) node.textContent = text;
    return node;
  };
  const root = make("div", "gtl-explore");
  root.tabIndex = 0;  // keys go to the view once it is clicked (or tabbed to); never taken from a cell being edited
  root.setAttribute("data-lm-suppress-shortcuts", "true");  // JupyterLab: our keys are not notebook commands
  const bar = make("div", "gtl-bar");
  const title = make("span", "gtl-title");
  const reset = make("button", "", "whole trace");
  const toSel = make("button", "", "zoom to selection");
  const search = make("input", "gtl-search");
  search.type = "search";
  search.placeholder = "search names (/regex/)";
  const prev = make("button", "gtl-prev", "◀");
  const next = make("button", "gtl-next", "▶");
  prev.title = "previous match (Shift+Enter)";
  next.title = "next match (Enter)";
  const count = make("span", "gtl-count");
  const help = make("span", "gtl-hint",
    "Ctrl/⌘+wheel or W/S: zoom · drag or A/D: pan · shift-drag: select · click: pin · label: collapse");
  bar.append(title, reset, toSel, search, prev, next, count, help);
  const origin = make("div", "gtl-origin");
  const canvas = make("canvas", "gtl-canvas");
  const tip = make("div", "gtl-tip");
  tip.style.display = "none";
  const wrap = make("div", "gtl-wrap");
  wrap.append(canvas, tip);
  const legend = make("div", "gtl-legend");
  const pinnedPanel = make("div", "gtl-pinned");
  pinnedPanel.style.display = "none";
  const panel = make("div", "gtl-figures");
  root.append(bar, origin, wrap, legend, pinnedPanel, panel);
  el.appendChild(root);

  let view = (model.get("view_ms") || [0, 1]).slice();
  let drag = null, hover = null, pointerX = null, seq = 0, sendTimer = null, probeTimer = null, searchTimer = null;
  let rows = [], collapsed = new Set(), groupsCollapsed = new Set(opts.collapsedRanks || []);
  let matches = [], matchIndex = -1, searchSeq = 0, pinSeq = 0;
  // Enter pressed before its query's answer came (typed, then Enter within the debounce): the direction to go once
  // it comes; the query last sent and the seq of the last answer shown; the pin a search made (its pinSeq)
  let goPending = 0, sentQuery = null, answeredSeq = 0, searchPinSeq = -1;
  const viewListeners = [];

  const plotW = () => Math.max(50, canvas.clientWidth - LABEL_W - RIGHT);
  const xOf = (t) => LABEL_W + ((t - view[0]) / (view[1] - view[0])) * plotW();
  const tOf = (x) => view[0] + ((x - LABEL_W) / plotW()) * (view[1] - view[0]);

  // --- layout: overlay tracks, then per rank (a header row when there are several) its lanes -------------
  function layout() {
    const info = model.get("lane_info") || (model.get("labels") || []).map((label) => ({ label, kind: "cpu", rank: 0 }));
    const overlays = model.get("overlays") || [];
    const multi = new Set(info.map((l) => l.rank)).size > 1;
    rows = [];
    let y = AXIS_H;
    overlays.forEach((ov, i) => { rows.push({ type: "overlay", index: i, y, h: OVERLAY_H, label: ov.name }); y += OVERLAY_H; });
    let lastRank = null;
    info.forEach((ln, i) => {
      if (multi && ln.rank !== lastRank) {
        rows.push({ type: "group", rank: ln.rank, y, h: GROUP_H, label: `rank ${ln.rank}` });
        y += GROUP_H;
        lastRank = ln.rank;
      }
      if (multi && groupsCollapsed.has(ln.rank)) { rows.push({ type: "lane", index: i, y: -1, h: 0, hidden: true, info: ln }); return; }
      const isCollapsed = collapsed.has(i);
      const h = isCollapsed ? COLLAPSED_H : ln.kind === "ranges" ? ROW_H * ((ln.depth || 0) + 1) + 4 : LANE_H;
      const label = multi ? ln.label.replace(/^rank \d+ · /, "") : ln.label;
      rows.push({ type: "lane", index: i, y, h, label, info: ln, collapsed: isCollapsed });
      y += h;
    });
    return y;
  }

  function laneRow(i) { return rows.find((r) => r.type === "lane" && r.index === i && !r.hidden); }

  function publish(height) {
    // What a test (or a curious reader) can read off the page without reaching into the canvas.
    root.dataset.view = view.map((v) => v.toFixed(6)).join(",");
    root.dataset.plotLeft = String(LABEL_W);
    root.dataset.plotWidth = String(plotW());
    const lanes = rows.filter((r) => r.type === "lane");
    root.dataset.laneTops = lanes.map((r) => (r.hidden ? -1 : r.y)).join(",");
    root.dataset.laneHeights = lanes.map((r) => r.h).join(",");
    root.dataset.laneTop = String(lanes.length && !lanes[0].hidden ? lanes[0].y : AXIS_H);  // the first lane's top
    root.dataset.laneHeight = String(LANE_H);
    root.dataset.height = String(height);
    const b = model.get("bins") || {};
    root.dataset.binsView = (b.view || []).map((v) => v.toFixed(6)).join(",");
    const p = model.get("pinned") || {};
    root.dataset.pinnedRow = p.name ? String(p.row) : "";
    root.dataset.pinnedMs = p.name ? `${p.start_ms},${p.end_ms}` : "";
    root.dataset.matches = String(matches.length);
    root.dataset.matchIndex = String(matchIndex);
  }

  function sendView() {
    clearTimeout(sendTimer);
    sendTimer = setTimeout(() => {
      model.set("view_ms", view.slice());
      model.set("width_px", Math.round(plotW()));
      model.save_changes();
    }, 60);
  }

  function setView(a, b, send = true) {
    const full = model.get("full_ms") || [0, 1];
    const fullSpan = Math.max(full[1] - full[0], MIN_SPAN_MS);
    let span = Math.min(Math.max(b - a, MIN_SPAN_MS), fullSpan);  // never wider than the trace
    if (!(span > 0)) span = fullSpan;
    a = Math.min(Math.max(a, full[0]), full[1] - span);  // and never past its ends
    view = [a, a + span];
    draw();
    viewListeners.forEach((f) => f(view.slice()));
    if (send) sendView();
  }

  function zoomAt(t, factor) {
    setView(t - (t - view[0]) * factor, t + (view[1] - t) * factor);
  }

  // --- drawing ----------------------------------------------------------------------------------------
  function draw() {
    const height = layout() + 6;
    const colours = model.get("colours") || [];
    const cssW = Math.max(400, el.clientWidth || root.clientWidth || 900);
    const dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(height * dpr)) {
      canvas.width = Math.round(cssW * dpr);
      canvas.height = Math.round(height * dpr);
      canvas.style.width = cssW + "px";
      canvas.style.height = height + "px";
    }
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, cssW, height);
    g.font = "12px sans-serif";
    const pw = plotW(), span = view[1] - view[0];
    // row backgrounds, then the time grid and the axis along the top
    rows.forEach((r, k) => {
      if (r.hidden) return;
      g.fillStyle = r.type === "group" ? "#eef1f5" : r.type === "overlay" ? "#fbf7ee" : k % 2 ? "#fafafa" : "#ffffff";
      g.fillRect(0, r.y, cssW, r.h);
    });
    const step = niceStep(span, Math.max(3, Math.round(pw / 110)));
    g.strokeStyle = "#e2e2e2";
    g.fillStyle = "#444";
    g.textAlign = "center";
    g.textBaseline = "top";
    for (let t = Math.ceil(view[0] / step) * step; t <= view[1]; t += step) {
      const x = xOf(t);
      g.beginPath();
      g.moveTo(x, AXIS_H - 4);
      g.lineTo(x, height);
      g.stroke();
      g.fillText(fmtMs(t, step), x, 6);
    }
    g.textAlign = "left";
    g.fillText(`${view[0].toFixed(3)} – ${view[1].toFixed(3)} ms (${fmtDur(span * 1e3)})`, 6, 6);
    // lanes
    const bins = model.get("bins") || {};
    const binLanes = bins.lanes || [];
    const bv = bins.view || view, bw = bins.width || pw, bpx = (bv[1] - bv[0]) / bw;
    g.save();
    g.beginPath();
    g.rect(LABEL_W, AXIS_H, pw, height - AXIS_H);
    g.clip();
    for (const r of rows) {
      if (r.hidden) continue;
      if (r.type === "overlay") { drawOverlay(g, r, pw); continue; }
      if (r.type === "group") {
        if (groupsCollapsed.has(r.rank)) {  // the rank's first GPU lane, thin, stands for it
          const info = model.get("lane_info") || [];
          const gi = info.findIndex((l) => l.rank === r.rank && l.kind === "gpu");
          if (gi >= 0 && binLanes[gi]) drawColumns(g, binLanes[gi], colours, r.y + 5, r.h - 7, bv, bpx, pw);
        }
        continue;
      }
      const ln = binLanes[r.index];
      if (!ln) continue;
      if (Array.isArray(ln.d)) drawRanges(g, ln, colours, r, pw);
      else drawColumns(g, ln, colours, r.y + (r.collapsed ? 1 : 3), r.h - (r.collapsed ? 2 : 6), bv, bpx, pw);
    }
    drawMatches(g);
    // the selected stretch
    const sel = drag && drag.mode === "select" ? [Math.min(drag.t0, drag.t1), Math.max(drag.t0, drag.t1)] : model.get("selection_ms");
    if (sel && sel.length === 2) {
      const x0 = xOf(sel[0]), x1 = xOf(sel[1]);
      g.fillStyle = "rgba(255, 200, 0, 0.22)";
      g.fillRect(x0, AXIS_H, Math.max(x1 - x0, 2), height - AXIS_H);
      g.strokeStyle = "rgba(200, 140, 0, 0.9)";
      g.strokeRect(x0, AXIS_H, Math.max(x1 - x0, 2), height - AXIS_H);
    }
    const pinned = model.get("pinned") || {};
    const hovered = model.get("hover_info") || {};
    if (pinned.name) drawEvent(g, pinned, "#000", 2);
    if (hover && hovered.name && hovered.seq === seq && hovered.row !== pinned.row) drawEvent(g, hovered, "#333", 1);
    g.restore();
    // labels (over the plot's left edge) and the collapse marks
    g.textBaseline = "middle";
    for (const r of rows) {
      if (r.hidden) continue;
      const mid = r.y + Math.min(r.h, LANE_H) / 2;
      g.fillStyle = r.type === "group" ? "#000" : "#222";
      g.font = r.type === "group" ? "bold 12px sans-serif" : r.collapsed ? "10px sans-serif" : "12px sans-serif";
      g.textAlign = "left";
      const mark = r.type === "group" ? (groupsCollapsed.has(r.rank) ? "▸ " : "▾ ") : r.type === "lane" ? (r.collapsed ? "▸ " : "▾ ") : "";
      g.fillText(fitText(g, mark + r.label, LABEL_W - 10), 4, r.collapsed ? r.y + r.h / 2 : mid);
    }
    g.font = "12px sans-serif";
    publish(height);
  }

  function drawColumns(g, ln, colours, top, h, bv, bpx, pw) {
    // pixel columns: full where the lane is busy all the pixel's time, else a light shade and a bar as tall
    // as the share of the pixel's time the lane is busy (a nearly idle GPU looks nearly idle at any zoom)
    const xs = ln.x || [], ns = ln.n || [], cs = ln.c || [], fs = ln.f || [];
    const scale = pw / (view[1] - view[0]);
    for (let k = 0; k < xs.length; k++) {
      const t0 = bv[0] + xs[k] * bpx, t1 = t0 + ns[k] * bpx;
      let x0 = LABEL_W + (t0 - view[0]) * scale, x1 = LABEL_W + (t1 - view[0]) * scale;
      if (x1 < LABEL_W || x0 > LABEL_W + pw) continue;
      const w = Math.max(x1 - x0, 1);
      const colour = colours[cs[k]] || "#999";
      if (fs[k] >= 100) {
        g.fillStyle = colour;
        g.fillRect(x0, top, w, h);
      } else {
        g.globalAlpha = SHADE_ALPHA;
        g.fillStyle = colour;
        g.fillRect(x0, top, w, h);
        g.globalAlpha = 1;
        const bh = Math.max(1, (h * fs[k]) / 100);
        g.fillRect(x0, top + h - bh, w, bh);
      }
    }
  }

  function drawRanges(g, ln, colours, r, pw) {
    const names = [];
    for (let k = 0; k < ln.x0.length; k++) {
      const d = ln.d[k];
      if (r.collapsed && d > 0) continue;
      const x0 = xOf(ln.x0[k]), x1 = xOf(ln.x1[k]);
      if (x1 < LABEL_W || x0 > LABEL_W + pw) continue;
      const y = r.collapsed ? r.y + 1 : r.y + 2 + d * ROW_H, h = r.collapsed ? r.h - 2 : ROW_H - 2;
      g.fillStyle = colours[ln.c[k]] || "#999";
      g.globalAlpha = 0.9;
      g.fillRect(x0, y, Math.max(x1 - x0, 1), h);
      g.globalAlpha = 1;
      if (!r.collapsed) {
        g.strokeStyle = "rgba(255,255,255,0.8)";
        g.strokeRect(x0, y, Math.max(x1 - x0, 1), h);
        const a = Math.max(x0, LABEL_W), b = Math.min(x1, LABEL_W + pw);  // the range's part on screen
        if (b - a > 16) names.push([ln.n[k], a, b, y + h / 2]);
      }
    }
    g.fillStyle = "#000";
    g.textAlign = "center";
    g.textBaseline = "middle";
    g.font = "11px sans-serif";
    for (const [name, a, b, y] of names) {
      const text = fitText(g, name, b - a - 6);  // the name where it fits, cut with an ellipsis where it half fits
      if (text) g.fillText(text, (a + b) / 2, y);
    }
    g.font = "12px sans-serif";
  }

  function overlayData(index) {
    // a track's stretches: as the model gives them for this view (thinned, in a report), else all of them
    const ov = (model.get("overlays") || [])[index] || {};
    const inView = ((model.get("bins") || {}).overlays || [])[index];
    return inView ? { ...ov, ...inView } : ov;
  }

  function drawOverlay(g, r, pw) {
    const ov = overlayData(r.index);
    const x0s = ov.x0 || [], x1s = ov.x1 || [], cs = ov.c || [], labels = ov.label || [];
    g.textAlign = "center";
    g.textBaseline = "middle";
    g.font = "11px sans-serif";
    for (let k = 0; k < x0s.length; k++) {
      const x0 = xOf(x0s[k]), x1 = xOf(x1s[k]);
      if (x1 < LABEL_W || x0 > LABEL_W + pw) continue;
      g.fillStyle = cs[k] || ov.colour || "#c0392b";
      g.fillRect(x0, r.y + 3, Math.max(x1 - x0, 1), r.h - 6);
      const a = Math.max(x0, LABEL_W), b = Math.min(x1, LABEL_W + pw);
      const text = labels[k] && b - a > 20 ? fitText(g, labels[k], b - a - 4) : "";
      if (text) { g.fillStyle = "#fff"; g.fillText(text, (a + b) / 2, r.y + r.h / 2); }
    }
    g.font = "12px sans-serif";
  }

  function drawMatches(g) {
    if (!matches.length) return;
    g.strokeStyle = "#ff7700";
    g.lineWidth = 1.5;
    const [a, b] = view;
    let lo = 0, hi = matches.length;  // matches are in time order: the first that may be on screen
    while (lo < hi) { const mid = (lo + hi) >> 1; if (matches[mid][1] < a - (b - a)) lo = mid + 1; else hi = mid; }
    let drawn = 0;
    for (let k = lo; k < matches.length && matches[k][1] <= b && drawn < 4000; k++) {
      const [lane, s, e] = matches[k];
      if (e < a) continue;
      const r = laneRow(lane);
      if (!r) continue;
      const x0 = xOf(s), x1 = xOf(e);
      g.strokeRect(x0 - 1, r.y + 1, Math.max(x1 - x0, 1) + 2, r.h - 2);
      drawn++;
    }
    g.lineWidth = 1;
  }

  function eventBox(ev) {
    const r = laneRow(ev.lane);
    if (!r) return null;
    let y = r.y + 2, h = r.h - 4;
    if (r.info && r.info.kind === "ranges" && !r.collapsed && ev.depth !== undefined) { y = r.y + 2 + ev.depth * ROW_H; h = ROW_H - 2; }
    return { x0: xOf(ev.start_ms), x1: xOf(ev.end_ms), y, h };
  }

  function drawEvent(g, ev, colour, width) {
    const box = eventBox(ev);
    if (box) {
      g.strokeStyle = colour;
      g.lineWidth = width;
      g.strokeRect(box.x0 - 1, box.y, Math.max(box.x1 - box.x0, 1) + 2, box.h);
    }
    for (const l of ev.links || []) {  // flow arrows: launch call -> its GPU work (either way round)
      const other = eventBox(l);
      if (!box || !other) continue;
      const fromCall = ev.link === "launched";
      const [src, dst] = fromCall ? [box, other] : [other, box];
      const x0 = src.x0, y0 = src.y + src.h / 2, x1 = dst.x0, y1 = dst.y + dst.h / 2;
      g.strokeStyle = "#d35400";
      g.fillStyle = "#d35400";
      g.lineWidth = 1.5;
      g.beginPath();
      g.moveTo(x0, y0);
      const my = (y0 + y1) / 2;
      g.bezierCurveTo(x0, my, x1, my, x1, y1);
      g.stroke();
      const dir = y1 >= y0 ? 1 : -1;  // the head, pointing at the GPU work
      g.beginPath();
      g.moveTo(x1, y1);
      g.lineTo(x1 - 4, y1 - 7 * dir);
      g.lineTo(x1 + 4, y1 - 7 * dir);
      g.closePath();
      g.fill();
    }
    g.lineWidth = 1;
  }

  // --- pointer ----------------------------------------------------------------------------------------
  function rowAt(y) { return rows.find((r) => !r.hidden && y >= r.y && y < r.y + r.h) || null; }

  function pos(ev) {
    const r = canvas.getBoundingClientRect();
    return [ev.clientX - r.left, ev.clientY - r.top];
  }

  canvas.addEventListener("wheel", (ev) => {
    const [x] = pos(ev);
    if (ev.ctrlKey || ev.metaKey) {  // zoom (a trackpad's pinch arrives as ctrl+wheel too)
      ev.preventDefault();
      const t = x >= LABEL_W ? tOf(x) : (view[0] + view[1]) / 2;
      zoomAt(t, Math.exp(Math.max(-300, Math.min(300, ev.deltaY)) * 0.002));
    } else if (Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {  // a sideways swipe pans
      ev.preventDefault();
      const dt = (ev.deltaX / plotW()) * (view[1] - view[0]);
      setView(view[0] + dt, view[1] + dt);
    }  // else: the page scrolls, as everywhere else in a notebook or a report
  }, { passive: false });

  canvas.addEventListener("mousedown", (ev) => {
    const [x, y] = pos(ev);
    ev.preventDefault();  // keeps the focus here (JupyterLab would take it for the cell) and no text selection
    root.focus({ preventScroll: true });
    if (x < LABEL_W) {  // a label: collapse or expand its lane (or its rank's lanes)
      const r = rowAt(y);
      if (r && r.type === "lane") { if (collapsed.has(r.index)) collapsed.delete(r.index); else collapsed.add(r.index); }
      if (r && r.type === "group") { if (groupsCollapsed.has(r.rank)) groupsCollapsed.delete(r.rank); else groupsCollapsed.add(r.rank); }
      draw();
      return;
    }
    drag = { mode: ev.shiftKey ? "select" : "pan", x0: x, y0: y, t0: tOf(x), t1: tOf(x), view0: view.slice(), moved: false };
    clearTimeout(probeTimer);
    seq += 1;  // a hover answer still on its way is stale now
    tip.style.display = "none";
  });

  const onMove = (ev) => {
    if (!drag) return;
    const [x] = pos(ev);
    if (Math.abs(x - drag.x0) >= 3) drag.moved = true;
    if (drag.mode === "pan") {
      if (!drag.moved) return;
      const dt = ((x - drag.x0) / plotW()) * (drag.view0[1] - drag.view0[0]);
      setView(drag.view0[0] - dt, drag.view0[1] - dt);
    } else {
      drag.t1 = tOf(x);
      draw();
    }
  };
  const onUp = (ev) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    const [x, y] = pos(ev);
    if (d.mode === "select") {
      const a = Math.min(d.t0, tOf(x)), b = Math.max(d.t0, tOf(x));
      model.set("selection_ms", d.moved ? [a, b] : []);
      model.save_changes();
    } else if (!d.moved) {  // a click: pin the event under the pointer (or unpin)
      const r = rowAt(y);
      pinSeq += 1;
      if (r && r.type === "lane") model.set("pin", { lane: r.index, t: tOf(x), tol: (3 * (view[1] - view[0])) / plotW(), seq: pinSeq });
      else model.set("pin", { seq: pinSeq });
      model.save_changes();
    }
    draw();
  };
  window.addEventListener("mousemove", onMove);
  window.addEventListener("mouseup", onUp);

  canvas.addEventListener("dblclick", (ev) => {
    const [x] = pos(ev);
    if (x < LABEL_W) return;
    const full = model.get("full_ms");
    setView(full[0], full[1]);
  });

  canvas.addEventListener("mousemove", (ev) => {
    if (drag) return;
    const [x, y] = pos(ev);
    pointerX = x;
    const r = rowAt(y);
    canvas.style.cursor = x < LABEL_W && r && (r.type === "lane" || r.type === "group") ? "pointer" : "crosshair";
    if (x < LABEL_W || !r || r.type === "group") { hideTip(); return; }
    hover = { x, y };
    if (r.type === "overlay") { overlayTip(r, x); return; }
    clearTimeout(probeTimer);
    probeTimer = setTimeout(() => {
      seq += 1;
      const tol = (3 * (view[1] - view[0])) / plotW();
      model.set("probe", { lane: r.index, t: tOf(x), tol, seq });
      model.save_changes();
    }, 30);
  });

  canvas.addEventListener("mouseleave", () => { hideTip(); pointerX = null; });

  function hideTip() {
    if (hover) { hover = null; draw(); }
    tip.style.display = "none";
  }

  function placeTip() {
    tip.style.display = "block";
    const w = canvas.clientWidth, tw = tip.offsetWidth;
    tip.style.left = Math.max(0, Math.min(hover.x + 14, w - tw - 4)) + "px";
    // below the pointer, or above it near the bottom: the output area clips what overflows it
    const below = hover.y + 16, h = tip.offsetHeight;
    tip.style.top = (below + h > canvas.clientHeight ? Math.max(0, hover.y - h - 10) : below) + "px";
  }

  function overlayTip(r, x) {
    const ov = overlayData(r.index);
    const t = tOf(x), tol = (3 * (view[1] - view[0])) / plotW();
    const x0s = ov.x0 || [];
    for (let k = 0; k < x0s.length; k++) {
      if (x0s[k] - tol <= t && t <= ov.x1[k] + tol) {
        tip.innerHTML = `<b>${esc(cut(ov.label ? ov.label[k] : ov.name))}</b><br>${esc(ov.name)} · `
          + `${x0s[k].toFixed(3)}–${ov.x1[k].toFixed(3)} ms · ${fmtDur((ov.x1[k] - x0s[k]) * 1e3)}`
          + (ov.detail && ov.detail[k] ? `<br>${esc(cut(ov.detail[k]))}` : "");
        placeTip();
        return;
      }
    }
    tip.style.display = "none";
  }

  function eventLines(info, long) {
    const name = long ? info.name : cut(info.name);
    const what = `${esc(info.kind)}${info.copy ? " " + esc(info.copy) : ""} · ${esc(info.where)}`
      + (info.rank !== undefined && (model.get("lane_info") || []).some((l) => l.rank !== info.rank) ? ` · rank ${info.rank}` : "");
    let html = `<b class="gtl-name">${esc(name)}</b><br>${what}<br>start ${info.start_ms.toFixed(3)} ms · ${fmtDur(info.dur_us)}`;
    if (info.bytes !== undefined) html += ` · ${fmtBytes(info.bytes)}`;
    if (info.shapes) html += `<br>input shapes ${esc(long ? info.shapes : cut(info.shapes, 80))}`;
    return html;
  }

  function showTip() {
    const info = model.get("hover_info") || {};
    if (!hover || info.seq !== seq || !info.name) {
      tip.style.display = "none";
      draw();
      return;
    }
    let html = eventLines(info, false);
    for (const l of (info.links || []).slice(0, 3)) {
      html += `<br>${esc(info.link)}: ${esc(cut(l.name, 70))} (${esc(l.where)}, at ${l.start_ms.toFixed(3)} ms, ${fmtDur(l.dur_us)})`;
    }
    html += `<br><span class="gtl-dim">click to pin</span>`;
    tip.innerHTML = html;
    placeTip();
    draw();
  }

  function showPinned() {
    const info = model.get("pinned") || {};
    if (!info.name) { pinnedPanel.style.display = "none"; draw(); return; }
    pinnedPanel.style.display = "block";
    pinnedPanel.innerHTML = "";
    const head = make("div", "gtl-pinned-head");
    const close = make("button", "", "×");
    close.title = "unpin (Esc)";
    close.addEventListener("click", () => unpin());
    const fit = make("button", "", "fit");
    fit.title = "zoom to this event (F)";
    fit.addEventListener("click", () => fitPinned());
    head.append(close, fit);
    const body = make("div");
    let html = eventLines(info, true) + `<br>ends ${info.end_ms.toFixed(3)} ms`;
    if (info.step !== undefined && info.step >= 0) html += ` · step ${info.step}`;
    if (info.correlation !== undefined) html += ` · correlation ${info.correlation}`;
    body.innerHTML = html;
    pinnedPanel.append(head, body);
    for (const l of info.links || []) {
      const a = make("div", "gtl-link");
      a.innerHTML = `${esc(info.link)}: <b class="gtl-name">${esc(l.name)}</b> (${esc(l.where)}, at ${l.start_ms.toFixed(3)} ms, ${fmtDur(l.dur_us)})`;
      a.addEventListener("click", () => { pinRow(l.row); centreOn(l.start_ms, l.end_ms); });
      pinnedPanel.appendChild(a);
    }
    draw();
  }

  function pinRow(row) { pinSeq += 1; model.set("pin", { row, seq: pinSeq }); model.save_changes(); }
  function unpin() { pinSeq += 1; model.set("pin", { seq: pinSeq }); model.save_changes(); }

  function centreOn(s, e, zoom = false) {
    let span = view[1] - view[0];
    if (e - s > 0.8 * span) span = (e - s) * 1.25;
    else if (zoom && span > 200 * (e - s)) span = Math.max(200 * (e - s), 0.05);  // a match too small to see: closer
    const mid = (s + e) / 2;
    setView(mid - span / 2, mid + span / 2);
  }

  function fitPinned() {
    const p = model.get("pinned") || {};
    if (!p.name) return;
    const pad = Math.max((p.end_ms - p.start_ms) * 0.25, MIN_SPAN_MS);
    setView(p.start_ms - pad, p.end_ms + pad);
  }

  // --- search -----------------------------------------------------------------------------------------
  function showCount() {
    const res = model.get("search_result") || {};
    if (!search.value.trim()) { count.textContent = ""; return; }
    if (res.error) { count.textContent = res.error; return; }
    const total = res.total || 0;
    count.textContent = total ? `${matchIndex >= 0 ? matchIndex + 1 : "–"} / ${total.toLocaleString()}`
      + (matches.length < total ? ` (first ${matches.length.toLocaleString()})` : "") : "no match";
  }

  function onSearchResult() {
    const res = model.get("search_result") || {};
    if (res.seq !== searchSeq) return;
    answeredSeq = res.seq;
    matches = res.matches || [];
    matchIndex = -1;
    // a search that finds nothing takes down the card its previous match pinned: a card beside "no match" reads
    // as a match (a pin the user made since, by a click or a link, stays)
    if (!matches.length && search.value.trim() && pinSeq === searchPinSeq) unpin();
    showCount();
    draw();
    if (goPending) { const d = goPending; goPending = 0; goMatch(d); }
  }

  function goMatch(delta) {
    if (!matches.length) return;
    if (matchIndex < 0) {  // the first match in view (the last, going back)
      let k = delta > 0 ? matches.findIndex((mt) => mt[2] >= view[0]) : matches.length - 1;
      if (delta < 0) while (k >= 0 && matches[k][1] > view[1]) k--;
      matchIndex = k < 0 ? (delta > 0 ? 0 : matches.length - 1) : k;
    } else {
      matchIndex = (matchIndex + delta + matches.length) % matches.length;
    }
    const [, s, e, row] = matches[matchIndex];
    centreOn(s, e, true);
    pinRow(row);
    searchPinSeq = pinSeq;
    showCount();
  }

  function sendQuery() {
    clearTimeout(searchTimer);
    searchSeq += 1;
    sentQuery = search.value;
    model.set("search_query", { q: search.value, seq: searchSeq });
    model.save_changes();
  }

  search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(sendQuery, 200);
  });
  search.addEventListener("keydown", (ev) => {
    ev.stopPropagation();  // typing here is not a notebook command, nor the view's W/A/S/D
    if (ev.key === "Enter") {
      ev.preventDefault();
      const d = ev.shiftKey ? -1 : 1;
      // the box's text not yet sent (Enter within the debounce) or its answer not yet here: go once it comes
      if (search.value !== sentQuery) { sendQuery(); goPending = d; }
      else if (answeredSeq !== searchSeq) goPending = d;
      else goMatch(d);
    }
    if (ev.key === "Escape") { search.blur(); root.focus({ preventScroll: true }); }
  });
  prev.addEventListener("click", () => goMatch(-1));
  next.addEventListener("click", () => goMatch(1));

  // --- keyboard ---------------------------------------------------------------------------------------
  root.addEventListener("keydown", (ev) => {
    if (ev.target === search || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const k = ev.key.toLowerCase(), span = view[1] - view[0];
    const t = pointerX !== null && pointerX >= LABEL_W ? tOf(pointerX) : (view[0] + view[1]) / 2;
    let handled = true;
    if (k === "w" || k === "+" || k === "=") zoomAt(t, 0.7);
    else if (k === "s" || k === "-") zoomAt(t, 1 / 0.7);
    else if (k === "a" || k === "arrowleft") setView(view[0] - 0.2 * span, view[1] - 0.2 * span);
    else if (k === "d" || k === "arrowright") setView(view[0] + 0.2 * span, view[1] + 0.2 * span);
    else if (k === "f") fitPinned();
    else if (k === "/") search.focus();
    else if (k === "escape") { unpin(); model.set("selection_ms", []); model.save_changes(); }
    else handled = false;
    if (handled) { ev.preventDefault(); ev.stopPropagation(); }
  });

  reset.addEventListener("click", () => {
    const full = model.get("full_ms");
    setView(full[0], full[1]);
  });
  toSel.addEventListener("click", () => {
    const sel = model.get("selection_ms");
    if (sel && sel.length === 2) setView(sel[0], sel[1]);
  });

  function showFigures() {
    const lines = model.get("figure_lines") || [];
    panel.innerHTML = "";
    if (!lines.length) {
      panel.textContent = opts.figuresHint
        || "shift-drag across the lanes to select a stretch: its figures show here, and view.window_ms reads it";
      panel.classList.add("gtl-empty");
      return;
    }
    panel.classList.remove("gtl-empty");
    for (const line of lines) panel.appendChild(make("div", "", line));
  }

  function showLegend() {
    legend.innerHTML = "";
    const group = (label, items) => {
      if (!items.length) return;
      legend.appendChild(make("b", "", label));
      for (const [name, colour] of items) {
        const s = make("span");
        const sw = make("i");
        sw.style.background = colour;
        s.append(sw, document.createTextNode(name));
        legend.appendChild(s);
      }
    };
    group("kind", model.get("legend") || []);
    group("NVTX / ranges", model.get("phases") || []);
    for (const ov of model.get("overlays") || []) group(ov.name, ov.legend || []);
    legend.appendChild(make("span", "gtl-dim", "a bar shorter than its lane: the share of that pixel's time the lane is busy"));
  }

  title.textContent = model.get("title");
  origin.textContent = "time (ms) · " + (model.get("origin") || "");
  model.on("change:bins", draw);
  model.on("change:selection_ms", draw);
  model.on("change:view_ms", () => {
    const v = model.get("view_ms");
    if (!drag && v && (v[0] !== view[0] || v[1] !== view[1])) { view = v.slice(); draw(); }
  });
  model.on("change:hover_info", showTip);
  model.on("change:pinned", showPinned);
  model.on("change:search_result", onSearchResult);
  model.on("change:figure_lines", showFigures);
  model.on("change:overlays", () => { showLegend(); draw(); });
  showLegend();
  showFigures();
  const ro = new ResizeObserver(() => { draw(); sendView(); });
  ro.observe(el);
  draw();
  return {
    root,
    setView: (a, b) => setView(a, b),
    expandRank: (rank) => { if (groupsCollapsed.delete(rank)) draw(); },
    view: () => view.slice(),
    onView: (f) => viewListeners.push(f),
    destroy: () => {
      ro.disconnect();
      window.removeEventListener("mousemove", onMove);
      window.removeEventListener("mouseup", onUp);
    },
  };
}

function render({ model, el }) {
  const view = mount(el, model);
  return () => view.destroy();
}

export default { render };
