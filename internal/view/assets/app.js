// proctor view: the page. It reads /api/* of the proctor process that
// served it and loads nothing else. Every view's state is in the URL's
// hash (#/page?param=...), so that a URL shows the same view to anyone
// given it. Text from records is only ever set as text, never as HTML.
'use strict';

const root = document.getElementById('main');
// Each render makes its view apart (the pages take it as main) and puts it
// in the page once it is whole, unless another render started since (back,
// forward, a new URL): two renders never mix.
let rendering = 0;
let RUNS = [];

// h makes an element: h('a', {href: '#', class: 'x', onclick: fn}, 'text', child).
function h(tag, attrs, ...kids) {
  const el = tag === 'svg' || SVG_TAGS.has(tag) ? document.createElementNS('http://www.w3.org/2000/svg', tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else if (k === 'style') el.style.cssText = v; // CSSOM: allowed by the page's CSP, unlike a style attribute
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
const SVG_TAGS = new Set(['rect', 'line', 'text', 'g', 'title', 'path', 'polyline']);

async function api(path) {
  const resp = await fetch(path);
  const body = await resp.json();
  if (!resp.ok) throw new Error(body.error || resp.statusText);
  return body;
}

function num(v, digits = 4) {
  if (v === undefined || v === null || Number.isNaN(v)) return '–';
  return Number(v).toFixed(digits);
}
// money shows dollars to the cent's hundredth, and a smaller amount (an
// agent's call) to two significant digits.
function money(v) {
  if (v === undefined || v === null) return 'unknown';
  const n = Number(v);
  return '$' + (n !== 0 && Math.abs(n) < 0.001 ? n.toPrecision(2) : n.toFixed(4));
}
function int(v) { return v === undefined || v === null ? '–' : Number(v).toLocaleString('en-US'); }

// route is the hash's page and parameters.
function route() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, query] = hash.split('?');
  return { page: path.replace(/^\//, '') || 'runs', params: new URLSearchParams(query || '') };
}
// hashOf is the URL hash of a page with params (empty ones left out).
function hashOf(page, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return '#/' + page + (s ? '?' + s : '');
}
function go(page, params) { location.hash = hashOf(page, params); }
// setParams changes the URL's parameters without leaving the view.
function setParams(params, replace) {
  const url = hashOf(route().page, params);
  if (replace) history.replaceState(null, '', url); else history.pushState(null, '', url);
}

function problem(err) { return h('p', { class: 'problem', role: 'alert' }, String(err.message || err)); }

async function render() {
  const { page, params } = route();
  for (const id of ['runs', 'samples', 'compare']) {
    const a = document.getElementById('nav-' + id);
    if (id === page) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  const token = ++rendering;
  const view = h('div');
  root.setAttribute('aria-busy', 'true');
  try {
    if (!RUNS.length) RUNS = await api('/api/runs');
    if (page === 'samples') await samplesPage(params, view);
    else if (page === 'compare') await comparePage(params, view);
    else runsPage(params, view);
  } catch (e) {
    view.replaceChildren(problem(e));
  }
  if (token === rendering) {
    root.replaceChildren(view);
    root.removeAttribute('aria-busy');
  }
}
window.addEventListener('hashchange', render);
window.addEventListener('popstate', render);

// ---- runs ----

function phaseBadge(run) {
  if (!run.phase) return null;
  const cls = run.phase === 'Succeeded' ? 'good' : run.phase === 'Failed' ? 'bad' : 'warn';
  return h('span', { class: 'badge ' + cls }, run.phase + (run.reason ? ' (' + run.reason + ')' : ''));
}

function gateLine(gate) {
  if (!gate) return null;
  if (gate.incomplete) return h('p', {}, h('span', { class: 'badge warn' }, 'Gate: no verdict'), ' ', gate.incomplete);
  if (gate.passed) return h('p', {}, h('span', { class: 'badge good' }, '✓ Gate passed'));
  return h('p', {}, h('span', { class: 'badge bad' }, '✗ Gate failed'), ' ', (gate.violations || []).join('; '));
}

// scoreBar draws a mean as a bar with its 95% interval as a line.
function scoreBar(mean, iv) {
  const w = 120, ht = 14;
  const x = (v) => Math.max(0, Math.min(1, v)) * w;
  const svg = h('svg', { width: w + 2, height: ht, role: 'img', 'aria-label': `mean ${num(mean)}` + (iv ? `, 95% interval ${num(iv.lo)} to ${num(iv.hi)}` : '') },
    h('rect', { x: 0, y: 2, width: w, height: ht - 4, fill: '#eef1f4' }),
    h('rect', { class: 'bar', x: 0, y: 3, width: x(mean), height: ht - 6 }));
  if (iv) svg.append(h('line', { class: 'interval', x1: x(iv.lo), x2: x(iv.hi), y1: ht / 2, y2: ht / 2 }),
    h('line', { class: 'interval', x1: x(iv.lo), x2: x(iv.lo), y1: 2, y2: ht - 2 }),
    h('line', { class: 'interval', x1: x(iv.hi), x2: x(iv.hi), y1: 2, y2: ht - 2 }));
  return svg;
}

// barChart draws labelled horizontal bars.
function barChart(title, items, format) {
  const max = Math.max(...items.map((i) => i.value), 0) || 1;
  const rowH = 18, labelW = 160, w = 220;
  const svg = h('svg', { width: labelW + w + 90, height: items.length * rowH + 4, role: 'img', 'aria-label': title });
  items.forEach((it, i) => {
    const y = i * rowH + 2;
    svg.append(h('text', { x: 0, y: y + 12 }, it.label),
      h('rect', { class: 'bar', x: labelW, y: y + 2, width: (it.value / max) * w, height: rowH - 6 }),
      h('text', { x: labelW + (it.value / max) * w + 4, y: y + 12 }, format(it.value)));
  });
  return h('figure', {}, svg, h('figcaption', {}, title));
}

function runsPage(params, main) {
  main.append(h('h1', {}, 'Runs'));
  const base = h('select', { id: 'compare-base', 'aria-label': 'Baseline run' }, RUNS.map((r) => h('option', { value: r.id }, `${r.id}: ${r.source}`)));
  const cand = h('select', { id: 'compare-cand', 'aria-label': 'Candidate run' }, RUNS.map((r) => h('option', { value: r.id }, `${r.id}: ${r.source}`)));
  if (RUNS.length > 1) cand.value = RUNS[1].id;
  main.append(h('form', { class: 'toolbar', onsubmit: (e) => { e.preventDefault(); go('compare', { base: base.value, cand: cand.value }); } },
    h('label', {}, 'Compare ', base), h('label', {}, ' with ', cand), h('button', { type: 'submit' }, 'Compare'),
    h('a', { href: '/api/summary/export?format=csv', download: '' }, 'Export CSV'),
    h('a', { href: '/api/summary/export?format=jsonl', download: '' }, 'Export JSONL')));
  if (RUNS.length > 1) main.append(trends(params.get('trend') || ''));

  const costs = [], errors = [];
  for (const run of RUNS) {
    const sec = h('section', { 'aria-labelledby': 'run-' + run.id });
    sec.append(h('h2', { id: 'run-' + run.id }, `Run ${run.id}: ${run.source} `, phaseBadge(run)));
    sec.append(h('p', {}, `${int(run.samples)} samples. `,
      h('a', { href: `#/samples?run=${run.id}` }, 'Samples'), ' · ',
      h('a', { href: `#/samples?run=${run.id}&status=errored` }, `Errored (${int(Object.values(run.errors).reduce((a, b) => a + b, 0))})`),
      ' · ', h('a', { href: `#/samples?run=${run.id}&status=wrong` }, 'Wrong')));
    const gate = gateLine(run.summary.gate);
    if (gate) sec.append(gate);
    const metrics = run.metrics;
    const table = h('table', { class: 'plain' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Model'), h('th', {}, 'Dataset'), h('th', { class: 'num' }, 'Done'), h('th', { class: 'num' }, 'Errored'),
        metrics.map((m) => h('th', {}, m, h('span', { class: 'muted' }, ' (mean, 95% interval)'))),
        h('th', { class: 'num' }, 'Latency p50 / p95'), h('th', { class: 'num' }, 'Tokens in / out'), h('th', { class: 'num' }, 'Cost'))));
    const body = h('tbody');
    for (const s of run.summary.results || []) {
      const cost = s.cost && s.cost.model !== undefined ? s.cost.model : null;
      const judge = s.cost && s.cost.judge !== undefined && s.cost.judge !== null ? s.cost.judge : 0;
      body.append(h('tr', {},
        h('td', {}, s.model), h('td', {}, s.dataset), h('td', { class: 'num' }, `${int(s.completed)} / ${int(s.total)}`), h('td', { class: 'num' }, int(s.errored)),
        metrics.map((m) => {
          const v = s.metrics ? s.metrics[m] : undefined;
          const iv = s.intervals ? s.intervals[m] : undefined;
          if (v === undefined) return h('td', { class: 'muted' }, '–');
          return h('td', {}, scoreBar(v, iv), ' ', num(v), iv ? h('span', { class: 'muted' }, ` [${num(iv.lo)}, ${num(iv.hi)}]`) : null);
        }),
        h('td', { class: 'num' }, s.latencyMillis ? `${int(s.latencyMillis.p50)} / ${int(s.latencyMillis.p95)} ms` : '–'),
        h('td', { class: 'num' }, s.tokens ? `${int(s.tokens.input)} / ${int(s.tokens.output)}` : '–'),
        h('td', { class: 'num' }, cost === null ? 'unknown' : money(cost + judge))));
      if (cost !== null) costs.push({ label: `${run.id}: ${s.model} / ${s.dataset}`, value: cost + judge });
    }
    table.append(body);
    sec.append(table);
    for (const [kind, n] of Object.entries(run.errors)) errors.push({ label: `${run.id}: ${kind}`, value: n });
    const c = run.summary.comparison;
    if (c) sec.append(comparisonTable(c));
    main.append(sec);
  }
  const charts = h('div', { class: 'charts' });
  if (costs.length) charts.append(barChart('Cost per model and dataset (dollars)', costs, money));
  if (errors.length) charts.append(barChart('Errored samples by kind', errors, int));
  if (charts.children.length) main.append(h('h2', {}, 'Charts'), charts);
}

// ---- trends ----

// MEASURES are what a trend can follow across runs, besides each metric:
// [key, label, value(summary) or null, whether more is better].
const MEASURES = [
  ['cost', 'Cost ($)', (s) => (s.cost && s.cost.model !== undefined && s.cost.model !== null ? s.cost.model + (s.cost.judge || 0) : null)],
  ['errored', 'Errored share', (s) => (s.total ? s.errored / s.total : null)],
  ['p50', 'Latency p50 (ms)', (s) => (s.latencyMillis ? s.latencyMillis.p50 : null)],
  ['p95', 'Latency p95 (ms)', (s) => (s.latencyMillis ? s.latencyMillis.p95 : null)],
];

// trendRuns are the runs in time order: by when they started if every one
// says, else in the order given.
function trendRuns() {
  const runs = RUNS.slice();
  if (runs.every((r) => r.startedAt)) runs.sort((a, b) => Date.parse(a.startedAt) - Date.parse(b.startedAt));
  return runs;
}

// trends shows a measure of each model on each dataset across the runs: a
// chart (each series with its own marker and dash, not colour alone) and
// the same numbers as a table.
function trends(key) {
  const metrics = [...new Set(RUNS.flatMap((r) => r.metrics))];
  key = key || (metrics[0] ? 'metric:' + metrics[0] : 'cost');
  const options = [...metrics.map((m) => ['metric:' + m, m + ' (mean, 95% interval)']), ...MEASURES.map(([k, l]) => [k, l])];
  const pick = h('select', { name: 'trend', 'aria-label': 'Measure' }, options.map(([v, t]) => h('option', { value: v, selected: v === key }, t)));
  pick.addEventListener('change', () => go('runs', { trend: pick.value }));
  const measure = MEASURES.find(([k]) => k === key);
  const metric = key.startsWith('metric:') ? key.slice(7) : null;
  const value = (s) => (metric ? (s.metrics && s.metrics[metric] !== undefined ? s.metrics[metric] : null) : measure ? measure[2](s) : null);
  const interval = (s) => (metric && s.intervals ? s.intervals[metric] || null : null);
  const runs = trendRuns();
  const series = new Map();
  runs.forEach((run, x) => {
    for (const s of run.summary.results || []) {
      const name = `${s.model} / ${s.dataset}`;
      if (!series.has(name)) series.set(name, []);
      const v = value(s);
      if (v !== null && !Number.isNaN(v)) series.get(name).push({ x, v, iv: interval(s), run });
    }
  });
  const label = options.find(([v]) => v === key);
  const title = `${label ? label[1] : key} across ${runs.length} runs` + (runs.every((r) => r.startedAt) ? ', in the order they started' : ', in the order given');
  const fmt = key === 'cost' ? money : key === 'errored' ? (v) => (100 * v).toFixed(1) + '%' : key.startsWith('p') ? (v) => int(Math.round(v)) + ' ms' : (v) => num(v, 3);
  const table = h('table', { class: 'plain' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Model / dataset'), runs.map((r) => h('th', { class: 'num' }, `Run ${r.id}`)))),
    h('tbody', {}, [...series].map(([name, pts]) => h('tr', {}, h('th', {}, name), runs.map((r) => {
      const p = pts.find((q) => q.run === r);
      return h('td', { class: 'num' }, p ? fmt(p.v) + (p.iv ? ` [${num(p.iv.lo, 3)}, ${num(p.iv.hi, 3)}]` : '') : '–');
    })))));
  return h('section', { 'aria-labelledby': 'trends' }, h('h2', { id: 'trends' }, 'Trends'),
    h('div', { class: 'toolbar' }, h('label', {}, 'Measure ', pick)),
    trendChart(title, runs, series, fmt), h('details', {}, h('summary', {}, 'These values as a table'), table));
}

const MARKERS = [
  (x, y) => `M${x - 4},${y}a4,4 0 1,0 8,0a4,4 0 1,0 -8,0`, // circle
  (x, y) => `M${x - 4},${y - 4}h8v8h-8z`, // square
  (x, y) => `M${x},${y - 5}l5,9h-10z`, // triangle
  (x, y) => `M${x},${y - 5}l5,5l-5,5l-5,-5z`, // diamond
  (x, y) => `M${x - 4},${y - 4}l8,8m0,-8l-8,8`, // cross
];
const DASHES = ['', '6 3', '2 3', '8 3 2 3', '1 2'];
const COLOURS = ['#2458b3', '#b3261e', '#1b7a3d', '#8a5a00', '#6b3fa0', '#00707a'];

function trendChart(title, runs, series, fmt) {
  const w = 640, ht = 220, left = 80, bottom = 46, top = 10, right = 60;
  const all = [...series.values()].flat();
  let lo = Math.min(...all.map((p) => (p.iv ? p.iv.lo : p.v))), hi = Math.max(...all.map((p) => (p.iv ? p.iv.hi : p.v)));
  if (!all.length) { lo = 0; hi = 1; }
  if (lo === hi) { lo -= 0.5; hi += 0.5; }
  const pad = (hi - lo) * 0.08;
  lo -= pad; hi += pad;
  const X = (x) => left + (runs.length === 1 ? 0 : (x * (w - left - right)) / (runs.length - 1));
  const Y = (v) => top + (ht - top - bottom) * (1 - (v - lo) / (hi - lo));
  const svg = h('svg', { width: w, height: ht, role: 'img', 'aria-label': title + '. The same values are in the table below.' });
  for (let i = 0; i <= 4; i++) {
    const v = lo + ((hi - lo) * i) / 4;
    svg.append(h('line', { class: 'gridline', x1: left, x2: w - right, y1: Y(v), y2: Y(v) }), h('text', { x: 2, y: Y(v) + 4 }, fmt(v)));
  }
  runs.forEach((r, x) => {
    svg.append(h('text', { x: X(x), y: ht - bottom + 16, 'text-anchor': 'middle' }, `Run ${r.id}`));
    if (r.startedAt) svg.append(h('text', { class: 'muted', x: X(x), y: ht - bottom + 30, 'text-anchor': 'middle' }, r.startedAt.slice(0, 16).replace('T', ' ')));
  });
  const legend = h('ul', { class: 'legend' });
  [...series].forEach(([name, pts], i) => {
    const colour = COLOURS[i % COLOURS.length], dash = DASHES[i % DASHES.length];
    const marker = MARKERS[i % MARKERS.length];
    const g = h('g', { style: `color:${colour}` });
    if (pts.length > 1) g.append(h('polyline', { class: 'trend', points: pts.map((p) => `${X(p.x)},${Y(p.v)}`).join(' '), 'stroke-dasharray': dash || undefined }));
    for (const p of pts) {
      if (p.iv) g.append(h('line', { class: 'whisker', x1: X(p.x), x2: X(p.x), y1: Y(p.iv.lo), y2: Y(p.iv.hi) }));
      g.append(h('path', { class: 'marker', d: marker(X(p.x), Y(p.v)) },
        h('title', {}, `${name}, run ${p.run.id}: ${fmt(p.v)}` + (p.iv ? ` [${num(p.iv.lo, 3)}, ${num(p.iv.hi, 3)}]` : ''))));
    }
    svg.append(g);
    const key = h('svg', { width: 34, height: 12, 'aria-hidden': 'true' },
      h('g', { style: `color:${colour}` }, h('line', { class: 'trend', x1: 0, x2: 34, y1: 6, y2: 6, 'stroke-dasharray': dash || undefined }), h('path', { class: 'marker', d: marker(17, 6) })));
    legend.append(h('li', {}, key, ' ', name));
  });
  return h('figure', {}, svg, legend, h('figcaption', {}, title));
}

// comparisonTable shows runner/compare's report.
function comparisonTable(rep) {
  const rows = [];
  for (const r of rep.results || []) {
    for (const m of r.metrics || []) {
      const worse = m.diff < 0 && m.pValue < 0.05, better = m.diff > 0 && m.pValue < 0.05;
      rows.push(h('tr', {},
        h('td', {}, r.model + (r.baselineModel !== r.model ? ` vs ${r.baselineModel}` : '')), h('td', {}, r.dataset), h('td', { class: 'num' }, int(r.paired)),
        h('td', {}, m.metric), h('td', { class: 'num' }, num(m.baseline)), h('td', { class: 'num' }, num(m.current)),
        h('td', { class: 'num ' + (worse ? 'regressed' : better ? 'improved' : '') },
          (worse ? '▼ ' : better ? '▲ ' : '') + (m.diff >= 0 ? '+' : '') + num(m.diff),
          h('span', { class: 'muted' }, ` [${num(m.interval.lo)}, ${num(m.interval.hi)}]`)),
        h('td', { class: 'num' }, m.pValue.toPrecision(3)), h('td', {}, m.test),
        h('td', { class: 'num' }, `${int(m.regressed)} / ${int(m.improved)}`)));
    }
  }
  return h('div', {}, h('h3', {}, 'Compared with ', rep.baseline),
    h('table', { class: 'plain' },
      h('thead', {}, h('tr', {}, ['Model', 'Dataset', 'Paired', 'Metric', 'Baseline', 'Current', 'Difference [95% interval]', 'p', 'Test', 'Regressed / improved samples'].map((t) => h('th', {}, t)))),
      h('tbody', {}, rows)));
}

// ---- a virtualised table ----

// grid shows rows fetched a page at a time, drawing only those in view.
// opts: columns [{key, label, width, sort, render(row)}], fetch(offset,
// limit) -> {total, rows}, sort {key, desc}, onSort(key), onOpen(row),
// isOpen(row).
function grid(opts) {
  const ROW = 28, PAGE = 200;
  const pages = new Map();
  let total = 0, active = -1;
  const width = opts.columns.reduce((a, c) => a + c.width, 0);
  const body = h('div', { class: 'body', role: 'rowgroup' });
  const head = h('div', { class: 'head', role: 'row', style: `width:${width}px` },
    opts.columns.map((c) => {
      const sorted = opts.sort && opts.sort.key === c.sort;
      const label = c.sort ? h('button', { type: 'button', onclick: () => opts.onSort(c.sort), title: 'Sort by ' + c.label },
        c.label + (sorted ? (opts.sort.desc ? ' ▼' : ' ▲') : '')) : c.label;
      return h('div', { class: 'cell', role: 'columnheader', style: `width:${c.width}px`,
        'aria-sort': sorted ? (opts.sort.desc ? 'descending' : 'ascending') : (c.sort ? 'none' : undefined) }, label);
    }));
  const el = h('div', { class: 'grid', role: 'grid', tabindex: 0, 'aria-label': opts.label, 'aria-rowcount': 0 }, head, body);

  async function page(p) {
    if (!pages.has(p)) pages.set(p, opts.fetch(p * PAGE, PAGE).then((res) => { total = res.total; return res.rows; }));
    return pages.get(p);
  }
  function rowAt(i) {
    const p = pages.get(Math.floor(i / PAGE));
    return p && p.done ? p.done[i % PAGE] : undefined;
  }
  let drawing = false, again = false;
  async function draw() {
    if (drawing) { again = true; return; }
    drawing = true;
    try {
      const top = el.scrollTop, height = el.clientHeight || 400;
      const first = Math.max(0, Math.floor(top / ROW) - 10), last = Math.floor((top + height) / ROW) + 10;
      for (let p = Math.floor(first / PAGE); p <= Math.floor(last / PAGE); p++) {
        const rows = await page(p);
        pages.get(p).done = rows;
      }
      body.style.height = `${total * ROW}px`;
      el.setAttribute('aria-rowcount', total + 1);
      body.replaceChildren();
      for (let i = first; i <= Math.min(last, total - 1); i++) {
        const row = rowAt(i);
        if (!row) continue;
        const r = h('div', { class: 'row', role: 'row', 'aria-rowindex': i + 2, 'aria-selected': i === active ? 'true' : 'false',
          style: `top:${i * ROW}px;width:${width}px`, onclick: () => { select(i); opts.onOpen(row); } },
          opts.columns.map((c) => {
            const v = c.render(row);
            return h('div', { class: 'cell', role: 'gridcell', style: `width:${c.width}px`, title: typeof v === 'string' ? v : undefined }, v);
          }));
        body.append(r);
      }
      if (opts.onCount) opts.onCount(total);
    } catch (e) {
      body.replaceChildren(problem(e));
    } finally {
      drawing = false;
      if (again) { again = false; draw(); }
    }
  }
  function select(i) {
    active = Math.max(0, Math.min(i, total - 1));
    const top = active * ROW, view = el.clientHeight - ROW;
    if (top < el.scrollTop) el.scrollTop = top;
    else if (top > el.scrollTop + view - ROW) el.scrollTop = top - view + ROW;
    draw();
  }
  el.addEventListener('scroll', () => requestAnimationFrame(draw));
  el.addEventListener('keydown', async (e) => {
    const step = { ArrowDown: 1, ArrowUp: -1, PageDown: 15, PageUp: -15 }[e.key];
    if (step !== undefined) { e.preventDefault(); select(active < 0 ? 0 : active + step); }
    else if (e.key === 'Home') { e.preventDefault(); select(0); }
    else if (e.key === 'End') { e.preventDefault(); select(total - 1); }
    else if (e.key === 'Enter' && active >= 0) {
      e.preventDefault();
      await page(Math.floor(active / PAGE));
      const row = rowAt(active);
      if (row) opts.onOpen(row);
    }
  });
  setTimeout(draw, 0);
  return el;
}

// ---- samples ----

function runOf(id) { return RUNS.find((r) => r.id === id) || RUNS[0]; }

const FILTERS = ['model', 'dataset', 'status', 'kind', 'error', 'metric', 'minScore', 'maxScore', 'minLatency', 'maxLatency', 'minCost', 'maxCost', 'q', 'sort', 'order'];

function filterQuery(params) {
  const q = new URLSearchParams();
  for (const k of FILTERS) if (params.get(k)) q.set(k, params.get(k));
  return q;
}

function select(name, label, options, value) {
  return h('label', {}, label, h('select', { name }, options.map(([v, t]) => h('option', { value: v, selected: v === value }, t))));
}
function input(name, label, value, cls, type) {
  return h('label', {}, label, h('input', { name, value: value || '', class: cls, type: type || 'text', inputmode: cls === 'short' ? 'decimal' : undefined }));
}

async function samplesPage(params, main) {
  const run = runOf(params.get('run'));
  const all = Object.fromEntries(params.entries());
  all.run = run.id;
  const p = (k) => params.get(k) || '';
  main.append(h('h1', {}, `Samples of run ${run.id}: ${run.source}`));

  const form = h('form', { class: 'filters', 'aria-label': 'Filters' },
    select('run', 'Run', RUNS.map((r) => [r.id, `${r.id}: ${r.source}`]), run.id),
    select('model', 'Model', [['', 'all'], ...run.models.map((m) => [m, m])], p('model')),
    select('dataset', 'Dataset', [['', 'all'], ...run.datasets.map((d) => [d, d])], p('dataset')),
    select('status', 'Samples', [['', 'all'], ['correct', 'correct'], ['wrong', 'wrong'], ['errored', 'errored']], p('status')),
    select('kind', 'Error kind', [['', 'any'], ...Object.keys(run.errors).map((k) => [k, `${k} (${run.errors[k]})`])], p('kind')),
    select('metric', 'Metric', run.metrics.map((m) => [m, m]), p('metric') || run.metrics[0] || ''),
    input('minScore', 'Score ≥', p('minScore'), 'short'), input('maxScore', 'Score ≤', p('maxScore'), 'short'),
    input('minLatency', 'Latency ≥ ms', p('minLatency'), 'short'), input('maxLatency', 'Latency ≤ ms', p('maxLatency'), 'short'),
    input('minCost', 'Cost ≥ $', p('minCost'), 'short'), input('maxCost', 'Cost ≤ $', p('maxCost'), 'short'),
    input('q', 'Text in id, input, output, expected', p('q'), '', 'search'),
    h('button', { type: 'submit' }, 'Apply'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const next = { run: form.run.value };
    for (const k of FILTERS) { const f = form.elements[k]; if (f && f.value) next[k] = f.value; }
    if (next.run !== run.id) { go('samples', { run: next.run }); return; }
    next.sort = p('sort'); next.order = p('order'); next.error = p('error');
    go('samples', next);
  });
  for (const s of form.querySelectorAll('select')) s.addEventListener('change', () => form.requestSubmit());
  main.append(form);
  if (p('error')) {
    main.append(h('p', { class: 'toolbar' }, 'Samples whose error reads: ', h('code', {}, p('error')), ' ',
      h('a', { href: hashOf('samples', { ...all, error: '', sm: '', sd: '', sid: '' }) }, 'Show all errors')));
  }

  const q = filterQuery(params);
  const count = h('span', { role: 'status' }, '');
  main.append(h('div', { class: 'toolbar' }, count,
    h('a', { href: `/api/runs/${run.id}/export?format=csv&${q}`, download: '' }, 'Export CSV'),
    h('a', { href: `/api/runs/${run.id}/export?format=jsonl&${q}`, download: '' }, 'Export JSONL')));

  const detail = h('section', { class: 'detail', 'aria-label': 'Sample', 'aria-live': 'polite' }, h('p', { class: 'muted' }, 'Select a sample (click, or arrow keys and Enter).'));
  const sort = p('sort') ? { key: p('sort'), desc: p('order') === 'desc' } : null;
  const columns = [
    { key: 'id', label: 'Id', width: 130, sort: 'id', render: (r) => r.id },
    { key: 'model', label: 'Model', width: 100, sort: 'model', render: (r) => r.model },
    { key: 'dataset', label: 'Dataset', width: 100, sort: 'dataset', render: (r) => r.dataset },
    ...run.metrics.map((m) => ({ key: m, label: m, width: Math.max(70, 9 * m.length + 24), sort: 'score:' + m, render: (r) => (r.scores[m] === undefined ? '–' : num(r.scores[m], 3)) })),
    { key: 'error', label: 'Error', width: 80, sort: 'error', render: (r) => (r.error ? '⚠ ' + r.error : '') },
    { key: 'latency', label: 'Latency', width: 80, sort: 'latency', render: (r) => int(r.latencyMillis) + ' ms' },
    { key: 'cost', label: 'Cost', width: 85, sort: 'cost', render: (r) => (r.cost === null ? '–' : money(r.cost)) },
    { key: 'in', label: 'In', width: 70, sort: 'inputTokens', render: (r) => int(r.inputTokens) },
    { key: 'out', label: 'Out', width: 70, sort: 'outputTokens', render: (r) => int(r.outputTokens) },
    { key: 'attempts', label: 'Tries', width: 55, sort: 'attempts', render: (r) => int(r.attempts) },
  ];
  const open = async (row) => {
    setParams({ ...all, sm: row.model, sd: row.dataset, sid: row.id }, true);
    await showSample(detail, run, row.model, row.dataset, row.id);
  };
  const table = grid({
    label: 'Samples', columns, sort,
    fetch: (offset, limit) => api(`/api/runs/${run.id}/samples?${q}&offset=${offset}&limit=${limit}`),
    onSort: (key) => go('samples', { ...all, sort: key, order: sort && sort.key === key && !sort.desc ? 'desc' : 'asc', sm: '', sd: '', sid: '' }),
    onOpen: open,
    onCount: (n) => { count.textContent = `${int(n)} of ${int(run.samples)} samples`; },
  });
  main.append(h('div', { class: 'split' }, table, detail));
  if (params.get('sid')) showSample(detail, run, p('sm'), p('sd'), p('sid'));

  const errs = h('section', { 'aria-labelledby': 'error-groups' });
  main.append(errs);
  api(`/api/runs/${run.id}/errors?${q}`).then((res) => {
    if (!res.errored) return;
    errs.append(h('h2', { id: 'error-groups' }, `Errors of these samples, by message (${int(res.errored)})`),
      h('p', { class: 'muted' }, 'Messages that differ only in numbers, ids and times (shown as #; HTTP statuses kept) are one group.'),
      h('table', { class: 'plain' },
        h('thead', {}, h('tr', {}, ['Samples', 'Kind', 'Message (the first sample\'s)', ''].map((t) => h('th', {}, t)))),
        h('tbody', {}, res.groups.map((g) => h('tr', {},
          h('td', { class: 'num' }, int(g.count)), h('td', {}, g.kind), h('td', {}, h('span', { class: 'message' }, g.message)),
          h('td', {}, h('a', { href: hashOf('samples', { run: run.id, status: 'errored', kind: g.kind, error: g.pattern }) }, 'Show these'), ' · ',
            h('a', { href: hashOf('samples', { ...all, sm: g.example.model, sd: g.example.dataset, sid: g.example.id }) }, 'Open the first')))))));
  }).catch((e) => errs.append(problem(e)));

  const charts = h('div', { class: 'charts' });
  main.append(h('h2', {}, 'Charts of these samples'), charts);
  const metric = p('metric') || run.metrics[0];
  const fields = [];
  if (metric) fields.push(['score:' + metric, `Scores of ${metric}`, (v) => num(v, 2)]);
  fields.push(['latency', 'Latency (ms)', (v) => int(Math.round(v))], ['cost', 'Cost ($)', (v) => num(v, 4)]);
  for (const [field, title, fmt] of fields) {
    api(`/api/runs/${run.id}/histogram?${q}&field=${encodeURIComponent(field)}&bins=20`)
      .then((hg) => charts.append(histogramChart(title, hg, fmt)))
      .catch((e) => charts.append(problem(e)));
  }
}

function histogramChart(title, hg, fmt) {
  const w = 320, ht = 120, n = hg.counts.length;
  const max = Math.max(...hg.counts, 1);
  const svg = h('svg', { width: w, height: ht + 30, role: 'img', 'aria-label': `${title}: ${hg.counts.join(', ')} samples in ${n} bins from ${fmt(hg.min)} to ${fmt(hg.max)}` });
  hg.counts.forEach((c, i) => {
    const bh = (c / max) * ht, bw = w / n;
    svg.append(h('rect', { class: 'bar', x: i * bw + 1, y: ht - bh, width: Math.max(bw - 2, 1), height: bh },
      h('title', {}, `${fmt(hg.min + (i * (hg.max - hg.min)) / n)}–${fmt(hg.min + ((i + 1) * (hg.max - hg.min)) / n)}: ${c}`)));
  });
  svg.append(h('text', { x: 0, y: ht + 14 }, fmt(hg.min)), h('text', { x: w - 60, y: ht + 14 }, fmt(hg.max)));
  const none = hg.none ? ` (${int(hg.none)} without a value)` : '';
  return h('figure', {}, svg, h('figcaption', {}, title + none));
}

function field(label, value) {
  if (value === undefined || value === null || value === '') return null;
  return [h('h3', {}, label), typeof value === 'string' ? h('pre', {}, value) : value];
}

function text(v) {
  if (v === undefined || v === null) return '';
  return typeof v === 'string' ? v : JSON.stringify(v, null, 2);
}

function inputText(input) {
  if (!input) return '';
  if (typeof input === 'string') return input;
  if (Array.isArray(input)) return input.map((m) => `[${m.role}]\n${m.content || ''}`).join('\n\n');
  return JSON.stringify(input, null, 2);
}

async function showSample(el, run, model, dataset, id) {
  try {
    const rec = await api(`/api/runs/${run.id}/sample?model=${encodeURIComponent(model)}&dataset=${encodeURIComponent(dataset)}&id=${encodeURIComponent(id)}`);
    const scores = Object.entries(rec.scores || {}).map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', { class: 'num' }, num(v)),
      h('td', { class: 'error' }, rec.scoreErrors && rec.scoreErrors[k] ? rec.scoreErrors[k] : '')));
    const facts = [
      ['Attempts', int(rec.attempts)], ['Latency', `${int(rec.latencyMillis)} ms`],
      ['Tokens in / out', `${int(rec.inputTokens)} / ${int(rec.outputTokens)}`],
      ['Judge tokens in / out', rec.judgeInputTokens ? `${int(rec.judgeInputTokens)} / ${int(rec.judgeOutputTokens)}` : null],
      ['Cost', rec.cost === undefined ? 'unknown' : money(rec.cost)], ['Judge cost', rec.judgeCost === undefined ? null : money(rec.judgeCost)],
      ['Batch', rec.batch], ['Agent calls', rec.agentCalls ? int(rec.agentCalls) : null],
      ['Started', rec.startedAt], ['Ended', rec.endedAt], ['Rescored', rec.rescored ? 'yes: an earlier answer, scored again' : null],
    ].filter(([, v]) => v !== null && v !== undefined);
    el.replaceChildren(...[
      h('h2', {}, `${model} · ${dataset} · ${id}`),
      rec.error ? h('p', { class: 'error' }, `⚠ ${rec.errorKind || 'error'}: ${rec.error}`) : null,
      h('table', { class: 'plain' }, h('tbody', {}, scores)),
      field('Input', inputText(rec.input)),
      field('Output', rec.output + (rec.outputTruncated ? `\n… (cut: ${int(rec.outputBytes)} bytes in all)` : '')),
      field('Expected', text(rec.expected)),
      rec.toolCalls ? field('Tool calls', text(rec.toolCalls)) : null,
      ...Object.entries(rec.reasons || {}).map(([k, v]) => field(`Judge ${k}: reasoning`, v)),
      h('table', { class: 'plain' }, h('tbody', {}, facts.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v))))),
      proxiedCalls(rec),
    ].flat().filter(Boolean));
  } catch (e) {
    el.replaceChildren(problem(e));
  }
}

// proxiedCalls lists the calls an agent made through its endpoints' proxy,
// each with when it started (from the sample's start), its answer and cost.
function proxiedCalls(rec) {
  const calls = rec.proxiedCalls || [];
  if (!calls.length) return null;
  const t0 = Date.parse(rec.startedAt || calls[0].startedAt);
  const rows = calls.map((c, i) => h('tr', {},
    h('td', { class: 'num' }, i + 1), h('td', { class: 'num' }, `+${((Date.parse(c.startedAt) - t0) / 1000).toFixed(2)} s`),
    h('td', {}, c.endpoint), h('td', {}, c.model || '–'), h('td', {}, c.path),
    h('td', { class: c.status >= 200 && c.status < 300 ? '' : 'error' }, c.status ? String(c.status) : 'none (the agent went away)'),
    h('td', { class: 'num' }, int(c.attempts)), h('td', { class: 'num' }, `${int(c.latencyMillis)} ms`),
    h('td', { class: 'num' }, `${int(c.inputTokens || 0)} / ${int(c.outputTokens || 0)}`),
    h('td', { class: 'num' }, c.cost === undefined ? 'unknown' : money(c.cost)),
    h('td', { class: 'error' }, c.error || '')));
  const more = rec.agentCalls > calls.length ? h('p', { class: 'muted' }, `The first ${int(calls.length)} of ${int(rec.agentCalls)} calls.`) : null;
  return [h('h3', {}, 'Agent calls'), more,
    h('div', { class: 'wide' }, h('table', { class: 'plain', 'aria-label': 'Agent calls' },
      h('thead', {}, h('tr', {}, ['#', 'Started', 'Endpoint', 'Model', 'Path', 'Status', 'Tries', 'Latency', 'Tokens in / out', 'Cost', 'Error'].map((t) => h('th', {}, t)))),
      h('tbody', {}, rows)))];
}

// ---- compare ----

async function comparePage(params, main) {
  const p = (k) => params.get(k) || '';
  const base = runOf(p('base') || RUNS[0].id), cand = runOf(p('cand') || (RUNS[1] || RUNS[0]).id);
  const all = Object.fromEntries(params.entries());
  all.base = base.id; all.cand = cand.id;
  main.append(h('h1', {}, `Run ${cand.id} compared with run ${base.id}`));
  const metrics = cand.metrics.filter((m) => base.metrics.includes(m));
  const form = h('form', { class: 'filters', 'aria-label': 'Comparison' },
    select('base', 'Baseline', RUNS.map((r) => [r.id, `${r.id}: ${r.source}`]), base.id),
    select('cand', 'Candidate', RUNS.map((r) => [r.id, `${r.id}: ${r.source}`]), cand.id),
    select('metric', 'Metric', metrics.map((m) => [m, m]), p('metric') || metrics[0] || ''),
    select('baselineModel', 'Against baseline model', [['', 'the same model'], ...base.models.map((m) => [m, m])], p('baselineModel')),
    select('change', 'Pairs', [['', 'all'], ['regressed', 'regressed'], ['improved', 'improved'], ['same', 'unchanged']], p('change')),
    select('model', 'Model', [['', 'all'], ...cand.models.map((m) => [m, m])], p('model')),
    h('button', { type: 'submit' }, 'Compare'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const next = {};
    for (const k of ['base', 'cand', 'metric', 'baselineModel', 'change', 'model']) next[k] = form.elements[k].value;
    go('compare', next);
  });
  for (const s of form.querySelectorAll('select')) s.addEventListener('change', () => form.requestSubmit());
  main.append(form);

  const q = new URLSearchParams();
  for (const k of ['base', 'cand', 'metric', 'baselineModel', 'change', 'model']) if (all[k]) q.set(k, all[k]);
  const first = await api(`/api/compare?${q}&limit=1`);
  main.append(h('div', { class: 'toolbar' },
    h('a', { href: `/api/compare/export?format=csv&${q}`, download: '' }, 'Export CSV'),
    h('a', { href: `/api/compare/export?format=jsonl&${q}`, download: '' }, 'Export JSONL')));
  main.append(h('p', { role: 'status' },
    h('span', { class: 'regressed' }, `▼ ${int(first.regressed)} regressed`), ' · ',
    h('span', { class: 'improved' }, `▲ ${int(first.improved)} improved`), ' · ',
    `= ${int(first.same)} unchanged`, h('span', { class: 'muted' }, ` on ${first.metric} (pairs: ${int(first.total)} shown)`)));
  main.append(comparisonTable(first.report));
  for (const r of first.report.results || []) {
    const notes = [];
    if (r.paired === 0) notes.push(`${r.model} on ${r.dataset}: no sample pairs with the baseline`);
    if (r.byPosition) notes.push(`${r.model} on ${r.dataset}: paired by position`);
    for (const n of notes) main.append(h('p', { class: 'muted' }, n));
  }

  const sides = h('section', { class: 'sides', 'aria-label': 'Pair', 'aria-live': 'polite' }, h('p', { class: 'muted' }, 'Select a pair to see both outputs side by side.'));
  const change = (d) => (d === null ? '?' : d < 0 ? '▼ regressed' : d > 0 ? '▲ improved' : '= same');
  const columns = [
    { key: 'change', label: 'Change', width: 110, render: (r) => h('span', { class: r.delta < 0 ? 'regressed' : r.delta > 0 ? 'improved' : '' }, change(r.delta)) },
    { key: 'model', label: 'Model', width: 110, render: (r) => r.model + (r.baselineModel !== r.model ? ` vs ${r.baselineModel}` : '') },
    { key: 'dataset', label: 'Dataset', width: 100, render: (r) => r.dataset },
    { key: 'id', label: 'Id', width: 150, render: (r) => r.id },
    { key: 'base', label: 'Baseline', width: 95, render: (r) => num(r.base, 3) },
    { key: 'cand', label: 'Candidate', width: 100, render: (r) => num(r.cand, 3) },
    { key: 'delta', label: 'Δ', width: 70, render: (r) => (r.delta === null ? '–' : (r.delta > 0 ? '+' : '') + num(r.delta, 3)) },
    { key: 'errors', label: 'Errors', width: 120, render: (r) => [r.baseError, r.candError].filter(Boolean).join(' → ') },
  ];
  const table = grid({
    label: 'Pairs, regressions first', columns,
    fetch: (offset, limit) => api(`/api/compare?${q}&offset=${offset}&limit=${limit}`).then((res) => ({ total: res.total, rows: res.pairs })),
    onOpen: async (row) => {
      setParams({ ...all, pm: row.model, pd: row.dataset, pid: row.id }, true);
      await showPair(sides, base, cand, row);
    },
  });
  main.append(table, sides);
  if (p('pid')) showPair(sides, base, cand, { model: p('pm'), baselineModel: p('baselineModel') || p('pm'), dataset: p('pd'), id: p('pid') });
}

async function showPair(el, base, cand, row) {
  try {
    const get = (run, model) => api(`/api/runs/${run.id}/sample?model=${encodeURIComponent(model)}&dataset=${encodeURIComponent(row.dataset)}&id=${encodeURIComponent(row.id)}`);
    const [b, c] = await Promise.all([get(base, row.baselineModel || row.model), get(cand, row.model)]);
    const [left, right] = diff(b.output || '', c.output || '');
    const side = (title, rec, out) => h('div', { class: 'side' }, h('h3', {}, title),
      rec.error ? h('p', { class: 'error' }, `⚠ ${rec.errorKind || 'error'}: ${rec.error}`) : null,
      h('p', {}, Object.entries(rec.scores || {}).map(([k, v]) => `${k} ${num(v, 3)}`).join(' · ')),
      h('pre', { 'aria-label': title + ' output' }, out));
    el.replaceChildren(
      h('h2', { style: 'grid-column: 1 / -1' }, `${row.model} · ${row.dataset} · ${row.id}`),
      side(`Baseline (run ${base.id}, ${row.baselineModel || row.model})`, b, left),
      side(`Candidate (run ${cand.id}, ${row.model})`, c, right),
      b.expected !== undefined ? h('div', { style: 'grid-column: 1 / -1' }, h('h3', {}, 'Expected'), h('pre', {}, text(b.expected))) : null);
  } catch (e) {
    el.replaceChildren(problem(e));
  }
}

// diff marks what differs between two texts, word by word (a longest
// common subsequence; long texts are compared line by line): removed
// words in the left, added ones in the right, both also marked by <del>
// and <ins> for screen readers, not by colour alone.
function diff(a, b) {
  const byLine = a.length + b.length > 40000;
  const split = (s) => (byLine ? s.split(/(\n)/) : s.split(/(\s+)/)).filter((t) => t !== '');
  const x = split(a), y = split(b);
  if (x.length * y.length > 4e6) return [document.createTextNode(a), document.createTextNode(b)];
  const m = x.length, n = y.length;
  const L = Array.from({ length: m + 1 }, () => new Uint32Array(n + 1));
  for (let i = m - 1; i >= 0; i--) for (let j = n - 1; j >= 0; j--) L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const left = document.createDocumentFragment(), right = document.createDocumentFragment();
  let i = 0, j = 0;
  while (i < m || j < n) {
    if (i < m && j < n && x[i] === y[j]) { left.append(x[i]); right.append(y[j]); i++; j++; }
    else if (j < n && (i >= m || L[i][j + 1] >= L[i + 1][j])) { right.append(h('ins', {}, y[j])); j++; }
    else { left.append(h('del', {}, x[i])); i++; }
  }
  return [left, right];
}

render();
