import { spawn } from 'node:child_process';
import { timingSafeEqual } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { dirname, isAbsolute, join, normalize } from 'node:path';

/**
 * The surfaces of a bottle's gate. In a Docker bottle each is a Unix socket the
 * agent reaches in a shared directory; in a pod (no shared directory) the gate
 * serves them all on one TCP port, each connection naming its surface first.
 */
export const GATE_SURFACES = ['forge', 'supervise', 'egress', 'credentials'] as const;
export type GateSurface = (typeof GATE_SURFACES)[number];

/** What opens each connection to a gate's TCP port: `bb-gate <surface> <key>\n`. */
const PREAMBLE = 'bb-gate ';
const PREAMBLE_MAX = 128;
const PREAMBLE_MS = 5000;

/** Where a bridge forwards: a Unix socket, or one surface of a gate on TCP. */
export type BridgeTarget =
  | { socket: string }
  | { gate: { host: string; port: number }; surface: GateSurface; key: string };

/** One bridge: listen on a TCP port on 127.0.0.1 or a Unix socket path; forward each connection. */
export interface BridgeMapping {
  listen: number | string;
  to: BridgeTarget;
}

/**
 * Carry bytes both ways between two sockets. Each side's end reaches the other
 * once all its bytes are written: a side that closes never cuts what is still on
 * its way to the other. A client gone can receive nothing more; an upstream gone
 * still has bytes to deliver.
 */
function relay(client: Socket, upstream: Socket): void {
  client.pipe(upstream);
  upstream.pipe(client);
  const abort = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on('error', abort);
  upstream.on('error', abort);
  client.on('close', () => upstream.destroy());
  upstream.on('close', () => client.end());
}

function open(to: BridgeTarget): Socket {
  if ('socket' in to) return connect(to.socket);
  const s = connect(to.gate.port, to.gate.host);
  s.write(`${PREAMBLE}${to.surface} ${to.key}\n`);
  return s;
}

async function listen(server: Server, at: number | string): Promise<void> {
  if (typeof at === 'string') {
    mkdirSync(dirname(at), { recursive: true, mode: 0o700 });
    rmSync(at, { force: true });
  }
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    if (typeof at === 'number') server.listen(at, '127.0.0.1', () => resolve());
    else server.listen(at, () => resolve());
  });
}

/** A running bridge mapping. */
export interface RunningBridge {
  close(): void;
}

export interface StartBridgeOptions {
  /**
   * The `bb-relay` program (C): a TCP port mapped to a Unix socket is then
   * served by it, which carries each connection at less cost per request than
   * this process would. When it cannot start, or ends, this process serves the
   * port instead.
   */
  nativeRelay?: string | undefined;
  /** Said when `nativeRelay` cannot serve a port and this process does. */
  onMessage?: (message: string) => void;
}

/**
 * Inside a bottle (which has no network), expose its gate to tools that need a
 * TCP port or a socket path: e.g. `3128` to the egress proxy's socket
 * (HTTPS_PROXY), or, in a pod, `/tmp/bb/forge.sock` to the forge surface of the
 * gate's TCP port. `{ port, socket }` is the TCP-to-socket shorthand.
 */
export async function startBridge(
  mappings: Array<BridgeMapping | { port: number; socket: string }>,
  options: StartBridgeOptions = {},
): Promise<RunningBridge[]> {
  const running: RunningBridge[] = [];
  for (const raw of mappings) {
    const m: BridgeMapping =
      'listen' in raw ? raw : { listen: raw.port, to: { socket: raw.socket } };
    const native =
      options.nativeRelay && typeof m.listen === 'number' && 'socket' in m.to
        ? await startNativeRelay(options.nativeRelay, m, options.onMessage ?? (() => {}))
        : undefined;
    running.push(native ?? (await startRelay(m)));
  }
  return running;
}

async function startRelay(m: BridgeMapping): Promise<Server> {
  const server = createServer((client) => relay(client, open(m.to)));
  await listen(server, m.listen);
  return server;
}

/**
 * `bb-relay PORT SOCKET`, resolved once it listens; nothing when it could not
 * (the caller serves the port). Should it end later, this process serves the
 * port from then on.
 */
async function startNativeRelay(
  program: string,
  m: BridgeMapping,
  say: (message: string) => void,
): Promise<RunningBridge | undefined> {
  const child = spawn(program, [String(m.listen), (m.to as { socket: string }).socket], {
    stdio: ['ignore', 'pipe', 'pipe'],
    // Nothing of the bridge's environment (a pod's gate key, say): only the pid it
    // ends with, at once should this process be gone already.
    env: { BB_RELAY_PARENT: String(process.pid) },
  });
  let errors = '';
  child.stderr.on('data', (d: Buffer) => {
    if (errors.length < 2048) errors += d.toString('utf8');
  });
  const ready = await new Promise<boolean>((resolve) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString('latin1');
      if (out.includes('\n')) resolve(out.startsWith('ready\n'));
    });
    child.once('error', () => resolve(false));
    child.once('exit', () => resolve(false));
  });
  const why = () => (errors.trim() || 'it ended').slice(0, 500);
  if (!ready) {
    child.kill('SIGKILL');
    say(`port ${m.listen} is served by the bridge itself: ${program} ${why()}`);
    return undefined;
  }
  let closed = false;
  let fallback: Server | undefined;
  child.once('exit', () => {
    if (closed) return;
    say(`port ${m.listen} is served by the bridge itself from now on: ${program} ${why()}`);
    startRelay(m).then(
      (s) => {
        if (closed) s.close();
        else fallback = s;
      },
      (err: Error) => say(`port ${m.listen} cannot be bridged: ${err.message}`),
    );
  });
  return {
    close() {
      closed = true;
      child.kill('SIGTERM');
      fallback?.close();
    },
  };
}

/**
 * Parse `LISTEN=TARGET` arguments: LISTEN a port or an absolute socket path;
 * TARGET an absolute socket path, `gate://HOST:PORT/SURFACE`, or `gate:SURFACE`
 * for the gate at `gate.address` (a pod's `BB_GATE`, `HOST:PORT` or
 * `[IPv6]:PORT`). A gate target needs the gate's key (`gate.key`, a pod's
 * `BB_GATE_KEY`).
 */
export function parseBridgeArgs(
  args: string[],
  gate: { address?: string | undefined; key?: string | undefined } = {},
): BridgeMapping[] {
  return args.map((a) => {
    const m = /^(\d{1,5}|\/[^=]+)=(.+)$/.exec(a);
    const bad = () =>
      new Error(
        `bridge mapping ${JSON.stringify(a)} must be PORT=/path/to.sock, /path.sock=gate:SURFACE or PORT=gate://HOST:PORT/SURFACE (surfaces: ${GATE_SURFACES.join(', ')})`,
      );
    if (!m) throw bad();
    const listen = /^\d+$/.test(m[1]!) ? Number(m[1]) : m[1]!;
    if (typeof listen === 'number' && (listen < 1 || listen > 65535)) throw bad();
    const target = m[2]!;
    if (target.startsWith('/')) return { listen, to: { socket: target } };
    const g =
      /^gate:\/\/(\[[0-9a-fA-F:.]+\]:\d{1,5}|[^/:\s]+:\d{1,5})\/([a-z]+)$/.exec(target) ??
      /^gate:()([a-z]+)$/.exec(target);
    if (!g || !(GATE_SURFACES as readonly string[]).includes(g[2]!)) throw bad();
    const text = g[1] || gate.address;
    if (!text) throw bad();
    const address = hostPort(text);
    if (!address) throw new Error(`the gate's address ${JSON.stringify(text)} must be HOST:PORT`);
    if (!gate.key || !KEY.test(gate.key))
      throw new Error("a gate target needs the gate's key (BB_GATE_KEY): 32 to 128 hex digits");
    return { listen, to: { gate: address, surface: g[2] as GateSurface, key: gate.key } };
  });
}

const KEY = /^[0-9a-f]{32,128}$/;

function hostPort(text: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:/\s[\]]+)):(\d{1,5})$/.exec(text);
  const port = Number(m?.[3]);
  return m && port >= 1 && port <= 65535 ? { host: (m[1] ?? m[2])!, port } : undefined;
}

/**
 * The gate's side in a pod: serve its surfaces (name → its Unix socket) on one
 * TCP port. A connection names its surface and the bottle's key in its first
 * line (`bb-gate <surface> <key>`, at most 128 bytes, within 5 s) and is then
 * carried to that socket; anything else is closed. Only the bottle's agent
 * reaches the port (its network policy) and knows the key (a cluster whose
 * network does not enforce policies still keeps other pods out); the surfaces
 * check what it asks as they always do.
 */
export async function startGateLink(o: {
  port: number;
  host?: string;
  surfaces: Partial<Record<GateSurface, string>>;
  /** The bottle's key: 32 to 128 hex digits. */
  key: string;
}): Promise<Server> {
  if (!KEY.test(o.key)) throw new Error("the gate's key must be 32 to 128 hex digits");
  const key = Buffer.from(o.key, 'latin1');
  const server = createServer((client) => {
    let head = Buffer.alloc(0);
    const timer = setTimeout(() => client.destroy(), PREAMBLE_MS);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const nl = head.indexOf(10);
      if (nl < 0) {
        if (head.length > PREAMBLE_MAX) client.destroy();
        return;
      }
      client.off('data', onData);
      client.pause();
      clearTimeout(timer);
      const line = head.subarray(0, nl).toString('latin1');
      const [name = '', given = '', ...more] = line.startsWith(PREAMBLE)
        ? line.slice(PREAMBLE.length).split(' ')
        : [];
      const socket = Object.hasOwn(o.surfaces, name) ? o.surfaces[name as GateSurface] : undefined;
      const keyed =
        more.length === 0 &&
        given.length === key.length &&
        timingSafeEqual(Buffer.from(given, 'latin1'), key);
      if (nl > PREAMBLE_MAX || !socket || !keyed) {
        client.destroy();
        return;
      }
      const upstream = connect(socket);
      const rest = head.subarray(nl + 1);
      if (rest.length > 0) upstream.write(rest);
      relay(client, upstream);
      client.resume();
    };
    client.on('data', onData);
    client.on('error', () => client.destroy());
    client.on('close', () => clearTimeout(timer));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host ?? '0.0.0.0', () => resolve());
  });
  return server;
}

/**
 * Write the turn's files into `home` (`files`: JSON, a path relative to the home
 * → its text), as the agent's own user, before its command runs. A path that
 * leaves the home is refused.
 */
export function writeHomeFiles(home: string, files: string): void {
  if (!isAbsolute(home)) throw new Error(`HOME ${JSON.stringify(home)} must be an absolute path`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(files);
  } catch {
    throw new Error('BB_HOME_FILES must be a JSON object of paths to texts');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new Error('BB_HOME_FILES must be a JSON object of paths to texts');
  for (const [rel, text] of Object.entries(parsed)) {
    const clean = normalize(rel);
    if (typeof text !== 'string' || isAbsolute(rel) || clean.startsWith('..') || clean === '.')
      throw new Error(
        `BB_HOME_FILES: ${JSON.stringify(rel)} must be a path inside the home, to a text`,
      );
    const file = join(home, clean);
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    writeFileSync(file, text, { mode: 0o600 });
  }
}
