// Routes, the config screen: the running config file (GET /admin/config) as forms — models,
// aliases, deployments, endpoints, weights, region and margin, limits, and every other section —
// checked by the server exactly as a config file is (POST /admin/config with dry_run: each error
// shown at the field its key path names), a diff of the file before apply, then applied by the
// same hot reload as POST /admin/reload (the file written back with a backup, audited).
import { api, clear, h, modal, section, toast } from '../lib.js';

const ORDER = ['region', 'region_margin', 'models', 'emulators', 'timeouts', 'retry', 'health_check', 'outlier', 'governance', 'registry', 'features', 'vectors'];

const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const childPath = (path, key) => (typeof key === 'number' ? `${path}[${key}]` : path ? `${path}.${key}` : key);

function getAt(root, parts) {
  return parts.reduce((o, k) => (o == null ? o : o[k]), root);
}

// Line diff (common prefix/suffix trimmed, then LCS on the rest): [{op: ' '|'+'|'-', text}].
export function lineDiff(a, b) {
  const x = a.split('\n');
  const y = b.split('\n');
  let p = 0;
  while (p < x.length && p < y.length && x[p] === y[p]) p++;
  let s = 0;
  while (s < x.length - p && s < y.length - p && x[x.length - 1 - s] === y[y.length - 1 - s]) s++;
  const xs = x.slice(p, x.length - s);
  const ys = y.slice(p, y.length - s);
  const n = xs.length;
  const m = ys.length;
  const L = new Uint32Array((n + 1) * (m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      L[i * (m + 1) + j] = xs[i] === ys[j] ? L[(i + 1) * (m + 1) + j + 1] + 1 : Math.max(L[(i + 1) * (m + 1) + j], L[i * (m + 1) + j + 1]);
    }
  }
  const out = x.slice(0, p).map((t) => ({ op: ' ', text: t }));
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && xs[i] === ys[j]) {
      out.push({ op: ' ', text: xs[i] });
      i++;
      j++;
    } else if (j < m && (i === n || L[i * (m + 1) + j + 1] > L[(i + 1) * (m + 1) + j])) {
      out.push({ op: '+', text: ys[j++] });
    } else {
      out.push({ op: '-', text: xs[i++] });
    }
  }
  return out.concat(x.slice(x.length - s).map((t) => ({ op: ' ', text: t })));
}

// Only the changed lines with 3 lines of context around each.
function diffView(lines) {
  const keep = new Set();
  lines.forEach((l, i) => {
    if (l.op !== ' ') for (let k = i - 3; k <= i + 3; k++) keep.add(k);
  });
  const pre = h('pre', { class: 'diff', 'aria-label': 'Changes to the config file' });
  let gap = false;
  lines.forEach((l, i) => {
    if (!keep.has(i)) {
      if (!gap) pre.append(h('span', { class: 'ctx' }, '…'));
      gap = true;
      return;
    }
    gap = false;
    pre.append(h('span', { class: l.op === '+' ? 'add' : l.op === '-' ? 'del' : 'ctx' }, `${l.op} ${l.text}`));
  });
  return pre;
}

export default {
  id: 'routes',
  title: 'Routes & config',
  available: (ctx) => ctx.me.role === 'admin' && !!ctx.status.config_path,
  async render(el) {
    let current = await api('/admin/config');
    let draft = structuredClone(current.config);
    const info = h('p', { class: 'muted' });
    const errorsBox = h('div', { role: 'alert', id: 'config-errors' });
    const formBox = h('form', { id: 'config-form', 'aria-label': 'Config', novalidate: true });
    const review = h('button', { type: 'submit', form: 'config-form', class: 'primary', id: 'config-review' }, 'Review and apply…');
    const reset = h('button', { type: 'button', id: 'config-reset' }, 'Discard changes');
    const filter = h('input', { type: 'search', placeholder: 'Filter models…', 'aria-label': 'Filter models' });
    el.append(info, errorsBox, h('div', { class: 'tools' }, filter), formBox, h('div', { class: 'sticky-actions' }, review, reset, h('span', { class: 'muted', id: 'config-dirty' })));

    const setInfo = () => {
      info.textContent = current.store === 'shared'
        ? `shared config (bootstrapped from ${current.path}) · generation ${current.generation} · changes are stored as a new generation and every replica applies it by hot reload (history: infera config history)`
        : `${current.path} · generation ${current.generation} · ${current.writable ? 'changes are written back to this file (previous version kept as a backup) and applied by hot reload' : 'the file is not writable: changes cannot be applied'}`;
    };
    const markDirty = () => {
      document.getElementById('config-dirty').textContent = JSON.stringify(draft) === JSON.stringify(current.config) ? '' : 'unsaved changes';
    };

    const setValue = (parts, value) => {
      const parent = getAt(draft, parts.slice(0, -1));
      parent[parts[parts.length - 1]] = value;
      markDirty();
    };

    const scalarField = (key, value, parts, path) => {
      const id = `cfg-${path.replace(/[^a-zA-Z0-9]/g, '-')}`;
      let input;
      if (typeof value === 'boolean') {
        input = h('input', { id, type: 'checkbox', checked: value, 'data-path': path });
        input.addEventListener('change', () => setValue(parts, input.checked));
      } else if (Array.isArray(value)) {
        input = h('input', { id, type: 'text', value: value.join(', '), 'data-path': path, placeholder: 'comma-separated' });
        input.addEventListener('input', () => setValue(parts, input.value.split(',').map((s) => s.trim()).filter(Boolean)));
      } else if (typeof value === 'number') {
        input = h('input', { id, type: 'number', step: 'any', value: String(value), 'data-path': path });
        // Sent as typed: an empty or odd entry is the server's to refuse, at this field.
        input.addEventListener('input', () => setValue(parts, input.value === '' || Number.isNaN(Number(input.value)) ? input.value : Number(input.value)));
      } else {
        input = h('input', { id, type: 'text', value: value ?? '', 'data-path': path });
        input.addEventListener('input', () => setValue(parts, input.value));
      }
      return h('div', { class: `field ${typeof value === 'boolean' ? 'check' : ''}` }, h('label', { for: id }, key), input, h('div', { class: 'field-error' }));
    };

    const addFieldTool = (obj, parts) => {
      const key = h('input', { type: 'text', placeholder: 'key', 'aria-label': 'New key', size: 12 });
      const val = h('input', { type: 'text', placeholder: 'value', 'aria-label': 'New value', size: 12 });
      const add = h('button', { type: 'button', class: 'small' }, '+ field');
      add.addEventListener('click', () => {
        if (!key.value) return key.focus();
        let v = val.value;
        try { v = JSON.parse(val.value); } catch { /* a plain string */ }
        getAt(draft, parts)[key.value] = v;
        markDirty();
        draw();
      });
      return h('div', { class: 'tools' }, key, val, add);
    };

    const renderObject = (obj, parts, legend, opts = {}) => {
      const path = parts.reduce((p, k) => childPath(p, k), '');
      if (opts.item && !opts.open) {
        // A closed item is built when first opened (200 models are 2,000 fields otherwise).
        const lazy = h('details', { class: 'obj item', 'data-path': path, 'data-lazy': '' }, h('summary', {}, legend));
        const build = () => {
          if (!lazy.hasAttribute('data-lazy')) return;
          lazy.removeAttribute('data-lazy');
          const full = renderObject(obj, parts, legend, { ...opts, open: true });
          lazy.append(...[...full.childNodes].slice(1));
        };
        lazy.addEventListener('toggle', build);
        lazyBuild.set(lazy, build);
        return lazy;
      }
      const scalars = h('div', { class: 'obj-fields' });
      const nested = [];
      for (const [k, v] of Object.entries(obj)) {
        const cp = [...parts, k];
        const kp = childPath(path, k);
        if (isObj(v)) nested.push(renderObject(v, cp, k));
        else if (Array.isArray(v) && v.some(isObj)) nested.push(renderArray(v, cp, k));
        else scalars.append(scalarField(k, v, cp, kp));
      }
      const box = h(opts.item ? 'details' : 'fieldset', { class: `obj ${opts.item ? 'item' : ''}`, 'data-path': path, open: opts.open });
      box.append(opts.item ? h('summary', {}, legend) : h('legend', {}, legend), h('div', { class: 'field-error' }), scalars, ...nested);
      if (opts.remove) box.append(h('div', { class: 'tools' }, h('button', { type: 'button', class: 'small danger', onclick: opts.remove }, `Remove ${legend}`)));
      box.append(addFieldTool(obj, parts));
      return box;
    };

    const renderArray = (arr, parts, legend) => {
      const path = parts.reduce((p, k) => childPath(p, k), '');
      const box = h('fieldset', { class: 'obj', 'data-path': path }, h('legend', {}, legend), h('div', { class: 'field-error' }));
      const q = filter.value.trim().toLowerCase();
      arr.forEach((item, i) => {
        if (!isObj(item)) return;
        const name = item.name || item.url || (item.emulator ? `emulator ${item.emulator}` : `#${i}`);
        if (path === 'models' && q && !String(item.name || '').toLowerCase().includes(q)) return;
        const remove = () => { arr.splice(i, 1); markDirty(); draw(); };
        box.append(renderObject(item, [...parts, i], `${legend.replace(/s$/, '')} ${name}`, { item: true, open: path !== 'models' || arr.length <= 6 || !!q, remove }));
      });
      const add = h('button', { type: 'button', class: 'small' }, `+ ${legend.replace(/s$/, '')} (a copy of the last)`);
      add.addEventListener('click', () => {
        const last = arr[arr.length - 1];
        const copy = last ? structuredClone(last) : {};
        if (typeof copy.name === 'string') copy.name += '-new';
        arr.push(copy);
        markDirty();
        draw();
      });
      box.append(h('div', { class: 'tools' }, add));
      return box;
    };

    const lazyBuild = new WeakMap();
    const draw = () => {
      const keys = Object.keys(draft).sort((a, b) => (ORDER.indexOf(a) + 1 || 99) - (ORDER.indexOf(b) + 1 || 99));
      const top = {};
      const sections = [];
      for (const k of keys) {
        const v = draft[k];
        if (isObj(v)) sections.push(h('details', { class: 'section', open: false }, h('summary', {}, k), h('div', { class: 'body' }, renderObject(v, [k], k))));
        else if (Array.isArray(v) && v.some(isObj)) sections.push(h('details', { class: 'section', open: k === 'models' }, h('summary', {}, `${k} (${v.length})`), h('div', { class: 'body' }, renderArray(v, [k], k))));
        else top[k] = v;
      }
      const settings = h('details', { class: 'section', open: true }, h('summary', {}, 'settings'), h('div', { class: 'body' }, renderObject(top, [], 'top level')));
      // Top-level scalars: their fields' paths are [key], so they write into the draft itself.
      clear(formBox, settings, sections);
    };

    const showErrors = (errors) => {
      for (const e of formBox.querySelectorAll('.field-error')) e.textContent = '';
      for (const e of formBox.querySelectorAll('[aria-invalid]')) e.removeAttribute('aria-invalid');
      if (!errors.length) return clear(errorsBox);
      const items = [];
      let first = null;
      for (const err of errors) {
        // The field at the error's key path, else the nearest enclosing part of the form.
        // Build the closed items on the way (outermost first), then take the deepest match.
        const prefixes = [];
        for (let p = err.path; p; p = p.replace(/(\.[^.[\]]+|\[\d+\])$/, '')) {
          prefixes.unshift(p);
          if (!/[.[]/.test(p)) break;
        }
        for (const p of prefixes) {
          const el = formBox.querySelector(`[data-path="${CSS.escape(p)}"]`);
          if (el && lazyBuild.has(el)) lazyBuild.get(el)();
        }
        let target = null;
        for (const p of [...prefixes].reverse()) {
          target = formBox.querySelector(`[data-path="${CSS.escape(p)}"]`);
          if (target) break;
        }
        if (target) {
          for (let d = target.closest('details'); d; d = d.parentElement.closest('details')) d.open = true;
          const box = target.tagName === 'INPUT' ? target.closest('.field').querySelector('.field-error') : target.querySelector('.field-error');
          if (target.tagName === 'INPUT') target.setAttribute('aria-invalid', 'true');
          box.textContent = box.textContent ? `${box.textContent}; ${err.message}` : err.message;
          first = first || target;
        }
        items.push(h('li', {}, h('code', {}, err.path || '(file)'), `: ${err.message}`));
      }
      clear(errorsBox, h('div', { class: 'card' }, h('strong', {}, `The server refused this config (${errors.length} ${errors.length === 1 ? 'error' : 'errors'}); nothing was changed.`), h('ul', { class: 'errors-list' }, items)));
      (first && first.tagName === 'INPUT' ? first : errorsBox).focus?.();
    };

    const errorsOf = (e) => (e.body && Array.isArray(e.body.errors) && e.body.errors.length ? e.body.errors : [{ path: e.param || '', message: e.message }]);

    formBox.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      let checked;
      try {
        checked = await api('/admin/config', { method: 'POST', body: { config: draft, dry_run: true, generation: current.generation } });
      } catch (e) {
        return showErrors(errorsOf(e));
      }
      showErrors([]);
      const lines = lineDiff(current.yaml, checked.yaml);
      const changes = lines.filter((l) => l.op !== ' ').length;
      if (!changes) return toast('No changes to apply.');
      const ok = await modal('Apply this change?', h('div', {},
        h('p', {}, `${changes} changed lines in ${current.path}. Applied by hot reload: requests in flight finish on the old routes.`), diffView(lines)),
      [{ label: 'Cancel', value: false }, { label: 'Apply', value: true, primary: true }]);
      if (!ok) return;
      try {
        const res = await api('/admin/config', { method: 'POST', body: { config: draft, generation: current.generation } });
        toast(`Applied: config generation ${res.generation}${res.backup ? ` (backup ${res.backup})` : ''}`);
        current = await api('/admin/config');
        draft = structuredClone(current.config);
        setInfo();
        draw();
        markDirty();
      } catch (e) {
        showErrors(errorsOf(e));
      }
    });
    reset.addEventListener('click', () => { draft = structuredClone(current.config); showErrors([]); draw(); markDirty(); });
    filter.addEventListener('input', draw);
    setInfo();
    draw();
  },
};
