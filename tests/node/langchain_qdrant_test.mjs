// LangChain's QdrantVectorStore (npm `@langchain/qdrant`) against Infera's vector index, as a
// retrieval app uses it: fromTexts (it creates the collection and upserts with UUID ids and a
// content/metadata payload), similarity search with scores and with a metadata filter, maximal
// marginal relevance search (Qdrant's `nearest` + `mmr` query), a retriever, and deletes. The
// embeddings are a deterministic bag of words (no model needed): documents sharing words with the
// query are nearer. The JS store has no sparse/hybrid mode (Python's has: its requests, prefetch +
// fusion, are what qdrant_client_test.mjs sends). Exits non-zero on the first failure.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const require = createRequire(process.env.NODE_PATH + '/');
const { QdrantVectorStore } = require('@langchain/qdrant');
const { Embeddings } = require('@langchain/core/embeddings');
const { QdrantClient } = require('@qdrant/js-client-rest');

const url = process.env.INFERA_QDRANT_URL;
let passed = 0;
async function check(label, fn) {
  await fn();
  passed += 1;
  console.log(`ok - ${label}`);
}

// 64 dimensions; each word adds 1 to the dimension its hash picks.
class BagOfWords extends Embeddings {
  constructor() { super({}); }
  vector(text) {
    const v = new Array(64).fill(0);
    for (const word of text.toLowerCase().split(/\W+/).filter(Boolean)) {
      let h = 2166136261;
      for (const c of word) h = Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0;
      v[h % 64] += 1;
    }
    return v;
  }
  async embedDocuments(texts) { return texts.map((t) => this.vector(t)); }
  async embedQuery(text) { return this.vector(text); }
}

const texts = [
  'a red apple on the table',
  'a red apple in the basket',
  'a green pear from the orchard',
  'the river flows to the sea',
  'a bicycle with a red frame',
];
const metadatas = [
  { kind: 'fruit', n: 1 }, { kind: 'fruit', n: 2 }, { kind: 'fruit', n: 3 }, { kind: 'place', n: 4 }, { kind: 'thing', n: 5 },
];
const client = new QdrantClient({ url, port: null, checkCompatibility: true });
let store;

await check('fromTexts creates the collection and adds the documents', async () => {
  store = await QdrantVectorStore.fromTexts(texts, metadatas, new BagOfWords(), { client, collectionName: 'lc_docs' });
  const info = await client.getCollection('lc_docs');
  assert.equal(info.points_count, 5);
  assert.equal(info.config.params.vectors.size, 64);
  assert.equal(info.config.params.vectors.distance, 'Cosine');
});
await check('similaritySearchWithScore ranks the documents sharing the query words first', async () => {
  const r = await store.similaritySearchWithScore('red apple', 3);
  assert.equal(r.length, 3);
  assert.deepEqual(r.slice(0, 2).map(([d]) => d.metadata.n).sort(), [1, 2]);
  assert.ok(r[0][1] >= r[1][1] && r[1][1] >= r[2][1]);
  assert.match(r[0][0].pageContent, /red apple/);
  assert.equal(typeof r[0][0].id, 'string');
});
await check('a metadata filter in Qdrant syntax', async () => {
  const r = await store.similaritySearch('red', 5, { must: [{ key: 'metadata.kind', match: { value: 'thing' } }] });
  assert.deepEqual(r.map((d) => d.metadata.n), [5]);
});
await check('maxMarginalRelevanceSearch (nearest + mmr) trades the near-duplicate for diversity', async () => {
  const plain = await store.similaritySearch('red apple table', 2);
  assert.deepEqual(plain.map((d) => d.metadata.n), [1, 2], 'plain search returns both apples');
  // @langchain/qdrant 1.0.3 sends its `lambda` as Qdrant's `diversity` (1 = most diverse).
  const mmr = await store.maxMarginalRelevanceSearch('red apple table', { k: 2, fetchK: 5, lambda: 0.9 });
  assert.equal(mmr.length, 2);
  assert.equal(mmr[0].metadata.n, 1, 'the most relevant first');
  assert.notEqual(mmr[1].metadata.n, 2, 'the near-duplicate of the first is passed over');
});
await check('a retriever answers through the store', async () => {
  const docs = await store.asRetriever(1).invoke('green pear orchard');
  assert.equal(docs.length, 1);
  assert.equal(docs[0].metadata.n, 3);
});
await check('delete by ids and by filter', async () => {
  const ids = (await store.similaritySearch('river sea', 1)).map((d) => d.id);
  await store.delete({ ids });
  assert.equal((await client.count('lc_docs', {})).count, 4);
  await store.delete({ filter: { must: [{ key: 'metadata.kind', match: { value: 'fruit' } }] } });
  assert.equal((await client.count('lc_docs', {})).count, 1);
});
console.log(`${passed} passed, 0 failed`);
