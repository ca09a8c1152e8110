// Connections handed over: the bridge's bb-fdpass passes each agent connection to
// the egress proxy, which serves it itself. Real processes and the real helper
// (BB_TEST_FDPASS names another build of it, e.g. one without its checks).
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startBridge } from '../src/bridge';
import { createEgressProxy } from '../src/egress-proxy';
import { createHandoff, handoffPath } from '../src/handoff';
import { parseRules } from '../src/rules';

const here = dirname(fileURLToPath(import.meta.url));
const HELPER = process.env['BB_TEST_FDPASS'] ?? join(here, '..', 'dist', 'bundle', 'bb-fdpass');
const HOSTILE = join(here, 'fixtures', 'hand-over.py');
const dir = mkdtempSync(join(tmpdir(), 'bb-handoff-'));
const closers: Array<() => unknown> = [];
let upstream: HttpServer;
let target: number;

beforeAll(async () => {
  if (!existsSync(HELPER)) throw new Error(`${HELPER} is missing: run pnpm build first`);
  upstream = createHttpServer((req, res) => res.writeHead(200).end(`upstream saw ${req.url}`));
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  target = (upstream.address() as AddressInfo).port;
});
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});
afterAll(() => {
  upstream?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** An egress proxy on a fresh socket that takes connections handed over; counts those it served. */
async function gate(o: { maxChannels?: number } = {}) {
  const socket = join(dir, `egress-${Math.random().toString(36).slice(2)}.sock`);
  const proxy = createEgressProxy({ rules: parseRules([`127.0.0.1:${target}`]) });
  const served: Socket[] = [];
  const messages: string[] = [];
  const handoff = createHandoff({
    helper: HELPER,
    accept: (s) => {
      served.push(s);
      proxy.accept(s);
    },
    onMessage: (m) => messages.push(m),
    ...o,
  });
  await new Promise<void>((r) => proxy.server.listen(socket, r));
  await new Promise<void>((r) => handoff.server.listen(handoffPath(socket), r));
  closers.push(
    () => handoff.close(),
    () => proxy.close(),
  );
  return { socket, served, messages };
}

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** GET /path through the proxy on 127.0.0.1:port; the status line, and the client's own port. */
function get(port: number, path: string): Promise<{ status: string; localPort: number }> {
  return new Promise((resolve, reject) => {
    const c = connect(port, '127.0.0.1');
    let got = '';
    let localPort = 0;
    c.on('connect', () => {
      localPort = c.localPort!;
      c.write(
        `GET http://127.0.0.1:${target}${path} HTTP/1.1\r\nHost: 127.0.0.1:${target}\r\nConnection: close\r\n\r\n`,
      );
    });
    c.on('data', (d: Buffer) => (got += d.toString('latin1')));
    c.on('close', () => resolve({ status: got.split('\r\n')[0] ?? '', localPort }));
    c.on('error', reject);
  });
}

/** Run the hostile sender against `socket`: what its honest connection got at the end. */
function hostile(socket: string, ...kinds: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn('python3', [HOSTILE, handoffPath(socket), String(target), ...kinds]);
    let out = '';
    let err = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (err += d.toString()));
    p.on('error', reject);
    p.on('exit', (code) =>
      code === 0 ? resolve(out.trim()) : reject(new Error(`hand-over.py failed: ${err}`)),
    );
  });
}

describe('a bridge that hands its connections over (bb-fdpass)', () => {
  it('hands each connection to the proxy, which serves that very socket', async () => {
    const g = await gate();
    const port = await freePort();
    const bridges = await startBridge([{ port, socket: g.socket }], { handoffHelper: HELPER });
    closers.push(() => {
      for (const b of bridges) b.close();
    });
    for (const path of ['/a', '/b', '/c']) {
      const { status, localPort } = await get(port, path);
      expect(status).toBe('HTTP/1.1 200 OK');
      // The proxy's peer is the client itself: no process carries the bytes between.
      expect(g.served.at(-1)?.remotePort).toBe(localPort);
    }
    expect(g.served).toHaveLength(3);
  });

  it('bridges the port instead when the proxy takes nothing handed over, or the helper goes', async () => {
    const proxy = createEgressProxy({ rules: parseRules([`127.0.0.1:${target}`]) });
    const plain = join(dir, `plain-${Date.now()}.sock`);
    await new Promise<void>((r) => proxy.server.listen(plain, r));
    closers.push(() => proxy.close());
    const port = await freePort();
    const messages: string[] = [];
    const bridges = await startBridge([{ port, socket: plain }], {
      handoffHelper: HELPER,
      onMessage: (m) => messages.push(m),
    });
    closers.push(() => {
      for (const b of bridges) b.close();
    });
    expect((await get(port, '/plain')).status).toBe('HTTP/1.1 200 OK');
    expect(messages).toEqual([]);

    const g = await gate();
    const port2 = await freePort();
    const handing = await startBridge([{ port: port2, socket: g.socket }], {
      handoffHelper: HELPER,
      onMessage: (m) => messages.push(m),
    });
    closers.push(() => {
      for (const b of handing) b.close();
    });
    expect((await get(port2, '/before')).status).toBe('HTTP/1.1 200 OK');
    // The agent kills the helper: the port is bridged from then on.
    const pids = spawnSync('pgrep', ['-f', ` listen ${port2} `], { encoding: 'utf8' })
      .stdout.trim()
      .split('\n')
      .filter(Boolean);
    expect(pids).toHaveLength(1);
    process.kill(Number(pids[0]), 'SIGKILL');
    await expect.poll(() => messages.some((m) => m.includes('bridged from now on'))).toBe(true);
    await expect
      .poll(async () => (await get(port2, '/after').catch(() => ({ status: '' }))).status)
      .toBe('HTTP/1.1 200 OK');
    expect(g.served).toHaveLength(1);
  });
});

describe('red team: what the agent sends on the handoff socket', () => {
  it('serves only connected TCP sockets: a Unix socket, a file, a pipe, a listener or a UDP socket is closed, and the channel goes on', async () => {
    const g = await gate();
    for (const kind of ['unix', 'file', 'pipe', 'listen', 'udp']) {
      expect(await hostile(g.socket, kind), kind).toBe('answer: HTTP/1.1 200 OK');
      // Only the honest connection after it was served.
      expect(g.served, kind).toHaveLength(1);
      g.served.length = 0;
    }
    expect(g.messages).toEqual([]);
  });

  it('ends a channel that sends two descriptors in one message, serving neither', async () => {
    const g = await gate();
    expect(await hostile(g.socket, 'two')).toMatch(/^(closed|answer: closed)$/);
    expect(g.served).toHaveLength(0);
  });

  it('ignores bytes without a descriptor', async () => {
    const g = await gate();
    expect(await hostile(g.socket, 'garbage', 'tcp')).toBe('answer: HTTP/1.1 200 OK');
    expect(g.served).toHaveLength(2);
  });

  it('serves at most maxChannels handoff connections at once', async () => {
    const g = await gate({ maxChannels: 2 });
    const path = handoffPath(g.socket);
    const open = await Promise.all(
      [0, 1, 2, 3].map(
        () =>
          new Promise<{ closed: () => boolean; end: () => void }>((resolve) => {
            let closed = false;
            const c = connect(path, () =>
              resolve({ closed: () => closed, end: () => c.destroy() }),
            );
            c.on('close', () => (closed = true));
            c.on('error', () => {});
          }),
      ),
    );
    closers.push(() => {
      for (const c of open) c.end();
    });
    await expect.poll(() => open.filter((c) => c.closed()).length).toBe(2);
  });
});

describe('bb-fdpass itself', () => {
  it('names what it needs, and says when the gate cannot be reached', () => {
    const usage = spawnSync(HELPER, [], { encoding: 'utf8' });
    expect(usage.status).toBe(2);
    expect(usage.stderr).toContain('usage: bb-fdpass listen PORT SOCKET | bb-fdpass recv');
    const port = spawnSync(HELPER, ['listen', '70000', '/x'], { encoding: 'utf8' });
    expect([port.status, port.stderr]).toEqual([2, 'bb-fdpass: port 70000 must be 1 to 65535\n']);
    const gone = spawnSync(HELPER, ['listen', '3128', join(dir, 'nothing.handoff')], {
      encoding: 'utf8',
    });
    expect(gone.status).toBe(3);
    expect(gone.stderr).toContain('cannot reach the gate at');
  });
});
