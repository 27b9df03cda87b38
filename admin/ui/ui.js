// DOM helpers, formatting and dialogs. Text always goes in through textContent.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function table(cls, headers, rows) {
  return h('table', { class: cls },
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))),
    h('tbody', {}, rows));
}

// fmtTime shows unix ms as UTC "2026-11-23 19:45:00Z"; 0/undefined as a dash.
export function fmtTime(ms) {
  if (!ms) return '—';
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

export function fmtDuration(ms) {
  const neg = ms < 0;
  let s = Math.round(Math.abs(ms) / 1000);
  const parts = [];
  for (const [u, n] of [['d', 86400], ['h', 3600], ['m', 60]]) {
    if (s >= n) { parts.push(Math.floor(s / n) + u); s %= n; }
  }
  if (s || !parts.length) parts.push(s + 's');
  return (neg ? '-' : '') + parts.slice(0, 2).join(' ');
}

// fmtRel says how far ms is from now: "in 5m 3s", "2m ago".
export function fmtRel(ms) {
  if (!ms) return '';
  const d = ms - Date.now();
  return d >= 0 ? 'in ' + fmtDuration(d) : fmtDuration(-d) + ' ago';
}

export function when(ms) {
  if (!ms) return h('span', { class: 'muted' }, '—');
  return h('span', { class: 'when', title: fmtRel(ms) }, fmtTime(ms), h('small', {}, ' ', fmtRel(ms)));
}

export function fmtMs(v) {
  if (v === undefined || v === null) return '—';
  return v < 10 ? v.toFixed(2) + ' ms' : v < 1000 ? v.toFixed(0) + ' ms' : (v / 1000).toFixed(2) + ' s';
}

export function badge(text, kind) { return h('span', { class: 'badge ' + (kind || text) }, text); }

// parseDuration reads "90s", "5m", "1h30m", "-2h", "250ms" as milliseconds, or null.
export function parseDuration(s) {
  const m = String(s).trim().match(/^([+-])?((?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+)$/);
  if (!m) return null;
  const unit = { ms: 1, s: 1000, m: 60000, h: 3600000, d: 86400000 };
  let total = 0;
  for (const [, n, u] of m[2].matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g)) total += parseFloat(n) * unit[u];
  return Math.round(m[1] === '-' ? -total : total);
}

let flashTimer;
export function flash(text, kind) {
  const el = document.getElementById('flash');
  el.textContent = text;
  el.className = kind || 'ok';
  el.hidden = false;
  clearTimeout(flashTimer);
  flashTimer = setTimeout(() => { el.hidden = true; }, 8000);
}

// errorBox renders an API error (with the field it names).
export function errorBox(e) {
  return h('p', { class: 'error' }, e.field ? `${e.field}: ` : '', e.message,
    e.status ? h('small', {}, ` (HTTP ${e.status})`) : '');
}

// confirmDialog asks before a destructive action; resolves true when confirmed.
export function confirmDialog(title, text, yes) {
  const d = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-yes').textContent = yes || 'Confirm';
  d.returnValue = '';
  d.showModal();
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
  });
}

// promptDialog asks for one value; resolves the text or null.
export function promptDialog(title, text, placeholder) {
  const d = document.getElementById('prompt');
  document.getElementById('prompt-title').textContent = title;
  document.getElementById('prompt-text').textContent = text;
  const input = document.getElementById('prompt-input');
  input.value = '';
  input.placeholder = placeholder || '';
  d.returnValue = '';
  d.showModal();
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok' ? input.value : null), { once: true });
  });
}

// add appends children to el like h does: arrays flattened, null/false/'' skipped.
export function add(el, ...children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false || c === '') continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}
