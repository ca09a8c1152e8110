import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { listenUnixSocket } from './socket';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('listenUnixSocket', () => {
  it('serves at the path with its mode, and leaves no other name behind', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bb-sock-'));
    dirs.push(dir);
    const server = createServer((s) => s.end('hello'));
    await listenUnixSocket(server, join(dir, 'x.sock'), { mode: 0o600 });
    expect(readdirSync(dir)).toEqual(['x.sock']);
    expect(statSync(join(dir, 'x.sock')).mode & 0o777).toBe(0o600);
    const got = await new Promise<string>((resolve) => {
      const c = connect(join(dir, 'x.sock'));
      c.on('data', (d) => resolve(String(d)));
    });
    expect(got).toBe('hello');
    await new Promise((r) => server.close(r));
  });

  it('when the path cannot be taken, closes the server and leaves nothing behind', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bb-sock-'));
    dirs.push(dir);
    mkdirSync(join(dir, 'x.sock', 'inside'), { recursive: true });
    const server = createServer();
    await expect(listenUnixSocket(server, join(dir, 'x.sock'), { mode: 0o600 })).rejects.toThrow();
    expect(server.listening).toBe(false);
    expect(readdirSync(dir)).toEqual(['x.sock']);
  });
});
