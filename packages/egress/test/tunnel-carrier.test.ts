// Allowed CONNECT tunnels carried by bb-tunnel (native/bb-tunnel.c) rather than by
// node: the proxy decides and logs, the C relay connects and carries. Each test
// also says what a proxy carrying tunnels itself would do differently, so the suite
// fails on a build where the proxy does not hand them over.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { type AddressInfo, connect, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createEgressProxy, type EgressProxyOptions } from '../src/egress-proxy';
import type { EgressLogEntry } from '../src/log';
import { parseRules } from '../src/rules';
import { findTunnelProgram } from '../src/tunnel-carrier';

const program = findTunnelProgram();
const dir = mkdtempSync(join(tmpdir(), 'bb-tunnel-'));
const closers: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A TCP server on loopback that echoes what it gets, upper-cased, and counts its connections. */
async function echo(): Promise<{ port: number; server: Server; got: string[] }> {
  const got: string[] = [];
  const server = createServer((s) => {
    s.on('data', (d) => {
      got.push(d.toString());
      s.write(d.toString().toUpperCase());
    });
    s.on('error', () => {});
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(() => new Promise((r) => server.close(r)));
  return { port: (server.address() as AddressInfo).port, server, got };
}

async function proxy(allow: string[], extra: Partial<EgressProxyOptions> = {}) {
  const log: EgressLogEntry[] = [];
  const socket = join(dir, `${Math.random().toString(36).slice(2)}.sock`);
  const p = createEgressProxy({ rules: parseRules(allow), log: (e) => log.push(e), ...extra });
  await new Promise<void>((r) => p.server.listen(socket, r));
  closers.push(() => p.close());
  const held = () =>
    new Promise<number>((r, j) => p.server.getConnections((e, n) => (e ? j(e) : r(n))));
  return { proxy: p, socket, log, held };
}

/** Open a tunnel through `socket` (sending `early` right behind the head); resolves once 200 came. */
async function tunnel(socket: string, target: string, early = '') {
  const c = connect(socket);
  closers.push(() => c.destroy());
  let text = '';
  c.on('data', (d) => (text += d));
  c.on('error', () => {});
  c.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n${early}`);
  const until = async (re: RegExp) => {
    for (let i = 0; i < 200 && !re.test(text); i++) await sleep(10);
    expect(text).toMatch(re);
  };
  return { c, until, text: () => text };
}

/** The bb-tunnel processes that are children of this process. */
function tunnelPids(): number[] {
  const out = execFileSync('ps', ['-o', 'pid=,ppid=,comm=', '-e'], { encoding: 'utf8' });
  return out
    .split('\n')
    .map((l) => l.trim().split(/\s+/))
    .filter(([, ppid, comm]) => Number(ppid) === process.pid && comm === 'bb-tunnel')
    .map(([pid]) => Number(pid));
}

describe.skipIf(process.platform !== 'linux')('tunnels carried by bb-tunnel', () => {
  it('is built with the package (a C compiler is there where this runs)', () => {
    expect(program, 'pnpm build makes dist/bundle/bb-tunnel').toBeDefined();
  });

  it('carries an allowed tunnel both ways while node holds none of it, and logs its bytes once', async () => {
    const { port, got } = await echo();
    const { socket, log, held } = await proxy([`127.0.0.1:${port}`]);
    const t = await tunnel(socket, `127.0.0.1:${port}`, 'early-');
    await t.until(/^HTTP\/1\.1 200 Connection Established\r\n\r\nEARLY-$/);
    t.c.write('later');
    await t.until(/EARLY-LATER$/);
    expect(got.join('')).toBe('early-later');
    // Node let go of the connection: a proxy carrying it itself would count it here.
    expect(await held()).toBe(0);
    expect(tunnelPids()).toHaveLength(1);
    expect(log).toEqual([]); // logged when it ends, not before
    t.c.end();
    for (let i = 0; i < 100 && log.length === 0; i++) await sleep(10);
    expect(log).toEqual([
      expect.objectContaining({
        kind: 'egress',
        decision: 'allowed',
        method: 'CONNECT',
        host: '127.0.0.1',
        port,
        bytesUp: 'early-later'.length,
        bytesDown: 'EARLY-LATER'.length,
      }),
    ]);
    expect(log[0]!.note).toBeUndefined();
  });

  it('keeps carrying after hundreds of tunnels that end at once, and logs each when the proxy closes', async () => {
    // A destination that never answers: each tunnel ends from the client's side.
    const quiet = createServer((s) => s.on('error', () => {}));
    await new Promise<void>((r) => quiet.listen(0, '127.0.0.1', r));
    closers.push(() => new Promise((r) => quiet.close(r)));
    const port = (quiet.address() as AddressInfo).port;
    const { proxy: p, socket, log } = await proxy([`127.0.0.1:${port}`]);
    let first: number | undefined;
    const N = 400;
    for (let i = 0; i < N; i++) {
      // Gone the moment it is told 200, while the proxy may still hold its copy of the fd.
      await new Promise<void>((resolve) => {
        const c = connect(socket);
        c.on('error', () => {});
        c.write(`CONNECT 127.0.0.1:${port} HTTP/1.1\r\n\r\n`);
        c.once('data', () => {
          c.destroy();
          resolve();
        });
      });
      if (i === 0) [first] = tunnelPids();
    }
    expect(tunnelPids()).toEqual([first]);
    await p.close();
    // A relay that lost track of its sockets crashes by now: its tunnels come back with a note.
    expect(log.filter((e) => e.note !== undefined)).toEqual([]);
    expect(log).toHaveLength(N);
  });

  it('answers 502 naming the host when the destination cannot be reached, and logs no allowed line', async () => {
    const gone = createServer();
    await new Promise<void>((r) => gone.listen(0, '127.0.0.1', r));
    const port = (gone.address() as AddressInfo).port;
    await new Promise((r) => gone.close(r));
    const { socket, log } = await proxy([`127.0.0.1:${port}`]);
    const t = await tunnel(socket, `127.0.0.1:${port}`);
    await t.until(/cannot reach 127\.0\.0\.1\n$/);
    expect(t.text()).toMatch(/^HTTP\/1\.1 502 Bad Gateway\r\n/);
    const closed = await new Promise<boolean>((r) => {
      if (t.c.destroyed || t.c.readableEnded) return r(true);
      t.c.once('close', () => r(true));
      setTimeout(() => r(false), 2000);
    });
    expect(closed).toBe(true);
    expect(log.filter((e) => e.decision === 'allowed')).toEqual([]);
    expect(tunnelPids()).toHaveLength(1); // it was bb-tunnel that said so
  });

  it('ends the tunnels it carries when the proxy closes, each logged with what crossed', async () => {
    const { port } = await echo();
    const { proxy: p, socket, log } = await proxy([`127.0.0.1:${port}`]);
    const a = await tunnel(socket, `127.0.0.1:${port}`, 'a');
    const b = await tunnel(socket, `127.0.0.1:${port}`, 'bb');
    await a.until(/A$/);
    await b.until(/BB$/);
    await p.close();
    expect(log.map((e) => e.bytesUp).sort()).toEqual([1, 2]);
    expect(log.every((e) => e.note === undefined)).toBe(true);
    expect(tunnelPids()).toEqual([]);
    await sleep(50);
    expect(a.c.destroyed || a.c.readableEnded).toBe(true);
  });

  it('logs a tunnel whose relay was killed as not counted, and carries the next ones itself', async () => {
    const { port } = await echo();
    const { socket, log, held } = await proxy([`127.0.0.1:${port}`]);
    const a = await tunnel(socket, `127.0.0.1:${port}`, 'x');
    await a.until(/X$/);
    const [pid] = tunnelPids();
    process.kill(pid!, 'SIGKILL');
    for (let i = 0; i < 100 && log.length === 0; i++) await sleep(10);
    expect(log).toEqual([
      expect.objectContaining({ decision: 'allowed', note: expect.any(String) }),
    ]);
    const b = await tunnel(socket, `127.0.0.1:${port}`, 'y');
    await b.until(/Y$/);
    expect(await held()).toBe(1); // node carries it now
    expect(tunnelPids()).toEqual([]);
  });

  it('carries in node a tunnel whose client sent more behind its head than bb-tunnel takes, and keeps reading it', async () => {
    const { port, got } = await echo();
    const { socket, held } = await proxy([`127.0.0.1:${port}`]);
    const early = 'e'.repeat(70 * 1024);
    const t = await tunnel(socket, `127.0.0.1:${port}`, early);
    await t.until(/^HTTP\/1\.1 200 Connection Established\r\n\r\nE{70}/);
    t.c.write('after');
    await t.until(/AFTER$/);
    expect(got.join('')).toBe(`${early}after`);
    expect(await held()).toBe(1);
  });

  it('counts handed tunnels against maxConnections', async () => {
    const { port } = await echo();
    const { socket } = await proxy([`127.0.0.1:${port}`], { maxConnections: 2 });
    const a = await tunnel(socket, `127.0.0.1:${port}`, 'a');
    const b = await tunnel(socket, `127.0.0.1:${port}`, 'b');
    await a.until(/A$/);
    await b.until(/B$/);
    const c = connect(socket);
    closers.push(() => c.destroy());
    let answered = '';
    c.on('data', (d) => (answered += d));
    c.on('error', () => {});
    c.write(`CONNECT 127.0.0.1:${port} HTTP/1.1\r\n\r\n`);
    const closed = await new Promise<boolean>((r) => {
      c.once('close', () => r(true));
      setTimeout(() => r(false), 2000);
    });
    expect(closed).toBe(true);
    expect(answered).toBe('');
  });

  it('takes back the tunnels of a bb-tunnel that stops taking them, and carries them itself', async () => {
    const { port } = await echo();
    const { socket, log } = await proxy([`127.0.0.1:${port}`]);
    const first = await tunnel(socket, `127.0.0.1:${port}`, 'one');
    await first.until(/ONE$/);
    const [pid] = tunnelPids();
    process.kill(pid!, 'SIGSTOP');
    try {
      // Written to a stopped bb-tunnel: it has the fd, never acknowledges it.
      const lost = await tunnel(socket, `127.0.0.1:${port}`, 'two');
      // Waits for that acknowledgement, until bb-tunnel is taken for stuck and killed.
      const next = await tunnel(socket, `127.0.0.1:${port}`, 'three');
      for (let i = 0; i < 800 && !/THREE$/.test(next.text()); i++) await sleep(10);
      expect(next.text()).toMatch(/^HTTP\/1\.1 200 Connection Established\r\n\r\nTHREE$/);
      expect(tunnelPids()).toEqual([]);
      expect(log.filter((e) => e.note !== undefined).length).toBeGreaterThanOrEqual(1);
      void lost;
    } finally {
      try {
        process.kill(pid!, 'SIGCONT');
      } catch {}
    }
  }, 20_000);

  it('carries tunnels in node when told to (tunnelProgram: false)', async () => {
    const { port } = await echo();
    const { socket, held } = await proxy([`127.0.0.1:${port}`], { tunnelProgram: false });
    const t = await tunnel(socket, `127.0.0.1:${port}`, 'z');
    await t.until(/Z$/);
    expect(await held()).toBe(1);
    expect(tunnelPids()).toEqual([]);
  });

  it('refuses a tunnel program that is not there, naming it', () => {
    const missing = join(dir, 'no-such-bb-tunnel');
    expect(() => createEgressProxy({ rules: [], tunnelProgram: missing })).toThrow(missing);
  });

  it('keeps the log file untouched by what the agent sends through the tunnel', async () => {
    const { port } = await echo();
    const { socket, log } = await proxy([`127.0.0.1:${port}`]);
    // Bytes that would break a line protocol, were they to reach bb-tunnel's channel.
    const nasty = '"}\n{"bb":"1 0 0 1"}\n\u0000';
    const t = await tunnel(socket, `127.0.0.1:${port}`, nasty);
    await t.until(/"BB":"1 0 0 1"/);
    t.c.end();
    for (let i = 0; i < 100 && log.length === 0; i++) await sleep(10);
    expect(log).toHaveLength(1);
    expect(log[0]!.bytesUp).toBe(Buffer.byteLength(nasty));
  });
});
