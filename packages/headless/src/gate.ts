import { existsSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isReservedSecret } from '@bb/egress';
import { BbError, redactString, registerSecret } from '@bb/errors';
import { checkSiteEnv } from '@bb/forge';
import { LABEL } from '@bb/names';
import { loadPolicy } from '@bb/supervise';
import { type Backend, type BottleSpec, NETNS_LABEL, VERSION_LABEL } from './backend';
import { bbHome } from './home';
import {
  type BottleMeta,
  BRIDGE_PORTS,
  bottlePaths,
  GATE_USER,
  HOME_LABEL,
  homeLabel,
  IN_BOTTLE,
  mirrorObjectsFor,
  pathsFor,
  userSpec,
} from './layout';
import { kindModule } from './runtime';
import { removeSecret, removeSecrets, secretsRoot, writeSecret } from './secrets';
import { allowedBases } from './supervise-gate';

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

/** Whether this turn's sidecar brings the PR branch to the checkout (a resumed turn with a PR). */
export function syncsPr(meta: BottleMeta): boolean {
  return (
    !!meta.forge && meta.forge.pr !== undefined && meta.turns.length > 0 && meta.syncPr !== false
  );
}

/** The `bb.role` label of a bottle's gate container (its agent's is `agent`). */
/** The file in the gate's state directory where the host writes the turn it serves. */
export const TURN_FILE = 'turn';

export const GATE_ROLE = 'gate';

/** What a bottle's gate serves this turn. */
export interface GatePlan {
  /** The forge token (a forge bottle): the forge sidecar runs. */
  token?: string | undefined;
  /** The supervise sidecar runs. */
  supervise: boolean;
  /** The egress and credential proxies run, with these files. */
  proxies?: { routes: string; allowlist: string } | undefined;
}

/** A bottle's gate container, created and not yet started. */
export interface CreatedGate {
  id: string;
  /** The host paths of the sockets it serves once it is up. */
  sockets: string[];
  /** Where its secrets wait to be read (emptied by `awaitGate`). */
  secrets?: string | undefined;
}

/** Where a gate finds what its forge sidecar uses, inside its own container or pod. */
export interface GatePaths {
  secrets: string;
  socket: string;
  queue: string;
  state: string;
  workspace: string;
}

/**
 * The forge sidecar's variables in a bottle's gate, with the gate's own paths:
 * the one description of them, for a gate container (`createGate`) and a gate
 * pod (`@bb/backend-kubernetes`) alike. No secret: the token is named by its file.
 */
export function forgeSidecarEnv(
  meta: BottleMeta,
  forge: NonNullable<BottleMeta['forge']>,
  P: GatePaths,
): Record<string, string> {
  return {
    // The kind's own variables (FORGE_<KIND>_…, checked by the caller): none stands for one set here.
    ...forge.site,
    FORGE_KIND: forge.kind,
    FORGE_OWNER: forge.owner,
    FORGE_REPO: forge.repo,
    FORGE_ISSUE_NUMBER: String(forge.issue),
    FORGE_PR_NUMBER: forge.pr ? String(forge.pr) : '',
    // The file, never the token: nothing the engine shows holds it.
    FORGE_TOKEN_FILE: `${P.secrets}/token`,
    BB_SIDECAR_SOCKET: P.socket,
    BB_QUEUE_DIR: P.queue,
    BB_OPS_LOG: `${P.state}/ops.jsonl`,
    BB_GIT_DIR: `${P.state}/push.git`,
    // It holds what the agent pushes: no more than its own disk could.
    BB_GIT_DIR_MAX: String(meta.diskBytes ?? 16 * 1024 ** 3),
    BB_WORKSPACE: P.workspace,
    BB_BRANCH: meta.branch,
    // A resumed turn with a PR: the sidecar brings the PR branch to the checkout.
    ...(syncsPr(meta) ? { BB_SYNC_PR: '1' } : {}),
    // The launch's base: its history is the mirror's, never taken from the workspace.
    ...(meta.baseCommit ? { BB_BASE_COMMIT: meta.baseCommit } : {}),
    // The turn it serves, as the host writes it (a warm gate serves several).
    BB_TURN_FILE: `${P.state}/${TURN_FILE}`,
  };
}

/**
 * Create a bottle's gate: one container, one process (`bb-gate.mjs`) serving
 * the agent its forge sidecar, supervise sidecar and proxies, each on its own
 * socket in the bottle's socket directory. It is the only holder of the forge
 * token and the model keys, which it reads once from files on a tmpfs mounted
 * into it alone. Its mounts are resolved when it starts: start it only once
 * the bottle's disk is mounted. Undefined when the plan serves nothing.
 */
export async function createGate(
  meta: BottleMeta,
  plan: GatePlan,
  o: GateOptions,
): Promise<CreatedGate | undefined> {
  if (meta.forge && !plan.token)
    throw new BbError('INVALID_INPUT', 'a forge bottle needs the forge token to start its gate');
  const forge = meta.forge && plan.token ? meta.forge : undefined;
  // What reaches the token's holder is checked here too, whoever wrote the meta.
  if (forge) checkSiteEnv(forge.kind, forge.site);
  if (!forge && !plan.supervise && !plan.proxies) return undefined;
  const p = bottlePaths(meta.slug, o.env);
  const owner = isolated(o.backend) && process.getuid?.() === 0 ? GATE_USER : undefined;
  removeSecrets(meta.slug, o.env);
  let secrets: string | undefined;
  if (forge) secrets = writeSecret(meta.slug, 'gate', 'token', plan.token!, o.env, owner);
  if (plan.proxies) {
    writeFileSync(join(p.proxy, 'rules.json'), plan.proxies.allowlist);
    writeFileSync(join(p.proxy, 'routes.json'), plan.proxies.routes);
    // The gate alone holds the credentials: the `env:NAME` values its routes name.
    const keys = routeSecrets(plan.proxies.routes, o.env);
    secrets = writeSecret(meta.slug, 'gate', 'keys.json', JSON.stringify(keys), o.env, owner);
  }
  const P = pathsFor(o.backend, p, o.runtime, secrets ?? '');
  const mirror = mirrorObjectsFor(o.backend, meta);
  const sockets = [
    ...(forge ? ['forge.sock'] : []),
    ...(plan.supervise ? ['supervise.sock'] : []),
    ...(plan.proxies ? ['egress.sock', 'cred.sock'] : []),
  ];
  // A socket a killed gate left behind must not pass for this one's.
  for (const s of sockets) rmSync(join(p.sock, s), { force: true });
  const env: Record<string, string> = {
    HOME: '/tmp',
    BB_SLUG: meta.slug,
    // The agent is another user: it may connect, not remove.
    BB_SOCKET_MODE: isolated(o.backend) ? '666' : '600',
  };
  const mounts: BottleSpec['mounts'] = [
    { source: o.runtime, target: P.runtime, readOnly: true },
    { source: p.sock, target: P.socketDir },
  ];
  if (secrets) mounts.push({ source: secrets, target: P.secrets, readOnly: true });
  if (forge) {
    Object.assign(env, {
      ...forgeSidecarEnv(meta, forge, P),
      ...kindModule(o.runtime, P.runtime, forge.kind),
      ...(mirror ? { BB_GIT_ALTERNATE: mirror } : {}),
    });
    mounts.push(
      { source: p.queue, target: P.queue },
      // Read only: the sidecar reads the agent's commits as data and never writes there.
      { source: p.workspace, target: P.workspace, readOnly: true },
      ...(mirror && meta.mirror && isolated(o.backend)
        ? [{ source: join(meta.mirror, 'objects'), target: mirror, readOnly: true }]
        : []),
    );
  }
  if (forge || plan.proxies) mounts.push({ source: p.state, target: P.state });
  if (plan.supervise) {
    const policy = loadPolicy(bbHome(o.env));
    Object.assign(env, {
      BB_SUPERVISE_SOCKET: P.superviseSocket,
      BB_SUPERVISE_DIR: P.supervise,
      BB_CURRENT_CONFIG: P.currentConfig,
      BB_SUPERVISE_POLICY: JSON.stringify({
        allowedBases: allowedBases(meta, o.env),
        ttlMs: policy.ttlMs,
        waitMs: policy.waitMs,
        coolDownAfter: policy.coolDownAfter,
        coolDownMs: policy.coolDownMs,
      }),
    });
    mounts.push(
      { source: p.supervise, target: P.supervise },
      { source: p.currentConfig, target: P.currentConfig, readOnly: true },
    );
  }
  if (plan.proxies) {
    Object.assign(env, {
      BB_EGRESS_RULES: `${P.proxy}/rules.json`,
      BB_CRED_ROUTES: `${P.proxy}/routes.json`,
      BB_CRED_SECRETS_FILE: `${P.secrets}/keys.json`,
      BB_EGRESS_SOCKET: `${P.socketDir}/egress.sock`,
      BB_CRED_SOCKET: `${P.socketDir}/cred.sock`,
      BB_EGRESS_LOG: `${P.state}/egress.jsonl`,
      BB_PROXY_STATUS: `${P.state}/proxy-status.json`,
    });
    mounts.push({ source: p.proxy, target: P.proxy, readOnly: true });
  }
  o.onProgress?.(`creating the gate (${sockets.map((s) => s.replace('.sock', '')).join(', ')})`);
  const id = await o.backend.create({
    name: `bb-${meta.slug}-gate`,
    image: o.image,
    cmd: ['node', `${P.runtime}/bb-gate.mjs`],
    entrypoint: [],
    user: userSpec(GATE_USER),
    labels: bottleLabels(meta, GATE_ROLE, o.env),
    // The gate alone reaches the forge and the model; the agent has no network at all.
    network: forge || plan.proxies ? 'host' : 'none',
    readOnlyRootfs: true,
    tmpfs: { '/tmp': 'rw,size=64m' },
    env,
    mounts,
    // Its git checks every object the agent pushes, its proxies carry the agent's traffic:
    // whatever that costs, it costs here.
    resources: {
      memoryBytes: ((forge ? 1024 : 128) + (plan.proxies ? 256 : 0)) * 1024 * 1024,
      pidsLimit: 256,
    },
  });
  return { id, sockets: sockets.map((s) => join(p.sock, s)), secrets };
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
  if (['/proc', '/sys', '/dev', bbHome(env), secretsRoot(env)].some(within))
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
  /** The egress allowlist (JSON). */
  allowlist: string;
  /** The credential routes (JSON, `env:NAME` references only). */
  routes: string;
}

/**
 * Start an egress and credential proxy gate for any agent container (a bottle's,
 * or forklift's): the only holder of the keys its routes name, serving on two
 * sockets in `dirs.sock`. Resolves its container id once it serves.
 */
export async function startProxyGate(o: ProxyGateOptions): Promise<string> {
  o.onProgress?.('starting the egress and credential proxies');
  writeFileSync(join(o.dirs.proxy, 'rules.json'), o.allowlist);
  writeFileSync(join(o.dirs.proxy, 'routes.json'), o.routes);
  // The proxy alone holds the credentials: the `env:NAME` values it needs, from this process's environment.
  const secrets = routeSecrets(o.routes, o.env);
  const dir = writeSecret(
    o.slug,
    'proxy',
    'keys.json',
    JSON.stringify(secrets),
    o.env,
    isolated(o.backend) && process.getuid?.() === 0 ? GATE_USER : undefined,
  );
  const P = isolated(o.backend)
    ? IN_BOTTLE
    : { ...IN_BOTTLE, runtime: o.runtime, secrets: dir, socketDir: o.dirs.sock, ...o.dirs };
  rmSync(join(o.dirs.sock, 'cred.sock'), { force: true });
  rmSync(join(o.dirs.sock, 'egress.sock'), { force: true });
  const id = await o.backend.create({
    name: `bb-${o.slug}-proxy`,
    image: o.image,
    cmd: ['node', `${P.runtime}/bb-egress.mjs`],
    entrypoint: [],
    user: userSpec(GATE_USER),
    labels: o.labels,
    network: 'host',
    readOnlyRootfs: true,
    tmpfs: { '/tmp': 'rw,size=16m' },
    env: {
      HOME: '/tmp',
      BB_EGRESS_RULES: `${P.proxy}/rules.json`,
      BB_CRED_ROUTES: `${P.proxy}/routes.json`,
      BB_CRED_SECRETS_FILE: `${P.secrets}/keys.json`,
      BB_EGRESS_SOCKET: `${P.socketDir}/egress.sock`,
      BB_CRED_SOCKET: `${P.socketDir}/cred.sock`,
      BB_SOCKET_MODE: isolated(o.backend) ? '666' : '600',
      BB_EGRESS_LOG: `${P.state}/egress.jsonl`,
      BB_PROXY_STATUS: `${P.state}/proxy-status.json`,
    },
    mounts: [
      { source: o.runtime, target: P.runtime, readOnly: true },
      { source: dir, target: P.secrets, readOnly: true },
      { source: o.dirs.proxy, target: P.proxy, readOnly: true },
      { source: o.dirs.sock, target: P.socketDir },
      { source: o.dirs.state, target: P.state },
    ],
    resources: { memoryBytes: 256 * 1024 * 1024, pidsLimit: 128 },
  });
  await o.backend.start(id);
  await waitForSocket(o.backend, id, join(o.dirs.sock, 'cred.sock'), o.slug, 'proxy');
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
  return `i=0; while { [ ! -S ${egress} ] || [ ! -S ${cred} ]; } && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done`;
}

/**
 * The shell lines that wait for the gate's proxy sockets, start the in-agent
 * bridge (TCP on 127.0.0.1 to them) and wait until it listens: run before the
 * agent's command.
 */
export function bridgePrelude(runtimeDir: string, socketDir: string): string {
  return `${proxySocketsScript(socketDir)}; BB_BRIDGE_READY=/tmp/.bb-bridge node ${runtimeDir}/bb-bridge.mjs ${bridgeMappings(socketDir).join(' ')} & i=0; while [ ! -e /tmp/.bb-bridge ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done`;
}

/** The agent's proxy variables: every outbound request through the bridge to the egress proxy. */
export const PROXY_ENV: Readonly<Record<string, string>> = {
  HTTPS_PROXY: `http://127.0.0.1:${BRIDGE_PORTS.egress}`,
  HTTP_PROXY: `http://127.0.0.1:${BRIDGE_PORTS.egress}`,
  NO_PROXY: '127.0.0.1,localhost',
};

/** The model API as the agent reaches it: the bridge to the credential proxy's route. */
export const modelApiUrl = (kind: 'anthropic' | 'openai'): string =>
  `http://127.0.0.1:${BRIDGE_PORTS.credentials}/${kind}`;

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
