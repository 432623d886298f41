// The official openai SDK against a gateway with governance on: a key made with `infera keys
// create` works, rate-limit headers arrive, a stream without stream_options gets no usage chunk,
// exceeding the key's RPM gives the SDK's RateLimitError (429, retry-after), a wrong key gives
// AuthenticationError. Exits non-zero on the first failed check.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const require = createRequire(process.env.NODE_PATH + '/');
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: process.env.INFERA_BASE_URL, apiKey: process.env.INFERA_KEY, maxRetries: 0 });

let passed = 0;
async function check(name, fn) {
  await fn();
  passed += 1;
  console.log(`ok - ${name}`);
}

await check('chat with a governed key, rate-limit headers', async () => {
  const { data, response } = await client.chat.completions
    .create({ model: 'llama-3-8b', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] })
    .withResponse();
  assert.equal(data.usage.completion_tokens, 4);
  assert.equal(response.headers.get('x-ratelimit-limit-requests'), '3');
  assert.equal(response.headers.get('x-ratelimit-remaining-requests'), '2');
  assert.ok(response.headers.get('x-ratelimit-reset-tokens'));
});

await check('stream without stream_options: no usage chunk reaches the client', async () => {
  const stream = await client.chat.completions.create({
    model: 'llama-3-8b', stream: true, max_tokens: 5, messages: [{ role: 'user', content: 'count' }],
  });
  let chunks = 0;
  for await (const chunk of stream) {
    assert.equal(chunk.usage, undefined);
    assert.ok(chunk.choices.length > 0);
    chunks += 1;
  }
  assert.ok(chunks >= 5);
});

await check('over the RPM: RateLimitError with retry-after', async () => {
  await client.chat.completions.create({ model: 'llama-3-8b', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] });
  await assert.rejects(
    client.chat.completions.create({ model: 'llama-3-8b', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }),
    (err) => {
      assert.ok(err instanceof OpenAI.RateLimitError, `got ${err.constructor.name}`);
      assert.equal(err.status, 429);
      assert.equal(err.code, 'rate_limit_exceeded');
      assert.ok(Number(err.headers['retry-after']) >= 1);
      assert.equal(err.headers['x-ratelimit-remaining-requests'], '0');
      return true;
    });
});

await check('wrong key: AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL: process.env.INFERA_BASE_URL, apiKey: 'sk-inf-000000000000-nope', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (err) => {
    assert.ok(err instanceof OpenAI.AuthenticationError, `got ${err.constructor.name}`);
    assert.equal(err.code, 'invalid_api_key');
    return true;
  });
});

console.log(`${passed} checks passed`);
