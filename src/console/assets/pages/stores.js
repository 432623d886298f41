// Features: the feature store's registry (GET /admin/features/registry: views with their
// entities, features, TTL and aggregations, feature services, the online store's size) and its
// read latency from /metrics, and each view's freshness (its last write and newest event time since
// the server started; an event older than the view's TTL is marked stale). The vector index has
// its own page (vectors.js).
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
          { label: 'Last write', render: (v) => (v.last_write_ms ? ago(v.last_write_ms) : 'none since start') },
          { label: 'Newest event', render: (v) => freshness(v) },
        ], reg.views, { label: 'Feature views', empty: 'no views' }),
        h('h3', {}, 'Feature services'),
        table([{ label: 'Service', render: (s) => s.name }, { label: 'Features', render: (s) => s.features.join(', ') }], reg.feature_services, { label: 'Feature services' })));
    }
  },
};

function ago(ms) {
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${fmt.num(s / 3600, 1)} h ago`;
  return `${fmt.num(s / 86400, 1)} d ago`;
}

function freshness(v) {
  if (!v.newest_event_ms) return '–';
  const text = `${fmt.time(v.newest_event_ms)} (${ago(v.newest_event_ms)})`;
  // Aggregated views serve their windows whatever the event's age; plain ones past the TTL are
  // OUTSIDE_MAX_AGE. Judged by this browser's clock.
  const stale = !v.aggregated && v.ttl_s > 0 && Date.now() - v.newest_event_ms > v.ttl_s * 1000;
  return stale ? h('span', { class: 'badge bad', title: 'older than the view\'s TTL: reads of it answer OUTSIDE_MAX_AGE' }, `stale: ${text}`) : text;
}
