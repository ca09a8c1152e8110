/**
 * What launching, resuming and ending a bottle's turns share: the options, the
 * bottle's directories and owners, its gate's making, and freezing and removing it.
 */
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
import { BbError, redactString } from '@bb/errors';
import { ForgeSidecarClient } from '@bb/forge-sidecar';
import { homeLayout, LABEL, NAME_PATTERN } from '@bb/names';
import { type Owner, writeFileNoFollow } from '@bb/wall';
import { type Backend, NETNS_LABEL } from '../engine/backend';
import { unmountAllUnder, unmountDisk } from '../engine/disk';
import { clearSlot } from '../engine/mirror-slot';
import { providerFor } from '../providers';
import { type CreatedGate, createGate, type GateOptions } from './gate';
import {
  AGENT_USER,
  type BottleMeta,
  type BottlePaths,
  bottlePaths,
  type ForgeWiring,
  GATE_USER,
  HOME_LABEL,
  homeLabel,
  readMeta,
  writeMeta,
} from './layout';
import {
  type AgentManifest,
  type BottleManifest,
  loadAgentManifest,
  loadBottleManifest,
} from './manifests';
import { remoteBranchHead } from './mirror';
import { type BottlePlan, TURN_FILE } from './plan';
import { prepareRuntime } from './runtime';
import { removeSecrets } from './secrets';
import { writeCurrentConfig } from './supervise-gate';

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
  /**
   * With `vanished`: the turn ran on this other engine (`BottleMeta.engine`), which
   * this one cannot reach: it was lost with the machine, or the replica, that ran it.
   */
  lostWith?: string;
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

/** The record of a turn that ended: what it was asked, how it ended, when. */
export function endedTurn(
  current: { turn: number; prompt: string; startedAt: string },
  exitCode: number,
  result: { ok: boolean; tokens?: number | undefined },
): BottleMeta['turns'][number] {
  return {
    turn: current.turn,
    prompt: current.prompt,
    exitCode,
    ok: result.ok,
    ...(result.tokens !== undefined ? { tokens: result.tokens } : {}),
    startedAt: current.startedAt,
    finishedAt: new Date().toISOString(),
  };
}

/** The `{"type":"bb_cli",...}` line the bb-agents image's CLI wrappers print before starting. */
export function announcedCli(output: string): { name: string; version: string } | undefined {
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
  /**
   * What the forge token stands for when each turn's is a new one (a GitHub App's):
   * a warm bottle is kept for this rather than for the token itself, and its gate keeps
   * the token it has (renewed in place).
   */
  forgeTokenKey?: string | undefined;
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
  /**
   * Asked just before the agent's container starts and, in a launch, again just
   * before its program is let start (after the clone): throwing stops the turn
   * there, and nothing of it ran (a launch's half-made bottle is removed, a
   * resumed one frozen again). The orchestrator's lease check: one that lost its
   * issue while it stalled starts no agent.
   */
  fence?: (() => Promise<void>) | undefined;
  /**
   * Until when (wall clock, ms) the orchestrator holds the bottle's issue (its
   * lease, less a renewal period), or `undefined` outside a fleet: a bottle's gate
   * started under a hold sends forge writes only while it is renewed
   * (`renewHold`), so a host that stalls past its lease makes none through it.
   */
  holdUntil?: (() => number | undefined) | undefined;
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
   * Where the repository's default branch is, as the caller's forge says (its
   * API): when the mirror has it already, the launch fetches nothing.
   */
  defaultHead?: () => Promise<string | undefined>;
  /**
   * Extra labels for the bottle's containers, kept for later turns (e.g.
   * `{ [LABEL.managedBy]: 'orchestrator' }`, which the orchestrator's restart
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

export const SLUG = NAME_PATTERN;

/** The bottle's users, when the host can give ownership (root, a container backend). */
export function owners(backend: Backend): { agent?: Owner; gate?: Owner } {
  return backend.mapsMounts && process.getuid?.() === 0
    ? { agent: AGENT_USER, gate: GATE_USER }
    : {};
}

/**
 * Make the bottle's own directories: the gate's (sockets, queue, state) owned
 * by the gate's user, the host's (proxy configuration, logs). None of them is
 * the agent's, so this never walks what the agent wrote. Idempotent.
 */
export function prepareDirs(p: BottlePaths, backend: Backend): void {
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
export function migrateLayout(p: BottlePaths): void {
  if (existsSync(p.disk) || !existsSync(join(p.dir, 'workspace'))) return;
  mkdirSync(p.disk, { mode: 0o755 });
  for (const d of ['workspace', 'home'])
    if (existsSync(join(p.dir, d))) renameSync(join(p.dir, d), join(p.disk, d));
}

/**
 * The manifests a new bottle of `agentName` is made from (`given` bottles, or the
 * agent's), checked before anything is made: its first bottle names an image, its
 * provider is known. `image` is that first bottle's.
 */
export function newBottleManifests(
  agentName: string,
  given: string[] | undefined,
  env: Record<string, string | undefined>,
): { agent: AgentManifest; names: string[]; bottles: BottleManifest[]; image: string } {
  const { manifest: agent } = loadAgentManifest(agentName, env);
  const names = given ?? agent.bottles;
  const bottles = names.map((b) => loadBottleManifest(b, env).manifest);
  const image = bottles[0]!.image;
  if (!image)
    throw new BbError(
      'INVALID_INPUT',
      `bottle ${names[0]} names a dockerfile; building images is not supported yet: give an image`,
    );
  providerFor(agent.provider);
  return { agent, names, bottles, image };
}

/** The image the gate runs in. */
export const gateImage = (options: BottleOptions, env: Record<string, string | undefined>) =>
  options.sidecarImage ?? env['BB_BASE_IMAGE'] ?? 'bb-base:latest';

/** A turn whose agent has started (its sidecar serving): `finishTurn` waits for its end. */
export interface StartedTurn {
  slug: string;
  /** The turn's number (1 for a launch). */
  turn: number;
}

/** How long a launch's clone may take (`BB_CLONE_TIMEOUT_MS`). @default 600000 */
export function cloneTimeoutMs(env: Record<string, string | undefined>): number {
  const raw = env['BB_CLONE_TIMEOUT_MS'];
  if (raw === undefined || raw === '') return 600_000;
  if (!/^[1-9]\d{2,8}$/.test(raw))
    throw new BbError(
      'INVALID_INPUT',
      `BB_CLONE_TIMEOUT_MS ${JSON.stringify(raw)} must be a number of milliseconds from 100 to 999999999`,
    );
  return Number(raw);
}

export function gateOptions(options: BottleOptions, env: Record<string, string | undefined>) {
  return {
    backend: options.backend,
    env,
    runtime: prepareRuntime(env),
    image: gateImage(options, env),
    onProgress: options.onProgress,
  };
}

/**
 * Create this turn's gate for a bottle, with the configuration it runs with
 * (written where the agent reads it and proposes changes against).
 */
export async function createTurnGate(
  meta: BottleMeta,
  plan: BottlePlan,
  token: string | undefined,
  gate: GateOptions,
): Promise<CreatedGate | undefined> {
  writeCurrentConfig(meta.slug, plan.config, gate.env);
  return createGate(meta, plan, token, gate);
}

/**
 * Remove the network namespace holder a bottle's container names, once it is
 * seen to be one: a holder the host made (role `netns`, a label only the host
 * sets). Anything else of that name is left alone.
 */
async function destroyHolder(backend: Backend, holder: string | undefined): Promise<void> {
  if (!holder) return;
  const info = await backend.inspect(holder).catch(() => undefined);
  if (info?.labels[LABEL.role] !== 'netns') return;
  await backend.destroy(info.id).catch(() => {});
}

/**
 * Remove the holder of the network namespace an agent container joined, once that
 * container runs: the namespace lives as long as a process is in it, and the agent
 * never starts again (each turn gets a new container, a warm one is only paused).
 * Nothing when it is gone already; a failure is not the turn's.
 */
export async function releaseHolder(backend: Backend, holder: string): Promise<void> {
  await destroyHolder(backend, holder).catch(() => {});
}

/** Stop a bottle's containers, keep their output, and mark it frozen. Idempotent. */
export async function freeze(slug: string, options: BottleOptions): Promise<void> {
  const env = options.env ?? process.env;
  const p = bottlePaths(slug, env);
  // The agent's container first (the list is by name): nothing of it may reach the gate after.
  for (const c of await options.backend.list({ [LABEL.slug]: slug })) {
    // A paused (warm) container is killed where it stands: a stop would let it run on first.
    if (c.state === 'running') await options.backend.stop(c.id, 5000);
    // The holder of the namespace its agent joined goes with it.
    await destroyHolder(options.backend, c.labels[NETNS_LABEL]);
    if (existsSync(p.logs))
      writeFileSync(
        join(p.logs, `${c.labels[LABEL.role] ?? 'bottle'}-${Date.now()}.log`),
        redactString(await options.backend.logs(c.id)),
      );
    await options.backend.destroy(c.id);
  }
  removeSecrets(slug, env);
  // A frozen bottle holds no mount: its disk is mounted again to resume or to be read
  // (a bottle that came from the pool let go of its mirror slot too).
  await clearSlot(p.dir);
  await unmountDisk(p);
  const meta = readMeta(slug, env);
  if (meta) {
    meta.status = 'frozen';
    meta.warm = null;
    writeMeta(meta, env);
  }
}

/**
 * A bottle in a shared store that this orchestrator no longer holds (another
 * took its issue over while this one stalled): whatever of it runs on this
 * engine is removed and this machine's mount of its disk let go, unless its meta
 * says it runs here still (then it is the holder's, on this same engine). Its
 * files are the holder's now and are not touched. Nothing to do outside a
 * shared store. Whether anything was removed.
 */
export async function releaseHere(slug: string, options: BottleOptions): Promise<boolean> {
  const env = options.env ?? process.env;
  if (!homeLayout(env).shared) return false;
  const meta = readMeta(slug, env);
  const here = await options.backend.identity?.();
  if (meta && here && meta.engine === here && (meta.status === 'running' || meta.warm))
    return false;
  const mine = await options.backend.list({ [LABEL.slug]: slug, [HOME_LABEL]: homeLabel(env) });
  for (const c of mine) {
    await options.backend.destroy(c.id);
    await destroyHolder(options.backend, c.labels[NETNS_LABEL]);
  }
  removeSecrets(slug, env);
  await clearSlot(bottlePaths(slug, env).dir);
  await unmountDisk(bottlePaths(slug, env));
  return mine.length > 0;
}

/** Remove a bottle's containers, its disk and its state directory. Idempotent. */
export async function destroy(slug: string, options: BottleOptions): Promise<void> {
  const env = options.env ?? process.env;
  for (const c of await options.backend.list({ [LABEL.slug]: slug })) {
    await options.backend.destroy(c.id);
    await destroyHolder(options.backend, c.labels[NETNS_LABEL]);
  }
  // Images rebuilt for it (a capability approval) go with it: those its meta names (I10).
  const meta = readMeta(slug, env);
  const rebuilt = new Set(meta?.rebuilt ?? []);
  // A bottle rebuilt before these were kept names its latest one as its image.
  if (meta?.image.startsWith(`bb-rebuilt-${slug}:`)) rebuilt.add(meta.image);
  for (const tag of rebuilt) await options.backend.removeImage?.(tag);
  removeSecrets(slug, env);
  const p = bottlePaths(slug, env);
  await unmountDisk(p);
  // Whatever else is mounted below it (a disk a launch was still mounting): the removal
  // must not find it busy.
  await unmountAllUnder(p.dir);
  rmSync(p.dir, { recursive: true, force: true });
  // This machine's mount point of a bottle in a shared store (empty once unmounted).
  if (!p.disk.startsWith(`${p.dir}/`)) rmSync(p.disk, { recursive: true, force: true });
}

/** What a bottle's running gate says of itself: the issue and PRs it may write to, its turn. */
export async function gateHealth(p: BottlePaths): Promise<{ scope: number[]; turn?: number }> {
  const client = new ForgeSidecarClient({
    socketPath: join(p.sock, 'forge.sock'),
    // A loaded host may take a moment to answer; a bottle not kept warm for want of it is frozen.
    connectWaitMs: 5000,
  });
  try {
    return await client.health();
  } finally {
    await client.close();
  }
}

/** Where a resumed bottle's PR branch is on the forge: as the caller's forge says, or its refs. */
export function prBranchHead(
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
export function writeTurnFile(p: BottlePaths, turn: number): void {
  writeFileNoFollow(p.state, TURN_FILE, `${turn}\n`, { createDirs: false });
}
