// anthropic_sdk.test.mjs -- drives `lockstep serve`'s Messages API (POST
// /v1/messages, /v1/messages/count_tokens) with Anthropic's official npm SDK,
// as Claude Code and agent tools point it at a local server: whole and
// streamed messages, stop sequences, tools with tool_choice any and a named
// tool, a tool_result sent back, token counts, the key as x-api-key, and
// errors in Anthropic's shape arriving as the SDK's error classes.
// tests/sdk/run.sh starts the server and runs this file with `node --test`
// (LOCKSTEP_SDK_KEY, LOCKSTEP_SDK_MODEL, LOCKSTEP_SDK_MAIN as for the openai
// SDK's test).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { env } from './env.mjs';
import Anthropic from '@anthropic-ai/sdk';


const KEY = env('LOCKSTEP_SDK_KEY');
const MODEL = env('LOCKSTEP_SDK_MODEL');
// the SDK appends /v1/messages to the base URL
const BASE = env('LOCKSTEP_SDK_MAIN').replace(/\/v1$/, '');
const client = (apiKey = KEY) => new Anthropic({ baseURL: BASE, apiKey, maxRetries: 0, timeout: 30_000 });
const main = client();

const SYSTEM = 'You are a terse assistant.';
const MESSAGES = [{ role: 'user', content: 'Say something about the sea.' }];
const TOOLS = [{
  name: 'get_weather',
  description: 'The weather in a city',
  input_schema: {
    type: 'object',
    properties: { city: { type: 'string', maxLength: 12 } },
    required: ['city'],
    additionalProperties: false,
  },
}];

function checkUsage(usage) {
  assert.ok(Number.isInteger(usage.input_tokens) && usage.input_tokens >= 0);
  assert.ok(Number.isInteger(usage.output_tokens) && usage.output_tokens >= 0);
  assert.ok(Number.isInteger(usage.cache_read_input_tokens));
}

const textOf = (message) => message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

async function rejectsWith(promise, ErrorClass, status, check) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof ErrorClass, `expected ${ErrorClass.name}, got ${err?.constructor?.name}: ${err?.message}`);
    assert.equal(err.status, status);
    assert.equal(err.error?.type, 'error');
    check(err);
    return true;
  });
}

describe('messages (Anthropic\'s Messages API)', () => {
  test('messages.create: a text block, the stop reason and usage', async () => {
    const m = await main.messages.create({
      model: MODEL, system: SYSTEM, messages: MESSAGES, max_tokens: 12, temperature: 1,
    });
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.match(m.id, /^msg_/);
    assert.equal(m.content[0].type, 'text');
    assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
    checkUsage(m.usage);
    assert.ok(m.usage.output_tokens <= 12);
    if (m.stop_reason === 'max_tokens') assert.equal(m.usage.output_tokens, 12);
  });

  test('messages.stream: the events in order, and the final message equals a whole one', async () => {
    // seed is lockstep's extension (as in its chat API): the same seed, the same text
    const params = { model: MODEL, system: SYSTEM, messages: MESSAGES, max_tokens: 10, temperature: 1, seed: 41 };
    const whole = await main.messages.create(params);
    const stream = main.messages.stream(params);
    const types = [];
    let text = '';
    stream.on('text', (delta) => { text += delta; });
    for await (const event of stream) types.push(event.type);
    const final = await stream.finalMessage();
    assert.equal(types[0], 'message_start');
    assert.equal(types.at(-1), 'message_stop');
    assert.equal(types.at(-2), 'message_delta');
    assert.ok(types.includes('content_block_start') && types.includes('content_block_stop'));
    assert.equal(text, textOf(whole));
    assert.equal(textOf(final), textOf(whole));
    assert.equal(final.stop_reason, whole.stop_reason);
    assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
  });

  test('stop_sequences: the one that ended it is reported, and never sent', async () => {
    const params = { model: MODEL, messages: MESSAGES, max_tokens: 64, temperature: 1, seed: 43 };
    const free = textOf(await main.messages.create(params));
    const letter = [...free].find((ch) => /[a-z]/.test(ch));
    assert.ok(letter, `no letter in ${JSON.stringify(free)}`);
    const m = await main.messages.create({ ...params, stop_sequences: [letter] });
    assert.equal(m.stop_reason, 'stop_sequence');
    assert.equal(m.stop_sequence, letter);
    assert.equal(textOf(m), free.slice(0, free.indexOf(letter)));
  });

  test('tool_choice any: a tool_use block whose input matches the schema; its result goes back', async () => {
    const params = {
      model: MODEL, messages: MESSAGES, tools: TOOLS, max_tokens: 400, temperature: 1, seed: 3,
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
    };
    const m = await main.messages.create(params);
    assert.equal(m.stop_reason, 'tool_use');
    const uses = m.content.filter((b) => b.type === 'tool_use');
    assert.equal(uses.length, 1);
    assert.equal(uses[0].name, 'get_weather');
    assert.deepEqual(Object.keys(uses[0].input), ['city']);
    assert.ok([...uses[0].input.city].length <= 12);
    // streamed: the same call, its input as input_json_delta
    const stream = main.messages.stream(params);
    let json = '', pieces = 0;
    stream.on('inputJson', (delta) => { json += delta; pieces++; });
    const final = await stream.finalMessage();
    assert.deepEqual(final.content.filter((b) => b.type === 'tool_use').map((b) => b.input), [uses[0].input]);
    assert.deepEqual(JSON.parse(json), uses[0].input);
    assert.ok(pieces >= 3, `the input came in ${pieces} pieces, not as it was written`);
    // the result goes back as a tool_result block
    const next = await main.messages.create({
      model: MODEL, tools: TOOLS, max_tokens: 8, seed: 5,
      messages: [...MESSAGES, { role: 'assistant', content: m.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0].id, content: 'clear sky' }] }],
    });
    assert.ok(next.usage.input_tokens + next.usage.cache_read_input_tokens >
      m.usage.input_tokens + m.usage.cache_read_input_tokens);
  });

  test('tool_choice naming a tool calls that tool', async () => {
    const tools = [...TOOLS, { name: 'get_time', input_schema: { type: 'object', properties: { zone: { type: 'string', maxLength: 8 } }, required: ['zone'], additionalProperties: false } }];
    const m = await main.messages.create({
      model: MODEL, messages: MESSAGES, tools, max_tokens: 400, seed: 7,
      tool_choice: { type: 'tool', name: 'get_time', disable_parallel_tool_use: true },
    });
    assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m.content));
    const uses = m.content.filter((b) => b.type === 'tool_use');
    assert.equal(uses.length, 1);
    assert.equal(uses[0].name, 'get_time');
    assert.equal(typeof uses[0].input.zone, 'string');
  });

  test('countTokens counts the prompt a request makes', async () => {
    const counted = await main.messages.countTokens({ model: MODEL, system: SYSTEM, messages: MESSAGES });
    const m = await main.messages.create({ model: MODEL, system: SYSTEM, messages: MESSAGES, max_tokens: 1 });
    assert.equal(counted.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
  });

  test('errors in Anthropic\'s shape: a missing max_tokens, a server tool, a wrong key', async () => {
    await rejectsWith(main.messages.create({ model: MODEL, messages: MESSAGES }),
      Anthropic.BadRequestError, 400, (err) => {
        assert.equal(err.error.error.type, 'invalid_request_error');
        assert.match(err.error.error.message, /max_tokens: Field required/);
      });
    await rejectsWith(main.messages.create({
      model: MODEL, messages: MESSAGES, max_tokens: 4, tools: [{ type: 'web_search_20250305', name: 'web_search' }],
    }), Anthropic.BadRequestError, 400, (err) => assert.match(err.error.error.message, /web_search_20250305 tool/));
    await rejectsWith(client('wrong-key').messages.create({ model: MODEL, messages: MESSAGES, max_tokens: 1 }),
      Anthropic.AuthenticationError, 401, (err) => assert.equal(err.error.error.type, 'authentication_error'));
    await rejectsWith(main.messages.create({ model: 'no-such-model', messages: MESSAGES, max_tokens: 1 }),
      Anthropic.NotFoundError, 404, (err) => assert.equal(err.error.error.type, 'not_found_error'));
  });
});
