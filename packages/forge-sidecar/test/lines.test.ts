// The sidecar's line transport (what ForgeSidecarClient speaks): newline-delimited
// JSON-RPC on the same socket as HTTP, told apart by a connection's first byte.
import { connect } from 'node:net';
import { isBbError } from '@bb/errors';
import { closeGiteaPools } from '@bb/forge';
import { MemoryForge, MemoryForgeWorld } from '@bb/forge/testing';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { ForgeSidecarClient } from '../src/client';
import { type Harness, rawPost, startHarness } from './harness';

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});
afterAll(() => closeGiteaPools());

/** Send `text` on one connection; the lines it answers until `want` of them came or it closed. */
function lines(socketPath: string, text: string | Buffer, want: number): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const c = connect(socketPath);
    let got = '';
    const done = () => {
      c.destroy();
      resolve(got.split('\n').filter(Boolean));
    };
    c.on('data', (d: Buffer) => {
      got += d.toString();
      if (got.split('\n').filter(Boolean).length >= want) done();
    });
    c.on('close', done);
    c.on('error', reject);
    c.write(text);
  });
}

describe('the line transport', () => {
  it('answers each line on one connection, by id, beside HTTP on the same socket', async () => {
    h = await startHarness();
    const sock = h.env['BB_SIDECAR_SOCKET']!;
    const out = await lines(
      sock,
      [
        '{"jsonrpc":"2.0","id":1,"method":"read_issue","params":{"number":1}}',
        'not json',
        '{"jsonrpc":"2.0","method":"read_issue","params":{"number":1}}',
        '[{"jsonrpc":"2.0","id":"a","method":"read_issue","params":{"number":1}},{"jsonrpc":"2.0","id":"b","method":"nope"}]',
        '{"jsonrpc":"2.0","id":2,"method":"post_comment","params":{"number":99,"body":"x"}}',
        '',
      ].join('\n'),
      4,
    );
    const answers = out.map((l) => JSON.parse(l) as unknown);
    expect(answers).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ id: 1, result: expect.objectContaining({ number: 1 }) }),
        expect.objectContaining({ id: null, error: expect.objectContaining({ code: -32700 }) }),
        [
          expect.objectContaining({ id: 'a', result: expect.objectContaining({ number: 1 }) }),
          expect.objectContaining({ id: 'b', error: expect.objectContaining({ code: -32601 }) }),
        ],
        expect.objectContaining({
          id: 2,
          error: expect.objectContaining({
            data: expect.objectContaining({ code: 'SCOPE_DENIED' }),
          }),
        }),
      ]),
    );
    // The notification got no answer: four lines for five requests and one bad line.
    expect(answers).toHaveLength(4);
    // HTTP still works on the same socket.
    const http = await rawPost(
      sock,
      '{"jsonrpc":"2.0","id":7,"method":"read_issue","params":{"number":1}}',
    );
    expect(JSON.parse(http.text)).toMatchObject({ id: 7, result: { number: 1 } });
  });

  it('ends a connection whose line is over 1 MiB, saying why, and keeps serving others', async () => {
    h = await startHarness();
    const sock = h.env['BB_SIDECAR_SOCKET']!;
    const big = `{"jsonrpc":"2.0","id":1,"method":"post_comment","params":{"number":1,"body":"${'x'.repeat(1024 * 1024 + 10)}"}}\n`;
    const out = await lines(sock, big, 1);
    expect(JSON.parse(out[0]!)).toMatchObject({
      error: { code: -32600, message: expect.stringMatching(/over 1048576 bytes/) },
    });
    expect((await h.client.readIssue(1)).number).toBe(1);
  });

  it('the client matches concurrent answers on few connections, and says when the sidecar goes mid-call', async () => {
    class Slow extends MemoryForge {
      override async readIssue(n: number) {
        await new Promise((r) => setTimeout(r, n === 2 ? 400 : 20));
        return super.readIssue(n);
      }
    }
    const world = new MemoryForgeWorld();
    world.addIssue('acme', 'widgets', { title: 'one', author: 'alice' });
    world.addIssue('acme', 'widgets', { title: 'two', author: 'alice' });
    h = await startHarness({
      makeForge: () => new Slow({ owner: 'acme', repo: 'widgets', as: 'bb-claude', world }),
    });
    const client = new ForgeSidecarClient({
      socketPath: h.env['BB_SIDECAR_SOCKET']!,
      connections: 2,
    });
    try {
      // Answers come back out of order (issue 2 is slow): each reaches its own caller.
      const got = await Promise.all(
        [2, 1, 1, 2, 1, 1, 1, 1].map(async (n) => [n, (await client.readIssue(n)).title]),
      );
      expect(got).toEqual(got.map(([n]) => [n, n === 1 ? 'one' : 'two']));
      // The sidecar's connection goes while a call waits: the caller hears so.
      const pending = client.readIssue(2);
      await new Promise((r) => setTimeout(r, 50));
      await h.sidecar.close();
      const err = await pending.then(
        () => undefined,
        (e: unknown) => e,
      );
      // Closing waits for calls in flight: this one was answered, or its connection went.
      expect(err === undefined || isBbError(err, 'FORGE_UNAVAILABLE')).toBe(true);
    } finally {
      await client.close();
    }
  });

  it('the client waits for a sidecar that is not up yet, and names one that never comes', async () => {
    const client = new ForgeSidecarClient({
      socketPath: '/tmp/bb-no-such-dir/forge.sock',
      connectWaitMs: 100,
    });
    const err = await client.readIssue(1).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isBbError(err, 'FORGE_UNAVAILABLE')).toBe(true);
    expect(String(err)).toMatch(
      /cannot reach the forge sidecar at \/tmp\/bb-no-such-dir\/forge\.sock/,
    );
    await client.close();
  });

  it('a client that half-closes after its line still gets the answer', async () => {
    h = await startHarness();
    const answer = await new Promise<string>((resolve, reject) => {
      const c = connect(h!.env['BB_SIDECAR_SOCKET']!);
      let got = '';
      c.on('data', (d: Buffer) => (got += d.toString()));
      c.on('close', () => resolve(got));
      c.on('error', reject);
      c.end('{"jsonrpc":"2.0","id":5,"method":"read_issue","params":{"number":1}}\n');
    });
    expect(JSON.parse(answer)).toMatchObject({ id: 5, result: { number: 1 } });
  });
});

describe('the line transport against a hostile client', () => {
  it('holds bounded memory for a client that sends and never reads its answers', async () => {
    h = await startHarness();
    const before = process.memoryUsage().rss;
    const c = connect(h.env['BB_SIDECAR_SOCKET']!);
    c.on('error', () => {}); // the sidecar may end it
    c.pause(); // never reads what it is sent
    await new Promise((r) => c.once('connect', r));
    // A line connection (its first byte opens JSON), then 8 MiB of one-byte lines: each
    // costs the sidecar a parse-error answer ~60x its size.
    c.write('{}\n');
    const chunk = Buffer.from('x\n'.repeat(32 * 1024));
    let sent = 0;
    const end = Date.now() + 3000;
    while (sent < 8 * 1024 * 1024 && Date.now() < end && !c.destroyed) {
      if (!c.write(chunk))
        await Promise.race([
          new Promise((r) => c.once('drain', r)),
          new Promise((r) => setTimeout(r, 200)),
        ]);
      sent += chunk.length;
    }
    const grown = (process.memoryUsage().rss - before) / 1024 ** 2;
    c.destroy();
    expect(grown, `the sidecar grew ${grown.toFixed(0)} MiB`).toBeLessThan(64);
    // Others are still served.
    expect((await h.client.readIssue(1)).number).toBe(1);
  });

  it('runs at most 16 calls of one connection at once, however many lines arrive together', async () => {
    let now = 0;
    let most = 0;
    class Counting extends MemoryForge {
      override async readIssue(n: number) {
        most = Math.max(most, ++now);
        await new Promise((r) => setTimeout(r, 20));
        now--;
        return super.readIssue(n);
      }
    }
    const world = new MemoryForgeWorld();
    world.addIssue('acme', 'widgets', { title: 'one', author: 'alice' });
    h = await startHarness({
      makeForge: () => new Counting({ owner: 'acme', repo: 'widgets', as: 'bb-claude', world }),
    });
    const many = Array.from(
      { length: 200 },
      (_, i) => `{"jsonrpc":"2.0","id":${i},"method":"read_issue","params":{"number":1}}`,
    ).join('\n');
    const out = await lines(h.env['BB_SIDECAR_SOCKET']!, `${many}\n`, 200);
    expect(out).toHaveLength(200);
    expect(most).toBeLessThanOrEqual(16);
  });

  it('closes promptly with a connection that never says anything open, and refuses new ones meanwhile', async () => {
    h = await startHarness();
    const sock = h.env['BB_SIDECAR_SOCKET']!;
    const silent = connect(sock);
    await new Promise((r) => silent.once('connect', r));
    const began = Date.now();
    await h.sidecar.close();
    expect(Date.now() - began).toBeLessThan(2000);
    expect(
      silent.destroyed || (await new Promise((r) => silent.once('close', () => r(true)))),
    ).toBe(true);
  });
});
