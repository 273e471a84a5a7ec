// Runs: every run, newest first, filterable by state, paginated.

import { api } from '../api.js';
import { coalesce } from '../events.js';
import { fill, h, setTitle, table } from '../dom.js';
import { dateTime, shortDateTime } from '../format.js';
import { runBadge } from '../describe.js';

const PAGE = 25;
const STATES = ['', 'pending', 'running', 'paused', 'finished', 'failed', 'stopped'];

export function mount(root, ctx) {
  setTitle('Runs');
  const state = STATES.includes(ctx.query.get('state')) ? ctx.query.get('state') : '';
  const offset = Math.max(0, Number.parseInt(ctx.query.get('offset') || '0', 10) || 0);
  const filter = h('select#state-filter', {
    onchange: () => ctx.navigate(`/runs${filter.value ? `?state=${filter.value}` : ''}`),
  }, STATES.map((s) => h('option', { value: s, selected: s === state }, s || 'any state')));
  const list = h('div#runs-list', { 'aria-busy': 'true' }, h('p.muted', 'Loading…'));
  const pager = h('nav.pager', { 'aria-label': 'Pages of runs' });

  root.append(
    h('div.page-head', h('h1', 'Runs'), h('a.btn.btn-primary', { href: '#/runs/new' }, 'Start a run')),
    h('section.panel',
      h('div.toolbar', h('label', { for: 'state-filter' }, 'State'), filter),
      list, pager));

  const link = (o) => `#/runs?${new URLSearchParams({ ...(state ? { state } : {}), offset: String(o) })}`;

  const load = async () => {
    try {
      const page = await api.runs({ limit: PAGE, offset, state: state || undefined });
      if (!ctx.alive) return;
      fill(list, table({
        caption: `${page.total} run${page.total === 1 ? '' : 's'}${state ? ` in state ${state}` : ''}`,
        columns: [
          { label: 'ID', className: 'num', value: (r) => r.id },
          { label: 'Name', value: (r) => h('a', { href: `#/runs/${r.id}` }, r.name || `run ${r.id}`) },
          { label: 'State', className: 'wrap', value: (r) => [runBadge(r.state), r.reason ? h('span.reason', r.reason) : null] },
          { label: 'Model', value: (r) => r.config?.model?.type ?? '—' },
          { label: 'Progress', value: (r) => h('span.progress-cell',
            h('progress', { max: r.rounds_total, value: r.last_round, 'aria-label': `${r.last_round} of ${r.rounds_total} rounds` }),
            h('span.num', `${r.last_round} / ${r.rounds_total}`)) },
          { label: 'Mode', value: (r) => (r.manual ? 'manual' : 'automatic') },
          { label: 'Created', value: (r) => h('time', { title: dateTime(r.created_ms) }, shortDateTime(r.created_ms)) },
          { label: 'Updated', value: (r) => h('time', { title: dateTime(r.updated_ms) }, shortDateTime(r.updated_ms)) },
        ],
        rows: page.items,
        empty: state ? `No ${state} runs.` : 'No runs yet. Start one with “Start a run”.',
      }));
      list.removeAttribute('aria-busy');
      const parts = [];
      if (offset > 0) parts.push(h('a.btn', { href: link(Math.max(0, offset - PAGE)) }, '← Newer'));
      if (page.total > 0) {
        parts.push(h('span.muted', `${offset + 1}–${Math.min(offset + page.items.length, page.total)} of ${page.total}`));
      }
      if (offset + page.items.length < page.total) parts.push(h('a.btn', { href: link(offset + PAGE) }, 'Older →'));
      fill(pager, parts);
    } catch (e) {
      ctx.fail(e, root);
    }
  };
  const reload = coalesce(load, 500);
  ctx.cleanup(reload.cancel);
  for (const kind of ['run_started', 'round_committed', 'round_failed', 'run_ended']) ctx.onEvent(kind, reload);
  ctx.onResync(reload);
  load();
}
