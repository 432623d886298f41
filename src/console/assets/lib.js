// Shared helpers of the console: the admin API client, DOM building (text only: data never
// becomes HTML), formatting, the Prometheus text parser and CSV.

const TOKEN = 'infera.token';
const ACTOR = 'infera.actor';

export class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(typeof e === 'string' ? e : e.message || (body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = e.code || (body && body.error_code) || '';
    this.param = e.param || '';
    this.body = body;
  }
}

export const session = {
  token: () => sessionStorage.getItem(TOKEN) || '',
  actor: () => sessionStorage.getItem(ACTOR) || '',
  save(token, actor) {
    sessionStorage.setItem(TOKEN, token);
    sessionStorage.setItem(ACTOR, actor || '');
  },
  clear() {
    sessionStorage.removeItem(TOKEN);
    sessionStorage.removeItem(ACTOR);
  },
};

// One admin API call: the token as the admin API expects it (Authorization: Bearer), the
// person's name as x-infera-actor (recorded in the audit log). Resolves to the JSON answer (or
// text for text/plain); rejects with ApiError carrying the API's error shape.
export async function api(path, { method = 'GET', body, token } = {}) {
  const headers = { authorization: `Bearer ${token ?? session.token()}` };
  const actor = session.actor();
  if (actor) headers['x-infera-actor'] = `console:${actor}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
  });
  const type = res.headers.get('content-type') || '';
  const data = type.includes('json') ? await res.json().catch(() => null) : await res.text();
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

// h('div', {class: 'x', onclick: fn}, 'text', child, [more]) -> Element. Strings become text.
export function h(tag, attrs, ...children) {
  const el = document.createElementNS(
    tag === 'svg' || attrs?.svg ? 'http://www.w3.org/2000/svg' : 'http://www.w3.org/1999/xhtml',
    tag,
  );
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false || k === 'svg') continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'value' && 'value' in el) el.value = v;
    else if (k === 'checked') el.checked = !!v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const fmt = {
  int: (n) => (n === undefined || n === null ? '–' : Math.round(n).toLocaleString('en-US')),
  num: (n, d = 1) =>
    n === undefined || n === null || Number.isNaN(n) ? '–' : Number(n).toFixed(d),
  usd: (n) => (n ? `$${Number(n).toFixed(n < 1 ? 4 : 2)}` : '$0'),
  pct: (n) => (n === undefined || Number.isNaN(n) ? '–' : `${(n * 100).toFixed(1)}%`),
  ms: (s) => (s === undefined || s === null || Number.isNaN(s) ? '–' : `${(s * 1000).toFixed(1)} ms`),
  time: (ms) => (ms ? new Date(ms).toISOString().replace('T', ' ').slice(0, 19) + 'Z' : '–'),
  list: (a) => (a && a.length ? a.join(', ') : 'all'),
};

// Prometheus text format -> [{name, labels, value}] (histograms' buckets kept as plain samples);
// `want(name)` skips other samples before their labels are parsed.
export function parseMetrics(text, want = () => true) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const end = line.search(/[{ ]/);
    if (!want(end < 0 ? line : line.slice(0, end))) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
      let l;
      while ((l = re.exec(m[3]))) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    }
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

// Prometheus histogram buckets [{le, count}] (cumulative, sorted by le) -> the bucket bound at
// quantile q (an upper bound of the true quantile); undefined without observations.
export function bucketQuantile(buckets, q) {
  const total = buckets.length ? buckets[buckets.length - 1].count : 0;
  if (!total) return undefined;
  for (const b of buckets) if (b.count >= q * total) return b.le;
  return undefined;
}

// The `<name>_bucket` samples matching `filter`, summed per bound and sorted: [{le, count}].
export function bucketsOf(samples, name, filter = () => true) {
  const by = new Map();
  for (const s of samples) {
    if (s.name !== `${name}_bucket` || !filter(s.labels)) continue;
    by.set(s.labels.le, (by.get(s.labels.le) || 0) + s.value);
  }
  return [...by].map(([le, count]) => ({ le: le === '+Inf' ? Infinity : Number(le), count })).sort((a, b) => a.le - b.le);
}

// Sums samples of `name` by the labels `by` (a key joined with '|').
export function sumBy(samples, name, by, filter = () => true) {
  const out = new Map();
  for (const s of samples) {
    if (s.name !== name || !filter(s.labels)) continue;
    const key = by.map((b) => s.labels[b] ?? '').join('|');
    out.set(key, (out.get(key) || 0) + s.value);
  }
  return out;
}

export function toCsv(columns, rows) {
  const cell = (v) => {
    const s = v === undefined || v === null ? '' : String(v);
    return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  };
  return [columns.map(cell).join(','), ...rows.map((r) => columns.map((c) => cell(r[c])).join(','))].join('\n') + '\n';
}

export function download(name, text, type = 'text/csv') {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// A transient message at the bottom of the screen (role=status: read by screen readers).
export function toast(message, kind = 'ok') {
  const box = document.getElementById('toasts');
  const t = h('div', { class: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, message);
  box.append(t);
  setTimeout(() => t.remove(), kind === 'error' ? 8000 : 4000);
}

// A modal dialog (<dialog>: focus is trapped and Escape closes it). Resolves with the value
// passed to close(), or undefined when dismissed.
export function modal(title, body, buttons) {
  return new Promise((resolve) => {
    const dlg = h('dialog', { class: 'modal', 'aria-label': title });
    const close = (v) => {
      dlg.close();
      dlg.remove();
      resolve(v);
    };
    const row = h('div', { class: 'buttons' });
    for (const b of buttons) {
      row.append(h('button', { class: b.primary ? 'primary' : b.danger ? 'danger' : '', type: 'button', onclick: () => close(b.value) }, b.label));
    }
    dlg.append(h('h2', {}, title), body, row);
    dlg.addEventListener('cancel', (e) => {
      e.preventDefault();
      close(undefined);
    });
    document.body.append(dlg);
    dlg.showModal();
  });
}

export async function confirmAction(title, text, label = 'Confirm', danger = true) {
  const v = await modal(title, h('p', {}, text), [
    { label: 'Cancel', value: false },
    { label, value: true, primary: !danger, danger },
  ]);
  return v === true;
}

// A labelled form field. `opts.type`: text, number, select (opts.options), checkbox.
export function field(label, name, opts = {}) {
  const id = `f-${name}-${Math.random().toString(36).slice(2, 8)}`;
  let input;
  if (opts.type === 'select') {
    input = h('select', { id, name }, (opts.options || []).map((o) => h('option', { value: o, selected: o === opts.value }, o)));
  } else if (opts.type === 'checkbox') {
    input = h('input', { id, name, type: 'checkbox', checked: !!opts.value });
  } else {
    input = h('input', { id, name, type: opts.type || 'text', value: opts.value ?? '', placeholder: opts.placeholder || '', min: opts.min, step: opts.step, required: opts.required });
  }
  return h('div', { class: `field ${opts.type === 'checkbox' ? 'check' : ''}` }, h('label', { for: id }, label), input, h('div', { class: 'field-error', role: 'alert' }));
}

// The form's fields as an object: numbers for type=number (empty ones left out), booleans for
// checkboxes, strings otherwise (empty ones left out).
export function formValues(form) {
  const out = {};
  for (const el of form.querySelectorAll('input,select')) {
    if (!el.name) continue;
    if (el.type === 'checkbox') out[el.name] = el.checked;
    else if (el.value === '') continue;
    else if (el.type === 'number') out[el.name] = Number(el.value);
    else out[el.name] = el.value;
  }
  return out;
}

// Shows an API error at the form field it names (error.param, or a field quoted in the
// message), else as a toast.
export function showFormError(form, err) {
  for (const e of form.querySelectorAll('.field-error')) e.textContent = '';
  for (const e of form.querySelectorAll('[aria-invalid]')) e.removeAttribute('aria-invalid');
  // The field the API names: error.param, else a field the message names ("field 'rpm' has the
  // wrong type", "budget_usd must be >= 0", "team name must be ...").
  const msg = err.message || '';
  const named = [err.param, ...[...msg.matchAll(/field '([a-z_]+)'|([a-z_]+) must/g)].map((m) => m[1] || m[2])];
  const input = named.map((n) => n && form.querySelector(`[name="${CSS.escape(n)}"]`)).find(Boolean);
  if (input) {
    input.setAttribute('aria-invalid', 'true');
    input.closest('.field').querySelector('.field-error').textContent = msg;
    input.focus();
  } else {
    toast(msg, 'error');
  }
}

// A table of `rows`, built `opts.page` rows at a time (100 by default; a browser lays a
// 1,000-row table out in ~300 ms): a "Show more" button under it adds the next ones.
export function table(columns, rows, opts = {}) {
  const page = opts.page ?? 100;
  const head = h('tr', {}, columns.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : '' }, c.label)));
  const row = (r) => h('tr', { 'data-id': opts.id ? opts.id(r) : undefined }, columns.map((c) => h('td', { class: c.num ? 'num' : '' }, c.render ? c.render(r) : r[c.key])));
  const body = h('tbody', {});
  const foot = h('tfoot', {});
  let shown = 0;
  const more = () => {
    const next = rows.slice(shown, shown + page);
    body.append(...next.map(row));
    shown += next.length;
    clear(foot, shown < rows.length
      ? h('tr', {}, h('td', { colspan: columns.length, class: 'more' }, `${shown} of ${rows.length} shown `,
        h('button', { type: 'button', class: 'small', 'data-more': '', onclick: more }, `Show ${Math.min(page, rows.length - shown)} more`)))
      : null);
  };
  if (rows.length) more();
  else body.append(h('tr', {}, h('td', { colspan: columns.length, class: 'empty' }, opts.empty || 'nothing yet')));
  return h('table', { class: 'grid', 'aria-label': opts.label, 'data-rows': rows.length }, h('thead', {}, head), body, foot);
}

export function badge(text, kind) {
  return h('span', { class: `badge ${kind}` }, text);
}

// A headline figure: its value over its label (`kind` "bad" colours it).
export function kpi(label, value, kind = '') {
  return h('div', { class: kind ? `kpi ${kind}` : 'kpi' }, h('div', { class: 'v' }, value), h('div', { class: 'l' }, label));
}

export function section(title, ...children) {
  return h('section', { class: 'card', 'aria-label': title }, h('h2', {}, title), children);
}
