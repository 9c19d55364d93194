// openai_sdk.test.mjs -- drives `lockstep serve` with the official `openai`
// npm SDK, as users' clients do: whole and streaming chat and completions,
// usage, seeds, max_tokens, and every error status arriving as the SDK's own
// error class. tests/sdk/run.sh starts the servers and runs this file with
// `node --test`; it passes them in these variables:
//   LOCKSTEP_SDK_KEY      the API key of every server
//   LOCKSTEP_SDK_MODEL    the name of the one model each server serves
//   LOCKSTEP_SDK_MAIN     base URL (.../v1) of the main server (--max-body LOCKSTEP_SDK_MAX_BODY)
//   LOCKSTEP_SDK_LIMITED  base URL of a server with --max-concurrent 1 --enable-faults
//   LOCKSTEP_SDK_FAULTS   base URL of a server with --enable-faults (its runner is broken on purpose)
//   LOCKSTEP_SDK_MAX_BODY the main server's --max-body
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { env } from './env.mjs';
import OpenAI from 'openai';
import { zodResponseFormat, zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';


const KEY = env('LOCKSTEP_SDK_KEY');
const MODEL = env('LOCKSTEP_SDK_MODEL');
const MAX_BODY = Number(env('LOCKSTEP_SDK_MAX_BODY'));
// maxRetries 0: the SDK would otherwise retry 429 and 5xx itself, hiding the
// status this test checks and making it slow.
const client = (baseURL, apiKey = KEY) =>
  new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30_000 });
const main = client(env('LOCKSTEP_SDK_MAIN'));
const limited = client(env('LOCKSTEP_SDK_LIMITED'));
const faulty = client(env('LOCKSTEP_SDK_FAULTS'));

const CHAT = [
  { role: 'system', content: 'You are a terse assistant.' },
  { role: 'user', content: 'Say something about the sea.' },
];
const PROMPT = 'In the beginning';

// POST /debug/fault on a server started with --enable-faults (not an OpenAI
// endpoint, so plain fetch).
async function fault(baseURL, body) {
  const url = new URL('../debug/fault', baseURL.endsWith('/') ? baseURL : `${baseURL}/`);
  const response = await fetch(url, {
    method: 'POST',
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL, ...body }),
  });
  assert.equal(response.status, 200, `fault ${JSON.stringify(body)}: ${await response.text()}`);
}

// Reads a whole stream: the text, the finish reasons and the usage chunks.
async function drain(stream, textOf) {
  const result = { text: '', finish: [], usage: [], chunks: 0, contentChunks: 0 };
  for await (const chunk of stream) {
    result.chunks++;
    if (chunk.usage) result.usage.push(chunk.usage);
    for (const choice of chunk.choices) {
      const text = textOf(choice);
      if (text) {
        result.text += text;
        result.contentChunks++;
      }
      if (choice.finish_reason) result.finish.push(choice.finish_reason);
    }
  }
  return result;
}
const chatText = (choice) => choice.delta?.content ?? '';
const completionText = (choice) => choice.text ?? '';

function checkUsage(usage, maxTokens) {
  assert.ok(Number.isInteger(usage.prompt_tokens) && usage.prompt_tokens > 0, 'prompt_tokens');
  assert.ok(Number.isInteger(usage.completion_tokens) && usage.completion_tokens >= 0);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.ok(usage.completion_tokens <= maxTokens, `${usage.completion_tokens} > ${maxTokens}`);
}

// max_tokens is honoured: "length" means exactly max_tokens were generated; the
// model may also end early with its end-of-sequence token ("stop"), so fewer
// is allowed then.
function checkFinish(finish, usage, maxTokens) {
  assert.ok(['length', 'stop'].includes(finish), `finish_reason ${finish}`);
  if (finish === 'length') assert.equal(usage.completion_tokens, maxTokens);
  else assert.ok(usage.completion_tokens <= maxTokens);
}

// Asserts that promise rejects with exactly this SDK error class and status.
async function rejectsWith(promise, ErrorClass, status, check = () => {}) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof ErrorClass, `expected ${ErrorClass.name}, got ${err?.constructor?.name}: ${err?.message}`);
    assert.equal(err.status, status);
    check(err);
    return true;
  });
}

describe('models', () => {
  test('models.list names the served model', async () => {
    const ids = [];
    for await (const model of main.models.list()) ids.push(model.id);
    assert.deepEqual(ids, [MODEL]);
  });
});

describe('chat.completions', () => {
  test('whole: an assistant message, usage and max_tokens', async () => {
    const r = await main.chat.completions.create({ model: MODEL, messages: CHAT, max_tokens: 12, seed: 5 });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.model, MODEL);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    checkUsage(r.usage, 12);
    checkFinish(r.choices[0].finish_reason, r.usage, 12);
  });

  test('streaming gives the same text as whole, with a final usage chunk', async () => {
    const params = { model: MODEL, messages: CHAT, max_tokens: 16, seed: 11, temperature: 1 };
    const whole = await main.chat.completions.create(params);
    const stream = await main.chat.completions.create({
      ...params, stream: true, stream_options: { include_usage: true },
    });
    const s = await drain(stream, chatText);
    // the same seed gives the same tokens whether streamed or not
    assert.equal(s.text, whole.choices[0].message.content);
    assert.deepEqual(s.finish, [whole.choices[0].finish_reason]);
    assert.equal(s.usage.length, 1, 'exactly one usage chunk');
    assert.deepEqual(s.usage[0], whole.usage);
    checkUsage(s.usage[0], 16);
    assert.ok(s.contentChunks <= s.usage[0].completion_tokens);
  });

  test('n: 2 gives two choices, each sampled with its own seed', async () => {
    const params = { model: MODEL, messages: CHAT, max_tokens: 8, seed: 9, temperature: 1 };
    const r = await main.chat.completions.create({ ...params, n: 2 });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
    for (const [i, choice] of r.choices.entries()) {
      assert.equal(choice.message.role, 'assistant');
      // choice i samples with seed + i: what a request of one choice with that seed gives
      const one = await main.chat.completions.create({ ...params, seed: params.seed + i });
      assert.equal(choice.message.content, one.choices[0].message.content);
    }
    checkUsage(r.usage, 16);
  });

  test('streaming without include_usage has no usage chunk', async () => {
    const stream = await main.chat.completions.create({ model: MODEL, messages: CHAT, max_tokens: 4, stream: true });
    const s = await drain(stream, chatText);
    assert.equal(s.usage.length, 0);
    assert.equal(s.finish.length, 1);
  });
});

describe('completions', () => {
  test('whole: text, usage and max_tokens', async () => {
    const r = await main.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 10, seed: 3 });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.model, MODEL);
    assert.equal(typeof r.choices[0].text, 'string');
    checkUsage(r.usage, 10);
    checkFinish(r.choices[0].finish_reason, r.usage, 10);
  });

  test('streaming gives the same text as whole, with a final usage chunk', async () => {
    const params = { model: MODEL, prompt: PROMPT, max_tokens: 16, seed: 21, temperature: 1 };
    const whole = await main.completions.create(params);
    const stream = await main.completions.create({
      ...params, stream: true, stream_options: { include_usage: true },
    });
    const s = await drain(stream, completionText);
    assert.equal(s.text, whole.choices[0].text);
    assert.deepEqual(s.finish, [whole.choices[0].finish_reason]);
    assert.equal(s.usage.length, 1, 'exactly one usage chunk');
    assert.deepEqual(s.usage[0], whole.usage);
  });

  test('max_tokens 1 generates at most one token', async () => {
    const r = await main.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 1 });
    checkUsage(r.usage, 1);
    checkFinish(r.choices[0].finish_reason, r.usage, 1);
  });

  test('several prompts, n each: choice p * n + i is prompt p alone with seed + i', async () => {
    const prompts = [PROMPT, 'And the LORD said', 'In the beginning God'];
    const params = { model: MODEL, max_tokens: 6, seed: 17, temperature: 1, n: 2 };
    const r = await main.completions.create({ ...params, prompt: prompts });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3, 4, 5]);
    let promptTokens = 0;
    for (const [p, prompt] of prompts.entries()) {
      const alone = await main.completions.create({ ...params, prompt });
      promptTokens += alone.usage.prompt_tokens;
      for (let i = 0; i < params.n; i++)
        assert.equal(r.choices[p * params.n + i].text, alone.choices[i].text, `prompt ${p}, choice ${i}`);
    }
    // each prompt counts once, however many choices continue it
    assert.equal(r.usage.prompt_tokens, promptTokens);
    checkUsage(r.usage, 6 * prompts.length * params.n);
    const ids = await main.completions.create({ ...params, prompt: [[1, 2, 3], [4, 5]], n: 1 });
    assert.deepEqual(ids.choices.map((c) => c.index), [0, 1]);
    assert.equal(ids.usage.prompt_tokens, 5);
  });

  test('several prompts streamed: every choice\'s chunks join to the whole answer\'s text', async () => {
    const params = { model: MODEL, max_tokens: 8, seed: 23, temperature: 1, n: 2,
      prompt: [PROMPT, 'And God said'] };
    const whole = await main.completions.create(params);
    const stream = await main.completions.create({ ...params, stream: true });
    const texts = ['', '', '', ''];
    for await (const chunk of stream)
      for (const choice of chunk.choices) texts[choice.index] += choice.text ?? '';
    assert.deepEqual(texts, whole.choices.map((c) => c.text));
  });

  test('several prompts of two kinds, or too many choices, are a 400 naming the field', async () => {
    await rejectsWith(main.completions.create({ model: MODEL, prompt: ['a', [1]] }),
      OpenAI.BadRequestError, 400, (err) => assert.match(err.message, /prompt\[1\] must be a string, as prompt\[0\] is/));
    await rejectsWith(main.completions.create({ model: MODEL, prompt: Array(9).fill('a'), n: 8 }),
      OpenAI.BadRequestError, 400, (err) => assert.match(err.message, /9 prompts with n 8 make 72 choices/));
  });
});

describe('seeds', () => {
  const sample = async (extra) =>
    (await main.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 16, ...extra })).choices[0].text;

  test('the same seed at temperature 1 gives the same text twice', async () => {
    const a = await sample({ seed: 42, temperature: 1 });
    const b = await sample({ seed: 42, temperature: 1 });
    assert.equal(a, b);
  });

  test('the same seed gives the same chat text twice', async () => {
    const params = { model: MODEL, messages: CHAT, max_tokens: 16, seed: 7, temperature: 1 };
    const a = await main.chat.completions.create(params);
    const b = await main.chat.completions.create(params);
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  });

  test('temperature 0 is deterministic, whatever the seed', async () => {
    const a = await sample({ temperature: 0, seed: 1 });
    const b = await sample({ temperature: 0, seed: 2 });
    const c = await sample({ temperature: 0 });
    assert.equal(a, b);
    assert.equal(a, c);
  });

  test('different seeds do not all give the same text', async () => {
    // 4 seeds x 16 tokens at temperature 1: all equal would mean the seed is ignored
    const texts = new Set();
    for (const seed of [1, 2, 3, 4]) texts.add(await sample({ seed, temperature: 1 }));
    assert.ok(texts.size > 1, 'four seeds gave one text');
  });
});

describe('errors arrive as the SDK error classes', () => {
  test('400 BadRequestError: temperature 5', async () => {
    await rejectsWith(
      main.chat.completions.create({ model: MODEL, messages: CHAT, temperature: 5 }),
      OpenAI.BadRequestError, 400, (err) => assert.equal(err.param, 'temperature'));
    await rejectsWith(
      main.completions.create({ model: MODEL, prompt: PROMPT, temperature: 5, stream: true }),
      OpenAI.BadRequestError, 400, (err) => assert.equal(err.param, 'temperature'));
  });

  test('400 BadRequestError: empty messages, max_tokens 0', async () => {
    await rejectsWith(main.chat.completions.create({ model: MODEL, messages: [] }),
      OpenAI.BadRequestError, 400, (err) => assert.equal(err.param, 'messages'));
    await rejectsWith(main.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 0 }),
      OpenAI.BadRequestError, 400, (err) => assert.equal(err.param, 'max_tokens'));
  });

  test('401 AuthenticationError: a wrong API key', async () => {
    const wrong = client(env('LOCKSTEP_SDK_MAIN'), 'not-the-key');
    await rejectsWith(wrong.chat.completions.create({ model: MODEL, messages: CHAT, max_tokens: 1 }),
      OpenAI.AuthenticationError, 401, (err) => assert.equal(err.code, 'invalid_api_key'));
    await rejectsWith(wrong.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 1, stream: true }),
      OpenAI.AuthenticationError, 401);
    await rejectsWith(wrong.models.list(), OpenAI.AuthenticationError, 401);
  });

  test('404 NotFoundError: an unknown model', async () => {
    await rejectsWith(main.chat.completions.create({ model: 'no-such-model', messages: CHAT, max_tokens: 1 }),
      OpenAI.NotFoundError, 404, (err) => {
        assert.equal(err.code, 'model_not_found');
        assert.equal(err.param, 'model');
      });
    await rejectsWith(main.completions.create({ model: 'no-such-model', prompt: PROMPT, stream: true }),
      OpenAI.NotFoundError, 404);
  });

  test('413 APIError: a body larger than --max-body', async () => {
    // The SDK has no class of its own for 413: it is the base APIError.
    const prompt = 'x'.repeat(2 * MAX_BODY);
    await rejectsWith(main.completions.create({ model: MODEL, prompt, max_tokens: 1 }),
      OpenAI.APIError, 413, (err) => {
        assert.ok(!(err instanceof OpenAI.BadRequestError) && !(err instanceof OpenAI.APIConnectionError));
        assert.equal(err.type, 'invalid_request_error');
      });
  });

  test('429 RateLimitError: a second request while --max-concurrent 1 is in use', async () => {
    // Slow the runner down (100 ms a step) so that the held stream is surely
    // still running when the second request arrives, however fast the machine.
    await fault(env('LOCKSTEP_SDK_LIMITED'), { kind: 'delay', delay_ms: 100, steps: 100000 });
    const held = await limited.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 200, stream: true });
    const chunks = held[Symbol.asyncIterator]();
    assert.equal((await chunks.next()).done, false); // admitted and generating
    await rejectsWith(limited.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 1 }),
      OpenAI.RateLimitError, 429, (err) => assert.equal(err.type, 'rate_limit_error'));
    await rejectsWith(limited.chat.completions.create({ model: MODEL, messages: CHAT, max_tokens: 1, stream: true }),
      OpenAI.RateLimitError, 429);
    // The client leaves: its slot must come free (no zombie request). Poll
    // with a deadline: the gateway notices the closed connection at its next write.
    held.controller.abort();
    const deadline = Date.now() + 15_000;
    for (;;) {
      try {
        const r = await limited.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 1 });
        checkUsage(r.usage, 1);
        break;
      } catch (err) {
        if (!(err instanceof OpenAI.RateLimitError) || Date.now() > deadline) throw err;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  });

  test('an error inside a stream that has started throws APIError', async () => {
    // The runner is slowed down, then killed mid-stream with its next 5 starts
    // refused: the gateway gives up on the model (5 failed starts in a row) and
    // fails the request inside the stream, which has already sent a 200 and
    // tokens. The SDK turns such an event into an APIError without a status.
    const base = env('LOCKSTEP_SDK_FAULTS');
    await fault(base, { kind: 'delay', delay_ms: 100, steps: 100000 });
    const stream = await faulty.chat.completions.create({ model: MODEL, messages: CHAT, max_tokens: 200, stream: true });
    let chunks = 0;
    await assert.rejects(
      (async () => {
        for await (const chunk of stream) {
          assert.ok(chunk.choices);
          if (++chunks === 1) {
            await fault(base, { kind: 'refuse', count: 5 });
            await fault(base, { kind: 'kill' });
          }
        }
      })(),
      (err) => {
        assert.ok(err instanceof OpenAI.APIError, `got ${err?.constructor?.name}: ${err?.message}`);
        assert.ok(!(err instanceof OpenAI.APIConnectionError), 'a connection error, not an error event');
        assert.equal(err.status, undefined);
        assert.equal(err.type, 'server_error');
        assert.match(err.message, /unavailable/);
        return true;
      });
    assert.ok(chunks >= 1 && chunks < 200, `${chunks} chunks before the error`);
  });
});

// What OpenAI's API refuses, lockstep refuses the same way; one served
// model needs no name.
describe('API strictness (issue 21)', () => {
  test('an unknown request field is a 400 naming it', async () => {
    await rejectsWith(
      main.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 1, lockstep_no_such_field: 1 }),
      OpenAI.BadRequestError, 400, (err) => assert.equal(err.param, 'lockstep_no_such_field'));
  });

  test('model may be omitted when one model is served', async () => {
    const r = await main.completions.create({ prompt: PROMPT, max_tokens: 2 });
    assert.equal(r.model, MODEL);
    checkUsage(r.usage, 2);
  });

  test('stream_options without stream is a 400', async () => {
    await rejectsWith(
      main.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 1, stream_options: { include_usage: true } }),
      OpenAI.BadRequestError, 400, (err) => assert.equal(err.param, 'stream_options'));
  });
});

// Tool calling (issue 23): a call the SDK reads as OpenAI's. (The random
// model's context is 2048 so that the tools' description fits.)
const WEATHER_TOOLS = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 12 } },
      required: ['city'],
      additionalProperties: false,
    },
  },
}];

// Assembles streamed delta.tool_calls as OpenAI's clients do: by index, the
// first delta of a call brings its id, type and name, the later ones append
// to its arguments. Returns the calls and the finish reasons.
function toolCallAssembler() {
  const calls = [];
  const finish = [];
  return {
    calls,
    finish,
    add(choice) {
      for (const delta of choice.delta?.tool_calls ?? []) {
        assert.ok(Number.isInteger(delta.index) && delta.index >= 0, `index ${delta.index}`);
        assert.ok(delta.index <= calls.length, `call ${delta.index} before call ${calls.length}`);
        if (delta.index === calls.length) {
          // a new call: its first delta names it
          assert.match(delta.id ?? '', /^call_/);
          assert.equal(delta.type, 'function');
          assert.equal(typeof delta.function?.name, 'string');
          calls.push({ id: delta.id, type: delta.type, name: delta.function.name, arguments: '' });
        } else {
          assert.equal(delta.id, undefined, 'only the first delta of a call has its id');
        }
        calls[delta.index].arguments += delta.function?.arguments ?? '';
      }
      if (choice.finish_reason) finish.push(choice.finish_reason);
    },
  };
}

// The calls of a whole answer as the assembler gives them (ids apart).
const callsOf = (message) =>
  message.tool_calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments }));
const withoutIds = (calls) => calls.map((c) => ({ name: c.name, arguments: c.arguments }));

function checkWeatherCalls(calls) {
  assert.ok(calls.length >= 1, 'no tool call');
  for (const call of calls) {
    assert.equal(call.name, 'get_weather');
    const args = JSON.parse(call.arguments);
    assert.deepEqual(Object.keys(args), ['city']);
    assert.equal(typeof args.city, 'string');
    assert.ok([...args.city].length <= 12, `city ${JSON.stringify(args.city)}`);
  }
}

// Reads a server-sent event stream the way a client without the SDK does:
// lines from the body's bytes, "data: " lines each one JSON chunk, up to
// "data: [DONE]". Returns the chunks, and whether [DONE] came.
async function readSse(response) {
  const decoder = new TextDecoder();
  const chunks = [];
  let pending = '';
  let done = false;
  const line = (text) => {
    if (text === '' || text.startsWith(':')) return; // event end, comment
    assert.ok(text.startsWith('data: '), `SSE line ${JSON.stringify(text)}`);
    assert.ok(!done, 'data after [DONE]');
    const data = text.slice('data: '.length);
    if (data === '[DONE]') done = true;
    else chunks.push(JSON.parse(data));
  };
  for await (const bytes of response.body) {
    pending += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = pending.indexOf('\n')) >= 0) {
      line(pending.slice(0, end).replace(/\r$/, ''));
      pending = pending.slice(end + 1);
    }
  }
  pending += decoder.decode();
  if (pending) line(pending);
  return { chunks, done };
}

describe('tools', () => {
  test('tool_choice "required" answers with a call whose arguments are JSON', async () => {
    const tools = WEATHER_TOOLS;
    const r = await main.chat.completions.create({
      model: MODEL, messages: CHAT, tools, tool_choice: 'required', max_tokens: 200, seed: 3,
    });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    const call = choice.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.match(call.id, /^call_/);
    assert.equal(call.function.name, 'get_weather');
    const args = JSON.parse(call.function.arguments);
    assert.equal(typeof args.city, 'string');
  });

  test('streamed through the SDK, tool_choice "required" gives the whole answer\'s calls', async () => {
    const params = {
      model: MODEL, messages: CHAT, tools: WEATHER_TOOLS, tool_choice: 'required',
      parallel_tool_calls: false, max_tokens: 200, seed: 13, temperature: 1,
    };
    const whole = await main.chat.completions.create(params);
    assert.equal(whole.choices[0].finish_reason, 'tool_calls');
    const stream = await main.chat.completions.create({ ...params, stream: true });
    const calls = toolCallAssembler();
    let content = '';
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      for (const choice of chunk.choices) {
        assert.equal(choice.index, 0);
        content += choice.delta?.content ?? '';
        calls.add(choice);
      }
    }
    assert.deepEqual(calls.finish, ['tool_calls']);
    assert.equal(content, whole.choices[0].message.content ?? '');
    checkWeatherCalls(calls.calls);
    assert.equal(calls.calls.length, 1, 'parallel_tool_calls false: one call');
    assert.deepEqual(withoutIds(calls.calls), callsOf(whole.choices[0].message));
  });

  test('streamed arguments grow as the model writes them, in several chunks', async () => {
    const params = {
      model: MODEL, messages: CHAT, tools: WEATHER_TOOLS, tool_choice: 'required',
      parallel_tool_calls: false, max_tokens: 200, seed: 13, temperature: 1, stream: true,
    };
    const pieces = [];
    for await (const chunk of await main.chat.completions.create(params))
      for (const call of chunk.choices[0]?.delta?.tool_calls ?? [])
        if (call.function?.arguments) pieces.push(call.function.arguments);
    assert.ok(pieces.length >= 3, `arguments came in ${pieces.length} chunks: ${JSON.stringify(pieces)}`);
    JSON.parse(pieces.join(''));
  });

  test('max_tokens cutting a run of calls returns the calls written whole, finish_reason "length"', async () => {
    const params = { model: MODEL, messages: CHAT, tools: WEATHER_TOOLS, tool_choice: 'required', temperature: 1 };
    let whole = null, seed = 0;
    for (seed = 1; seed <= 20 && !whole; seed++) {
      const r = await main.chat.completions.create({ ...params, seed, max_tokens: 600 });
      if (r.choices[0].finish_reason === 'tool_calls' && r.choices[0].message.tool_calls.length >= 2) whole = r;
    }
    assert.ok(whole, 'no seed of 1..20 made two or more calls');
    const calls = callsOf(whole.choices[0].message);
    const n = whole.usage.completion_tokens;
    // one token short (the calls' closing text), and half way (inside a call)
    for (const maxTokens of [n - 1, Math.ceil(n / 2)]) {
      const cut = { ...params, seed: seed - 1, max_tokens: maxTokens };
      const r = await main.chat.completions.create(cut);
      assert.equal(r.choices[0].finish_reason, 'length');
      const got = r.choices[0].message.tool_calls ? callsOf(r.choices[0].message) : [];
      assert.deepEqual(got, calls.slice(0, got.length), `max_tokens ${maxTokens}: not the first calls`);
      if (maxTokens === n - 1) assert.ok(got.length >= 1, 'one token short: no call');
      if (maxTokens < n - 1) assert.ok(got.length < calls.length, `half way: ${got.length} calls`);
      // streamed: the same whole calls first
      const streamed = toolCallAssembler();
      for await (const chunk of await main.chat.completions.create({ ...cut, stream: true }))
        for (const choice of chunk.choices) streamed.add(choice);
      assert.deepEqual(streamed.finish, ['length']);
      assert.deepEqual(withoutIds(streamed.calls.slice(0, got.length)), got);
    }
  });

  test('a plain fetch client reads the streamed calls from the SSE lines itself', async () => {
    const body = {
      model: MODEL, messages: CHAT, tools: WEATHER_TOOLS, tool_choice: 'required',
      max_tokens: 200, seed: 17, temperature: 1,
    };
    const post = (extra) => fetch(`${env('LOCKSTEP_SDK_MAIN')}/chat/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ ...body, ...extra }),
    });
    const wholeResponse = await post({});
    assert.equal(wholeResponse.status, 200);
    const whole = await wholeResponse.json();
    assert.equal(whole.choices[0].finish_reason, 'tool_calls');

    const response = await post({ stream: true });
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^text\/event-stream/);
    const { chunks, done } = await readSse(response);
    assert.ok(done, 'the stream ends with data: [DONE]');
    const calls = toolCallAssembler();
    for (const chunk of chunks) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      assert.equal(chunk.id, chunks[0].id);
      for (const choice of chunk.choices) calls.add(choice);
    }
    assert.deepEqual(calls.finish, ['tool_calls']);
    checkWeatherCalls(calls.calls);
    assert.deepEqual(withoutIds(calls.calls), callsOf(whole.choices[0].message));
    assert.equal(new Set(calls.calls.map((c) => c.id)).size, calls.calls.length, 'ids differ');
  });
});

// Structured outputs (issue 23) through the SDK's own helper: a zod schema
// sent as response_format json_schema (strict), the answer parsed and
// validated by the SDK. zod writes int() with minimum/maximum of
// +-(2^53-1), which the grammar meets with integers of up to 15 digits.
describe('structured outputs', () => {
  test('chat.completions.parse with zodResponseFormat gives a parsed object valid under the schema', async () => {
    const Person = z.object({
      name: z.string().max(12),
      age: z.number().int(),
      count: z.number().int().nonnegative(),
      kind: z.enum(['human', 'robot']),
      tags: z.array(z.string().max(8)).max(3),
    });
    const params = {
      model: MODEL, messages: CHAT, response_format: zodResponseFormat(Person, 'person'),
      max_tokens: 300, seed: 19, temperature: 1,
    };
    const r = await main.chat.completions.parse(params);
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'stop');
    const parsed = choice.message.parsed;
    assert.ok(parsed && typeof parsed === 'object', `parsed ${JSON.stringify(parsed)}`);
    assert.deepEqual(Person.parse(parsed), parsed);
    assert.deepEqual(JSON.parse(choice.message.content), parsed);
    assert.deepEqual(Object.keys(parsed), ['name', 'age', 'count', 'kind', 'tags']); // schema order
    assert.ok(Number.isInteger(parsed.age) && Number.isInteger(parsed.count) && parsed.count >= 0);
    // the same seed gives the same object again
    const again = await main.chat.completions.parse(params);
    assert.deepEqual(again.choices[0].message.parsed, parsed);
  });
});

describe('responses (the Responses API)', () => {
  const INPUT = [
    { role: 'user', content: [{ type: 'input_text', text: 'Say something about the sea.' }] },
  ];
  const RESPONSE_TOOLS = WEATHER_TOOLS.map((t) => ({ type: 'function', ...t.function }));

  test('responses.create: output_text, usage, and the chat answer to the same messages', async () => {
    const params = { model: MODEL, temperature: 1, seed: 31 };
    const r = await main.responses.create({
      ...params, max_output_tokens: 12, instructions: CHAT[0].content, input: INPUT, store: false,
    });
    assert.equal(r.object, 'response');
    assert.match(r.id, /^resp_/);
    assert.ok(['completed', 'incomplete'].includes(r.status));
    assert.equal(r.output[0].type, 'message');
    assert.equal(r.output[0].role, 'assistant');
    assert.equal(typeof r.output_text, 'string');
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
    assert.ok(r.usage.output_tokens <= 12);
    if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
    // the same conversation through chat gives the same text
    const chat = await main.chat.completions.create({ ...params, max_tokens: 12, messages: CHAT });
    assert.equal(r.output_text, chat.choices[0].message.content);
    assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
  });

  test('responses.stream: the typed events in order, and the final response equals a whole one', async () => {
    const params = { model: MODEL, input: 'In the beginning', max_output_tokens: 10, seed: 37, temperature: 1 };
    const whole = await main.responses.create(params);
    const stream = main.responses.stream(params);
    const types = [];
    let text = '';
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
    }
    const final = await stream.finalResponse();
    assert.equal(types[0], 'response.created');
    assert.equal(types[1], 'response.in_progress');
    assert.ok(types.includes('response.output_item.added') && types.includes('response.content_part.added'));
    assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)));
    assert.equal(text, whole.output_text);
    assert.equal(final.output_text, whole.output_text);
    // the prefix cache may differ between the two; the counts may not
    assert.equal(final.usage.input_tokens, whole.usage.input_tokens);
    assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
  });

  test('function tools: a required call comes back as a function_call item, then its output is sent back', async () => {
    const params = {
      model: MODEL, tools: RESPONSE_TOOLS, tool_choice: 'required', parallel_tool_calls: false,
      max_output_tokens: 400, seed: 3,
    };
    const r = await main.responses.create({ ...params, input: INPUT });
    assert.equal(r.status, 'completed');
    const calls = r.output.filter((item) => item.type === 'function_call');
    assert.equal(calls.length, 1, 'parallel_tool_calls false: one call');
    checkWeatherCalls(calls);
    assert.match(calls[0].call_id, /^call_/);
    // streamed: the same calls, their arguments in function_call_arguments events
    const streamed = main.responses.stream({ ...params, input: INPUT });
    let args = '', pieces = 0;
    for await (const event of streamed)
      if (event.type === 'response.function_call_arguments.delta') {
        args += event.delta;
        pieces++;
      }
    assert.ok(pieces >= 3, `the arguments came in ${pieces} pieces, not as they were written`);
    const final = await streamed.finalResponse();
    assert.deepEqual(withoutIds(final.output.filter((i) => i.type === 'function_call')), withoutIds(calls));
    assert.equal(args, calls.map((c) => c.arguments).join(''));
    // the call and its output go back as input items
    const next = await main.responses.create({
      model: MODEL, tools: RESPONSE_TOOLS, max_output_tokens: 8, seed: 5,
      input: [...INPUT, calls[0], { type: 'function_call_output', call_id: calls[0].call_id, output: '{"sky":"clear"}' }],
    });
    assert.ok(['completed', 'incomplete'].includes(next.status));
    assert.ok(next.usage.input_tokens > r.usage.input_tokens);
  });

  test('responses.parse with zodTextFormat gives a parsed object valid under the schema', async () => {
    const Person = z.object({ name: z.string().max(12), age: z.number().int(), kind: z.enum(['human', 'robot']) });
    const r = await main.responses.parse({
      model: MODEL, input: INPUT, text: { format: zodTextFormat(Person, 'person') },
      max_output_tokens: 200, seed: 19, temperature: 1,
    });
    assert.equal(r.status, 'completed');
    assert.deepEqual(Person.parse(r.output_parsed), r.output_parsed);
    assert.deepEqual(JSON.parse(r.output_text), r.output_parsed);
  });

  test('what lockstep does not keep or have is a 400 naming the field', async () => {
    await rejectsWith(main.responses.create({ model: MODEL, input: 'x', store: true }),
      OpenAI.BadRequestError, 400, (err) => assert.match(err.message, /store true is not supported/));
    await rejectsWith(main.responses.create({ model: MODEL, input: 'x', previous_response_id: 'resp_1' }),
      OpenAI.BadRequestError, 400, (err) => assert.match(err.message, /previous_response_id is not supported/));
    await rejectsWith(main.responses.create({ model: MODEL, input: 'x', tools: [{ type: 'web_search' }] }),
      OpenAI.BadRequestError, 400, (err) => assert.match(err.message, /tools\[0\] is a web_search tool/));
    await rejectsWith(main.responses.create({ model: MODEL, input: 'x', max_output_tokens: 0 }),
      OpenAI.BadRequestError, 400, (err) => assert.equal(err.param, 'max_output_tokens'));
  });
});

describe('embeddings', () => {
  const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  const TEXTS = ['In the beginning', 'the sea was calm', 'and the ship sailed on'];

  test('embeddings.create: a unit vector per input, in order, each its own request\'s', async () => {
    // the SDK asks for base64 unless told otherwise, and decodes it to floats
    const one = await main.embeddings.create({ model: MODEL, input: TEXTS[1] });
    assert.equal(one.object, 'list');
    assert.equal(one.model, MODEL);
    assert.equal(one.data.length, 1);
    assert.equal(one.data[0].object, 'embedding');
    assert.equal(one.data[0].index, 0);
    assert.equal(one.data[0].embedding.length, 64);
    assert.ok(Math.abs(norm(one.data[0].embedding) - 1) < 1e-5);
    assert.ok(one.usage.prompt_tokens > 0);
    assert.equal(one.usage.total_tokens, one.usage.prompt_tokens);
    const all = await main.embeddings.create({ model: MODEL, input: TEXTS });
    assert.deepEqual(all.data.map((d) => d.index), [0, 1, 2]);
    assert.deepEqual(all.data[1].embedding, one.data[0].embedding);
    assert.notDeepEqual(all.data[0].embedding, all.data[1].embedding);
  });

  test('encoding_format float gives the numbers base64 carries; base64 is their float32 bytes', async () => {
    const floats = await main.embeddings.create({ model: MODEL, input: TEXTS[0], encoding_format: 'float' });
    const decoded = await main.embeddings.create({ model: MODEL, input: TEXTS[0] });
    // JSON's numbers have the 9 digits that give each float32 back
    const asFloat32 = floats.data[0].embedding.map(Math.fround);
    assert.deepEqual(decoded.data[0].embedding, asFloat32);
    const raw = await main.embeddings.create({ model: MODEL, input: TEXTS[0], encoding_format: 'base64' });
    assert.equal(typeof raw.data[0].embedding, 'string');
    const bytes = Buffer.from(raw.data[0].embedding, 'base64');
    const values = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4));
    assert.deepEqual(values, asFloat32);
  });

  test('dimensions cuts the vector and normalizes it again; token ids embed as their text does', async () => {
    const cut = await main.embeddings.create({ model: MODEL, input: TEXTS[2], dimensions: 16 });
    assert.equal(cut.data[0].embedding.length, 16);
    assert.ok(Math.abs(norm(cut.data[0].embedding) - 1) < 1e-5);
    const tokens = await fetch(new URL('../tokenize', `${env('LOCKSTEP_SDK_MAIN')}/`), {
      method: 'POST',
      headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ content: TEXTS[2], add_special: true }),
    }).then((r) => r.json());
    const byText = await main.embeddings.create({ model: MODEL, input: TEXTS[2] });
    const byIds = await main.embeddings.create({ model: MODEL, input: tokens.tokens });
    assert.deepEqual(byIds.data[0].embedding, byText.data[0].embedding);
  });

  test('a model served without a pooling, or dimensions past the model\'s, is a 400', async () => {
    await rejectsWith(limited.embeddings.create({ model: MODEL, input: 'x' }),
      OpenAI.BadRequestError, 400, (err) => assert.match(err.message, /--pooling mean, last or cls/));
    await rejectsWith(main.embeddings.create({ model: MODEL, input: 'x', dimensions: 65 }),
      OpenAI.BadRequestError, 400, (err) => assert.match(err.message, /have 64 values/));
    await rejectsWith(main.embeddings.create({ model: MODEL, input: '' }),
      OpenAI.BadRequestError, 400, (err) => assert.equal(err.param, 'input'));
  });
});
