// The delay-bridge console: a hash router over the pages, and the token sign-in.
import { api, token, setToken, clearToken, onUnauthorized, APIError } from './api.js';
import { h, add, errorBox } from './ui.js';
import { overview } from './overview.js';
import { browse } from './browse.js';
import { message } from './message.js';
import { jobs, job } from './jobs.js';
import { charts } from './charts.js';
import { schedules, schedule } from './schedules.js';
import { keys } from './keys.js';

const $ = (id) => document.getElementById(id);
let timer;
let renders = 0; // counts finished renders (data-render on the view), for tests and tools

async function render() {
  clearTimeout(timer);
  const [path, qs] = (location.hash.slice(1) || '/overview').split('?');
  const params = new URLSearchParams(qs || '');
  const parts = path.split('/').filter(Boolean);
  const page = parts[0] || 'overview';
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === page || (page === 'message' && a.dataset.page === 'browse'));
  const view = h('section', { id: 'view', 'data-page': page, 'aria-busy': 'true' });
  $('view').replaceWith(view);
  const refresh = (ms) => { timer = setTimeout(() => { if (view.isConnected) render(); }, ms); };
  try {
    switch (page) {
      case 'overview': await overview(view); refresh(10000); break;
      case 'charts': await charts(view, params); refresh(10000); break;
      case 'browse': await browse(view, params, false); break;
      case 'dead': await browse(view, params, true); break;
      case 'message': await message(view, decodeURIComponent(parts.slice(1).join('/'))); break;
      case 'jobs': parts[1] ? await job(view, decodeURIComponent(parts[1]), refresh) : await jobs(view, params); break;
      case 'keys': await keys(view, decodeURIComponent(parts[1] || ''), decodeURIComponent(parts.slice(2).join('/'))); break;
      case 'schedules': parts[1] ? await schedule(view, decodeURIComponent(parts[1])) : await schedules(view); refresh(10000); break;
      default: add(view, h('h1', {}, 'Not found'), h('p', {}, h('a', { href: '#/overview' }, 'Overview')));
    }
  } catch (e) {
    if (!(e instanceof APIError && e.status === 401)) add(view, errorBox(e));
  }
  view.dataset.render = String(++renders);
  view.setAttribute('aria-busy', 'false');
}

function showLogin(message) {
  $('nav').hidden = true;
  $('signout').hidden = true;
  $('view').replaceChildren();
  $('login').hidden = false;
  $('login-error').hidden = !message;
  $('login-error').textContent = message || '';
  $('token').focus();
}

async function start() {
  $('login').hidden = true;
  $('nav').hidden = false;
  $('signout').hidden = !token();
  try {
    const st = await api('GET', '/v1/stats');
    $('who').textContent = st.instance ? `instance ${st.instance}` : '';
  } catch (e) {
    if (e instanceof APIError && e.status === 401) return;
  }
  await render();
}

onUnauthorized(() => {
  const had = token();
  clearToken();
  showLogin(had ? 'The token was refused. Enter the admin token.' : '');
});

$('login-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  setToken($('token').value.trim());
  $('token').value = '';
  start();
});
$('signout').addEventListener('click', () => { clearToken(); showLogin('Signed out.'); });
window.addEventListener('hashchange', () => { if ($('login').hidden) render(); });

// A bridge without admin.token answers without one: no sign-in then.
start();
