// The official openai SDK (npm `openai`) through the Infera gateway: chat, streaming with usage,
// embeddings and models.list. Exits non-zero on the first failed check.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const require = createRequire(process.env.NODE_PATH + '/');
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: process.env.INFERA_BASE_URL, apiKey: 'sk-test', maxRetries: 0 });

let passed = 0;
async function check(name, fn) {
  await fn();
  passed += 1;
  console.log(`ok - ${name}`);
}

await check('chat.completions.create', async () => {
  const r = await client.chat.completions.create({
    model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'Say hi' }],
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.content, 'The quick brown fox jumps');
  assert.equal(r.usage.completion_tokens, 5);
});

await check('chat streaming with include_usage', async () => {
  const stream = await client.chat.completions.create({
    model: 'llama-3-8b', stream: true, stream_options: { include_usage: true }, max_tokens: 6,
    messages: [{ role: 'user', content: 'count' }],
  });
  let text = '';
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.choices.length > 0) text += chunk.choices[0].delta.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, 'The quick brown fox jumps over');
  assert.ok(chunks >= 7, `chunks=${chunks}`);
  assert.equal(usage.completion_tokens, 6);
});

await check('embeddings.create', async () => {
  const r = await client.embeddings.create({ model: 'text-embedding-3-small', input: ['a', 'b c'] });
  assert.equal(r.data.length, 2);
  assert.ok(r.data[0].embedding.length > 0);
  assert.equal(r.usage.prompt_tokens, 3);
});

await check('models.list', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids.sort(), ['gpt-4o-mini', 'llama-3-8b', 'text-embedding-3-small']);
});

await check('unknown model raises NotFoundError', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 404 && e.code === 'model_not_found');
});

console.log(`${passed} passed, 0 failed`);
