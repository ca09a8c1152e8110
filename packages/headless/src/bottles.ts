import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { BbError, isBbError, redactString, registerSecret } from '@bb/errors';
import type { Backend, BottleSpec } from './backend';
import { bbHome } from './home';
import {
  type AgentManifest,
  type BottleManifest,
  loadAgentManifest,
  loadBottleManifest,
  memoryBytes,
} from './manifests';
import { providerFor } from './providers';

const run = promisify(execFile);

/** How a bottle reaches its forge. The token goes to the sidecar only and is never written down. */
export interface ForgeWiring {
  apiUrl: string;
  token: string;
  owner: string;
  repo: string;
  issue: number;
  pr?: number | undefined;
  /** Where the workspace is cloned from (read with the token). */
  cloneUrl: string;
}

export interface BottleMeta {
  slug: string;
  agent: string;
  bottles: string[];
  backend: string;
  image: string;
  status: 'running' | 'frozen';
  sessionId: string | null;
  cwd: string;
  branch: string;
  forge: Omit<ForgeWiring, 'token'> | null;
  turns: Array<{
    turn: number;
    prompt: string;
    exitCode: number;
    ok: boolean;
    startedAt: string;
    finishedAt: string;
  }>;
  /** Extra container labels given at launch. */
  labels?: Record<string, string>;
  /** The turn in progress (so a restarted orchestrator can finish it), or absent. */
  current?: { turn: number; prompt: string; startedAt: string } | null;
  createdAt: string;
}

export interface TurnOutcome {
  slug: string;
  exitCode: number;
  ok: boolean;
  sessionId: string | undefined;
  error?: string | undefined;
  /** What the agent printed (redacted). */
  output: string;
  /** `reattach` only: the bottle's agent container was gone, so the turn's end is unknown. */
  vanished?: boolean;
  /** The agent provider, and the CLI's version when its image announces it (bb-agents does). */
  provider?: string;
  providerVersion?: string;
}

/** The `{"type":"bb_cli",...}` line the bb-agents image's CLI wrappers print before starting. */
function announcedCli(output: string): { name: string; version: string } | undefined {
  for (const line of output.split('\n')) {
    const m = /^\{"type":"bb_cli","name":"([a-z]+)","version":"([^"]+)"\}$/.exec(line.trim());
    if (m) return { name: m[1]!, version: m[2]! };
  }
  return undefined;
}

export interface BottleOptions {
  backend: Backend;
  /** Where BB_HOME is read from. @default process.env */
  env?: Record<string, string | undefined>;
  /** The image the sidecar runs in (needs node). @default BB_BASE_IMAGE or bb-base:latest */
  sidecarImage?: string;
  /** Progress messages for a person (launch steps). */
  onProgress?: (message: string) => void;
}

export interface LaunchOptions extends BottleOptions {
  agent: string;
  /** Bottle manifests to use; the first gives the image and limits. @default the agent's */
  bottles?: string[];
  prompt: string;
  forge?: ForgeWiring;
  /** @default `<agent>-<5 random chars>` */
  slug?: string;
  /**
   * Extra labels for the bottle's containers, kept for later turns (e.g.
   * `{ 'bb.managed-by': 'orchestrator' }`, which the orchestrator's restart
   * reconcile looks for). Keys `bb.slug`, `bb.role` and `bb.home` are reserved.
   */
  labels?: Record<string, string>;
}

export interface ResumeOptions extends BottleOptions {
  slug: string;
  prompt: string;
  /** Needed again when the bottle has a forge: the token is never stored. */
  forgeToken?: string;
  /**
   * The PR the bottle opened in an earlier turn (the orchestrator learns it from
   * the sidecar's relay), so this turn's sidecar may write to it. Remembered.
   */
  pr?: number | undefined;
}

const SLUG = /^[a-z0-9][a-z0-9._-]{0,62}$/;
/** Ports of the in-bottle bridge: the egress proxy (HTTPS_PROXY) and the credential proxy (model APIs). */
export const BRIDGE_PORTS = { egress: 3128, credentials: 3129 } as const;
const IN_BOTTLE = {
  home: '/home/bottle',
  workspace: '/workspace',
  runtime: '/opt/bb',
  socketDir: '/run/bb',
  socket: '/run/bb/forge.sock',
  queue: '/var/bb/queue',
  state: '/var/bb/state',
  proxy: '/var/bb/proxy',
};

/** The paths a bottle's processes see: fixed ones in a container, the host's otherwise. */
function pathsFor(backend: Backend, dir: string, runtime: string): typeof IN_BOTTLE {
  if (backend.mapsMounts) return IN_BOTTLE;
  return {
    home: join(dir, 'home'),
    workspace: join(dir, 'workspace'),
    runtime,
    socketDir: join(dir, 'sock'),
    socket: join(dir, 'sock', 'forge.sock'),
    queue: join(dir, 'queue'),
    state: join(dir, 'state'),
    proxy: join(dir, 'proxy'),
  };
}

/** The label naming the `BB_HOME` a bottle belongs to (see `homeLabel`). */
export const HOME_LABEL = 'bb.home';

/**
 * The `bb.home` label value of bottles made under this `BB_HOME`: a short hash
 * of its path. Two orchestrators (or test runs) on one engine never take each
 * other's containers for their own.
 */
export function homeLabel(env: Record<string, string | undefined> = process.env): string {
  return createHash('sha256').update(bbHome(env)).digest('hex').slice(0, 16);
}

/**
 * The layout of `$BB_HOME/bottles/<slug>/`: `meta.json`, `workspace/` (the clone,
 * remotes removed), `home/` (the agent's home: transcript and session),
 * `sock/` (the sidecar socket, 0700), `queue/` (events for the orchestrator),
 * `state/ops.jsonl` (the op log), `logs/` (each turn's output).
 */
export function bottleDir(
  slug: string,
  env: Record<string, string | undefined> = process.env,
): string {
  return join(bbHome(env), 'bottles', slug);
}

export function readMeta(
  slug: string,
  env: Record<string, string | undefined> = process.env,
): BottleMeta | undefined {
  const file = join(bottleDir(slug, env), 'meta.json');
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as BottleMeta) : undefined;
}

function writeMeta(meta: BottleMeta, env: Record<string, string | undefined>): void {
  writeFileSync(join(bottleDir(meta.slug, env), 'meta.json'), `${JSON.stringify(meta, null, 2)}\n`);
}

/** Copy the runtime files (sidecar, bb-forge, MCP bridge, script agent) where bottles can read them. */
function prepareRuntime(env: Record<string, string | undefined>): string {
  const require = createRequire(import.meta.url);
  const sidecarDir = join(
    dirname(require.resolve('@bb/forge-sidecar/package.json')),
    'dist',
    'bundle',
  );
  const egressDir = join(dirname(require.resolve('@bb/egress/package.json')), 'dist', 'bundle');
  const here = dirname(fileURLToPath(import.meta.url));
  // From this package's dist/ or src/, or through its name when an application has
  // bundled this code into its own files.
  let byName = '';
  try {
    byName = join(dirname(require.resolve('@bb/headless/package.json')), 'dist', 'bundle');
  } catch {}
  const own = [join(here, 'bundle'), join(here, '..', 'dist', 'bundle'), byName].find(
    (d) => d && existsSync(join(d, 'script-agent.mjs')),
  );
  const files: Array<[string, string]> = [
    [sidecarDir, 'sidecar.mjs'],
    [sidecarDir, 'bb-forge.mjs'],
    [sidecarDir, 'bb-forge-mcp.mjs'],
    [egressDir, 'bb-egress.mjs'],
    [egressDir, 'bb-bridge.mjs'],
    [own ?? '', 'script-agent.mjs'],
  ];
  for (const [dir, f] of files) {
    if (!dir || !existsSync(join(dir, f))) {
      throw new BbError(
        'NOT_FOUND',
        `the bottle runtime file ${f} is missing: build the packages (pnpm build) first`,
      );
    }
  }
  const target = join(bbHome(env), 'runtime');
  mkdirSync(target, { recursive: true, mode: 0o755 });
  chmodSync(target, 0o755);
  for (const [dir, f] of files) {
    const from = statSync(join(dir, f));
    const to = existsSync(join(target, f)) ? statSync(join(target, f)) : undefined;
    // Copied once per build, not once per turn.
    if (to && to.size === from.size && to.mtimeMs === from.mtimeMs) continue;
    // Written aside and renamed, so a bottle starting meanwhile never reads half a file.
    const part = join(target, `.${f}.${process.pid}.${randomBytes(4).toString('hex')}`);
    copyFileSync(join(dir, f), part);
    chmodSync(part, 0o755);
    utimesSync(part, from.atime, from.mtime);
    renameSync(part, join(target, f));
  }
  return target;
}

async function chownTree(...paths: string[]): Promise<void> {
  if (process.getuid?.() === 0) await run('chown', ['-R', '1000:1000', ...paths]);
}

/** Start a bottle for `agent`, run its first turn to the end, and freeze it. */
export async function launch(options: LaunchOptions): Promise<TurnOutcome> {
  const env = options.env ?? process.env;
  const progress = options.onProgress ?? (() => {});
  if (options.forge) registerSecret(options.forge.token);
  const { manifest: agent } = loadAgentManifest(options.agent, env);
  const bottleNames = options.bottles ?? agent.bottles;
  const bottles = bottleNames.map((b) => loadBottleManifest(b, env).manifest);
  const first = bottles[0]!;
  if (!first.image)
    throw new BbError(
      'INVALID_INPUT',
      `bottle ${bottleNames[0]} names a dockerfile; building images is not supported yet: give an image`,
    );
  // Fail on an unknown provider before anything is created.
  providerFor(agent.provider);
  const slug = options.slug ?? `${options.agent}-${randomBytes(4).toString('hex').slice(0, 5)}`;
  if (!SLUG.test(slug))
    throw new BbError('INVALID_INPUT', `slug ${JSON.stringify(slug)} must match ${SLUG.source}`);
  const dir = bottleDir(slug, env);
  const sidecarImage = options.sidecarImage ?? env['BB_BASE_IMAGE'] ?? 'bb-base:latest';
  const images = [...new Set([first.image, ...(options.forge ? [sidecarImage] : [])])];
  // Asked of the engine together; a name conflict is reported before a missing image.
  const [taken, ...checked] = await Promise.allSettled([
    options.backend.list({ 'bb.slug': slug }),
    ...images.map((image) => options.backend.ensureImage(image)),
  ]);
  if (taken!.status === 'rejected') throw taken!.reason;
  if (existsSync(dir) || taken!.value.length > 0) {
    throw new BbError(
      'CONFLICT',
      `a bottle named ${slug} already exists: destroy it first or choose another slug`,
    );
  }
  for (const c of checked) if (c.status === 'rejected') throw c.reason;

  const branch = `bb/${options.agent}-${options.forge?.issue ?? slug}`;
  let early: Promise<string> | undefined;
  try {
    progress(`preparing bottle ${slug}`);
    for (const d of ['workspace', 'home/.bb', 'sock', 'queue', 'state', 'logs', 'proxy'])
      mkdirSync(join(dir, d), { recursive: true, mode: 0o700 });
    chmodSync(dir, 0o755);
    const meta: BottleMeta = {
      slug,
      agent: options.agent,
      bottles: bottleNames,
      backend: options.backend.name,
      image: first.image,
      status: 'running',
      sessionId: null,
      cwd: options.backend.mapsMounts ? IN_BOTTLE.workspace : join(dir, 'workspace'),
      branch,
      forge: options.forge
        ? {
            apiUrl: options.forge.apiUrl,
            owner: options.forge.owner,
            repo: options.forge.repo,
            issue: options.forge.issue,
            pr: options.forge.pr,
            cloneUrl: options.forge.cloneUrl,
          }
        : null,
      turns: [],
      ...(options.labels ? { labels: options.labels } : {}),
      createdAt: new Date().toISOString(),
    };
    writeMeta(meta, env);
    if (options.forge) {
      // The sidecar needs nothing from the workspace to come up: it starts while
      // the repository is cloned.
      early = startSidecar(meta, options.forge.token, prepareRuntime(env), options, env);
      early.catch(() => {});
    }
    const ws = join(dir, 'workspace');
    const gitEnv = {
      ...process.env,
      HOME: dir,
      GIT_TERMINAL_PROMPT: '0',
      GIT_CONFIG_NOSYSTEM: '1',
    };
    if (options.forge) {
      progress(`cloning ${options.forge.owner}/${options.forge.repo}`);
      // The clone's remote is removed at once: only the sidecar pushes. The commit
      // identity is set by the clone itself.
      await run(
        'git',
        [
          'clone',
          '--quiet',
          '--origin',
          'source',
          '--config',
          `user.name=${agent.git.name}`,
          '--config',
          `user.email=${agent.git.email}`,
          options.forge.cloneUrl,
          ws,
        ],
        {
          env: {
            ...gitEnv,
            GIT_CONFIG_COUNT: '1',
            GIT_CONFIG_KEY_0: 'http.extraHeader',
            GIT_CONFIG_VALUE_0: `Authorization: token ${options.forge.token}`,
          },
        },
      ).catch((err: Error) => {
        throw new BbError(
          'FORGE_UNAVAILABLE',
          `cannot clone ${options.forge!.cloneUrl}: ${redactString(err.message)}`,
        );
      });
      await run('git', ['-C', ws, 'remote', 'remove', 'source'], { env: gitEnv });
      await run('git', ['-C', ws, 'checkout', '-q', '-B', branch], { env: gitEnv });
    } else {
      await run('git', ['init', '-q', '-b', branch, ws], { env: gitEnv });
      await run('git', ['-C', ws, 'config', 'user.name', agent.git.name], { env: gitEnv });
      await run('git', ['-C', ws, 'config', 'user.email', agent.git.email], { env: gitEnv });
    }
    return await runTurn(
      meta,
      agent,
      bottles,
      options.prompt,
      options.forge?.token,
      options,
      env,
      early,
    );
  } catch (err) {
    // Nothing half-made stays behind (a sidecar still being created included).
    await early?.catch(() => {});
    await destroy(slug, options);
    throw err;
  }
}

/** Rehydrate a frozen bottle and continue the same agent session with a new prompt. */
export async function resume(options: ResumeOptions): Promise<TurnOutcome> {
  const env = options.env ?? process.env;
  const meta = readMeta(options.slug, env);
  if (!meta)
    throw new BbError('NOT_FOUND', `no bottle ${options.slug} in ${join(bbHome(env), 'bottles')}`);
  if (meta.status !== 'frozen')
    throw new BbError(
      'CONFLICT',
      `bottle ${options.slug} is ${meta.status}; only a frozen bottle can be resumed`,
    );
  if (!meta.sessionId)
    throw new BbError('CONFLICT', `bottle ${options.slug} has no recorded session to resume`);
  if (meta.forge && !options.forgeToken)
    throw new BbError(
      'INVALID_INPUT',
      `bottle ${options.slug} talks to a forge: resume needs the forge token again`,
    );
  if (options.forgeToken) registerSecret(options.forgeToken);
  const { manifest: agent } = loadAgentManifest(meta.agent, env);
  const bottles = meta.bottles.map((b) => loadBottleManifest(b, env).manifest);
  if (options.pr !== undefined && meta.forge) meta.forge.pr = options.pr;
  meta.status = 'running';
  writeMeta(meta, env);
  return runTurn(meta, agent, bottles, options.prompt, options.forgeToken, options, env);
}

/** Stop a bottle's containers, keep their output, and mark it frozen. Idempotent. */
export async function freeze(slug: string, options: BottleOptions): Promise<void> {
  const env = options.env ?? process.env;
  const dir = bottleDir(slug, env);
  for (const c of await options.backend.list({ 'bb.slug': slug })) {
    if (c.state === 'running' || c.state === 'paused') await options.backend.stop(c.id, 5000);
    if (existsSync(join(dir, 'logs')))
      writeFileSync(
        join(dir, 'logs', `${c.labels['bb.role'] ?? 'bottle'}-${Date.now()}.log`),
        redactString(await options.backend.logs(c.id)),
      );
    await options.backend.destroy(c.id);
  }
  const meta = readMeta(slug, env);
  if (meta) {
    meta.status = 'frozen';
    writeMeta(meta, env);
  }
}

/** Remove a bottle's containers and its state directory. Idempotent. */
export async function destroy(slug: string, options: BottleOptions): Promise<void> {
  const env = options.env ?? process.env;
  for (const c of await options.backend.list({ 'bb.slug': slug }))
    await options.backend.destroy(c.id);
  rmSync(bottleDir(slug, env), { recursive: true, force: true });
}

function bottleLabels(
  meta: BottleMeta,
  role: string,
  env: Record<string, string | undefined>,
): Record<string, string> {
  return { ...meta.labels, 'bb.slug': meta.slug, 'bb.role': role, [HOME_LABEL]: homeLabel(env) };
}

/**
 * Create and start a forge bottle's sidecar. The agent's client waits for its
 * socket, and watchSidecar checks that it really comes up, so it can start
 * alongside the clone or the agent.
 */
function startSidecar(
  meta: BottleMeta,
  token: string | undefined,
  runtime: string,
  options: BottleOptions,
  env: Record<string, string | undefined>,
): Promise<string> {
  if (!meta.forge || !token)
    throw new BbError('INVALID_INPUT', 'a forge bottle needs the forge token to start its sidecar');
  const { backend } = options;
  const dir = bottleDir(meta.slug, env);
  const P = pathsFor(backend, dir, runtime);
  options.onProgress?.('starting the forge sidecar');
  const sidecar: BottleSpec = {
    name: `bb-${meta.slug}-sidecar`,
    image: options.sidecarImage ?? env['BB_BASE_IMAGE'] ?? 'bb-base:latest',
    cmd: ['node', `${P.runtime}/sidecar.mjs`],
    user: '1000:1000',
    labels: bottleLabels(meta, 'sidecar', env),
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
      FORGE_TOKEN: token,
      BB_SIDECAR_SOCKET: P.socket,
      BB_QUEUE_DIR: P.queue,
      BB_OPS_LOG: `${P.state}/ops.jsonl`,
      BB_WORKSPACE: P.workspace,
      BB_BRANCH: meta.branch,
      BB_SLUG: meta.slug,
    },
    mounts: [
      { source: runtime, target: P.runtime, readOnly: true },
      { source: join(dir, 'sock'), target: P.socketDir },
      { source: join(dir, 'queue'), target: P.queue },
      { source: join(dir, 'state'), target: P.state },
      { source: join(dir, 'workspace'), target: P.workspace },
    ],
    resources: { memoryBytes: 256 * 1024 * 1024, pidsLimit: 128 },
  };
  return (async () => {
    // It runs as uid 1000 and writes its socket, queue and op log.
    if (backend.mapsMounts)
      await chownTree(join(dir, 'sock'), join(dir, 'queue'), join(dir, 'state'));
    chmodSync(join(dir, 'sock'), 0o700);
    const id = await backend.create(sidecar);
    await backend.start(id);
    return id;
  })();
}

async function runTurn(
  meta: BottleMeta,
  agent: AgentManifest,
  bottles: BottleManifest[],
  prompt: string,
  token: string | undefined,
  options: BottleOptions,
  env: Record<string, string | undefined>,
  early?: Promise<string>,
): Promise<TurnOutcome> {
  const { backend } = options;
  const progress = options.onProgress ?? (() => {});
  const dir = bottleDir(meta.slug, env);
  const runtime = prepareRuntime(env);
  const P = pathsFor(backend, dir, runtime);
  const provider = providerFor(agent.provider);
  const credentials = bottles.flatMap((b) => b.credentials);
  const allow = [...new Set(bottles.flatMap((b) => b.egress.allow))];
  const proxied = credentials.length > 0 || allow.length > 0;
  const routeFor = (kind: 'anthropic' | 'openai') =>
    credentials.find((c) => c.route === `/${kind}`)
      ? `http://127.0.0.1:${BRIDGE_PORTS.credentials}/${kind}`
      : undefined;
  const anthropicUrl = routeFor('anthropic');
  const openaiUrl = routeFor('openai');
  const invocation = provider.invocation({
    prompt,
    sessionId: meta.sessionId ?? undefined,
    model: agent.model,
    home: P.home,
    runtimeDir: P.runtime,
    socket: P.socket,
    ...(anthropicUrl || openaiUrl
      ? {
          modelApi: anthropicUrl
            ? { kind: 'anthropic' as const, baseUrl: anthropicUrl }
            : { kind: 'openai' as const, baseUrl: openaiUrl! },
        }
      : {}),
    ...(agent.retries !== undefined ? { retries: agent.retries } : {}),
  });
  // The script agent's script is written each turn, like a real CLI's settings,
  // so a script edited between turns takes effect.
  const files = {
    ...invocation.files,
    ...(agent.script !== undefined ? { '.bb/script.json': JSON.stringify(agent.script) } : {}),
  };
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, 'home', rel)), { recursive: true });
    writeFileSync(join(dir, 'home', rel), content);
  }
  // Container bottles run as uid 1000; local ones as this process's user.
  if (backend.mapsMounts) await chownTree(dir);
  chmodSync(join(dir, 'sock'), 0o700);
  const labels = (role: string) => bottleLabels(meta, role, env);
  const startedAt = new Date().toISOString();
  const turn = meta.turns.length + 1;
  meta.current = { turn, prompt, startedAt };
  writeMeta(meta, env);
  let sidecarStarted: Promise<string> | undefined;
  try {
    if (meta.forge) {
      // Started early by launch (alongside the clone), or now.
      sidecarStarted = early ?? startSidecar(meta, token, runtime, options, env);
      // Awaited below; until then a failure must not count as unhandled.
      sidecarStarted.catch(() => {});
    }
    if (proxied) {
      progress('starting the egress and credential proxies');
      mkdirSync(join(dir, 'proxy'), { recursive: true });
      writeFileSync(join(dir, 'proxy', 'rules.json'), JSON.stringify({ allow }));
      writeFileSync(
        join(dir, 'proxy', 'routes.json'),
        JSON.stringify({
          routes: credentials.map((c) => ({
            prefix: c.route,
            upstream: c.upstream,
            headers: c.headers,
          })),
        }),
      );
      // The proxy alone holds the credentials: the `env:NAME` values it needs, from this process's environment.
      const secrets: Record<string, string> = {};
      for (const c of credentials)
        for (const ref of Object.values(c.headers)) {
          if (!ref.startsWith('env:')) continue;
          const name = ref.slice(4);
          const value = env[name] ?? process.env[name];
          if (!value)
            throw new BbError(
              'INVALID_INPUT',
              `credential route ${c.route} needs ${name}, which is not set in the orchestrator's environment`,
            );
          registerSecret(value);
          secrets[name] = value;
        }
      rmSync(join(dir, 'sock', 'cred.sock'), { force: true });
      const proxyId = await backend.create({
        name: `bb-${meta.slug}-proxy`,
        image: options.sidecarImage ?? env['BB_BASE_IMAGE'] ?? 'bb-base:latest',
        cmd: ['node', `${P.runtime}/bb-egress.mjs`],
        user: '1000:1000',
        labels: labels('proxy'),
        network: 'host',
        readOnlyRootfs: true,
        tmpfs: { '/tmp': 'rw,size=16m' },
        env: {
          ...secrets,
          HOME: '/tmp',
          BB_EGRESS_RULES: `${P.proxy}/rules.json`,
          BB_CRED_ROUTES: `${P.proxy}/routes.json`,
          BB_EGRESS_SOCKET: `${P.socketDir}/egress.sock`,
          BB_CRED_SOCKET: `${P.socketDir}/cred.sock`,
          BB_EGRESS_LOG: `${P.state}/egress.jsonl`,
        },
        mounts: [
          { source: runtime, target: P.runtime, readOnly: true },
          { source: join(dir, 'proxy'), target: P.proxy, readOnly: true },
          { source: join(dir, 'sock'), target: P.socketDir },
          { source: join(dir, 'state'), target: P.state },
        ],
        resources: { memoryBytes: 256 * 1024 * 1024, pidsLimit: 128 },
      });
      await backend.start(proxyId);
      await waitForSocket(backend, proxyId, join(dir, 'sock', 'cred.sock'), meta.slug, 'proxy');
    }
    progress(`running ${agent.provider} agent (turn ${turn})`);
    const bottle = bottles[0]!;
    // With proxies, the agent reaches them through the in-bottle bridge (TCP on
    // 127.0.0.1 to the mounted sockets), started before the agent and awaited.
    const cmd = proxied
      ? [
          'sh',
          '-c',
          `BB_BRIDGE_READY=/tmp/.bb-bridge node ${P.runtime}/bb-bridge.mjs ${BRIDGE_PORTS.egress}=${P.socketDir}/egress.sock ${BRIDGE_PORTS.credentials}=${P.socketDir}/cred.sock & i=0; while [ ! -e /tmp/.bb-bridge ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; exec "$@"`,
          'bb-agent',
          ...invocation.cmd,
        ]
      : invocation.cmd;
    const agentSpec: BottleSpec = {
      name: `bb-${meta.slug}-agent`,
      image: meta.image,
      cmd,
      user: '1000:1000',
      workdir: P.workspace,
      labels: labels('agent'),
      network: 'none',
      readOnlyRootfs: true,
      tmpfs: { '/tmp': 'rw,size=256m' },
      env: {
        ...Object.assign({}, ...bottles.map((b) => b.env)),
        ...invocation.env,
        HOME: P.home,
        BB_SIDECAR_SOCKET: P.socket,
        BB_WORKSPACE_DIR: P.workspace,
        ...(proxied
          ? {
              HTTPS_PROXY: `http://127.0.0.1:${BRIDGE_PORTS.egress}`,
              HTTP_PROXY: `http://127.0.0.1:${BRIDGE_PORTS.egress}`,
              NO_PROXY: '127.0.0.1,localhost',
            }
          : {}),
      },
      mounts: [
        { source: runtime, target: P.runtime, readOnly: true },
        { source: join(dir, 'sock'), target: P.socketDir },
        { source: join(dir, 'workspace'), target: P.workspace },
        { source: join(dir, 'home'), target: P.home },
      ],
      resources: {
        memoryBytes: memoryBytes(bottle.resources.memory) ?? 2 * 1024 ** 3,
        pidsLimit: bottle.resources.pids ?? 512,
        ...(bottle.resources.cpus ? { cpus: bottle.resources.cpus } : {}),
      },
    };
    const aid = await backend.create(agentSpec);
    await backend.start(aid);
    if (sidecarStarted)
      await watchSidecar(
        backend,
        await sidecarStarted,
        aid,
        join(dir, 'sock', 'forge.sock'),
        meta.slug,
      );
    return await finishTurn(meta, aid, options, env);
  } catch (err) {
    // A failed turn leaves the bottle frozen, its workspace and session intact.
    await freeze(meta.slug, options).catch(() => {});
    throw isBbError(err)
      ? err
      : new BbError(
          'BACKEND_ERROR',
          `turn ${turn} of ${meta.slug} failed: ${redactString((err as Error).message)}`,
          { cause: err },
        );
  }
}

/** Wait for a started agent to exit, record the turn, freeze the bottle. */
async function finishTurn(
  meta: BottleMeta,
  agentId: string,
  options: BottleOptions,
  env: Record<string, string | undefined>,
): Promise<TurnOutcome> {
  const { backend } = options;
  const { manifest: agent } = loadAgentManifest(meta.agent, env);
  const provider = providerFor(agent.provider);
  const { exitCode, oomKilled } = await backend.wait(agentId);
  const output = redactString(await backend.logs(agentId));
  const parsed = provider.parseResult(output, exitCode);
  const cli = announcedCli(output);
  const current = meta.current ?? {
    turn: meta.turns.length + 1,
    prompt: '',
    startedAt: new Date().toISOString(),
  };
  meta.sessionId = parsed.sessionId ?? meta.sessionId;
  meta.turns.push({
    turn: current.turn,
    prompt: current.prompt,
    exitCode,
    ok: parsed.ok,
    startedAt: current.startedAt,
    finishedAt: new Date().toISOString(),
  });
  meta.current = null;
  writeMeta(meta, env);
  options.onProgress?.(
    `agent exited ${exitCode}${oomKilled ? ' (out of memory)' : ''}; freezing ${meta.slug}`,
  );
  await freeze(meta.slug, options);
  return {
    slug: meta.slug,
    exitCode,
    ok: parsed.ok && !oomKilled,
    sessionId: meta.sessionId ?? undefined,
    ...(parsed.error || oomKilled
      ? { error: oomKilled ? 'the agent ran out of memory' : parsed.error }
      : {}),
    output,
    provider: agent.provider,
    ...(cli && cli.name === agent.provider ? { providerVersion: cli.version } : {}),
  };
}

/**
 * Finish the turn of a bottle whose runner went away (an orchestrator killed
 * mid-turn and started again): wait for its agent container, record the turn
 * and freeze, exactly as the original `launch` or `resume` would have. When the
 * agent container is gone too, the bottle is frozen with `vanished: true`.
 */
export async function reattach(slug: string, options: BottleOptions): Promise<TurnOutcome> {
  const env = options.env ?? process.env;
  const meta = readMeta(slug, env);
  if (!meta) throw new BbError('NOT_FOUND', `no bottle ${slug} in ${join(bbHome(env), 'bottles')}`);
  if (meta.status !== 'running')
    throw new BbError(
      'CONFLICT',
      `bottle ${slug} is ${meta.status}; only a running turn can be reattached`,
    );
  const agentC = (await options.backend.list({ 'bb.slug': slug })).find(
    (c) => c.labels['bb.role'] === 'agent',
  );
  if (!agentC) {
    if (meta.current) {
      meta.turns.push({
        ...meta.current,
        exitCode: -1,
        ok: false,
        finishedAt: new Date().toISOString(),
      });
      meta.current = null;
      writeMeta(meta, env);
    }
    await freeze(slug, options);
    return {
      slug,
      exitCode: -1,
      ok: false,
      sessionId: meta.sessionId ?? undefined,
      error: 'the agent container was gone',
      output: '',
      vanished: true,
    };
  }
  try {
    return await finishTurn(meta, agentC.id, options, env);
  } catch (err) {
    await freeze(slug, options).catch(() => {});
    throw err;
  }
}

/** Wait until a helper container's socket exists; fail with its own words if it exits first. */
async function waitForSocket(
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

/**
 * Wait until the sidecar's socket exists. If the sidecar exits (or takes over
 * 15 s) first, stop the agent and fail with the sidecar's own words.
 */
async function watchSidecar(
  backend: Backend,
  sidecarId: string,
  agentId: string,
  socket: string,
  slug: string,
): Promise<void> {
  try {
    await waitForSocket(backend, sidecarId, socket, slug, 'forge sidecar');
  } catch (err) {
    await backend.stop(agentId, 1000).catch(() => {});
    throw err;
  }
}

/** Slugs of the bottles under `$BB_HOME/bottles`. */
export function listBottles(env: Record<string, string | undefined> = process.env): string[] {
  const d = join(bbHome(env), 'bottles');
  return existsSync(d)
    ? readdirSync(d)
        .filter((s) => existsSync(join(d, s, 'meta.json')))
        .sort()
    : [];
}
