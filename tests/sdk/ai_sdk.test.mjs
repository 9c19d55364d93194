// ai_sdk.test.mjs -- drives `lockstep serve` with the Vercel AI SDK (`ai`
// with `@ai-sdk/openai`), whose default provider `openai(model)` speaks the
// Responses API: generateText, streamText, generateObject, tool calls and a
// run of steps whose tool results go back as function_call_output items.
// tests/sdk/run.sh starts the server and runs this file with `node --test`
// (LOCKSTEP_SDK_KEY, LOCKSTEP_SDK_MODEL, LOCKSTEP_SDK_MAIN as for the openai
// SDK's test).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { env } from './env.mjs';
import { generateObject, generateText, stepCountIs, streamText, tool } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { z } from 'zod';


const MAIN = env('LOCKSTEP_SDK_MAIN');
const provider = createOpenAI({ baseURL: MAIN, apiKey: env('LOCKSTEP_SDK_KEY') });
const model = provider(env('LOCKSTEP_SDK_MODEL'));
const PROMPT = 'In the beginning';
const weather = tool({
  description: 'The weather in a city',
  inputSchema: z.object({ city: z.string().max(12) }),
  execute: async ({ city }) => ({ city, sky: 'clear' }),
});

describe('the AI SDK (Responses API)', () => {
  test('generateText at temperature 0 gives the text POST /v1/responses gives', async () => {
    const r = await generateText({ model, prompt: PROMPT, maxOutputTokens: 10, temperature: 0 });
    assert.ok(['stop', 'length'].includes(r.finishReason));
    assert.ok(r.usage.outputTokens <= 10 && r.usage.inputTokens > 0);
    const raw = await fetch(`${MAIN}/responses`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${env('LOCKSTEP_SDK_KEY')}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ input: PROMPT, max_output_tokens: 10, temperature: 0 }),
    }).then((res) => res.json());
    assert.equal(r.text, raw.output[0].content[0].text);
  });

  test('streamText gives the same text as generateText', async () => {
    const params = { model, prompt: PROMPT, maxOutputTokens: 12, temperature: 0 };
    const whole = await generateText(params);
    const s = streamText(params);
    let text = '';
    for await (const delta of s.textStream) text += delta;
    assert.equal(text, whole.text);
    assert.equal(await s.finishReason, whole.finishReason);
  });

  test('generateObject gives an object valid under its schema', async () => {
    const Person = z.object({ name: z.string().max(12), age: z.number().int(), kind: z.enum(['human', 'robot']) });
    const r = await generateObject({ model, schema: Person, prompt: 'A person', maxOutputTokens: 200, temperature: 0 });
    assert.deepEqual(Person.parse(r.object), r.object);
  });

  test('tools: a required call, then its result goes back and the next step answers', async () => {
    const r = await generateText({
      // temperature 0: the Responses API has no seed, and the run must be the same every time
      model, prompt: 'The weather?', maxOutputTokens: 300, temperature: 0, tools: { get_weather: weather },
      providerOptions: { openai: { parallelToolCalls: false } },
      stopWhen: stepCountIs(2),
      prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? 'required' : 'none' }),
    });
    assert.equal(r.steps.length, 2, JSON.stringify(r.steps.map((s) => [s.finishReason, s.content])).slice(0, 600));
    assert.equal(r.steps[0].finishReason, 'tool-calls');
    assert.equal(r.steps[0].toolCalls.length, 1, 'parallelToolCalls false: one call');
    for (const call of r.steps[0].toolCalls) {
      assert.equal(call.toolName, 'get_weather');
      assert.ok([...call.input.city].length <= 12);
    }
    assert.deepEqual(r.steps[0].toolResults.map((t) => t.output.sky), r.steps[0].toolCalls.map(() => 'clear'));
    assert.ok(['stop', 'length'].includes(r.steps[1].finishReason));
    // the second step's prompt holds the call and its result
    const second = r.steps[1].request.body;
    const items = (typeof second === 'string' ? JSON.parse(second) : second).input;
    assert.ok(items.some((item) => item.type === 'function_call'));
    assert.ok(items.some((item) => item.type === 'function_call_output' && item.output.includes('clear')));
    assert.equal(typeof r.text, 'string');
  });
});
