// A parser for the text/event-stream format (the WHATWG "server-sent events" wire
// format), fed with decoded text chunks as they arrive from a fetch() stream. Kept free
// of DOM and network code so Node can test it (tests/web/unit.test.mjs).
//
// Lines end with LF, CRLF or CR; a line starting with ':' is a comment (the server's
// keep-alive); "data" lines accumulate, joined by LF; an empty line dispatches the event.

export class SseParser {
  constructor() {
    this.buffer = '';
    this.pendingCR = false;  // the previous chunk ended in CR: a following LF belongs to it
    this.reset();
    this.lastEventId = '';
  }

  reset() {
    this.data = [];
    this.type = '';
    this.id = null;
  }

  // Returns the events completed by this chunk: [{id, event, data, retry?}].
  push(chunk) {
    const events = [];
    let text = chunk;
    if (this.pendingCR && text.startsWith('\n')) text = text.slice(1);
    this.pendingCR = false;
    this.buffer += text;
    let start = 0;
    for (let i = 0; i < this.buffer.length; i += 1) {
      const c = this.buffer[i];
      if (c !== '\n' && c !== '\r') continue;
      const line = this.buffer.slice(start, i);
      if (c === '\r') {
        if (i + 1 < this.buffer.length) {
          if (this.buffer[i + 1] === '\n') i += 1;
        } else {
          this.pendingCR = true;
        }
      }
      start = i + 1;
      const event = this.line(line);
      if (event) events.push(event);
    }
    this.buffer = this.buffer.slice(start);
    return events;
  }

  line(line) {
    if (line === '') {
      if (this.data.length === 0 && this.id === null && !this.type) return null;
      if (this.id !== null) this.lastEventId = this.id;
      const event = {
        id: this.id ?? this.lastEventId,
        event: this.type || 'message',
        data: this.data.join('\n'),
      };
      const hadData = this.data.length > 0;
      this.reset();
      return hadData ? event : null;
    }
    if (line.startsWith(':')) return null;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.type = value;
    else if (field === 'id' && !value.includes('\0')) this.id = value;
    // "retry" and unknown fields: ignored (we choose our own backoff).
    return null;
  }
}

// Reconnect delay after `failures` consecutive failures: 1 s doubling up to 30 s, with
// +-20 % jitter so many dashboards do not reconnect in step.
export function backoffMs(failures, random = Math.random) {
  const base = Math.min(30000, 1000 * 2 ** Math.max(0, failures - 1));
  return Math.round(base * (0.8 + 0.4 * random()));
}
