import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import {
  createServer as createHttpServer,
  type IncomingHttpHeaders,
  request,
  type Server,
} from 'node:http';
import { type AddressInfo, connect, createServer as createTcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createCredentialProxy,
  createEgressProxy,
  decide,
  type EgressLogEntry,
  loadRoutes,
  parseRules,
  summarizeEgress,
} from '../src/index';

const dir = mkdtempSync(join(tmpdir(), 'bb-egress-'));
let httpPort: number;
let tcpPort: number;
let upstream: Server;
const seen: IncomingHttpHeaders[] = [];
const tcp = createTcpServer((s) => s.pipe(s)); // an echo server

beforeAll(async () => {
  upstream = createHttpServer((req, res) => {
    seen.push(req.headers);
    if (req.url?.endsWith('/sse')) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      let n = 0;
      const t = setInterval(() => {
        res.write(`data: ${++n}\n\n`);
        if (n === 3) {
          clearInterval(t);
          res.end();
        }
      }, 20);
      return;
    }
    res.writeHead(200, { 'content-type': 'text/plain' }).end(`hello from ${req.url}`);
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  httpPort = (upstream.address() as AddressInfo).port;
  await new Promise<void>((r) => tcp.listen(0, '127.0.0.1', r));
  tcpPort = (tcp.address() as AddressInfo).port;
});
afterAll(() => {
  upstream.close();
  tcp.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Send raw bytes to a Unix socket and collect the reply until the server closes or `until` matches. */
/**
 * `localhost` on this port, and the loopback addresses it resolves to: a name
 * that resolves inward is refused unless the allowlist names the address too.
 */
const local = (port: number) => [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`];

function raw(socket: string, text: string, until?: RegExp, ms = 3000): Promise<string> {
  return new Promise((resolve) => {
    const s = connect(socket);
    let out = '';
    const finish = () => {
      s.destroy();
      resolve(out);
    };
    const timer = setTimeout(finish, ms);
    s.on('data', (d) => {
      out += d;
      if (until?.test(out)) {
        clearTimeout(timer);
        finish();
      }
    });
    s.on('close', () => {
      clearTimeout(timer);
      resolve(out);
    });
    s.on('error', () => resolve(out));
    s.write(text);
  });
}

describe('allowlist rules', () => {
  it('matches exact hosts and *.suffix subdomains, on the listed ports, and denies IPs unless listed', () => {
    const rules = parseRules(['registry.npmjs.org:443', '*.example.test', '10.1.2.3:8080']);
    expect(decide(rules, 'registry.npmjs.org', 443).allowed).toBe(true);
    expect(decide(rules, 'REGISTRY.npmjs.org.', 443).allowed).toBe(true);
    expect(decide(rules, 'registry.npmjs.org', 80)).toEqual({
      allowed: false,
      rule: 'port 80 is not allowed for registry.npmjs.org:443',
    });
    expect(decide(rules, 'a.example.test', 443).allowed).toBe(true);
    expect(decide(rules, 'example.test', 443).allowed).toBe(false);
    expect(decide(rules, 'evil-example.test', 443).allowed).toBe(false);
    expect(decide(rules, '10.1.2.3', 8080).allowed).toBe(true);
    expect(decide(rules, '127.0.0.1', 443)).toEqual({
      allowed: false,
      rule: 'IP addresses are denied unless listed',
    });
    expect(decide(rules, 'nowhere.test', 443).rule).toMatch(/deny by default/);
    for (const bad of ['http://x', 'a b', 'x:99999', ''])
      expect(() => parseRules([bad])).toThrow(/egress rule/);
  });
});

describe('egress proxy', () => {
  const socket = join(dir, 'egress.sock');
  const log: EgressLogEntry[] = [];
  const proxy = createEgressProxy({ rules: [], log: (e) => log.push(e), headersTimeoutMs: 500 });
  beforeAll(async () => {
    proxy.reload(parseRules([...local(httpPort), ...local(tcpPort)]));
    await new Promise<void>((r) => proxy.server.listen(socket, r));
  });
  afterAll(() => proxy.close());

  it('tunnels CONNECT to an allowed host and logs the bytes both ways', async () => {
    const out = await raw(
      socket,
      `CONNECT localhost:${tcpPort} HTTP/1.1\r\nHost: localhost:${tcpPort}\r\n\r\nping`,
      /ping$/,
    );
    expect(out).toMatch(/^HTTP\/1.1 200 Connection Established\r\n\r\nping$/);
    await new Promise((r) => setTimeout(r, 50));
    const entry = log.find((e) => e.method === 'CONNECT' && e.decision === 'allowed')!;
    expect(entry).toMatchObject({
      host: 'localhost',
      port: tcpPort,
      rule: `localhost:${tcpPort}`,
      bytesUp: 4,
      bytesDown: 4,
    });
  });

  it('forwards an absolute-form HTTP request to an allowed host', async () => {
    const out = await raw(
      socket,
      `GET http://localhost:${httpPort}/a?b=1 HTTP/1.1\r\nHost: localhost:${httpPort}\r\nConnection: close\r\n\r\n`,
    );
    expect(out).toMatch(/^HTTP\/1.1 200/);
    expect(out).toContain('hello from /a?b=1');
  });

  it('denies by default with a 403 the agent can read, and logs the rule', async () => {
    const out = await raw(
      socket,
      'CONNECT api.nowhere.test:443 HTTP/1.1\r\nHost: api.nowhere.test:443\r\n\r\n',
    );
    // The status line says it too, for a client that shows a refused tunnel's reason only.
    expect(out).toMatch(/^HTTP\/1.1 403 Forbidden by bot-bottle; ask with pipelock-block\r\n/);
    expect(out).toContain(
      'egress to api.nowhere.test:443 denied: no rule allows this host (deny by default)',
    );
    // The agent is told how to ask for it: the tool and the file to start from.
    expect(JSON.parse(out.slice(out.indexOf('\r\n\r\n') + 4))).toMatchObject({
      error: 'egress_denied',
      host: 'api.nowhere.test',
      port: 443,
      fix: { tool: 'pipelock-block', file: '/etc/bot-bottle/current-config/allowlist.json' },
    });
    expect(log.at(-1)).toMatchObject({ decision: 'denied', host: 'api.nowhere.test', port: 443 });
  });

  it('refuses IP literals, unlisted ports, Host-header smuggling and non-proxy requests', async () => {
    expect(await raw(socket, `CONNECT 127.0.0.2:${tcpPort} HTTP/1.1\r\nHost: x\r\n\r\n`)).toContain(
      'IP addresses are denied unless listed',
    );
    expect(await raw(socket, 'CONNECT localhost:22 HTTP/1.1\r\nHost: x\r\n\r\n')).toMatch(
      /^HTTP\/1.1 403[\s\S]*no rule allows this host|port 22/,
    );
    const smuggle = await raw(
      socket,
      `GET http://localhost:${httpPort}/ HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n`,
    );
    expect(smuggle).toMatch(/^HTTP\/1.1 400[\s\S]*does not match the request target/);
    const origin = await raw(
      socket,
      'GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n',
    );
    expect(origin).toMatch(/^HTTP\/1.1 400[\s\S]*send absolute-form requests/);
    expect(await raw(socket, 'CONNECT nonsense HTTP/1.1\r\n\r\n')).toMatch(/^HTTP\/1.1 400/);
  });

  it('survives oversized headers and slowloris clients', async () => {
    const big = await raw(
      socket,
      `GET http://localhost:${httpPort}/ HTTP/1.1\r\nHost: localhost:${httpPort}\r\nX-Big: ${'a'.repeat(20000)}\r\n\r\n`,
    );
    expect(big).toMatch(/^HTTP\/1.1 431/);
    // A client that never finishes its headers is cut off after headersTimeout.
    const t0 = Date.now();
    const slow = await raw(socket, 'GET http://localhost/ HTTP/1.1\r\nHost: loc', undefined, 5000);
    expect(Date.now() - t0).toBeLessThan(4000);
    expect(slow === '' || /^HTTP\/1.1 408|^HTTP\/1.1 400/.test(slow)).toBe(true);
    const ok = await raw(
      socket,
      `GET http://localhost:${httpPort}/still HTTP/1.1\r\nHost: localhost:${httpPort}\r\nConnection: close\r\n\r\n`,
    );
    expect(ok).toContain('hello from /still');
  });

  it('reload changes the rules for new connections and keeps open tunnels', async () => {
    const s = connect(socket);
    await new Promise<void>((r) => s.on('connect', () => r()));
    let got = '';
    s.on('data', (d) => (got += d));
    s.write(`CONNECT localhost:${tcpPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
    await new Promise((r) => setTimeout(r, 100));
    proxy.reload(parseRules(local(httpPort)));
    s.write('after-reload');
    await new Promise((r) => setTimeout(r, 100));
    expect(got).toMatch(/200 Connection Established\r\n\r\nafter-reload$/);
    s.destroy();
    expect(await raw(socket, `CONNECT localhost:${tcpPort} HTTP/1.1\r\nHost: x\r\n\r\n`)).toMatch(
      /^HTTP\/1.1 403/,
    );
    proxy.reload(parseRules([...local(httpPort), ...local(tcpPort)]));
  });
});

describe('credential proxy', () => {
  const socket = join(dir, 'cred.sock');
  const KEY = 'sk-test-secret-key-1234567890';
  const log: EgressLogEntry[] = [];
  let proxy: ReturnType<typeof createCredentialProxy>;
  const routesFile = join(dir, 'routes.json');
  beforeAll(async () => {
    writeFileSync(
      routesFile,
      JSON.stringify({
        routes: [
          {
            prefix: '/anthropic',
            upstream: `http://127.0.0.1:${httpPort}/v1`,
            headers: { 'x-api-key': 'env:TEST_MODEL_KEY' },
          },
        ],
      }),
    );
    proxy = createCredentialProxy({
      routes: loadRoutes(routesFile, { TEST_MODEL_KEY: KEY }),
      log: (e) => log.push(e),
    });
    await new Promise<void>((r) => proxy.server.listen(socket, r));
  });
  afterAll(() => proxy.close());

  const get = (path: string, headers: Record<string, string> = {}) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request({ socketPath: socket, path, headers }, (res) => {
        let body = '';
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject);
      req.end();
    });

  it('injects the key, strips the client’s own credentials, and never logs the value', async () => {
    seen.length = 0;
    const res = await get('/anthropic/messages?beta=true', {
      authorization: 'Bearer client-token',
      'x-api-key': 'client-key',
      cookie: 'a=b',
    });
    expect(res).toEqual({ status: 200, body: 'hello from /v1/messages?beta=true' });
    expect(seen[0]!['x-api-key']).toBe(KEY);
    expect(seen[0]!['authorization']).toBeUndefined();
    expect(seen[0]!['cookie']).toBeUndefined();
    expect(log.at(-1)).toMatchObject({
      kind: 'credential',
      route: '/anthropic',
      auth: ['x-api-key'],
      status: 200,
    });
    expect(JSON.stringify(log)).not.toContain(KEY);
  });

  it('streams server-sent events through', async () => {
    const res = await get('/anthropic/sse');
    expect(res.body).toBe('data: 1\n\ndata: 2\n\ndata: 3\n\n');
  });

  it('answers 404 for unknown routes, naming the routes it has and how to ask for one', async () => {
    const res = await get('/openai/v1/responses');
    expect(res.status).toBe(404);
    expect(JSON.parse(res.body)).toMatchObject({
      error: 'no_credential_route',
      message: 'no credential route for /openai/v1/responses denied: routes: /anthropic',
      path: '/openai/v1/responses',
      fix: { tool: 'cred-proxy-block', file: '/etc/bot-bottle/current-config/routes.json' },
    });
  });

  it('refuses a broken routes file, a literal secret and an unset secret, keeping the old routes', async () => {
    const bad = join(dir, 'bad.json');
    for (const [text, msg] of [
      ['{"routes": [', /cannot be read as JSON/],
      [
        JSON.stringify({
          routes: [
            {
              prefix: '/x',
              upstream: 'http://127.0.0.1:1',
              headers: { 'x-api-key': 'sk-literal-secret' },
            },
          ],
        }),
        /must reference a secret/,
      ],
      [
        JSON.stringify({
          routes: [
            {
              prefix: '/x',
              upstream: 'http://127.0.0.1:1',
              headers: { 'x-api-key': 'env:NOT_SET_ANYWHERE' },
            },
          ],
        }),
        /env:NOT_SET_ANYWHERE for \/x \(x-api-key\) is not set/,
      ],
    ] as const) {
      writeFileSync(bad, text);
      let err: Error | undefined;
      try {
        proxy.reload(loadRoutes(bad, {}));
      } catch (e) {
        err = e as Error;
      }
      expect(err?.message).toMatch(msg);
      expect(err?.message).not.toContain('sk-literal-secret');
    }
    expect((await get('/anthropic/still')).status).toBe(200);
  });
});

describe('summarizeEgress', () => {
  it('groups allowed routes, denied hosts with counts, credential routes, and totals', () => {
    const t = new Date().toISOString();
    const line = (over: Record<string, unknown>) => ({
      time: t,
      kind: 'egress',
      port: 443,
      decision: 'allowed',
      bytesUp: 0,
      bytesDown: 0,
      durationMs: 0,
      ...over,
    });
    const npm = { host: 'registry.npmjs.org', rule: 'registry.npmjs.org:443', durationMs: 5 };
    const evil = {
      host: 'evil.test',
      decision: 'denied',
      rule: 'no rule allows this host (deny by default)',
    };
    const lines = [
      line({ ...npm, bytesUp: 10, bytesDown: 100 }),
      line({ ...npm, bytesUp: 5, bytesDown: 50 }),
      line(evil),
      line(evil),
      line({
        kind: 'credential',
        host: 'api.anthropic.com',
        rule: '/anthropic',
        route: '/anthropic',
        auth: ['x-api-key'],
        bytesUp: 1,
        bytesDown: 2,
        durationMs: 1,
      }),
    ];
    const s = summarizeEgress(`${lines.map((l) => JSON.stringify(l)).join('\n')}\nnot json\n`);
    expect(s.allowed).toEqual([
      {
        host: 'registry.npmjs.org',
        port: 443,
        rule: 'registry.npmjs.org:443',
        connections: 2,
        bytesUp: 15,
        bytesDown: 150,
      },
    ]);
    expect(s.denied).toEqual([
      {
        host: 'evil.test',
        port: 443,
        reason: 'no rule allows this host (deny by default)',
        count: 2,
      },
    ]);
    expect(s.credentialRoutes).toEqual([
      { route: '/anthropic', auth: ['x-api-key'], requests: 1, bytesUp: 1, bytesDown: 2 },
    ]);
    expect(s.totals).toEqual({ connections: 3, denied: 2, bytesUp: 16, bytesDown: 152 });
    expect(readFileSync).toBeDefined();
  });
});
