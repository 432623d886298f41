// Overview: models → deployments → endpoints, live. Endpoint state from GET /admin/endpoints
// (health, ejection, in-flight, EWMA latency per worker), traffic from GET /metrics (requests/s,
// error rate, upstream latency per deployment, TTFT per model) as deltas between refreshes.
import { api, clear, fmt, h, parseMetrics, sumBy, badge } from '../lib.js';
import { sparkline } from '../charts.js';

const REFRESH_MS = 2000;

function snapshot(samples) {
  return {
    at: performance.now(),
    requests: sumBy(samples, 'infera_gateway_requests_total', ['model', 'deployment']),
    errors: sumBy(samples, 'infera_gateway_requests_total', ['model', 'deployment'], (l) => l.code_class === '5xx'),
    latSum: sumBy(samples, 'infera_gateway_upstream_latency_seconds_sum', ['deployment']),
    latCount: sumBy(samples, 'infera_gateway_upstream_latency_seconds_count', ['deployment']),
    ttftSum: sumBy(samples, 'infera_gateway_time_to_first_token_seconds_sum', ['model']),
    ttftCount: sumBy(samples, 'infera_gateway_time_to_first_token_seconds_count', ['model']),
    inFlight: sumBy(samples, 'infera_gateway_requests_in_flight', []).get('') || 0,
  };
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
      for (const [model, deps] of models) {
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
          const dr = rates.dep.get(key) || { rps: 0, err: 0, req: 0, total: 0, lat: undefined };
          rows.push(h('tr', { class: 'dep-row', 'data-deployment': key },
            h('td', {}, ''), h('td', { colspan: 3 }, dep),
            h('td', { class: 'num', 'data-col': 'rps' }, fmt.num(dr.rps, 2)),
            h('td', { class: 'num' }, dr.req ? fmt.pct(dr.err / dr.req) : '–'),
            h('td', { class: 'num', 'data-col': 'total' }, fmt.int(dr.total)),
            h('td', { class: 'num' }, fmt.ms(dr.lat)),
            h('td', { colspan: 3 })));
          for (const e of list) {
            const state = !e.healthy ? badge('down', 'bad') : e.ejected ? badge('ejected', 'warn') : badge('healthy', 'ok');
            rows.push(h('tr', { 'data-endpoint': e.endpoint },
              h('td', {}, ''), h('td', {}, ''), h('td', {}, e.endpoint), h('td', {}, e.region || '–'),
              h('td', { colspan: 4 }),
              h('td', { class: 'num' }, e.weight),
              h('td', { class: 'num' }, e.in_flight ?? '–'),
              h('td', {}, state, ' ', e.ewma_ms ? `${fmt.num(e.ewma_ms, 1)} ms` : '')));
          }
        }
      }
      clear(tableBox, h('table', { class: 'grid', 'aria-label': 'Endpoints' },
        h('thead', {}, h('tr', {}, ['Model', 'Deployment', 'Endpoint', 'Region', 'req/s', 'errors', 'requests', 'latency', 'weight', 'in flight', 'state · EWMA'].map((c, i) => h('th', { scope: 'col', class: i >= 4 && i <= 9 ? 'num' : '' }, c)))),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 11, class: 'empty' }, 'no models')))));
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
      const [eps, text] = await Promise.all([api('/admin/endpoints'), api('/metrics')]);
      const cur = snapshot(parseMetrics(text));
      const secs = prev ? (cur.at - prev.at) / 1000 : 0;
      const rates = { model: new Map(), dep: new Map(), ttft: new Map() };
      for (const key of cur.requests.keys()) {
        const [model, dep] = key.split('|');
        const req = delta(cur.requests, prev?.requests, key);
        const err = delta(cur.errors, prev?.errors, key);
        const dl = delta(cur.latSum, prev?.latSum, dep);
        const dc = delta(cur.latCount, prev?.latCount, dep);
        const r = { rps: secs ? req / secs : 0, req, err, total: cur.requests.get(key), lat: dc ? dl / dc : undefined };
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
      draw();
    };
    filter.addEventListener('input', draw);
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

function kpi(label, value, kind = '') {
  return h('div', { class: `kpi ${kind}` }, h('div', { class: 'v' }, value), h('div', { class: 'l' }, label));
}
