// The official openai SDK against registry routes: `node registry_sdk_test.mjs route MODEL WANT`
// checks that MODEL is served by route WANT (x-infera-route); `split N` sends N users' requests to
// the split model and checks every answer names an arm; `capture` prints the request id of one
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
  const arms = {};
  for (let i = 0; i < Number(a); i++) {
    const h = await chat('fraud', { 'x-infera-user': `user-${i}` });
    arms[h.get('x-infera-arm')] = (arms[h.get('x-infera-arm')] ?? 0) + 1;
  }
  assert.ok(arms.ctl > 0 && arms.new > 0, JSON.stringify(arms));
  console.log(`ok - split ${JSON.stringify(arms)}`);
} else if (mode === 'capture') {
  const h = await chat('fraud@champion');
  process.stdout.write(h.get('x-request-id'));
} else {
  throw new Error(`unknown mode ${mode}`);
}
