// One ordering key of a route with order: key: its pending and in-flight messages in
// the key's order (the head marked), and cancelling them all.
import { api } from './api.js';
import { h, add, table, when, badge, flash, errorBox, confirmDialog } from './ui.js';

export const keyPath = (route, key) => '/v1/keys/' + encodeURIComponent(route) + '/' + encodeURIComponent(key);
export const keyHash = (route, key) => '#/keys/' + encodeURIComponent(route) + '/' + encodeURIComponent(key);

export async function keys(view, route, key) {
  add(view, h('p', {}, h('button', { class: 'link', id: 'back', onclick: () => history.back() }, '← back')));
  add(view, h('h1', {}, 'Key ', h('code', { id: 'key-name' }, key), ' of route ', h('code', {}, route)));
  let l;
  try {
    l = await api('GET', keyPath(route, key));
  } catch (e) {
    add(view, errorBox(e));
    return;
  }
  add(view,
    h('p', { class: 'muted' }, 'Published one at a time in this order: each after the previous one was confirmed by the broker. The head is the one being published or next.'),
    h('div', { class: 'actions' },
      l.messages.length ? h('button', { class: 'danger', id: 'cancel-key', onclick: () => cancelKey(route, key, l.messages.length) }, 'Cancel the key\'s messages') : ''),
    l.messages.length === 0 ? h('p', { id: 'key-empty' }, 'Nothing pending for this key.') :
      table('key-messages', ['Id', 'State', 'Due', 'Attempts', ''], l.messages.map((m) =>
        h('tr', { 'data-id': m.id },
          h('td', {}, h('a', { class: 'msg-id', href: '#/message/' + encodeURIComponent(m.id) }, m.id)),
          h('td', {}, badge(m.state)), h('td', {}, m.due_at ? when(m.due_at) : ''), h('td', {}, String(m.attempt)),
          h('td', {}, m.id === l.head ? badge('head', 'head') : '')))));
}

async function cancelKey(route, key, n) {
  if (!await confirmDialog('Cancel the key\'s messages?', `Cancel the ${n} pending message(s) of key ${key}? They will not be delivered.`, 'Cancel messages')) return;
  try {
    const l = await api('DELETE', keyPath(route, key));
    flash(`Cancelled ${l.messages.length} message(s) of key ${key}.`);
  } catch (e) { flash(`Cancel failed: ${e.message}`, 'bad'); }
  window.dispatchEvent(new Event('hashchange'));
}
