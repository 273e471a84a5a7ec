// The live event stream (GET /api/v1/events). EventSource cannot send an Authorization
// header, so the stream is read with fetch() and a ReadableStream reader, parsed by
// SseParser, and reconnected with exponential backoff. Subscribers get each event's
// parsed JSON `data` ({id, time_ms, kind, run_id, round, client_id, detail}).
//
// After a reconnect the app may have missed events (the server also drops subscribers
// that fall 1,000 events behind), so 'resync' listeners are told to reload their data.

import { authHeaders, notifyUnauthorized, token } from './api.js';
import { SseParser, backoffMs } from './sse.js';

const IDLE_LIMIT_MS = 45000;  // three keep-alives (every 15 s) missed: the link is dead

class EventStream {
  constructor() {
    this.listeners = new Map();  // kind or '*' -> Set(fn)
    this.stateListeners = new Set();
    this.resyncListeners = new Set();
    this.recent = [];  // the last 50 events, newest first, for the activity feed
    this.state = 'offline';
    this.controller = null;
    this.failures = 0;
    this.timer = null;
    this.running = false;
    this.connectedOnce = false;
    this.lastEventId = '';
    this.generation = 0;  // bumped by stop(): a connect() of an older session gives up
  }

  on(kind, fn) {
    if (!this.listeners.has(kind)) this.listeners.set(kind, new Set());
    this.listeners.get(kind).add(fn);
    return () => this.listeners.get(kind).delete(fn);
  }

  onState(fn) {
    this.stateListeners.add(fn);
    fn(this.state);
    return () => this.stateListeners.delete(fn);
  }

  onResync(fn) {
    this.resyncListeners.add(fn);
    return () => this.resyncListeners.delete(fn);
  }

  setState(state) {
    if (state === this.state) return;
    this.state = state;
    for (const fn of this.stateListeners) fn(state);
  }

  start() {
    if (this.running) return;
    this.running = true;
    this.failures = 0;
    this.connect();
  }

  stop() {
    this.running = false;
    this.generation += 1;
    clearTimeout(this.timer);
    this.timer = null;
    if (this.controller) this.controller.abort();
    this.controller = null;
    this.connectedOnce = false;
    this.recent = [];
    this.setState('offline');
  }

  scheduleReconnect() {
    if (!this.running) return;
    this.failures += 1;
    const delay = backoffMs(this.failures);
    this.setState('reconnecting');
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.connect(), delay);
  }

  async connect() {
    if (!this.running || !token()) return;
    const generation = this.generation;
    const controller = new AbortController();
    this.controller = controller;
    this.setState(this.connectedOnce ? 'reconnecting' : 'connecting');
    let idle = null;
    const armIdle = () => {
      clearTimeout(idle);
      idle = setTimeout(() => controller.abort(), IDLE_LIMIT_MS);
    };
    try {
      const headers = authHeaders({ Accept: 'text/event-stream' });
      if (this.lastEventId) headers['Last-Event-ID'] = this.lastEventId;
      armIdle();
      const response = await fetch('/api/v1/events', {
        headers, cache: 'no-store', signal: controller.signal,
      });
      if (response.status === 401) {
        clearTimeout(idle);
        this.stop();
        notifyUnauthorized();
        return;
      }
      if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
      const wasConnected = this.connectedOnce;
      this.connectedOnce = true;
      this.failures = 0;
      this.setState('live');
      if (wasConnected) for (const fn of this.resyncListeners) fn();
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      const parser = new SseParser();
      for (;;) {
        armIdle();
        const { value, done } = await reader.read();
        if (done) break;
        for (const event of parser.push(value)) this.dispatch(event);
      }
    } catch (e) {
      // Aborted (stop(), idle watchdog) or the network failed: both end in a reconnect
      // below, unless stop() was called.
    } finally {
      clearTimeout(idle);
    }
    if (generation !== this.generation) return;
    if (this.controller === controller) this.controller = null;
    this.scheduleReconnect();
  }

  dispatch(event) {
    if (event.id) this.lastEventId = event.id;
    let payload;
    try {
      payload = JSON.parse(event.data);
    } catch {
      return;  // not ours; the contract says data is JSON
    }
    if (!payload || typeof payload !== 'object') return;
    payload.kind = payload.kind || event.event;
    this.recent.unshift(payload);
    this.recent.length = Math.min(this.recent.length, 50);
    for (const key of [payload.kind, '*']) {
      for (const fn of this.listeners.get(key) || []) {
        try {
          fn(payload);
        } catch (e) {
          console.warn('event listener failed', e);
        }
      }
    }
  }
}

export const events = new EventStream();

// Calls `fn` once, `ms` after the first of a burst of calls: a burst of events causes
// one reload, and a steady stream still causes one every `ms`.
export function coalesce(fn, ms = 300) {
  let timer = null;
  const wrapped = () => {
    if (timer !== null) return;
    timer = setTimeout(() => { timer = null; fn(); }, ms);
  };
  wrapped.cancel = () => { clearTimeout(timer); timer = null; };
  return wrapped;
}
