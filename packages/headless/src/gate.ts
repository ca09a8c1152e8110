import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isReservedSecret } from '@bb/egress';
import { BbError, redactString, registerSecret } from '@bb/errors';
import type { Backend, BottleSpec } from './backend';
import {
  type BottleMeta,
  BRIDGE_PORTS,
  bottlePaths,
  GATE_USER,
  HOME_LABEL,
  homeLabel,
  IN_BOTTLE,
  pathsFor,
  userSpec,
} from './layout';
import { removeSecret, secretsDir, writeSecret } from './secrets';

/**
 * The gate of a bottle: the forge sidecar (the only holder of the forge token)
 * and, when the bottle has egress rules or credential routes, the proxies (the
 * only holder of the model keys). Each runs as the gate's user, outside the
 * agent's container, reads its secret once from a file on a tmpfs mounted into
 * it alone (removed as soon as it is up), and serves the agent on a socket in
 * a directory the agent cannot change.
 */
export interface GateOptions {
  backend: Backend;
  env: Record<string, string | undefined>;
  runtime: string;
  /** The image the gate runs in (needs node and git). */
  image: string;
  onProgress?: ((message: string) => void) | undefined;
}

export function bottleLabels(
  meta: BottleMeta,
  role: string,
  env: Record<string, string | undefined>,
): Record<string, string> {
  return { ...meta.labels, 'bb.slug': meta.slug, 'bb.role': role, [HOME_LABEL]: homeLabel(env) };
}

const isolated = (backend: Backend) => backend.mapsMounts;

/** Whether this turn's sidecar brings the PR branch to the checkout (a resumed turn with a PR). */
export function syncsPr(meta: BottleMeta): boolean {
  return !!meta.forge && meta.forge.pr !== undefined && meta.turns.length > 0;
}

/** Create and start the forge sidecar. Resolves its container id once it runs. */
export async function startSidecar(
  meta: BottleMeta,
  token: string | undefined,
  o: GateOptions,
): Promise<string> {
  const id = await createSidecar(meta, token, o);
  await o.backend.start(id);
  return id;
}

/**
 * Create the forge sidecar's container (not started). Its mounts are resolved when it
 * starts: start it only once the bottle's disk is mounted.
 */
export async function createSidecar(
  meta: BottleMeta,
  token: string | undefined,
  o: GateOptions,
): Promise<string> {
  if (!meta.forge || !token)
    throw new BbError('INVALID_INPUT', 'a forge bottle needs the forge token to start its sidecar');
  const p = bottlePaths(meta.slug, o.env);
  const secrets = writeSecret(
    meta.slug,
    'sidecar',
    'token',
    token,
    o.env,
    isolated(o.backend) && process.getuid?.() === 0 ? GATE_USER : undefined,
  );
  const P = pathsFor(o.backend, p, o.runtime, secrets);
  o.onProgress?.('creating the forge sidecar');
  const spec: BottleSpec = {
    name: `bb-${meta.slug}-sidecar`,
    image: o.image,
    cmd: ['node', `${P.runtime}/sidecar.mjs`],
    user: userSpec(GATE_USER),
    labels: bottleLabels(meta, 'sidecar', o.env),
    // The sidecar alone reaches the forge; the agent has no network at all.
    network: 'host',
    readOnlyRootfs: true,
    tmpfs: { '/tmp': 'rw,size=64m' },
    env: {
      HOME: '/tmp',
      FORGE_GITEA_API: meta.forge.apiUrl,
      FORGE_OWNER: meta.forge.owner,
      FORGE_REPO: meta.forge.repo,
      FORGE_ISSUE_NUMBER: String(meta.forge.issue),
      FORGE_PR_NUMBER: meta.forge.pr ? String(meta.forge.pr) : '',
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
      BB_SLUG: meta.slug,
      // A resumed turn with a PR: the sidecar brings the PR branch to the checkout.
      ...(syncsPr(meta)
        ? { BB_SYNC_PR: '1', ...(meta.baseCommit ? { BB_BASE_COMMIT: meta.baseCommit } : {}) }
        : {}),
      // The agent is another user: it may connect, not remove.
      BB_SOCKET_MODE: isolated(o.backend) ? '666' : '600',
    },
    mounts: [
      { source: o.runtime, target: P.runtime, readOnly: true },
      { source: secrets, target: P.secrets, readOnly: true },
      { source: p.sock, target: P.socketDir },
      { source: p.queue, target: P.queue },
      { source: p.state, target: P.state },
      // Read only: the sidecar reads the agent's commits as data and never writes there.
      { source: p.workspace, target: P.workspace, readOnly: true },
    ],
    // Its git checks every object the agent pushes: whatever that costs, it costs here.
    resources: { memoryBytes: 1024 * 1024 * 1024, pidsLimit: 128 },
  };
  return o.backend.create(spec);
}

/** Once the sidecar serves, its token file goes: it was read once at start. */
export function sidecarUp(meta: BottleMeta, env: Record<string, string | undefined>): void {
  removeSecret(secretsDir(meta.slug, 'sidecar', env), 'token');
}

/** The `env:NAME` secrets a routes file references, with their values from the orchestrator's environment. */
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
 * Start the egress and credential proxies (one gate container) with the rules
 * and routes (secret references only) in `proxy/`, and the referenced secrets
 * in a file only it mounts. Resolves once its sockets are up (the secrets file
 * is then removed). SIGHUP reloads both files; the outcome lands in
 * `state/proxy-status.json`.
 */
export async function startProxies(
  meta: BottleMeta,
  cfg: { routes: string; allowlist: string },
  o: GateOptions,
): Promise<string> {
  const p = bottlePaths(meta.slug, o.env);
  return startProxyGate({
    ...o,
    slug: meta.slug,
    labels: bottleLabels(meta, 'proxy', o.env),
    dirs: { proxy: p.proxy, sock: p.sock, state: p.state },
    ...cfg,
  });
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

/**
 * The shell lines that start the in-agent bridge (TCP on 127.0.0.1 to the gate's
 * two sockets) and wait until it listens: run before the agent's command.
 */
export function bridgePrelude(runtimeDir: string, socketDir: string): string {
  return `BB_BRIDGE_READY=/tmp/.bb-bridge node ${runtimeDir}/bb-bridge.mjs ${BRIDGE_PORTS.egress}=${socketDir}/egress.sock ${BRIDGE_PORTS.credentials}=${socketDir}/cred.sock & i=0; while [ ! -e /tmp/.bb-bridge ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done`;
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
