/**
 * The network a bounded build's `RUN` steps get: an egress proxy and nothing else.
 *
 * The build's engine runs in a network namespace of its own that has only a
 * loopback interface, and its steps share that namespace (`networkmode: host` of
 * that engine). On its loopback, at 127.0.0.1:3128, a bridge carries each
 * connection over a Unix socket (a file, which crosses network namespaces) to a
 * deny-by-default egress proxy on the host with the build's allowlist. So
 * `apt-get` and `npm` reach the hosts allowed through `http_proxy` and
 * `https_proxy`, and nothing else is reachable at all: there is no route out of
 * the namespace, so a step that ignores the proxy reaches nothing.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { parseRules } from '@bb/egress';
import { BbError } from '@bb/errors';
import { minimalEnv } from '@bb/wall';

/** Where the steps find the proxy, inside the build's namespace. */
export const BUILD_PROXY = 'http://127.0.0.1:3128';

/** The proxy variables a build's steps are given (build arguments Docker never keeps in the image). */
export const BUILD_PROXY_ARGS: Record<string, string> = {
  HTTP_PROXY: BUILD_PROXY,
  HTTPS_PROXY: BUILD_PROXY,
  http_proxy: BUILD_PROXY,
  https_proxy: BUILD_PROXY,
};

export interface BuildNetwork {
  /** The network namespace the build's engine is to run in. */
  netns: string;
  /** What the proxy refused so far: how many, and a few of the `host:port`s. */
  refused(): { count: number; some: string[] };
  /** Remove the namespace, the bridge and the proxy. Idempotent. */
  close(): Promise<void>;
}

/** Whether this machine can give builds a namespace of their own (root, `ip`, `nsenter`). */
export function canIsolateBuilds(): boolean {
  if (process.getuid?.() !== 0) return false;
  try {
    execFileSync('ip', ['netns', 'list'], { stdio: 'ignore', env: minimalEnv() });
    execFileSync('sh', ['-c', 'command -v nsenter'], { stdio: 'ignore', env: minimalEnv() });
    return true;
  } catch {
    return false;
  }
}

/**
 * The namespace's file, to enter with `nsenter --net=` (network only: unlike
 * `ip netns exec`, which mounts a sysfs of its own, the cgroups stay in sight).
 */
export const netnsPath = (netns: string) => `/run/netns/${netns}`;

const ip = (...args: string[]) =>
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'], env: minimalEnv() });

function bundle(name: 'bb-bridge.mjs' | 'bb-egress.mjs'): string {
  const require = createRequire(import.meta.url);
  const f = join(dirname(require.resolve('@bb/egress/package.json')), 'dist', 'bundle', name);

  if (!existsSync(f))
    throw new BbError('NOT_FOUND', `${f} is missing: build the packages (pnpm build) first`);
  return f;
}

/** At most this much of the build proxy's log is kept (past it, it refuses: fail closed). */
const LOG_MAX = 4 * 1024 * 1024;

/**
 * Make a build's network: a namespace with loopback only, the egress proxy (the
 * `bb-egress` command, in a process of its own, so nothing a step does to it reaches
 * the orchestrator) on a Unix socket in `dir` allowing `allow` (host patterns, as an
 * allowlist), and the bridge to it inside the namespace. What it started is written
 * to `dir/net.json`, so a later build reclaims it if this process dies first. The
 * caller closes it after the build.
 */
export async function startBuildNetwork(o: {
  dir: string;
  allow: string[];
  onProgress?: (line: string) => void;
}): Promise<BuildNetwork> {
  const netns = `bb-build-${randomBytes(4).toString('hex')}`;
  mkdirSync(o.dir, { recursive: true, mode: 0o700 });
  const sock = join(o.dir, 'egress.sock');
  const ready = join(o.dir, 'bridge.ready');
  const logFile = join(o.dir, 'egress.jsonl');
  // Checked here, as the proxy would: a bad entry fails the build before anything starts.
  parseRules(o.allow);
  writeFileSync(join(o.dir, 'rules.json'), JSON.stringify({ allow: o.allow }), { mode: 0o600 });
  writeFileSync(join(o.dir, 'routes.json'), '{"routes":[]}', { mode: 0o600 });
  let proxy: ChildProcess | undefined;
  let bridge: ChildProcess | undefined;
  let made = false;
  let closed = false;
  const record = () =>
    writeFileSync(
      join(o.dir, 'net.json'),
      JSON.stringify({
        owner: process.pid,
        boot: bootId(),
        netns,
        proxy: proxy?.pid,
        bridge: bridge?.pid,
      }),
      { mode: 0o600 },
    );
  const close = async () => {
    if (closed) return;
    closed = true;
    for (const c of [bridge, proxy])
      if (c?.pid)
        try {
          process.kill(c.pid, 'SIGKILL');
        } catch {}
    if (made) removeBuildNetns(netns);
    rmSync(o.dir, { recursive: true, force: true });
  };
  const started = async (c: ChildProcess, file: string, what: string) => {
    let said = '';
    // A program that cannot start (not installed) is this build's failure, not the process's.
    c.on('error', (err) => {
      said = `${what} could not start: ${err.message}`;
    });
    c.stderr?.on('data', (d: Buffer) => {
      said = (said + d.toString()).slice(-2000);
    });
    c.unref();
    const deadline = Date.now() + 10_000;
    while (!existsSync(file)) {
      if (c.exitCode !== null || Date.now() > deadline)
        throw new BbError(
          'BACKEND_ERROR',
          `the build's network could not start its ${what}: ${said.trim() || `it ${c.exitCode === null ? 'did not answer within 10 s' : `exited ${c.exitCode}`}`}`,
        );
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  try {
    ip('netns', 'add', netns);
    made = true;
    record();
    ip('-n', netns, 'link', 'set', 'lo', 'up');
    proxy = spawn(process.execPath, [bundle('bb-egress.mjs')], {
      stdio: ['ignore', 'ignore', 'pipe'],
      detached: true,
      env: {
        ...minimalEnv(),
        BB_EGRESS_RULES: join(o.dir, 'rules.json'),
        BB_CRED_ROUTES: join(o.dir, 'routes.json'),
        BB_EGRESS_SOCKET: sock,
        BB_CRED_SOCKET: join(o.dir, 'cred.sock'),
        BB_EGRESS_LOG: logFile,
        BB_EGRESS_LOG_MAX: String(LOG_MAX),
      },
    });
    record();
    await started(proxy, sock, 'egress proxy');
    bridge = spawn(
      'nsenter',
      [`--net=${netnsPath(netns)}`, process.execPath, bundle('bb-bridge.mjs'), `3128=${sock}`],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
        detached: true,
        env: { ...minimalEnv(), BB_RELAY: '', BB_BRIDGE_READY: ready },
      },
    );
    record();
    await started(bridge, ready, 'bridge to the proxy');
    o.onProgress?.(
      `the build's network: only the egress proxy, allowing ${o.allow.length ? o.allow.join(', ') : 'nothing'}`,
    );
    return { netns, refused: () => refusedIn(logFile), close };
  } catch (err) {
    await close();
    throw err;
  }
}

/** What the proxy refused, from its log: how many, and a few of the `host:port`s. */
function refusedIn(file: string): { count: number; some: string[] } {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {}
  let count = 0;
  const some = new Set<string>();
  for (const line of text.split('\n')) {
    if (!line.includes('"denied"')) continue;
    try {
      const e = JSON.parse(line) as { decision?: string; host?: unknown; port?: unknown };
      if (e.decision !== 'denied') continue;
      count++;
      if (some.size < 10) some.add(`${String(e.host).slice(0, 253)}:${String(e.port).slice(0, 5)}`);
    } catch {}
  }
  return { count, some: [...some] };
}

/**
 * End what a build's network left behind when its process died (a killed
 * orchestrator): its proxy and bridge, its namespace, its files. Only when the
 * record's owner is gone and its names are a build's.
 */
export function reclaimBuildNetwork(dir: string): boolean {
  let rec: { owner?: number; boot?: string; netns?: string; proxy?: number; bridge?: number };
  try {
    rec = JSON.parse(readFileSync(join(dir, 'net.json'), 'utf8'));
  } catch {
    return false;
  }
  if (rec.owner && (rec.boot === undefined || rec.boot === bootId()) && alive(rec.owner))
    return false;
  // Written before this machine last started: its pids are other processes' now.
  const sameBoot = rec.boot === undefined || rec.boot === bootId();
  for (const pid of sameBoot ? [rec.bridge, rec.proxy] : [])
    if (typeof pid === 'number' && pid > 1)
      try {
        process.kill(pid, 'SIGKILL');
      } catch {}
  if (typeof rec.netns === 'string') removeBuildNetns(rec.netns);
  rmSync(dir, { recursive: true, force: true });
  return true;
}

/** This boot of the machine: a pid recorded in another is not the same process. */
export function bootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return '';
  }
}

/** Whether a process of this pid exists now. */
export const alive = (pid: number | undefined): boolean => {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Remove a build's namespace and end what still runs in it (a killed process's bridge). */
export function removeBuildNetns(netns: string): void {
  if (!/^bb-build-[0-9a-f]{8}$/.test(netns)) return;
  try {
    const pids = execFileSync('ip', ['netns', 'pids', netns], {
      stdio: ['ignore', 'pipe', 'ignore'],
      env: minimalEnv(),
    })
      .toString()
      .split('\n')
      .filter(Boolean)
      .map(Number);
    for (const pid of pids)
      try {
        process.kill(pid, 'SIGKILL');
      } catch {}
  } catch {}
  try {
    ip('netns', 'delete', netns);
  } catch {}
}
