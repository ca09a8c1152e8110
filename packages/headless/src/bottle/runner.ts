import { BbError } from '@bb/errors';
import type { RepoName, SiteCredentials } from '@bb/forge';
import { homeLayout, LABEL, MANAGED_LABEL } from '@bb/names';
import type { Remediator } from '@bb/supervise';
import type { Backend, BottleInfo } from '../engine/backend';
import { releaseHere, type TurnOutcome } from './bottle-parts';
import { cool, destroy, finishTurn, startLaunch, startResume, stopAgent } from './bottles';
import { renewHold } from './hold';
import { type ForgeWiring, HOME_LABEL, homeLabel, readMeta } from './layout';
import {
  type AgentManifest,
  loadAgentManifest,
  loadBottleManifest,
  memoryBytes,
} from './manifests';
import { type PoolRoom, WarmPool } from './pool-keeper';
import { type BottleStorage, hostBottleStorage } from './storage';
import { takeResumeRequest } from './supervise-remedy';
import { noteExpiringToken, startTokenKeeper } from './token-keeper';

/**
 * Bottles as the orchestrator drives them, each a group (the agent and its
 * gate, sharing a directory for sockets) rather than single containers: the
 * seam a platform plugs in at. Starting a turn returns once the agent runs; the
 * turn's end is awaited separately (`finishTurn`), so no decision ever waits on
 * an agent; what a bottle leaves (meta, queue, op log, notes, evidence) is read
 * through `storage`, never through host paths. `headlessRunner` runs groups of
 * containers on a `Backend` (Docker, local); `@bb/backend-kubernetes` runs pods;
 * tests give the orchestrator a double.
 */
export interface BottleRunner {
  readonly backendName: string;
  /** Create the bottle and start its first turn; returns once the agent runs. */
  startLaunch(o: {
    agent: string;
    slug: string;
    prompt: string;
    /** The bottle's forge; without a token, the runner makes the bottle its own (`credentials`). */
    forge: Omit<ForgeWiring, 'token'> & { token?: string | undefined };
    bottles?: string[] | undefined;
    /** Where the default branch is, as the forge's API says (the mirror may need no fetch). */
    defaultHead?: (() => Promise<string | undefined>) | undefined;
    /** Asked before the agent starts; throwing stops the launch (see `BottleOptions.fence`). */
    fence?: (() => Promise<void>) | undefined;
    /** Until when the caller holds the issue (see `BottleOptions.holdUntil`). */
    holdUntil?: (() => number | undefined) | undefined;
  }): Promise<void>;
  /** Start a new turn of a frozen bottle; returns once the agent runs. */
  startResume(o: {
    slug: string;
    prompt: string;
    pr?: number | undefined;
    /** Begin a fresh agent session (a long one is rotated). */
    freshSession?: boolean | undefined;
    /** Where the PR branch is now, as the forge's API says (cheaper than asking its git). */
    prHead?: (() => Promise<string | undefined>) | undefined;
    /** Asked before the agent starts; throwing stops the turn (see `BottleOptions.fence`). */
    fence?: (() => Promise<void>) | undefined;
    /** Until when the caller holds the issue (see `BottleOptions.holdUntil`). */
    holdUntil?: (() => number | undefined) | undefined;
  }): Promise<void>;
  /** Wait for the running turn's end (the agent's exit), record it in the bottle, freeze it. */
  finishTurn(slug: string): Promise<TurnOutcome>;
  /** Stop the running agent (its turn then ends through `finishTurn`). */
  stopAgent(slug: string, timeoutMs?: number): Promise<void>;
  /** Remove everything of the bottle. Idempotent. */
  destroy(slug: string): Promise<void>;
  /**
   * Cool a warm bottle (its turn's containers were kept, paused): they go, as
   * any frozen bottle's. Whether it was warm. Absent: this runner keeps none warm.
   */
  cool?(slug: string): Promise<boolean>;
  /** The bottle's containers, as the backend reports them. */
  containers(slug: string): Promise<BottleInfo[]>;
  /**
   * Which engine this runner's bottles run on (`Backend.identity`), where bottles
   * can move between engines (a shared bottle store) and the backend can say;
   * undefined otherwise (every bottle this runner sees is on its one engine).
   */
  engine?(): Promise<string | undefined>;
  /**
   * Let go of a bottle whose issue another orchestrator took over: what of it runs
   * on this engine goes, its files stay (`releaseHere`). Whether anything went.
   */
  release?(slug: string): Promise<boolean>;
  /**
   * The caller's hold on the bottle's issue was renewed until `untilMs` (wall
   * clock): its gate may write until then (`renewHold`). Whether it has a gate
   * under a hold. Absent: this runner's gates are not fenced.
   */
  hold?(slug: string, untilMs: number): Promise<boolean>;
  /** Every container this orchestrator's bottles have (labels `bb.managed-by` and `bb.home`). */
  ours(): Promise<BottleInfo[]>;
  /** Where each bottle's state is read from. */
  readonly storage: BottleStorage;
  /** Memory a running bottle of this agent may take (its limit): what capacity is counted in. */
  memoryOf(agent: string, bottles?: string[] | undefined): number;
  /** How long one session of this agent may grow before it is rotated (its manifest's `session`). */
  sessionLimits?(agent: string): SessionLimits;
  /** What this agent may spend (its manifest's `budget`). */
  budgetOf?(agent: string): AgentManifest['budget'];
  /** The resume a capability rebuild asked for once the turn ends (taken: used once). */
  takeResumeRequest?(slug: string): { prompt: string; requestId: string } | undefined;
  /**
   * Whether its bottles have the supervise plane (the sidecar, the tools, a desk that
   * applies decisions), so their agents are told of it. `false`: never told. @default
   * what `BB_SUPERVISE` says
   */
  readonly supervise?: boolean | undefined;
  /**
   * How supervise decisions are applied to its bottles, where the service has no
   * engine of containers to apply them with (a platform of pods). @default the
   * service's own, over its backend
   */
  readonly remediator?: Remediator | undefined;
  /** The warm pool (`BB_POOL`), where this runner keeps one: bottles made ahead of their issues. */
  readonly pool?: RunnerPool | undefined;
  /** Stop what it runs in the background (renewing tokens). */
  close?(): void;
}

/** A runner's warm pool, as the orchestrator uses it (`WarmPool`). */
export interface RunnerPool {
  /** A pooled bottle of `agent`, taken for a launch: launch under its slug. Undefined: none ready. */
  take(agent: string, bottles?: string[] | undefined): string | undefined;
  /** Keep it filled, asking for room before each bottle (see `PoolRoom`). */
  fill(room: PoolRoom): void;
  owns(slug: string): boolean;
  held(): Array<{ slug: string; agent: string; bytes: number }>;
  /** Remove one held bottle (its memory is needed). Whether it was held. */
  drop(slug: string): Promise<boolean>;
  /** Remove a bottle taken for a launch that failed before binding it (see `WarmPool.discard`). */
  discard(slug: string): Promise<void>;
  /** Stop refilling and remove what it holds. */
  close(): Promise<void>;
}

/** A warm pool's settings: how many of each agent, and the forge their issues are on. */
export interface PoolSettings {
  sizes: Map<string, number>;
  forge: { kind: string; site: Record<string, string> };
}

/** What each bottle's gate is given to reach the forge: the bot's token, or one made for it. */
export interface GateTokens {
  /** The bot's token, the same for every bottle. */
  token?: string | undefined;
  /** A site that makes each bottle its own token (a GitHub App's): used when there is no `token`. */
  credentials?: SiteCredentials | undefined;
}

/** The token for one bottle's gate, with when it expires when it does. */
export async function gateToken(
  o: GateTokens,
  target: RepoName,
  given?: string,
): Promise<{ token: string; expiresAt?: Date }> {
  if (given) return { token: given };
  if (o.token) return { token: o.token };
  if (o.credentials) return o.credentials.bottleToken(target);
  throw new BbError(
    'INVALID_INPUT',
    'no forge token for the bottle: set FORGE_TOKEN (or, on GitHub, a GitHub App)',
  );
}

/** When a session is rotated: after `maxTurns` turns, or once a turn read `maxTokens` input tokens. */
export interface SessionLimits {
  maxTurns?: number | undefined;
  maxTokens?: number | undefined;
}

/** The label on every container the orchestrator launches. */
export { MANAGED_LABEL };

/** The real runner: bottles through `@bb/headless` on a backend. */
export function headlessRunner(
  o: GateTokens & {
    backend: Backend;
    env: Record<string, string | undefined>;
    /** How long a bottle stays warm after its turn (0: never). @default 0 */
    warmMs?: number;
    /** Said to the operator: a token that could not be renewed. */
    warn?: ((message: string) => void) | undefined;
    /** Keep a warm pool (`BB_POOL`) of bottles for this forge's issues. */
    pool?: PoolSettings | undefined;
    /** The pool's log lines. */
    log?: ((entry: Record<string, unknown>) => void) | undefined;
  },
): BottleRunner {
  const minted = !o.token && !!o.credentials;
  const opts = {
    backend: o.backend,
    env: o.env,
    warmMs: o.warmMs ?? 0,
    // Each turn's token is new: a warm bottle is kept for what the tokens stand for.
    ...(minted ? { forgeTokenKey: o.credentials!.describe } : {}),
  };
  // Tokens that expire are renewed while their gates run.
  const keeper = minted
    ? startTokenKeeper({
        env: o.env,
        credentials: o.credentials!,
        log: (l) => {
          if (l['msg'] !== 'forge token renewed')
            o.warn?.(`${l['msg']}${l['slug'] ? ` for ${l['slug']}` : ''}: ${l['error']}`);
        },
      })
    : undefined;
  const noted = (slug: string, expiresAt: Date | undefined) => {
    if (expiresAt) noteExpiringToken(slug, expiresAt, o.env);
  };
  const pool =
    o.pool && o.pool.sizes.size > 0
      ? new WarmPool({
          ...opts,
          sizes: o.pool.sizes,
          forge: o.pool.forge,
          labels: { ...MANAGED_LABEL },
          log: o.log,
        })
      : undefined;
  return {
    storage: hostBottleStorage(o.env),
    backendName: o.backend.name,
    ...(pool ? { pool } : {}),
    async startLaunch(l) {
      const t = await gateToken(o, l.forge, l.forge.token);
      await startLaunch({
        ...opts,
        agent: l.agent,
        slug: l.slug,
        prompt: l.prompt,
        forge: { ...l.forge, token: t.token },
        labels: { ...MANAGED_LABEL },
        ...(l.bottles ? { bottles: l.bottles } : {}),
        ...(l.defaultHead ? { defaultHead: l.defaultHead } : {}),
        ...(l.fence ? { fence: l.fence } : {}),
        ...(l.holdUntil ? { holdUntil: l.holdUntil } : {}),
      });
      noted(l.slug, t.expiresAt);
    },
    async startResume(r) {
      const forge = readMeta(r.slug, o.env)?.forge;
      const t = forge ? await gateToken(o, forge) : undefined;
      await startResume({
        ...opts,
        slug: r.slug,
        prompt: r.prompt,
        ...(t ? { forgeToken: t.token } : {}),
        ...(r.pr !== undefined ? { pr: r.pr } : {}),
        ...(r.freshSession ? { freshSession: true } : {}),
        ...(r.prHead ? { prHead: r.prHead } : {}),
        ...(r.fence ? { fence: r.fence } : {}),
        ...(r.holdUntil ? { holdUntil: r.holdUntil } : {}),
      });
      if (forge) noted(r.slug, t?.expiresAt);
    },
    close: () => keeper?.close(),
    finishTurn: (slug) => finishTurn(slug, opts),
    stopAgent: (slug, timeoutMs) => stopAgent(slug, opts, timeoutMs),
    destroy: (slug) => destroy(slug, opts),
    cool: (slug) => cool(slug, opts),
    containers: (slug) => o.backend.list({ [LABEL.slug]: slug }),
    engine: async () => (homeLayout(o.env).shared ? o.backend.identity?.() : undefined),
    release: (slug) => releaseHere(slug, opts),
    hold: async (slug, untilMs) => renewHold(slug, untilMs, o.env, await o.backend.identity?.()),
    ours: () => o.backend.list({ ...MANAGED_LABEL, [HOME_LABEL]: homeLabel(o.env) }),
    takeResumeRequest: (slug) => takeResumeRequest(slug, o.env),
    sessionLimits(agent) {
      try {
        return loadAgentManifest(agent, o.env).manifest.session ?? {};
      } catch {
        return {};
      }
    },
    budgetOf(agent) {
      try {
        return loadAgentManifest(agent, o.env).manifest.budget;
      } catch {
        return undefined;
      }
    },
    memoryOf(agent, bottles) {
      try {
        const names = bottles ?? loadAgentManifest(agent, o.env).manifest.bottles;
        const first = loadBottleManifest(names[0]!, o.env).manifest;
        return memoryBytes(first.resources.memory) ?? 2 * 1024 ** 3;
      } catch {
        return 2 * 1024 ** 3;
      }
    },
  };
}
