import { mkdtempSync, rmSync } from 'node:fs';
import { type AddressInfo, connect, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startBridge } from '../src/bridge';

const dir = mkdtempSync(join(tmpdir(), 'bb-bridge-'));
const closers: Array<() => void> = [];
afterEach(() => {
  for (const c of closers.splice(0)) c();
});

describe('the in-bottle bridge (TCP to a Unix socket)', () => {
  it('delivers every byte a server sends before it closes, however much is still in flight', async () => {
    const sock = join(dir, `big-${Date.now()}.sock`);
    const body = Buffer.alloc(8 * 1024 * 1024, 7);
    // Writes everything at once and closes: the last bytes are still queued when it goes.
    const server = createServer((c) => c.end(body));
    await new Promise<void>((r) => server.listen(sock, r));
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const port = (probe.address() as AddressInfo).port;
    await new Promise((r) => probe.close(r));
    const bridges: Server[] = await startBridge([{ port, socket: sock }]);
    closers.push(() => {
      for (const b of bridges) b.close();
      server.close();
    });
    for (let round = 0; round < 5; round++) {
      const got = await new Promise<number>((resolve, reject) => {
        const c = connect(port, '127.0.0.1');
        let n = 0;
        // A slow reader: the bridge has to hold bytes while the server has already closed.
        c.pause();
        setTimeout(() => c.resume(), 50);
        c.on('data', (d: Buffer) => (n += d.length));
        c.on('close', () => resolve(n));
        c.on('error', reject);
      });
      expect(got).toBe(body.length);
    }
  });
});

process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
