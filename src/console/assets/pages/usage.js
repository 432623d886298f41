// Usage and cost: GET /admin/usage by team, user, model, key or deployment and by minute, hour
// or day, as a stacked bar chart and a table; CSV export of exactly what is shown. A team key
// sees its own team's usage only (the API scopes it).
import { api, clear, download, field, fmt, h, kpi, section, table, toCsv } from '../lib.js';
import { stackedBars } from '../charts.js';

const METRICS = {
  requests: { label: 'requests', fmt: fmt.int },
  total_tokens: { label: 'tokens', fmt: fmt.int },
  cost_usd: { label: 'cost (USD)', fmt: (v) => `$${Number(v).toFixed(v && v < 1 ? 4 : 2)}` },
  errors: { label: 'errors', fmt: fmt.int },
};
const RANGE = { minute: '1h', hour: '24h', day: '30d' };
const STEP = { minute: 60e3, hour: 3600e3, day: 86400e3 };
const REFRESH_MS = 5000;

export default {
  id: 'usage',
  title: 'Usage & cost',
  available: (ctx) => !!ctx.status.components.governance,
  async render(el, ctx) {
    const form = h('form', { class: 'inline', 'aria-label': 'Usage query', id: 'usage-query' },
      field('group by', 'group_by', { type: 'select', options: ['team', 'model', 'user', 'key', 'deployment'], value: ctx.readOnly ? 'model' : 'team' }),
      field('granularity', 'granularity', { type: 'select', options: ['minute', 'hour', 'day'], value: 'minute' }),
      field('since', 'since', { type: 'select', options: ['15m', '1h', '6h', '24h', '7d', '30d'], value: '1h' }),
      field('measure', 'metric', { type: 'select', options: Object.keys(METRICS), value: 'requests' }),
      ctx.readOnly ? null : field('team', 'team', { placeholder: 'all' }),
      field('model', 'model', { placeholder: 'all' }),
      h('button', { type: 'button', id: 'usage-csv' }, 'Export CSV'));
    const chartBox = h('div', { 'aria-live': 'off' });
    const totals = h('div', { class: 'kpis' });
    const tableBox = h('div', { class: 'scroll' });
    el.append(section('Query', form), totals, section('Over time', chartBox), section('Rows', tableBox));
    let rows = [];
    let group = 'team';
    let timer = 0;
    let stopped = false;

    const load = async () => {
      const v = Object.fromEntries(new FormData(form));
      group = v.group_by;
      const q = new URLSearchParams({ granularity: v.granularity, since: v.since, group_by: group });
      if (v.team) q.set('team', v.team);
      if (v.model) q.set('model', v.model);
      const res = await api(`/admin/usage?${q}`);
      rows = res.rows;
      const metric = METRICS[v.metric];
      const step = STEP[v.granularity];
      const col = group === 'key' ? 'key' : group;
      const keyOf = (r) => r[col] ?? r[`${col}_id`] ?? '';
      // Every bucket of the range, so an idle minute shows as a gap and the chart moves.
      const sinceMs = { '15m': 15 * 60e3, '1h': 3600e3, '6h': 6 * 3600e3, '24h': 86400e3, '7d': 7 * 86400e3, '30d': 30 * 86400e3 }[v.since];
      const now = Date.now();
      const buckets = [];
      for (let b = Math.floor((now - sinceMs) / step) * step; b <= now; b += step) buckets.push(b);
      if (buckets.length > 400) buckets.splice(0, buckets.length - 400);
      const series = new Map();
      for (const r of rows) {
        const k = keyOf(r) || '(none)';
        if (!series.has(k)) series.set(k, new Map());
        const b = Math.floor(r.bucket_ms / step) * step;
        series.get(k).set(b, (series.get(k).get(b) || 0) + r[v.metric]);
      }
      const list = [...series].map(([name, values]) => ({ name, values, total: [...values.values()].reduce((a, b) => a + b, 0) }))
        .sort((a, b) => b.total - a.total);
      const xfmt = (b) => {
        const d = new Date(b).toISOString();
        return v.granularity === 'day' ? d.slice(5, 10) : d.slice(11, 16);
      };
      clear(chartBox, list.length ? stackedBars(buckets, list, { label: `${metric.label} by ${group} per ${v.granularity}`, xfmt, yfmt: metric.fmt }) : h('p', { class: 'muted' }, 'No usage in this range.'));
      chartBox.dataset.total = String(rows.reduce((a, r) => a + r[v.metric], 0));
      const sum = (f) => rows.reduce((a, r) => a + (r[f] || 0), 0);
      clear(totals,
        kpi('requests', fmt.int(sum('requests'))), kpi('tokens', fmt.int(sum('total_tokens'))),
        kpi('cost', `$${sum('cost_usd').toFixed(4)}`), kpi('errors', fmt.int(sum('errors'))),
        kpi('cached', fmt.int(sum('cached'))));
      clear(tableBox, table([
        { label: v.granularity, render: (r) => fmt.time(r.bucket_ms) },
        { label: group, render: keyOf },
        { label: 'requests', num: true, render: (r) => fmt.int(r.requests) },
        { label: 'prompt', num: true, render: (r) => fmt.int(r.prompt_tokens) },
        { label: 'completion', num: true, render: (r) => fmt.int(r.completion_tokens) },
        { label: 'cost', num: true, render: (r) => `$${r.cost_usd.toFixed(4)}` },
        { label: 'errors', num: true, render: (r) => fmt.int(r.errors) },
        { label: 'mean latency', num: true, render: (r) => `${fmt.num(r.avg_latency_ms, 1)} ms` },
      ], [...rows].reverse(), { label: 'Usage rows', empty: 'no usage in this range' }));
    };
    form.addEventListener('change', () => load().catch(() => {}));
    form.addEventListener('submit', (e) => { e.preventDefault(); load(); });
    form.querySelector('#usage-csv').addEventListener('click', () => {
      const cols = ['bucket_ms', group === 'key' ? 'key' : group, 'requests', 'prompt_tokens', 'completion_tokens', 'total_tokens', 'cached', 'aborted', 'errors', 'cost_usd', 'avg_latency_ms'];
      download(`infera-usage-${group}-${new Date().toISOString().slice(0, 16)}.csv`, toCsv(cols, rows));
    });
    await load();
    const loop = () => {
      timer = setTimeout(async () => {
        if (stopped) return;
        await load().catch(() => {});
        if (!stopped) loop();
      }, REFRESH_MS);
    };
    loop();
    return () => { stopped = true; clearTimeout(timer); };
  },
};
