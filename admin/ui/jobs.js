// Bulk jobs: a form over the browse filter, the dry-run preview, then the job.
import { api, query } from './api.js';
import { h, add, table, when, badge, flash, errorBox, confirmDialog, parseDuration, fmtTime, fmtDuration } from './ui.js';
import { filterForm, FILTER_KEYS } from './browse.js';

const KINDS = {
  cancel: 'Cancel', reschedule: 'Reschedule', requeue_dead: 'Requeue dead letters', purge_dead: 'Purge dead letters',
};

export async function jobs(view, params) {
  const kind = h('select', { id: 'kind' }, Object.entries(KINDS).map(([k, label]) =>
    h('option', { value: k, selected: (params.get('kind') || 'cancel') === k }, label)));
  const when = h('input', { id: 'when', placeholder: 'shift: +1h, -10m; or a due time' });
  const whenLabel = h('label', { id: 'when-label' }, 'New due time', when);
  const toggle = () => { whenLabel.hidden = kind.value !== 'reschedule'; };
  kind.addEventListener('change', toggle);
  toggle();
  const preview = h('div', { id: 'preview' });
  let spec = null;
  const form = filterForm(params, {
    submitLabel: 'Preview (dry run)',
    noLimit: true,
    onSubmit: async (f) => {
      delete f.limit;
      spec = null;
      preview.replaceChildren();
      const body = jobBody(kind.value, f, when.value);
      if (body instanceof Error) { preview.append(errorBox(body)); return; }
      try {
        const p = await api('POST', '/v1/jobs', { ...body, dry_run: true, sample: 10 });
        spec = body;
        preview.append(previewView(p, () => run(spec)));
      } catch (e) { preview.append(errorBox(e)); }
    },
  });
  form.querySelector('#apply').id = 'preview-btn';
  form.prepend(h('label', {}, 'Action', kind), whenLabel);
  add(view, h('h1', {}, 'Bulk jobs'),
    h('p', { class: 'muted' }, 'Pick an action and a filter, preview what it would touch, then run it. Jobs run in the background in bounded batches.'),
    form, preview, h('h2', {}, 'Recent jobs'), await recent());
}

function jobBody(kind, filter, whenText) {
  const body = { kind, filter };
  if (kind === 'reschedule') {
    const w = whenText.trim();
    if (!w) return Object.assign(new Error('give a shift (+1h) or a due time'), { field: 'deliver_at' });
    const d = parseDuration(w);
    if (d !== null) body.shift_ms = d; else body.deliver_at = w;
  }
  return body;
}

function previewView(p, onRun) {
  const kind = KINDS[p.spec.kind];
  return h('div', { class: 'card' },
    h('h2', {}, 'Dry run: ', h('span', { id: 'matched' }, `${p.exact === false ? 'at least ' : ''}${p.matched} message${p.matched === 1 ? '' : 's'}`), ' would be affected'),
    p.exact === false ? h('p', { class: 'muted' }, 'Counting stopped at the per-request budget; the job itself goes through every match.') : '',
    h('p', { class: 'muted' }, `${kind} over ${describe(p.spec)}. Nothing has changed yet.`),
    p.sample.length ? table('messages sample', ['Id', 'Route', 'State', 'Due', 'Reason'], p.sample.map((m) =>
      h('tr', { 'data-id': m.id }, h('td', {}, h('a', { href: '#/message/' + encodeURIComponent(m.id) }, m.id)),
        h('td', {}, m.route || ''), h('td', {}, badge(m.state)), h('td', {}, when(m.due_at)), h('td', {}, m.reason || '')))) : '',
    h('button', { class: 'danger', id: 'run', disabled: p.matched === 0, onclick: onRun }, `Run: ${kind.toLowerCase()} ${p.matched}…`));
}

function describe(spec) {
  const f = spec.filter || {};
  const parts = FILTER_KEYS.filter((k) => f[k] !== undefined && f[k] !== '').map((k) =>
    `${k}=${k.startsWith('due_') ? fmtTime(f[k]) : f[k]}`);
  if (spec.shift_ms) parts.push(`shifted by ${spec.shift_ms > 0 ? '+' : ''}${fmtDuration(spec.shift_ms)}`);
  if (spec.deliver_at) parts.push(`to ${fmtTime(spec.deliver_at)}`);
  return parts.join(', ') || 'everything';
}

async function run(body) {
  if (!await confirmDialog('Run bulk job?', `${KINDS[body.kind]} every message matching the filter. This cannot be undone.`, 'Run job')) return;
  try {
    const job = await api('POST', '/v1/jobs', body);
    flash(`Job ${job.id} started.`);
    location.hash = '#/jobs/' + encodeURIComponent(job.id);
  } catch (e) { flash(`Job failed to start: ${e.field ? e.field + ': ' : ''}${e.message}`, 'bad'); }
}

async function recent() {
  try {
    const list = await api('GET', '/v1/jobs?limit=20');
    if (!list.jobs.length) return h('p', { class: 'muted' }, 'No jobs yet.');
    return table('jobs', ['Job', 'Action', 'State', 'Matched', 'Done', 'Failed', 'Created', 'Instance'], list.jobs.map((j) =>
      h('tr', {}, h('td', {}, h('a', { href: '#/jobs/' + encodeURIComponent(j.id) }, j.id)), h('td', {}, KINDS[j.spec.kind]),
        h('td', {}, badge(j.state)), h('td', { class: 'num' }, String(j.matched)), h('td', { class: 'num' }, String(j.done)),
        h('td', { class: 'num' }, String(j.failed)), h('td', {}, when(j.created_at)), h('td', {}, j.instance || ''))));
  } catch (e) { return errorBox(e); }
}

export async function job(view, id, refresh) {
  let j;
  try { j = await api('GET', '/v1/jobs/' + encodeURIComponent(id)); } catch (e) {
    add(view, h('h1', {}, 'Job ', id), errorBox(e));
    return;
  }
  const field = (k, v) => h('tr', {}, h('th', {}, k), h('td', {}, v));
  add(view, h('p', {}, h('a', { href: '#/jobs' }, '← jobs')),
    h('h1', {}, 'Job ', h('code', {}, j.id), ' ', h('span', { id: 'job-state' }, badge(j.state))),
    h('table', { class: 'fields', id: 'job' }, h('tbody', {},
      field('Action', KINDS[j.spec.kind]), field('Filter', describe(j.spec)),
      field('Matched', h('span', { id: 'job-matched' }, String(j.matched))),
      field('Done', h('span', { id: 'job-done' }, String(j.done))), field('Failed', String(j.failed)),
      field('Created', when(j.created_at)), field('Updated', when(j.updated_at)), field('Instance', j.instance || '—'))),
    j.errors && j.errors.length ? [h('h2', {}, 'Errors'), h('ul', {}, j.errors.map((e) => h('li', {}, e)))] : [],
    j.spec.kind === 'cancel' || j.spec.kind === 'reschedule' ? h('p', {}, h('a', { href: '#/browse' + query(j.spec.filter) }, 'Browse the filter')) : '');
  if (j.state === 'queued' || j.state === 'running') refresh(2000);
}
