// Scheduler: what the configured `infera sched serve` exports (GET /admin/scheduler/metrics, its
// infera_sched_* families relayed by the admin port) — queues against their guaranteed and max
// GPUs per type, pending pods and their pending time per queue and tier, preemptions, the share of
// free GPUs on fully empty nodes, the share of nodes the tier-0 guarantees need, re-packing
// recommendations. Refreshed every 5 s.
import { api, bucketQuantile, bucketsOf, clear, fmt, h, kpi, parseMetrics, section, table } from '../lib.js';

const REFRESH_MS = 5000;

export default {
  id: 'scheduler',
  title: 'Scheduler',
  available: (ctx) => ctx.me.role === 'admin' && !!ctx.status.components.scheduler,
  async render(el) {
    const box = h('div', {});
    el.append(box);
    let stopped = false;
    let timer;
    const load = async () => {
      let text;
      try {
        text = await api('/admin/scheduler/metrics');
      } catch (e) {
        clear(box, section('Scheduler', h('p', { class: 'field-error', role: 'alert' }, e.message)));
        return;
      }
      clear(box, ...view(parseMetrics(text)));
    };
    await load();
    const loop = () => {
      timer = setTimeout(async () => {
        if (stopped) return;
        await load();
        if (!stopped) loop();
      }, REFRESH_MS);
    };
    loop();
    return () => { stopped = true; clearTimeout(timer); };
  },
};

function view(samples) {
  const one = (name, labels = {}) => {
    const s = samples.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v));
    return s ? s.value : undefined;
  };
  const sum = (name) => samples.filter((x) => x.name === name).reduce((n, x) => n + x.value, 0);
  // Queues: one row per (queue, GPU type) with used / guaranteed / max.
  const queues = new Map();
  for (const s of samples) {
    if (s.name !== 'infera_sched_queue_gpus') continue;
    const key = `${s.labels.queue}|${s.labels.gpu_type}`;
    if (!queues.has(key)) queues.set(key, { queue: s.labels.queue, type: s.labels.gpu_type });
    queues.get(key)[s.labels.kind] = s.value;
  }
  const qrows = [...queues.values()].sort((a, b) => a.queue.localeCompare(b.queue) || a.type.localeCompare(b.type));
  // Pending time per (queue, tier).
  const waits = new Map();
  for (const s of samples) {
    if (s.name !== 'infera_sched_pending_seconds_count') continue;
    waits.set(`${s.labels.queue}|${s.labels.tier}`, { queue: s.labels.queue, tier: s.labels.tier, count: s.value });
  }
  for (const w of waits.values()) {
    const b = bucketsOf(samples, 'infera_sched_pending_seconds', (l) => l.queue === w.queue && l.tier === w.tier);
    w.p50 = bucketQuantile(b, 0.5);
    w.p99 = bucketQuantile(b, 0.99);
  }
  const wrows = [...waits.values()].sort((a, b) => a.queue.localeCompare(b.queue) || a.tier.localeCompare(b.tier));
  const capacity = one('infera_sched_gpus', { state: 'capacity' });
  const allocated = one('infera_sched_gpus', { state: 'allocated' });
  const secs = (s) => (s === undefined ? '–' : s === Infinity ? '> last bucket' : s < 1 ? fmt.ms(s) : `${fmt.num(s, s < 10 ? 1 : 0)} s`);
  return [
    section('Cluster',
      h('div', { class: 'kpis' },
        kpi('GPUs allocated', capacity === undefined ? '–' : `${fmt.num(allocated, 1)} of ${fmt.int(capacity)}`),
        kpi('free GPUs on empty nodes', fmt.pct(one('infera_sched_free_gpus_on_empty_nodes_ratio'))),
        kpi('nodes for tier-0 guarantees', fmt.pct(one('infera_sched_nodes_for_guarantees_ratio'))),
        kpi('pending pods', fmt.int(one('infera_sched_pending_pods')), one('infera_sched_pending_pods') > 0 ? 'bad' : ''),
        kpi('preemptions', fmt.int(sum('infera_sched_preemptions_total'))),
        kpi('evictions refused (PDB)', fmt.int(sum('infera_sched_evictions_refused_total'))),
        kpi('pods bound', fmt.int(one('infera_sched_decisions_total', { result: 'bound' }) ?? 0)),
        kpi('re-packing: moves / nodes', `${fmt.int(one('infera_sched_repack_recommended_moves') ?? 0)} / ${fmt.int(one('infera_sched_repack_freeable_nodes') ?? 0)}`),
        kpi('leader', one('infera_sched_leader') === 1 ? 'this replica' : 'standby', one('infera_sched_leader') === 1 ? '' : 'bad'))),
    section('Queues: GPUs used against guaranteed and max',
      table([
        { label: 'Queue', render: (r) => r.queue },
        { label: 'GPU type', render: (r) => (r.type === '*' ? 'all types' : r.type) },
        { label: 'Used', num: true, render: (r) => fmt.num(r.used ?? 0, 1) },
        { label: 'Guaranteed', num: true, render: (r) => (r.guaranteed === undefined ? '–' : fmt.num(r.guaranteed, 1)) },
        { label: 'Max', num: true, render: (r) => (r.max === undefined ? '–' : fmt.num(r.max, 1)) },
        { label: 'Use', render: (r) => meter(r) },
      ], qrows, { label: 'Queues', empty: 'no queue has used a GPU or has a quota yet', id: (r) => `${r.queue}|${r.type}` })),
    section('Pending time (creation to binding)',
      table([
        { label: 'Queue', render: (r) => r.queue || '–' },
        { label: 'Tier', num: true, render: (r) => r.tier },
        { label: 'Pods bound', num: true, render: (r) => fmt.int(r.count) },
        { label: 'p50 (≤)', num: true, render: (r) => secs(r.p50) },
        { label: 'p99 (≤)', num: true, render: (r) => secs(r.p99) },
      ], wrows, { label: 'Pending time', empty: 'no pod bound yet', id: (r) => `${r.queue}|${r.tier}` })),
  ];
}

// Used against the larger of guaranteed and max (SVG: the page's policy allows no inline style),
// with the guarantee marked.
function meter(r) {
  const top = Math.max(r.max ?? 0, r.guaranteed ?? 0, r.used ?? 0);
  if (!top) return '–';
  const x = (v) => Math.min(120, (120 * v) / top).toFixed(1);
  return h('svg', { class: 'meter', width: 120, height: 12, viewBox: '0 0 120 12', role: 'img', 'aria-label': `${fmt.num(r.used ?? 0, 1)} of ${fmt.num(top, 1)} GPUs` },
    h('rect', { svg: true, x: 0, y: 2, width: 120, height: 8, rx: 2, class: 'meter-bg' }),
    h('rect', { svg: true, x: 0, y: 2, width: x(r.used ?? 0), height: 8, rx: 2, class: 'meter-fill' }),
    r.guaranteed !== undefined ? h('rect', { svg: true, x: x(r.guaranteed), y: 0, width: 2, height: 12, class: 'meter-mark' }) : null);
}
