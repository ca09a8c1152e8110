// The scripted model API checked with the providers' own SDKs as clients: if
// they parse our streams and errors, the real CLIs built on the same wire
// formats have what they expect (the e2e tests run the CLIs themselves).
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createScriptedModelServer, type ScriptedModelServer, stepIndex } from './server';

let server: ScriptedModelServer;
beforeAll(async () => {
  server = await createScriptedModelServer({
    script: [
      {
        say: 'Let me look.',
        tools: [{ name: 'Bash', input: { command: 'ls', description: 'list' } }],
      },
      { say: 'All done.' },
      { fail: 500 },
      { cut: true },
    ],
  });
});
afterAll(() => server.close());

const anthropic = () => new Anthropic({ baseURL: server.url, apiKey: 'test-key', maxRetries: 0 });
const openai = () => new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'test-key', maxRetries: 0 });

describe('Anthropic Messages', () => {
  it('streams a tool call, then the final answer once the history holds it', async () => {
    const first = await anthropic()
      .messages.stream({
        model: 'm',
        max_tokens: 100,
        messages: [{ role: 'user', content: 'hi' }],
      })
      .finalMessage();
    expect(first.stop_reason).toBe('tool_use');
    expect(first.content).toEqual([
      expect.objectContaining({ type: 'text', text: 'Let me look.' }),
      expect.objectContaining({
        type: 'tool_use',
        name: 'Bash',
        input: { command: 'ls', description: 'list' },
      }),
    ]);
    const toolUse = first.content[1] as { id: string };
    const second = await anthropic().messages.create({
      model: 'm',
      max_tokens: 100,
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: first.content },
        {
          role: 'user',
          content: [{ type: 'tool_result', tool_use_id: toolUse.id, content: 'a b' }],
        },
      ],
    });
    expect(second.content).toEqual([{ type: 'text', text: 'All done.' }]);
    expect(second.stop_reason).toBe('end_turn');
  });

  it('answers a scripted 500 with an API error every time, and cuts a stream', async () => {
    const history = (n: number) =>
      Array.from({ length: n }, () => [
        { role: 'user' as const, content: 'x' },
        { role: 'assistant' as const, content: 'y' },
      ]).flat();
    const err = await anthropic()
      .messages.create({
        model: 'm',
        max_tokens: 10,
        messages: [...history(2), { role: 'user', content: 'go' }],
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.APIError);
    expect((err as InstanceType<typeof Anthropic.APIError>).status).toBe(500);
    await expect(
      anthropic()
        .messages.stream({
          model: 'm',
          max_tokens: 10,
          messages: [...history(3), { role: 'user', content: 'go' }],
        })
        .finalMessage(),
    ).rejects.toThrow();
  });
});

describe('OpenAI Responses and Chat Completions', () => {
  it('streams a function call through the Responses API', async () => {
    const stream = await openai().responses.create({ model: 'm', input: 'hi', stream: true });
    const types: string[] = [];
    let completed: { output: Array<Record<string, unknown>> } | undefined;
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'response.completed') completed = e.response as never;
    }
    expect(types[0]).toBe('response.created');
    expect(types.at(-1)).toBe('response.completed');
    expect(completed!.output.map((o) => o['type'])).toEqual(['message', 'function_call']);
    expect(JSON.parse(completed!.output[1]!['arguments'] as string)).toEqual({
      command: 'ls',
      description: 'list',
    });
    // The next request carries the model's items back: step 1.
    const next = await openai().responses.create({
      model: 'm',
      stream: true,
      input: [
        { role: 'user', content: 'hi' },
        ...(completed!.output as never[]),
        {
          type: 'function_call_output',
          call_id: completed!.output[1]!['call_id'] as string,
          output: 'a b',
        },
      ],
    });
    let text = '';
    for await (const e of next)
      if (e.type === 'response.completed')
        text = (e.response.output[0] as { content: Array<{ text: string }> }).content[0]!.text;
    expect(text).toBe('All done.');
  });

  it('streams and returns chat completions with tool calls', async () => {
    const stream = await openai().chat.completions.create({
      model: 'm',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'hi' }],
    });
    let content = '';
    const calls: Array<{ name?: string; arguments?: string }> = [];
    let finish: string | null = null;
    for await (const c of stream) {
      const choice = c.choices[0];
      if (!choice) continue;
      content += choice.delta.content ?? '';
      for (const t of choice.delta.tool_calls ?? []) calls[t.index] = { ...t.function };
      finish = choice.finish_reason ?? finish;
    }
    expect(content).toBe('Let me look.');
    expect(calls).toEqual([{ name: 'Bash', arguments: '{"command":"ls","description":"list"}' }]);
    expect(finish).toBe('tool_calls');
    const plain = await openai().chat.completions.create({
      model: 'm',
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'Let me look.' },
        { role: 'user', content: 'and?' },
      ],
    });
    expect(plain.choices[0]!.message.content).toBe('All done.');
  });
});

describe('the script and the record', () => {
  it('picks the step from the history (retries get the same step) and records sessions', async () => {
    const before = server.requests.length;
    for (let i = 0; i < 2; i++)
      await fetch(`${server.url}/v1/messages?beta=true`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-claude-code-session-id': 'sess-1',
          'x-api-key': 'k',
        },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: 'hi' }],
          stream: false,
        }),
      });
    const mine = server.requests.slice(before);
    expect(mine.map((r) => [r.session, r.step, r.path])).toEqual([
      ['sess-1', 0, '/v1/messages'],
      ['sess-1', 0, '/v1/messages'],
    ]);
    expect(mine[0]!.headers['x-api-key']).toBe('k');
    expect(
      stepIndex('openai-responses', {
        input: [
          { role: 'user' },
          { type: 'message', role: 'assistant' },
          { type: 'function_call' },
          { type: 'function_call_output' },
          { type: 'function_call' },
        ],
      }),
    ).toBe(2);
    expect((await fetch(`${server.url}/v1/models`)).status).toBe(404);
    const bad = await fetch(`${server.url}/v1/messages`, { method: 'POST', body: 'nope' });
    expect(bad.status).toBe(400);
  });

  it('refuses a script step that does nothing, naming it', async () => {
    await expect(createScriptedModelServer({ script: [{ delayMs: 5 }] })).rejects.toThrow(
      /a step needs say, tools, fail or cut/,
    );
  });
});
