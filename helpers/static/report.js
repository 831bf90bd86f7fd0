// The report page (python -m helpers report): the timeline front end above (mount) given a model that answers
// in the page, from the data helpers/timeline_data.py laid out ahead of time; and the page's small behaviours
// (sortable tables, "show on the timeline" buttons, the heatmap's cells, the diff's filters and linked views).

const ROW_BITS = 2 ** 26;  // an event's id: lane * ROW_BITS + its index on the lane
const COPY_KINDS = new Set(["H2D", "D2H", "D2D", "H2H", "P2P"]);
const SEARCH_MAX = 5000;
// A /regex/ search runs in a Web Worker stopped after this long (plus a second per 32 MB of names), as the
// explorer's does in a child process: a pattern like ^(a|a)*$ backtracks for hours on a long name, and a page's own
// thread cannot be interrupted, so matching there would freeze the tab.
const SEARCH_TIMEOUT_MS = 3000;
const PATTERN_MAX = 10000;  // characters, as helpers.model.MAX_STEP_PATTERN_CHARS
const MATCHER_JS = `
let names = [];
onmessage = (ev) => {
  const m = ev.data;
  if (m.names) { names = m.names; return; }
  let re;
  try { re = new RegExp(m.source, "i"); } catch (err) { postMessage({ seq: m.seq, error: "not a regular expression: " + err.message }); return; }
  const hit = new Uint8Array(names.length);
  for (let i = 0; i < names.length; i++) if (re.test(names[i])) hit[i] = 1;
  postMessage({ seq: m.seq, hit }, [hit.buffer]);
};`;

class BoundedMatcher {
  // the names tested against a user's pattern in a worker that is terminated at the time limit (and started
  // again, the names sent again, for the next pattern); a newer pattern stops one still running
  constructor(names) {
    this.names = names;
    this.worker = null;
    this.pending = null;
    this.seq = 0;
    const chars = names.reduce((n, s) => n + s.length, 0);
    this.timeoutMs = SEARCH_TIMEOUT_MS + (chars / (32 << 20)) * 1000;
  }

  kill() {
    if (this.worker) this.worker.terminate();
    this.worker = null;
  }

  settle(ok, value) {
    const p = this.pending;
    if (!p) return;
    this.pending = null;
    clearTimeout(p.timer);
    if (ok) p.resolve(value); else p.reject(new Error(value));
  }

  run(source) {
    if (this.pending) { this.settle(false, "stopped: a newer search replaced it"); this.kill(); }
    if (typeof Worker === "undefined") {
      return Promise.reject(new Error("this browser cannot stop a pattern search that runs too long (no Web Workers): search by plain text"));
    }
    return new Promise((resolve, reject) => {
      const seq = ++this.seq;
      const timer = setTimeout(() => {
        this.kill();
        this.settle(false, `the pattern did not finish within ${(this.timeoutMs / 1000).toFixed(0)} s on these names and was stopped; write a simpler one (no nested repeats)`);
      }, this.timeoutMs);
      this.pending = { resolve, reject, timer };
      try {
        if (!this.worker) {
          const url = URL.createObjectURL(new Blob([MATCHER_JS], { type: "text/javascript" }));
          this.worker = new Worker(url);
          URL.revokeObjectURL(url);
          this.worker.postMessage({ names: this.names });
        }
        this.worker.onmessage = (ev) => {
          if (ev.data.seq !== seq) return;
          if (ev.data.error) this.settle(false, ev.data.error); else this.settle(true, ev.data.hit);
        };
        this.worker.onerror = (ev) => {
          ev.preventDefault();
          this.kill();
          this.settle(false, "the pattern search failed in this browser: " + (ev.message || "no reason given"));
        };
        this.worker.postMessage({ seq, source });
      } catch (err) {
        this.kill();
        this.settle(false, "this browser cannot stop a pattern search that runs too long (" + err.message + "): search by plain text");
      }
    });
  }
}

function base64Bytes(text) {
  const s = atob(text.trim());
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

async function inflate(text) {
  const stream = new Blob([base64Bytes(text)]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

function varints(bytes, ref, cumulative = false) {
  const [offset, count] = ref;
  const out = new Float64Array(count);
  let p = offset, run = 0;
  for (let i = 0; i < count; i++) {
    let x = 0, mul = 1, b;
    do { b = bytes[p++]; x += (b & 127) * mul; mul *= 128; } while (b & 128);
    if (cumulative) { run += x; out[i] = run; } else out[i] = x;
  }
  return out;
}

function lowerBound(arr, x, lo = 0, hi = arr.length) {  // first index with arr[i] >= x
  while (lo < hi) { const mid = (lo + hi) >> 1; if (arr[mid] < x) lo = mid + 1; else hi = mid; }
  return lo;
}

class Timeline {
  // the decoded data of one timeline, and the answers the widget's Python side gives. The levels (what the first
  // draw and every zoomed-out view read) are decoded at once; each lane's events when first needed, and all of
  // them in the background after the first draw.
  constructor(meta, bytes) {
    this.meta = meta;
    this.bytes = bytes;
    this.decoded = meta.lanes.map(() => null);
    meta.lane_info.forEach((info, i) => { if (info.kind === "ranges") this.lane(i); });
    this.levels = meta.levels.map((lv) => ({
      px: lv.px_ms,
      lanes: lv.lanes.map((r) => (r ? { x: varints(bytes, r.x, true), n: varints(bytes, r.n), c: varints(bytes, r.c), f: varints(bytes, r.f) } : null)),
    }));
    this.overlayLevels = meta.overlays.map((ov) => ov.levels.map((lv) => ({
      px: lv.px_ms, x: varints(bytes, lv.x, true), n: varints(bytes, lv.n), c: varints(bytes, lv.c) })));
    this.overlayDetail = meta.overlays.map(() => null);
    this.byCorr = null;
  }

  get lanes() {  // every lane's events (decodes what is not yet)
    return this.meta.lanes.map((_, i) => this.lane(i));
  }

  lane(i) {
    if (this.decoded[i]) return this.decoded[i];
    const ln = this.meta.lanes[i], bytes = this.bytes, t0 = this.meta.t0_ms;
    const s = varints(bytes, ln.s, true), d = varints(bytes, ln.d);
    const start = new Float64Array(ln.n), end = new Float64Array(ln.n), endMax = new Float64Array(ln.n);
    let run = -Infinity;
    for (let k = 0; k < ln.n; k++) {
      start[k] = t0 + s[k] / 1e6;
      end[k] = start[k] + d[k] / 1e6;
      run = Math.max(run, end[k]);
      endMax[k] = run;
    }
    this.decoded[i] = { n: ln.n, start, end, endMax, colour: varints(bytes, ln.c), name: varints(bytes, ln.m),
      corr: varints(bytes, ln.k), depth: ln.p ? varints(bytes, ln.p) : null, bytes: ln.b ? varints(bytes, ln.b) : null };
    return this.decoded[i];
  }

  decodeInBackground(done) {  // one lane a tick, so the page stays responsive
    const next = this.decoded.findIndex((d) => !d);
    if (next < 0) { if (done) done(); return; }
    this.lane(next);
    setTimeout(() => this.decodeInBackground(done), 0);
  }

  overlayStretches(j) {
    if (!this.overlayDetail[j]) {
      const ov = this.meta.overlays[j], bytes = this.bytes, t0 = this.meta.t0_ms;
      const s = varints(bytes, ov.s, true), d = varints(bytes, ov.d);
      const start = new Float64Array(ov.n), end = new Float64Array(ov.n);
      for (let k = 0; k < ov.n; k++) { start[k] = t0 + s[k] / 1e6; end[k] = start[k] + d[k] / 1e6; }
      this.overlayDetail[j] = { start, end, kind: varints(bytes, ov.c), detail: varints(bytes, ov.m) };
    }
    return this.overlayDetail[j];
  }

  overlayIn(j, a, b, W) {
    // a track's stretches in [a, b): from a level when one is fine enough; else those a pixel or wider as they
    // are, and narrower ones merged into their pixel, coloured by the kind that covers most of it
    const meta = this.meta.overlays[j], p = (b - a) / W, t0 = this.meta.t0_ms;
    const out = { x0: [], x1: [], c: [], label: [], detail: [] };
    const level = this.overlayLevels[j].find((lv) => lv.px <= p);
    if (level) {
      let k = Math.max(lowerBound(level.x, (a - t0) / level.px) - 1, 0);
      for (; k < level.x.length; k++) {
        const s = t0 + level.x[k] * level.px, e = s + level.n[k] * level.px;
        if (s >= b) break;
        if (e <= a) continue;
        out.x0.push(s); out.x1.push(e); out.c.push(meta.colours[level.c[k]]); out.label.push(meta.labels[level.c[k]]);
        out.detail.push("zoom in for the stretches one by one");
      }
      return out;
    }
    const ov = this.overlayStretches(j);
    let col = -1, colBest = -1, colAmount = 0, colCover = new Map();
    const flush = () => {
      if (col < 0) return;
      const last = out.x0.length - 1, x0 = a + col * p;
      if (last >= 0 && out.detail[last] === null && out.c[last] === meta.colours[colBest] && Math.abs(out.x1[last] - x0) < p * 1e-6) out.x1[last] = x0 + p;
      else { out.x0.push(x0); out.x1.push(x0 + p); out.c.push(meta.colours[colBest]); out.label.push(meta.labels[colBest]); out.detail.push(null); }
      col = -1; colCover = new Map(); colAmount = 0;
    };
    for (let k = Math.max(lowerBound(ov.start, a) - 1, 0); k < ov.start.length && ov.start[k] < b; k++) {
      const s = ov.start[k], e = ov.end[k];
      if (e <= a) continue;
      if (e - s >= p) {
        flush();
        out.x0.push(s); out.x1.push(e); out.c.push(meta.colours[ov.kind[k]]); out.label.push(meta.labels[ov.kind[k]]);
        out.detail.push(this.meta.names[ov.detail[k]]);
        continue;
      }
      const c = Math.floor((Math.max(s, a) - a) / p);
      if (c !== col) { flush(); col = c; }
      const amount = (colCover.get(ov.kind[k]) || 0) + (e - s);
      colCover.set(ov.kind[k], amount);
      if (amount > colAmount) { colAmount = amount; colBest = ov.kind[k]; }
    }
    flush();
    out.detail = out.detail.map((d) => d || "several stretches in this pixel: zoom in");
    return out;
  }

  inDetail(a, b) {
    const d = this.meta.detail_ms;
    return !d || (a >= d[0] && b <= d[1]);
  }

  overlapping(i, a, b) {  // [first, last) of the lane's events that may overlap [a, b)
    const ln = this.lane(i);
    return [lowerBound(ln.endMax, a + 1e-12), lowerBound(ln.start, b)];
  }

  columns(i, a, b, W) {
    const p = (b - a) / W, info = this.meta.lane_info[i];
    const busy = new Float64Array(W), byColour = new Map();
    const add = (s, e, c, frac) => {
      if (e <= a || s >= b) return;
      const xs = (Math.max(s, a) - a) / p, xe = (Math.min(e, b) - a) / p;
      let arr = byColour.get(c);
      if (!arr) { arr = new Float64Array(W); byColour.set(c, arr); }
      const last = Math.min(Math.ceil(xe) - 1, W - 1);
      for (let col = Math.max(Math.floor(xs), 0); col <= last; col++) {
        const amount = (Math.min(xe, col + 1) - Math.max(xs, col)) * frac;
        if (amount > 0) { busy[col] += amount; arr[col] += amount; }
      }
    };
    // a level when one is fine enough (the coarsest such), else the events, else the finest level there is
    let level = null;
    for (const lv of this.levels) if (lv.lanes[i] && lv.px <= p) { level = lv; break; }
    const finest = [...this.levels].reverse().find((lv) => lv.lanes[i]);
    const useDetail = !level && (this.inDetail(a, b) || !finest);
    if (!useDetail) {
      const lv = level || finest, r = lv.lanes[i], t0 = this.meta.t0_ms;
      let k = Math.max(lowerBound(r.x, (a - t0) / lv.px) - 1, 0);
      for (; k < r.x.length; k++) {
        const s = t0 + r.x[k] * lv.px;
        if (s >= b) break;
        add(s, s + r.n[k] * lv.px, r.c[k], r.f[k] / 100);
      }
    } else {
      const ln = this.lane(i), [i0, i1] = this.overlapping(i, a, b), open = new Map();
      for (let k = i0; k < i1; k++) {  // a union per colour: nested ops count once
        const c = ln.colour[k], s = ln.start[k], e = ln.end[k], cur = open.get(c);
        if (cur && s <= cur[1]) { if (e > cur[1]) cur[1] = e; continue; }
        if (cur) add(cur[0], cur[1], c, 1);
        open.set(c, [s, e]);
      }
      for (const [c, cur] of open) add(cur[0], cur[1], c, 1);
    }
    const x = [], n = [], c = [], f = [];
    for (let col = 0; col < W; col++) {
      if (busy[col] <= 1e-9) continue;
      const pct = Math.max(1, Math.min(100, Math.round(busy[col] * 100)));
      let best = -1, bestV = -1;
      for (const [key, arr] of byColour) if (arr[col] > bestV) { bestV = arr[col]; best = key; }
      const last = x.length - 1;
      if (last >= 0 && x[last] + n[last] === col && c[last] === best && f[last] === pct) n[last]++;
      else { x.push(col); n.push(1); c.push(best); f.push(pct); }
    }
    void info;
    return { x, n, c, f };
  }

  ranges(i, a, b, W) {
    const ln = this.lane(i), p = (b - a) / W, out = { x0: [], x1: [], c: [], d: [], n: [] };
    const [i0, i1] = this.overlapping(i, a, b);
    for (let k = i0; k < i1; k++) {
      if (ln.end[k] <= a || ln.end[k] - ln.start[k] < p || (ln.depth && ln.depth[k] > 2)) continue;
      out.x0.push(ln.start[k]); out.x1.push(ln.end[k]); out.c.push(ln.colour[k]);
      out.d.push(ln.depth ? ln.depth[k] : 0); out.n.push(this.meta.names[ln.name[k]]);
    }
    return out;
  }

  bins(view, width) {
    const [a, b] = view, W = Math.max(1, Math.round(width));
    return { view: [a, b], width: W,
      lanes: this.meta.lane_info.map((info, i) => (info.kind === "ranges" ? this.ranges(i, a, b, W) : this.columns(i, a, b, W))),
      overlays: this.meta.overlays.map((_, j) => this.overlayIn(j, a, b, W)) };
  }

  eventAt(i, t, tol) {
    if (i < 0 || i >= this.meta.lanes.length) return -1;
    const ln = this.lane(i), [i0, i1] = this.overlapping(i, t - tol, t + tol);
    let best = -1, bestD = Infinity, bestLen = Infinity;
    for (let k = i0; k < i1; k++) {
      if (ln.depth && ln.depth[k] > 2) continue;
      const s = ln.start[k], e = ln.end[k];
      if (e < t - tol || s > t + tol) continue;
      const dist = Math.max(s - t, t - e, 0), len = e - s;
      if (dist < bestD || (dist === bestD && len < bestLen)) { best = k; bestD = dist; bestLen = len; }
    }
    return best;
  }

  kindOf(i, k) {
    if (this.meta.lane_info[i].kind === "ranges") return ["annotation", ""];
    const name = this.meta.colour_names[this.lane(i).colour[k]] || "event";
    return COPY_KINDS.has(name) ? ["memcpy", name] : [name, ""];
  }

  brief(i, k) {
    const ln = this.lane(i), [kind, copy] = this.kindOf(i, k);
    const info = { name: this.meta.names[ln.name[k]], kind, row: i * ROW_BITS + k, lane: i, start_ms: ln.start[k],
      end_ms: ln.end[k], dur_us: (ln.end[k] - ln.start[k]) * 1e3, where: this.meta.where[i], depth: ln.depth ? ln.depth[k] : 0 };
    if (copy) info.copy = copy;
    return info;
  }

  linked(i, k) {
    const corr = this.lane(i).corr[k] - 1;
    if (corr < 0) return [];
    if (!this.byCorr) {  // built on the first hover that needs it
      this.byCorr = new Map();
      this.lanes.forEach((ln, li) => {
        const rank = this.meta.ranks[li];
        for (let j = 0; j < ln.n; j++) {
          if (ln.corr[j] <= 0) continue;
          const key = rank * 2 ** 32 + ln.corr[j];
          const list = this.byCorr.get(key);
          if (list) list.push(li * ROW_BITS + j); else this.byCorr.set(key, [li * ROW_BITS + j]);
        }
      });
    }
    const onGpu = (li) => ["gpu", "copy"].includes(this.meta.lane_info[li].kind);
    const mine = onGpu(i);
    return (this.byCorr.get(this.meta.ranks[i] * 2 ** 32 + corr + 1) || [])
      .filter((row) => row !== i * ROW_BITS + k && onGpu(Math.floor(row / ROW_BITS)) !== mine);
  }

  describe(i, k) {
    const ln = this.lane(i), info = this.brief(i, k);
    info.rank = this.meta.ranks[i];
    const step = this.meta.steps.find(([r, , a, b]) => r === info.rank && info.start_ms >= a && info.start_ms < b);
    info.step = step ? step[1] : -1;
    if (ln.bytes && ln.bytes[k] > 0) info.bytes = ln.bytes[k];
    if (ln.corr[k] > 0) info.correlation = ln.corr[k] - 1;
    const links = this.linked(i, k).slice(0, 8).map((row) => this.brief(Math.floor(row / ROW_BITS), row % ROW_BITS));
    if (links.length) {
      info.link = ["gpu", "copy"].includes(this.meta.lane_info[i].kind) ? "launched by" : "launched";
      info.links = links;
    }
    return info;
  }

  search(q) {
    // a plain text search answers at once (an escaped literal cannot backtrack); a /regex/ one as a promise, from
    // the bounded matcher
    q = (q || "").trim();
    const none = { total: 0, names: 0, matches: [] };
    if (!q) return none;
    if (!(q.length > 2 && q.startsWith("/") && q.endsWith("/"))) {
      const re = new RegExp(q.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "i");
      return this.matchesOf(Uint8Array.from(this.meta.names, (nm) => (re.test(nm) ? 1 : 0)));
    }
    if (q.length > PATTERN_MAX) return { ...none, error: `a pattern of ${q.length.toLocaleString()} characters: over ${PATTERN_MAX.toLocaleString()}` };
    try {
      new RegExp(q.slice(1, -1), "i");  // only parsed here: a syntax error is answered without a worker
    } catch (err) {
      return { ...none, error: "not a regular expression: " + err.message };
    }
    if (!this.matcher) this.matcher = new BoundedMatcher(this.meta.names);
    return this.matcher.run(q.slice(1, -1)).then((hit) => this.matchesOf(hit), (err) => ({ ...none, error: err.message }));
  }

  matchesOf(hit) {  // hit[name id] = 1 for a matched name: its events, in time order
    let names = 0;
    for (let id = 0; id < hit.length; id++) names += hit[id];
    const all = [];
    this.lanes.forEach((ln, i) => {
      for (let k = 0; k < ln.n; k++) if (hit[ln.name[k]]) all.push([i, ln.start[k], ln.end[k], i * ROW_BITS + k]);
    });
    all.sort((x, y) => x[1] - y[1]);
    return { total: all.length, names, matches: all.slice(0, SEARCH_MAX) };
  }

  figures(a, b) {
    const lines = [`${a.toFixed(3)}-${b.toFixed(3)} ms (${(b - a).toFixed(3)} ms)`];
    if (!this.inDetail(a, b)) {
      const d = this.meta.detail_ms;
      return lines.concat([`this report keeps the events of ${d[0].toFixed(1)}-${d[1].toFixed(1)} ms one by one: select inside it for figures`]);
    }
    const devices = new Map();  // (rank, GPU) -> its lanes' busy intervals (every GPU drawn, busy or not)
    const deviceOf = (info) => `${info.rank}:${info.label.replace(/^rank \d+ · /, "").split(" ")[1]}`;
    this.meta.lane_info.forEach((info) => { if (info.kind === "gpu" || info.kind === "copy") devices.set(deviceOf(info), []); });
    let kernels = 0, kernelMs = 0, api = 0;
    const copies = new Map();
    this.lanes.forEach((ln, i) => {
      const info = this.meta.lane_info[i], [i0, i1] = this.overlapping(i, a, b);
      const gpu = info.kind === "gpu" || info.kind === "copy";
      const key = gpu ? deviceOf(info) : null;
      for (let k = i0; k < i1; k++) {
        const s = Math.max(ln.start[k], a), e = Math.min(ln.end[k], b);
        if (e <= s && !(ln.start[k] >= a && ln.start[k] < b)) continue;
        const [kind, copy] = this.kindOf(i, k);
        if (gpu) devices.get(key).push([s, e]);
        if (kind === "kernel" && gpu) { kernels++; kernelMs += e - s; }
        if (copy) { const c = copies.get(copy) || [0, 0]; c[0]++; c[1] += e - s; copies.set(copy, c); }
        if (info.kind === "api") api++;
      }
    });
    let best = null;
    for (const [key, iv] of devices) {
      iv.sort((x, y) => x[0] - y[0]);
      let busy = 0, cs = -Infinity, ce = -Infinity;
      for (const [s, e] of iv) { if (s > ce) { if (ce > cs) busy += ce - cs; cs = s; ce = e; } else ce = Math.max(ce, e); }
      if (ce > cs) busy += ce - cs;
      if (!best || busy > best[1]) best = [key, busy];
    }
    if (best) lines.push(`GPU busy ${Math.round((100 * best[1]) / (b - a))}% (${best[1].toFixed(3)} ms)`);
    if (devices.size) lines.push(`kernels ${kernels} (${kernelMs.toFixed(3)} ms)`);
    lines.push("copies " + ([...copies].map(([d, c]) => `${d} ${c[0]} (${c[1].toFixed(3)} ms)`).join(", ") || "none"));
    lines.push(`CUDA API calls ${api}`);
    lines.push("(counted from the events drawn; python -m helpers diagnose and summary give the trace's own figures)");
    return lines;
  }
}

class LocalModel {
  // what anywidget's model does for the widget, answered by a Timeline instead of Python
  constructor(tl) {
    const m = tl.meta;
    this.tl = tl;
    this.state = { title: m.title, origin: m.origin, labels: m.labels, lane_info: m.lane_info, colours: m.colours,
      legend: m.legend, phases: m.phases, overlays: m.overlays.map((o) => ({ name: o.name, legend: o.legend })), full_ms: m.full_ms, view_ms: m.full_ms.slice(),
      width_px: 800, bins: {}, hover_info: {}, pinned: {}, search_result: {}, selection_ms: [], figure_lines: [] };
    this.handlers = {};
    this.pending = new Set();
  }

  get(key) { return this.state[key]; }
  set(key, value) { this.state[key] = value; this.pending.add(key); this.emit(key); }
  on(event, fn) { (this.handlers[event] = this.handlers[event] || []).push(fn); }
  emit(key) { for (const fn of this.handlers["change:" + key] || []) fn(); }

  save_changes() {
    const keys = this.pending;
    this.pending = new Set();
    setTimeout(() => this.answer(keys), 0);  // a round trip, as with Python: never inside the caller's handler
  }

  reply(key, value) { this.state[key] = value; this.emit(key); }

  row(p) {
    if (p.row !== undefined) {
      const i = Math.floor(p.row / ROW_BITS), k = p.row % ROW_BITS;
      return i < this.tl.meta.lanes.length && k < this.tl.meta.lanes[i].n ? [i, k] : null;
    }
    const k = this.tl.eventAt(p.lane === undefined ? -1 : p.lane, p.t || 0, p.tol || 0);
    return k >= 0 ? [p.lane, k] : null;
  }

  answer(keys) {
    const s = this.state;
    if (keys.has("view_ms") || keys.has("width_px")) this.reply("bins", this.tl.bins(s.view_ms, s.width_px));
    if (keys.has("probe")) {
      const p = s.probe || {}, at = this.row(p);
      this.reply("hover_info", { seq: p.seq || 0, ...(at ? this.tl.describe(at[0], at[1]) : {}) });
    }
    if (keys.has("pin")) {
      const p = s.pin || {}, at = p.row !== undefined || p.lane !== undefined ? this.row(p) : null;
      this.reply("pinned", { seq: p.seq || 0, ...(at ? this.tl.describe(at[0], at[1]) : {}) });
    }
    if (keys.has("search_query")) {
      const q = s.search_query || {}, seq = q.seq || 0;
      Promise.resolve(this.tl.search(q.q)).then((res) => {
        if (((this.state.search_query || {}).seq || 0) === seq) this.reply("search_result", { seq, q: q.q || "", ...res });
      });
    }
    if (keys.has("selection_ms")) {
      const sel = s.selection_ms || [];
      this.reply("figure_lines", sel.length === 2 && sel[1] > sel[0] ? this.tl.figures(sel[0], sel[1]) : []);
    }
  }
}

// --- the page ---------------------------------------------------------------------------------------
const views = [];

async function mountTimelines() {
  const metas = JSON.parse(document.getElementById("gtl-timelines").textContent);
  const t0 = performance.now();
  const hosts = [...document.querySelectorAll(".timeline-host")];
  if (typeof DecompressionStream === "undefined") {
    hosts.forEach((h) => { h.querySelector(".loading").textContent = "This browser cannot unpack the timeline (it needs DecompressionStream: Chrome 80, Firefox 113, Safari 16.4 or later)."; });
    return;
  }
  for (const host of hosts) {
    const i = Number(host.dataset.timeline), meta = metas[i];
    try {
      const bytes = await inflate(document.getElementById(`gtl-blob-${i}`).textContent);
      const model = new LocalModel(new Timeline(meta, bytes));
      host.querySelector(".loading").remove();
      views[i] = mount(host, model, { collapsedRanks: meta.collapsed_ranks,
        figuresHint: "shift-drag across the lanes to select a stretch: its figures show here" });
      views[i].model = model;
    } catch (err) {
      host.querySelector(".loading").textContent = "The timeline could not be drawn: " + err;
      throw err;
    }
  }
  document.body.dataset.timelinesMs = String(Math.round(performance.now() - t0));  // unpacked and drawn
  document.body.dataset.drawnAt = String(Math.round(performance.now()));  // since the page began to load
  linkViews();
  views.forEach((v, i) => v && v.model.tl.decodeInBackground(() => { document.body.dataset[`decoded${i}`] = "1"; }));
}

function linkViews() {
  const box = document.getElementById("link-views");
  if (!box || views.length < 2) return;
  let busy = false;
  views.forEach((v, i) => v.onView((range) => {
    if (busy || !box.checked) return;
    busy = true;
    views.forEach((o, j) => { if (j !== i) o.setView(range[0], range[1]); });
    busy = false;
  }));
}

function showWindow(el) {
  const v = views[Number(el.dataset.timeline || 0)];
  if (!v) return;
  const [a, b] = el.dataset.window.split(",").map(Number);
  if (el.dataset.rank !== undefined && v.expandRank) v.expandRank(Number(el.dataset.rank));
  const pad = (b - a) * 0.05;
  v.setView(a - pad, b + pad);
  v.root.scrollIntoView({ behavior: "smooth", block: "start" });
}

function sortable(table) {
  table.querySelectorAll("th").forEach((th, col) => {
    th.addEventListener("click", () => {
      const body = table.tBodies[0], rows = [...body.rows], num = th.dataset.type === "num";
      const dir = th.dataset.dir === "desc" ? 1 : -1;  // numbers sort largest first on the first click
      table.querySelectorAll("th").forEach((h) => { delete h.dataset.dir; });
      th.dataset.dir = dir === 1 ? "asc" : "desc";
      const key = (r) => (num ? parseFloat(r.cells[col].dataset.v) : r.cells[col].textContent.toLowerCase());
      rows.sort((x, y) => {
        const a = key(x), b = key(y);
        if (num) { const an = Number.isNaN(a), bn = Number.isNaN(b); if (an || bn) return an - bn; return (a - b) * dir; }
        return a < b ? -dir : a > b ? dir : 0;
      });
      rows.forEach((r) => body.appendChild(r));
    });
  });
}

document.querySelectorAll("table.sortable").forEach(sortable);
document.querySelectorAll("[data-window]").forEach((el) => el.addEventListener("click", () => showWindow(el)));
document.querySelectorAll("button.filter").forEach((b) => b.addEventListener("click", () => {
  document.querySelectorAll("button.filter").forEach((o) => o.classList.toggle("on", o === b));
  const want = b.dataset.status;
  document.querySelectorAll("#diff tbody tr").forEach((r) => {
    r.style.display = !want || r.classList.contains("st-" + want.replace(" ", "-")) ? "" : "none";
  });
}));
mountTimelines();
