import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { type AddressInfo, connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '@bb/tooling/net';
import { afterEach, describe, expect, it } from 'vitest';
import { parseBridgeArgs, startBridge, startGateLink, writeHomeFiles } from '../src/bridge';

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
    const port = await freePort();
    const bridges = await startBridge([{ port, socket: sock }]);
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

/** A Unix socket server that answers each connection with `name:` and what it read, then ends. */
async function surface(name: string): Promise<{ path: string; reached: () => number }> {
  const path = join(dir, `${name}-${Math.random().toString(36).slice(2)}.sock`);
  let reached = 0;
  const server = createServer((c) => {
    reached++;
    let got = '';
    c.on('data', (d: Buffer) => {
      got += d.toString();
      if (got.endsWith('\n')) c.end(`${name}:${got}`);
    });
  });
  await new Promise<void>((r) => server.listen(path, r));
  closers.push(() => server.close());
  return { path, reached: () => reached };
}

/** Send `text` on a fresh connection to `to` and read until the other side ends. */
function exchange(to: string | number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = typeof to === 'number' ? connect(to, '127.0.0.1') : connect(to);
    let got = '';
    c.on('data', (d: Buffer) => (got += d.toString()));
    c.on('close', () => resolve(got));
    c.on('error', reject);
    c.write(text);
  });
}

const KEY = 'ab'.repeat(24);

describe("a pod's gate on one TCP port (startGateLink) and the agent's bridge to it", () => {
  it('carries each connection to the surface it names with the key, bytes sent with it included', async () => {
    const forge = await surface('forge');
    const egress = await surface('egress');
    const link = await startGateLink({
      port: 0,
      host: '127.0.0.1',
      surfaces: { forge: forge.path, egress: egress.path },
      key: KEY,
    });
    const port = (link.address() as AddressInfo).port;
    const local = join(dir, `agent-${Date.now()}`, 'forge.sock');
    const bridges = await startBridge(
      parseBridgeArgs([`${local}=gate:forge`], { address: `127.0.0.1:${port}`, key: KEY }),
    );
    closers.push(() => {
      link.close();
      for (const b of bridges) b.close();
    });
    expect(await exchange(local, '{"method":"read_issue"}\n')).toBe(
      'forge:{"method":"read_issue"}\n',
    );
    // A client of the port itself (the preamble and its first bytes in one write).
    expect(await exchange(port, `bb-gate egress ${KEY}\nCONNECT x:443\n`)).toBe(
      'egress:CONNECT x:443\n',
    );
    expect([forge.reached(), egress.reached()]).toEqual([1, 1]);
  });

  it('closes a connection without the key, naming no surface it serves, or with too long a first line, reaching nothing', async () => {
    const forge = await surface('forge');
    const link = await startGateLink({
      port: 0,
      host: '127.0.0.1',
      surfaces: { forge: forge.path },
      key: KEY,
    });
    closers.push(() => link.close());
    const port = (link.address() as AddressInfo).port;
    for (const first of [
      'bb-gate forge\n',
      `bb-gate forge ${'cd'.repeat(24)}\n`,
      `bb-gate forge ${KEY.slice(0, -1)}\n`,
      `bb-gate forge ${KEY} extra\n`,
      `bb-gate supervise ${KEY}\n`,
      `bb-gate constructor ${KEY}\n`,
      `bb-gate __proto__ ${KEY}\n`,
      'GET / HTTP/1.1\n',
      `bb-gate forge ${KEY}${' '.repeat(80)}\n`,
      `bb-gate ${'f'.repeat(200)}`,
    ])
      expect(await exchange(port, first), first).toBe('');
    expect(forge.reached()).toBe(0);
  });

  it('parses its mappings, and names what a bad one must be', () => {
    const gate = { address: '10.0.0.9:7070', key: KEY };
    expect(parseBridgeArgs(['3128=/run/bb/egress.sock'])).toEqual([
      { listen: 3128, to: { socket: '/run/bb/egress.sock' } },
    ]);
    expect(
      parseBridgeArgs(
        [
          '/tmp/bb/forge.sock=gate:forge',
          '3129=gate://10.0.0.7:7070/credentials',
          '3128=gate://[fd00::7]:7070/egress',
        ],
        gate,
      ),
    ).toEqual([
      {
        listen: '/tmp/bb/forge.sock',
        to: { gate: { host: '10.0.0.9', port: 7070 }, surface: 'forge', key: KEY },
      },
      {
        listen: 3129,
        to: { gate: { host: '10.0.0.7', port: 7070 }, surface: 'credentials', key: KEY },
      },
      { listen: 3128, to: { gate: { host: 'fd00::7', port: 7070 }, surface: 'egress', key: KEY } },
    ]);
    expect(parseBridgeArgs(['3128=gate:egress'], { ...gate, address: '[fd00::9]:7070' })).toEqual([
      { listen: 3128, to: { gate: { host: 'fd00::9', port: 7070 }, surface: 'egress', key: KEY } },
    ]);
    for (const bad of [
      '3128',
      '0=/x.sock',
      '70000=/x.sock',
      'x=/y.sock',
      '3128=gate:shell',
      '3128=relative.sock',
    ])
      expect(() => parseBridgeArgs([bad], gate), bad).toThrow(/must be PORT=/);
    expect(() => parseBridgeArgs(['3128=gate:forge'], { key: KEY })).toThrow(/must be PORT=/);
    for (const address of ['nohost', 'h:0', 'h:99999', '[::1:7070'])
      expect(() => parseBridgeArgs(['3128=gate:forge'], { ...gate, address }), address).toThrow(
        /must be HOST:PORT/,
      );
    expect(() => parseBridgeArgs(['3128=gate://h:0/forge'], gate)).toThrow(/must be HOST:PORT/);
    for (const key of [undefined, '', 'short', 'ZZ'.repeat(24)])
      expect(() => parseBridgeArgs(['3128=gate:forge'], { ...gate, key }), String(key)).toThrow(
        /needs the gate's key/,
      );
  });
});

describe("a pod's turn files (writeHomeFiles)", () => {
  it('writes each file under the home, and refuses one that would leave it', () => {
    const home = mkdtempSync(join(dir, 'home-'));
    writeHomeFiles(home, JSON.stringify({ '.bb/script.json': '{"turns":[]}', 'a.txt': 'a' }));
    expect(readFileSync(join(home, '.bb', 'script.json'), 'utf8')).toBe('{"turns":[]}');
    expect(readFileSync(join(home, 'a.txt'), 'utf8')).toBe('a');
    for (const bad of [
      { '../x': 'x' },
      { '/etc/x': 'x' },
      { 'a/../../x': 'x' },
      { '.': 'x' },
      { a: 1 },
    ])
      expect(() => writeHomeFiles(home, JSON.stringify(bad)), JSON.stringify(bad)).toThrow(
        /must be a path inside the home/,
      );
    for (const bad of ['[]', 'nope', 'null'])
      expect(() => writeHomeFiles(home, bad)).toThrow(/must be a JSON object/);
    expect(() => writeHomeFiles('relative', '{}')).toThrow(/absolute/);
    expect(existsSync(join(dir, 'x'))).toBe(false);
  });
});
