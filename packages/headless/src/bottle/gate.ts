import { existsSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isReservedSecret } from '@bb/egress';
import { BbError, redactString, registerSecret } from '@bb/errors';
import { checkSiteEnv } from '@bb/forge';
import { LABEL } from '@bb/names';
import type { Owner } from '@bb/wall';
import { type Backend, type BottleSpec, NETNS_LABEL, VERSION_LABEL } from '../engine/backend';
import { bbHome } from '../home';
import { BIND_FILE } from './gate-bind';
import {
  type BottleMeta,
  BRIDGE_PORTS,
  bottlePaths,
  GATE_USER,
  HOME_LABEL,
  homeLabel,
  mirrorObjectsFor,
  userSpec,
} from './layout';
import type { BottlePlan } from './plan';
import { hostMounts, hostSources, insideFor, secretValue } from './plan-host';
import { kindModule } from './runtime';
import { makeSecretsDir, removeSecret, removeSecrets, secretsRoot, writeSecret } from './secrets';

/**
 * The gate of a bottle: one process in one container beside the agent's, the
 * gate's user, serving the forge sidecar (the only holder of the forge token),
 * the supervise sidecar and, when the bottle has egress rules or credential
 * routes, the proxies (the only holder of the model keys). It reads its secrets
 * once from files on a tmpfs mounted into it alone (removed as soon as it is
 * up), and serves the agent on sockets in a directory the agent cannot change.
 */
export interface GateOptions {
  backend: Backend;
  env: Record<string, string | undefined>;
  runtime: string;
  /** The image the gate runs in (needs node and git). */
  image: string;
  onProgress?: ((message: string) => void) | undefined;
  /**
   * A pooled bottle's gate (`pool.ts`): made with no forge settings and no token,
   * it waits for its bind file; `slot` is the host path of the bottle's mirror slot,
   * mounted so that the mirror bound there later appears inside.
   */
  pooled?: { slot: string } | undefined;
}

const RESERVED_LABELS: ReadonlySet<string> = new Set([
  LABEL.slug,
  LABEL.role,
  HOME_LABEL,
  NETNS_LABEL,
  VERSION_LABEL,
]);

export function bottleLabels(
  meta: BottleMeta,
  role: string,
  env: Record<string, string | undefined>,
): Record<string, string> {
  // bot-bottle's own keys are never a launch's to set.
  const extra = Object.fromEntries(
    Object.entries(meta.labels ?? {}).filter(([k]) => !RESERVED_LABELS.has(k)),
  );
  return { ...extra, [LABEL.slug]: meta.slug, [LABEL.role]: role, [HOME_LABEL]: homeLabel(env) };
}

const isolated = (backend: Backend) => backend.mapsMounts;

/** The `bb.role` label of a bottle's gate container (its agent's is `agent`). */
export const GATE_ROLE = 'gate';

/** A bottle's gate container, created and not yet started. */
export interface CreatedGate {
  id: string;
  /** The host paths of the sockets it serves once it is up. */
  sockets: string[];
  /** Where its secrets wait to be read (emptied by `awaitGate`). */
  secrets?: string | undefined;
}

/**
 * Create a bottle's gate from its turn's plan: one container, one process
 * (`bb-gate.mjs`) serving the agent its forge sidecar, supervise sidecar and
 * proxies, each on its own socket in the bottle's socket directory. It is the
 * only holder of the forge token and the model keys, which it reads once from
 * files on a tmpfs mounted into it alone. Its mounts are resolved when it
 * starts: start it only once the bottle's disk is mounted. Undefined when the
 * plan has no gate.
 */
export async function createGate(
  meta: BottleMeta,
  plan: BottlePlan,
  token: string | undefined,
  o: GateOptions,
): Promise<CreatedGate | undefined> {
  if (meta.forge && !token && !o.pooled)
    throw new BbError('INVALID_INPUT', 'a forge bottle needs the forge token to start its gate');
  const g = plan.gate;
  const forge = g?.serves.forge ? meta.forge : null;
  // What reaches the token's holder is checked here too, whoever wrote the meta.
  if (forge) checkSiteEnv(forge.kind, forge.site);
  if (!g) return undefined;
  const p = bottlePaths(meta.slug, o.env);
  const owner = isolated(o.backend) && process.getuid?.() === 0 ? GATE_USER : undefined;
  removeSecrets(meta.slug, o.env);
  writeProxyFiles(plan, p.proxy);
  // A pooled gate gets its secrets when it is bound (not one sits here before); its
  // folder is there from the start.
  const secrets = o.pooled
    ? makeSecretsDir(meta.slug, 'gate', o.env, owner)
    : writePlanSecrets(plan, meta.slug, 'gate', token, o.env, owner);
  // A socket a killed gate left behind must not pass for this one's.
  for (const s of g.sockets) rmSync(join(p.sock, s), { force: true });
  const inside = insideFor(o.backend, p, o.runtime, meta.slug, o.env);
  const env = o.pooled
    ? { HOME: g.env['HOME'] ?? '/tmp', BB_GATE_BIND: `${inside.secrets}/${BIND_FILE}` }
    : gateEnv(meta, plan, o);
  const mounts = hostMounts(g.mounts, hostSources(p, o.runtime, meta, o.env));
  o.onProgress?.(`creating the gate (${g.sockets.map((s) => s.replace('.sock', '')).join(', ')})`);
  const id = await o.backend.create({
    name: `bb-${meta.slug}-gate`,
    image: o.image,
    cmd: g.cmd,
    entrypoint: [],
    user: userSpec(GATE_USER),
    labels: bottleLabels(meta, GATE_ROLE, o.env),
    // The gate alone reaches the forge and the model; the agent has no network at all.
    network: g.network,
    readOnlyRootfs: true,
    tmpfs: { '/tmp': 'rw,size=64m' },
    env,
    mounts: o.pooled ? propagateSlot(mounts, o.pooled.slot) : mounts,
    resources: g.limits,
  });
  return { id, sockets: g.sockets.map((s) => join(p.sock, s)), secrets };
}

/**
 * The variables a gate of `plan` runs with: its plan's, with where its forge
 * kind's module and the mirror's objects are inside.
 */
export function gateEnv(
  meta: BottleMeta,
  plan: BottlePlan,
  o: Pick<GateOptions, 'backend' | 'env' | 'runtime'>,
): Record<string, string> {
  const g = plan.gate;
  if (!g) return {};
  const forge = g.serves.forge ? meta.forge : null;
  const p = bottlePaths(meta.slug, o.env);
  const runtimeInside = insideFor(o.backend, p, o.runtime, meta.slug, o.env).runtime;
  const mirror = mirrorObjectsFor(o.backend, meta);
  return {
    ...g.env,
    ...(forge ? kindModule(o.runtime, runtimeInside, forge.kind) : {}),
    ...(forge && mirror ? { BB_GIT_ALTERNATE: mirror } : {}),
  };
}

/** A pooled bottle's mounts, its mirror slot's propagating what the host mounts there later. */
export function propagateSlot(
  mounts: BottleSpec['mounts'],
  slot: string,
): NonNullable<BottleSpec['mounts']> {
  return (mounts ?? []).map((m) =>
    m.source === slot ? { ...m, propagation: 'rslave' as const } : m,
  );
}

/** The proxies' configuration of a plan, into its host folder (read only to the gate). */
export function writeProxyFiles(plan: BottlePlan, dir: string): void {
  for (const [name, content] of Object.entries(plan.proxyFiles ?? {}))
    writeFileSync(join(dir, name), content);
}

/**
 * A plan's secrets, their values resolved here, into `role`'s secrets folder
 * of the bottle (a tmpfs, read by the gate once): the folder, or undefined
 * when the plan names none.
 */
export function writePlanSecrets(
  plan: BottlePlan,
  slug: string,
  role: 'gate' | 'proxy',
  token: string | undefined,
  env: Record<string, string | undefined>,
  owner: Owner | undefined,
): string | undefined {
  let dir: string | undefined;
  for (const [name, ref] of Object.entries(plan.secrets))
    dir = writeSecret(
      slug,
      role,
      name,
      secretValue(ref, token, (routes) => routeSecrets(routes, env)),
      env,
      owner,
    );
  return dir;
}

/**
 * Wait until a started gate serves every socket it was made for, then remove
 * its secrets' files (it read them at start). If it exits (or takes over 15 s)
 * first, fail with its own words.
 */
export async function awaitGate(backend: Backend, gate: CreatedGate, slug: string): Promise<void> {
  for (const s of gate.sockets) await waitForSocket(backend, gate.id, s, slug, 'gate');
  if (gate.secrets) {
    removeSecret(gate.secrets, 'token');
    removeSecret(gate.secrets, 'keys.json');
  }
}

/**
 * The secrets a routes file references, with their values: `env:NAME` from the
 * orchestrator's environment (keyed by NAME), `file:/path` read on the host
 * (keyed by the whole reference).
 */
export function routeSecrets(
  routesText: string,
  env: Record<string, string | undefined>,
): Record<string, string> {
  const routes = (
    JSON.parse(routesText) as { routes: Array<{ prefix: string; headers: Record<string, string> }> }
  ).routes;
  const secrets: Record<string, string> = {};
  for (const r of routes)
    for (const ref of Object.values(r.headers)) {
      if (ref.startsWith('file:')) {
        // Read here, on the host, where the operator's file is: the gate never reads a file a route names.
        const value = readRouteFile(r.prefix, ref.slice(5), env);
        registerSecret(value);
        secrets[ref] = value;
        continue;
      }
      if (!ref.startsWith('env:')) continue;
      const name = ref.slice(4);
      // bot-bottle's own secrets (the forge token, the webhook secret, the API token) never go to a proxy.
      if (isReservedSecret(name))
        throw new BbError(
          'INVALID_INPUT',
          `credential route ${r.prefix} names ${name}, one of bot-bottle's own secrets: use another variable`,
        );
      const value = env[name] ?? process.env[name];
      if (!value)
        throw new BbError(
          'INVALID_INPUT',
          `credential route ${r.prefix} needs ${name}, which is not set in the orchestrator's environment`,
        );
      registerSecret(value);
      secrets[name] = value;
    }
  return secrets;
}

/**
 * The value of a route's `file:` secret, read on the host: a regular file of at
 * most 64 KiB, never one of bot-bottle's own (its home, where secrets wait for
 * gates) nor the kernel's (/proc, /sys, /dev), wherever a link leads.
 */
function readRouteFile(
  prefix: string,
  path: string,
  env: Record<string, string | undefined>,
): string {
  const refuse = (why: string) =>
    new BbError('INVALID_INPUT', `credential route ${prefix} needs ${path}, which ${why}`);
  let real: string;
  try {
    real = realpathSync(path);
  } catch (err) {
    throw refuse(
      `cannot be read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
  const within = (dir: string) => {
    let root = dir;
    try {
      root = realpathSync(dir);
    } catch {}
    return real === root || real.startsWith(`${root}/`);
  };
  // The forge's own keys (a GitHub App's private key) are bot-bottle's too.
  const own = [env['FORGE_GITHUB_APP_KEY_FILE']].filter((f): f is string => !!f);
  if (['/proc', '/sys', '/dev', bbHome(env), secretsRoot(env), ...own].some(within))
    throw refuse("is bot-bottle's own or the kernel's: keep route secrets elsewhere");
  const st = statSync(real);
  if (!st.isFile()) throw refuse('is not a regular file');
  if (st.size > 64 * 1024) throw refuse('is larger than 64 KiB');
  const value = readFileSync(real, 'utf8').trim();
  if (!value) throw refuse('is empty');
  return value;
}

/** Where a proxy gate keeps its files on the host: configuration, sockets, logs. */
export interface ProxyGateDirs {
  /** rules.json and routes.json (written here; the gate reads them, read only). */
  proxy: string;
  /** egress.sock and cred.sock, for the agent's bridge. */
  sock: string;
  /** egress.jsonl and proxy-status.json. */
  state: string;
}

export interface ProxyGateOptions extends GateOptions {
  /** Names the container (`bb-<slug>-proxy`) and the secrets' directory. */
  slug: string;
  labels: Record<string, string>;
  dirs: ProxyGateDirs;
  /** The agent's plan (`planBottle`) with the proxies and nothing else in its gate. */
  plan: BottlePlan;
  /**
   * The user the proxies run as. @default the gate's own user (GATE_USER), which only
   * root can hand the keys to; a caller that is not root passes its own uid and gid.
   */
  user?: { uid: number; gid: number };
}

/**
 * Start the gate of a plan whose gate runs the proxies alone, for an agent
 * container that is not a bottle's (forklift's): the only holder of the keys
 * its routes name, serving on two sockets in `dirs.sock`. Resolves its
 * container id once it serves.
 */
export async function startProxyGate(o: ProxyGateOptions): Promise<string> {
  const g = o.plan.gate;
  if (!g || g.serves.forge || g.serves.supervise || !o.plan.proxyFiles)
    throw new BbError(
      'INVALID_INPUT',
      'a proxy gate serves the proxies alone: plan it with an allowlist or a route, no forge token and no supervise',
    );
  if (!isolated(o.backend))
    throw new BbError(
      'INVALID_INPUT',
      `a proxy gate runs in a container: the ${o.backend.name} backend cannot give it its mounts`,
    );
  o.onProgress?.('starting the egress and credential proxies');
  writeProxyFiles(o.plan, o.dirs.proxy);
  // The proxy alone holds the credentials: the `env:NAME` values it needs, from this process's environment.
  const owner = o.user ?? (process.getuid?.() === 0 ? GATE_USER : undefined);
  const dir = writePlanSecrets(o.plan, o.slug, 'proxy', undefined, o.env, owner);
  if (!dir)
    throw new BbError('INTERNAL', 'a proxy gate without its keys: the plan named no secret');
  for (const s of g.sockets) rmSync(join(o.dirs.sock, s), { force: true });
  const id = await o.backend.create({
    name: `bb-${o.slug}-proxy`,
    image: o.image,
    cmd: g.cmd,
    entrypoint: [],
    user: userSpec(o.user ?? GATE_USER),
    labels: o.labels,
    network: g.network,
    readOnlyRootfs: true,
    tmpfs: { '/tmp': 'rw,size=16m' },
    env: g.env,
    mounts: hostMounts(g.mounts, {
      runtime: o.runtime,
      secrets: dir,
      proxy: o.dirs.proxy,
      sockets: o.dirs.sock,
      state: o.dirs.state,
    }),
    resources: g.limits,
  });
  await o.backend.start(id);
  for (const s of g.sockets)
    await waitForSocket(o.backend, id, join(o.dirs.sock, s), o.slug, 'proxy');
  removeSecret(dir, 'keys.json');
  return id;
}

/** The in-agent bridge's mappings: each TCP port on 127.0.0.1 to its proxy's socket. */
export function bridgeMappings(socketDir: string): string[] {
  return [
    `${BRIDGE_PORTS.egress}=${socketDir}/egress.sock`,
    `${BRIDGE_PORTS.credentials}=${socketDir}/cred.sock`,
  ];
}

/**
 * The shell line that waits (up to 30 s: longer than the host waits for the gate)
 * for the gate's two proxy sockets (the gate starts beside the agent).
 */
export function proxySocketsScript(socketDir: string): string {
  const egress = `${socketDir}/egress.sock`;
  const cred = `${socketDir}/cred.sock`;
  // Looked at every 10 ms: the gate comes up beside the agent, and each look is cheap.
  return `i=0; while { [ ! -S ${egress} ] || [ ! -S ${cred} ]; } && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done`;
}

/**
 * The shell lines that start the in-agent bridge (TCP on 127.0.0.1 to the gate's
 * proxy sockets), run before the agent's command: with `wait`, once the sockets are
 * there, and until it listens. Where the runtime has `bb-relay` (C), one relay per
 * port carries it, with no node process beside the agent; one that does not say it
 * listens within 2 s gives way to the node bridge, which serves every port itself.
 */
export function bridgePrelude(
  runtimeDir: string,
  socketDir: string,
  o: { wait: boolean } = { wait: true },
): string {
  const mappings = bridgeMappings(socketDir);
  // Started from subshells that exit at once, so their parent is the container's init,
  // which reaps them: a warm container's waiter (the shell's heir) could not, and its
  // end of turn would wait on the unreaped bridge.
  const node = `(BB_BRIDGE_READY=/tmp/.bb-bridge node ${runtimeDir}/bb-bridge.mjs ${mappings.join(' ')} &)`;
  const nodeReady =
    'i=0; while [ ! -e /tmp/.bb-bridge ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done';
  const relays = mappings
    .map((m) => {
      const [port, sock] = m.split('=') as [string, string];
      return `("$bb_relay" ${port} ${sock} > /tmp/.bb-relay-${port} 2>&1 & echo $! > /tmp/.bb-relay-${port}.pid)`;
    })
    .join('; ');
  const ports = mappings.map((m) => m.split('=')[0]!);
  const ready = ports.map((p) => `grep -qs '^ready' /tmp/.bb-relay-${p}`).join(' && ');
  const native = o.wait
    ? [
        relays,
        `i=0; until { ${ready}; } || [ $i -ge 200 ]; do sleep 0.01; i=$((i+1)); done`,
        // Not listening (a port taken, a relay that cannot run here): the node bridge instead.
        `if ! { ${ready}; }; then kill ${ports.map((p) => `$(cat /tmp/.bb-relay-${p}.pid 2>/dev/null)`).join(' ')} 2>/dev/null; ${node}; ${nodeReady}; fi`,
      ].join('; ')
    : relays;
  const start = `bb_relay=${runtimeDir}/bb-relay; if [ -x "$bb_relay" ]; then ${native}; else ${node}${o.wait ? `; ${nodeReady}` : ''}; fi`;
  return o.wait ? `${proxySocketsScript(socketDir)}; ${start}` : start;
}

/** Wait until a helper container's socket exists; fail with its own words if it exits first. */
export async function waitForSocket(
  backend: Backend,
  id: string,
  socket: string,
  slug: string,
  what: string,
): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if (existsSync(socket)) return;
    if ((await backend.inspect(id))?.state === 'exited') break;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new BbError(
    'BACKEND_ERROR',
    `the ${what} of ${slug} did not start: ${redactString((await backend.logs(id)).slice(-500))}`,
  );
}
