import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  existsSync,
  lchownSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { BbError, isBbError, redactString, registerSecret } from '@bb/errors';
import { BASE_FILE, ForgeSidecarClient } from '@bb/forge-sidecar';
import { loadPolicy } from '@bb/supervise';
import { chownTreeNoFollow, type Owner, readHeadAsData, writeFileNoFollow } from '@bb/wall';
import { type Backend, type BottleSpec, NETNS_LABEL } from './backend';
import { canMountDisks, diskQuota, makeDisk, mountDisk, unmountDisk } from './disk';
import {
  awaitGate,
  bottleLabels,
  bridgeMappings,
  bridgePrelude,
  type CreatedGate,
  createGate,
  GATE_ROLE,
  type GateOptions,
  modelApiUrl,
  PROXY_ENV,
  proxySocketsScript,
  routeSecrets,
  syncsPr,
  TURN_FILE,
} from './gate';
import { bbHome } from './home';
import {
  AGENT_USER,
  type BottleMeta,
  type BottlePaths,
  bottlePaths,
  type ForgeWiring,
  GATE_USER,
  HOME_LABEL,
  homeLabel,
  IN_BOTTLE,
  pathsFor,
  readMeta,
  userSpec,
  writeMeta,
} from './layout';
import {
  type AgentManifest,
  type BottleManifest,
  loadAgentManifest,
  loadBottleManifest,
  memoryBytes,
} from './manifests';
import { initMirror, mirrorDir, remoteBranchHead, syncMirror } from './mirror';
import {
  awaitWorkspaceScript,
  clearPrBundle,
  PR_BUNDLE,
  takeBundleScript,
  WORKSPACE_READY,
} from './pr-sync';
import { providerFor } from './providers';
import { prepareRuntime } from './runtime';
import { removeSecrets } from './secrets';
import {
  allowedBases,
  type BottleConfig,
  effectiveConfig,
  needsProxies,
  writeCurrentConfig,
} from './supervise-gate';
import { takeResumeRequest } from './supervise-remedy';
import { turnThenWaitScript } from './waiter';
import {
  awaitTurnEnd,
  canKeepWarm,
  IDLE_PROCESSES,
  TURN_END_DIR,
  turnNonce,
  warmKey,
  writeTurnCommand,
} from './warm';
import { prepareWorkspace } from './workspace';

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
  /** Input tokens the model read this turn, when the CLI reports usage. */
  tokens?: number;
  /** The agent provider, and the CLI's version when its image announces it (bb-agents does). */
  provider?: string;
  providerVersion?: string;
  /**
   * The bottle was kept warm (`BottleOptions.warmMs`): until when, and the memory
   * its paused containers hold. Absent: it was frozen the ordinary way.
   */
  warm?: { until: string; bytes: number };
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
  /**
   * How long after a turn the bottle stays warm (its containers paused, not
   * removed), so a resume before then needs no new container; 0 turns it off.
   * Only where the backend can vouch for an idle bottle (`canKeepWarm`). The
   * caller cools what outlives its window (`cool`). @default 0
   */
  warmMs?: number;
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
   * reconcile looks for). Keys `bb.slug`, `bb.role`, `bb.home`, `bb.netns` and `bb.version` are reserved (dropped).
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
  /**
   * Start a fresh agent session instead of continuing the last (a long one is
   * rotated); the prompt should carry what the new session needs to know.
   */
  freshSession?: boolean;
  /**
   * Where the PR branch is now, as the caller's forge says (its API, e.g. the
   * PR's head): asked instead of the repository's refs (`git ls-remote`), which
   * costs a git process and a request of the forge's git server.
   */
  prHead?: () => Promise<string | undefined>;
}

const SLUG = /^[a-z0-9][a-z0-9._-]{0,62}$/;

/** The bottle's users, when the host can give ownership (root, a container backend). */
function owners(backend: Backend): { agent?: Owner; gate?: Owner } {
  return backend.mapsMounts && process.getuid?.() === 0
    ? { agent: AGENT_USER, gate: GATE_USER }
    : {};
}

/**
 * Make the bottle's own directories: the gate's (sockets, queue, state) owned
 * by the gate's user, the host's (proxy configuration, logs). None of them is
 * the agent's, so this never walks what the agent wrote. Idempotent.
 */
function prepareDirs(p: BottlePaths, backend: Backend): void {
  mkdirSync(p.dir, { recursive: true, mode: 0o755 });
  for (const d of [p.sock, p.queue, p.state, p.proxy, p.logs, p.supervise])
    mkdirSync(d, { recursive: true, mode: 0o700 });
  mkdirSync(p.currentConfig, { recursive: true, mode: 0o755 });
  const { gate } = owners(backend);
  if (gate) for (const d of [p.sock, p.queue, p.state, p.supervise]) chownTree(d, gate);
  // The agent, another user, connects to the gate's sockets; only the gate may change them.
  if (backend.mapsMounts) chmodSync(p.sock, 0o755);
  chmodSync(p.proxy, 0o755);
  chmodSync(p.supervise, 0o755);
}

/**
 * Give a gate-only tree to `owner` (the agent never reaches it). A directory
 * that is already the owner's was made by the gate, with everything in it: it is
 * not walked again, so a large push repository costs nothing on each turn.
 */
function chownTree(dir: string, owner: Owner, top = true): void {
  const st = lstatSync(dir);
  if (!top && st.uid === owner.uid && st.gid === owner.gid) return;
  chownSync(dir, owner.uid, owner.gid);
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) chownTree(path, owner, false);
    else lchownSync(path, owner.uid, owner.gid);
  }
}

/** A bottle made by an earlier version kept workspace/ and home/ at its top. */
function migrateLayout(p: BottlePaths): void {
  if (existsSync(p.disk) || !existsSync(join(p.dir, 'workspace'))) return;
  mkdirSync(p.disk, { mode: 0o755 });
  for (const d of ['workspace', 'home'])
    if (existsSync(join(p.dir, d))) renameSync(join(p.dir, d), join(p.disk, d));
}

/** The image the gate runs in. */
const gateImage = (options: BottleOptions, env: Record<string, string | undefined>) =>
  options.sidecarImage ?? env['BB_BASE_IMAGE'] ?? 'bb-base:latest';

/** A turn whose agent has started (its sidecar serving): `finishTurn` waits for its end. */
export interface StartedTurn {
  slug: string;
  /** The turn's number (1 for a launch). */
  turn: number;
}

/** Start a bottle for `agent`, run its first turn to the end, and freeze it. */
export async function launch(options: LaunchOptions): Promise<TurnOutcome> {
  const started = await startLaunch(options);
  return continueRebuilt(await finishTurn(started.slug, options), options, options.forge?.token);
}

/**
 * A turn that ended for a capability rebuild (the operator approved a new
 * image) goes on at once: the same session, in a container from the new image,
 * told the decision. At most a few times in a row.
 */
async function continueRebuilt(
  outcome: TurnOutcome,
  options: BottleOptions,
  forgeToken: string | undefined,
): Promise<TurnOutcome> {
  const env = options.env ?? process.env;
  for (let i = 0; i < 5; i++) {
    const asked = takeResumeRequest(outcome.slug, env);
    if (!asked) return outcome;
    options.onProgress?.(`resuming ${outcome.slug} in its rebuilt image (${asked.requestId})`);
    // A turn stopped before its CLI said its session goes on in a fresh one.
    const fresh = !readMeta(outcome.slug, env)?.sessionId;
    const started = await startResume({
      ...options,
      slug: outcome.slug,
      prompt: asked.prompt,
      ...(fresh ? { freshSession: true } : {}),
      ...(forgeToken ? { forgeToken } : {}),
    });
    outcome = await finishTurn(started.slug, options);
  }
  return outcome;
}

/**
 * Start a bottle for `agent`: everything up to its agent running and its
 * sidecar serving, then return (the turn goes on; `finishTurn` waits for it,
 * `stopAgent` ends it early). When anything fails before the agent started,
 * nothing half-made stays behind.
 */
export async function startLaunch(options: LaunchOptions): Promise<StartedTurn> {
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
  // Fail on an unknown provider and a bad disk size before anything is created.
  providerFor(agent.provider);
  const quota = diskQuota(first.resources.disk, env);
  // A forge that stops answering cannot hold a launch: the clone has a deadline
  // (BB_CLONE_TIMEOUT_MS, default 10 min) and a low-speed limit.
  const cloneMs = cloneTimeoutMs(env);
  const slug = options.slug ?? `${options.agent}-${randomBytes(4).toString('hex').slice(0, 5)}`;
  if (!SLUG.test(slug))
    throw new BbError('INVALID_INPUT', `slug ${JSON.stringify(slug)} must match ${SLUG.source}`);
  const p = bottlePaths(slug, env);
  const sidecarImage = gateImage(options, env);
  const images = [...new Set([first.image, ...(options.forge ? [sidecarImage] : [])])];
  // Asked of the engine together; a name conflict is reported before a missing image.
  const [taken, ...checked] = await Promise.allSettled([
    options.backend.list({ 'bb.slug': slug }),
    ...images.map((image) => options.backend.ensureImage(image)),
  ]);
  if (taken!.status === 'rejected') throw taken!.reason;
  if (existsSync(p.dir) || taken!.value.length > 0) {
    throw new BbError(
      'CONFLICT',
      `a bottle named ${slug} already exists: destroy it first or choose another slug`,
    );
  }
  for (const c of checked) if (c.status === 'rejected') throw c.reason;
  // The repository is fetched into its mirror from the first moment: nothing else needs to
  // be made for it.
  const synced = options.forge ? syncMirror(options.forge, env, cloneMs) : undefined;
  synced?.catch(() => {});

  const branch = `bb/${options.agent}-${options.forge?.issue ?? slug}`;
  const { agent: agentOwner } = owners(options.backend);
  let early: Promise<CreatedGate | undefined> | undefined;
  let prepared: Promise<void> | undefined;
  try {
    progress(`preparing bottle ${slug}`);
    prepareDirs(p, options.backend);
    // The agent's own filesystem: its writes stop at the quota, nobody else's do.
    const ownDisk = quota !== undefined && options.backend.isolates && canMountDisks();
    const meta: BottleMeta = {
      slug,
      agent: options.agent,
      bottles: bottleNames,
      backend: options.backend.name,
      image: first.image,
      baseImage: first.image,
      status: 'running',
      sessionId: null,
      cwd: options.backend.mapsMounts ? IN_BOTTLE.workspace : p.workspace,
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
      ...(ownDisk ? { diskBytes: quota } : {}),
      preparing: true,
      // Made before anything mounts it; fetched into while the workspace is made.
      ...(options.forge
        ? { mirror: await initMirror(mirrorDir(options.forge.cloneUrl, env)) }
        : {}),
      ...(options.labels ? { labels: options.labels } : {}),
      createdAt: new Date().toISOString(),
    };
    writeMeta(meta, env);
    const gate = gateOptions(options, env);
    // The gate's container is created while the disk is made (its mounts are resolved
    // when it starts, after the disk is mounted).
    const created = createTurnGate(meta, bottles, options.forge?.token, gate);
    created.catch(() => {});
    try {
      if (ownDisk) await makeDisk(p, quota, env);
      else {
        mkdirSync(p.disk, { recursive: true, mode: 0o755 });
        if (quota !== undefined && options.backend.isolates)
          progress('no disk quota for this bottle: only root can mount one (BB_BOTTLE_DISK)');
      }
      for (const d of [p.workspace, join(p.home, '.bb')])
        mkdirSync(d, { recursive: true, mode: 0o755 });
    } catch (err) {
      await created.catch(() => {});
      throw err;
    }
    // The gate needs nothing from the workspace to come up: it starts while the
    // repository is cloned.
    early = created.then(async (g) => {
      if (g) {
        progress('starting the gate');
        await options.backend.start(g.id);
      }
      return g;
    });
    early.catch(() => {});
    // The workspace is made while the agent's container is created; the agent
    // starts once it is ready.
    prepared = prepareWorkspace({
      workspace: p.workspace,
      forge: options.forge,
      branch,
      identity: agent.git,
      timeoutMs: cloneMs,
      env,
      mirrorInBottle: options.backend.mapsMounts ? IN_BOTTLE.mirror : undefined,
      onProgress: progress,
      synced,
    }).then(async () => {
      meta.baseCommit = readHeadAsData(p.workspace) ?? null;
      // Ownership is set once, before the agent ever runs; never again through what it made.
      if (agentOwner) await chownTreeNoFollow(agentOwner, p.workspace, p.home);
      writeMeta(meta, env);
    });
    prepared.catch(() => {});
    return await startTurn(
      meta,
      agent,
      bottles,
      options.prompt,
      options.forge?.token,
      options,
      env,
      early,
      prepared,
    );
  } catch (err) {
    // Nothing half-made stays behind (a gate still being created, a clone still
    // running included) while the agent never ran: there is no evidence to keep.
    // Once its program was let start, the bottle stays, frozen, with what it did.
    await early?.catch(() => {});
    await prepared?.catch(() => {});
    await synced?.catch(() => {});
    if (readMeta(slug, options.env ?? process.env)?.preparing !== false)
      await destroy(slug, options);
    throw err;
  }
}

/** How long a launch's clone may take (`BB_CLONE_TIMEOUT_MS`). @default 600000 */
function cloneTimeoutMs(env: Record<string, string | undefined>): number {
  const raw = env['BB_CLONE_TIMEOUT_MS'];
  if (raw === undefined || raw === '') return 600_000;
  if (!/^[1-9]\d{2,8}$/.test(raw))
    throw new BbError(
      'INVALID_INPUT',
      `BB_CLONE_TIMEOUT_MS ${JSON.stringify(raw)} must be a number of milliseconds from 100 to 999999999`,
    );
  return Number(raw);
}

function gateOptions(options: BottleOptions, env: Record<string, string | undefined>) {
  return {
    backend: options.backend,
    env,
    runtime: prepareRuntime(env),
    image: gateImage(options, env),
    onProgress: options.onProgress,
  };
}

/** Whether bottles get a supervise sidecar (`BB_SUPERVISE=off` turns it off). */
const supervises = (env: Record<string, string | undefined>) => env['BB_SUPERVISE'] !== 'off';

/**
 * Create this turn's gate for a bottle, with the configuration it runs with
 * (written where the agent reads it and proposes changes against).
 */
async function createTurnGate(
  meta: BottleMeta,
  bottles: BottleManifest[],
  token: string | undefined,
  gate: GateOptions,
  config: BottleConfig = effectiveConfig(meta, bottles, gate.env),
): Promise<CreatedGate | undefined> {
  writeCurrentConfig(meta.slug, config, gate.env);
  return createGate(
    meta,
    {
      token,
      supervise: supervises(gate.env),
      proxies: needsProxies(config) ? config : undefined,
    },
    gate,
  );
}

/** Rehydrate a frozen bottle, continue the same agent session with a new prompt, and freeze it again. */
export async function resume(options: ResumeOptions): Promise<TurnOutcome> {
  const started = await startResume(options);
  return continueRebuilt(await finishTurn(started.slug, options), options, options.forgeToken);
}

/**
 * Rehydrate a frozen bottle and start its agent on the same session with a new
 * prompt; return once it runs (`finishTurn` waits for the turn's end). On a
 * failure the bottle is frozen again, workspace and session intact.
 */
export async function startResume(options: ResumeOptions): Promise<StartedTurn> {
  const env = options.env ?? process.env;
  const meta = readMeta(options.slug, env);
  if (!meta)
    throw new BbError('NOT_FOUND', `no bottle ${options.slug} in ${join(bbHome(env), 'bottles')}`);
  if (meta.status !== 'frozen')
    throw new BbError(
      'CONFLICT',
      `bottle ${options.slug} is ${meta.status}; only a frozen bottle can be resumed`,
    );
  if (!meta.sessionId && !options.freshSession)
    throw new BbError('CONFLICT', `bottle ${options.slug} has no recorded session to resume`);
  if (meta.forge && !options.forgeToken)
    throw new BbError(
      'INVALID_INPUT',
      `bottle ${options.slug} talks to a forge: resume needs the forge token again`,
    );
  if (options.forgeToken) registerSecret(options.forgeToken);
  const { manifest: agent } = loadAgentManifest(meta.agent, env);
  const bottles = meta.bottles.map((b) => loadBottleManifest(b, env).manifest);
  const p = bottlePaths(meta.slug, env);
  migrateLayout(p);
  if (options.pr !== undefined && meta.forge) meta.forge.pr = options.pr;
  if (options.freshSession) {
    meta.sessionId = null;
    meta.sessionStart = meta.turns.length + 1;
  }
  delete meta.syncPr;
  if (meta.warm) {
    // In the containers kept warm, when they can serve this turn; else cooled first.
    let warm: StartedTurn | string;
    try {
      warm = await resumeWarm(meta, agent, bottles, options, env);
    } catch (err) {
      // The turn was given to them and something failed: nothing of it is trusted.
      await freeze(meta.slug, options).catch(() => {});
      throw err;
    }
    if (typeof warm !== 'string') return warm;
    options.onProgress?.(`cooling warm bottle ${meta.slug}: ${warm}`);
    await freeze(meta.slug, options);
    meta.warm = null;
    delete meta.syncPr;
  }
  // Where the PR branch is on the forge, asked while the disk is mounted: when it is where
  // the checkout is (nobody pushed since), the turn need not wait for it to be brought over.
  const remote =
    syncsPr(meta) && meta.forge && options.forgeToken
      ? prBranchHead(meta, options, env)
      : undefined;
  await mountDisk(p);
  if (remote) {
    let here: string | undefined;
    try {
      here = readHeadAsData(p.workspace);
    } catch {
      // a HEAD it cannot read as data: the branch is brought over, as it always was
    }
    const there = await remote;
    meta.syncPr = !(there && here && there === here);
  }
  // This turn's sidecar brings what people pushed to the PR; nothing of an earlier turn's stays.
  clearPrBundle(p.sock);
  meta.status = 'running';
  writeMeta(meta, env);
  return startTurn(meta, agent, bottles, options.prompt, options.forgeToken, options, env);
}

/**
 * Mount a frozen bottle's own disk so the host can read its workspace and home
 * (a frozen bottle keeps no mount); `unmountBottleDisk` when done. A bottle
 * without a disk of its own needs neither.
 */
export async function mountBottleDisk(
  slug: string,
  env: Record<string, string | undefined> = process.env,
): Promise<void> {
  await mountDisk(bottlePaths(slug, env));
}

export async function unmountBottleDisk(
  slug: string,
  env: Record<string, string | undefined> = process.env,
): Promise<void> {
  const meta = readMeta(slug, env);
  // A running or warm bottle's containers hold it.
  if (meta?.status !== 'running' && !meta?.warm) await unmountDisk(bottlePaths(slug, env));
}

/** Stop a bottle's containers, keep their output, and mark it frozen. Idempotent. */
export async function freeze(slug: string, options: BottleOptions): Promise<void> {
  const env = options.env ?? process.env;
  const p = bottlePaths(slug, env);
  // The agent's container first (the list is by name): nothing of it may reach the gate after.
  for (const c of await options.backend.list({ 'bb.slug': slug })) {
    // A paused (warm) container is killed where it stands: a stop would let it run on first.
    if (c.state === 'running') await options.backend.stop(c.id, 5000);
    // The holder of the namespace its agent joined goes with it.
    const holder = c.labels[NETNS_LABEL];
    if (holder) await options.backend.destroy(holder).catch(() => {});
    if (existsSync(p.logs))
      writeFileSync(
        join(p.logs, `${c.labels['bb.role'] ?? 'bottle'}-${Date.now()}.log`),
        redactString(await options.backend.logs(c.id)),
      );
    await options.backend.destroy(c.id);
  }
  removeSecrets(slug, env);
  // A frozen bottle holds no mount: its disk is mounted again to resume or to be read.
  await unmountDisk(p);
  const meta = readMeta(slug, env);
  if (meta) {
    meta.status = 'frozen';
    meta.warm = null;
    writeMeta(meta, env);
  }
}

/** Remove a bottle's containers, its disk and its state directory. Idempotent. */
export async function destroy(slug: string, options: BottleOptions): Promise<void> {
  const env = options.env ?? process.env;
  for (const c of await options.backend.list({ 'bb.slug': slug })) {
    await options.backend.destroy(c.id);
    const holder = c.labels[NETNS_LABEL];
    if (holder) await options.backend.destroy(holder).catch(() => {});
  }
  // Images rebuilt for it (a capability approval) go with it.
  await options.backend.removeImages?.({ 'bb.slug': slug, [HOME_LABEL]: homeLabel(env) });
  removeSecrets(slug, env);
  const p = bottlePaths(slug, env);
  await unmountDisk(p);
  rmSync(p.dir, { recursive: true, force: true });
}

/** What a turn's agent runs, and with what: the same whether its container is new or warm. */
interface TurnPlan {
  turn: number;
  /** Files written into the agent's home before it starts (a CLI's settings, the script). */
  files: Record<string, string>;
  config: BottleConfig;
  proxies: boolean;
  /** The turn's command, its prelude included. */
  argv: string[];
  /** The shell lines run before the agent's command, and that command. */
  prelude: string[];
  cmd: string[];
  env: Record<string, string>;
  /** What its containers are made for (`warmKey`). */
  key: string;
}

function planTurn(
  meta: BottleMeta,
  agent: AgentManifest,
  bottles: BottleManifest[],
  prompt: string,
  token: string | undefined,
  options: BottleOptions,
  env: Record<string, string | undefined>,
  how: { launch: boolean; waiter: boolean },
): TurnPlan {
  const { backend } = options;
  const p = bottlePaths(meta.slug, env);
  const gate = gateOptions(options, env);
  const P = pathsFor(backend, p, gate.runtime, '');
  const provider = providerFor(agent.provider);
  // The manifests', with what an operator approved for the whole bottle in their place.
  const config = effectiveConfig(meta, bottles, env);
  const proxies = needsProxies(config);
  const supervised = supervises(env);
  const routeFor = (kind: 'anthropic' | 'openai') =>
    (JSON.parse(config.routes) as { routes: Array<{ prefix: string }> }).routes.find(
      (c) => c.prefix === `/${kind}`,
    )
      ? modelApiUrl(kind)
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
    ...(supervised ? { superviseSocket: P.superviseSocket } : {}),
    ...(anthropicUrl || openaiUrl
      ? {
          modelApi: anthropicUrl
            ? { kind: 'anthropic' as const, baseUrl: anthropicUrl }
            : { kind: 'openai' as const, baseUrl: openaiUrl! },
        }
      : {}),
    ...(agent.retries !== undefined ? { retries: agent.retries } : {}),
  });
  // Before the agent: the PR branch's bundle is taken in (a resumed forge bottle), and
  // with proxies the in-bottle bridge (TCP on 127.0.0.1 to the mounted sockets) is
  // up (the waiter serves it for every turn; without one, the turn starts it).
  const prelude = [
    // A launch: the container starts while the workspace is made; the agent once it is.
    ...(how.launch ? [awaitWorkspaceScript(P.socketDir, 3 * cloneTimeoutMs(env))] : []),
    ...(meta.forge ? [takeBundleScript()] : []),
    ...(proxies
      ? [how.waiter ? proxySocketsScript(P.socketDir) : bridgePrelude(P.runtime, P.socketDir)]
      : []),
  ];
  const argv =
    prelude.length > 0
      ? ['sh', '-c', `${prelude.join('\n')}\nexec "$@"`, 'bb-agent', ...invocation.cmd]
      : invocation.cmd;
  const agentEnv: Record<string, string> = {
    ...Object.assign({}, ...bottles.map((b) => b.env)),
    ...invocation.env,
    HOME: P.home,
    BB_SIDECAR_SOCKET: P.socket,
    // The supervise tools as a command, for any agent's shell (MCP agents also have them as tools).
    ...(supervised
      ? {
          BB_SUPERVISE_SOCKET: P.superviseSocket,
          BB_SUPERVISE: `node ${P.runtime}/bb-supervise.mjs`,
        }
      : {}),
    BB_WORKSPACE_DIR: P.workspace,
    ...(syncsPr(meta)
      ? { BB_PR_BUNDLE: `${P.socketDir}/${PR_BUNDLE}`, BB_PR_BRANCH: meta.branch }
      : {}),
    ...(proxies ? PROXY_ENV : {}),
  };
  return {
    turn: meta.turns.length + 1,
    // The script agent's script is written each turn, like a real CLI's settings,
    // so a script edited between turns takes effect.
    files: {
      ...invocation.files,
      ...(agent.script !== undefined ? { '.bb/script.json': JSON.stringify(agent.script) } : {}),
    },
    config,
    proxies,
    argv,
    prelude,
    cmd: invocation.cmd,
    env: agentEnv,
    key: warmKey({
      meta,
      gateImage: gate.image,
      config: {
        config,
        resources: bottles[0]?.resources,
        // What the gate was given from outside the manifests: the route secrets' values
        // (a rotated key), the operator's supervise policy.
        secrets: proxies
          ? createHash('sha256')
              .update(JSON.stringify(routeSecrets(config.routes, env)))
              .digest('hex')
          : null,
        policy: supervised
          ? { policy: loadPolicy(bbHome(env)), bases: allowedBases(meta, env) }
          : null,
      },
      token,
      supervised,
    }),
  };
}

async function startTurn(
  meta: BottleMeta,
  agent: AgentManifest,
  bottles: BottleManifest[],
  prompt: string,
  token: string | undefined,
  options: BottleOptions,
  env: Record<string, string | undefined>,
  early?: Promise<CreatedGate | undefined>,
  /** The workspace being made (a launch): the agent's container starts once it is. */
  workspaceReady?: Promise<void>,
): Promise<StartedTurn> {
  const { backend } = options;
  const progress = options.onProgress ?? (() => {});
  const p = bottlePaths(meta.slug, env);
  const gate = gateOptions(options, env);
  const P = pathsFor(backend, p, gate.runtime, '');
  // Kept warm after the turn: the agent's container runs the waiter, which runs the turn.
  const waiter = canKeepWarm(backend) && (options.warmMs ?? 0) > 0;
  // The container's own turn runs before its waiter starts (after it, the waiter waits).
  const plan = planTurn(meta, agent, bottles, prompt, token, options, env, {
    launch: !!workspaceReady,
    waiter: false,
  });
  const { config, turn } = plan;
  const startedAt = new Date().toISOString();
  let gateStarted: Promise<CreatedGate | undefined> | undefined;
  try {
    // Into the agent's home, which it owns: never through a symlink it planted.
    const { agent: agentOwner } = owners(backend);
    for (const [rel, content] of Object.entries(plan.files))
      writeFileNoFollow(p.home, rel, content, { owner: agentOwner });
    prepareDirs(p, backend);
    const nonce = turnNonce();
    meta.current = { turn, prompt, startedAt, ...(waiter ? { waiter: true, nonce } : {}) };
    if (meta.forge) writeTurnFile(p, turn);
    meta.warmKey = plan.key;
    meta.warm = null;
    writeMeta(meta, env);
    // Started early by launch (alongside the clone), or now.
    gateStarted =
      early ??
      createTurnGate(meta, bottles, token, gate, config).then(async (g) => {
        if (g) await backend.start(g.id);
        return g;
      });
    // Awaited below; until then a failure must not count as unhandled. Its secrets'
    // files go as soon as it serves (not once the workspace is made).
    gateStarted.catch(() => {});
    const gateUp = gateStarted.then((g) => (g ? awaitGate(backend, g, meta.slug) : undefined));
    gateUp.catch(() => {});
    progress(`running ${agent.provider} agent (turn ${turn})`);
    const bottle = bottles[0]!;
    const agentSpec: BottleSpec = {
      name: `bb-${meta.slug}-agent`,
      image: meta.image,
      cmd: waiter
        ? [
            'sh',
            '-c',
            [...plan.prelude, turnThenWaitScript(P.runtime)].join('\n'),
            'bb-agent',
            ...plan.cmd,
          ]
        : plan.argv,
      user: userSpec(AGENT_USER),
      workdir: P.workspace,
      labels: bottleLabels(meta, 'agent', env),
      network: 'none',
      readOnlyRootfs: true,
      tmpfs: { '/tmp': 'rw,size=256m' },
      // With the waiter's own (it drops them from later turns, whose commands carry
      // their own environment).
      env: waiter
        ? {
            ...plan.env,
            BB_TURN_COMMANDS: P.turns,
            BB_TURN_STATUS: `${P.home}/${TURN_END_DIR}`,
            BB_AFTER_TURN: String(turn),
            BB_WAITER_KILL_ALL: '1',
            // This turn's own variables: none of them reaches a later turn.
            BB_TURN_ENV: Object.keys(plan.env).join(' '),
            BB_TURN_NONCE: nonce,
            ...(plan.proxies ? { BB_BRIDGE: bridgeMappings(P.socketDir).join(' ') } : {}),
          }
        : plan.env,
      // The waiter's turns leave orphans: an init reaps them.
      ...(waiter ? { init: true } : {}),
      mounts: [
        { source: gate.runtime, target: P.runtime, readOnly: true },
        { source: p.sock, target: P.socketDir },
        { source: p.workspace, target: P.workspace },
        { source: p.home, target: P.home },
        // Read only: the agent proposes changes to these files, it never writes them.
        { source: p.currentConfig, target: P.currentConfig, readOnly: true },
        // The repository's history, borrowed by the checkout: nobody's to change.
        ...(meta.mirror && backend.mapsMounts
          ? [{ source: join(meta.mirror, 'objects'), target: IN_BOTTLE.mirror, readOnly: true }]
          : []),
        // The turns' commands, the host's.
        ...(waiter ? [{ source: p.turns, target: P.turns, readOnly: true }] : []),
      ],
      resources: {
        memoryBytes: memoryBytes(bottle.resources.memory) ?? 2 * 1024 ** 3,
        pidsLimit: bottle.resources.pids ?? 512,
        ...(bottle.resources.cpus ? { cpus: bottle.resources.cpus } : {}),
      },
    };
    if (workspaceReady) rmSync(join(p.sock, WORKSPACE_READY), { force: true });
    // An empty network namespace made ahead of time, when the backend has one ready.
    const netns = await backend.takeNetns?.().catch(() => undefined);
    if (netns) agentSpec.netns = netns;
    const aid = await backend.create(agentSpec);
    await backend.start(aid);
    if (workspaceReady) {
      // The agent's program starts once its workspace is made, while its gate may still be
      // coming up: its clients wait for the gate's sockets (and the bridge, for the proxies').
      await workspaceReady;
      // Into the gate's directory, following no link: the launch's base for its pushes,
      // then the word that lets the agent's program start.
      if (meta.baseCommit)
        writeFileNoFollow(p.sock, BASE_FILE, `${meta.baseCommit}\n`, { createDirs: false });
      writeFileNoFollow(p.sock, WORKSPACE_READY, '', { createDirs: false });
      // From here its program runs: a restart must watch it, not remove it.
      meta.preparing = false;
      writeMeta(meta, env);
    }
    try {
      // Serving every socket, its secrets read (their files go): or the agent stops.
      await gateUp;
    } catch (err) {
      await backend.stop(aid, 1000).catch(() => {});
      throw err;
    }
    return { slug: meta.slug, turn };
  } catch (err) {
    // A failed turn leaves the bottle frozen, its workspace and session intact
    // (a clone still running is let finish first: its disk is unmounted).
    await workspaceReady?.catch(() => {});
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

/**
 * The next turn in a warm bottle's containers, when they can serve it: inside
 * its window, made for the same image, configuration, forge and token, both
 * still paused, and its PR branch on the forge where the checkout is (nobody
 * pushed since), its gate's scope holding the turn's PR. Otherwise why not, in
 * words: the caller cools it and starts the turn the ordinary way.
 */
async function resumeWarm(
  meta: BottleMeta,
  agent: AgentManifest,
  bottles: BottleManifest[],
  options: ResumeOptions,
  env: Record<string, string | undefined>,
): Promise<StartedTurn | string> {
  const { backend } = options;
  const w = meta.warm;
  if (!w || !canKeepWarm(backend) || (options.warmMs ?? 0) <= 0) return 'warm bottles are off';
  if (Date.parse(w.until) <= Date.now()) return 'its warm window is over';
  if (meta.turns.length + 1 !== w.nextTurn) return 'its turns are not where its waiter is';
  const p = bottlePaths(meta.slug, env);
  // Where the PR branch is on the forge, asked while the rest goes on: the warm checkout
  // serves only when it is there (then nothing needs bringing over).
  const pr = syncsPr(meta);
  if (pr && !(meta.forge && options.forgeToken)) return 'where its PR branch is cannot be asked';
  const remote = pr ? prBranchHead(meta, options, env) : undefined;
  remote?.catch(() => {});
  if (pr) meta.syncPr = false;
  const plan = planTurn(meta, agent, bottles, options.prompt, options.forgeToken, options, env, {
    launch: false,
    waiter: true,
  });
  if (plan.key !== w.key)
    return 'what its containers were made for changed (image, configuration, forge or token)';
  // The PR this turn may write to must be in its gate's scope (it opened it, or was made with it).
  const n = meta.forge?.pr;
  if (meta.forge && n !== undefined && !w.scope?.includes(n))
    return `its gate may not write to PR #${n}`;
  const [agentNow, gateNow] = await Promise.all(
    [w.agent, w.gate].map((id) => (id ? backend.inspect(id).catch(() => undefined) : undefined)),
  );
  if (agentNow?.state !== 'paused' || (w.gate && gateNow?.state !== 'paused'))
    return 'its containers are not both paused';
  // The image's name may have been given to a rebuilt image meanwhile.
  const wanted = await backend.imageId?.(meta.image);
  if (wanted && agentNow.imageId && wanted !== agentNow.imageId) return 'its image was rebuilt';
  if (remote) {
    let here: string | undefined;
    try {
      here = readHeadAsData(p.workspace);
    } catch {}
    const there = await remote.catch(() => undefined);
    if (!there || there !== here) return 'its PR branch moved on the forge';
  }
  const P = pathsFor(backend, p, prepareRuntime(env), '');
  const { agent: agentOwner } = owners(backend);
  for (const [rel, content] of Object.entries(plan.files))
    writeFileNoFollow(p.home, rel, content, { owner: agentOwner });
  options.onProgress?.(`resuming warm bottle ${meta.slug} (turn ${plan.turn})`);
  const nonce = turnNonce();
  meta.current = {
    turn: plan.turn,
    prompt: options.prompt,
    startedAt: new Date().toISOString(),
    waiter: true,
    nonce,
  };
  meta.status = 'running';
  meta.warm = null;
  writeMeta(meta, env);
  // The gate's turn, then the waiter's command: both before either runs again, so the
  // agent's first call already finds the new turn (the gate reads it at each write).
  if (meta.forge) writeTurnFile(p, plan.turn);
  writeTurnCommand(p, plan.turn, {
    argv: plan.argv,
    env: plan.env,
    cwd: P.workspace,
    nonce,
  });
  await Promise.all([w.agent, ...(w.gate ? [w.gate] : [])].map((id) => backend.rehydrate(id)));
  return { slug: meta.slug, turn: plan.turn };
}

/** What a bottle's running gate says of itself: the issue and PRs it may write to, its turn. */
async function gateHealth(p: BottlePaths): Promise<{ scope: number[]; turn?: number }> {
  const client = new ForgeSidecarClient({
    socketPath: join(p.sock, 'forge.sock'),
    connectWaitMs: 1000,
  });
  try {
    return await client.health();
  } finally {
    await client.close();
  }
}

/** Where a resumed bottle's PR branch is on the forge: as the caller's forge says, or its refs. */
function prBranchHead(
  meta: BottleMeta,
  options: ResumeOptions,
  env: Record<string, string | undefined>,
): Promise<string | undefined> {
  if (options.prHead) return options.prHead();
  return remoteBranchHead(
    { ...meta.forge!, token: options.forgeToken! },
    meta.branch,
    Math.min(cloneTimeoutMs(env), 30_000),
  );
}

/** Say which turn the gate serves, in its state directory (following no link). */
function writeTurnFile(p: BottlePaths, turn: number): void {
  writeFileNoFollow(p.state, TURN_FILE, `${turn}\n`, { createDirs: false });
}

/** Wait for a started agent to exit, record the turn, freeze the bottle. */
async function completeTurn(
  meta: BottleMeta,
  agentId: string,
  options: BottleOptions,
  env: Record<string, string | undefined>,
): Promise<TurnOutcome> {
  const { backend } = options;
  const { manifest: agent } = loadAgentManifest(meta.agent, env);
  const provider = providerFor(agent.provider);
  const current = meta.current ?? {
    turn: meta.turns.length + 1,
    prompt: '',
    startedAt: new Date().toISOString(),
  };
  const p = bottlePaths(meta.slug, env);
  // Under the waiter, the turn ends when it says so or when the container goes.
  const end = current.waiter
    ? await awaitTurnEnd(backend, agentId, p, current.turn, current.nonce ?? '')
    : { ...(await backend.wait(agentId)), exited: true };
  const { exitCode, oomKilled } = end;
  // The turn was long: what others changed meanwhile (a rebuild's new image) stays.
  const latest = readMeta(meta.slug, env);
  if (latest) meta.image = latest.image;
  const output = redactString(
    await backend.logs(
      agentId,
      // A warm container's output holds its earlier turns too: this turn's only.
      current.waiter ? { sinceMs: Date.parse(current.startedAt) } : {},
    ),
  );
  const parsed = provider.parseResult(output, exitCode);
  const cli = announcedCli(output);
  meta.sessionId = parsed.sessionId ?? meta.sessionId;
  options.onProgress?.(
    `agent exited ${exitCode}${oomKilled ? ' (out of memory)' : ''}; freezing ${meta.slug}`,
  );
  // Kept warm only when the waiter's turn ended by itself (not killed: out of memory
  // is told only by the container's end) and nothing of it is left running. Until the
  // turn is written down as ended, a restart finishes it again (its end is still said).
  const warm =
    !end.exited && exitCode < 128 && (options.warmMs ?? 0) > 0
      ? await keepWarm(meta, agentId, current.turn, options).catch(() => undefined)
      : undefined;
  meta.turns.push({
    turn: current.turn,
    prompt: current.prompt,
    exitCode,
    ok: parsed.ok,
    ...(parsed.tokens !== undefined ? { tokens: parsed.tokens } : {}),
    startedAt: current.startedAt,
    finishedAt: new Date().toISOString(),
  });
  meta.current = null;
  if (warm) {
    if (existsSync(p.logs))
      writeFileSync(join(p.logs, `agent-turn${current.turn}-${Date.now()}.log`), output);
    meta.status = 'frozen';
    meta.warm = warm;
    writeMeta(meta, env);
  } else {
    writeMeta(meta, env);
    await freeze(meta.slug, options);
  }
  return {
    slug: meta.slug,
    exitCode,
    ok: parsed.ok && !oomKilled,
    sessionId: meta.sessionId ?? undefined,
    ...(parsed.error || oomKilled
      ? { error: oomKilled ? 'the agent ran out of memory' : parsed.error }
      : {}),
    output,
    ...(parsed.tokens !== undefined ? { tokens: parsed.tokens } : {}),
    provider: agent.provider,
    ...(cli && cli.name === agent.provider ? { providerVersion: cli.version } : {}),
    ...(warm ? { warm: { until: warm.until, bytes: warm.bytes } } : {}),
  };
}

/**
 * Keep a bottle warm after turn `turn`: its agent container paused, checked
 * from outside to hold nothing but its init and the waiter, then its gate
 * paused. Undefined (the caller freezes it the ordinary way) when anything of
 * the turn is left running or the key of its containers is unknown.
 */
async function keepWarm(
  meta: BottleMeta,
  agentId: string,
  turn: number,
  options: BottleOptions,
): Promise<NonNullable<BottleMeta['warm']> | undefined> {
  const { backend } = options;
  if (!meta.warmKey || !canKeepWarm(backend)) return undefined;
  // Paused first: whatever is in it stops where it is, then it is counted.
  await backend.freeze(agentId);
  if ((await backend.processes!(agentId)) > IDLE_PROCESSES) return undefined;
  const gate = (await backend.list({ 'bb.slug': meta.slug })).find(
    (c) => c.labels['bb.role'] === GATE_ROLE && c.state === 'running',
  );
  // What its gate may write to, asked before it is paused: the next turn's PR must be in it.
  const scope = meta.forge
    ? (await gateHealth(bottlePaths(meta.slug, options.env)).catch(() => undefined))?.scope
    : undefined;
  if (meta.forge && !scope) return undefined;
  if (gate) await backend.freeze(gate.id);
  const held = await Promise.all(
    [agentId, ...(gate ? [gate.id] : [])].map((id) =>
      backend.memoryUsage ? backend.memoryUsage(id).catch(() => undefined) : undefined,
    ),
  );
  return {
    until: new Date(Date.now() + (options.warmMs ?? 0)).toISOString(),
    agent: agentId,
    gate: gate?.id,
    nextTurn: turn + 1,
    bytes: held.reduce<number>((a, b) => a + (b ?? 0), 0),
    key: meta.warmKey,
    ...(scope ? { scope } : {}),
  };
}

/**
 * Cool a warm bottle: its containers go and its disk is unmounted, as any
 * frozen bottle's (`freeze`). Nothing to do for one that is not warm. Returns
 * whether it was.
 */
export async function cool(slug: string, options: BottleOptions): Promise<boolean> {
  const meta = readMeta(slug, options.env ?? process.env);
  if (!meta?.warm || meta.status !== 'frozen') return false;
  await freeze(slug, options);
  return true;
}

/**
 * Wait for the end of a bottle's running turn (its agent's exit), record it in
 * the bottle's meta and freeze the bottle. Works for a turn this process
 * started and for one a process before it started (an orchestrator killed
 * mid-turn and started again). When the agent container is gone, the bottle is
 * frozen with `vanished: true`; when the bottle is already frozen (the turn
 * ended while nobody waited), the last turn's end is returned.
 */
export async function finishTurn(slug: string, options: BottleOptions): Promise<TurnOutcome> {
  const env = options.env ?? process.env;
  const meta = readMeta(slug, env);
  if (!meta) throw new BbError('NOT_FOUND', `no bottle ${slug} in ${join(bbHome(env), 'bottles')}`);
  if (meta.status === 'frozen' && !meta.current) {
    // The turn ended and the bottle was frozen, and whoever waited went away
    // before it read the end (a restart): the last turn's end, as the meta has it.
    const last = meta.turns.at(-1);
    return {
      slug,
      exitCode: last?.exitCode ?? -1,
      ok: last?.ok ?? false,
      sessionId: meta.sessionId ?? undefined,
      ...(last ? {} : { error: 'the bottle has no finished turn' }),
      output: '',
    };
  }
  if (meta.status !== 'running')
    throw new BbError(
      'CONFLICT',
      `bottle ${slug} is ${meta.status}; only a running turn can be finished`,
    );
  if (!meta.current) {
    // Running with no turn in progress: nothing to wait for (its end was written, the
    // bottle not yet frozen). Frozen now; the last turn's end, as the meta has it.
    await freeze(slug, options);
    const last = meta.turns.at(-1);
    return {
      slug,
      exitCode: last?.exitCode ?? -1,
      ok: last?.ok ?? false,
      sessionId: meta.sessionId ?? undefined,
      ...(last ? {} : { error: 'the bottle has no finished turn' }),
      output: '',
    };
  }
  const containers = await options.backend.list({ 'bb.slug': slug });
  // A warm resume cut short between its word and unpausing them: the turn was given
  // (its command is there), so its containers go on.
  for (const c of containers)
    if (c.state === 'paused') await options.backend.rehydrate(c.id).catch(() => {});
  const agentC = containers.find((c) => c.labels['bb.role'] === 'agent');
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
    return await completeTurn(meta, agentC.id, options, env);
  } catch (err) {
    await freeze(slug, options).catch(() => {});
    throw err;
  }
}

/** Finish the turn of a bottle whose runner went away: `finishTurn` by its older name. */
export const reattach = finishTurn;

/**
 * Stop a running bottle's agent (SIGTERM, then SIGKILL after `timeoutMs`): its
 * turn then ends the ordinary way, through `finishTurn`. Idempotent.
 */
export async function stopAgent(
  slug: string,
  options: BottleOptions,
  timeoutMs = 5000,
): Promise<void> {
  for (const c of await options.backend.list({ 'bb.slug': slug }))
    if (c.labels['bb.role'] === 'agent' && (c.state === 'running' || c.state === 'paused'))
      await options.backend.stop(c.id, timeoutMs);
}
