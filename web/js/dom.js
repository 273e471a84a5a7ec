// Small DOM helpers. Every text goes in through textContent (never innerHTML), so data
// from the server cannot inject markup; and nothing sets a style attribute, which the
// server's CSP (default-src 'self') would refuse.

// h('tag#id.class1.class2', {attr: value, onclick: fn}, ...children)
// Children may be strings, numbers, nodes, arrays, or null/undefined/false (skipped).
export function h(spec, attrs, ...children) {
  const tag = /^[a-z0-9-]*/i.exec(spec)[0];
  const el = document.createElement(tag || 'div');
  const classes = [];
  for (const [, sigil, name] of spec.slice(tag.length).matchAll(/([#.])([^#.]+)/g)) {
    if (sigil === '#') el.id = name;
    else classes.push(name);
  }
  if (classes.length) el.className = classes.join(' ');
  if (attrs !== null && attrs !== undefined && attrs !== false
      && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'class') {
      el.className = [el.className, value].filter(Boolean).join(' ');
    } else if (key === 'dataset') {
      Object.assign(el.dataset, value);
    } else if (key in el && typeof value !== 'string' && key !== 'list') {
      el[key] = value;  // properties such as checked, disabled, value, hidden
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : String(child));
  }
  return parent;
}

// Replaces the children of `el`.
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

// A table from column definitions: [{label, value(row) -> node|string, className}].
// `rowAttrs(row)` may return attributes for the <tr>.
export function table({ caption, columns, rows, empty = 'Nothing yet.', rowAttrs, id }) {
  const head = h('thead', h('tr', columns.map((c) =>
    h('th', { scope: 'col', class: c.className }, c.label))));
  const body = h('tbody');
  if (rows.length === 0) {
    body.append(h('tr', h('td.empty', { colSpan: columns.length }, empty)));
  }
  for (const row of rows) {
    body.append(h('tr', rowAttrs ? rowAttrs(row) : null,
      columns.map((c) => h('td', { class: c.className }, c.value(row)))));
  }
  return h('div.table-wrap', { id },
    h('table', caption ? h('caption', caption) : null, head, body));
}

// A labelled value for the stat cards.
export function stat(label, value, { hint, id } = {}) {
  return h('div.stat', { id },
    h('div.stat-label', label),
    h('div.stat-value', value),
    hint ? h('div.stat-hint', hint) : null);
}

export function badge(text, kind = text) {
  return h('span.badge', { dataset: { kind: String(kind) } }, text);
}

export function setTitle(text) {
  document.title = text ? `${text} · Fedcore admin` : 'Fedcore admin';
}
