import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, createServer, request, type Server } from 'node:http';
import { type AddressInfo, connect, createServer as createTcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEgressProxy } from '../src/egress-proxy';
import type { EgressLogEntry } from '../src/log';
import { parseRules } from '../src/rules';
import { describeFramingSuite, rawExchange } from './framing-suite';

describeFramingSuite('the egress proxy', async (socket, allow) => {
  const proxy = createEgressProxy({ rules: parseRules(allow) });
  await new Promise<void>((r) => proxy.server.listen(socket, r));
  return proxy;
});

describe('the egress proxy on kept connections', () => {
  const dir = mkdtempSync(join(tmpdir(), 'bb-kept-'));
  const socket = join(dir, 'egress.sock');
  const log: EgressLogEntry[] = [];
  const servers: Server[] = [];
  const ports: number[] = [];
  let connections = 0;
  const proxy = createEgressProxy({ rules: [], log: (e) => log.push(e) });

  beforeAll(async () => {
    for (let i = 0; i < 2; i++) {
      const s = createServer((req, res) => {
        if (req.url === '/chunks') {
          res.write('one,');
          setTimeout(() => res.end('two'), 10);
        } else res.end(`server ${i} ${req.url}`);
      });
      s.on('connection', () => connections++);
      await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
      servers.push(s);
      ports.push((s.address() as AddressInfo).port);
    }
    proxy.reload(parseRules(ports.map((p) => `127.0.0.1:${p}`)));
    await new Promise<void>((r) => proxy.server.listen(socket, r));
  });
  afterAll(async () => {
    await proxy.close();
    for (const s of servers) {
      s.closeAllConnections();
      s.close();
    }
    rmSync(dir, { recursive: true, force: true });
  });

  const target = (i: number, path: string) => `http://127.0.0.1:${ports[i]}${path}`;
  function viaAgent(agent: Agent, url: string): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      request(
        { agent, socketPath: socket, path: url, headers: { host: new URL(url).host } },
        (res) => {
          let body = '';
          res.on('data', (c) => (body += c));
          res.on('end', () => resolve({ status: res.statusCode!, body }));
        },
      )
        .on('error', reject)
        .end();
    });
  }

  it('keeps one server connection per destination and logs each request with its answer', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    connections = 0;
    log.length = 0;
    for (const path of ['/a', '/b', '/chunks'])
      expect((await viaAgent(agent, target(0, path))).status).toBe(200);
    expect((await viaAgent(agent, target(0, '/chunks'))).body).toBe('one,two');
    agent.destroy();
    expect(connections).toBe(1);
    expect(log.map((e) => [e.decision, e.method, e.status])).toEqual(
      Array(4).fill(['allowed', 'GET', 200]),
    );
    for (const e of log) expect(e.bytesUp).toBeGreaterThan(0);
    // A chunked answer is counted whole: its head, both chunks and the last one.
    expect(log[2]!.bytesDown).toBe(log[3]!.bytesDown);
    expect(log[2]!.bytesDown).toBeGreaterThan(log[0]!.bytesDown);
  });

  it('opens a new server connection when the server closed the kept one, on the same client connection', async () => {
    connections = 0;
    const s = connect(socket);
    let out = '';
    s.on('data', (d) => (out += d));
    const ask = async (i: number, path: string) => {
      s.write(`GET ${target(i, path)} HTTP/1.1\r\nHost: 127.0.0.1:${ports[i]}\r\n\r\n`);
      while (!out.includes(`server ${i} ${path}`)) await new Promise((r) => setTimeout(r, 5));
    };
    await ask(1, '/1');
    servers[1]!.closeIdleConnections(); // as a server does past its keep-alive
    await new Promise((r) => setTimeout(r, 50));
    await ask(1, '/2');
    await ask(0, '/3');
    s.destroy();
    expect(out.match(/HTTP\/1.1 200/g)).toHaveLength(3);
    expect(connections).toBe(3);
  });

  it('answers pipelined requests in order, across destinations', async () => {
    const out = await rawExchange(
      socket,
      [0, 1, 0]
        .map(
          (i, n) =>
            `GET ${target(i, `/p${n}`)} HTTP/1.1\r\nHost: 127.0.0.1:${ports[i]}\r\n${n === 2 ? 'Connection: close\r\n' : ''}\r\n`,
        )
        .join(''),
    );
    const bodies = [...out.matchAll(/server \d \/p\d/g)].map((m) => m[0]);
    // Each server answers what it owes before the connection moves to another.
    expect(bodies).toEqual(['server 0 /p0', 'server 1 /p1', 'server 0 /p2']);
  });

  it('answers a client that half-closes after its request, and an HTTP/1.0 client', async () => {
    const half = await new Promise<string>((resolve) => {
      const s = connect(socket);
      let out = '';
      s.on('data', (d) => (out += d));
      s.on('close', () => resolve(out));
      s.end(`GET ${target(0, '/half')} HTTP/1.1\r\nHost: 127.0.0.1:${ports[0]}\r\n\r\n`);
    });
    expect(half).toMatch(/^HTTP\/1.1 200[\s\S]*server 0 \/half$/);
    const old = await rawExchange(socket, `GET ${target(1, '/old')} HTTP/1.0\r\n\r\n`);
    expect(old).toMatch(/^HTTP\/1.1 200[\s\S]*server 1 \/old$/);
  });

  it('says 502 when an allowed server cannot be reached', async () => {
    const closed = createTcpServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));
    proxy.reload(parseRules([...ports.map((p) => `127.0.0.1:${p}`), `127.0.0.1:${port}`]));
    const out = await rawExchange(socket, `GET http://127.0.0.1:${port}/ HTTP/1.1\r\n\r\n`);
    expect(out).toMatch(/^HTTP\/1.1 502[\s\S]*cannot reach 127.0.0.1/);
  });
});
