// The official openai SDK against registry routes: `node registry_sdk_test.mjs route MODEL WANT`
// checks that MODEL is served by route WANT (x-infera-route); `split N` sends N users' requests
// (two each) to the split model and checks every answer names an arm, the same one per user; `capture` prints the request id of one
// answer (for the flag and review that follow).
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const require = createRequire(process.env.NODE_PATH + '/');
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: process.env.INFERA_BASE_URL, apiKey: process.env.INFERA_KEY, maxRetries: 0 });

const [mode, a, b] = process.argv.slice(2);
async function chat(model, headers = {}) {
  const { data, response } = await client.chat.completions
    .create({ model, max_tokens: 4, messages: [{ role: 'user', content: 'is this fraud?' }] }, { headers })
    .withResponse();
  assert.equal(data.object, 'chat.completion');
  assert.equal(data.choices[0].message.content, 'The quick brown fox');
  return response.headers;
}

if (mode === 'route') {
  const h = await chat(a);
  assert.equal(h.get('x-infera-route'), b, `${a} served by ${h.get('x-infera-route')}`);
  console.log(`ok - ${a} -> ${b}`);
} else if (mode === 'split') {
  // Every answer names an arm; each user (sticky by user) gets the same arm on a second request;
  // a 50/50 split of N users puts at least a fifth of them in each arm (below that has a
  // probability under 1e-4 for N = 40). Prints the per-arm counts for the CLI's figures.
  const n = Number(a);
  const arms = { ctl: 0, new: 0 };
  for (let i = 0; i < n; i++) {
    const first = (await chat('fraud', { 'x-infera-user': `user-${i}` })).get('x-infera-arm');
    assert.ok(first === 'ctl' || first === 'new', `answer ${i} names arm ${first}`);
    const again = (await chat('fraud', { 'x-infera-user': `user-${i}` })).get('x-infera-arm');
    assert.equal(again, first, `user-${i} is sticky`);
    arms[first] += 2;
  }
  assert.equal(arms.ctl + arms.new, 2 * n);
  assert.ok(arms.ctl >= (2 * n) / 5 && arms.new >= (2 * n) / 5, JSON.stringify(arms));
  console.log(`ok - split ${JSON.stringify(arms)}`);
  console.log(`arms ctl=${arms.ctl} new=${arms.new}`);
} else if (mode === 'capture') {
  const h = await chat('fraud@champion');
  process.stdout.write(h.get('x-request-id'));
} else {
  throw new Error(`unknown mode ${mode}`);
}
