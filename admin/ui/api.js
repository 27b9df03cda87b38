// The admin API, called with the token kept in sessionStorage for this tab.

const KEY = 'delaybridge.token';

export class APIError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `HTTP ${status}`);
    this.status = status;
    this.field = body && body.field;
    this.body = body;
  }
}

export function token() { return sessionStorage.getItem(KEY); }
export function setToken(t) { sessionStorage.setItem(KEY, t); }
export function clearToken() { sessionStorage.removeItem(KEY); }

// Listeners told about a 401 (the console then asks for the token again).
const unauthorized = [];
export function onUnauthorized(f) { unauthorized.push(f); }

// api calls the admin API: JSON in and out; non-2xx throws an APIError.
export async function api(method, path, body) {
  const headers = { 'Accept': 'application/json' };
  const t = token();
  if (t) headers['Authorization'] = 'Bearer ' + t;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
  });
  let data = null;
  const text = await resp.text();
  if (text) {
    try { data = JSON.parse(text); } catch { data = { error: text }; }
  }
  if (resp.status === 401) unauthorized.forEach((f) => f());
  if (!resp.ok) throw new APIError(resp.status, data);
  return data;
}

// optional returns null instead of throwing for the statuses a bridge without the
// feature answers (404 no route reporting, 501 not built yet).
export async function optional(method, path) {
  try {
    return await api(method, path);
  } catch (e) {
    if (e instanceof APIError && (e.status === 404 || e.status === 501)) return null;
    throw e;
  }
}

// query builds "?a=b&…" from the non-empty values of obj.
export function query(obj) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(obj)) {
    if (v !== undefined && v !== null && v !== '') p.set(k, String(v));
  }
  const s = p.toString();
  return s ? '?' + s : '';
}

export const msgPath = (id) => '/v1/messages/' + encodeURIComponent(id);
