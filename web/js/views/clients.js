// Clients: every hospital the server knows, with online state, last seen, data size
// and the rounds it joined. Connections, disconnections and updates refresh it live.

import { api } from '../api.js';
import { coalesce } from '../events.js';
import { fill, h, setTitle, stat, table } from '../dom.js';
import { ago, dash, dateTime, number, shortDateTime } from '../format.js';
import { onlineBadge } from '../describe.js';

const PAGE = 50;

export function mount(root, ctx) {
  setTitle('Clients');
  const offset = Math.max(0, Number.parseInt(ctx.query.get('offset') || '0', 10) || 0);
  const summary = h('div.stat-grid#clients-summary');
  const list = h('div#clients-list', { 'aria-busy': 'true' }, h('p.muted', 'Loading…'));
  const pager = h('nav.pager', { 'aria-label': 'Pages of clients' });
  root.append(h('div.page-head', h('h1', 'Clients')), summary, h('section.panel', list, pager));

  let clients = [];
  const render = () => {
    const now = Date.now();
    fill(list, table({
      caption: 'Clients (hospitals) registered with this server',
      columns: [
        { label: 'Client', value: (c) => h('span.client-id', c.id) },
        { label: 'State', value: (c) => onlineBadge(c) },
        { label: 'Last seen', value: (c) => (c.online ? h('span', 'now') : h('time', {
          datetime: c.last_seen_ms ? new Date(c.last_seen_ms).toISOString() : '', title: dateTime(c.last_seen_ms),
        }, ago(c.last_seen_ms, now))) },
        { label: 'Connected', value: (c) => (c.connected_ms ? h('span', { title: dateTime(c.connected_ms) }, ago(c.connected_ms, now)) : dash) },
        { label: 'Peer', value: (c) => c.peer || dash },
        { label: 'Samples', className: 'num', value: (c) => number(c.samples) },
        { label: 'Test samples', className: 'num', value: (c) => number(c.test_samples) },
        { label: 'Input', value: (c) => (Array.isArray(c.input_shape) ? c.input_shape.join(' × ') : dash) },
        { label: 'Classes', className: 'num', value: (c) => c.num_classes ?? dash },
        { label: 'Rounds joined', className: 'num', value: (c) => number(c.rounds_joined) },
        { label: 'Software', value: (c) => c.software || dash },
        { label: 'First seen', value: (c) => h('time', { title: dateTime(c.first_seen_ms) }, shortDateTime(c.first_seen_ms)) },
      ],
      rows: clients,
      rowAttrs: (c) => ({ dataset: { client: c.id, online: String(Boolean(c.online)), rounds: String(c.rounds_joined ?? 0) } }),
      empty: 'No client has connected yet. Clients appear here when their daemon connects.',
    }));
    list.removeAttribute('aria-busy');
  };

  const load = async () => {
    try {
      const page = await api.clients({ limit: PAGE, offset });
      if (!ctx.alive) return;
      clients = page.items;
      const online = clients.filter((c) => c.online).length;
      const samples = clients.reduce((n, c) => n + (c.online ? c.samples || 0 : 0), 0);
      fill(summary,
        stat('Online', h('span#clients-online-count', `${online} of ${page.total}`), { hint: page.total > PAGE ? 'on this page' : null }),
        stat('Training now', clients.filter((c) => c.training).length),
        stat('Samples online', number(samples), { hint: 'training samples held by online clients' }));
      render();
      const parts = [];
      if (offset > 0) parts.push(h('a.btn', { href: `#/clients?offset=${Math.max(0, offset - PAGE)}` }, '← Previous'));
      if (page.total > PAGE) parts.push(h('span.muted', `${offset + 1}–${offset + clients.length} of ${page.total}`));
      if (offset + clients.length < page.total) parts.push(h('a.btn', { href: `#/clients?offset=${offset + PAGE}` }, 'Next →'));
      fill(pager, parts);
    } catch (e) {
      ctx.fail(e, root);
    }
  };
  const reload = coalesce(load, 400);
  ctx.cleanup(reload.cancel);
  for (const kind of ['client_connected', 'client_disconnected', 'round_started', 'update_accepted',
    'update_rejected', 'round_committed', 'round_failed']) ctx.onEvent(kind, reload);
  ctx.onResync(reload);
  ctx.every(10000, render);  // "seen 12 s ago" stays true without a request
  ctx.every(30000, load);
  load();
}
