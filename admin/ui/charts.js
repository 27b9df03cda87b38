// Charts: per route, messages per second (received, delivered, dead-lettered), pending,
// and delivery lateness p50/p99 over the recent window, from GET /v1/series. SVG drawn
// here (no library, no CDN); colours come from style.css (the page's CSP allows no
// inline styles). Every line carries data-series, data-points (points drawn) and
// data-max, so tests and tools can read what is drawn.
import { api, query } from './api.js';
import { h, add, fmtMs } from './ui.js';

const NS = 'http://www.w3.org/2000/svg';
const W = 440, H = 190, ML = 52, MR = 12, MT = 10, MB = 24;

function s(tag, attrs, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const CHARTS = [
  { id: 'rates', title: 'Messages per second', fmt: fmtRate, lines: [
    { name: 'received', label: 'received', value: (p) => p.received_per_s },
    { name: 'delivered', label: 'delivered', value: (p) => p.delivered_per_s },
    { name: 'dead_lettered', label: 'dead-lettered', value: (p) => p.dead_lettered_per_s },
  ] },
  { id: 'pending', title: 'Pending', fmt: fmtCount, integer: true, lines: [
    { name: 'pending', label: 'pending', value: (p) => p.pending },
  ] },
  { id: 'lateness', title: 'Delivery lateness', fmt: fmtMs, tick: fmtTickMs, lines: [
    { name: 'p50', label: 'p50', value: (p) => p.p50_ms },
    { name: 'p99', label: 'p99', value: (p) => p.p99_ms },
  ] },
];

export async function charts(view, params) {
  const win = params.get('window') || '1h';
  const scope = params.get('scope') || 'cluster';
  const route = params.get('route') || '';
  const data = await api('GET', '/v1/series' + query({ route, window: win, scope }));
  const go = (k, v) => {
    const p = new URLSearchParams({ window: win, scope });
    if (route) p.set('route', route);
    p.set(k, v);
    location.hash = '#/charts?' + p.toString();
  };
  add(view,
    h('h1', {}, 'Charts'),
    h('form', { class: 'filters', id: 'chart-controls', onsubmit: (e) => e.preventDefault() },
      h('label', {}, 'Window', h('select', { id: 'c-window', onchange: (e) => go('window', e.target.value) },
        ['15m', '1h'].map((w) => h('option', { value: w, selected: w === win }, 'last ' + (w === '1h' ? 'hour' : '15 minutes'))))),
      h('label', {}, 'Scope', h('select', { id: 'c-scope', onchange: (e) => go('scope', e.target.value) },
        h('option', { value: 'cluster', selected: scope === 'cluster' }, 'cluster (every instance)'),
        h('option', { value: 'instance', selected: scope === 'instance' }, 'this instance'))),
      route ? h('a', { href: '#/charts' + query({ window: win, scope }) }, 'all routes') : ''),
    h('p', { class: 'muted small', id: 'chart-info' },
      `${data.interval_ms / 1000} s intervals, ${scope === 'cluster' ? `merged over ${data.instances.length} instance${data.instances.length === 1 ? '' : 's'} (${data.instances.join(', ') || 'none yet'})` : 'this instance only'}; `,
      'pending is counted in Redis for the whole cluster; lateness is broker-confirmed time minus due time. The open interval is not shown yet.'),
  );
  if (!data.routes.length) {
    add(view, h('p', { class: 'muted', id: 'no-series' }, 'No intervals recorded yet: the first closes within ' + data.interval_ms / 1000 + ' s of the start.'));
    return;
  }
  for (const rs of data.routes) {
    add(view, h('section', { class: 'route-charts', 'data-route': rs.route },
      h('h2', {}, h('a', { href: '#/charts' + query({ route: rs.route, window: win, scope }) }, rs.route)),
      h('div', { class: 'chart-row' }, CHARTS.map((c) => chartCard(c, rs.points, data)))));
  }
}

function chartCard(c, points, data) {
  const x0 = Math.max(data.from, points.length ? points[0].t : data.from);
  const x1 = Math.max(data.to, x0 + data.interval_ms);
  const lines = c.lines.map((l) => ({ ...l, pts: points.map((p) => [p.t + data.interval_ms / 2, l.value(p)]) }));
  const last = points[points.length - 1];
  return h('div', { class: 'card chart-card' },
    h('div', { class: 'chart-head' }, h('strong', {}, c.title),
      h('span', { class: 'legend' }, lines.map((l) => h('span', { class: 'key s-' + l.name },
        h('i', {}), l.label, ' ', h('b', {}, last && l.value(last) != null ? c.fmt(l.value(last)) : '—'))))),
    svgChart(c, lines, x0, x1, data.interval_ms));
}

function svgChart(c, lines, x0, x1, interval) {
  let max = 0;
  for (const l of lines) for (const [, v] of l.pts) if (v != null && v > max) max = v;
  const step = niceStep(max / 4, c.integer);
  const top = Math.max(step, Math.ceil(max / step - 1e-9) * step);
  const x = (t) => ML + ((t - x0) / (x1 - x0)) * (W - ML - MR);
  const y = (v) => MT + (1 - v / top) * (H - MT - MB);
  const svg = s('svg', { class: 'chart', 'data-chart': c.id, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': c.title });
  for (let i = 0; i * step <= top + step / 2; i++) {
    const v = i * step;
    svg.append(s('line', { class: 'grid', x1: ML, x2: W - MR, y1: y(v), y2: y(v) }),
      s('text', { class: 'tick', x: ML - 6, y: y(v) + 4, 'text-anchor': 'end' }, (c.tick || c.fmt)(v)));
  }
  for (const t of timeTicks(x0, x1)) {
    svg.append(s('line', { class: 'grid', x1: x(t), x2: x(t), y1: MT, y2: H - MB }),
      s('text', { class: 'tick', x: x(t), y: H - 6, 'text-anchor': 'middle' }, fmtClock(t, x1 - x0)));
  }
  svg.append(s('line', { class: 'axis', x1: ML, x2: W - MR, y1: H - MB, y2: H - MB }));
  for (const l of lines) {
    let d = '', prev = null, n = 0, lmax = 0;
    for (const [t, v] of l.pts) {
      if (v == null || t < x0) { prev = null; continue; }
      // A gap longer than an interval and a half (nothing recorded) breaks the line.
      d += (prev === null || t - prev > 1.5 * interval ? 'M' : 'L') + x(t).toFixed(1) + ',' + y(v).toFixed(1) + ' ';
      prev = t;
      n++;
      lmax = Math.max(lmax, v);
    }
    svg.append(s('path', { class: 'line s-' + l.name, d: d.trim(), 'data-series': l.name, 'data-points': n, 'data-max': lmax }));
    if (n === 1) { // a lone point would draw nothing: mark it
      const [t, v] = l.pts.find(([, v]) => v != null);
      svg.append(s('circle', { class: 'dot s-' + l.name, cx: x(t), cy: y(v), r: 2.5 }));
    }
  }
  return svg;
}

// niceStep is the grid step: 1, 2 or 5 times a power of ten, at least v (at least 1
// for counts; 1 for an empty chart).
function niceStep(v, integer) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  let step = 10 * p;
  for (const m of [1, 2, 5]) if (m * p >= v * (1 - 1e-9)) { step = m * p; break; }
  return integer ? Math.max(1, step) : step;
}

// timeTicks spaces about five ticks on round minutes or seconds.
function timeTicks(x0, x1) {
  const steps = [1e3, 2e3, 5e3, 10e3, 15e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3];
  const step = steps.find((st) => (x1 - x0) / st <= 6) || 3600e3;
  const out = [];
  for (let t = Math.ceil(x0 / step) * step; t <= x1; t += step) out.push(t);
  return out;
}

function fmtClock(t, span) {
  const iso = new Date(t).toISOString();
  return span < 10 * 60e3 ? iso.slice(11, 19) : iso.slice(11, 16);
}

function fmtRate(v) {
  if (v >= 1e4) return (v / 1e3).toFixed(0) + 'k';
  return v >= 100 ? v.toFixed(0) : trimZeros(v.toFixed(v >= 10 ? 1 : 2));
}

// fmtTickMs labels a lateness grid line: "0", "0.25 ms", "2.5 ms", "40 ms", "1.2 s".
function fmtTickMs(v) {
  if (v === 0) return '0';
  return v >= 1000 ? trimZeros((v / 1000).toFixed(2)) + ' s' : trimZeros(v.toFixed(v >= 10 ? 0 : 2)) + ' ms';
}

function trimZeros(t) { return t.includes('.') ? t.replace(/\.?0+$/, '') : t; }

function fmtCount(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(v >= 1e7 ? 0 : 1) + 'M';
  if (v >= 1e4) return (v / 1e3).toFixed(0) + 'k';
  return String(Math.round(v));
}
