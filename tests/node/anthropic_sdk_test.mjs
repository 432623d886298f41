// Anthropic's official SDK (@anthropic-ai/sdk) against the gateway, whose backend (the emulator)
// speaks only OpenAI chat completions: messages.create plain and with a system prompt, a stream
// read with messages.stream (text events and the final message), a tool round trip (tool_use,
// then a tool_result answered in text), a streamed forced tool call, countTokens, and errors the
// SDK reads as Anthropic's (401 authentication_error for a wrong x-api-key, 404 for an unknown
// model, 400 naming an unsupported field, 429 rate_limit_error past a key's RPM). Prints the
// input and output tokens the SDK was told, for the script to compare with the gateway's usage.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const require = createRequire(process.env.NODE_PATH + '/');
const Anthropic = require('@anthropic-ai/sdk').default ?? require('@anthropic-ai/sdk');
const baseURL = process.env.INFERA_URL;
const client = new Anthropic({ apiKey: process.env.INFERA_KEY, baseURL, maxRetries: 0 });
const model = 'llama-3-8b';

let input = 0;
let output = 0;
const bill = (u) => {
  input += u.input_tokens + (u.cache_read_input_tokens ?? 0);
  output += u.output_tokens;
};
let passed = 0;
async function check(name, fn) {
  await fn();
  passed += 1;
  console.log(`ok - ${name}`);
}

await check('messages.create: text, stop reason, usage', async () => {
  const m = await client.messages.create({
    model, max_tokens: 8, system: 'Be brief.', messages: [{ role: 'user', content: 'Say hello' }],
  });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, model);
  assert.ok(m.id.startsWith('msg_'));
  assert.equal(m.content.length, 1);
  assert.equal(m.content[0].type, 'text');
  assert.ok(m.content[0].text.length > 0);
  assert.equal(m.stop_reason, 'max_tokens');  // the emulator answers exactly max_tokens tokens
  assert.equal(m.usage.output_tokens, 8);
  assert.ok(m.usage.input_tokens > 0);
  bill(m.usage);
});

await check('messages.stream: text events add up to the final message', async () => {
  const stream = client.messages.stream({
    model, max_tokens: 6, messages: [{ role: 'user', content: 'Count to six' }],
  });
  let text = '';
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.equal(final.content.length, 1);
  assert.equal(final.content[0].text, text);
  assert.ok(text.length > 0);
  assert.equal(final.stop_reason, 'max_tokens');
  assert.equal(final.usage.output_tokens, 6);
  assert.ok(final.usage.input_tokens > 0);
  bill(final.usage);
});

const tools = [{
  name: 'get_weather',
  description: 'The weather now in a city',
  input_schema: {
    type: 'object',
    properties: { city: { type: 'string' }, days: { type: 'integer' } },
    required: ['city'],
  },
}];
const question = { role: 'user', content: 'What is the weather in Paris?' };

await check('tool use: a tool_use block, then the tool_result answered in text', async () => {
  const first = await client.messages.create({ model, max_tokens: 64, tools, messages: [question] });
  assert.equal(first.stop_reason, 'tool_use');
  const use = first.content.find((b) => b.type === 'tool_use');
  assert.ok(use, JSON.stringify(first.content));
  assert.equal(use.name, 'get_weather');
  assert.deepEqual(use.input, { city: 'emulated', days: 1 });
  bill(first.usage);
  const second = await client.messages.create({
    model, max_tokens: 5, tools,
    messages: [question, { role: 'assistant', content: first.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '18C, sunny' }] }],
  });
  assert.equal(second.content[0].type, 'text');
  assert.equal(second.usage.output_tokens, 5);
  bill(second.usage);
});

await check('a streamed forced tool call: input_json_delta events build the input', async () => {
  const stream = client.messages.stream({
    model, max_tokens: 64, tools, tool_choice: { type: 'tool', name: 'get_weather' },
    messages: [question],
  });
  let json = '';
  stream.on('inputJson', (partial) => { json += partial; });
  const final = await stream.finalMessage();
  const use = final.content.find((b) => b.type === 'tool_use');
  assert.deepEqual(use.input, { city: 'emulated', days: 1 });
  assert.deepEqual(JSON.parse(json), use.input);
  assert.equal(final.stop_reason, 'tool_use');
  assert.ok(final.usage.output_tokens > 0);
  bill(final.usage);
});

await check('countTokens', async () => {
  const c = await client.messages.countTokens({ model, messages: [{ role: 'user', content: 'Hello there' }] });
  assert.ok(Number.isInteger(c.input_tokens) && c.input_tokens > 0, JSON.stringify(c));
});

// The SDK's error classes read Anthropic's error body.
async function refused(promise, status, type, text) {
  await assert.rejects(promise, (e) => {
    assert.equal(e.status, status, String(e));
    assert.equal(e.error?.type, 'error', JSON.stringify(e.error));
    assert.equal(e.error?.error?.type, type, JSON.stringify(e.error));
    if (text) assert.ok(e.error.error.message.includes(text), e.error.error.message);
    return true;
  });
}

await check('errors in Anthropic\'s shape: 401, 404, 400, 429', async () => {
  const wrong = new Anthropic({ apiKey: 'sk-inf-wrong', baseURL, maxRetries: 0 });
  const hello = { max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] };
  await refused(wrong.messages.create({ model, ...hello }), 401, 'authentication_error');
  await refused(client.messages.create({ model: 'no-such-model', ...hello }), 404, 'not_found_error');
  await refused(client.messages.create({ model, ...hello, thinking: { type: 'enabled', budget_tokens: 1024 } }),
    400, 'invalid_request_error', 'thinking');
  const limited = new Anthropic({ apiKey: process.env.INFERA_LIMITED_KEY, baseURL, maxRetries: 0 });
  const ok = await limited.messages.create({ model, ...hello });
  bill(ok.usage);
  await refused(limited.messages.create({ model, ...hello }), 429, 'rate_limit_error');
});

console.log(`${passed} checks passed`);
console.log(`usage ${input} ${output}`);
