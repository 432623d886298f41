// Open-loop load client for bench/load/engine_routing.sh (node, no packages).
//
//   node engine_client.js SPEC_JSON
//
// SPEC: {"port": P, "duration_s": D, "seed": S, "drain_s": C, "block": 16,
//        "streams": [{"name", "rate", "tenants", "prefix_words", "question_words", "max_tokens",
//                     "key" (optional bearer), "priority" (optional x-infera-priority),
//                     "tenant_base" (optional: tenant numbering starts here)}]}
// Each stream sends streaming chat completions with Poisson arrivals (exponential gaps from a
// seeded generator) at `rate` per second for `duration_s`, whatever the answers (open loop). A
// request is one of `tenants` system prompts of `prefix_words` words (the tenant's shared prefix)
// and a fresh question of `question_words` words. Time to first token (TTFT) is read from the
// first SSE event with content. After the last send the client waits up to `drain_s` for answers;
// a request still unanswered then counts as failed (and its TTFT as the time waited so far); a
// refused request (non-200) counts as failed and has no TTFT.
//
// Prints one JSON line: per stream, sent/ok/failed, TTFT and end-to-end percentiles (s), output
// tokens, and the best possible prefix-cache hit rate of its prompts (tokens): every prompt of a
// tenant already seen hits its prefix's full blocks (the emulator's tokenizer: one token per
// word, a message adds <|im_start|>, its role and <|im_end|>), as one engine with an unbounded
// cache would; output tokens/s over the whole run (first send to last answer) is in "total".
'use strict';
const http = require('http');

const spec = JSON.parse(process.argv[2]);
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });

// xorshift64*: deterministic from the seed.
function rng(seed) {
  let s = BigInt.asUintN(64, BigInt(seed) * 0x9E3779B97F4A7C15n + 1n);
  return () => {
    s ^= s >> 12n; s ^= BigInt.asUintN(64, s << 25n); s ^= s >> 27n;
    const r = BigInt.asUintN(64, s * 0x2545F4914F6CDD1Dn);
    return Number(r >> 11n) / 9007199254740992;
  };
}

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1));
  return Number(sorted[i].toFixed(4));
}

const block = spec.block || 16;
const t0 = process.hrtime.bigint();
const now = () => Number(process.hrtime.bigint() - t0) / 1e9;
let outstanding = 0, lastAnswer = 0, sendingDone = false;
const results = [];
const pending = [];  // every request sent: {req, finish}, for the drain deadline

function prefixText(tenant, words) {
  const w = [];
  for (let i = 0; i < words; i++) w.push('t' + tenant + 'w' + i);
  return w.join(' ');
}

function planStream(st, idx) {
  const rand = rng((spec.seed || 1) * 1000 + idx);
  // Prefix texts are kept for up to 10,000 tenants, made per request past that.
  const prefixes = new Map();
  const prefixOf = (t) => {
    let p = prefixes.get(t);
    if (p === undefined) {
      p = prefixText((st.tenant_base || 0) + t, st.prefix_words);
      if (st.tenants <= 10000) prefixes.set(t, p);
    }
    return p;
  };
  const res = {
    name: st.name, sent: 0, ok: 0, failed: 0, statuses: {}, ttft: [], e2e: [], tokens: 0,
    prompt_tokens: 0, best_hit_tokens: 0,
  };
  results.push(res);
  const seen = new Set();
  // Shared tokens of two prompts of one tenant: the system message (words + 3) and the user
  // message's <|im_start|> and role; the engine caches full blocks of them.
  const shared = Math.floor((st.prefix_words + 5) / block) * block;
  let t = 0, q = 0;
  const times = [];
  for (;;) {
    t += -Math.log(1 - rand()) / st.rate;
    if (t >= spec.duration_s) break;
    times.push(t);
  }
  const send = () => {
    const tenant = Math.floor(rand() * st.tenants);
    const words = [];
    for (let i = 0; i < st.question_words; i++) words.push('q' + (q++) + 'x' + Math.floor(rand() * 1e6));
    const body = JSON.stringify({
      model: 'm', stream: true, max_tokens: st.max_tokens,
      messages: [{ role: 'system', content: prefixOf(tenant) },
                 { role: 'user', content: words.join(' ') }],
    });
    res.prompt_tokens += st.prefix_words + 3 + st.question_words + 3;
    if (seen.has(tenant)) res.best_hit_tokens += shared;
    seen.add(tenant);
    const headers = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) };
    if (st.key) headers.authorization = 'Bearer ' + st.key;
    if (st.priority) headers['x-infera-priority'] = st.priority;
    res.sent++;
    outstanding++;
    const start = now();
    let first = null, tokens = 0, finished = false;
    const finish = (ok, status) => {
      if (finished) return;
      finished = true;
      outstanding--;
      const end = now();
      if (ok) {
        lastAnswer = Math.max(lastAnswer, end);
        res.ok++;
        res.tokens += tokens;
        res.ttft.push((first === null ? end : first) - start);
        res.e2e.push(end - start);
      } else {
        res.failed++;
        res.statuses[status] = (res.statuses[status] || 0) + 1;
        // A request never answered counts with the time waited (censored: at least this long);
        // a refusal (a 429 shed) is a failure, not a fast first token.
        if (status === 'drain_timeout') res.ttft.push(end - start);
      }
      maybeDone();
    };
    const req = http.request({ host: '127.0.0.1', port: spec.port, path: '/v1/chat/completions',
                               method: 'POST', headers, agent }, (resp) => {
      if (resp.statusCode !== 200) {
        resp.resume();
        resp.on('end', () => finish(false, resp.statusCode));
        return;
      }
      let buf = '';
      resp.setEncoding('utf8');
      resp.on('data', (chunk) => {
        buf += chunk;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
          if (ev.includes('"content":"') && !ev.includes('"content":""')) {
            if (first === null) first = now();
            tokens++;
          }
        }
      });
      resp.on('end', () => finish(true, 200));
      resp.on('error', () => finish(false, 'reset'));
    });
    req.on('error', (e) => finish(false, e.code || 'error'));
    req.end(body);
    pending.push({ req, finish });
  };
  for (const at of times) setTimeout(send, Math.max(0, (at - now()) * 1000));
  return times.length;
}

let planned = 0;
spec.streams.forEach((st, i) => { planned += planStream(st, i); });
setTimeout(() => { sendingDone = true; maybeDone(); }, spec.duration_s * 1000 + 10);
const drainTimer = setTimeout(() => {
  for (const p of pending) { p.finish(false, 'drain_timeout'); p.req.destroy(); }
}, (spec.duration_s + (spec.drain_s || 120)) * 1000);

function maybeDone() {
  if (!sendingDone || outstanding > 0) return;
  if (results.reduce((a, r) => a + r.sent, 0) < planned) return;
  clearTimeout(drainTimer);
  const wall = Math.max(lastAnswer, 1e-9);
  let tokens = 0;
  const out = { wall_s: Number(wall.toFixed(3)), streams: {} };
  for (const r of results) {
    const ttft = r.ttft.sort((a, b) => a - b), e2e = r.e2e.sort((a, b) => a - b);
    tokens += r.tokens;
    out.streams[r.name] = {
      sent: r.sent, ok: r.ok, failed: r.failed, statuses: r.statuses,
      ttft_p50: percentile(ttft, 0.5), ttft_p90: percentile(ttft, 0.9), ttft_p99: percentile(ttft, 0.99),
      e2e_p50: percentile(e2e, 0.5), e2e_p90: percentile(e2e, 0.9),
      tokens: r.tokens, tokens_per_s: Number((r.tokens / wall).toFixed(1)),
      prompt_tokens: r.prompt_tokens,
      best_hit_rate: Number((r.best_hit_tokens / Math.max(1, r.prompt_tokens)).toFixed(4)),
    };
  }
  out.total = { tokens, tokens_per_s: Number((tokens / wall).toFixed(1)) };
  process.stdout.write(JSON.stringify(out) + '\n');
  agent.destroy();
  process.exit(0);
}
