// One message: fields, headers, key, payload; cancel, reschedule, requeue.
import { api, msgPath } from './api.js';
import { h, add, table, when, badge, flash, errorBox, promptDialog, parseDuration } from './ui.js';
import { cancel, requeue } from './browse.js';
import { keyHash } from './keys.js';

export async function message(view, id) {
  add(view, h('p', {}, h('button', { class: 'link', id: 'back', onclick: () => history.back() }, '← back')));
  let m;
  try {
    m = await api('GET', msgPath(id));
  } catch (e) {
    add(view, h('h1', {}, id), errorBox(e));
    return;
  }
  const live = ['pending', 'inflight', 'dead'].includes(m.state);
  const field = (k, v) => (v === undefined || v === '' ? null : h('tr', {}, h('th', {}, k), h('td', {}, v)));
  add(view, 
    h('h1', {}, 'Message ', h('code', { id: 'msg-id' }, m.id), ' ', badge(m.state)),
    h('div', { class: 'actions' },
      live ? h('button', { class: 'danger', id: 'cancel', onclick: () => cancel(m.id) }, 'Cancel message') : '',
      m.state === 'pending' || m.state === 'dead' ? h('button', { id: 'reschedule', onclick: () => reschedule(m.id) }, 'Reschedule…') : '',
      m.state === 'dead' ? h('button', { id: 'requeue', onclick: () => requeue(m.id) }, 'Requeue now') : '',
      orderKey(m) ? h('a', { id: 'key-link', href: keyHash(m.route, orderKey(m)) }, 'Its key\'s order (routes with order: key) →') : ''),
    h('table', { class: 'fields', id: 'fields' }, h('tbody', {},
      field('State', m.state), field('Route', m.route), field('Due', m.due_at ? when(m.due_at) : undefined),
      field('Source', m.source ? `${m.source_broker}:${m.source}` : undefined), field('Target override', m.target),
      field('Received', m.received_at ? when(m.received_at) : undefined), field('Attempts', live ? String(m.attempt) : undefined),
      field('Dead-lettered', m.dead_at ? when(m.dead_at) : undefined), field('Reason', m.reason),
      field('Key', m.key !== undefined ? m.key : m.key_base64 ? `base64 ${m.key_base64}` : undefined),
      field('Routing key', m.routing_key),
      field('Payload size', live ? `${m.payload_size} bytes` : undefined))),
    live ? [] : h('p', { class: 'muted' }, `A ${m.state} message keeps only its id and state.`),
    m.headers && Object.keys(m.headers).length ? [h('h2', {}, 'Headers'),
      table('headers', ['Name', 'Value'], Object.keys(m.headers).sort().map((k) => h('tr', {}, h('td', {}, k), h('td', {}, m.headers[k]))))] : [],
    payload(m));
}

// orderKey is the message's ordering key as the store takes it: x-delay-key, else the
// Kafka key (as text), else the AMQP routing key.
function orderKey(m) {
  if (!m.route || !['pending', 'inflight'].includes(m.state)) return '';
  return (m.headers && m.headers['x-delay-key']) || m.key || m.routing_key || '';
}

function payload(m) {
  if (m.payload === undefined && m.payload_base64 === undefined) return [];
  const text = m.payload !== undefined ? m.payload : m.payload_base64;
  return [
    h('h2', {}, 'Payload ', h('small', { class: 'muted' }, m.payload !== undefined ? 'text' : 'base64 (not UTF-8)')),
    h('pre', { id: 'payload' }, text),
    m.payload_truncated ? h('p', { class: 'muted', id: 'truncated' }, `Shown: the first part of ${m.payload_size} bytes.`) : [],
  ];
}

async function reschedule(id) {
  const v = await promptDialog('Reschedule', 'A delay from now (90s, 10m, 2h30m) or a due time (RFC 3339 or unix ms).', '10m');
  if (v === null || v.trim() === '') return;
  const d = parseDuration(v);
  const body = d !== null ? { delay_ms: d } : { deliver_at: v.trim() };
  try {
    const r = await api('POST', msgPath(id) + '/reschedule', body);
    flash(`Rescheduled ${id}: due ${new Date(r.due_at).toISOString()}.`);
  } catch (e) { flash(`Reschedule failed: ${e.field ? e.field + ': ' : ''}${e.message}`, 'bad'); }
  window.dispatchEvent(new Event('hashchange'));
}
