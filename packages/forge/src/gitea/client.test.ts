import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { closeGiteaPools, GiteaClient } from './client';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;
let server: Server;
let base: string;
let handler: Handler;
const seen: Array<{ method: string; url: string; auth: string | undefined }> = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    seen.push({ method: req.method!, url: req.url!, auth: req.headers.authorization });
    handler(req, res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await closeGiteaPools();
  server.close();
});
beforeEach(() => {
  seen.length = 0;
});

const TOKEN = 'super-secret-token-value-42';

// Each transport the client offers meets the same contract.
describe.each(['undici', 'node'] as const)('GiteaClient on %s', (transport) => {
  const client = (extra = {}) =>
    new GiteaClient({ baseUrl: base, token: TOKEN, retryBaseMs: 5, transport, ...extra });

  it('adds /api/v1, sends the token as a header only, and parses JSON', async () => {
    handler = (_req, res) =>
      res
        .writeHead(200, { 'content-type': 'application/json;charset=utf-8' })
        .end('{"login":"bb"}\n');
    const res = await client().request<{ login: string }>({ method: 'GET', path: '/user' });
    expect(res.body.login).toBe('bb');
    expect(seen[0]).toEqual({ method: 'GET', url: '/api/v1/user', auth: `token ${TOKEN}` });
  });

  it('retries idempotent requests on 5xx, then succeeds', async () => {
    let n = 0;
    handler = (_req, res) =>
      ++n < 3
        ? res.writeHead(502).end()
        : res.writeHead(200, { 'content-type': 'application/json' }).end('[]');
    const retries: string[] = [];
    const res = await client({
      onRetry: (i: { reason: string }) => retries.push(i.reason),
    }).request({ method: 'GET', path: '/x' });
    expect(res.status).toBe(200);
    expect(retries).toEqual(['HTTP 502', 'HTTP 502']);
  });

  it('never retries a POST', async () => {
    handler = (_req, res) => res.writeHead(503).end();
    await expect(client().request({ method: 'POST', path: '/x', body: {} })).rejects.toMatchObject({
      code: 'FORGE_UNAVAILABLE',
    });
    expect(seen).toHaveLength(1);
  });

  it('is bounded: gives up after the configured retries', async () => {
    handler = (_req, res) => res.writeHead(500).end();
    const err = await client({ retries: 2 })
      .request({ method: 'GET', path: '/x' })
      .catch((e) => e);
    expect(err.code).toBe('FORGE_UNAVAILABLE');
    expect(err.message).toMatch(/after 3 tries/);
    expect(seen).toHaveLength(3);
  });

  it('honours Retry-After on 429', async () => {
    let n = 0;
    handler = (_req, res) =>
      ++n === 1 ? res.writeHead(429, { 'retry-after': '1' }).end() : res.writeHead(204).end();
    const waits: number[] = [];
    const t0 = Date.now();
    await client({ onRetry: (i: { waitMs: number }) => waits.push(i.waitMs) }).request({
      method: 'GET',
      path: '/x',
    });
    expect(waits).toEqual([1000]);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(950);
  });

  it('maps statuses to codes and keeps the token out of every error', async () => {
    const cases: Array<[number, string]> = [
      [401, 'UNAUTHORIZED'],
      [403, 'FORBIDDEN'],
      [404, 'NOT_FOUND'],
      [409, 'CONFLICT'],
      [422, 'INVALID_INPUT'],
    ];
    for (const [status, code] of cases) {
      handler = (req, res) =>
        res
          .writeHead(status, { 'content-type': 'application/json' })
          .end(JSON.stringify({ message: `echo ${req.headers.authorization}` }));
      const err = await client()
        .request({ method: 'GET', path: '/x', query: { token: TOKEN } })
        .catch((e) => e);
      expect(err.code).toBe(code);
      const everything = JSON.stringify({ m: err.message, d: err.data, s: String(err.stack) });
      expect(everything).not.toContain(TOKEN);
    }
  });

  it('times out a server that never answers, as FORGE_UNAVAILABLE', async () => {
    handler = () => {};
    const err = await client({ headersTimeoutMs: 200, retries: 1, connections: 2 })
      .request({ method: 'GET', path: '/slow' })
      .catch((e) => e);
    expect(err.code).toBe('FORGE_UNAVAILABLE');
    expect(seen).toHaveLength(2);
  });

  it("keeps each client's timeouts when another client of the same origin was made first", async () => {
    handler = () => {};
    // The first client of this origin (default timeouts: 15 s) makes its pool ...
    client();
    // ... and a client asking for 200 ms still gets 200 ms, not 15 s.
    const err = await client({ headersTimeoutMs: 200, retries: 0 })
      .request({ method: 'GET', path: '/slow-again' })
      .catch((e) => e);
    expect(err.code).toBe('FORGE_UNAVAILABLE');
  }, 10_000);

  it('times out a body that stops coming, as FORGE_UNAVAILABLE', async () => {
    handler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
      res.write('{"partial":');
    };
    const err = await client({ bodyTimeoutMs: 200, retries: 0 })
      .request({ method: 'GET', path: '/stalls' })
      .catch((e) => e);
    expect(err.code).toBe('FORGE_UNAVAILABLE');
  }, 10_000);

  it('sends a JSON body with its length', async () => {
    let got = '';
    handler = (req, res) => {
      req.setEncoding('utf8');
      req.on('data', (d) => (got += d));
      req.on('end', () =>
        res.writeHead(201, { 'content-type': 'application/json' }).end('{"id":7}'),
      );
    };
    const res = await client().request<{ id: number }>(
      { method: 'POST', path: '/repos/o/r/issues/1/comments', body: { body: 'héllo' } },
      [201],
    );
    expect(res.body.id).toBe(7);
    expect(JSON.parse(got)).toEqual({ body: 'héllo' });
  });

  it('does not follow redirects', async () => {
    handler = (_req, res) => res.writeHead(303, { location: '/elsewhere' }).end();
    const res = await client().request({ method: 'GET', path: '/orgs/o/members/u' }, [303]);
    expect(res.status).toBe(303);
    expect(seen).toHaveLength(1);
  });

  it('refuses bad base URLs and credentials in the URL', () => {
    expect(() => new GiteaClient({ baseUrl: 'not a url' })).toThrow(/must be the Gitea API URL/);
    expect(() => new GiteaClient({ baseUrl: 'ftp://x' })).toThrow(/http/);
    expect(() => new GiteaClient({ baseUrl: 'http://u:p@x' })).toThrow(/FORGE_TOKEN/);
  });
});
