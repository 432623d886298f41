// Overview: models → deployments → endpoints, live. Endpoint state from GET /admin/endpoints
// (health, ejection, in-flight, EWMA latency; a deployment's latency is its endpoints' mean),
// traffic from GET /metrics?name[]=... (requests/s, error rate, TTFT per model) as deltas between
// refreshes.
import { api, clear, fmt, h, badge, kpi } from '../lib.js';
import { sparkline } from '../charts.js';

const REFRESH_MS = 2000;
const PAGE = 40;
// Only the families this page reads (GET /metrics?name[]=...).
const METRICS = `/metrics?${['infera_gateway_requests_total', 'infera_gateway_time_to_first_token_seconds', 'infera_gateway_requests_in_flight'].map((n) => `name[]=${n}`).join('&')}`;

// One pass over the scrape: requests (and 5xx) by model and deployment, TTFT sum and count by
// model, requests in flight.
function snapshot(text) {
  const snap = { at: performance.now(), requests: new Map(), errors: new Map(), ttftSum: new Map(), ttftCount: new Map(), inFlight: 0 };
  const add = (m, k, v) => m.set(k, (m.get(k) || 0) + v);
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const brace = line.indexOf('{');
    const name = brace < 0 ? line.slice(0, line.indexOf(' ')) : line.slice(0, brace);
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (name === 'infera_gateway_requests_in_flight') {
      snap.inFlight += value;
      continue;
    }
    if (name !== 'infera_gateway_requests_total' && name !== TTFT_SUM && name !== TTFT_COUNT) continue;
    const l = labelsOf(line.slice(brace + 1, line.lastIndexOf('}')));
    if (name === TTFT_SUM) add(snap.ttftSum, l.model, value);
    else if (name === TTFT_COUNT) add(snap.ttftCount, l.model, value);
    else if (l.deployment) {
      const key = `${l.model}|${l.deployment}`;
      add(snap.requests, key, value);
      if (l.code_class === '5xx') add(snap.errors, key, value);
    }
  }
  return snap;
}

const TTFT_SUM = 'infera_gateway_time_to_first_token_seconds_sum';
const TTFT_COUNT = 'infera_gateway_time_to_first_token_seconds_count';

// An engine-routed endpoint's signals (docs/routing.md): its engine's queue and KV-cache usage
// and the share of prompt blocks found where they were sent; unknown signals say so, with their age.
function engineText(g) {
  const hits = g.prefix_hit_rate === undefined ? '' : ` · prefix hits ${fmt.pct(g.prefix_hit_rate)}`;
  if (!g.known) {
    const age = g.age_ms === undefined ? 'never read' : `${fmt.num(g.age_ms / 1000, 1)} s old`;
    return `engine signals unknown (${age})${hits}`;
  }
  const kv = g.kv_cache_usage === undefined ? '' : ` · KV ${fmt.pct(g.kv_cache_usage)}`;
  return `queue ${g.load} (${g.waiting} waiting)${kv}${hits}`;
}

function labelsOf(text) {
  const out = {};
  const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  let m;
  while ((m = re.exec(text))) out[m[1]] = m[2];
  return out;
}

// The change of a counter since the previous snapshot (the whole count on the first).
const delta = (cur, prev, key) => (cur.get(key) || 0) - (prev ? prev.get(key) || 0 : 0);

export default {
  id: 'overview',
  title: 'Overview',
  available: (ctx) => ctx.me.role === 'admin' && ctx.status.components.gateway !== false,
  async render(el) {
    const kpis = h('div', { class: 'kpis', 'aria-live': 'off' });
    const filter = h('input', { type: 'search', placeholder: 'Filter models…', 'aria-label': 'Filter models' });
    const tableBox = h('div', { class: 'scroll' });
    const stamp = h('span', { class: 'muted' });
    el.append(kpis, h('section', { class: 'card', 'aria-label': 'Models and endpoints' },
      h('div', { class: 'row' }, h('h2', {}, 'Models, deployments, endpoints'), filter, stamp), tableBox));
    let prev = null;
    const history = new Map(); // model -> recent requests/s
    let last = null;
    let timer = 0;
    let stopped = false;
    let limit = PAGE; // models shown (a browser lays out ~1,000 rows in ~300 ms: page them)

    const draw = () => {
      if (!last) return;
      const { eps, cur, rates } = last;
      const q = filter.value.trim().toLowerCase();
      const models = new Map();
      for (const e of eps.endpoints) {
        if (q && !e.model.toLowerCase().includes(q)) continue;
        if (!models.has(e.model)) models.set(e.model, new Map());
        const deps = models.get(e.model);
        if (!deps.has(e.deployment)) deps.set(e.deployment, []);
        deps.get(e.deployment).push(e);
      }
      const rows = [];
      for (const [model, deps] of [...models].slice(0, limit)) {
        const mr = rates.model.get(model) || { rps: 0, err: 0, req: 0 };
        const ttft = rates.ttft.get(model);
        const hist = history.get(model) || [];
        rows.push(h('tr', { class: 'model-row', 'data-model': model },
          h('td', { colspan: 3 }, model), h('td', {}, sparkline(hist)),
          h('td', { class: 'num', 'data-col': 'rps' }, fmt.num(mr.rps, 2)),
          h('td', { class: 'num' }, mr.req ? fmt.pct(mr.err / mr.req) : '–'),
          h('td', { class: 'num', colspan: 2 }, ttft === undefined ? '' : `TTFT ${fmt.ms(ttft)}`),
          h('td', { colspan: 3 })));
        for (const [dep, list] of deps) {
          const key = `${model}|${dep}`;
          const dr = rates.dep.get(key) || { rps: 0, err: 0, req: 0, total: 0 };
          // The deployment's latency: the mean of its endpoints' EWMA (the balancer's estimate).
          const sampled = list.filter((e) => e.ewma_ms);
          const lat = sampled.length ? sampled.reduce((a, e) => a + e.ewma_ms, 0) / sampled.length / 1000 : undefined;
          rows.push(h('tr', { class: 'dep-row', 'data-deployment': key },
            h('td', {}, ''), h('td', { colspan: 3 }, dep),
            h('td', { class: 'num', 'data-col': 'rps' }, fmt.num(dr.rps, 2)),
            h('td', { class: 'num' }, dr.req ? fmt.pct(dr.err / dr.req) : '–'),
            h('td', { class: 'num', 'data-col': 'total' }, fmt.int(dr.total)),
            h('td', { class: 'num' }, fmt.ms(lat)),
            h('td', { colspan: 3 })));
          for (const e of list) {
            const state = !e.healthy ? badge('down', 'bad') : e.ejected ? badge('ejected', 'warn') : badge('healthy', 'ok');
            rows.push(h('tr', { 'data-endpoint': e.endpoint },
              h('td', {}, ''), h('td', {}, ''), h('td', {}, e.endpoint), h('td', {}, e.region || '–'),
              h('td', { colspan: 4, class: 'engine' }, e.engine ? engineText(e.engine) : ''),
              h('td', { class: 'num' }, e.weight),
              h('td', { class: 'num' }, e.in_flight ?? '–'),
              h('td', {}, state, ' ', e.ewma_ms ? `${fmt.num(e.ewma_ms, 1)} ms` : '')));
          }
        }
      }
      clear(tableBox, h('table', { class: 'grid', 'aria-label': 'Endpoints' },
        h('thead', {}, h('tr', {}, ['Model', 'Deployment', 'Endpoint', 'Region', 'req/s', 'errors', 'requests', 'latency', 'weight', 'in flight', 'state · EWMA'].map((c, i) => h('th', { scope: 'col', class: i >= 4 && i <= 9 ? 'num' : '' }, c)))),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 11, class: 'empty' }, 'no models'))),
        models.size > limit ? h('tfoot', {}, h('tr', {}, h('td', { colspan: 11, class: 'more' }, `${limit} of ${models.size} models shown `,
          h('button', { type: 'button', class: 'small', 'data-more': '', onclick: () => { limit += PAGE; draw(); } }, `Show ${Math.min(PAGE, models.size - limit)} more`)))) : null));
      const total = [...rates.model.values()].reduce((a, m) => ({ rps: a.rps + m.rps, err: a.err + m.err, req: a.req + m.req }), { rps: 0, err: 0, req: 0 });
      const down = eps.endpoints.filter((e) => !e.healthy || e.ejected).length;
      clear(kpis,
        kpi('models', models.size === 0 && !q ? 0 : new Set(eps.endpoints.map((e) => e.model)).size),
        kpi('endpoints', eps.endpoints.length),
        kpi('down or ejected', down, down ? 'bad' : ''),
        kpi('requests/s', fmt.num(total.rps, 2)),
        kpi('error rate', total.req ? fmt.pct(total.err / total.req) : '–'),
        kpi('in flight', cur.inFlight),
        kpi('config generation', eps.generation));
    };

    const refresh = async () => {
      const [eps, text] = await Promise.all([api('/admin/endpoints'), api(METRICS)]);
      performance.mark('overview:fetched');
      const cur = snapshot(text);
      performance.mark('overview:parsed');
      const secs = prev ? (cur.at - prev.at) / 1000 : 0;
      const rates = { model: new Map(), dep: new Map(), ttft: new Map() };
      for (const key of cur.requests.keys()) {
        const [model, dep] = key.split('|');
        const req = delta(cur.requests, prev?.requests, key);
        const err = delta(cur.errors, prev?.errors, key);
        const r = { rps: secs ? req / secs : 0, req, err, total: cur.requests.get(key) };
        rates.dep.set(key, r);
        const m = rates.model.get(model) || { rps: 0, req: 0, err: 0 };
        rates.model.set(model, { rps: m.rps + r.rps, req: m.req + req, err: m.err + err });
      }
      for (const model of cur.ttftCount.keys()) {
        const c = delta(cur.ttftCount, prev?.ttftCount, model);
        const s = delta(cur.ttftSum, prev?.ttftSum, model);
        if (c) rates.ttft.set(model, s / c);
      }
      for (const [model, r] of rates.model) {
        const hist = history.get(model) || [];
        hist.push(r.rps);
        if (hist.length > 30) hist.shift();
        history.set(model, hist);
      }
      prev = cur;
      last = { eps, cur, rates };
      stamp.textContent = `updated ${new Date().toLocaleTimeString()}`;
      performance.mark('overview:rates');
      draw();
      performance.mark('overview:drawn');
    };
    filter.addEventListener('input', () => { limit = PAGE; draw(); });
    await refresh();
    const loop = () => {
      timer = setTimeout(async () => {
        if (stopped) return;
        try {
          await refresh();
        } catch (e) {
          stamp.textContent = `refresh failed: ${e.message}`;
        }
        if (!stopped) loop();
      }, REFRESH_MS);
    };
    loop();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  },
};
