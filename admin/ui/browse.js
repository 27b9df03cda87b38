// Browse pending / in-flight messages and the dead letters: filters, cursor paging.
import { api, query, msgPath } from './api.js';
import { h, add, table, when, badge, flash, errorBox, confirmDialog } from './ui.js';

export const FILTER_KEYS = ['route', 'state', 'due_from', 'due_to', 'id_prefix', 'key_prefix'];

// filterForm renders the filter inputs; onSubmit gets the filter object.
export function filterForm(params, { dead, submitLabel, onSubmit, noLimit }) {
  const input = (name, label, placeholder) => h('label', {}, label,
    h('input', { name, id: 'f-' + name, value: params.get(name) || '', placeholder: placeholder || '' }));
  const state = h('select', { name: 'state', id: 'f-state' },
    ['pending', 'inflight', 'dead'].map((s) => h('option', { value: s, selected: (params.get('state') || (dead ? 'dead' : 'pending')) === s }, s)));
  const form = h('form', { class: 'filters', id: 'filters' },
    input('route', 'Route', 'any'),
    dead ? '' : h('label', {}, 'State', state),
    input('due_from', 'Due from', 'RFC 3339 or unix ms'),
    input('due_to', 'Due before', 'RFC 3339 or unix ms'),
    input('id_prefix', 'Id prefix'),
    input('key_prefix', 'Key prefix'),
    noLimit ? '' : h('label', {}, 'Per page', h('select', { name: 'limit', id: 'f-limit' },
      ['3', '25', '100', '500'].map((n) => h('option', { value: n, selected: (params.get('limit') || '100') === n }, n)))),
    h('button', { type: 'submit', id: 'apply' }, submitLabel || 'Apply'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const f = {};
    for (const [k, v] of new FormData(form)) if (v !== '') f[k] = v;
    onSubmit(f);
  });
  return form;
}

export async function browse(view, params, dead) {
  const base = dead ? '#/dead' : '#/browse';
  const filter = {};
  for (const k of [...FILTER_KEYS, 'limit']) if (params.get(k)) filter[k] = params.get(k);
  const page = Number(params.get('page') || '1');
  add(view, 
    h('h1', {}, dead ? 'Dead letters' : 'Browse messages'),
    filterForm(params, { dead, onSubmit: (f) => { location.hash = base + query(f); } }));
  let list;
  try {
    list = await api('GET', (dead ? '/v1/dead' : '/v1/messages') + query({ ...filter, cursor: params.get('cursor') }));
  } catch (e) {
    add(view, errorBox(e));
    return;
  }
  const jobFilter = { ...filter };
  delete jobFilter.limit;
  if (dead) jobFilter.state = 'dead';
  const tools = h('div', { class: 'toolbar' },
    h('span', { id: 'page-info' }, `Page ${page}: ${list.count} message${list.count === 1 ? '' : 's'}`,
      list.next_cursor && list.count < Number(filter.limit || 100) ? ' (short page: more follow)' : ''),
    page > 1 ? h('a', { href: base + query(filter), class: 'button secondary', id: 'first-page' }, '⇤ First page') : '',
    list.next_cursor ? h('a', { href: base + query({ ...filter, cursor: list.next_cursor, page: page + 1 }), class: 'button', id: 'next-page' }, 'Next page →') : '',
    h('a', { href: '#/jobs' + query({ ...jobFilter, kind: dead ? 'requeue_dead' : 'cancel' }), class: 'button secondary', id: 'bulk' }, 'Bulk action on this filter…'),
    dead ? h('button', { class: 'danger', id: 'purge', onclick: () => purge(filter.route) }, filter.route ? `Purge ${filter.route} dead letters…` : 'Purge all dead letters…') : '');
  const headers = dead ? ['Id', 'Route', 'Reason', 'Dead at', 'Due', 'Attempts', 'Size', '']
    : ['Id', 'Route', 'State', 'Due', 'Key', 'Attempts', 'Size', ''];
  add(view, tools, list.count === 0 ? h('p', { class: 'muted', id: 'empty' }, 'No messages on this page.') :
    table('messages', headers, list.messages.map((m) => row(m, dead))));
}

function row(m, dead) {
  const link = h('a', { href: '#/message/' + encodeURIComponent(m.id), class: 'msg-id' }, m.id);
  const key = m.key !== undefined ? m.key : m.key_base64 ? h('span', { class: 'muted' }, 'base64 ' + m.key_base64) : '';
  if (dead) {
    return h('tr', { 'data-id': m.id }, h('td', {}, link), h('td', {}, m.route || ''),
      h('td', { class: 'reason' }, m.reason || ''), h('td', {}, when(m.dead_at)), h('td', {}, when(m.due_at)),
      h('td', { class: 'num' }, String(m.attempt)), h('td', { class: 'num' }, String(m.payload_size)),
      h('td', {}, h('button', { class: 'small', onclick: () => requeue(m.id) }, 'Requeue')));
  }
  return h('tr', { 'data-id': m.id }, h('td', {}, link), h('td', {}, m.route || ''), h('td', {}, badge(m.state)),
    h('td', {}, when(m.due_at)), h('td', { class: 'key' }, key), h('td', { class: 'num' }, String(m.attempt)),
    h('td', { class: 'num' }, String(m.payload_size)),
    h('td', {}, h('button', { class: 'small danger', onclick: () => cancel(m.id) }, 'Cancel')));
}

export async function cancel(id) {
  if (!await confirmDialog('Cancel message?', `Cancel ${id}? It will not be delivered.`, 'Cancel message')) return false;
  try {
    const r = await api('DELETE', msgPath(id));
    flash(`Cancelled ${id} (was ${r.prior_state}).`);
  } catch (e) { flash(`Cancel failed: ${e.message}`, 'bad'); return false; }
  window.dispatchEvent(new Event('hashchange'));
  return true;
}

export async function requeue(id) {
  if (!await confirmDialog('Requeue dead letter?', `Move ${id} back to pending, due now?`, 'Requeue')) return;
  try {
    await api('POST', '/v1/dead/' + encodeURIComponent(id) + '/requeue');
    flash(`Requeued ${id}: due now.`);
  } catch (e) { flash(`Requeue failed: ${e.message}`, 'bad'); }
  window.dispatchEvent(new Event('hashchange'));
}

async function purge(route) {
  const what = route ? `every dead letter of route ${route}` : 'every dead letter of every route';
  if (!await confirmDialog('Purge dead letters?', `Delete ${what}? This cannot be undone.`, 'Purge')) return;
  try {
    const r = await api('DELETE', '/v1/dead' + query({ route }));
    flash(`Purged ${r.purged} dead letter${r.purged === 1 ? '' : 's'}.`);
  } catch (e) { flash(`Purge failed: ${e.message}`, 'bad'); }
  window.dispatchEvent(new Event('hashchange'));
}
