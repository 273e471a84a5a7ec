// The admin API client (docs/api.md). Same origin as the dashboard; the bearer token is
// kept in sessionStorage (gone when the tab closes) and sent on every call. A 401 from
// any call clears the token and tells the app, which returns to the login page.

const TOKEN_KEY = 'fedcore.token';
const unauthorizedListeners = new Set();

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function onUnauthorized(listener) {
  unauthorizedListeners.add(listener);
  return () => unauthorizedListeners.delete(listener);
}

export function notifyUnauthorized() {
  setToken(null);
  for (const listener of unauthorizedListeners) listener();
}

export function authHeaders(extra = {}) {
  const t = token();
  return t ? { ...extra, Authorization: `Bearer ${t}` } : extra;
}

// Turns a non-2xx response into an ApiError carrying the server's message.
async function errorFrom(response) {
  let code = 'http_' + response.status;
  let message = `${response.status} ${response.statusText || 'error'}`;
  try {
    const body = await response.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
    }
  } catch {
    // Not JSON (a proxy's page, say): keep the status line.
  }
  return new ApiError(response.status, code, message);
}

// request('GET', '/api/v1/runs', {query: {limit: 10}, body: {...}, tokenOverride})
export async function request(method, path, { query, body, tokenOverride, raw = false } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, String(v));
  }
  const headers = { Accept: 'application/json' };
  const t = tokenOverride ?? token();
  if (t) headers.Authorization = `Bearer ${t}`;
  const init = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (e) {
    throw new ApiError(0, 'unavailable', `cannot reach the server (${e.message})`);
  }
  if (response.status === 401) {
    const error = await errorFrom(response);
    if (tokenOverride === undefined) notifyUnauthorized();
    throw error;
  }
  if (!response.ok) throw await errorFrom(response);
  if (raw) return response;
  if (response.status === 204) return null;
  return response.json();
}

export const get = (path, query) => request('GET', path, { query });
export const post = (path, body) => request('POST', path, { body: body ?? {} });

// Every page of a paginated list ({items,total,limit,offset}), up to `max` items.
export async function getAll(path, query = {}, max = 5000) {
  const items = [];
  const limit = 500;
  for (let offset = 0; offset < max; offset += limit) {
    const page = await get(path, { ...query, limit, offset });
    items.push(...page.items);
    if (page.items.length < limit || items.length >= page.total) break;
  }
  return items;
}

export const api = {
  health: () => get('/api/v1/health'),
  info: () => get('/api/v1/info'),
  clients: (query) => get('/api/v1/clients', query),
  allClients: () => getAll('/api/v1/clients'),
  client: (id) => get(`/api/v1/clients/${encodeURIComponent(id)}`),
  runs: (query) => get('/api/v1/runs', query),
  run: (id) => get(`/api/v1/runs/${encodeURIComponent(id)}`),
  startRun: (config) => post('/api/v1/runs', config),
  stopRun: (id) => post(`/api/v1/runs/${encodeURIComponent(id)}/stop`),
  nextRound: (id) => post(`/api/v1/runs/${encodeURIComponent(id)}/rounds`),
  rounds: (id) => getAll(`/api/v1/runs/${encodeURIComponent(id)}/rounds`),
  results: (id, round) =>
    get(`/api/v1/runs/${encodeURIComponent(id)}/rounds/${encodeURIComponent(round)}/results`),
  evaluation: (id) => get(`/api/v1/runs/${encodeURIComponent(id)}/evaluation`),
  roundEvaluation: (id, round) =>
    get(`/api/v1/runs/${encodeURIComponent(id)}/rounds/${encodeURIComponent(round)}/evaluation`),
  // Checks a token without storing it or triggering the global 401 handling.
  checkToken: (t) => request('GET', '/api/v1/info', { tokenOverride: t }),
  // The global model as a Blob (the download needs the Authorization header, so a plain
  // link cannot do it).
  async model(id, round, format) {
    const response = await request('GET', `/api/v1/runs/${encodeURIComponent(id)}/model`,
      { query: { round, format }, raw: true });
    return response.blob();
  },
};
