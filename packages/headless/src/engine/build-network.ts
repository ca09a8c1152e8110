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
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { BbError } from '@bb/errors';
import { createEgressProxy, type EgressLogEntry, parseRules } from '@bb/egress';
import { listenUnixSocket, minimalEnv } from '@bb/wall';

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
  /** What the proxy allowed and refused, in order. */
  log: EgressLogEntry[];
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

function bridgeBundle(): string {
  const require = createRequire(import.meta.url);
  const f = join(
    dirname(require.resolve('@bb/egress/package.json')),
    'dist',
    'bundle',
    'bb-bridge.mjs',
  );
  if (!existsSync(f))
    throw new BbError('NOT_FOUND', `${f} is missing: build the packages (pnpm build) first`);
  return f;
}

/**
 * Make a build's network: a namespace with loopback only, the egress proxy on a
 * Unix socket in `dir` allowing `allow` (host patterns, as an allowlist), and the
 * bridge to it inside the namespace. The caller closes it after the build.
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
  const log: EgressLogEntry[] = [];
  const proxy = createEgressProxy({
    rules: parseRules(o.allow),
    log: (e) => {
      log.push(e);
      if (e.decision === 'denied')
        o.onProgress?.(`build egress refused ${e.host}:${e.port} (${e.rule})`);
    },
  });
  let bridge: ChildProcess | undefined;
  let made = false;
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    if (bridge?.pid) {
      try {
        process.kill(bridge.pid, 'SIGKILL');
      } catch {}
    }
    await proxy.close().catch(() => {});
    if (made) removeBuildNetns(netns);
    rmSync(o.dir, { recursive: true, force: true });
  };
  try {
    await listenUnixSocket(proxy.server, sock, { mode: 0o600 });
    ip('netns', 'add', netns);
    made = true;
    ip('-n', netns, 'link', 'set', 'lo', 'up');
    bridge = spawn(
      'nsenter',
      [`--net=${netnsPath(netns)}`, process.execPath, bridgeBundle(), `3128=${sock}`],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
        detached: true,
        env: { ...minimalEnv(), BB_RELAY: '', BB_BRIDGE_READY: ready },
      },
    );
    let said = '';
    bridge.stderr?.on('data', (d: Buffer) => (said += d.toString()).slice(-2000));
    bridge.unref();
    const deadline = Date.now() + 10_000;
    while (!existsSync(ready)) {
      if (bridge.exitCode !== null || Date.now() > deadline)
        throw new BbError(
          'BACKEND_ERROR',
          `the build's network could not start its bridge to the proxy: ${said.trim() || `it ${bridge.exitCode === null ? 'did not answer within 10 s' : `exited ${bridge.exitCode}`}`}`,
        );
      await new Promise((r) => setTimeout(r, 20));
    }
    o.onProgress?.(
      `the build's network: only the egress proxy, allowing ${o.allow.length ? o.allow.join(', ') : 'nothing'}`,
    );
    return { netns, log, close };
  } catch (err) {
    await close();
    throw err;
  }
}

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
