// Audit: every admin change with who and when (GET /admin/audit): keys, teams, users, config
// applies and reloads, registry moves.
import { api, clear, fmt, h, section, table } from '../lib.js';

export default {
  id: 'audit',
  title: 'Audit',
  available: (ctx) => ctx.me.role === 'admin' && !!ctx.status.components.governance,
  async render(el) {
    const since = h('select', { 'aria-label': 'Since' }, ['1h', '24h', '7d', '30d'].map((s) => h('option', { value: s, selected: s === '7d' }, s)));
    const box = h('div', { class: 'scroll' });
    const load = async () => {
      const { audit } = await api(`/admin/audit?since=${since.value}&limit=500`);
      clear(box, table([
        { label: 'When', render: (a) => fmt.time(a.ts_ms) },
        { label: 'Who', render: (a) => a.actor },
        { label: 'Action', render: (a) => h('code', {}, a.action) },
        { label: 'Target', render: (a) => a.target },
        { label: 'Detail', render: (a) => h('code', { class: 'muted' }, JSON.stringify(a.detail).slice(0, 200)) },
      ], audit, { label: 'Audit log', empty: 'nothing in this range' }));
    };
    since.addEventListener('change', load);
    el.append(section('Admin changes', h('div', { class: 'tools' }, h('label', {}, 'since ', since)), box));
    await load();
  },
};
