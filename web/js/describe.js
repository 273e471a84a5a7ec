// Words for the API's states and events, shared by the views.

import { badge, h } from './dom.js';
import { clock } from './format.js';

const runStateKinds = {
  pending: 'neutral', running: 'info', paused: 'warn', finished: 'ok', failed: 'bad', stopped: 'neutral',
};
const resultKinds = { ok: 'ok', rejected: 'bad', timeout: 'warn', dropped: 'neutral', late: 'neutral' };
const roundKinds = { committed: 'ok', failed: 'bad', running: 'info' };
const evaluationKinds = { ok: 'ok', refused: 'warn', failed: 'bad', timeout: 'warn', offline: 'neutral', dropped: 'neutral' };

const RUN_STATES = ['pending', 'running', 'paused', 'finished', 'failed', 'stopped'];

export const runActive = (run) => ['pending', 'running', 'paused'].includes(run.state);

export function runBadge(state) {
  return badge(state, runStateKinds[state] || 'neutral');
}

export function resultBadge(status) {
  return badge(status === 'timeout' ? 'timed out' : status, resultKinds[status] || 'neutral');
}

// What a client asked to evaluate a round's new model answered (GET .../evaluation).
export function evaluationBadge(status) {
  return badge(status === 'timeout' ? 'timed out' : status, evaluationKinds[status] || 'neutral');
}

export function roundBadge(state) {
  return badge(state, roundKinds[state] || 'neutral');
}

export function onlineBadge(client) {
  if (!client.online) return badge('offline', 'neutral');
  return client.training ? badge('training', 'info') : badge('online', 'ok');
}

function detailText(detail) {
  if (!detail || typeof detail !== 'object') return '';
  return detail.reason || detail.message || '';
}

// One line of text for a live event.
export function eventText(e) {
  const run = e.run_id ? `run ${e.run_id}` : '';
  const round = e.round ? `round ${e.round}` : '';
  const client = e.client_id || 'a client';
  const reason = detailText(e.detail);
  switch (e.kind) {
    case 'client_connected': return `${client} connected`;
    case 'client_disconnected': return `${client} disconnected${reason ? ` (${reason})` : ''}`;
    case 'run_started': return `${run} started`;
    case 'round_started': return `${run}: ${round} started`;
    case 'update_accepted': return `${run}: update from ${client} accepted (${round})`;
    case 'update_rejected': return `${run}: update from ${client} rejected (${round})${reason ? `: ${reason}` : ''}`;
    case 'update_stale': return `${run}: stale update from ${client} ignored`;
    case 'update_refused': return `malformed update report from ${client} refused${reason ? `: ${reason}` : ''}`;
    case 'round_committed': return `${run}: ${round} committed`;
    case 'round_failed': return `${run}: ${round} failed${reason ? `: ${reason}` : ''}`;
    case 'run_ended': {
      // The server sends the state as a name, or (older servers) as its index.
      const raw = e.detail ? e.detail.state : undefined;
      const name = typeof raw === 'number' ? RUN_STATES[raw] : raw;
      const state = name ? ` (${name})` : '';
      return `${run} ended${state}${reason ? `: ${reason}` : ''}`;
    }
    default: return `${e.kind}${run ? ` · ${run}` : ''}`;
  }
}

const eventKinds = {
  update_rejected: 'bad', update_refused: 'bad', round_failed: 'bad', client_disconnected: 'neutral',
  round_committed: 'ok', run_ended: 'info', update_stale: 'warn',
};

export function eventItem(e) {
  const link = e.run_id ? `#/runs/${e.run_id}` : (e.client_id ? '#/clients' : null);
  const text = eventText(e);
  return h('li.event', { dataset: { kind: eventKinds[e.kind] || 'info' } },
    h('time', { datetime: e.time_ms ? new Date(e.time_ms).toISOString() : '' }, clock(e.time_ms)),
    link ? h('a', { href: link }, text) : h('span', text));
}
