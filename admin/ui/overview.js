// Overview: totals, and per route counts, next due, ingress, egress, lateness.
import { api, optional } from './api.js';
import { h, add, table, when, fmtMs, badge } from './ui.js';

export async function overview(view) {
  const [stats, routes, lateness] = await Promise.all([
    api('GET', '/v1/stats'),
    optional('GET', '/v1/routes'),
    optional('GET', '/v1/lateness?window=5m'),
  ]);
  const lat = new Map((lateness ? lateness.routes : []).map((r) => [r.route, r]));
  const names = new Set([
    ...(routes ? routes.routes.map((r) => r.name) : []),
    ...Object.keys(stats.routes || {}),
    ...lat.keys(),
  ]);
  const byName = new Map((routes ? routes.routes : []).map((r) => [r.name, r]));
  const t = stats.totals;
  add(view, 
    h('h1', {}, 'Overview'),
    h('div', { class: 'cards' },
      card('Pending', t.pending, 'pending'), card('In flight', t.inflight, 'inflight'),
      card('Dead', t.dead, 'dead'),
      card('Instances', (stats.members || []).length || 1, 'members', (stats.members || []).join(', '))),
    h('h2', {}, 'Routes'),
    names.size === 0 ? h('p', { class: 'muted' }, 'No routes reported.') :
      table('routes', ['Route', 'Pending', 'In flight', 'Dead', 'Next due', 'Ingress', 'Lag',
        'Egress', 'Lateness p50', 'p99', ''],
      [...names].sort().map((n) => routeRow(n, byName.get(n), (stats.routes || {})[n], lat.get(n)))),
    h('p', { class: 'muted small' },
      lateness ? `Delivery lateness (broker-confirmed minus due time) over the last ${Math.round(lateness.window_ms / 60000)} minutes on the answering instance${lateness.from ? '' : ' (since it started)'}.` :
        'Delivery lateness is not reported by this bridge.',
      routes ? ` Ingress and egress as seen by instance ${routes.instance || stats.instance || '?'}.` : ''),
  );
}

function card(label, value, cls, title) {
  return h('div', { class: 'card stat ' + cls, title }, h('div', { class: 'value' }, String(value)), h('div', { class: 'label' }, label));
}

function routeRow(name, rs, statCounts, lat) {
  const c = (rs && rs.counts) || statCounts;
  const num = (v) => (c ? String(v) : '—');
  const ing = rs && rs.ingress;
  return h('tr', { 'data-route': name },
    h('td', {}, h('a', { href: '#/browse?route=' + encodeURIComponent(name) }, name)),
    h('td', { class: 'num pending' }, num(c && c.pending)),
    h('td', { class: 'num inflight' }, num(c && c.inflight)),
    h('td', { class: 'num dead' }, c && c.dead ? h('a', { href: '#/dead?route=' + encodeURIComponent(name) }, String(c.dead)) : num(c && c.dead)),
    h('td', {}, when(rs && rs.next_due)),
    h('td', { class: 'ingress' }, ing ? [badge(ing.state, ing.state === 'consuming' ? 'good' : 'bad'), ' ', h('small', {}, ing.source)] : '—',
      ing && ing.detail ? h('div', { class: 'small muted' }, ing.detail) : '',
      ing && ing.partition_states && ing.partition_states.length
        ? h('div', { class: 'small muted partitions' }, 'partitions: ' + ing.partition_states.map((p) => `${p.partition} ${p.state}${p.lag > 0 ? ' (lag ' + p.lag + ')' : ''}`).join(', '))
        : ''),
    h('td', { class: 'num lag' }, ing ? (ing.lag < 0 ? '?' : String(ing.lag)) : '—'),
    h('td', { class: 'egress' }, rs ? [badge(rs.egress.reachable ? 'reachable' : 'unreachable', rs.egress.reachable ? 'good' : 'bad'), ' ', h('small', {}, `${rs.egress.broker}:${rs.egress.target}`)] : '—'),
    h('td', { class: 'num p50' }, lat && lat.count ? fmtMs(lat.p50_ms) : '—'),
    h('td', { class: 'num p99' }, lat && lat.count ? fmtMs(lat.p99_ms) : '—'),
    h('td', {}, h('a', { href: '#/browse?route=' + encodeURIComponent(name) }, 'browse')),
  );
}
