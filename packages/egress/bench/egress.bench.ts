// Throughput through the egress proxy vs direct, in one run, against a loopback
// server: 1 MiB downloads through a CONNECT tunnel, and 1,000 small absolute-form
// requests. Goal: >= 0.8x direct for each.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { reportBench, spawnNodeOn, waitForPath } from '@bb/tooling/bench';

const MiB = Buffer.alloc(1024 * 1024, 7);
const server = createServer((req, res) => {
  if (req.url === '/big') res.writeHead(200, { 'content-length': MiB.length }).end(MiB);
  else res.writeHead(200, { 'content-length': 2 }).end('ok');
});
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const port = (server.address() as AddressInfo).port;
const dir = mkdtempSync(join(tmpdir(), 'bb-egress-bench-'));
const socket = join(dir, 'egress.sock');
// The proxy runs as its own process (the bundled bb-egress), as it does beside a bottle.
const bundle = join(
  dirname(fileURLToPath(import.meta.url)),
  '..',
  'dist',
  'bundle',
  'bb-egress.mjs',
);
if (!existsSync(bundle)) throw new Error(`${bundle} is missing: run pnpm build first`);
writeFileSync(join(dir, 'rules.json'), JSON.stringify({ allow: [`localhost:${port}`] }));
writeFileSync(join(dir, 'routes.json'), JSON.stringify({ routes: [] }));
const child = spawn(process.execPath, [bundle], {
  env: {
    PATH: process.env['PATH'],
    BB_EGRESS_RULES: join(dir, 'rules.json'),
    BB_CRED_ROUTES: join(dir, 'routes.json'),
    BB_EGRESS_SOCKET: socket,
    BB_CRED_SOCKET: join(dir, 'cred.sock'),
    BB_EGRESS_LOG: join(dir, 'egress.jsonl'),
  },
  stdio: 'ignore',
});
await waitForPath(join(dir, 'cred.sock'));

// The floor under any proxy that is its own process: a blind relay (a Unix socket
// piped to the server's port, nothing parsed, checked or logged) in another node
// process. Measured in the same rounds, so the gap between it and the proxy is
// what the proxy's own work costs.
const relaySocket = join(dir, 'relay.sock');
const relay = await spawnNodeOn(
  relaySocket,
  `const net = require('node:net');
net.createServer((c) => {
  const u = net.connect(${port}, '127.0.0.1');
  c.pipe(u);
  u.pipe(c);
  c.on('error', () => u.destroy());
  u.on('error', () => c.destroy());
}).listen(${JSON.stringify(relaySocket)});`,
);

type Via = 'direct' | 'proxy' | 'relay';
// A raw GET of /big over a socket; resolves when the whole body arrived.
function bigVia(via: Via): Promise<void> {
  const tunnel = via === 'proxy';
  return new Promise((resolve, reject) => {
    const s =
      via === 'direct'
        ? connect(port, '127.0.0.1')
        : connect(via === 'proxy' ? socket : relaySocket);
    let got = 0;
    let established = !tunnel;
    const ask = () =>
      s.write(`GET /big HTTP/1.1\r\nHost: localhost:${port}\r\nConnection: close\r\n\r\n`);
    s.on('connect', () =>
      tunnel
        ? s.write(`CONNECT localhost:${port} HTTP/1.1\r\nHost: localhost:${port}\r\n\r\n`)
        : ask(),
    );
    s.on('data', (d: Buffer) => {
      if (!established) {
        if (d.toString().startsWith('HTTP/1.1 200')) {
          established = true;
          ask();
        }
        return;
      }
      got += d.length;
    });
    s.on('close', () => (got >= MiB.length ? resolve() : reject(new Error(`short read ${got}`))));
    s.on('error', reject);
  });
}
function smallVia(via: Via): Promise<void> {
  return new Promise((resolve, reject) => {
    const opts =
      via === 'proxy'
        ? {
            socketPath: socket,
            path: `http://localhost:${port}/s`,
            headers: { host: `localhost:${port}` },
          }
        : via === 'relay'
          ? { socketPath: relaySocket, path: '/s', headers: { host: `localhost:${port}` } }
          : { host: '127.0.0.1', port, path: '/s', headers: { host: `localhost:${port}` } };
    request(opts, (res) => {
      res.resume();
      res.on('end', () => resolve());
    })
      .on('error', reject)
      .end();
  });
}
async function time(fn: () => Promise<void>, n: number): Promise<number> {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await fn();
  return Number(process.hrtime.bigint() - t0) / 1e9;
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
await time(() => bigVia('proxy'), 5);
await time(() => smallVia('proxy'), 100);
await time(() => bigVia('relay'), 5);
const big: number[] = [];
const small: number[] = [];
const bigRelay: number[] = [];
const smallRelay: number[] = [];
for (let r = 0; r < 5; r++) {
  const d = await time(() => bigVia('direct'), 20);
  const p = await time(() => bigVia('proxy'), 20);
  const b = await time(() => bigVia('relay'), 20);
  big.push(d / p); // throughput ratio = direct time / proxy time
  bigRelay.push(d / b);
  const ds = await time(() => smallVia('direct'), 200);
  const ps = await time(() => smallVia('proxy'), 200);
  const bs = await time(() => smallVia('relay'), 200);
  small.push(ds / ps);
  smallRelay.push(ds / bs);
}
const bigDirectMBps = 20 / (await time(() => bigVia('direct'), 20));
const r2 = (x: number) => Math.round(x * 100) / 100;
reportBench({
  name: 'egress',
  metric: 'throughput of 1 MiB transfers via the proxy (CONNECT tunnel) vs direct, MiB/s',
  ours: bigDirectMBps * median(big),
  baseline: bigDirectMBps,
  goal: 0.8,
  higherIsBetter: true,
  extra: { blindRelayRatio: r2(median(bigRelay)) },
});
reportBench({
  name: 'egress-small',
  metric: '1,000 small requests via the proxy vs direct, throughput ratio',
  ours: median(small),
  baseline: 1,
  goal: 0.8,
  higherIsBetter: true,
  extra: {
    note: 'ours is the median per-round ratio direct time / proxy time',
    blindRelayRatio: r2(median(smallRelay)),
  },
});
child.kill('SIGTERM');
relay.kill();
await new Promise((r) => child.on('exit', r));
server.close();
rmSync(dir, { recursive: true, force: true });
