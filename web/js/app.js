// The dashboard's shell: hash routing, the session (token) and the live-status badge.
// Each view module exports mount(root, ctx) and uses ctx to subscribe to events and
// timers, which are all released when the route changes.

import { ApiError, onUnauthorized, setToken, token } from './api.js';
import { events } from './events.js';
import { fill, h, setTitle } from './dom.js';
import * as loginView from './views/login.js';
import * as overviewView from './views/overview.js';
import * as runsView from './views/runs.js';
import * as runView from './views/run.js';
import * as newRunView from './views/new-run.js';
import * as clientsView from './views/clients.js';

const routes = [
  { pattern: /^\/login$/, view: loginView, nav: null, public: true },
  { pattern: /^\/overview$/, view: overviewView, nav: 'overview' },
  { pattern: /^\/runs$/, view: runsView, nav: 'runs' },
  { pattern: /^\/runs\/new$/, view: newRunView, nav: 'new-run' },
  { pattern: /^\/runs\/(\d+)$/, view: runView, nav: 'runs', keys: ['id'] },
  { pattern: /^\/clients$/, view: clientsView, nav: 'clients' },
];

const main = document.getElementById('main');
const nav = document.getElementById('main-nav');
const session = document.getElementById('session');
const banner = document.getElementById('banner');
const live = document.getElementById('live-status');
let current = null;  // {dispose: [fn], alive: bool}

export function navigate(hash, { replace = false } = {}) {
  const target = hash.startsWith('#') ? hash : `#${hash}`;
  if (replace) {
    history.replaceState(null, '', target);
    route();
  } else if (window.location.hash === target) {
    route();
  } else {
    window.location.hash = target;
  }
}

export function showBanner(text, kind = 'info') {
  if (!text) {
    banner.hidden = true;
    banner.replaceChildren();
    return;
  }
  banner.dataset.kind = kind;
  fill(banner, h('span', text), h('button.btn.btn-quiet', {
    type: 'button', 'aria-label': 'Dismiss message', onclick: () => showBanner(null),
  }, '×'));
  banner.hidden = false;
}

function parseHash() {
  const raw = window.location.hash.replace(/^#/, '') || '/overview';
  const [path, queryString = ''] = raw.split('?');
  return { path, query: new URLSearchParams(queryString) };
}

function makeContext(params, query) {
  const ctx = {
    params,
    query,
    alive: true,
    dispose: [],
    navigate,
    showBanner,
    loggedIn: (t) => loggedIn(t),
    // Subscribes to a live event kind ('*' for all) for the life of the view.
    onEvent(kind, fn) { ctx.dispose.push(events.on(kind, fn)); },
    onResync(fn) { ctx.dispose.push(events.onResync(fn)); },
    every(ms, fn) {
      const id = setInterval(fn, ms);
      ctx.dispose.push(() => clearInterval(id));
    },
    cleanup(fn) { ctx.dispose.push(fn); },
    // Replaces the page with an error panel (for failures that leave nothing to show).
    fail(error, root) {
      if (!ctx.alive || (error instanceof ApiError && error.status === 401)) return;
      fill(root, h('section.panel.error-panel', { role: 'alert' },
        h('h1', error.status === 404 ? 'Not found' : 'Something went wrong'),
        h('p', error.message),
        h('p', h('a', { href: '#/overview' }, 'Back to the overview'))));
    },
  };
  return ctx;
}

function teardown() {
  if (!current) return;
  current.alive = false;
  for (const fn of current.dispose.splice(0)) {
    try { fn(); } catch { /* a failed cleanup must not block the next view */ }
  }
  current = null;
}

function route() {
  const { path, query } = parseHash();
  const match = routes.map((r) => ({ r, m: r.pattern.exec(path) })).find((x) => x.m);
  teardown();
  const loggedIn = Boolean(token());
  if (match && !match.r.public && !loggedIn) {
    sessionStorage.setItem('fedcore.after-login', `#${path}${query.size ? `?${query}` : ''}`);
    navigate('/login', { replace: true });
    return;
  }
  if (match && match.r.view === loginView && loggedIn) {
    navigate('/overview', { replace: true });
    return;
  }
  nav.hidden = !loggedIn;
  session.hidden = !loggedIn;
  for (const a of nav.querySelectorAll('a')) {
    if (match && a.dataset.nav === match.r.nav) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (loggedIn) events.start();
  const params = {};
  if (match) (match.r.keys || []).forEach((k, i) => { params[k] = match.m[i + 1]; });
  current = makeContext(params, query);
  main.replaceChildren();
  if (!match) {
    setTitle('Not found');
    fill(main, h('section.panel', h('h1', 'Page not found'),
      h('p', `There is no page “${path}”.`), h('p', h('a', { href: '#/overview' }, 'Go to the overview'))));
    return;
  }
  try {
    match.r.view.mount(main, current);
  } catch (e) {
    current.fail(e, main);
  }
}

function logout(message) {
  setToken(null);
  events.stop();
  sessionStorage.removeItem('fedcore.after-login');
  navigate('/login');
  if (message) showBanner(message, 'warning');
}

// Called by the login view once a token has been accepted.
export function loggedIn(newToken) {
  setToken(newToken);
  showBanner(null);
  const next = sessionStorage.getItem('fedcore.after-login');
  sessionStorage.removeItem('fedcore.after-login');
  navigate(next && !next.startsWith('#/login') ? next : '#/overview');
}

onUnauthorized(() => {
  events.stop();
  if (parseHash().path !== '/login') {
    const { path, query } = parseHash();
    sessionStorage.setItem('fedcore.after-login', `#${path}${query.size ? `?${query}` : ''}`);
    navigate('/login');
    showBanner('Your token was not accepted (expired or revoked). Log in again.', 'warning');
  }
});

events.onState((state) => {
  live.dataset.state = state;
  const text = {
    live: 'Live', connecting: 'Connecting…', reconnecting: 'Reconnecting…', offline: 'Offline',
  }[state];
  live.querySelector('.live-text').textContent = text;
  live.title = state === 'live' ? 'Receiving live events from the server' : `Live events: ${text}`;
});

document.getElementById('logout').addEventListener('click', () => logout());
window.addEventListener('hashchange', route);
window.addEventListener('unhandledrejection', (e) => {
  // API failures are shown where they happen; a 401 has already been handled.
  if (e.reason instanceof ApiError) e.preventDefault();
});
route();
