// What the credential proxy logs of a model answer's usage: the API's own
// figures for each dialect, streamed or whole, and a count from the bytes when
// an answer does not say (a stream cut short, usage left out).
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createScriptedModelServer, type ScriptedModelServer } from '@bb/scripted-model';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import {
  createCredentialProxy,
  type EgressLogEntry,
  loadRoutes,
  type ModelUsage,
  UsageMeter,
} from '../src/index';

const dir = mkdtempSync(join(tmpdir(), 'bb-usage-'));
const socket = join(dir, 'cred.sock');
const log: EgressLogEntry[] = [];
let model: ScriptedModelServer;
let bare: Server;
let proxy: ReturnType<typeof createCredentialProxy>;
const USAGE = { input: 1000, output: 200, cacheRead: 5000, cacheWrite: 300 };

beforeAll(async () => {
  model = await createScriptedModelServer({
    model: 'claude-sonnet-4-5',
    script: [{ say: 'hello', usage: USAGE }],
  });
  // An upstream whose stream says nothing of usage (OpenAI's chat without include_usage);
  // on /slow, an Anthropic stream that takes its time and says its usage at the end.
  bare = createServer((req, res) => {
    req.resume();
    if (req.url?.includes('/slow'))
      return req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(
          `data: ${JSON.stringify({ type: 'message_start', message: { model: 'claude-opus-4-5', usage: { input_tokens: 10, output_tokens: 1 } } })}\n\n`,
        );
        setTimeout(() => {
          res.end(
            `data: ${JSON.stringify({ type: 'message_delta', usage: { output_tokens: 90_000 } })}\n\n`,
          );
        }, 300);
      });
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(
        `data: ${JSON.stringify({ choices: [{ delta: { content: 'x'.repeat(400) } }] })}\n\ndata: [DONE]\n\n`,
      );
    });
  });
  await new Promise<void>((r) => bare.listen(0, '127.0.0.1', r));
  const port = (bare.address() as { port: number }).port;
  const routes = join(dir, 'routes.json');
  writeFileSync(
    routes,
    JSON.stringify({
      routes: [
        { prefix: '/anthropic', upstream: model.url, headers: { 'x-api-key': 'env:K' } },
        { prefix: '/openai', upstream: model.url, headers: { authorization: 'env:K' } },
        {
          prefix: '/bare',
          upstream: `http://127.0.0.1:${port}`,
          headers: { authorization: 'env:K' },
        },
      ],
    }),
  );
  proxy = createCredentialProxy({
    routes: loadRoutes(routes, { K: 'sk-test-usage-key' }),
    log: (e) => log.push(e),
  });
  await new Promise<void>((r) => proxy.server.listen(socket, r));
});

afterAll(async () => {
  await proxy.close();
  await model.close();
  await new Promise((r) => bare.close(r));
});

/** POST `body` through the proxy; resolves with the logged entry of that exchange. */
async function post(path: string, body: unknown): Promise<EgressLogEntry> {
  const before = log.length;
  await new Promise<void>((resolve) => {
    const req = request(
      { socketPath: socket, path, method: 'POST', headers: { 'content-type': 'application/json' } },
      (res) => {
        res.resume();
        res.on('close', resolve);
        res.on('error', () => {});
      },
    );
    req.on('error', () => resolve());
    req.end(JSON.stringify(body));
  });
  for (let i = 0; i < 100 && log.length === before; i++)
    await new Promise((r) => setTimeout(r, 10));
  return log[log.length - 1]!;
}

const messages = [{ role: 'user', content: 'hi' }];
const reported: ModelUsage = { model: 'claude-sonnet-4-5', ...USAGE, reported: true };

describe('the credential proxy meters model answers', () => {
  test('Anthropic Messages, whole and streamed: input, output and both cache counts', async () => {
    for (const stream of [false, true]) {
      const e = await post('/anthropic/v1/messages', {
        model: 'x',
        max_tokens: 10,
        messages,
        stream,
      });
      expect(e.usage).toEqual(reported);
    }
  });

  test('OpenAI Responses and Chat: cached tokens are taken out of the input', async () => {
    const openai = { ...reported, cacheWrite: 0 };
    expect(
      (await post('/openai/v1/responses', { model: 'x', input: 'hi', stream: true })).usage,
    ).toEqual(openai);
    for (const stream of [false, true])
      expect(
        (await post('/openai/v1/chat/completions', { model: 'x', messages, stream })).usage,
      ).toEqual(openai);
  });

  test('an answer that does not say its usage is counted from its size, never as free', async () => {
    const e = await post('/bare/v1/chat/completions', { model: 'x', messages, stream: true });
    expect(e.usage?.reported).toBe(false);
    expect(e.usage?.output).toBeGreaterThanOrEqual(Math.ceil(400 / 4));
    expect(e.usage?.input).toBeGreaterThan(0);
  });

  test('a stream cut short is counted from its size, over what it said at the start', async () => {
    model.setScript([{ cut: true }]);
    const e = await post('/anthropic/v1/messages', {
      model: 'x',
      max_tokens: 10,
      messages,
      stream: true,
    });
    model.setScript([{ say: 'hello', usage: USAGE }]);
    expect(e.usage?.reported).toBe(false);
    expect(e.usage?.output).toBeGreaterThan(1);
  });

  test('an agent that hangs up on an answer is counted for all of it: the answer is read to its end', async () => {
    const before = log.length;
    await new Promise<void>((resolve) => {
      const req = request(
        { socketPath: socket, path: '/bare/v1/messages/slow', method: 'POST' },
        (res) => {
          res.once('data', () => {
            req.destroy();
            resolve();
          });
        },
      );
      req.on('error', () => {});
      req.end('{}');
    });
    for (let i = 0; i < 200 && log.length === before; i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(log.at(-1)?.usage).toEqual({
      model: 'claude-opus-4-5',
      input: 10,
      output: 90_000,
      cacheRead: 0,
      cacheWrite: 0,
      reported: true,
    });
  });

  test('batches and files, whose answers never pass back through the proxy, are refused', async () => {
    for (const path of [
      '/anthropic/v1/messages/batches',
      '/openai/v1/batches',
      '/openai/v1/files/f-1/content',
    ]) {
      const status = await new Promise<number>((resolve) =>
        request({ socketPath: socket, path, method: 'POST' }, (res) => {
          res.resume();
          resolve(res.statusCode!);
        }).end('{}'),
      );
      expect(status, path).toBe(403);
    }
    expect(model.requests.some((r) => r.path.includes('batches'))).toBe(false);
  });

  test('a request that is not a model answer (a GET) carries no usage', async () => {
    await new Promise<void>((resolve) =>
      request({ socketPath: socket, path: '/anthropic/v1/models' }, (res) => {
        res.resume();
        res.on('end', resolve);
      }).end(),
    );
    for (let i = 0; i < 50 && log.at(-1)?.method !== 'GET'; i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(log.at(-1)?.method).toBe('GET');
    expect(log.at(-1)?.usage).toBeUndefined();
  });
});

describe('UsageMeter', () => {
  test('reads an event stream fed a byte at a time, and keeps the largest running totals', () => {
    const m = new UsageMeter('text/event-stream; charset=utf-8');
    const events = [
      {
        type: 'message_start',
        message: { model: 'claude-opus-4-5', usage: { input_tokens: 50, output_tokens: 1 } },
      },
      { type: 'content_block_delta', delta: { text: 'é'.repeat(10) } },
      { type: 'message_delta', usage: { output_tokens: 40 } },
    ];
    const text = events.map((e) => `event: x\ndata: ${JSON.stringify(e)}\n\n`).join('');
    for (const b of Buffer.from(text)) m.feed(Buffer.from([b]));
    expect(m.result({ up: 10, down: text.length, generated: true })).toEqual({
      model: 'claude-opus-4-5',
      input: 50,
      output: 40,
      cacheRead: 0,
      cacheWrite: 0,
      reported: true,
    });
  });

  test('negative, fractional or absurd figures are not taken as they are', () => {
    const m = new UsageMeter('application/json');
    m.feed(
      Buffer.from(
        JSON.stringify({
          usage: { input_tokens: -5, output_tokens: 2.9, cache_read_input_tokens: 'lots' },
        }),
      ),
    );
    expect(m.result({ up: 0, down: 0, generated: true })).toMatchObject({
      input: 0,
      output: 2,
      cacheRead: 0,
    });
  });
});
