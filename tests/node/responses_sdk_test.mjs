// The official openai SDK's Responses API (client.responses) against the gateway, whose backend
// (the emulator) speaks only chat completions: a plain create (output_text, usage), one cut by
// max_output_tokens (incomplete), a stream read event by event to response.completed, a function
// tool round trip (function_call, then function_call_output answered in text), and a refused
// previous_response_id. Prints the tokens the SDK was told, for the script to compare with the
// gateway's usage.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const require = createRequire(process.env.NODE_PATH + '/');
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: process.env.INFERA_BASE_URL, apiKey: process.env.INFERA_KEY, maxRetries: 0 });
const model = 'llama-3-8b';

let input = 0;
let output = 0;
const bill = (u) => { input += u.input_tokens; output += u.output_tokens; };
let passed = 0;
async function check(name, fn) {
  await fn();
  passed += 1;
  console.log(`ok - ${name}`);
}

await check('responses.create: output_text, status, usage', async () => {
  const r = await client.responses.create({ model, instructions: 'Be brief.', input: 'Say hello' });
  assert.equal(r.object, 'response');
  assert.ok(r.id.startsWith('resp_'));
  assert.equal(r.status, 'completed');
  assert.equal(r.model, model);
  assert.ok(r.output_text.length > 0, JSON.stringify(r.output));
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.usage.output_tokens, 12);  // the emulator's default_max_tokens
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  bill(r.usage);
});

await check('max_output_tokens: an incomplete response', async () => {
  const r = await client.responses.create({ model, input: 'Tell me a story', max_output_tokens: 5 });
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.usage.output_tokens, 5);
  bill(r.usage);
});

await check('a stream, event by event, to response.completed', async () => {
  const stream = await client.responses.create({ model, input: 'Count', max_output_tokens: 6, stream: true });
  const types = [];
  let text = '';
  let final;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
  }
  assert.equal(types[0], 'response.created');
  assert.ok(types.includes('response.output_text.delta'));
  assert.ok(final, types.join(','));
  assert.equal(final.output[0].content[0].text, text);
  assert.equal(final.usage.output_tokens, 6);
  bill(final.usage);
});

await check('a function tool round trip', async () => {
  const tools = [{
    type: 'function', name: 'get_weather', description: 'The weather now', strict: false,
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  }];
  const first = await client.responses.create({ model, input: 'Weather in Paris?', tools });
  const call = first.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(first.output));
  assert.equal(call.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.arguments), { city: 'emulated' });
  bill(first.usage);
  const second = await client.responses.create({
    model, tools, max_output_tokens: 4,
    input: [{ role: 'user', content: 'Weather in Paris?' }, ...first.output,
      { type: 'function_call_output', call_id: call.call_id, output: '18C, sunny' }],
  });
  assert.ok(second.output_text.length > 0);
  assert.equal(second.usage.output_tokens, 4);
  bill(second.usage);
});

await check('previous_response_id is refused: responses are not stored', async () => {
  await assert.rejects(
    client.responses.create({ model, input: 'again', previous_response_id: 'resp_x' }),
    (e) => e.status === 400 && /previous_response_id/.test(e.message));
});

console.log(`${passed} checks passed`);
console.log(`usage ${input} ${output}`);
