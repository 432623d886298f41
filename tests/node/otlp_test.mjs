// Traces from a real `infera serve` to an OTLP/HTTP receiver that decodes them with the
// OpenTelemetry project's own protobuf definitions (@opentelemetry/otlp-transformer's generated
// ExportTraceServiceRequest): the span tree of a chat completion (server span continuing the
// caller's traceparent, access control's steps, the upstream client span whose id the backend
// received as its parent), GenAI attributes and usage, a vector route's span; head sampling by
// ratio with parent-based and error overrides; a collector that is down costs no request (and is
// retried); one that answers 503 once gets the spans on the retry.
// Usage: node otlp_test.mjs INFERA WORK_DIR (NODE_PATH: the build's node_modules)
import { createRequire } from 'node:module';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import assert from 'node:assert/strict';

const require = createRequire(import.meta.url);
const root = require('@opentelemetry/otlp-transformer/build/src/generated/root');
const ExportTraceServiceRequest = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;

const [infera, work] = process.argv.slice(2);
let passed = 0;
let failed = 0;
function check(name, fn) {
  try {
    fn();
    passed++;
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL - ${name}: ${e.message}`);
  }
}
const hex = (b) => Buffer.from(b).toString('hex');
const deadline = (ms) => Date.now() + ms;
async function until(what, fn, ms = 10000) {
  const end = deadline(ms);
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// The receiver (POST /v1/traces) and the backend (POST /v1/chat/completions) in one server.
const spans = [];        // every span received: {span, resource}
const backendSeen = [];  // traceparent headers the backend received
let exportRequests = 0;
let flakyRequests = 0;  // /flaky/v1/traces: 503 (Retry-After: 0) first, then accepted
const receiver = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    if (req.url === '/flaky/v1/traces') {
      res.writeHead(flakyRequests++ === 0 ? 503 : 200, { 'retry-after': '0' });
      res.end();
      return;
    }
    if (req.url === '/v1/traces') {
      exportRequests++;
      assert.equal(req.headers['content-type'], 'application/x-protobuf');
      const msg = ExportTraceServiceRequest.decode(body);
      for (const rs of msg.resourceSpans) {
        const resource = Object.fromEntries((rs.resource?.attributes || []).map((a) => [a.key, a.value.stringValue]));
        for (const ss of rs.scopeSpans) for (const span of ss.spans) spans.push({ span, resource, scope: ss.scope });
      }
      res.writeHead(200, { 'content-type': 'application/x-protobuf' });
      res.end();
      return;
    }
    backendSeen.push(req.headers.traceparent || '');
    const model = JSON.parse(body.toString()).model;
    if (model === 'broken') {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"boom"}}');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id: 'x', object: 'chat.completion', model,
      choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } }));
  });
});
await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
const rport = receiver.address().port;

const children = [];
async function serve(name, tracing) {
  const cfg = `${work}/${name}.yaml`;
  fs.writeFileSync(cfg, `listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
workers: 1
log_level: warn
health_check: {enabled: false}
retry: {attempts: 1}
tracing: ${tracing}
governance: {store: "sqlite:${work}/${name}.db", require_keys: false, admin_token: t}
vectors: {data_dir: ${work}/${name}-vectors}
models:
  - name: m
    deployments: [{name: d, endpoints: [{url: "http://127.0.0.1:${rport}"}]}]
  - name: broken
    deployments: [{name: b, endpoints: [{url: "http://127.0.0.1:${rport}"}]}]
`);
  const out = fs.openSync(`${work}/${name}.out`, 'w');
  const child = spawn(infera, ['serve', '-c', cfg], { stdio: ['ignore', out, out] });
  children.push(child);
  const ports = await until(`${name} to start`, () => {
    const m = fs.readFileSync(`${work}/${name}.out`, 'utf8').match(/data http:\/\/127\.0\.0\.1:(\d+)\s+admin http:\/\/127\.0\.0\.1:(\d+)/);
    return m && { data: Number(m[1]), admin: Number(m[2]) };
  });
  return ports;
}
async function chat(port, model, headers = {}) {
  const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }] }) });
  await r.text();
  return r.status;
}
async function metric(adminPort, series) {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line ? Number(line.split(' ').pop()) : 0;
}
const attrs = (s) => Object.fromEntries(s.attributes.map((a) => {
  const v = a.value;
  return [a.key, v.stringValue ?? (v.intValue != null ? Number(v.intValue) : v.doubleValue ?? v.boolValue)];
}));
const ofTrace = (t) => spans.filter((x) => hex(x.span.traceId) === t).map((x) => x.span);

try {
  // ---- every trace kept (ratio 1) ----
  const a = await serve('all', `{endpoint: "http://127.0.0.1:${rport}/v1/traces", sample_ratio: 1.0, export_interval_ms: 50}`);
  const trace = '4bf92f3577b34da6a3ce929d0e0e4736';
  const caller = '00f067aa0ba902b7';
  const status = await chat(a.data, 'm', { traceparent: `00-${trace}-${caller}-01`, tracestate: 'vendor=x' });
  check('the traced chat answers 200', () => assert.equal(status, 200));
  await until('the chat trace', () => ofTrace(trace).length >= 4);
  const t = ofTrace(trace);
  const rootSpan = t.find((s) => s.name === 'POST /v1/chat/completions');
  check('the server span continues the caller\'s trace', () => {
    assert.ok(rootSpan, JSON.stringify(t.map((s) => s.name)));
    assert.equal(rootSpan.kind, 2);  // SPAN_KIND_SERVER
    assert.equal(hex(rootSpan.parentSpanId), caller);
    assert.equal(rootSpan.traceState, 'vendor=x');
  });
  const ra = attrs(rootSpan);
  check('its HTTP and GenAI attributes', () => {
    assert.equal(ra['http.request.method'], 'POST');
    assert.equal(ra['http.route'], '/v1/chat/completions');
    assert.equal(ra['http.response.status_code'], 200);
    assert.equal(ra['gen_ai.operation.name'], 'chat');
    assert.equal(ra['gen_ai.request.model'], 'm');
    assert.equal(ra['gen_ai.usage.input_tokens'], 7);
    assert.equal(ra['gen_ai.usage.output_tokens'], 3);
    assert.equal(ra['infera.deployment'], 'd');
    assert.equal(ra['infera.team'], 'anonymous');
  });
  const child = (name) => t.find((s) => s.name === name);
  const upstream = t.find((s) => s.kind === 3);
  check('access control\'s steps and the upstream attempt are children of the server span', () => {
    for (const s of [child('access.authenticate'), child('access.admit'), upstream]) {
      assert.ok(s, JSON.stringify(t.map((x) => x.name)));
      assert.equal(hex(s.parentSpanId), hex(rootSpan.spanId));
      assert.ok(Number(s.startTimeUnixNano) >= Number(rootSpan.startTimeUnixNano));
      assert.ok(Number(s.endTimeUnixNano) <= Number(rootSpan.endTimeUnixNano));
    }
    assert.equal(upstream.name, 'POST');
    assert.equal(attrs(upstream)['server.port'], rport);
    assert.equal(attrs(upstream)['http.response.status_code'], 200);
  });
  check('the backend received the upstream span as its parent', () =>
    assert.ok(backendSeen.includes(`00-${trace}-${hex(upstream.spanId)}-01`), JSON.stringify(backendSeen)));
  check('the resource names the service', () => {
    const r = spans.find((x) => hex(x.span.traceId) === trace).resource;
    assert.equal(r['service.name'], 'infera');
    assert.ok(r['service.instance.id']);
  });
  // A vector route: its own server span, named by its pattern.
  const put = await fetch(`http://127.0.0.1:${a.data}/collections/c1`, { method: 'PUT',
    headers: { 'content-type': 'application/json' }, body: JSON.stringify({ vectors: { size: 4, distance: 'Cosine' } }) });
  await put.text();
  await until('the vector route span', () => spans.some((x) => x.span.name === 'PUT /collections/{name}'));
  check('a vector route is traced as its pattern', () => {
    const s = spans.find((x) => x.span.name === 'PUT /collections/{name}').span;
    assert.equal(s.kind, 2);
    assert.equal(attrs(s)['url.path'], '/collections/c1');
    assert.equal(attrs(s)['http.response.status_code'], put.status);
  });
  const exported = await metric(a.admin, 'infera_trace_spans_total{outcome="exported"}');
  check('infera_trace_spans_total{outcome="exported"} counts what arrived', () =>
    assert.equal(exported, spans.length));

  // ---- head sampling at ratio 0: only errors and sampled parents ----
  spans.length = 0;
  const z = await serve('none', `{endpoint: "http://127.0.0.1:${rport}/v1/traces", sample_ratio: 0, export_interval_ms: 50}`);
  for (let i = 0; i < 20; i++) assert.equal(await chat(z.data, 'm'), 200);
  const unsampledParent = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa';
  assert.equal(await chat(z.data, 'm', { traceparent: `00-${unsampledParent}-00f067aa0ba902b7-00` }), 200);
  const errStatus = await chat(z.data, 'broken');
  const sampledParent = 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb';
  assert.equal(await chat(z.data, 'm', { traceparent: `00-${sampledParent}-00f067aa0ba902b7-01` }), 200);
  await until('the error and the sampled parent', () =>
    spans.some((x) => hex(x.span.traceId) === sampledParent) &&
    spans.some((x) => attrs(x.span)['gen_ai.request.model'] === 'broken'));
  const traces = new Set(spans.map((x) => hex(x.span.traceId)));
  check('at ratio 0 only the error and the sampled parent are exported (2 traces)', () =>
    assert.equal(traces.size, 2, [...traces].join(',')));
  check('the error trace is marked ERROR', () => {
    const r = spans.find((x) => attrs(x.span)['gen_ai.request.model'] === 'broken').span;
    assert.ok(errStatus >= 500);
    assert.equal(r.status.code, 2);  // STATUS_CODE_ERROR
  });
  check('an unsampled caller\'s trace reaches the backend unsampled, and is not exported', () => {
    assert.ok(!traces.has(unsampledParent));
    // Recorded in case it fails (errors_always): the backend's parent is the upstream span, the
    // flag still "not sampled".
    assert.ok(backendSeen.some((h) => new RegExp(`^00-${unsampledParent}-[0-9a-f]{16}-00$`).test(h) &&
      !h.includes('00f067aa0ba902b7')), JSON.stringify(backendSeen));
  });

  // ---- a collector that is down: requests unaffected, failures counted ----
  const dead = http.createServer();
  await new Promise((r) => dead.listen(0, '127.0.0.1', r));
  const deadPort = dead.address().port;
  await new Promise((r) => dead.close(r));
  const d = await serve('down', `{endpoint: "http://127.0.0.1:${deadPort}/v1/traces", export_interval_ms: 50, timeout_ms: 500, max_retries: 1}`);
  let ok = 0;
  for (let i = 0; i < 10; i++) ok += (await chat(d.data, 'm')) === 200 ? 1 : 0;
  check('with the collector down every request answers 200', () => assert.equal(ok, 10));
  await until('a failed export counted', async () => (await metric(d.admin, 'infera_trace_exports_total{result="error"}')) >= 1);
  const failedSpans = await metric(d.admin, 'infera_trace_spans_total{outcome="failed"}');
  check('infera_trace_spans_total{outcome="failed"} > 0', () => assert.ok(failedSpans > 0));
  const downRetries = await metric(d.admin, 'infera_trace_exports_total{result="retried"}');
  check('a collector that refuses connections is retried (max_retries: 1)', () => assert.ok(downRetries >= 1));

  // ---- a collector that answers 503 once: retried, nothing lost ----
  const f = await serve('flaky', `{endpoint: "http://127.0.0.1:${rport}/flaky/v1/traces", export_interval_ms: 50}`);
  const flakyStatus = await chat(f.data, 'm');
  check('the flaky collector\'s request answers 200', () => assert.equal(flakyStatus, 200));
  await until('the retried export accepted', async () => (await metric(f.admin, 'infera_trace_exports_total{result="ok"}')) >= 1);
  const flaky = {
    retried: await metric(f.admin, 'infera_trace_exports_total{result="retried"}'),
    errors: await metric(f.admin, 'infera_trace_exports_total{result="error"}'),
    failed: await metric(f.admin, 'infera_trace_spans_total{outcome="failed"}'),
  };
  check('a 503 is retried after its Retry-After and the spans are exported, none failed', () => {
    assert.equal(flakyRequests, 2);
    assert.deepEqual(flaky, { retried: 1, errors: 0, failed: 0 });
  });
} catch (e) {
  failed++;
  console.log(`FAIL - ${e.stack}`);
} finally {
  for (const c of children) c.kill('SIGTERM');
  await Promise.all(children.map((c) => new Promise((r) => (c.exitCode !== null ? r() : c.on('exit', r)))));
  receiver.close();
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
