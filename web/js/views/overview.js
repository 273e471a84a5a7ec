// Overview: server health and uptime, clients online, the current run with its round
// progress, the latest runs and the live activity feed.

import { api } from '../api.js';
import { events, coalesce } from '../events.js';
import { fill, h, setTitle, stat, table } from '../dom.js';
import { ago, dateTime, duration, shortDateTime } from '../format.js';
import { eventItem, runActive, runBadge } from '../describe.js';

export function mount(root, ctx) {
  setTitle('Overview');
  const healthBox = h('div.stat-grid#overview-stats', { 'aria-busy': 'true' });
  const currentBox = h('section.panel#current-run', { 'aria-labelledby': 'current-run-title' },
    h('h2#current-run-title', 'Current run'), h('p.muted', 'Loading…'));
  const runsBox = h('section.panel', { 'aria-labelledby': 'recent-runs-title' },
    h('div.panel-head', h('h2#recent-runs-title', 'Latest runs'), h('a', { href: '#/runs' }, 'All runs')),
    h('div#recent-runs', h('p.muted', 'Loading…')));
  // Not a live region: a busy federation would make a screen reader read every update.
  const feed = h('ol.events#activity');
  const activityBox = h('section.panel', { 'aria-labelledby': 'activity-title' },
    h('h2#activity-title', 'Live activity'), feed);
  const errorBox = h('div');

  root.append(
    h('div.page-head', h('h1', 'Overview'),
      h('a.btn.btn-primary', { href: '#/runs/new' }, 'Start a run')),
    errorBox, healthBox, h('div.columns', h('div', currentBox, runsBox), activityBox));

  let infoAt = 0;
  let info = null;
  let healthOk = null;

  const renderStats = (clients) => {
    const online = clients.filter((c) => c.online).length;
    const uptime = info ? info.uptime_s + (Date.now() - infoAt) / 1000 : null;
    fill(healthBox,
      stat('Server', healthOk ? h('span.health-ok', 'Healthy') : h('span.health-bad', 'Unreachable'),
        { hint: info ? `version ${info.version}` : null, id: 'stat-health' }),
      stat('Uptime', h('span#uptime', duration(uptime)),
        { hint: info ? `API ${info.listeners?.api ?? '—'} · federation ${info.listeners?.federation ?? '—'}` : null }),
      stat('Clients online', h('a#clients-online', { href: '#/clients' }, `${online} / ${clients.length}`),
        { hint: `${clients.filter((c) => c.training).length} training now` }),
      stat('Active run', info && info.run_active
        ? h('a', { href: `#/runs/${info.active_run_id}` }, `#${info.active_run_id}`) : 'none',
        { hint: info && info.waiting_for_admin ? 'waiting for an admin to start the next round' : null }));
    healthBox.removeAttribute('aria-busy');
  };

  const renderCurrent = (run) => {
    if (!run) {
      fill(currentBox, h('h2#current-run-title', 'Current run'),
        h('p.muted', 'No run is active. Start one to train a model across the connected clients.'),
        h('a.btn', { href: '#/runs/new' }, 'Start a run'));
      return;
    }
    const inFlight = info && info.active_round ? info.active_round : null;
    const done = run.last_round || 0;
    fill(currentBox,
      h('div.panel-head', h('h2#current-run-title', 'Current run'), runBadge(run.state)),
      h('p.run-title', h('a', { href: `#/runs/${run.id}` }, run.name || `run ${run.id}`),
        h('span.muted', ` #${run.id}${run.manual ? ' · manual' : ''}`)),
      h('div.progress-row',
        h('label', { for: 'current-progress' },
          `${done} of ${run.rounds_total} rounds committed`,
          inFlight && runActive(run) ? ` · round ${inFlight} in flight` : ''),
        h('progress#current-progress', { max: run.rounds_total, value: done })),
      info && info.waiting_for_admin
        ? h('p.notice', 'Manual run: waiting for an admin to start the next round on the run page.') : null,
      h('p.muted', `Started ${dateTime(run.created_ms)} · updated ${ago(run.updated_ms)}`));
  };

  const renderRuns = (runs) => {
    fill(runsBox.querySelector('#recent-runs'), table({
      columns: [
        { label: 'Run', value: (r) => h('a', { href: `#/runs/${r.id}` }, r.name || `run ${r.id}`) },
        { label: 'State', value: (r) => runBadge(r.state) },
        { label: 'Rounds', className: 'num', value: (r) => `${r.last_round} / ${r.rounds_total}` },
        { label: 'Started', value: (r) => h('time', { title: dateTime(r.created_ms) }, shortDateTime(r.created_ms)) },
      ],
      rows: runs,
      empty: 'No runs yet.',
    }));
  };

  const renderFeed = () => {
    if (events.recent.length === 0) {
      fill(feed, h('li.muted.event-empty', 'No events since this page was opened. Events appear here as clients connect and rounds run.'));
      return;
    }
    fill(feed, events.recent.slice(0, 25).map(eventItem));
  };

  const load = async () => {
    try {
      const [health, newInfo, clients, runs] = await Promise.all([
        api.health().then(() => true, () => false),
        api.info(),
        api.allClients(),
        api.runs({ limit: 5 }),
      ]);
      if (!ctx.alive) return;
      healthOk = health;
      info = newInfo;
      infoAt = Date.now();
      const active = info.run_active && info.active_run_id
        ? await api.run(info.active_run_id).catch(() => null) : null;
      if (!ctx.alive) return;
      errorBox.replaceChildren();
      renderStats(clients);
      renderCurrent(active);
      renderRuns(runs.items);
      ctx.lastClients = clients;
    } catch (e) {
      if (!ctx.alive || e.status === 401) return;
      healthOk = false;
      fill(errorBox, h('p.notice.notice-bad', { role: 'alert' }, `Cannot load the overview: ${e.message}`));
    }
  };

  const reload = coalesce(load, 400);
  ctx.cleanup(reload.cancel);
  ctx.onEvent('*', () => { renderFeed(); reload(); });
  ctx.onResync(reload);
  ctx.every(1000, () => {
    const el = healthBox.querySelector('#uptime');
    if (el && info) el.textContent = duration(info.uptime_s + (Date.now() - infoAt) / 1000);
  });
  ctx.every(15000, load);  // last-seen times and uptime drift, even with no events
  renderFeed();
  load();
}
