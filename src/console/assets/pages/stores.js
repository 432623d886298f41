// Features: the feature store's registry (GET /admin/features/registry: views with their
// entities, features, TTL and aggregations, feature services, the online store's size) and its
// read latency from /metrics. The vector index has its own page (vectors.js).
import { api, bucketQuantile, bucketsOf, fmt, h, kpi, parseMetrics, section, table } from '../lib.js';

export default {
  id: 'stores',
  title: 'Features',
  available: (ctx) => ctx.me.role === 'admin' && !!ctx.status.components.features,
  async render(el, ctx) {
    const c = ctx.status.components;
    if (c.features) {
      const [reg, text] = await Promise.all([api('/admin/features/registry'), api('/metrics?name[]=infera_features_request_duration_seconds')]);
      const sorted = bucketsOf(parseMetrics(text), 'infera_features_request_duration_seconds');
      el.append(section(`Feature store · project ${reg.project} · ${reg.store}`,
        h('div', { class: 'kpis' },
          kpi('views', reg.views.length), kpi('feature services', reg.feature_services.length),
          kpi('online keys', fmt.int(reg.store_stats.keys)), kpi('online bytes', fmt.int(reg.store_stats.bytes)),
          kpi('read p50 (≤)', fmt.ms(bucketQuantile(sorted, 0.5))), kpi('read p99 (≤)', fmt.ms(bucketQuantile(sorted, 0.99)))),
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
