import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { legacyForgeWiring } from '@bb/forge';
import { homeLayout, LABEL } from '@bb/names';
import type { Backend } from '../engine/backend';
import { bbHome } from '../home';

/** How a bottle reaches its forge. The token goes to the sidecar only and is never written down. */
export interface ForgeWiring {
  /** The forge kind's name (a kind registered with `@bb/forge`). */
  kind: string;
  /** The variables, none secret, that configure the kind's site (`ForgeSite.env()`). */
  site: Record<string, string>;
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
  /** The image the bottle was launched with (a capability rebuild changes `image`, not this). */
  baseImage?: string;
  /**
   * The images rebuilt for it (capability approvals), by tag: removed with it, and
   * only these (never an image found by its labels, which anyone's image can carry).
   */
  rebuilt?: string[];
  status: 'running' | 'frozen';
  sessionId: string | null;
  /** The turn the current session began with (a rotation starts a new one). @default 1 */
  sessionStart?: number;
  cwd: string;
  branch: string;
  forge: Omit<ForgeWiring, 'token'> | null;
  /** The commit the workspace started from (the secret scan covers what came after). */
  baseCommit?: string | null;
  /** Commits earlier turns' scans covered, so each turn scans only its own. */
  scanned?: string[];
  /** The disk quota the bottle's workspace and home live on, in bytes (absent: none). */
  diskBytes?: number;
  /**
   * The repository's mirror on the host the workspace was checked out from: its
   * objects are the workspace's and the gate's history (mounted read-only).
   */
  mirror?: string;
  /**
   * A launch whose workspace is still being made: its agent's container may be
   * up, its program has not run (it waits for the workspace).
   */
  preparing?: boolean;
  /**
   * This turn's PR branch is known to be where the checkout is (nobody pushed to it
   * since): no need to bring it over. Decided at each resume.
   */
  syncPr?: boolean;
  turns: Array<{
    turn: number;
    prompt: string;
    exitCode: number;
    ok: boolean;
    /** Input tokens the model read this turn, when the CLI reports usage. */
    tokens?: number;
    startedAt: string;
    finishedAt: string;
  }>;
  /** Extra container labels given at launch. */
  labels?: Record<string, string>;
  /**
   * The engine its containers are on (`Backend.identity`), where the backend can
   * say: a bottle in a shared store that another engine ran is resumed here from
   * its files, its containers there are not this engine's to watch.
   */
  engine?: string;
  /**
   * Its gate's id in the hold file (`hold.ts`), when its turns run under a hold
   * (an orchestrator in a fleet): a gate sends forge writes only while the host
   * renews the hold for this id.
   */
  holdId?: string;
  /**
   * The turn in progress (so a restarted orchestrator can finish it), or absent.
   * `waiter`: its agent runs under the waiter (its end is said by a file, the
   * container may outlive it).
   */
  current?: {
    turn: number;
    prompt: string;
    startedAt: string;
    waiter?: boolean;
    /** Under the waiter: the nonce in the name of the file that says the turn ended. */
    nonce?: string;
  } | null;
  /**
   * What a turn's agent containers were made for (image, configuration, forge,
   * token, runtime), as a digest: a warm bottle resumes in them only for the same.
   */
  warmKey?: string;
  /**
   * A frozen bottle kept warm: its agent container (the waiter idle) and its gate
   * paused, not removed, its disk mounted, until `until`; a resume before then
   * runs the next turn in them. `bytes`: the memory they hold.
   */
  warm?: {
    until: string;
    agent: string;
    gate?: string | undefined;
    nextTurn: number;
    bytes: number;
    key: string;
    /** The issue and PRs its gate may write to, as it said before it was paused. */
    scope?: number[];
  } | null;
  /**
   * A bottle of the warm pool (`pool.ts`), not yet bound to an issue: its
   * containers up (the gate waiting for its bind file, the waiter for turn 1),
   * nothing of any issue in it. `key`: what they were made for, as a digest.
   */
  pooled?: {
    since: string;
    key: string;
    gate: string;
    agent: string;
    /** The process whose pool made it (`heldByLivePool`). */
    owner?: { host: string; pid: number };
  };
  createdAt: string;
}

/**
 * The users a bottle's processes run as. The agent is one user; the gate (the
 * forge sidecar and the proxies, which hold the secrets) another, so the agent
 * can neither write the op log and queue nor remove the gate's sockets.
 */
export const AGENT_USER = { uid: 1000, gid: 1000 } as const;
export const GATE_USER = { uid: 1001, gid: 1001 } as const;
export const userSpec = (u: { uid: number; gid: number }) => `${u.uid}:${u.gid}`;

/**
 * Where everything of a bottle is on the host. `disk/` is the agent's own
 * filesystem (a fixed-size image where the host can mount one) holding
 * `workspace/` and `home/`: everything the agent can write. The rest is the
 * host's and the gate's: `sock/` (the gate's sockets), `queue/` (events for the
 * orchestrator), `state/` (the op log, the egress log, the sidecar's push
 * repository), `proxy/` (allowlist and routes, secret references only),
 * `logs/` (each container's output) and `meta.json`.
 */
export interface BottlePaths {
  dir: string;
  disk: string;
  /** The disk image, when the bottle has a quota. */
  diskImage: string;
  workspace: string;
  home: string;
  sock: string;
  queue: string;
  state: string;
  proxy: string;
  logs: string;
  meta: string;
  /** The supervise exchange (requests in, decisions out): the gate's and the host's. */
  supervise: string;
  /** The configuration the bottle runs with, as its agent reads it (`/etc/bot-bottle/current-config`). */
  currentConfig: string;
  /** Files an operator approved for the whole bottle (they win over the manifests on every turn). */
  overrides: string;
  /** Each turn's command for the waiter, the host's (the agent reads them only). */
  turns: string;
}

/** `$BB_HOME/bottles/<slug>`, or `$BB_BOTTLE_STORE/<slug>`. */
export function bottleDir(
  slug: string,
  env: Record<string, string | undefined> = process.env,
): string {
  return homeLayout(env).bottle(slug);
}

export function bottlePaths(
  slug: string,
  env: Record<string, string | undefined> = process.env,
): BottlePaths {
  const l = homeLayout(env);
  const dir = l.bottle(slug);
  // In a shared store the disk image is the bottle's, its mount this machine's.
  const disk = l.shared ? l.mount(slug) : join(dir, 'disk');
  return {
    dir,
    disk,
    diskImage: join(dir, 'disk.img'),
    workspace: join(disk, 'workspace'),
    home: join(disk, 'home'),
    sock: join(dir, 'sock'),
    queue: join(dir, 'queue'),
    state: join(dir, 'state'),
    proxy: join(dir, 'proxy'),
    logs: join(dir, 'logs'),
    meta: join(dir, 'meta.json'),
    supervise: join(dir, 'supervise'),
    currentConfig: join(dir, 'current-config'),
    overrides: join(dir, 'overrides'),
    turns: join(dir, 'turns'),
  };
}

/** Ports of the in-bottle bridge: the egress proxy (HTTPS_PROXY) and the credential proxy (model APIs). */
export const BRIDGE_PORTS = { egress: 3128, credentials: 3129 } as const;

/** The paths a bottle's processes see in a container. */
export const IN_BOTTLE = {
  home: '/home/bottle',
  workspace: '/workspace',
  runtime: '/opt/bb',
  socketDir: '/run/bb',
  socket: '/run/bb/forge.sock',
  secrets: '/run/bb-secrets',
  queue: '/var/bb/queue',
  state: '/var/bb/state',
  proxy: '/var/bb/proxy',
  superviseSocket: '/run/bb/supervise.sock',
  supervise: '/var/bb/supervise',
  currentConfig: '/etc/bot-bottle/current-config',
  /** The repository mirror's objects, read-only (the workspace's and the gate's alternates). */
  mirror: '/var/bb/mirror',
  /** Each turn's command, read-only (the waiter's). */
  turns: '/var/bb/turns',
};

/** The paths a bottle's processes see: fixed ones in a container, the host's otherwise. */
export function pathsFor(
  backend: Backend,
  p: BottlePaths,
  runtime: string,
  secrets: string,
): typeof IN_BOTTLE {
  if (backend.mapsMounts) return IN_BOTTLE;
  return {
    home: p.home,
    workspace: p.workspace,
    runtime,
    socketDir: p.sock,
    socket: join(p.sock, 'forge.sock'),
    secrets,
    queue: p.queue,
    state: p.state,
    proxy: p.proxy,
    superviseSocket: join(p.sock, 'supervise.sock'),
    supervise: p.supervise,
    currentConfig: p.currentConfig,
    mirror: '',
    turns: p.turns,
  };
}

/** Where a bottle's processes find its mirror's objects (undefined: no mirror). */
export function mirrorObjectsFor(backend: Backend, meta: BottleMeta): string | undefined {
  if (!meta.mirror) return undefined;
  return backend.mapsMounts ? IN_BOTTLE.mirror : join(meta.mirror, 'objects');
}

/** The label naming the `BB_HOME` a bottle belongs to (see `homeLabel`). */
export const HOME_LABEL = LABEL.home;

/**
 * The `bb.home` label value of bottles made under this `BB_HOME`: a short hash
 * of its path. Two orchestrators (or test runs) on one engine never take each
 * other's containers for their own.
 */
export function homeLabel(env: Record<string, string | undefined> = process.env): string {
  return createHash('sha256').update(bbHome(env)).digest('hex').slice(0, 16);
}

export function readMeta(
  slug: string,
  env: Record<string, string | undefined> = process.env,
): BottleMeta | undefined {
  const file = bottlePaths(slug, env).meta;
  if (!existsSync(file)) return undefined;
  const meta = JSON.parse(readFileSync(file, 'utf8')) as BottleMeta;
  const old = meta.forge as (BottleMeta['forge'] & { apiUrl?: string }) | null;
  // A bottle frozen before forges were plugs: it named only the API of the built-in kind.
  if (old && !old.kind && old.apiUrl) {
    const { apiUrl, ...rest } = old;
    meta.forge = { ...rest, ...legacyForgeWiring(apiUrl) };
  }
  return meta;
}

/** Write `meta.json` whole (beside it, then renamed: a crash never leaves half of it). */
export function writeMeta(meta: BottleMeta, env: Record<string, string | undefined>): void {
  const file = bottlePaths(meta.slug, env).meta;
  // A name of this writer's own: hosts sharing a bottle store never write one file.
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(meta, null, 2)}\n`);
  renameSync(tmp, file);
}

/** Slugs of the bottles under `$BB_HOME/bottles` (or in `$BB_BOTTLE_STORE`). */
export function listBottles(env: Record<string, string | undefined> = process.env): string[] {
  const d = homeLayout(env).bottles;
  return existsSync(d)
    ? readdirSync(d)
        .filter((s) => existsSync(join(d, s, 'meta.json')))
        .sort()
    : [];
}
