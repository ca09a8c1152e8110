// Throughput of the path a bottle's agent really uses - its in-bottle bridge on
// 127.0.0.1 (bb-relay, the bridge's relay in C) to the egress proxy's Unix socket,
// then the proxy - against, in the same run, two blind relays in C in the same places
// (bb-relay from TCP to a Unix socket, the same source built the other way from the
// socket to the server: nothing parsed, checked or logged), the floor. Against a loopback server: 1 MiB downloads
// through a CONNECT tunnel, and small absolute-form requests. Goal: >= 0.9x that
// floor. Reported beside it: the floor of any CONNECT proxy (the same two C relays,
// the second answering the CONNECT head with 200 unchecked: the client's extra round
// trip is in it), the proxy carrying its tunnels in Node (BB_TUNNEL=), one blind relay
// between client and server (the floor of any design with one process in the path),
// the bridge relaying in Node (a bottle without bb-relay), direct (no process between)
// and the proxy alone.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { benchRounds, killOnExit, reportBench, spawnNodeOn, waitForPath } from '@bb/tooling/bench';
import { freePort } from '@bb/tooling/net';

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
const bundle = fileURLToPath(new URL('../dist/bundle/bb-egress.mjs', import.meta.url));
for (const f of [bundle, join(dirname(bundle), 'bb-relay')])
  if (!existsSync(f)) throw new Error(`${f} is missing: run pnpm build first`);
// The target is listed by its address: the proxy lets a loopback address through only when a rule names it.
writeFileSync(join(dir, 'rules.json'), JSON.stringify({ allow: [`127.0.0.1:${port}`] }));
writeFileSync(join(dir, 'routes.json'), JSON.stringify({ routes: [] }));
/** The bundled bb-egress on `egress` (BB_TUNNEL from `tunnel`); resolves once it listens. */
async function startProxy(egress: string, name: string, tunnel?: string) {
  const child = killOnExit(
    spawn(
      process.execPath,
      [...(process.env['BB_PROF'] ? ['--cpu-prof', '--cpu-prof-dir=/tmp/egprof'] : []), bundle],
      {
        env: {
          PATH: process.env['PATH'],
          BB_EGRESS_RULES: join(dir, 'rules.json'),
          BB_CRED_ROUTES: join(dir, 'routes.json'),
          BB_EGRESS_SOCKET: egress,
          BB_CRED_SOCKET: join(dir, `${name}-cred.sock`),
          BB_EGRESS_LOG: join(dir, `${name}.jsonl`),
          ...(tunnel === undefined ? {} : { BB_TUNNEL: tunnel }),
        },
        stdio: 'ignore',
      },
    ),
  );
  await waitForPath(join(dir, `${name}-cred.sock`));
  return child;
}
const child = await startProxy(socket, 'proxy');
// The same proxy carrying its tunnels in Node, as it does where bb-tunnel was not built.
const nodeTunnelSocket = join(dir, 'node-tunnels.sock');
const nodeTunnels = await startProxy(nodeTunnelSocket, 'node-tunnels', '');

/**
 * A blind relay in its own node process (nothing parsed, checked or logged): each
 * connection on `listen` (a Unix socket path, or a TCP port on 127.0.0.1) piped to
 * `to` (a socket path, or the server's port). Resolves once it listens.
 */
async function blindRelay(listen: string | number, to: string | number, name: string) {
  const ready = join(dir, `${name}.ready`);
  const target = typeof to === 'string' ? JSON.stringify(to) : `${to}, '127.0.0.1'`;
  const at = typeof listen === 'string' ? JSON.stringify(listen) : `${listen}, '127.0.0.1'`;
  return spawnNodeOn(
    ready,
    `const net = require('node:net');
net.createServer((c) => {
  const u = net.connect(${target});
  c.pipe(u);
  u.pipe(c);
  c.on('error', () => u.destroy());
  u.on('error', () => c.destroy());
}).listen(${at}, () => require('node:fs').writeFileSync(${JSON.stringify(ready)}, ''));`,
  );
}

/**
 * A blind relay in C: bb-relay itself (TCP port -> Unix socket), or, `floor`, the same
 * source built the other way round (Unix socket -> TCP port on 127.0.0.1). Resolves
 * once it says it is ready.
 */
async function cRelay(bin: string, args: string[]) {
  const child = killOnExit(spawn(bin, args, { stdio: ['ignore', 'pipe', 'inherit'] }));
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`${bin} ${args.join(' ')} exited ${code}`)));
  });
  return child;
}
const relayBin = join(dirname(bundle), 'bb-relay');
/** bb-relay.c built as a floor relay (`defines` say which), into the bench's directory. */
function buildFloor(name: string, defines: string[]): string {
  const out = join(dir, name);
  const source = fileURLToPath(new URL('../native/bb-relay.c', import.meta.url));
  const cc = spawnSync(process.env['CC'] || 'cc', ['-O2', ...defines, '-o', out, source], {
    stdio: 'inherit',
  });
  if (cc.status !== 0)
    throw new Error(
      `the floor relay (native/bb-relay.c, ${defines.join(' ')}) did not build: it needs a C compiler`,
    );
  return out;
}
const floorBin = buildFloor('bb-relay-floor', ['-DBB_RELAY_FLOOR']);
const connectFloorBin = buildFloor('bb-relay-floor-connect', [
  '-DBB_RELAY_FLOOR',
  '-DBB_RELAY_FLOOR_CONNECT',
]);

// The floor under any proxy that is its own process: a blind relay from a Unix socket
// to the server's port, the same C relay as the bridge's. Measured in the same rounds,
// so the gap between it and the proxy is what the proxy's own work costs.
const relaySocket = join(dir, 'relay.sock');
const relay = await cRelay(floorBin, [relaySocket, String(port)]);
// The floor of any CONNECT proxy: the same, its second relay answering the CONNECT unchecked.
const connectFloorSocket = join(dir, 'connect-floor.sock');
const connectFloor = await cRelay(connectFloorBin, [connectFloorSocket, String(port)]);

// The bridge, as in a bottle: the bundled bb-bridge from a TCP port to the proxy's socket;
// and the floor's first hop, a blind TCP relay to the blind Unix relay.
const bridgeBundle = join(dirname(bundle), 'bb-bridge.mjs');
/**
 * The bundled bb-bridge from a free TCP port to `to`, as in a bottle (its ports served
 * by bb-relay, or, with `inNode`, by itself); resolves once it listens.
 */
async function bridgeTo(to: string, name: string, inNode = false) {
  const port = await freePort();
  const ready = join(dir, `${name}.ready`);
  const child = killOnExit(
    spawn(process.execPath, [bridgeBundle, `${port}=${to}`], {
      env: {
        PATH: process.env['PATH'],
        BB_BRIDGE_READY: ready,
        ...(inNode ? { BB_RELAY: '' } : {}),
      },
      stdio: 'ignore',
    }),
  );
  await waitForPath(ready);
  return { port, child };
}
const { port: bridgePort, child: bridge } = await bridgeTo(socket, 'bridge');
const floorPort = await freePort();
// The floor's first hop is bb-relay, the very relay the bridge runs.
const floorRelay = await cRelay(relayBin, [String(floorPort), relaySocket]);

const connectFloorPort = await freePort();
const connectFloorRelay = await cRelay(relayBin, [String(connectFloorPort), connectFloorSocket]);
const { port: nodeTunnelPort, child: nodeTunnelBridge } = await bridgeTo(
  nodeTunnelSocket,
  'node-tunnels-bridge',
);

// The bridge relaying in Node, and one blind relay from a TCP port to the server.
const { port: nodeBridgePort, child: nodeBridge } = await bridgeTo(socket, 'node-bridge', true);
const onePort = await freePort();
const oneRelay = await blindRelay(onePort, port, 'one');

type Via =
  | 'direct'
  | 'proxy'
  | 'relay'
  | 'bridge'
  | 'floor'
  | 'connect-floor'
  | 'node-tunnels'
  | 'node-bridge'
  | 'one';
/** The TCP port on 127.0.0.1 a path starts at (the others start at a Unix socket). */
const ports: Partial<Record<Via, number>> = {
  bridge: bridgePort,
  floor: floorPort,
  'connect-floor': connectFloorPort,
  'node-tunnels': nodeTunnelPort,
};
// A raw GET of /big over a socket (in a tunnel it opens first on the paths that
// take CONNECT); resolves when the whole body arrived.
function bigVia(via: Via): Promise<void> {
  const tunnel = via !== 'direct' && via !== 'relay' && via !== 'floor';
  return new Promise((resolve, reject) => {
    const s =
      via === 'direct'
        ? connect(port, '127.0.0.1')
        : ports[via] !== undefined
          ? connect(ports[via]!, '127.0.0.1')
          : connect(via === 'proxy' ? socket : relaySocket);
    let got = 0;
    let established = !tunnel;
    const ask = () =>
      s.write(`GET /big HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: close\r\n\r\n`);
    s.on('connect', () =>
      tunnel
        ? s.write(`CONNECT 127.0.0.1:${port} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`)
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
    s.on('close', () =>
      got >= MiB.length ? resolve() : reject(new Error(`short read via ${via}: ${got} bytes`)),
    );
    s.on('error', reject);
  });
}
function smallVia(via: Via): Promise<void> {
  return new Promise((resolve, reject) => {
    const opts =
      via === 'bridge' || via === 'node-bridge'
        ? {
            host: '127.0.0.1',
            port: via === 'bridge' ? bridgePort : nodeBridgePort,
            path: `http://127.0.0.1:${port}/s`,
            headers: { host: `127.0.0.1:${port}` },
          }
        : via === 'floor' || via === 'one'
          ? {
              host: '127.0.0.1',
              port: via === 'floor' ? floorPort : onePort,
              path: '/s',
              headers: { host: `127.0.0.1:${port}` },
            }
          : via === 'proxy'
            ? {
                socketPath: socket,
                path: `http://127.0.0.1:${port}/s`,
                headers: { host: `127.0.0.1:${port}` },
              }
            : via === 'relay'
              ? { socketPath: relaySocket, path: '/s', headers: { host: `127.0.0.1:${port}` } }
              : { host: '127.0.0.1', port, path: '/s', headers: { host: `127.0.0.1:${port}` } };
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
await time(() => bigVia('bridge'), 5);
await time(() => bigVia('connect-floor'), 5);
await time(() => bigVia('node-tunnels'), 5);
await time(() => smallVia('bridge'), 100);
await time(() => smallVia('floor'), 100);
await time(() => smallVia('node-bridge'), 100);
await time(() => smallVia('one'), 100);
const big: number[] = [];
const small: number[] = [];
const bigRelay: number[] = [];
const smallRelay: number[] = [];
// The real path against its floor, per round: floor time / bridge time.
const bigPath: number[] = [];
const bigConnectFloor: number[] = [];
const bigNodeTunnels: number[] = [];
const smallPath: number[] = [];
const nodeBridgePath: number[] = [];
const onePath: number[] = [];
const floorUs: number[] = [];
const oursUs: number[] = [];
const SMALL = 200;
// Floor and ours alternate in small blocks within each round, so a drift of the
// machine (another process, the CPU's clock) weighs on both alike.
async function interleaved<K extends string>(
  runs: Record<K, () => Promise<void>>,
  blocks: number,
  per: number,
): Promise<Record<K, number>> {
  const total = {} as Record<K, number>;
  for (const k of Object.keys(runs) as K[]) total[k] = 0;
  for (let b = 0; b < blocks; b++)
    for (const k of Object.keys(runs) as K[]) total[k] += await time(runs[k], per);
  return total;
}
for (let r = 0; r < benchRounds(9, 2); r++) {
  const bigRound = await interleaved(
    {
      floor: () => bigVia('floor'),
      bridge: () => bigVia('bridge'),
      connectFloor: () => bigVia('connect-floor'),
      nodeTunnels: () => bigVia('node-tunnels'),
    },
    4,
    5,
  );
  bigPath.push(bigRound.floor / bigRound.bridge);
  bigConnectFloor.push(bigRound.connectFloor / bigRound.bridge);
  bigNodeTunnels.push(bigRound.floor / bigRound.nodeTunnels);
  const t = await interleaved(
    {
      floor: () => smallVia('floor'),
      bridge: () => smallVia('bridge'),
      nodeBridge: () => smallVia('node-bridge'),
      one: () => smallVia('one'),
    },
    SMALL / 20,
    20,
  );
  smallPath.push(t.floor / t.bridge);
  nodeBridgePath.push(t.floor / t.nodeBridge);
  onePath.push(t.one / t.bridge);
  floorUs.push((t.floor / SMALL) * 1e6);
  oursUs.push((t.bridge / SMALL) * 1e6);
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
const floorBigMBps = 20 / (await time(() => bigVia('floor'), 20));
reportBench({
  name: 'egress',
  metric:
    'throughput of 1 MiB transfers (CONNECT tunnel), bridge + proxy vs two blind C relays (the floor), MiB/s',
  ours: floorBigMBps * median(bigPath),
  baseline: floorBigMBps,
  goal: 0.9,
  higherIsBetter: true,
  extra: {
    oursVsConnectFloor: r2(median(bigConnectFloor)),
    connectFloor:
      'the same two C relays, the second answering the CONNECT head with 200 unchecked: the floor of any CONNECT proxy, the round trip the plain floor does not make included',
    tunnelsInNodeVsFloor: r2(median(bigNodeTunnels)),
    directMBps: Math.round(bigDirectMBps),
    bridgePathVsDirect: r2((floorBigMBps * median(bigPath)) / bigDirectMBps),
    proxyAloneVsDirect: r2(median(big)),
    oneBlindRelayVsDirect: r2(median(bigRelay)),
    floor:
      'two blind relays in C: bb-relay (TCP to the Unix socket) and the same source built from a Unix socket to TCP',
  },
});
reportBench({
  name: 'egress-small',
  metric:
    'small requests on a kept connection, bridge + proxy vs two blind C relays (the floor), throughput ratio',
  ours: median(smallPath),
  baseline: 1,
  goal: 0.9,
  higherIsBetter: true,
  extra: {
    note: `ours is the median over 9 rounds of floor time / bridge + proxy time, each round ${SMALL} requests of each path in alternating blocks of 20`,
    floorUsPerRequest: Math.round(median(floorUs)),
    oursUsPerRequest: Math.round(median(oursUs)),
    oursVsOneBlindRelay: r2(median(onePath)),
    oneBlindRelay:
      'one blind relay in Node between the client and the server: the floor of any design with one process in the path',
    nodeBridgeVsFloor: r2(median(nodeBridgePath)),
    nodeBridge: 'the bridge relaying in Node (a bottle without bb-relay) + the proxy',
    proxyAloneVsDirect: r2(median(small)),
    oneBlindRelayVsDirect: r2(median(smallRelay)),
  },
});
child.kill('SIGTERM');
relay.kill();
connectFloor.kill();
connectFloorRelay.kill();
nodeTunnels.kill();
nodeTunnelBridge.kill();
bridge.kill();
floorRelay.kill();
nodeBridge.kill();
oneRelay.kill();
await new Promise((r) => child.on('exit', r));
server.close();
rmSync(dir, { recursive: true, force: true });
