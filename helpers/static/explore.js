// Front end of helpers.explore: one canvas, lanes as plots.timeline draws them.
// Python holds the events; this file draws the bars it sends for the visible range and asks again
// (view_ms) after a zoom or pan. Wheel: zoom at the pointer. Drag: pan. Shift-drag: select a stretch.
// Hover: the event under the pointer (asked of Python: probe -> hover_info). Double-click: whole trace.

const LABEL_W = 200, TOP = 26, LANE_H = 24, AXIS_H = 26, RIGHT = 12, MIN_SPAN_MS = 0.001;

function niceStep(span, target) {
  const raw = span / target, p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const k of [1, 2, 5, 10]) if (k * p >= raw) return k * p;
  return 10 * p;
}

function fmtMs(v, step) {
  const digits = Math.max(0, Math.min(6, -Math.floor(Math.log10(step))));
  return v.toFixed(digits);
}

function render({ model, el }) {
  const make = (tag, cls, text) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text) node.textContent = text;
    return node;
  };
  const root = make("div", "gtl-explore");
  const bar = make("div", "gtl-bar");
  const title = make("span", "gtl-title");
  const hint = make("span", "gtl-hint", "wheel: zoom · drag: pan · shift-drag: select · double-click: whole trace");
  const reset = make("button", "", "whole trace");
  const toSel = make("button", "", "zoom to selection");
  bar.append(title, reset, toSel, hint);
  const canvas = make("canvas", "gtl-canvas");
  const tip = make("div", "gtl-tip");
  tip.style.display = "none";
  const legend = make("div", "gtl-legend");
  const panel = make("div", "gtl-figures");
  const wrap = make("div", "gtl-wrap");
  wrap.append(canvas, tip);
  root.append(bar, wrap, legend, panel);
  el.appendChild(root);

  let view = (model.get("view_ms") || [0, 1]).slice();
  let drag = null, hover = null, seq = 0, sendTimer = null, probeTimer = null;

  const plotW = () => Math.max(50, canvas.clientWidth - LABEL_W - RIGHT);
  const xOf = (t) => LABEL_W + ((t - view[0]) / (view[1] - view[0])) * plotW();
  const tOf = (x) => view[0] + ((x - LABEL_W) / plotW()) * (view[1] - view[0]);

  function publish() {
    // What a test (or a curious reader) can read off the page without reaching into the canvas.
    root.dataset.view = view.map((v) => v.toFixed(6)).join(",");
    root.dataset.plotLeft = String(LABEL_W);
    root.dataset.plotWidth = String(plotW());
    root.dataset.laneTop = String(TOP);
    root.dataset.laneHeight = String(LANE_H);
    const b = model.get("bins") || {};
    root.dataset.binsView = (b.view || []).map((v) => v.toFixed(6)).join(",");
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
    const fullSpan = full[1] - full[0];
    let span = Math.min(Math.max(b - a, MIN_SPAN_MS), fullSpan * 1.5 + MIN_SPAN_MS);
    const mid = (a + b) / 2;
    a = mid - span / 2;
    b = mid + span / 2;
    const slack = fullSpan * 0.25;  // pan a little past either end, not into empty time
    if (a < full[0] - slack) { a = full[0] - slack; b = a + span; }
    if (b > full[1] + slack) { b = full[1] + slack; a = b - span; }
    view = [a, b];
    draw();
    if (send) sendView();
  }

  function draw() {
    const labels = model.get("labels") || [];
    const colours = model.get("colours") || [];
    const cssW = Math.max(400, el.clientWidth || root.clientWidth || 900);
    const cssH = TOP + LANE_H * Math.max(labels.length, 1) + AXIS_H;
    const dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(cssH * dpr)) {
      canvas.width = Math.round(cssW * dpr);
      canvas.height = Math.round(cssH * dpr);
      canvas.style.width = cssW + "px";
      canvas.style.height = cssH + "px";
    }
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, cssW, cssH);
    g.font = "12px sans-serif";
    const pw = plotW(), span = view[1] - view[0];
    // grid and axis
    const step = niceStep(span, 8);
    g.strokeStyle = "#e4e4e4";
    g.fillStyle = "#444";
    g.textAlign = "center";
    g.textBaseline = "top";
    for (let t = Math.ceil(view[0] / step) * step; t <= view[1]; t += step) {
      const x = xOf(t);
      g.beginPath();
      g.moveTo(x, TOP - 4);
      g.lineTo(x, cssH - AXIS_H);
      g.stroke();
      g.fillText(fmtMs(t, step), x, cssH - AXIS_H + 4);
    }
    g.textAlign = "right";
    g.fillText("time (ms)", LABEL_W + pw, cssH - 12);
    // lanes
    const bins = model.get("bins") || {};
    const lanes = bins.lanes || [];
    g.save();
    g.beginPath();
    g.rect(LABEL_W, 0, pw, cssH);
    g.clip();
    lanes.forEach((ln, i) => {
      const y = TOP + i * LANE_H;
      const ranges = Array.isArray(ln.d);
      const names = [];  // drawn after the lane's bars: a deeper range drawn later would cover its phase's label
      for (let k = 0; k < ln.x0.length; k++) {
        const x0 = xOf(ln.x0[k]), x1 = xOf(ln.x1[k]);
        if (x1 < LABEL_W || x0 > LABEL_W + pw) continue;
        const h = ranges ? (LANE_H - 4) * (1 - 0.3 * ln.d[k]) : LANE_H - 6;
        g.fillStyle = colours[ln.c[k]] || "#999";
        g.globalAlpha = ranges ? 0.9 : 1;
        g.fillRect(x0, y + (LANE_H - h) / 2, Math.max(x1 - x0, 1), h);
        if (ranges && ln.d[k] === 1) {  // the phases, not their insides (as plots.timeline): nested names would overlap
          const a = Math.max(x0, LABEL_W), b = Math.min(x1, LABEL_W + pw);  // the range's part on screen
          if (g.measureText(ln.n[k]).width + 6 < b - a) names.push([ln.n[k], (a + b) / 2]);  // only where it fits
        }
      }
      g.globalAlpha = 1;
      g.fillStyle = "#000";
      g.textAlign = "center";
      g.textBaseline = "middle";
      names.forEach(([name, x]) => g.fillText(name, x, y + LANE_H / 2));
    });
    // the selected stretch
    const sel = drag && drag.mode === "select" ? [Math.min(drag.t0, drag.t1), Math.max(drag.t0, drag.t1)] : model.get("selection_ms");
    if (sel && sel.length === 2) {
      const x0 = xOf(sel[0]), x1 = xOf(sel[1]);
      g.fillStyle = "rgba(255, 200, 0, 0.22)";
      g.fillRect(x0, TOP - 4, Math.max(x1 - x0, 2), LANE_H * lanes.length + 4);
      g.strokeStyle = "rgba(200, 140, 0, 0.9)";
      g.strokeRect(x0, TOP - 4, Math.max(x1 - x0, 2), LANE_H * lanes.length + 4);
    }
    g.restore();
    // labels
    g.textAlign = "right";
    g.textBaseline = "middle";
    g.fillStyle = "#222";
    labels.forEach((lab, i) => g.fillText(lab, LABEL_W - 8, TOP + i * LANE_H + LANE_H / 2, LABEL_W - 12));
    g.textAlign = "left";
    g.textBaseline = "top";
    g.fillText(`${view[0].toFixed(3)} – ${view[1].toFixed(3)} ms`, LABEL_W, 6);
    publish();
  }

  function laneAt(y) {
    const i = Math.floor((y - TOP) / LANE_H);
    return i >= 0 && i < (model.get("labels") || []).length ? i : -1;
  }

  function pos(ev) {
    const r = canvas.getBoundingClientRect();
    return [ev.clientX - r.left, ev.clientY - r.top];
  }

  canvas.addEventListener("wheel", (ev) => {
    const [x] = pos(ev);
    if (x < LABEL_W) return;
    ev.preventDefault();
    const t = tOf(x), f = Math.exp(ev.deltaY * 0.0015);
    setView(t - (t - view[0]) * f, t + (view[1] - t) * f);
  }, { passive: false });

  canvas.addEventListener("mousedown", (ev) => {
    const [x] = pos(ev);
    if (x < LABEL_W) return;
    ev.preventDefault();
    drag = { mode: ev.shiftKey ? "select" : "pan", x0: x, t0: tOf(x), t1: tOf(x), view0: view.slice() };
    clearTimeout(probeTimer);
    seq += 1;  // a hover answer still on its way is stale now
    tip.style.display = "none";
  });

  window.addEventListener("mousemove", (ev) => {
    if (!drag) return;
    const [x] = pos(ev);
    if (drag.mode === "pan") {
      const dt = ((x - drag.x0) / plotW()) * (drag.view0[1] - drag.view0[0]);
      setView(drag.view0[0] - dt, drag.view0[1] - dt);
    } else {
      drag.t1 = tOf(x);
      draw();
    }
  });

  window.addEventListener("mouseup", (ev) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    if (d.mode === "select") {
      const [x] = pos(ev);
      const a = Math.min(d.t0, tOf(x)), b = Math.max(d.t0, tOf(x));
      model.set("selection_ms", Math.abs(x - d.x0) >= 3 ? [a, b] : []);
      model.save_changes();
    }
    draw();
  });

  canvas.addEventListener("dblclick", () => {
    const full = model.get("full_ms");
    setView(full[0], full[1]);
  });

  canvas.addEventListener("mousemove", (ev) => {
    if (drag) return;
    const [x, y] = pos(ev);
    const lane = laneAt(y);
    if (x < LABEL_W || lane < 0) {
      tip.style.display = "none";
      hover = null;
      return;
    }
    hover = { x, y };
    clearTimeout(probeTimer);
    probeTimer = setTimeout(() => {
      seq += 1;
      const tol = (3 * (view[1] - view[0])) / plotW();
      model.set("probe", { lane, t: tOf(x), tol, seq });
      model.save_changes();
    }, 40);
  });

  canvas.addEventListener("mouseleave", () => {
    hover = null;
    tip.style.display = "none";
  });

  reset.addEventListener("click", () => {
    const full = model.get("full_ms");
    setView(full[0], full[1]);
  });
  toSel.addEventListener("click", () => {
    const sel = model.get("selection_ms");
    if (sel && sel.length === 2) setView(sel[0], sel[1]);
  });

  function showTip() {
    const info = model.get("hover_info") || {};
    if (!hover || info.seq !== seq || !info.name) {
      tip.style.display = "none";
      return;
    }
    const esc = (s) => String(s).replace(/[&<>]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;" }[c]));
    let html = `<b>${esc(info.name)}</b><br>${esc(info.kind)}${info.copy ? " " + esc(info.copy) : ""} · ${esc(info.where)}`
      + `<br>start ${info.start_ms.toFixed(3)} ms · ${info.dur_us.toFixed(1)} µs`;
    for (const l of info.links || []) {
      html += `<br>${esc(info.link)}: ${esc(l.name)} (${esc(l.where)}, at ${l.start_ms.toFixed(3)} ms, ${l.dur_us.toFixed(1)} µs)`;
    }
    tip.innerHTML = html;
    tip.style.display = "block";
    const w = canvas.clientWidth;
    tip.style.left = Math.min(hover.x + 14, w - 320) + "px";
    // below the pointer, or above it near the bottom: the output area clips what overflows it
    const below = hover.y + 16, h = tip.offsetHeight;
    tip.style.top = (below + h > canvas.clientHeight ? Math.max(0, hover.y - h - 10) : below) + "px";
  }

  function showFigures() {
    const lines = model.get("figure_lines") || [];
    panel.innerHTML = "";
    if (!lines.length) {
      panel.textContent = "shift-drag across the lanes to select a stretch: its figures show here, and view.window_ms reads it";
      panel.classList.add("gtl-empty");
      return;
    }
    panel.classList.remove("gtl-empty");
    for (const line of lines) {
      const div = document.createElement("div");
      div.textContent = line;
      panel.appendChild(div);
    }
  }

  function showLegend() {
    legend.innerHTML = "";
    for (const [name, colour] of model.get("legend") || []) {
      const s = document.createElement("span");
      const sw = document.createElement("i");
      sw.style.background = colour;
      s.append(sw, document.createTextNode(name));
      legend.appendChild(s);
    }
  }

  title.textContent = model.get("title");
  model.on("change:bins", draw);
  model.on("change:selection_ms", draw);
  model.on("change:view_ms", () => {
    const v = model.get("view_ms");
    if (!drag && v && (v[0] !== view[0] || v[1] !== view[1])) { view = v.slice(); draw(); }
  });
  model.on("change:hover_info", showTip);
  model.on("change:figure_lines", showFigures);
  showLegend();
  showFigures();
  const ro = new ResizeObserver(() => { draw(); sendView(); });
  ro.observe(el);
  draw();
  return () => ro.disconnect();
}

export default { render };
