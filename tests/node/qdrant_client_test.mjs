// The official Qdrant JS client (npm `@qdrant/js-client-rest` 1.19.0) against Infera's vector
// index: create a collection, payload index, upsert (ints, a UUID, an id above 2^53), query with
// and without filters, queryBatch, retrieve, scroll, count, payload ops, deletes, errors, and the
// data surviving a restart (checked by the calling script); and a hybrid collection (a named dense
// vector and an IDF sparse one) queried as LangChain's and LlamaIndex's Qdrant stores do: two
// prefetches fused by RRF. Exits non-zero on the first failure.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const require = createRequire(process.env.NODE_PATH + '/');
const { QdrantClient } = require('@qdrant/js-client-rest');
const url = process.env.INFERA_QDRANT_URL;
const phase = process.env.PHASE || 'write';
const client = new QdrantClient({ url, port: null, prefix: process.env.INFERA_QDRANT_PREFIX || undefined, checkCompatibility: true });
const name = 'js_client_test';

let passed = 0;
async function check(label, fn) {
  await fn();
  passed += 1;
  console.log(`ok - ${label}`);
}

const points = [
  { id: 1, vector: [0.05, 0.61, 0.76, 0.74], payload: { city: 'Berlin', n: 1 } },
  { id: 2, vector: [0.19, 0.81, 0.75, 0.11], payload: { city: 'London', n: 2 } },
  { id: 3, vector: [0.36, 0.55, 0.47, 0.94], payload: { city: 'Moscow', n: 3 } },
  { id: 4, vector: [0.18, 0.01, 0.85, 0.8], payload: { city: 'New York', n: 4 } },
  { id: 5, vector: [0.24, 0.18, 0.22, 0.44], payload: { city: 'Beijing', n: 5 } },
  { id: 6, vector: [0.35, 0.08, 0.11, 0.44], payload: { city: 'Mumbai', n: 6 } },
  { id: '8f6b3a1e-6c1d-4f0a-9a57-2f1b4c6d7e8f', vector: [0.1, 0.2, 0.3, 0.4], payload: { city: ['London', 'Paris'] } },
];

const hybrid = 'js_hybrid';
const hybridPoints = [
  { id: 1, vector: { dense: [1, 0, 0, 0], text: { indices: [1, 2], values: [1, 1] } }, payload: { doc: 'a' } },
  { id: 2, vector: { dense: [0.8, 0.2, 0, 0], text: { indices: [3], values: [2] } }, payload: { doc: 'b' } },
  { id: 3, vector: { dense: [0, 1, 0, 0], text: { indices: [5, 2], values: [0.5, 1] } }, payload: { doc: 'c' } },
  { id: 4, vector: { dense: [0.5, 0.5, 0.5, 0] }, payload: { doc: 'd' } },
  { id: 5, vector: { dense: [0, 0, 1, 0], text: { indices: [2], values: [3] } }, payload: { doc: 'e' } },
  { id: 6, vector: { dense: [0.6, 0, 0, 0.8], text: { indices: [1], values: [0.2] } }, payload: { doc: 'f' } },
];

// The fused answer equals RRF (k = 2: 1 / (rank + 2) from rank 0) over the two queries' own answers.
async function hybridQueryMatchesTheFusionOfItsParts() {
  const dense = { query: [0.9, 0.1, 0.3, 0], using: 'dense', limit: 4 };
  const sparse = { query: { indices: [1, 2], values: [1, 1] }, using: 'text', limit: 4 };
  const d = await client.query(hybrid, dense);
  const sp = await client.query(hybrid, sparse);
  assert.equal(d.points.length, 4);
  assert.deepEqual(sp.points.map((p) => p.id), [5, 1, 3, 6]);
  const want = new Map();
  for (const list of [d.points, sp.points]) {
    list.forEach((p, rank) => want.set(p.id, (want.get(p.id) || 0) + 1 / (rank + 2)));
  }
  const r = await client.query(hybrid, { prefetch: [dense, sparse], query: { fusion: 'rrf' }, limit: 3, with_payload: true });
  assert.equal(r.points.length, 3);
  const best = [...want.entries()].sort((a, b) => b[1] - a[1]).slice(0, 3);
  r.points.forEach((p, i) => {
    assert.ok(Math.abs(p.score - want.get(p.id)) < 1e-6, `${p.id}: ${p.score} vs ${want.get(p.id)}`);
    assert.ok(Math.abs(p.score - best[i][1]) < 1e-6, `rank ${i}`);
    assert.equal(typeof p.payload.doc, 'string');
  });
  const dbsf = await client.query(hybrid, { prefetch: [dense, sparse], query: { fusion: 'dbsf' }, limit: 10 });
  assert.equal(dbsf.points.length, new Set([...d.points, ...sp.points].map((p) => p.id)).size);
  await assert.rejects(client.query(hybrid, { query: { fusion: 'rrf' } }), (e) => {
    assert.equal(e.status, 400);
    assert.match(e.data.status.error, /cannot apply Fusion without prefetches/);
    return true;
  });
}

if (phase === 'write') {
  await check('version check and getCollections on an empty server', async () => {
    const info = await client.versionInfo();
    assert.equal(info.version, '1.19.0');
    assert.deepEqual(await client.getCollections(), { collections: [] });
  });
  await check('createCollection, collectionExists, a second create is a 409', async () => {
    assert.equal(await client.createCollection(name, { vectors: { size: 4, distance: 'Dot' } }), true);
    assert.deepEqual(await client.collectionExists(name), { exists: true });
    assert.deepEqual(await client.collectionExists('missing'), { exists: false });
    await assert.rejects(client.createCollection(name, { vectors: { size: 4, distance: 'Dot' } }), (e) => {
      assert.equal(e.status, 409);
      assert.match(e.data.status.error, /already exists/);
      return true;
    });
  });
  await check('createPayloadIndex without and with wait', async () => {
    const r = await client.createPayloadIndex(name, { field_name: 'city', field_schema: 'keyword' });
    assert.equal(r.status, 'acknowledged');
    assert.equal(typeof r.operation_id, 'number');
    const w = await client.createPayloadIndex(name, { field_name: 'n', field_schema: 'integer', wait: true });
    assert.equal(w.status, 'completed');
  });
  await check('upsert with wait, and an id above 2^53 keeps its precision', async () => {
    const r = await client.upsert(name, { wait: true, points });
    assert.equal(r.status, 'completed');
    // 2^53 + 1: the client sends BigInt ids as raw JSON numbers on Node >= 22 (JSON.rawJSON); on
    // older Node the same bytes go through fetch, and the answer must carry them back unrounded.
    const prefix = process.env.INFERA_QDRANT_PREFIX || '';
    const put = await fetch(`${url}${prefix}/collections/${name}/points?wait=true`, {
      method: 'PUT', headers: { 'content-type': 'application/json' },
      body: '{"points":[{"id":9007199254740993,"vector":[0.9,0.9,0.9,0.9],"payload":{"big":true}}]}',
    });
    assert.equal(put.status, 200);
    const got = await fetch(`${url}${prefix}/collections/${name}/points`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"ids":[9007199254740993]}',
    });
    assert.match(await got.text(), /"id":9007199254740993,/);
    const del = await fetch(`${url}${prefix}/collections/${name}/points/delete?wait=true`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"points":[9007199254740993]}',
    });
    assert.equal(del.status, 200);
    assert.equal((await client.count(name, {})).count, points.length);
  });
  await check('getCollection counts the points and shows the payload schema', async () => {
    const info = await client.getCollection(name);
    assert.equal(info.points_count, points.length);
    assert.equal(info.config.params.vectors.size, 4);
    assert.equal(info.payload_schema.city.data_type, 'keyword');
  });
  await check('retrieve and getPoint return the stored vector and payload', async () => {
    const p = await client.retrieve(name, { ids: [2], with_vector: true });
    assert.deepEqual(p[0].payload, { city: 'London', n: 2 });
    assert.deepEqual(p[0].vector, [0.19, 0.81, 0.75, 0.11]);
    await assert.rejects(client.api('points').getPoint({ collection_name: name, id: 99 }), (e) => e.status === 404);
  });
  await check('query nearest, ranked by dot product', async () => {
    const r = await client.query(name, { query: [0.2, 0.1, 0.9, 0.7], limit: 3, with_payload: true });
    assert.equal(r.points.length, 3);
    assert.deepEqual(r.points.map((p) => p.id), [4, 1, 3]);
    assert.ok(r.points[0].score >= r.points[1].score);
  });
  await check('query with a should filter on an indexed keyword (arrays match by element)', async () => {
    const r = await client.query(name, {
      query: { nearest: [0.2, 0.1, 0.9, 0.7] }, limit: 3,
      filter: { should: [{ key: 'city', match: { value: 'London' } }] },
    });
    assert.equal(r.points.length, 2);
    assert.deepEqual(new Set(r.points.map((p) => String(p.id))), new Set(['2', '8f6b3a1e-6c1d-4f0a-9a57-2f1b4c6d7e8f']));
  });
  await check('query with a range filter and a score threshold; queryBatch', async () => {
    const r = await client.query(name, {
      query: [0.2, 0.1, 0.9, 0.7], limit: 10, filter: { must: [{ key: 'n', range: { gte: 3 } }] }, score_threshold: 0.5,
    });
    for (const p of r.points) assert.ok(p.score > 0.5);
    assert.deepEqual(r.points.map((p) => p.id), [4, 3, 5]);  // 1.362, 1.208, 0.572 (6 scores 0.485)
    const b = await client.queryBatch(name, { searches: [{ query: [0.2, 0.1, 0.9, 0.7], limit: 1 }, { query: 1, limit: 2 }] });
    assert.equal(b.length, 2);
    assert.deepEqual(b[0].points.map((p) => p.id), [4]);
    assert.ok(!b[1].points.some((p) => p.id === 1), 'a query by id leaves that point out');
  });
  await check('scroll pages through ids in order; count with a filter', async () => {
    const page = await client.scroll(name, { limit: 4 });
    assert.deepEqual(page.points.map((p) => p.id), [1, 2, 3, 4]);
    assert.equal(page.next_page_offset, 5);
    const rest = await client.scroll(name, { limit: 4, offset: page.next_page_offset });
    assert.equal(rest.points.length, 3);
    assert.equal(rest.next_page_offset, null);
    assert.deepEqual(await client.count(name, { filter: { must: [{ key: 'city', match: { any: ['Berlin', 'Moscow'] } }] } }), { count: 2 });
  });
  await check('setPayload, deletePayload, overwritePayload', async () => {
    await client.setPayload(name, { payload: { tag: 'x' }, points: [1] });
    assert.deepEqual((await client.retrieve(name, { ids: [1] }))[0].payload, { city: 'Berlin', n: 1, tag: 'x' });
    await client.deletePayload(name, { keys: ['n'], points: [1] });
    assert.deepEqual((await client.retrieve(name, { ids: [1] }))[0].payload, { city: 'Berlin', tag: 'x' });
    await client.overwritePayload(name, { payload: { city: 'Bonn' }, points: [1] });
    assert.deepEqual((await client.retrieve(name, { ids: [1] }))[0].payload, { city: 'Bonn' });
    await assert.rejects(client.setPayload(name, { payload: { a: 1 }, points: [12345] }), (e) => e.status === 404);
  });
  await check('delete by filter; bad input is a 400 and changes nothing', async () => {
    const r = await client.delete(name, { wait: true, filter: { must: [{ key: 'city', match: { value: 'Mumbai' } }] } });
    assert.equal(r.status, 'completed');
    assert.equal((await client.count(name, {})).count, points.length - 1);
    await assert.rejects(client.upsert(name, { wait: true, points: [{ id: 50, vector: [1, 2, 3] }] }), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.data.status.error, 'Wrong input: Vector dimension error: expected dim: 4, got 3');
      return true;
    });
    await assert.rejects(client.query(name, { query: [1, 2, 3, 4], filter: { must: [{ key: 'city', bogus: 1 }] } }), (e) => e.status === 400);
    await assert.rejects(client.getCollection('missing'), (e) => {
      assert.equal(e.status, 404);
      assert.equal(e.data.status.error, 'Not found: Collection `missing` doesn\'t exist!');
      return true;
    });
    assert.equal((await client.count(name, {})).count, points.length - 1);
  });
  await check('deleteCollection of a missing collection is false', async () => {
    assert.equal(await client.deleteCollection('missing'), false);
  });
  await check('hybrid: named dense + IDF sparse vectors, created, upserted and read back by name', async () => {
    assert.equal(await client.createCollection(hybrid, {
      vectors: { dense: { size: 4, distance: 'Cosine' } }, sparse_vectors: { text: { modifier: 'idf' } },
    }), true);
    const info = await client.getCollection(hybrid);
    assert.deepEqual(info.config.params.vectors, { dense: { size: 4, distance: 'Cosine' } });
    assert.deepEqual(info.config.params.sparse_vectors, { text: { modifier: 'idf' } });
    const r = await client.upsert(hybrid, { wait: true, points: hybridPoints });
    assert.equal(r.status, 'completed');
    const p = await client.retrieve(hybrid, { ids: [3], with_vector: ['text'] });
    assert.deepEqual(p[0].vector, { text: { indices: [2, 5], values: [1, 0.5] } });
    await assert.rejects(client.upsert(hybrid, { wait: true, points: [{ id: 9, vector: { dense: [1, 0, 0, 0], text: { indices: [1, 2], values: [1] } } }] }), (e) => {
      assert.equal(e.status, 422);
      assert.match(e.data.status.error, /must be the same length as indices/);
      return true;
    });
    assert.equal((await client.count(hybrid, {})).count, hybridPoints.length);
  });
  await check('hybrid: prefetch dense + sparse, fused by RRF and DBSF, as the RAG frameworks send it', async () => {
    await hybridQueryMatchesTheFusionOfItsParts();
  });
  await check('queryGroups groups the ranking by a payload value; updateVectors replaces one named vector', async () => {
    const g = await client.queryGroups(hybrid, { query: [1, 0, 0, 0], using: 'dense', group_by: 'doc', group_size: 2, limit: 3 });
    assert.deepEqual(g.groups.map((x) => x.id), ['a', 'b', 'f']);
    assert.equal(g.groups[0].hits[0].id, 1);
    const u = await client.updateVectors(hybrid, { wait: true, points: [{ id: 4, vector: { text: { indices: [9], values: [1] } } }] });
    assert.equal(u.status, 'completed');
    const p = await client.retrieve(hybrid, { ids: [4], with_vector: true });
    assert.deepEqual(p[0].vector.text, { indices: [9], values: [1] });
    p[0].vector.dense.forEach((x, i) => assert.ok(Math.abs(x - [0.57735, 0.57735, 0.57735, 0][i]) < 1e-5, 'the dense vector is kept'));
    await client.deleteVectors(hybrid, { wait: true, points: [4], vector: ['text'] });
    assert.equal((await client.retrieve(hybrid, { ids: [4], with_vector: ['text'] }))[0].vector.text, undefined);
  });
} else {
  await check('after a restart: the collection, its points, index and payload edits are back', async () => {
    const info = await client.getCollection(name);
    assert.equal(info.points_count, points.length - 1);
    assert.equal(info.payload_schema.city.data_type, 'keyword');
    assert.deepEqual((await client.retrieve(name, { ids: [1] }))[0].payload, { city: 'Bonn' });
    const r = await client.query(name, { query: [0.2, 0.1, 0.9, 0.7], limit: 3 });
    assert.deepEqual(r.points.map((p) => p.id), [4, 1, 3]);
    assert.equal(await client.deleteCollection(name), true);
  });
  await check('after a restart: the hybrid collection answers the same fused query', async () => {
    await hybridQueryMatchesTheFusionOfItsParts();
    assert.equal(await client.deleteCollection(hybrid), true);
    assert.deepEqual(await client.getCollections(), { collections: [] });
  });
}
console.log(`${passed} passed, 0 failed`);
