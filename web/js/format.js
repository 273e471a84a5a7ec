// Formatting of the API's values for people. The API gives times as milliseconds since
// the epoch (*_ms), durations in seconds (*_s), and null for absent metrics.

export const dash = '—';

export function number(value, digits = 0) {
  if (value === null || value === undefined || Number.isNaN(value)) return dash;
  return Number(value).toLocaleString(undefined, {
    minimumFractionDigits: digits, maximumFractionDigits: digits,
  });
}

export function metric(value, digits = 4) {
  if (value === null || value === undefined || !Number.isFinite(value)) return dash;
  return Number(value).toFixed(digits);
}

export function percent(value, digits = 1) {
  if (value === null || value === undefined || !Number.isFinite(value)) return dash;
  return `${(value * 100).toFixed(digits)} %`;
}

// A config object as "key value, key value"; numbers to 6 significant digits, since the
// server stores float32 values (0.1 comes back as 0.10000000149011612).
export function compact(value) {
  if (value === null || value === undefined) return dash;
  if (typeof value === 'number') return String(Number(value.toPrecision(6)));
  if (Array.isArray(value)) return `[${value.map(compact).join(', ')}]`;
  if (typeof value === 'object') {
    return Object.entries(value).map(([k, v]) => `${k} ${compact(v)}`).join(', ');
  }
  return String(value);
}

export function bytes(value) {
  if (value === null || value === undefined) return dash;
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Number(value);
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}

export function seconds(value) {
  if (value === null || value === undefined || !Number.isFinite(value)) return dash;
  if (value === 0) return '0 ms';
  if (value < 0.001) return `${Math.max(1, Math.round(value * 1e6))} µs`;
  if (value < 0.01) return `${(value * 1000).toFixed(1)} ms`;
  if (value < 1) return `${Math.round(value * 1000)} ms`;
  if (value < 60) return `${value.toFixed(value < 10 ? 2 : 1)} s`;
  return duration(value);
}

// 93784 -> "1 d 2 h 3 min"
export function duration(totalSeconds) {
  if (totalSeconds === null || totalSeconds === undefined) return dash;
  let s = Math.max(0, Math.floor(totalSeconds));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hr = Math.floor(s / 3600); s -= hr * 3600;
  const min = Math.floor(s / 60); s -= min * 60;
  if (d) return `${d} d ${hr} h ${min} min`;
  if (hr) return `${hr} h ${min} min`;
  if (min) return `${min} min ${s} s`;
  return `${s} s`;
}

export function dateTime(ms) {
  if (ms === null || ms === undefined) return dash;
  return new Date(ms).toLocaleString(undefined, {
    year: 'numeric', month: 'short', day: '2-digit',
    hour: '2-digit', minute: '2-digit', second: '2-digit',
  });
}

// "Nov 21, 11:09" (the year only when it is not this year).
export function shortDateTime(ms) {
  if (ms === null || ms === undefined) return dash;
  const d = new Date(ms);
  const sameYear = d.getFullYear() === new Date().getFullYear();
  return d.toLocaleString(undefined, {
    year: sameYear ? undefined : 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit',
  });
}

export function clock(ms) {
  if (ms === null || ms === undefined) return dash;
  return new Date(ms).toLocaleTimeString(undefined, {
    hour: '2-digit', minute: '2-digit', second: '2-digit',
  });
}

// "12 s ago", "3 min ago", ... relative to `now`.
export function ago(ms, now = Date.now()) {
  if (ms === null || ms === undefined) return dash;
  const s = Math.round((now - ms) / 1000);
  if (s < 5) return 'just now';
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}
