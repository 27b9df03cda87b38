// Recurring schedules: the list (next slot, state, origin), a create form, and one
// schedule's page with its next 5 slots and its last outcomes.
import { api } from './api.js';
import { h, add, table, when, badge, flash, errorBox, confirmDialog, parseDuration } from './ui.js';

const path = (id) => '/v1/schedules/' + encodeURIComponent(id);

export async function schedules(view) {
  const { schedules: list } = await api('GET', '/v1/schedules');
  add(view, h('h1', {}, 'Schedules'),
    h('p', { class: 'muted' }, 'Recurring schedules publish one message per slot (id <schedule>@<slot ms>) into their route\'s target. Schedules from the config file are read-only here.'),
    list.length ? table('schedules', ['Id', 'Route', 'Spec', 'State', 'Origin', 'Next slot', ''], list.map((s) => h('tr', { 'data-id': s.id },
      h('td', {}, h('a', { href: '#/schedules/' + encodeURIComponent(s.id) }, s.id)),
      h('td', {}, s.route), h('td', {}, h('code', {}, s.spec)), h('td', {}, badge(s.state)), h('td', {}, s.origin),
      h('td', {}, s.next.length ? when(s.next[0].due) : '—'),
      h('td', {}, s.origin === 'api' ? actions(s) : '')))) : h('p', { class: 'muted', id: 'no-schedules' }, 'No schedules yet.'),
    h('h2', {}, 'New schedule'), createForm());
}

function actions(s) {
  const pause = h('button', { class: 'secondary small', 'data-action': s.paused ? 'resume' : 'pause' }, s.paused ? 'Resume' : 'Pause');
  pause.addEventListener('click', async () => {
    try {
      await api('POST', path(s.id) + (s.paused ? '/resume' : '/pause'));
      flash(`${s.id} ${s.paused ? 'resumed' : 'paused'}`);
      window.dispatchEvent(new HashChangeEvent('hashchange'));
    } catch (e) { flash(e.message, 'error'); }
  });
  const del = h('button', { class: 'danger small', 'data-action': 'delete' }, 'Delete');
  del.addEventListener('click', async () => {
    if (!await confirmDialog(`Delete schedule ${s.id}?`, 'Its parked future slots are cancelled.', 'Delete')) return;
    try {
      await api('DELETE', path(s.id));
      flash(`${s.id} deleted`);
      window.dispatchEvent(new HashChangeEvent('hashchange'));
    } catch (e) { flash(e.message, 'error'); }
  });
  return [pause, ' ', del];
}

function createForm() {
  const input = (id, label, attrs) => h('label', {}, label, h('input', { id, ...attrs }));
  const out = h('div', { id: 'create-result' });
  const form = h('form', { id: 'create-schedule', class: 'card' },
    input('s-id', 'Id', { required: true }), input('s-route', 'Route', { required: true }),
    input('s-spec', 'Spec', { required: true, placeholder: 'CRON_TZ=Europe/Berlin 0 2 * * * | @every 10m' }),
    input('s-payload', 'Payload', {}), input('s-jitter', 'Jitter', { placeholder: '30s' }),
    h('label', {}, 'Catch up', h('select', { id: 's-catch-up' }, ['skip', 'one', 'all'].map((v) => h('option', { value: v }, v)))),
    h('button', { type: 'submit', id: 's-create' }, 'Create'), out);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    out.replaceChildren();
    const v = (id) => form.querySelector('#' + id).value.trim();
    const body = { id: v('s-id'), route: v('s-route'), spec: v('s-spec'), payload: v('s-payload'), catch_up: v('s-catch-up') };
    if (v('s-jitter')) {
      const j = parseDuration(v('s-jitter'));
      if (j === null) { out.append(errorBox({ field: 'jitter', message: 'want a duration such as 30s' })); return; }
      body.jitter_ms = j;
    }
    try {
      const s = await api('POST', '/v1/schedules', body);
      location.hash = '#/schedules/' + encodeURIComponent(s.id);
    } catch (e) { out.append(errorBox(e)); }
  });
  return form;
}

export async function schedule(view, id) {
  const s = await api('GET', path(id));
  add(view, h('h1', {}, 'Schedule ', h('code', {}, s.id), ' ', badge(s.state)),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Route'), h('dd', {}, s.route + (s.target ? ' → ' + s.target : '')),
      h('dt', {}, 'Spec'), h('dd', {}, h('code', {}, s.spec)),
      h('dt', {}, 'Origin'), h('dd', {}, s.origin === 'config' ? 'config file (read-only here)' : 'API'),
      h('dt', {}, 'Catch up'), h('dd', {}, s.catch_up + (s.catch_up === 'all' ? ` (at most ${s.catch_up_limit || 100})` : '')),
      h('dt', {}, 'Jitter'), h('dd', {}, s.jitter_ms ? `${s.jitter_ms / 1000} s` : '—'),
      h('dt', {}, 'Generation'), h('dd', {}, String(s.generation)),
      h('dt', {}, 'Updated'), h('dd', {}, when(s.updated_at))),
    s.state === 'route_missing' ? h('p', { class: 'error' }, `Route ${s.route} is not configured: its slots are not published.`) : '',
    h('h2', {}, 'Next slots'),
    s.next.length ? table('next-slots', ['Due', 'Message id'], s.next.map((n) => h('tr', {}, h('td', {}, when(n.due)), h('td', {}, h('code', {}, n.id)))))
      : h('p', { class: 'muted' }, s.paused ? 'Paused: nothing is published until resumed.' : 'No slot after now.'),
    h('h2', {}, 'Last outcomes'),
    s.last.length ? table('last-outcomes', ['Slot', 'Outcome', 'Message'], s.last.slice().reverse().map((o) => h('tr', {},
      h('td', {}, when(o.slot)), h('td', {}, badge(o.outcome)),
      h('td', {}, o.state ? h('a', { href: '#/message/' + encodeURIComponent(o.id) }, badge(o.state)) : h('span', { class: 'muted' }, '—')))))
      : h('p', { class: 'muted' }, 'Nothing decided yet.'),
    h('p', {}, h('a', { href: '#/schedules' }, '← All schedules')));
}
