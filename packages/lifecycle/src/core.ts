import { errorMessage } from '@bb/errors';
import type { Forge, ForgeKind, ForgeSite } from '@bb/forge';
import type { BottleRunner, SessionLimits } from '@bb/headless';
import type { EventInbox, ForgeStateStore } from '@bb/state';
import type { Budget, BudgetPolicy, SpendLedger } from './budget';
import type { Capacity, CapacityOptions } from './capacity';
import type { Ack } from './decide';
import type { Fleet } from './fleet';
import type { FleetOptions } from './issue-leases';
import type { LifecycleContext } from './machine';
import type { ProvenanceOptions, RecordTurnOptions } from './record-turn';
import type { BottleSession, Fired, Sessions } from './session';
import type { ThreadDesk } from './supervise-thread';
import type { TurnLogs } from './turn-spend';
import type { WarmBottles } from './warm-bottles';
import type { Work } from './work';

export interface OrchestratorOptions {
  /** The forge kind (its bottle branches) and its site (what bottles are wired to). */
  forge: { kind: ForgeKind; site: ForgeSite };
  /** The forge for a repository, as the bot. @default the site's, with `token` */
  forgeFor?: (owner: string, repo: string) => Forge;
  /**
   * The bot's token (given to each bottle's sidecar only) and its login. Absent when
   * the site is its own identity (`site.credentials`, a GitHub App): the runner then
   * makes each bottle its own token.
   */
  token?: string | undefined;
  botLogin: string;
  /** Org whose assigned members launch agents. @default 'bot-bottle' */
  org?: string;
  store: ForgeStateStore;
  /** The durable inbox (and delivery ledger): every accepted event until its effect happened. */
  inbox: EventInbox;
  /** Bottles: `headlessRunner` for real ones. */
  runner: BottleRunner;
  provenance: ProvenanceOptions;
  env: Record<string, string | undefined>;
  /** Issues whose decisions run at once (decisions are quick: turns never hold a slot). @default 64 */
  concurrency?: number;
  /** Start-up work and running bottles, limited apart. */
  capacity?: CapacityOptions;
  /** A running agent with no check-in for this long is stopped. @default 30 min */
  watchdogTimeoutMs?: number;
  /** How often the watchdog looks. @default 60 s */
  watchdogIntervalMs?: number;
  /** How long an agent that signalled done may take to exit. @default 10 s */
  doneGraceMs?: number;
  /** How often a turn's queue is read. @default 500 ms */
  pollMs?: number;
  /** How often a turn's sidecar is looked at. @default 3 s */
  gateCheckMs?: number;
  /** Waits before an event that failed is tried again; after the last it is given up. @default 2 s, 10 s, 1 min, 5 min, 15 min */
  retryMs?: number[];
  /** Resume a bottle when a human pushes to its PR. @default false */
  resumeOnHumanPush?: boolean;
  /**
   * Only comments and reviews that mention `@<botLogin>` wake an agent (besides
   * coming from someone with write access or a member of `org`). @default false
   */
  mentionOnly?: boolean;
  /** Say on the issue, once, why a targeted issue could not launch. @default true */
  feedback?: boolean;
  /** Acknowledge the comment or review that woke an agent with a 👀 reaction. @default true */
  acknowledge?: boolean;
  /**
   * Say on the thread, once per turn, how a turn ended when it ended without
   * `signal_done` (stopped by the watchdog or from the forge, an exit without the
   * signal, an agent that could not be started): what happened, whether the work
   * was kept, how to go on. @default true
   */
  turnOutcomes?: boolean;
  /**
   * Budgets and the loop breaker: caps per turn and issue (under each agent's
   * manifest `budget`), the org's daily cap, and what continues a bottle
   * stopped at one. @default a turn may run 120 min; no token or cost caps
   */
  budgets?: BudgetPolicy;
  /** An agent's own budget (its manifest's `budget` by default). */
  budgetOf?: (agent: string) => Budget | undefined;
  /** Forge logins whose comments, reviews and pushes never wake an agent (other bots). */
  ignoreUsers?: string[];
  /** An issue that waits this long for room to run is told so on the forge (once). @default 10 min */
  capacityNoticeMs?: number;
  /**
   * When an agent's session is rotated (per agent; its manifest's `session` by
   * default): the next turn starts a fresh session seeded with a summary.
   */
  sessionLimits?: (agent: string) => SessionLimits;
  /**
   * The supervise plane (a `SuperviseDesk` of `@bb/supervise`): while a bottle
   * waits for the operator its watchdog is paused; a turn's requests go into its
   * record; a destroyed bottle's pending requests are cancelled.
   */
  supervise?: SupervisePlane | undefined;
  /** The longest a turn's watchdog stays paused for the operator, in all. @default 24 h */
  superviseMaxPauseMs?: number;
  /**
   * Who may decide supervise requests on the forge thread (`/bb approve`,
   * `/bb reject`): these logins. @default the repository's admins (never the bot)
   */
  superviseDeciders?: string[] | undefined;
  /**
   * Auto mode: a request the analyser finds harmless (a proxy change inside the
   * ceiling, nothing above `info`: `autoApprovable`) is approved at once, recorded
   * as decided by `auto`, and announced on its issue. @default false
   */
  superviseAuto?: boolean;
  /** How often pending supervise requests are looked for to post on their issues. @default 2000 */
  superviseThreadMs?: number;
  /**
   * Several orchestrators sharing one database: each issue is worked on by the
   * holder of its lease. @default this orchestrator alone (leases in memory)
   */
  fleet?: FleetOptions;
  log?: (entry: Record<string, unknown>) => void;
}

/** What the orchestrator needs of the supervise plane. */
export interface SupervisePlane {
  awaitingOperator(slug: string): boolean | Promise<boolean>;
  auditTurn?(
    slug: string,
    startedAt: string,
  ): ReturnType<NonNullable<RecordTurnOptions['supervise']>>;
  cancelAll?(slug: string, reason: string): unknown;
  /** With these (a `SuperviseDesk` has them), requests are posted and decided on the forge thread. */
  list?: ThreadDesk['list'];
  show?: ThreadDesk['show'];
  approve?: ThreadDesk['approve'];
  reject?: ThreadDesk['reject'];
}

/** Cancel a bottle's supervise requests: a desk that does not answer is logged, never thrown. */
export async function cancelSupervise(core: Core, slug: string, reason: string): Promise<void> {
  await Promise.resolve(core.o.supervise?.cancelAll?.(slug, reason)).catch((err) =>
    core.log({ msg: 'could not cancel the supervise requests', slug, error: errorMessage(err) }),
  );
}

/** The plane as a desk the forge thread can use, when it is one. */
export const threadDesk = (p: SupervisePlane | undefined): ThreadDesk | undefined =>
  p?.list && p.show && p.approve && p.reject ? (p as ThreadDesk) : undefined;

/** Something a person should know about an issue (why it did not launch), for status and the dashboard. */
export interface Notice {
  key: string;
  at: string;
  message: string;
}

/** Waits before an event that failed is tried again (see `OrchestratorOptions.retryMs`). */
export const RETRY_MS = [2_000, 10_000, 60_000, 300_000, 900_000];

/**
 * What the orchestrator's parts share: its options, its sessions and the
 * services around them. Each part (events, actions, turn ends, the watchdog,
 * intake) is a set of functions of this.
 */
export interface Core {
  readonly o: OrchestratorOptions;
  forgeFor(owner: string, repo: string): Forge;
  readonly sessions: Sessions;
  readonly capacity: Capacity;
  readonly warm: WarmBottles;
  readonly fleet: Fleet;
  /** What earlier runs spent (budgets hold this turn's spend against it). */
  readonly spend: SpendLedger;
  /** The running turns' logs, read as they grow (what each turn used so far). */
  readonly turnLogs: TurnLogs;
  /** Issues whose new turns wait for the org's daily budget. */
  readonly budgetWaiting: Set<string>;
  /** Inbox events on this process's queues (or waiting to be retried), by id. */
  readonly queued: Set<number>;
  /** Keys of the events being accepted now (their inbox write in flight). */
  readonly accepting: Set<string>;
  readonly retryMs: number[];
  readonly ctx: LifecycleContext;
  closed(): boolean;
  push(key: string, work: Work): void;
  /** Run `fn` after `ms`, unless the orchestrator is closed by then. */
  later(ms: number, fn: () => void | Promise<void>): void;
  /** Start watching a running turn. */
  watch(slug: string, startedAt?: number): void;
  /** Room came free: whoever waited for it tries again. */
  freed(): void;
  /** Tell the person who asked, once, why nothing runs. */
  feedback(key: string, message: string, once?: string): Promise<void>;
  /** Say on the thread (issue or PR `on`), once per `once`, how a turn ended. */
  turnOutcome(key: string, on: number, message: string, once: string): Promise<void>;
  /** React 👀 to what woke the agent. */
  acknowledge(key: string, target: Ack): void;
  /** Stop a session's agent for `fired`; its turn ends through its monitor. */
  fire(session: BottleSession, fired: Fired): Promise<void>;
  log(entry: Record<string, unknown>): void;
}
