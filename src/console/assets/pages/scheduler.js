// Scheduler: what the configured `infera sched serve` exports (GET /admin/scheduler/metrics, its
// infera_sched_* families relayed by the admin port) — queues against their guaranteed and max
// GPUs per type, pending pods and their pending time per queue and tier, preemptions, the share of
// free GPUs on fully empty nodes, the share of nodes the tier-0 guarantees need, re-packing
// recommendations; refreshed every 5 s. Below it, a report of `infera sched simulate` (its
// report.json, opened from this computer and read in the page: nothing is uploaded): the load
// curves per policy with their band over seeds against a chosen reference policy, or a replay's
// pending times and cluster shares over time.
import { api, bucketQuantile, bucketsOf, clear, fmt, h, kpi, parseMetrics, section, table } from '../lib.js';
import { PALETTE, lineChart } from '../charts.js';

const REFRESH_MS = 5000;

export default {
  id: 'scheduler',
  title: 'Scheduler',
  available: (ctx) => ctx.me.role === 'admin',
  async render(el, ctx) {
    const box = h('div', {});
    el.append(box, simulatorSection());
    if (!ctx.status.components.scheduler) {
      clear(box, section('Live scheduler',
        h('p', { class: 'help', id: 'sched-not-configured' }, 'No `infera sched serve` is configured: set scheduler.metrics_url in this server\'s config to its metrics port to see its queues here. A simulator report can be opened below.')));
      return undefined;
    }
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

// --- simulator reports ------------------------------------------------------------------------

function simulatorSection() {
  const out = h('div', { id: 'sim-report-view' });
  const error = h('p', { class: 'field-error', role: 'alert', id: 'sim-report-error' });
  const input = h('input', { id: 'sim-report-file', type: 'file', accept: '.json,application/json', 'aria-describedby': 'sim-report-help' });
  let latest = 0;
  input.addEventListener('change', async () => {
    error.textContent = '';
    clear(out);
    const file = input.files && input.files[0];
    if (!file) return;
    const mine = ++latest;
    try {
      const text = await file.text();
      if (mine !== latest) return;  // another file was picked meanwhile
      clear(out, ...reportView(parseReport(text), file.name));
    } catch (e) {
      if (mine === latest) error.textContent = `${file.name}: ${e.message}`;
    }
  });
  return section('Simulator report',
    h('div', { class: 'field' }, h('label', { for: 'sim-report-file' }, 'report.json of `infera sched simulate`'), input,
      h('p', { class: 'help', id: 'sim-report-help' }, 'Read in this page only. FGD-protocol reports (--mode fgd) show unallocated GPUs and failed pods along the load curve per policy; replay reports (--mode replay) show pending times and cluster shares over time.')),
    error, out);
}

// The report's JSON, checked for the fields the views read (a clear error for any other file).
export function parseReport(text) {
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new Error(`not JSON (${e.message})`);
  }
  if (!doc || typeof doc !== 'object') throw new Error('not a simulator report (expected a JSON object)');
  if (doc.mode === 'fgd') {
    if (!Array.isArray(doc.results) || !doc.results.length) throw new Error('an fgd report without results');
    doc.results.forEach((r, i) => {
      if (typeof r.policy !== 'string' || !Array.isArray(r.curve) || !r.curve.length) throw new Error(`results[${i}]: no policy or curve`);
      if (r.pod_list !== undefined && typeof r.pod_list !== 'string') throw new Error(`results[${i}]: pod_list is not a string`);
      r.curve.forEach((c, j) => {
        if (!Number.isFinite(c.load) || !Number.isFinite(c.unallocated_gpus) || c.load < 0 || c.load > 100) throw new Error(`results[${i}].curve[${j}]: no finite load or unallocated_gpus`);
      });
    });
    return doc;
  }
  if (doc.mode === 'replay') {
    if (!Number.isFinite(doc.pods) || typeof doc.policy !== 'string') throw new Error('a replay report without policy or pods');
    if (doc.series !== undefined && (!Array.isArray(doc.series) || !doc.series.every((p) => Number.isFinite(p.t) && p.t >= 0 && p.t < 1e9))) throw new Error('a replay report whose series has no finite times');
    return doc;
  }
  throw new Error('not an `infera sched simulate` report (expected "mode": "fgd" or "replay")');
}

function reportView(doc, name) {
  return doc.mode === 'fgd' ? fgdView(doc, name) : [replayView(doc, name)];
}

const pctOf = (load) => `${Math.round(load * 100)}%`;

// The worst 5% step (from 50% of arrivals on) of a policy's mean curve against the reference's:
// the most GPUs it leaves unallocated beyond the reference, and where.
const atLoad = (r, load) => r.curve.find((x) => Math.abs(x.load - load) < 1e-9);

function worstStep(r, ref) {
  let worst = null;
  for (const c of r.curve) {
    const rc = atLoad(ref, c.load);
    if (c.load < 0.5 - 1e-9 || !rc) continue;
    const diff = c.unallocated_gpus - rc.unallocated_gpus;
    if (!worst || diff > worst.diff) worst = { load: c.load, diff };
  }
  return worst;
}

function fgdView(doc, name) {
  const lists = [...new Set(doc.results.map((r) => r.pod_list || 'default'))];
  const holder = h('div', {});
  const listSel = h('select', { id: 'sim-pod-list' }, lists.map((l) => h('option', { value: l }, l)));
  const refSel = h('select', { id: 'sim-reference' });
  const show = () => {
    const results = doc.results.filter((r) => (r.pod_list || 'default') === listSel.value);
    const policies = results.map((r) => r.policy);
    const keep = policies.includes(refSel.value) ? refSel.value : policies.includes('fgd') ? 'fgd' : policies[0];
    clear(refSel, policies.map((p) => h('option', { value: p, selected: p === keep }, p)));
    refSel.value = keep;
    try {
      clear(holder, ...fgdList(results, results.find((r) => r.policy === keep)));
    } catch (e) {
      clear(holder, h('p', { class: 'field-error', role: 'alert' }, `cannot show this report: ${e.message}`));
    }
  };
  listSel.addEventListener('change', show);
  refSel.addEventListener('change', show);
  const controls = h('div', { class: 'kpis' },
    h('div', { class: 'field' }, h('label', { for: 'sim-pod-list' }, 'Pod list'), listSel),
    h('div', { class: 'field' }, h('label', { for: 'sim-reference' }, 'Reference policy'), refSel));
  show();
  return [h('p', { class: 'help' }, `${name}: FGD protocol, ${doc.results.length} result(s).`), controls, holder];
}

function fgdList(results, ref) {
  const last = (r) => r.curve[r.curve.length - 1];
  const seeds = (r) => (Array.isArray(r.runs) ? r.runs.length : 0);
  const dps = (r) => (seeds(r) ? r.runs.reduce((n, x) => n + (x.decisions_per_second || 0), 0) / seeds(r) : undefined);
  const rows = results.map((r) => ({ r, worst: worstStep(r, ref), end: last(r) }));
  const summary = table([
    { label: 'Policy', render: (x) => x.r.policy },
    { label: 'Seeds', num: true, render: (x) => fmt.int(seeds(x.r)) },
    { label: `Unallocated GPUs at ${pctOf(endLoad(rows))}`, num: true, render: (x) => `${fmt.num(x.r.mean_unallocated_gpus ?? x.end.unallocated_gpus, 1)} ± ${fmt.num(x.r.stddev_unallocated_gpus ?? 0, 1)}` },
    { label: 'Paper', num: true, render: (x) => (x.r.paper_unallocated_gpus === undefined ? '–' : fmt.int(x.r.paper_unallocated_gpus)) },
    { label: 'Allocated', num: true, render: (x) => fmt.pct(x.r.mean_alloc_ratio ?? x.end.alloc_ratio) },
    { label: 'Fragmented', num: true, render: (x) => fmt.pct(x.r.mean_frag_ratio ?? x.end.frag_ratio) },
    { label: 'Failed pods', num: true, render: (x) => fmt.num(x.end.failed_pods?.total, 1) },
    { label: `Worst step vs ${ref.policy}`, render: (x) => worstText(x, ref) },
    { label: 'Decisions/s', num: true, render: (x) => fmt.int(dps(x.r)) },
  ], rows, { label: 'Policies', id: (x) => x.r.policy });
  const from = (r) => r.curve.filter((c) => c.load >= 0.5 - 1e-9);
  const colour = (r) => PALETTE[results.indexOf(r) % PALETTE.length];
  const beyond = lineChart(results.filter((r) => r !== ref).map((r) => ({
    name: `${r.policy} − ${ref.policy}`,
    colour: colour(r),
    points: from(r).filter((c) => atLoad(ref, c.load)).map((c) => [c.load * 100, c.unallocated_gpus - atLoad(ref, c.load).unallocated_gpus]),
  })), { label: `Unallocated GPUs beyond ${ref.policy} at each step`, xfmt: (x) => `${Math.round(x)}%`, yfmt: (y) => fmt.num(y, 0), xStep: 10, yMin: 'auto' });
  const unalloc = lineChart(results.map((r) => ({
    name: r.policy,
    points: from(r).map((c) => [c.load * 100, c.unallocated_gpus]),
    band: from(r).map((c) => [c.load * 100, c.unallocated_gpus_min ?? c.unallocated_gpus, c.unallocated_gpus_max ?? c.unallocated_gpus]),
  })), { label: 'Unallocated GPUs against arrived load, band over seeds', xfmt: (x) => `${Math.round(x)}%`, yfmt: (y) => fmt.int(y), xStep: 10 });
  const failed = lineChart(results.map((r) => ({
    name: r.policy,
    points: from(r).map((c) => [c.load * 100, c.failed_pods?.total ?? 0]),
  })), { label: 'Failed pods (cumulative) against arrived load', xfmt: (x) => `${Math.round(x)}%`, yfmt: (y) => fmt.int(y), xStep: 10 });
  const steps = from(ref).map((c, i) => ({ load: c.load, i }));
  const stepTable = table([
    { label: 'Arrived load', num: true, render: (s) => pctOf(s.load) },
    ...results.map((r) => ({
      label: r.policy,
      num: true,
      render: (s) => {
        const c = atLoad(r, s.load);
        const rc = atLoad(ref, s.load);
        if (!c) return '–';
        const d = r === ref || !rc ? '' : ` (${c.unallocated_gpus - rc.unallocated_gpus > 0 ? '+' : ''}${fmt.num(c.unallocated_gpus - rc.unallocated_gpus, 1)})`;
        return `${fmt.num(c.unallocated_gpus, 1)}${d}`;
      },
    })),
  ], steps, { label: 'Unallocated GPUs per step', id: (s) => pctOf(s.load) });
  return [
    summary,
    h('h3', {}, `Unallocated GPUs beyond ${ref.policy} (mean; above 0: behind it at that step)`), beyond,
    h('h3', {}, 'Unallocated GPUs along the load curve (mean; band: min–max over seeds)'), unalloc,
    h('h3', {}, 'Failed pods along the load curve (mean, cumulative)'), failed,
    h('h3', {}, `Unallocated GPUs at each step (difference to ${ref.policy})`), stepTable,
  ];
}

// "+12.3 GPUs at 85%" where the policy is behind the reference; otherwise how close it came.
function worstText(x, ref) {
  if (x.r === ref) return 'reference';
  if (!x.worst) return '–';
  const at = pctOf(x.worst.load);
  if (x.worst.diff > 0) return `+${fmt.num(x.worst.diff, 1)} GPUs at ${at}`;
  if (x.worst.diff === 0) return `never behind (level at ${at})`;
  return `never behind (closest: ${fmt.num(-x.worst.diff, 1)} fewer at ${at})`;
}

function endLoad(rows) {
  return rows.length ? rows[0].end.load : 0;
}

function replayView(doc, name) {
  const series = Array.isArray(doc.series) ? doc.series : [];
  const hours = (t) => t / 3600;
  const shares = lineChart([
    { name: 'GPUs allocated', points: series.map((p) => [hours(p.t), 100 * p.gpu_alloc_ratio]) },
    { name: 'free GPUs on fully empty nodes', points: series.map((p) => [hours(p.t), 100 * p.free_on_empty_share]) },
  ], { label: 'Cluster shares over time', xfmt: (x) => `${fmt.num(x, 0)} h`, yfmt: (y) => `${fmt.num(y, 0)}%` });
  const pods = lineChart([
    { name: 'pending', points: series.map((p) => [hours(p.t), p.pending]) },
    { name: 'running', points: series.map((p) => [hours(p.t), p.running]) },
  ], { label: 'Pods pending and running over time', xfmt: (x) => `${fmt.num(x, 0)} h`, yfmt: (y) => fmt.int(y) });
  const secs = (s) => (s === undefined ? '–' : `${fmt.int(s)} s`);
  const evictions = Array.isArray(doc.evictions) ? doc.evictions : [];
  return section(`Replay: ${doc.policy} (${name})`,
    h('div', { class: 'kpis' },
      kpi('pods', fmt.int(doc.pods)),
      kpi('started', fmt.int(doc.scheduled)),
      kpi('never started', fmt.int(doc.never_scheduled), doc.never_scheduled > 0 ? 'bad' : ''),
      kpi('pending: mean / p99', `${secs(doc.pending?.mean_s)} / ${secs(doc.pending?.p99_s)}`),
      kpi('pods that waited', fmt.pct(doc.pending?.waited_share)),
      kpi('preemptions', fmt.int(doc.preemptions)),
      kpi('idle reclaimed: pods / GPUs', `${fmt.int(doc.idle_reclaimed?.pods)} / ${fmt.num(doc.idle_reclaimed?.gpus, 1)}`),
      kpi('nodes for tier-0 guarantees', fmt.pct(doc.nodes_for_guarantees?.share)),
      kpi('GPU allocation (mean)', fmt.pct(doc.mean_gpu_alloc_ratio)),
      kpi('free GPUs on empty nodes (mean)', fmt.pct(doc.mean_free_on_empty_share)),
      kpi('re-packing moves', fmt.int(doc.repack?.moves ?? 0))),
    h('h3', {}, 'Allocation and free GPUs on empty nodes'), shares,
    h('h3', {}, 'Pending and running pods'), pods,
    h('h3', {}, 'Evictions'),
    table([
      { label: 'Pod', render: (e) => e.pod },
      { label: 'Node', render: (e) => e.node },
      { label: 'Reason', render: (e) => e.reason },
    ], evictions, { label: 'Evictions', empty: 'no eviction', id: (e) => e.pod }));
}
