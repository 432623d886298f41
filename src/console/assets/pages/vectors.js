// Vectors: the vector index's collections (GET /admin/vectors/collections: each collection's
// Qdrant info object and Infera's stats) — size, distance, the HNSW and quantization settings
// that decide recall, payload indexes and the index's memory.
import { api, fmt, h, kpi, section, table } from '../lib.js';

export default {
  id: 'vectors',
  title: 'Vectors',
  available: (ctx) => ctx.me.role === 'admin' && !!ctx.status.components.vectors,
  async render(el) {
    const v = await api('/admin/vectors/collections');
    const rows = v.collections.map((c) => ({ name: c.name, info: c.info, stats: c.stats }));
    const points = rows.reduce((n, r) => n + r.info.points_count, 0);
    const bytes = rows.reduce((n, r) => n + r.stats.index_bytes, 0);
    el.append(section(`Vector index · ${v.data_dir}${v.path_prefix ? ` · API at ${v.path_prefix}/collections` : ''}`,
      h('div', { class: 'kpis' },
        kpi('collections', fmt.int(rows.length)), kpi('points', fmt.int(points)),
        kpi('index memory', bytesText(bytes)), kpi('loaded in', `${fmt.num(v.load_seconds, 2)} s`),
        kpi('replayed from WAL', fmt.int(v.replayed_points))),
      table([
        { label: 'Collection', render: (r) => r.name },
        { label: 'Points', num: true, render: (r) => fmt.int(r.info.points_count) },
        { label: 'Dim', num: true, render: (r) => fmt.int(r.info.config.params.vectors.size) },
        { label: 'Distance', render: (r) => r.info.config.params.vectors.distance },
        { label: 'HNSW m / ef_construct', render: (r) => `${r.info.config.hnsw_config.m} / ${r.info.config.hnsw_config.ef_construct}` },
        { label: 'Exact below', num: true, render: (r) => `${fmt.int(r.info.config.hnsw_config.full_scan_threshold)} kB` },
        { label: 'Quantization', render: (r) => quantization(r.info.config.quantization_config) },
        { label: 'Payload indexes', render: (r) => payloadIndexes(r.info.payload_schema) },
        { label: 'Free slots', num: true, render: (r) => fmt.int(r.stats.free_slots) },
        { label: 'Mean degree', num: true, render: (r) => fmt.num(r.stats.mean_degree, 1) },
        { label: 'Index memory', num: true, render: (r) => `${bytesText(r.stats.index_bytes)} (${fmt.int(r.stats.index_bytes_per_point)} B/point)` },
      ], rows, { label: 'Collections', empty: 'no collections', id: (r) => r.name }),
      h('p', { class: 'help' }, 'Recall is set per search (hnsw_ef; default max(ef_construct, limit + offset)) and per collection by m and ef_construct; filtered searches below the exact threshold scan the matching points instead of the graph. Collections are created and written on the data port (Qdrant\'s API).')));
  },
};

function quantization(q) {
  if (!q) return 'none';
  if (q.scalar) return `int8 (quantile ${q.scalar.quantile ?? '–'}), rescored`;
  return JSON.stringify(q);
}

function payloadIndexes(schema) {
  const names = Object.keys(schema || {});
  return names.length ? names.map((n) => `${n}: ${schema[n].data_type} (${fmt.int(schema[n].points)})`).join(', ') : '–';
}

function bytesText(n) {
  if (n === undefined || n === null) return '–';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}
