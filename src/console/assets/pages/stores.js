// Features: the feature store's registry (GET /admin/features/registry: views with their
// entities, features, TTL and aggregations, feature services, the online store's size) and its
// read latency from /metrics. The vector index has its own page (vectors.js).
import { api, fmt, h, kpi, parseMetrics, section, table } from '../lib.js';

function quantile(buckets, q) {
  // Prometheus histogram buckets [{le, count}] (cumulative) -> the bucket bound at quantile q.
  const total = buckets.length ? buckets[buckets.length - 1].count : 0;
  if (!total) return undefined;
  for (const b of buckets) if (b.count >= q * total) return b.le;
  return undefined;
}

export default {
  id: 'stores',
  title: 'Features',
  available: (ctx) => ctx.me.role === 'admin' && !!ctx.status.components.features,
  async render(el, ctx) {
    const c = ctx.status.components;
    if (c.features) {
      const [reg, text] = await Promise.all([api('/admin/features/registry'), api('/metrics?name[]=infera_features_request_duration_seconds')]);
      const samples = parseMetrics(text);
      const buckets = samples.filter((s) => s.name === 'infera_features_request_duration_seconds_bucket')
        .reduce((m, s) => m.set(s.labels.le, (m.get(s.labels.le) || 0) + s.value), new Map());
      const sorted = [...buckets].map(([le, count]) => ({ le: le === '+Inf' ? Infinity : Number(le), count })).sort((a, b) => a.le - b.le);
      el.append(section(`Feature store · project ${reg.project} · ${reg.store}`,
        h('div', { class: 'kpis' },
          kpi('views', reg.views.length), kpi('feature services', reg.feature_services.length),
          kpi('online keys', fmt.int(reg.store_stats.keys)), kpi('online bytes', fmt.int(reg.store_stats.bytes)),
          kpi('read p50 (≤)', fmt.ms(quantile(sorted, 0.5))), kpi('read p99 (≤)', fmt.ms(quantile(sorted, 0.99)))),
        table([
          { label: 'View', render: (v) => v.name },
          { label: 'Entities', render: (v) => v.entities.map((e) => e.join_key).join(', ') },
          { label: 'Features', render: (v) => v.features.map((f) => (f.function ? `${f.name} (${f.function} ${f.window_s}s)` : f.name)).join(', ') },
          { label: 'TTL', num: true, render: (v) => (v.ttl_s ? `${v.ttl_s}s` : '–') },
          { label: 'Source', render: (v) => v.source || '–' },
          { label: 'Online', render: (v) => (v.online ? 'yes' : 'no') },
        ], reg.views, { label: 'Feature views', empty: 'no views' }),
        h('h3', {}, 'Feature services'),
        table([{ label: 'Service', render: (s) => s.name }, { label: 'Features', render: (s) => s.features.join(', ') }], reg.feature_services, { label: 'Feature services' })));
    }
  },
};
