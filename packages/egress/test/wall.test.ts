// The egress side of the wall: names that resolve inward, path tricks on
// credential routes, hop-by-hop headers, and keys an upstream echoes back.
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isInternalAddress, resolveDestination } from '../src/addresses';
import { createCredentialProxy, unsafePath } from '../src/cred-proxy';
import { createEgressProxy } from '../src/egress-proxy';
import { withoutHopByHop } from '../src/headers';
import { SecretRedactor } from '../src/redactor';
import { parseRules } from '../src/rules';

describe('internal addresses', () => {
  it('knows loopback, private, link-local, metadata, CGNAT, ULA and mapped forms', () => {
    for (const ip of [
      '127.0.0.1',
      '127.9.9.9',
      '10.0.0.1',
      '172.16.5.4',
      '192.168.1.1',
      '169.254.169.254',
      '100.64.0.1',
      '0.0.0.0',
      '::1',
      '::',
      'fd00:ec2::254',
      'fe80::1',
      '::ffff:127.0.0.1',
      '::ffff:7f00:1',
      '64:ff9b::a9fe:a9fe',
      '224.0.0.1',
      '::127.0.0.1',
      '64:ff9b:1::1',
      '2002:7f00:1::',
      'fec0::1',
      // This machine's own addresses (the proxy shares its network).
      ...Object.values(networkInterfaces())
        .flat()
        .map((a) => a!.address.replace(/%.*$/, '')),
    ])
      expect(isInternalAddress(ip), ip).toBe(true);
    for (const ip of [
      '93.184.216.34',
      '1.1.1.1',
      '2606:4700:4700::1111',
      '::ffff:1.1.1.1',
      '2002:101:101::',
    ])
      expect(isInternalAddress(ip), ip).toBe(false);
  });

  it('refuses a name that resolves inward unless its address is allowed, and pins what it checked', async () => {
    const refused = await resolveDestination('localhost', () => false);
    expect(refused).toMatchObject({ ok: false });
    expect(!refused.ok && refused.reason).toMatch(/localhost resolves to .*an internal address/);
    const allowed = await resolveDestination('localhost', () => true);
    expect(allowed.ok && isInternalAddress(allowed.address)).toBe(true);
    expect(await resolveDestination('no-such-host.invalid', () => true)).toMatchObject({
      ok: false,
    });
  });
});

describe('credential route paths', () => {
  it('refuse every way out of the prefix and pass plain paths', () => {
    for (const p of [
      '/anthropic/../secret',
      '/anthropic/%2e%2e/secret',
      '/anthropic/%2E%2e/x',
      '/anthropic/..%2fsecret',
      '/anthropic/.%2e/x',
      '/anthropic/a/../../x',
      '/anthropic/./x',
      '/anthropic\\..\\x',
      '/anthropic//host/x',
      '/anthropic/%5c..%5cx',
      '/anthropic/%zz',
      'anthropic/x',
    ])
      expect(unsafePath(p), p).toBeDefined();
    for (const p of [
      '/anthropic',
      '/anthropic/',
      '/anthropic/v1/messages?beta=true',
      '/anthropic/a.b/c..d',
    ])
      expect(unsafePath(p), p).toBeUndefined();
  });
});

describe('hop-by-hop headers', () => {
  it('are dropped, with every header Connection names', () => {
    const h: IncomingHttpHeaders = {
      connection: 'close, X-Smuggle',
      'x-smuggle': '1',
      te: 'trailers',
      upgrade: 'websocket',
      'keep-alive': 'timeout=5',
      'proxy-authorization': 'Basic eDp5',
      'transfer-encoding': 'chunked',
      'x-kept': 'yes',
      host: 'h',
    };
    expect(withoutHopByHop(h)).toEqual({ 'x-kept': 'yes', host: 'h' });
  });
});

describe('SecretRedactor', () => {
  const run = async (chunks: string[], secrets: string[]) => {
    const out: Buffer[] = [];
    const r = Readable.from(chunks.map((c) => Buffer.from(c))).pipe(new SecretRedactor(secrets));
    for await (const c of r) out.push(c as Buffer);
    return Buffer.concat(out).toString();
  };
  it('removes a key wherever it is, split across chunks or not, and passes the rest byte for byte', async () => {
    const key = 'sk-live-0123456789abcdef';
    expect(await run([`{"echo":"${key}"}`], [key])).toBe('{"echo":"[REDACTED]"}');
    expect(await run(['x sk-live-01', '23456789ab', `cdef y ${key}`], [key])).toBe(
      'x [REDACTED] y [REDACTED]',
    );
    expect(await run(['sk-', 'live'], [key])).toBe('sk-live');
    expect(await run(['data: 1\n\n', 'data: 2\n\n'], [key])).toBe('data: 1\n\ndata: 2\n\n');
  });
});

describe('the proxies fail closed when their log is full', () => {
  it('past its limit the log says so once, and both proxies refuse new requests', async () => {
    const { fileLogger } = await import('../src/log');
    const dir = mkdtempSync(join(tmpdir(), 'bb-egress-full-'));
    const log = fileLogger(join(dir, 'egress.jsonl'), { maxBytes: 400 });
    const entry = {
      time: 't',
      kind: 'egress' as const,
      host: 'h',
      port: 1,
      decision: 'allowed' as const,
      rule: 'r',
      bytesUp: 0,
      bytesDown: 0,
      durationMs: 0,
    };
    for (let i = 0; i < 10; i++) log(entry);
    expect(log.full).toBe(true);
    const egress = createEgressProxy({
      rules: parseRules(['*.example.test']),
      log,
      canLog: () => !log.full,
    });
    const socket = join(dir, 'e.sock');
    await new Promise<void>((r) => egress.server.listen(socket, r));
    const req = request({
      socketPath: socket,
      path: 'http://a.example.test/',
      headers: { host: 'a.example.test' },
    });
    req.end();
    const [res] = (await once(req, 'response')) as [import('node:http').IncomingMessage];
    expect(res.statusCode).toBe(503);
    res.resume();
    await egress.close();
    log.close();
    rmSync(dir, { recursive: true, force: true });
  });
});

describe('the proxies, end to end on loopback', () => {
  const dir = mkdtempSync(join(tmpdir(), 'bb-egress-wall-'));
  const KEY = 'sk-test-key-for-the-wall-4c2f9a';
  let upstream: Server;
  let port = 0;
  const seen: Array<{ url: string; headers: IncomingHttpHeaders }> = [];
  beforeAll(async () => {
    upstream = createServer((req, res) => {
      seen.push({ url: req.url ?? '', headers: req.headers });
      res.setHeader('x-echo', String(req.headers['x-api-key'] ?? ''));
      res.end(`you sent ${req.headers['x-api-key']}`);
    });
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
    port = (upstream.address() as AddressInfo).port;
  });
  afterAll(() => {
    upstream.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const get = async (socketPath: string, path: string, headers: Record<string, string> = {}) => {
    const req = request({ socketPath, path, headers });
    req.end();
    const [res] = (await once(req, 'response')) as [import('node:http').IncomingMessage];
    let body = '';
    for await (const c of res) body += c;
    return { status: res.statusCode, headers: res.headers, body };
  };

  it('the credential proxy keeps to its base, strips hop-by-hop headers and redacts echoed keys', async () => {
    const proxy = createCredentialProxy({
      routes: [
        {
          prefix: '/anthropic',
          upstream: new URL(`http://127.0.0.1:${port}/api`),
          headers: { 'x-api-key': KEY },
        },
      ],
    });
    const socket = join(dir, 'cred.sock');
    await new Promise<void>((r) => proxy.server.listen(socket, r));
    seen.length = 0;
    expect((await get(socket, '/anthropic/%2e%2e/admin')).status).toBe(400);
    expect(seen).toHaveLength(0);
    const ok = await get(socket, '/anthropic/v1/messages', {
      connection: 'x-drop',
      'x-drop': '1',
      te: 'trailers',
    });
    expect(ok.status).toBe(200);
    expect(seen.at(-1)!.url).toBe('/api/v1/messages');
    expect(seen.at(-1)!.headers['x-api-key']).toBe(KEY);
    expect(seen.at(-1)!.headers['x-drop']).toBeUndefined();
    expect(seen.at(-1)!.headers['te']).toBeUndefined();
    expect(ok.body).toBe('you sent [REDACTED]');
    expect(ok.headers['x-echo']).toBe('[REDACTED]');
    await proxy.close();
  });

  it('the egress proxy refuses an allowed name that resolves inward, unless the address is listed', async () => {
    const proxy = createEgressProxy({ rules: parseRules([`localhost:${port}`]) });
    const socket = join(dir, 'egress.sock');
    await new Promise<void>((r) => proxy.server.listen(socket, r));
    seen.length = 0;
    const refused = await get(socket, `http://localhost:${port}/x`, { host: `localhost:${port}` });
    expect(refused.status).toBe(403);
    expect(refused.body).toMatch(/resolves to .*internal address/);
    expect(seen).toHaveLength(0);
    proxy.reload(parseRules([`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`]));
    expect(
      (await get(socket, `http://localhost:${port}/x`, { host: `localhost:${port}` })).status,
    ).toBe(200);
    expect(seen).toHaveLength(1);
    await proxy.close();
  });
});
