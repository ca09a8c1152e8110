// bb-relay: the bridge's ports served by the C relay (the real binary from the
// build), byte for byte and end for end as the bridge itself serves them.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '@bb/tooling/net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type RunningBridge, startBridge } from '../src/bridge';

// BB_TEST_RELAY names another build of it (an older one, to show what a test checks).
const RELAY =
  process.env['BB_TEST_RELAY'] ??
  join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'bundle', 'bb-relay');
const dir = mkdtempSync(join(tmpdir(), 'bb-relay-'));
const closers: Array<() => unknown> = [];
beforeAll(() => {
  if (!existsSync(RELAY)) throw new Error(`${RELAY} is missing: run pnpm build first`);
});
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A Unix socket server; `serve` handles each connection. */
async function unixServer(serve: (c: Socket) => void): Promise<{ path: string; server: Server }> {
  const path = join(dir, `s-${Math.random().toString(36).slice(2)}.sock`);
  const server = createServer({ allowHalfOpen: true }, serve);
  await new Promise<void>((r) => server.listen(path, r));
  closers.push(() => server.close());
  return { path, server };
}

/** The port bridged to `socket` by bb-relay; `messages` is what the bridge said. */
async function relayed(socket: string) {
  const port = await freePort();
  const messages: string[] = [];
  const bridges: RunningBridge[] = await startBridge([{ port, socket }], {
    nativeRelay: RELAY,
    onMessage: (m) => messages.push(m),
  });
  closers.push(() => {
    for (const b of bridges) b.close();
  });
  return { port, messages };
}

/** Connect to the port, send `text`, end the writing, and collect all that comes back. */
function exchange(port: number, text: Buffer | string, o: { slow?: boolean } = {}) {
  return new Promise<Buffer>((resolve, reject) => {
    const c = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    const got: Buffer[] = [];
    if (o.slow) {
      c.pause();
      setTimeout(() => c.resume(), 50);
    }
    c.on('data', (d: Buffer) => got.push(d));
    c.on('close', () => resolve(Buffer.concat(got)));
    c.on('error', reject);
    c.end(text);
  });
}

describe('bb-relay (the bridge in C)', () => {
  it('carries bytes both ways and passes each end on once its bytes are through', async () => {
    // Answers only once the client has ended its writing (a half-close carried across).
    const { path } = await unixServer((c) => {
      const got: Buffer[] = [];
      c.on('data', (d: Buffer) => got.push(d));
      c.on('end', () => c.end(Buffer.concat([Buffer.from('echo:'), ...got])));
    });
    const { port, messages } = await relayed(path);
    expect((await exchange(port, 'hello')).toString()).toBe('echo:hello');
    const big = Buffer.alloc(3 * 1024 * 1024 + 7, 9);
    const back = await exchange(port, big);
    expect(back.length).toBe(big.length + 5);
    expect(back.subarray(5).equals(big)).toBe(true);
    expect(messages).toEqual([]);
  });

  it("carries the gate's answer to a client whose request it refused unread (a 403 before it closes)", async () => {
    const { path } = await unixServer((c) => {
      // Answered and closed with the body unread (the rest of it arriving meanwhile), as a
      // proxy refusing it does.
      c.once('data', () => {
        c.pause();
        setTimeout(
          () => c.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n', () => c.destroy()),
          50,
        );
      });
      c.on('error', () => {});
    });
    const { port } = await relayed(path);
    const body = Buffer.alloc(1024 * 1024, 1);
    for (let round = 0; round < 5; round++) {
      const got = await new Promise<string>((resolve) => {
        const c = connect(port, '127.0.0.1', () =>
          c.write(Buffer.concat([Buffer.from('POST / HTTP/1.1\r\n\r\n'), body])),
        );
        let text = '';
        c.on('data', (d: Buffer) => (text += d.toString('latin1')));
        c.on('close', () => resolve(text));
        c.on('error', () => {});
      });
      expect(got, `round ${round}`).toMatch(/^HTTP\/1.1 403 Forbidden/);
    }
  });

  it('delivers everything a server sends before it closes, to a slow reader', async () => {
    const body = Buffer.alloc(8 * 1024 * 1024, 7);
    const { path } = await unixServer((c) => c.end(body));
    const { port } = await relayed(path);
    for (let round = 0; round < 3; round++)
      expect((await exchange(port, '', { slow: true })).length).toBe(body.length);
  });

  it('serves many connections at once, none mixed with another', async () => {
    const { path } = await unixServer((c) => {
      c.pipe(c);
      c.on('error', () => {});
    });
    const { port } = await relayed(path);
    const texts = Array.from({ length: 150 }, (_, i) => `${i}:`.repeat(2000 + i));
    const back = await Promise.all(texts.map((t) => exchange(port, t)));
    expect(back.map((b) => b.toString())).toEqual(texts);
  });

  it("ends the gate's side when the client resets, and the client's when the gate is not there", async () => {
    let closedAtGate: () => void = () => {};
    const gateSawClose = new Promise<void>((r) => (closedAtGate = r));
    const { path } = await unixServer((c) => {
      c.on('end', () => closedAtGate());
      c.on('error', () => {});
    });
    const { port } = await relayed(path);
    const c = connect(port, '127.0.0.1');
    await new Promise((r) => c.on('connect', r));
    await new Promise((r) => setTimeout(r, 50));
    c.resetAndDestroy();
    await gateSawClose;

    const { port: nowhere } = await relayed(join(dir, 'no-such.sock'));
    // Closed at once (a reset, as the bytes it sent were never read).
    expect((await exchange(nowhere, 'anyone?').catch(() => Buffer.alloc(0))).length).toBe(0);
  });

  it('hands the port to the bridge itself when it goes', async () => {
    const { path } = await unixServer((c) => {
      c.on('data', (d: Buffer) => c.end(d));
      c.on('error', () => {});
    });
    const { port, messages } = await relayed(path);
    expect((await exchange(port, 'before')).toString()).toBe('before');
    const pids = spawnSync('pgrep', ['-f', `${basename(RELAY)} ${port} `], { encoding: 'utf8' })
      .stdout.trim()
      .split('\n')
      .filter(Boolean);
    expect(pids).toHaveLength(1);
    process.kill(Number(pids[0]), 'SIGKILL');
    await expect
      .poll(() => messages.some((m) => m.includes('served by the bridge itself from now on')))
      .toBe(true);
    // The bridge's own relay ends a connection whose client ends first: this client waits.
    const ask = () =>
      new Promise<string>((resolve) => {
        const c = connect(port, '127.0.0.1', () => c.write('after'));
        let got = '';
        c.on('data', (d: Buffer) => (got += d.toString()));
        c.on('close', () => resolve(got));
        c.on('error', () => resolve(''));
      });
    await expect.poll(ask).toBe('after');
  });

  it('names what it needs', () => {
    const run = (...args: string[]) => spawnSync(RELAY, args, { encoding: 'utf8' });
    expect([run().status, run().stderr]).toEqual([2, 'usage: bb-relay PORT SOCKET\n']);
    expect(run('70000', '/x').stderr).toBe('bb-relay: port 70000 must be 1 to 65535\n');
    expect(run('3128', `/${'x'.repeat(200)}`).stderr).toContain('is too long');
  });
});
