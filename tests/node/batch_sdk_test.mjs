// The official openai SDK (npm `openai`) drives Infera's Files and Batches APIs end to end: upload,
// create, poll, output and error files, list with paging, cancel, delete, an invalid input file,
// and one team's files and batches absent to another's key. Exits non-zero on the first failure.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(process.env.NODE_PATH + '/');
const OpenAI = require('openai');
const base = process.env.INFERA_BASE_URL;
const a = new OpenAI({ baseURL: base, apiKey: process.env.INFERA_KEY_A, maxRetries: 0 });
const b = new OpenAI({ baseURL: base, apiKey: process.env.INFERA_KEY_B, maxRetries: 0 });
const work = process.env.WORK_DIR;

let passed = 0;
async function check(name, fn) {
  await fn();
  passed += 1;
  console.log(`ok - ${name}`);
}

function writeJsonl(name, lines) {
  const p = path.join(work, name);
  fs.writeFileSync(p, lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n') + '\n');
  return p;
}
const chat = (id, model = 'llama-3-8b', extra = {}) => ({
  custom_id: id, method: 'POST', url: '/v1/chat/completions',
  body: { model, max_tokens: 3, messages: [{ role: 'user', content: `question ${id}` }], ...extra },
});

async function waitFor(client, id, done, ms = 60000) {
  const until = Date.now() + ms;
  for (;;) {
    const batch = await client.batches.retrieve(id);
    if (done(batch)) return batch;
    if (Date.now() > until) throw new Error(`batch ${id} stuck in ${batch.status}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
const ended = (x) => ['completed', 'failed', 'cancelled', 'expired'].includes(x.status);
async function lines(client, fileId) {
  const text = await (await client.files.content(fileId)).text();
  return text.split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
}

const N = 120;
let input;
let done;
await check('files.create uploads a JSONL file (streamed from disk)', async () => {
  const p = writeJsonl('chat.jsonl', Array.from({ length: N }, (_, i) => chat(`req-${i}`)));
  input = await a.files.create({ file: fs.createReadStream(p), purpose: 'batch' });
  assert.equal(input.object, 'file');
  assert.equal(input.purpose, 'batch');
  assert.equal(input.filename, 'chat.jsonl');
  assert.equal(input.bytes, fs.statSync(p).size);
  const again = await a.files.retrieve(input.id);
  assert.equal(again.bytes, input.bytes);
  const content = await (await a.files.content(input.id)).text();
  assert.equal(content, fs.readFileSync(p, 'utf8'));
});

await check('batches.create, poll to completed, every custom_id answered once', async () => {
  const created = await a.batches.create({
    input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h',
    metadata: { job: 'nightly' },
  });
  assert.equal(created.object, 'batch');
  assert.equal(created.status, 'validating');
  assert.deepEqual(created.metadata, { job: 'nightly' });
  done = await waitFor(a, created.id, ended);
  assert.equal(done.status, 'completed');
  assert.deepEqual(done.request_counts, { total: N, completed: N, failed: 0 });
  assert.equal(done.error_file_id, null);
  assert.ok(done.completed_at >= done.in_progress_at && done.in_progress_at >= done.created_at);
  const out = await lines(a, done.output_file_id);
  assert.equal(out.length, N);
  const ids = new Set(out.map((l) => l.custom_id));
  assert.equal(ids.size, N);
  for (let i = 0; i < N; i += 1) assert.ok(ids.has(`req-${i}`), `req-${i} missing`);
  for (const l of out) {
    assert.equal(l.error, null);
    assert.equal(l.response.status_code, 200);
    assert.equal(l.response.body.object, 'chat.completion');
    assert.equal(l.response.body.usage.completion_tokens, 3);
    assert.ok(l.id.startsWith('batch_req_'));
    assert.ok(l.response.request_id.length > 0);
  }
  assert.equal(done.usage.output_tokens, 3 * N);
});

await check('a failing line goes to the error file with its HTTP answer', async () => {
  const p = writeJsonl('mixed.jsonl', [chat('good-1'), chat('bad-1', 'no-such-model'), chat('good-2')]);
  const f = await a.files.create({ file: fs.createReadStream(p), purpose: 'batch' });
  const created = await a.batches.create({
    input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h',
  });
  const x = await waitFor(a, created.id, ended);
  assert.equal(x.status, 'completed');
  assert.deepEqual(x.request_counts, { total: 3, completed: 2, failed: 1 });
  const out = await lines(a, x.output_file_id);
  assert.deepEqual(out.map((l) => l.custom_id), ['good-1', 'good-2']);
  const errs = await lines(a, x.error_file_id);
  assert.equal(errs.length, 1);
  assert.equal(errs[0].custom_id, 'bad-1');
  assert.equal(errs[0].response.status_code, 404);
  assert.equal(errs[0].error, null);
  assert.ok(errs[0].response.body.error.message.length > 0);
});

await check('lines whose backend is down are retried, then failed, while the rest go on', async () => {
  // More failing lines than the executor runs at once: retries must not wedge it.
  const lines_ = [];
  for (let i = 0; i < 10; i += 1) lines_.push(chat(`dead-${i}`, 'dead-model'), chat(`live-${i}`));
  const p = writeJsonl('dead.jsonl', lines_);
  const f = await a.files.create({ file: fs.createReadStream(p), purpose: 'batch' });
  const created = await a.batches.create({
    input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h',
  });
  const x = await waitFor(a, created.id, ended, 30000);
  assert.equal(x.status, 'completed');
  assert.deepEqual(x.request_counts, { total: 20, completed: 10, failed: 10 });
  const errs = await lines(a, x.error_file_id);
  assert.deepEqual(errs.map((l) => l.custom_id).sort(), Array.from({ length: 10 }, (_, i) => `dead-${i}`).sort());
  for (const e of errs) assert.ok(e.response.status_code >= 500, JSON.stringify(e));
});

await check('an invalid input file fails the batch with errors per line', async () => {
  const p = writeJsonl('invalid.jsonl', [
    chat('x-1'),
    '{"custom_id": "x-2", "method": "POST", "url": "/v1/chat/completions", "body": {',
    chat('x-1'),
    { ...chat('x-3'), url: '/v1/embeddings' },
    chat('x-4', 'llama-3-8b', { stream: true }),
    { custom_id: 'x-5', method: 'POST', url: '/v1/chat/completions' },
  ]);
  const f = await a.files.create({ file: fs.createReadStream(p), purpose: 'batch' });
  const created = await a.batches.create({
    input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h',
  });
  const x = await waitFor(a, created.id, ended);
  assert.equal(x.status, 'failed');
  assert.ok(x.failed_at > 0);
  assert.equal(x.output_file_id, null);
  const got = x.errors.data.map((e) => [e.code, e.line]);
  assert.deepEqual(got, [
    ['invalid_json_line', 2], ['duplicate_custom_id', 3], ['invalid_url', 4],
    ['streaming_unsupported', 5], ['missing_required_parameter', 6],
  ]);
});

await check('create refuses an unknown endpoint and a bad window with 400', async () => {
  await assert.rejects(
    a.batches.create({ input_file_id: input.id, endpoint: '/v1/nope', completion_window: '24h' }),
    (e) => e.status === 400 && e.param === 'endpoint');
  await assert.rejects(
    a.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '1y' }),
    (e) => e.status === 400 && e.param === 'completion_window');
});

await check('another team sees none of it', async () => {
  await assert.rejects(b.batches.retrieve(done.id), (e) => e.status === 404);
  await assert.rejects(b.files.retrieve(input.id), (e) => e.status === 404);
  await assert.rejects(b.files.content(done.output_file_id), (e) => e.status === 404);
  await assert.rejects(b.batches.cancel(done.id), (e) => e.status === 404);
  await assert.rejects(b.files.del(input.id), (e) => e.status === 404);
  const theirs = [];
  for await (const x of b.batches.list()) theirs.push(x.id);
  assert.deepEqual(theirs, []);
  const files = [];
  for await (const x of b.files.list()) files.push(x.id);
  assert.deepEqual(files, []);
  // Nor may it start a batch on A's file: the batch fails as if the file did not exist.
  const stolen = await b.batches.create({
    input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h',
  });
  const x = await waitFor(b, stolen.id, ended);
  assert.equal(x.status, 'failed');
  assert.equal(x.errors.data[0].param, 'file_id');
});

await check('batches.list and files.list page through everything', async () => {
  const ids = [];
  for await (const x of a.batches.list({ limit: 1 })) ids.push(x.id);
  assert.equal(ids.length, 4);
  assert.equal(new Set(ids).size, 4);
  assert.equal(ids[ids.length - 1], done.id);  // newest first; the first batch made is last
  const outputs = [];
  for await (const f of a.files.list({ purpose: 'batch_output', limit: 1 })) outputs.push(f);
  assert.equal(outputs.length, 5);  // three output files and two error files
  assert.ok(outputs.every((f) => f.purpose === 'batch_output'));
});

await check('cancel stops a running batch; its unrun lines are in the error file', async () => {
  const M = 60;
  const p = writeJsonl('slow.jsonl', Array.from({ length: M }, (_, i) => chat(`s-${i}`, 'slow-model')));
  const f = await a.files.create({ file: fs.createReadStream(p), purpose: 'batch' });
  const created = await a.batches.create({
    input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h',
  });
  await waitFor(a, created.id, (x) => x.request_counts.completed >= 4);
  // Its input cannot be deleted while it runs.
  await assert.rejects(a.files.del(f.id), (e) => e.status === 409);
  const c = await a.batches.cancel(created.id);
  assert.equal(c.status, 'cancelling');
  assert.ok(c.cancelling_at > 0);
  const x = await waitFor(a, created.id, ended);
  assert.equal(x.status, 'cancelled');
  assert.ok(x.cancelled_at > 0);
  assert.equal(x.request_counts.total, M);
  assert.ok(x.request_counts.completed < M, `completed ${x.request_counts.completed}`);
  assert.equal(x.request_counts.completed + x.request_counts.failed, M);
  // Lines run slower than a lease: the ones in flight at the cancel are waited for, so each line
  // is in exactly one file, and answered lines are never listed as not run.
  const out = x.request_counts.completed > 0 ? await lines(a, x.output_file_id) : [];
  const errs = await lines(a, x.error_file_id);
  assert.equal(out.length, x.request_counts.completed);
  assert.equal(out.length + errs.length, M);
  const all = new Set([...out, ...errs].map((l) => l.custom_id));
  assert.equal(all.size, M);
  for (const e of errs) {
    assert.equal(e.response, null);
    assert.equal(e.error.code, 'batch_cancelled');
  }
  // For the script: what was billed to slow-model must be what was answered (no line that ran is
  // reported as not run).
  fs.writeFileSync(path.join(work, 'cancelled.json'), JSON.stringify(x));
  // Cancelling again is allowed (200); a completed batch's cancel is a 409.
  assert.equal((await a.batches.cancel(created.id)).status, 'cancelled');
  await assert.rejects(a.batches.cancel(done.id), (e) => e.status === 409);
});

await check('files.del removes a file; a running batch input cannot be deleted', async () => {
  const p = writeJsonl('gone.jsonl', [chat('g-1')]);
  const f = await a.files.create({ file: fs.createReadStream(p), purpose: 'batch' });
  const r = await a.files.del(f.id);
  assert.deepEqual(r, { id: f.id, object: 'file', deleted: true });
  await assert.rejects(a.files.retrieve(f.id), (e) => e.status === 404);
  await assert.rejects(a.files.content(f.id), (e) => e.status === 404);
});

await check('an upload without purpose or with an unknown purpose is a 400', async () => {
  const p = writeJsonl('p.jsonl', [chat('p-1')]);
  await assert.rejects(a.files.create({ file: fs.createReadStream(p), purpose: 'answers' }),
    (e) => e.status === 400 && /purpose/.test(e.message));
});

await check('files expire as the SDK asks: expires_after on upload, output_expires_after on a batch', async () => {
  const p = writeJsonl('expiring.jsonl', [chat('e-1')]);
  const f = await a.files.create({
    file: fs.createReadStream(p), purpose: 'batch', expires_after: { anchor: 'created_at', seconds: 3600 },
  });
  assert.equal(f.expires_at, f.created_at + 3600);
  // A batch file that names none: OpenAI's 30 days; another purpose: kept.
  const d = await a.files.create({ file: fs.createReadStream(p), purpose: 'batch' });
  assert.equal(d.expires_at, d.created_at + 2592000);
  const u = await a.files.create({ file: fs.createReadStream(p), purpose: 'user_data' });
  assert.equal(u.expires_at, null);
  await assert.rejects(a.files.create({
    file: fs.createReadStream(p), purpose: 'batch', expires_after: { anchor: 'created_at', seconds: 60 },
  }), (e) => e.status === 400 && /expires_after\.seconds/.test(e.message));
  const created = await a.batches.create({
    input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h',
    output_expires_after: { anchor: 'created_at', seconds: 7200 },
  });
  const x = await waitFor(a, created.id, ended);
  assert.equal(x.status, 'completed');
  const out = await a.files.retrieve(x.output_file_id);
  assert.equal(out.expires_at, out.created_at + 7200);
  for (const id of [f.id, d.id, u.id]) await a.files.del(id);
});

// Bulk embedding: a /v1/embeddings batch whose vectors go straight into a collection (Infera's
// `vector_collection`), checked with the Qdrant JS client as the same team's key.
const { QdrantClient } = require('@qdrant/js-client-rest');
const dataPort = new URL(base).origin;
const qa = new QdrantClient({ url: dataPort, port: null, apiKey: process.env.INFERA_KEY_A, checkCompatibility: false });
const qb = new QdrantClient({ url: dataPort, port: null, apiKey: process.env.INFERA_KEY_B, checkCompatibility: false });
const embedLine = (i, extra = {}) => ({
  custom_id: `item-${i}`, method: 'POST', url: '/v1/embeddings',
  body: { model: 'text-embedding-3-small', input: `catalogue item ${i}` },
  point_id: 1000 + i, payload: { sku: `sku-${i}`, n: i }, ...extra,
});
const E = 60;
await check('a /v1/embeddings batch with vector_collection upserts every vector with its id and payload', async () => {
  await qa.createCollection('catalogue', { vectors: { size: 16, distance: 'Cosine' } });
  // A line may also take its point id from a custom_id that is one (a UUID here).
  const uuid = '7b0c3c7e-8a1d-4a56-9a55-2a3c0f1e9d11';
  const p = writeJsonl('embed.jsonl', [
    ...Array.from({ length: E }, (_, i) => embedLine(i)),
    { custom_id: uuid, method: 'POST', url: '/v1/embeddings',
      body: { model: 'text-embedding-3-small', input: ['the uuid item'] } },
  ]);
  const f = await a.files.create({ file: fs.createReadStream(p), purpose: 'batch' });
  const created = await a.batches.create({
    input_file_id: f.id, endpoint: '/v1/embeddings', completion_window: '24h',
    vector_collection: 'catalogue',
  });
  assert.equal(created.vector_collection, 'catalogue');
  const x = await waitFor(a, created.id, ended);
  assert.equal(x.status, 'completed');
  assert.deepEqual(x.request_counts, { total: E + 1, completed: E + 1, failed: 0 });
  assert.equal((await qa.count('catalogue', { exact: true })).count, E + 1);
  const out = await lines(a, x.output_file_id);
  const byId = new Map(out.map((l) => [l.custom_id, l]));
  const pts = await qa.retrieve('catalogue', { ids: [1000, 1007, uuid], with_payload: true, with_vector: true });
  assert.equal(pts.length, 3);
  const norm = (v) => { const n = Math.hypot(...v); return v.map((c) => c / n); };
  for (const pt of pts) {
    const line = byId.get(pt.id === uuid ? uuid : `item-${pt.id - 1000}`);
    const want = norm(line.response.body.data[0].embedding);
    want.forEach((c, k) => assert.ok(Math.abs(c - pt.vector[k]) < 1e-5, `${pt.id}[${k}]`));
    if (pt.id !== uuid) assert.deepEqual(pt.payload, { sku: `sku-${pt.id - 1000}`, n: pt.id - 1000 });
  }
  // The vector found by its own embedding comes first.
  const hit = await qa.query('catalogue', { query: byId.get('item-7').response.body.data[0].embedding, limit: 1 });
  assert.equal(hit.points[0].id, 1007);
});

await check('vector_collection: lines that cannot name a point fail validation, another team\'s collection is refused at create, vectors that do not fit fail their lines', async () => {
  await assert.rejects(a.batches.create({
    input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h',
    vector_collection: 'catalogue',
  }), (e) => e.status === 400 && e.param === 'vector_collection');
  const bad = writeJsonl('embed-bad.jsonl', [
    embedLine(1),
    { ...embedLine(2), point_id: -4 },
    { custom_id: 'not-an-id', method: 'POST', url: '/v1/embeddings', body: { model: 'text-embedding-3-small', input: 'x' } },
    embedLine(3, { body: { model: 'text-embedding-3-small', input: ['two', 'inputs'] } }),
    embedLine(4, { payload: [1] }),
    embedLine(5, { body: { model: 'text-embedding-3-small', input: 'x', encoding_format: 'base64' } }),
  ]);
  const fbad = await a.files.create({ file: fs.createReadStream(bad), purpose: 'batch' });
  const v = await waitFor(a, (await a.batches.create({
    input_file_id: fbad.id, endpoint: '/v1/embeddings', completion_window: '24h', vector_collection: 'catalogue',
  })).id, ended);
  assert.equal(v.status, 'failed');
  assert.deepEqual(v.errors.data.map((e) => [e.line, e.param]),
    [[2, 'point_id'], [3, 'point_id'], [4, 'body.input'], [5, 'payload'], [6, 'body.encoding_format']]);
  // Team b's key: team a's collection is as absent as one that does not exist, asked at create.
  const p = writeJsonl('embed-b.jsonl', [embedLine(100), embedLine(101)]);
  const fb = await b.files.create({ file: fs.createReadStream(p), purpose: 'batch' });
  for (const name of ['catalogue', 'no-such-collection']) {
    await assert.rejects(b.batches.create({
      input_file_id: fb.id, endpoint: '/v1/embeddings', completion_window: '24h', vector_collection: name,
    }), (e) => e.status === 400 && e.param === 'vector_collection' && /not accessible/.test(e.message));
  }
  await assert.rejects(qb.count('catalogue', { exact: true }), (e) => e.status === 404);
  // A collection the vectors do not fit: each line fails with the vector index's own 400 (in the
  // error file), nothing is written, and the batch still completes.
  await qb.createCollection('narrow', { vectors: { size: 8, distance: 'Cosine' } });
  const y = await waitFor(b, (await b.batches.create({
    input_file_id: fb.id, endpoint: '/v1/embeddings', completion_window: '24h', vector_collection: 'narrow',
  })).id, ended);
  assert.equal(y.status, 'completed');
  assert.deepEqual(y.request_counts, { total: 2, completed: 0, failed: 2 });
  for (const e of await lines(b, y.error_file_id)) {
    assert.equal(e.response.status_code, 400);
    assert.match(JSON.stringify(e.response.body), /dim/i);
  }
  assert.equal((await qb.count('narrow', { exact: true })).count, 0);
  assert.equal((await qa.count('catalogue', { exact: true })).count, E + 1);
});

console.log(`${passed} checks passed`);
