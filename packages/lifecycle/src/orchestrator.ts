import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { errorMessage, isBbError } from '@bb/errors';
import {
  AGENT_LABEL_PREFIX,
  evaluateTargeting,
  type Forge,
  type ForgeEvent,
  type ForgeKind,
  type ForgeSite,
} from '@bb/forge';
import { FORGE_PROMPT_OVERLAY } from '@bb/forge-sidecar';
import type { BottleRunner, SessionLimits, TurnOutcome } from '@bb/headless';
import type { EventInbox, ForgeState, ForgeStateStore, InboxEvent } from '@bb/state';
import { forMarkdown } from '@bb/wall';
import { saveBottleRow } from './bottle-row';
import { Capacity, type CapacityOptions } from './capacity';
import { commentPrompt, mayDrive, pushPrompt, reviewPrompt, rotationPrompt } from './conversation';
import { type AdoptReport, Fleet } from './fleet';
import { type FleetOptions, IssueLeases, soloFleet } from './issue-leases';
import {
  INITIAL,
  type LifecycleAction,
  type LifecycleInput,
  type LifecycleState,
  transition,
  type WatchdogReason,
} from './machine';
import { type ProvenanceOptions, type RecordTurnOptions, recordTurn } from './record-turn';
import { issueKey, issueOf, parseIssueKey, prOf } from './routing';
import { SerialQueue } from './serial-queue';
import { readTurnLog, writeTurnLog } from './turn-log';
import { TurnMonitor, type TurnReport } from './turn-monitor';
import { WarmBottles } from './warm-bottles';
import { type Bottle, eventWork, keyOf, type Work } from './work';

export interface OrchestratorOptions {
  /** The forge kind (its bottle branches) and its site (what bottles are wired to). */
  forge: { kind: ForgeKind; site: ForgeSite };
  /** The forge for a repository, as the bot. @default the site's, with `token` */
  forgeFor?: (owner: string, repo: string) => Forge;
  /** The bot's token (given to each bottle's sidecar only) and its login. */
  token: string;
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
   * Several orchestrators sharing one database: each issue is worked on by the
   * holder of its lease. @default this orchestrator alone (leases in memory)
   */
  fleet?: FleetOptions;
  log?: (entry: Record<string, unknown>) => void;
}

/** What the orchestrator needs of the supervise plane. */
export interface SupervisePlane {
  awaitingOperator(slug: string): boolean;
  auditTurn?(
    slug: string,
    startedAt: string,
  ): ReturnType<NonNullable<RecordTurnOptions['supervise']>>;
  cancelAll?(slug: string, reason: string): unknown;
}

export type { AdoptReport } from './fleet';

/** Something a person should know about an issue (why it did not launch), for status and the dashboard. */
export interface Notice {
  key: string;
  at: string;
  message: string;
}

const RETRY_MS = [2_000, 10_000, 60_000, 300_000, 900_000];

/**
 * Composes the packages into the forge-driven loop. Events come in through
 * `accept` (webhook and sweep alike), are kept in the durable inbox, and are
 * handled one at a time per issue, in the forge's order; the state machine
 * decides, this class carries out. A turn never holds a queue slot: starting a
 * bottle returns once its agent runs, and its end (and everything it says on
 * the way: PRs, done, a lost sidecar) comes back as work on its issue's queue.
 */
export class Orchestrator {
  readonly #o: OrchestratorOptions;
  readonly #forgeFor: (owner: string, repo: string) => Forge;
  readonly #bottles = new Map<string, Bottle>();
  readonly #monitors = new Map<string, TurnMonitor>();
  readonly #fired = new Map<string, { reason: WatchdogReason; detail: string }>();
  readonly #checkinSaved = new Map<string, number>();
  readonly capacity: Capacity;
  /** Bottles kept warm between turns. */
  readonly #warm: WarmBottles;
  readonly queue: SerialQueue<Work>;
  /** The latest notices (newest last, at most 100). */
  readonly notices: Notice[] = [];
  /** Notices given in this process (the ledger keeps them across restarts). */
  readonly #said = new Set<string>();
  #watchdogTimer: NodeJS.Timeout | undefined;
  /** Retries waiting to be queued again (cleared by `close`; the inbox keeps their events). */
  readonly #timers = new Set<NodeJS.Timeout>();
  #closed = false;
  readonly #fleet: Fleet;
  /** Inbox events on this process's queues (or waiting to be retried), by id. */
  readonly #queued = new Set<number>();
  #fleetTimers: NodeJS.Timeout[] = [];
  /** Each bottle's last row write, so the next waits for it. */
  readonly #saves = new Map<string, Promise<void>>();

  constructor(options: OrchestratorOptions) {
    this.#o = options;
    this.#forgeFor =
      options.forgeFor ??
      ((owner, repo) => options.forge.site.forgeFor({ owner, repo, token: options.token }));
    this.capacity = new Capacity(options.capacity);
    this.#warm = new WarmBottles({
      capacity: this.capacity,
      runner: options.runner,
      log: (e) => this.#log(e),
      freed: () => this.#freed(),
      retryMs: (options.retryMs ?? RETRY_MS)[2] ?? 60_000,
    });
    this.queue = new SerialQueue<Work>(
      options.concurrency ?? 64,
      (key, work) => this.#handle(key, work),
      (key, work, err) =>
        this.#log({ msg: 'work failed', key, work: work.type, error: errorMessage(err) }),
      (a, b) => occurredAt(a).localeCompare(occurredAt(b)),
    );
    this.#fleet = new Fleet(new IssueLeases(options.fleet ?? soloFleet()), {
      store: options.store,
      branches: options.forge.kind,
      inbox: options.inbox,
      runner: options.runner,
      env: options.env,
      capacity: this.capacity,
      bottles: this.#bottles,
      starting: this.#starting,
      queued: this.#queued,
      push: (key, work) => this.#push(key, work),
      pending: (key) => this.queue.pending(key),
      watch: (slug, startedAt) => this.watch(slug, startedAt),
      watching: (slug) => this.#monitors.has(slug),
      stopWatching: (slug) => {
        this.#monitors.get(slug)?.close();
        this.#monitors.delete(slug);
      },
      closed: () => this.#closed,
      log: (e) => this.#log(e),
    });
  }

  /** This orchestrator's name among those sharing the database, and the issues it holds. */
  get fleet(): { holder: string; held: string[] } {
    return { holder: this.#fleet.leases.holder, held: this.#fleet.leases.held };
  }

  /** Running turns, for the watchdog, the dashboard and tests. */
  get running(): string[] {
    return [...this.#monitors.keys()];
  }

  /**
   * Accept a forge event (from the webhook or the sweep): durably, under its
   * semantic key, with the issue it belongs to when that is known (an indexed
   * lookup). `false` for a change accepted before. Resolves once the event is
   * durable (it may then be acknowledged); its handling goes on after.
   */
  async accept(event: ForgeEvent): Promise<boolean> {
    // The issue from the event itself when it says (its number, a bottle branch);
    // a PR's owner is found by the store in the same write as the event.
    let pr: { owner: string; repo: string; pr: number } | undefined;
    const issue = await issueOf(
      event,
      (owner, repo, n) => {
        pr = { owner, repo, pr: n };
        return undefined;
      },
      this.#o.forge.kind,
    );
    const stored = await this.#o.inbox.accept(event.key, {
      issue: issue === undefined ? null : issueKey(event.owner, event.repo, issue),
      occurredAt: event.occurredAt,
      payload: event,
      deliveryId: event.deliveryId,
      kind: event.kind,
      ...(issue === undefined && pr
        ? {
            byPr: {
              ...pr,
              // A PR a person opened is never a bottle's; the bot's may be one a running
              // agent is opening now.
              unclaimed:
                'pr' in event && event.pr.author !== this.#o.botLogin ? 'done' : 'parkIfRunning',
            },
          }
        : {}),
    });
    if (!stored) return false;
    if (stored.issue && stored.state !== 'done')
      this.#push(stored.issue, { type: 'event', inbox: stored, event, attempt: 0 });
    else if (stored.state === 'done')
      this.#log({ msg: 'event not about a bottle', key: event.key, kind: event.kind });
    else this.#log({ msg: 'event parked until a bottle claims its PR', key: event.key });
    return true;
  }

  /**
   * Whether a bottle may still claim the PR of `event`: one runs in its
   * repository (its agent may be opening that PR now), and the PR, when the
   * event says who opened it, was opened by the bot.
   */
  async #couldClaim(event: ForgeEvent): Promise<boolean> {
    if ('pr' in event && event.pr.author !== this.#o.botLogin) return false;
    // Any orchestrator's bottle: the store, not this process's memory, says which run.
    return (await this.#o.store.all()).some(
      (r) => r.owner === event.owner && r.repo === event.repo && r.status === 'running',
    );
  }

  /** Parked events no bottle can claim any more (none runs in their repository) are done. */
  async #expireParked(): Promise<void> {
    for (const e of await this.#o.inbox.openEvents()) {
      if (e.state !== 'parked') continue;
      const event = e.payload as ForgeEvent;
      if (await this.#couldClaim(event)) continue;
      if (await this.#fleet.routeIfClaimed(e)) continue;
      await this.#o.inbox.settle(e.id, 'done');
      this.#log({ msg: 'event not about a bottle', key: e.key, kind: event.kind });
    }
  }

  /** Resolves when nothing is queued or being decided (running turns do not count). */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  /** Resolves when nothing is queued, decided or running: every turn ended and was recorded. */
  async settled(pollMs = 50): Promise<void> {
    for (;;) {
      await this.queue.idle();
      if (this.#monitors.size === 0 && this.#starting.size === 0 && this.queue.size === 0) return;
      await new Promise((r) => setTimeout(r, pollMs));
    }
  }

  /** What the orchestrator holds of an issue's bottle (`owner/repo#n`), for status and tests. */
  bottle(key: string): { slug: string; agent: string; state: LifecycleState } | undefined {
    const b = this.#bottles.get(key);
    return b && { slug: b.slug, agent: b.agent, state: structuredClone(b.state) };
  }

  /**
   * Take over every issue with open inbox events that nobody else holds (after
   * a restart). Returns how many events went back on queues.
   */
  replayInbox(): Promise<number> {
    return this.#fleet.replayInbox();
  }

  /** Claim `key`'s lease and take the issue over (see `Fleet.adoptIssue`). */
  adoptIssue(key: string): Promise<AdoptReport | undefined> {
    return this.#fleet.adoptIssue(key);
  }

  /** Claim and take over bottles and events nobody holds. */
  takeOver(): Promise<void> {
    return this.#fleet.takeOver();
  }

  /** Start watching a running turn (after a launch, a resume, or a restart). */
  watch(slug: string, startedAt = Date.now()): void {
    if (this.#monitors.has(slug) || this.#closed) return;
    const monitor = new TurnMonitor({
      runner: this.#o.runner,
      slug,
      startedAt,
      pollMs: this.#o.pollMs ?? 500,
      checkMs: this.#o.gateCheckMs ?? 3000,
      report: (report) => this.#report(report),
      log: (e) => this.#log(e),
    }).start();
    this.#monitors.set(slug, monitor);
  }

  /**
   * Start the background work (stop it with `stopWatchdog`): the watchdog;
   * renewing this process's leases and taking over bottles and events nobody
   * holds; reading the shared inbox for events other orchestrators accepted.
   */
  startWatchdog(): void {
    const every = (ms: number, what: string, fn: () => Promise<void>) => {
      let busy = false;
      const t = setInterval(() => {
        if (busy) return;
        busy = true;
        fn()
          .catch((err) => this.#log({ msg: `${what} failed`, error: errorMessage(err) }))
          .finally(() => {
            busy = false;
          });
      }, ms);
      t.unref();
      return t;
    };
    this.#watchdogTimer ??= every(this.#o.watchdogIntervalMs ?? 60_000, 'watchdog', () =>
      this.checkWatchdog(),
    );
    if (this.#fleetTimers.length === 0)
      this.#fleetTimers = [
        // Renewal alone on its timer: nothing slow in front of it.
        every(this.#fleet.leases.heartbeatMs, 'lease renewal', () => this.#fleet.heartbeat()),
        every(this.#fleet.leases.heartbeatMs, 'take-over scan', () => this.takeOver()),
        every(this.#fleet.leases.pollMs, 'inbox poll', () => this.#fleet.pollInbox()),
      ];
  }

  stopWatchdog(): void {
    if (this.#watchdogTimer) clearInterval(this.#watchdogTimer);
    this.#watchdogTimer = undefined;
    for (const t of this.#fleetTimers) clearInterval(t);
    this.#fleetTimers = [];
  }

  /** Stop watching turns and stop the watchdog (the bottles keep running; `coolAll` first for warm ones). */
  close(): void {
    this.#closed = true;
    this.stopWatchdog();
    this.#warm.close();
    for (const m of this.#monitors.values()) m.close();
    this.#monitors.clear();
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
  }

  /** Run `fn` after `ms`, unless the orchestrator is closed by then. */
  #later(ms: number, fn: () => void | Promise<void>): void {
    const t = setTimeout(() => {
      this.#timers.delete(t);
      if (this.#closed) return;
      Promise.resolve()
        .then(fn)
        .catch((err) => this.#log({ msg: 'retry failed', error: errorMessage(err) }));
    }, ms);
    t.unref();
    this.#timers.add(t);
  }

  /**
   * One watchdog pass: a running agent that has not checked in for the
   * timeout is stopped; its turn then ends the ordinary way (frozen, with
   * provenance), and the record says why. A row that says running with no
   * turn watched (a wait lost) is watched again.
   */
  async checkWatchdog(now = Date.now()): Promise<void> {
    // Bottles whose holder is gone (or, after a restart, that nobody holds yet) first.
    await this.takeOver();
    const timeout = this.#o.watchdogTimeoutMs ?? 30 * 60_000;
    for (const [slug, m] of this.#monitors) {
      if (m.ended || this.#fired.has(slug)) continue;
      // Waiting for the operator is not silence: the clock starts again once decided.
      // At most `superviseMaxPauseMs` in a turn: chained requests do not keep an agent alive for ever.
      if (this.#o.supervise?.awaitingOperator(slug)) {
        const since = this.#pauseSince.get(slug) ?? now;
        this.#pauseSince.set(slug, since);
        if (now - since <= (this.#o.superviseMaxPauseMs ?? 24 * 3600_000)) {
          this.#paused.set(slug, now);
          continue;
        }
      }
      const silent = now - Math.max(m.lastCheckin, this.#paused.get(slug) ?? 0);
      if (silent > timeout)
        await this.#fire(slug, {
          reason: 'silence',
          detail: `no check-in for ${Math.round(silent / 1000)} s (limit ${Math.round(timeout / 1000)} s)`,
        });
    }
    // Work that waited long for room to run: the person who asked is told, once.
    const patience = this.#o.capacityNoticeMs ?? 10 * 60_000;
    for (const w of this.capacity.waiting())
      if (now - Date.parse(w.since) > patience)
        await this.#feedback(
          w.issue,
          `bot-bottle has had no room to run this agent for ${Math.round((now - Date.parse(w.since)) / 60_000)} min (its bottles use all of the memory budget); it starts as soon as one ends.`,
          `capacity:${w.since}`,
        );
    const counted = new Set(this.capacity.warm().map((w) => w.slug));
    for (const row of await this.#o.store.all()) {
      // Issues being taken over are `#takeIssue`'s to look at.
      if (!this.#fleet.leases.holds(keyOf(row)) || this.#fleet.taking(keyOf(row))) continue;
      if (
        row.status === 'running' &&
        !this.#monitors.has(row.slug) &&
        !this.#starting.has(row.slug)
      )
        this.watch(row.slug, Date.parse(row.lastCheckinAt) || now);
      // A warm bottle nobody counts (its turn's end was never taken in) is not left
      // paused past its window.
      if (row.status === 'frozen' && this.#o.runner.cool && !counted.has(row.slug)) {
        const warm = this.#o.runner.storage.meta(row.slug)?.warm;
        if (warm && Date.parse(warm.until) <= now && !this.#warm.cooling(row.slug))
          await this.#o.runner.cool(row.slug).catch((err) =>
            this.#log({
              msg: 'could not cool a warm bottle',
              slug: row.slug,
              error: errorMessage(err),
            }),
          );
      }
    }
    await this.#expireParked();
  }

  readonly #starting = new Set<string>();
  /** When a bottle last waited for the operator (its watchdog was paused until then). */
  readonly #paused = new Map<string, number>();
  /** When a bottle's turn first waited for the operator. */
  readonly #pauseSince = new Map<string, number>();

  /** Stop an agent for `fired`; its turn ends through its monitor and is recorded with the reason. */
  async #fire(slug: string, fired: { reason: WatchdogReason; detail: string }): Promise<void> {
    if (this.#fired.has(slug)) return;
    this.#fired.set(slug, fired);
    const storage = this.#o.runner.storage;
    try {
      writeTurnLog(storage, slug, { ...readTurnLog(storage, slug), fired });
    } catch {
      // the bottle's directory is gone: the record says vanished
    }
    this.#log({ msg: 'watchdog fired', slug, ...fired });
    await this.#o.runner
      .stopAgent(slug, 2000)
      .catch((err) =>
        this.#log({ msg: 'could not stop the agent', slug, error: errorMessage(err) }),
      );
  }

  #report(report: TurnReport): void {
    const bottle = this.#bySlug(report.slug);
    if (!bottle) return;
    if (report.kind !== 'checked_in')
      this.#log({ msg: 'turn report', slug: report.slug, report: report.kind });
    const key = issueKey(bottle.owner, bottle.repo, bottle.issue);
    if (report.kind === 'gate_lost') {
      void this.#fire(report.slug, { reason: 'sidecar_death', detail: report.detail });
      return;
    }
    if (report.kind === 'checked_in') {
      // The row says when the sidecar last checked in (at most every 30 s: a write, not a decision).
      const last = this.#checkinSaved.get(report.slug) ?? 0;
      if (Date.now() - last >= 30_000 && bottle.state.status === 'running') {
        this.#checkinSaved.set(report.slug, Date.now());
        this.#save(bottle, () => (bottle.state.status === 'running' ? 'running' : undefined)).catch(
          (err) =>
            this.#log({
              msg: 'could not save a check-in',
              slug: report.slug,
              error: errorMessage(err),
            }),
        );
      }
      return;
    }
    this.#push(key, { type: 'turn', report, occurredAt: '' });
  }

  #bySlug(slug: string): Bottle | undefined {
    for (const b of this.#bottles.values()) if (b.slug === slug) return b;
    return undefined;
  }

  #push(key: string, work: Work): void {
    if (this.#closed) return;
    if (work.type === 'event') this.#queued.add(work.inbox.id);
    this.queue.push(key, work);
  }

  #log(entry: Record<string, unknown>): void {
    this.#o.log?.(entry);
  }

  // ---- deciding ----

  async #handle(key: string, work: Work): Promise<void> {
    if (work.type === 'retry_waiting') return this.#retryWaiting();
    // Only the holder of an issue's lease works on it; this process claims it when free.
    if (!this.#fleet.leases.holds(key)) {
      let adopted: AdoptReport | undefined;
      try {
        adopted = await this.adoptIssue(key);
      } catch (err) {
        // The store or the engine did not answer: the work is tried again later.
        this.#log({ msg: 'could not take the issue', key, error: errorMessage(err) });
        if (work.type === 'event') this.#retry(key, work);
        return;
      }
      if (!adopted) {
        if (work.type === 'event') this.#queued.delete(work.inbox.id);
        return;
      }
      if (work.type === 'event') {
        // Handled meanwhile by whoever held the issue before: nothing left to do.
        if (!adopted.open.has(work.inbox.id)) {
          this.#queued.delete(work.inbox.id);
          return;
        }
        // Older events came with the issue: this one waits for its turn among them.
        if (adopted.replayed > 0) {
          this.queue.push(key, work);
          return;
        }
      }
    }
    if (work.type === 'claim') return this.#release(key);
    if (work.type === 'turn') {
      await this.#turnWork(key, work.report);
      return this.#release(key);
    }
    const { inbox, event } = work;
    // Shared work: older events of this issue another orchestrator accepted, not read
    // here yet, go first (what happened earlier on the forge is handled earlier).
    if (this.#o.fleet && (await this.#takeOlder(key, inbox))) {
      this.queue.push(key, work);
      return;
    }
    const began = new Date().toISOString();
    let settled: 'done' | 'deferred';
    try {
      settled = await this.#eventWork(key, inbox, event);
      await this.#o.inbox.settle(inbox.id, settled);
    } catch (err) {
      this.#retry(key, work, err);
      return;
    }
    this.#queued.delete(inbox.id);
    // One line per event handled: which, of which issue, when it happened, what became of it.
    this.#log({
      msg: 'event handled',
      key,
      event: inbox.key,
      kind: event.kind,
      occurredAt: event.occurredAt,
      began,
      settled,
    });
    await this.#release(key);
  }

  /**
   * Queue here the open events of `key` that happened before `than` and are not
   * queued yet (accepted by another orchestrator since this one last read the
   * inbox). Whether there were any.
   */
  async #takeOlder(key: string, than: InboxEvent): Promise<boolean> {
    let open: InboxEvent[];
    try {
      open = this.#o.inbox.openEventsOf
        ? await this.#o.inbox.openEventsOf(key)
        : await this.#o.inbox.openEvents();
    } catch {
      return false; // the next poll brings them; this one is not held back
    }
    const older = open.filter(
      (e) =>
        e.issue === key &&
        e.state === 'pending' &&
        e.id !== than.id &&
        !this.#queued.has(e.id) &&
        (e.occurredAt < than.occurredAt || (e.occurredAt === than.occurredAt && e.id < than.id)),
    );
    for (const e of older) this.#push(key, eventWork(e));
    return older.length > 0;
  }

  /**
   * An event not handled (it stays open in the inbox): tried again after the
   * next wait, or given up after the last. Its issue's lease is kept meanwhile.
   */
  #retry(key: string, work: Extract<Work, { type: 'event' }>, err?: unknown): void {
    const wait = (this.#o.retryMs ?? RETRY_MS)[work.attempt];
    this.#log({
      msg: wait === undefined ? 'event failed; giving up' : 'event failed; will retry',
      key,
      event: work.inbox.key,
      kind: work.event.kind,
      ...(err === undefined ? {} : { error: errorMessage(err) }),
      ...(wait === undefined ? {} : { retryInMs: wait }),
    });
    if (wait === undefined) {
      this.#queued.delete(work.inbox.id);
      void Promise.resolve(this.#o.inbox.settle(work.inbox.id, 'done')).catch((e) =>
        this.#log({ msg: 'could not give an event up', key, error: errorMessage(e) }),
      );
      return;
    }
    this.#fleet.retrying.set(key, (this.#fleet.retrying.get(key) ?? 0) + 1);
    this.#later(wait, () => {
      const left = (this.#fleet.retrying.get(key) ?? 1) - 1;
      if (left > 0) this.#fleet.retrying.set(key, left);
      else this.#fleet.retrying.delete(key);
      this.#push(key, { ...work, attempt: work.attempt + 1 });
    });
  }

  /** `#maybeRelease`, whose failure only costs the lease's time. */
  async #release(key: string): Promise<void> {
    await this.#fleet
      .maybeRelease(key)
      .catch((err) =>
        this.#log({ msg: 'could not give a lease up', key, error: errorMessage(err) }),
      );
  }

  /** Handle one forge event; returns its inbox state after (done, or deferred when it waits). */
  async #eventWork(
    key: string,
    inbox: InboxEvent,
    event: ForgeEvent,
  ): Promise<'done' | 'deferred'> {
    const { owner, repo, issue } = parseIssueKey(key);
    let input: LifecycleInput;
    let agent: string | undefined;
    let ack: Parameters<Forge['react']>[0] | undefined;
    let bottles: string[] | undefined;
    const known = this.#bottles.get(key);
    if (known && known.state.status === 'frozen') {
      // Destroyed by hand (`bb destroy`, `bb gc`) while frozen: the row says so.
      const row = await this.#o.store.get(owner, repo, issue);
      if (row?.status === 'destroyed' && row.slug === known.slug)
        known.state = { ...known.state, status: 'destroyed', pending: [] };
    }
    const live = known?.state.status === 'running' || known?.state.status === 'frozen';
    switch (event.kind) {
      case 'issue_targeting_changed': {
        // The payload is a hint: the issue as the forge has it now decides.
        const forge = this.#forgeFor(owner, repo);
        const fresh = await forge.readIssue(issue);
        const labels = fresh.labels.map((l) => l.name);
        const assignees = fresh.assignees.map((a) => a.login);
        const t = await evaluateTargeting(
          { labels, assignees },
          {
            org: this.#o.org ?? 'bot-bottle',
            isMember: (org, user) => forge.isOrgMember(org, user).catch(() => undefined),
          },
        );
        this.#log({ msg: 'targeting', key, targeted: t.targeted, reasons: t.reasons });
        if (fresh.state !== 'open') return 'done';
        if (!t.targeted) {
          // Taken back from the bot: its agent label is gone, or the bot is no longer assigned.
          const why = !labels.some((l) => l.startsWith(AGENT_LABEL_PREFIX))
            ? `the ${AGENT_LABEL_PREFIX}<agent> label was removed from #${issue}`
            : !assignees.includes(this.#o.botLogin)
              ? `${this.#o.botLogin} was unassigned from #${issue}`
              : undefined;
          if (why && live) {
            input = { type: 'untargeted', why };
            break;
          }
          // Meant for the bot (it is assigned and a bot-bottle label is there) but unusable.
          if (
            !live &&
            assignees.includes(this.#o.botLogin) &&
            labels.some((l) => l.startsWith(AGENT_LABEL_PREFIX))
          )
            await this.#feedback(
              key,
              `bot-bottle cannot start an agent for this issue: ${t.reasons.filter((r) => !r.startsWith('assignee ')).join('; ') || t.reasons.join('; ')}.`,
            );
          return 'done';
        }
        input = { type: 'targeted' };
        agent = t.agent;
        bottles = t.bottle ? [t.bottle] : undefined;
        break;
      }
      case 'issue_closed': {
        if (!live) return 'done';
        const forge = this.#forgeFor(owner, repo);
        let openPr = false;
        for (const pr of known!.state.prs) if (await forge.isPrOpen(pr)) openPr = true;
        input = { type: 'issue_closed', openPr };
        break;
      }
      case 'pr_opened':
        input = { type: 'pr_opened', pr: event.pr.number, author: event.pr.author };
        if (known && event.pr.headSha) this.#seenHead(known, event.pr.number, event.pr.headSha);
        break;
      case 'comment_created': {
        const pr = event.on === 'pr' ? event.number : undefined;
        // Only a live bottle's own issue and PRs are heard; nothing is asked of the forge otherwise.
        if (!live || event.comment.author === this.#o.botLogin) return 'done';
        if (pr !== undefined && !known!.state.prs.includes(pr)) return 'done';
        const forge = this.#forgeFor(owner, repo);
        const may = await mayDrive(forge, this.#policy(), event.comment.author, event.comment.body);
        if (!may.ok) {
          this.#log({ msg: 'comment ignored', key, author: event.comment.author, why: may.why });
          return 'done';
        }
        input = {
          type: 'message',
          pr,
          author: event.comment.author,
          prompt: commentPrompt({
            author: event.comment.author,
            issue,
            pr,
            url: event.comment.url,
            body: event.comment.body,
          }),
        };
        ack = { comment: event.comment.id };
        break;
      }
      case 'review_submitted': {
        const pr = event.pr.number;
        if (!live || !known!.state.prs.includes(pr) || event.author === this.#o.botLogin)
          return 'done';
        const forge = this.#forgeFor(owner, repo);
        const may = await mayDrive(forge, this.#policy(), event.author, event.body);
        if (!may.ok) {
          this.#log({ msg: 'review ignored', key, author: event.author, why: may.why });
          return 'done';
        }
        const { prompt, reviewId } = await reviewPrompt(forge, {
          author: event.author,
          pr,
          state: event.state,
          body: event.body,
          url: event.url,
        });
        input = { type: 'message', pr, author: event.author, prompt };
        if (reviewId !== undefined) ack = { review: reviewId, pr };
        break;
      }
      case 'pr_synchronized': {
        const pr = event.pr.number;
        if (!known) return 'done';
        const before = known.heads?.[pr];
        this.#seenHead(known, pr, event.pr.headSha);
        const author = event.sender.login;
        if (!live || !known.state.prs.includes(pr) || author === this.#o.botLogin) return 'done';
        if (this.#o.resumeOnHumanPush) {
          const may = await mayDrive(
            this.#forgeFor(owner, repo),
            this.#policy(),
            author,
            undefined,
          );
          if (!may.ok) {
            this.#log({ msg: 'push ignored', key, author, why: may.why });
            return 'done';
          }
        }
        input = {
          type: 'pr_synchronized',
          pr,
          author,
          prompt: pushPrompt({
            author,
            pr,
            before,
            after: event.pr.headSha,
            branch: event.pr.head,
          }),
        };
        break;
      }
      case 'pr_closed':
        input = { type: 'pr_closed', pr: event.pr.number, merged: event.merged };
        break;
      default:
        this.#log({ msg: 'event not acted on', key, kind: event.kind });
        return 'done';
    }
    const bottle = this.#bottleFor(key, agent);
    if (bottles) bottle.bottles = bottles;
    const next = transition(bottle.state, input, this.#ctx());
    // Work that needs room to run waits for it, in order, without holding the issue.
    if (next.actions.some((a) => a.type === 'launch' || a.type === 'resume')) {
      const bytes = this.#o.runner.memoryOf(agent ?? bottle.agent, bottle.bottles);
      // Warm bottles give way to work that needs their room (no await when none has to:
      // from the check to taking the room nothing else may run).
      const room = this.#warm.makeRoom(bytes, bottle.slug);
      if (room) await room;
      if (!this.capacity.fits(bytes, bottle.slug)) {
        this.capacity.wait(key, bytes);
        this.#log({ msg: 'waiting for capacity', key, usedBytes: this.capacity.used });
        return 'deferred';
      }
    }
    const pendingBefore = bottle.state.pending.length;
    bottle.state = next.state;
    const queued = bottle.state.pending.length > pendingBefore;
    if (queued) bottle.deferred.push(inbox.id);
    // Heard: the person sees it before the agent answers.
    if (ack && (queued || next.actions.some((a) => a.type === 'resume')))
      this.#acknowledge(key, ack);
    await this.#carryOut(key, bottle, next.actions, agent);
    return queued ? 'deferred' : 'done';
  }

  #bottleFor(key: string, agent?: string): Bottle {
    const known = this.#bottles.get(key);
    if (known) return known;
    const { owner, repo, issue } = parseIssueKey(key);
    const b: Bottle = {
      slug: '',
      owner,
      repo,
      issue,
      agent: agent ?? '',
      state: INITIAL,
      deferred: [],
    };
    this.#bottles.set(key, b);
    return b;
  }

  #policy() {
    return {
      org: this.#o.org ?? 'bot-bottle',
      botLogin: this.#o.botLogin,
      ...(this.#o.mentionOnly ? { mentionOnly: true } : {}),
    };
  }

  #seenHead(bottle: Bottle, pr: number, sha: string): void {
    if (sha) bottle.heads = { ...bottle.heads, [pr]: sha };
  }

  /** React 👀 to what woke the agent; a forge that cannot is only logged. */
  #acknowledge(key: string, target: Parameters<Forge['react']>[0]): void {
    if (this.#o.acknowledge === false) return;
    const { owner, repo } = parseIssueKey(key);
    void this.#forgeFor(owner, repo)
      .react(target, 'eyes')
      .catch((err) =>
        this.#log({ msg: 'could not acknowledge', key, target, error: errorMessage(err) }),
      );
  }

  /**
   * Tell the person who asked, once per issue and message, why nothing runs: a
   * short comment on the issue (never provenance), and a notice for status and
   * the dashboard. Once is kept in the delivery ledger (`bb:feedback:…` events,
   * which `bb orchestrate status` lists), so a restart or a replayed webhook
   * does not say it again.
   */
  async #feedback(key: string, message: string, once = message): Promise<void> {
    const id = createHash('sha256').update(once).digest('hex').slice(0, 16);
    if (this.#said.has(`${key}:${id}`)) return;
    this.#said.add(`${key}:${id}`);
    this.notices.push({ key, at: new Date().toISOString(), message });
    if (this.notices.length > 100) this.notices.splice(0, this.notices.length - 100);
    this.#log({ msg: 'cannot launch', key, why: message });
    if (this.#o.feedback === false) return;
    const first = await this.#o.inbox.accept(`bb:feedback:${key}:${id}`, {
      issue: null,
      occurredAt: new Date().toISOString(),
      payload: { issue: key, message },
      deliveryId: undefined,
      kind: 'feedback',
      done: true,
    });
    if (!first) return;
    const { owner, repo, issue } = parseIssueKey(key);
    // Literal text, never markup: the message quotes labels, names and errors (I8).
    await this.#forgeFor(owner, repo)
      .postComment(issue, forMarkdown(message))
      .catch((err) => this.#log({ msg: 'could not post feedback', key, error: errorMessage(err) }));
  }

  #ctx() {
    return {
      botLogin: this.#o.botLogin,
      doneGraceMs: this.#o.doneGraceMs ?? 10_000,
      ...(this.#o.resumeOnHumanPush ? { resumeOnHumanPush: true } : {}),
    };
  }

  /** What a running turn reported: its PRs, its done signal, its end. */
  async #turnWork(key: string, report: TurnReport): Promise<void> {
    const bottle = this.#bottles.get(key);
    if (!bottle || bottle.slug !== report.slug) return;
    let input: LifecycleInput;
    if (report.kind === 'pr_learned') {
      input = { type: 'pr_opened', pr: report.pr, author: this.#o.botLogin };
    } else if (report.kind === 'done_signalled') {
      input = { type: 'done_signalled' };
    } else if (report.kind === 'turn_ended') {
      return this.#turnEnded(key, bottle, report.outcome);
    } else return;
    const next = transition(bottle.state, input, this.#ctx());
    bottle.state = next.state;
    await this.#carryOut(key, bottle, next.actions);
    if (report.kind === 'pr_learned') {
      await this.#save(bottle, bottle.state.status === 'running' ? 'running' : 'frozen');
      await this.#routeParked(bottle, report.pr);
    }
  }

  /** Events parked for a PR nobody had claimed: now routed to the bottle that did. */
  async #routeParked(bottle: Bottle, pr: number): Promise<void> {
    const key = issueKey(bottle.owner, bottle.repo, bottle.issue);
    for (const e of await this.#o.inbox.openEvents()) {
      if (e.state !== 'parked') continue;
      const event = e.payload as ForgeEvent;
      if (event.owner !== bottle.owner || event.repo !== bottle.repo || prOf(event) !== pr)
        continue;
      await this.#o.inbox.settle(e.id, 'pending', key);
      this.#push(key, {
        type: 'event',
        inbox: { ...e, issue: key, state: 'pending' },
        event,
        attempt: 0,
      });
    }
  }

  /** A turn ended: record it (evidence first), then decide what comes next. */
  async #turnEnded(key: string, bottle: Bottle, outcome: TurnOutcome): Promise<void> {
    if (bottle.state.status !== 'running') {
      this.#log({ msg: 'turn end for a bottle not running: ignored', key, slug: bottle.slug });
      // Nobody will resume it from here: it is not left paused.
      if (outcome.warm) await this.#o.runner.cool?.(bottle.slug).catch(() => {});
      return;
    }
    // The monitor stays registered until the row says frozen: the watchdog must not
    // take the bottle for one whose wait was lost and watch (and record) it again.
    this.#monitors.get(bottle.slug)?.close();
    this.#checkinSaved.delete(bottle.slug);
    this.capacity.release(bottle.slug);
    // Kept warm: what it holds counts until it is cooled, at the latest when its window ends.
    if (outcome.warm) this.#warm.hold(bottle.slug, outcome.warm);
    let fired =
      this.#fired.get(bottle.slug) ?? readTurnLog(this.#o.runner.storage, bottle.slug).fired;
    this.#fired.delete(bottle.slug);
    this.#paused.delete(bottle.slug);
    this.#pauseSince.delete(bottle.slug);
    // A request the turn left waiting has no one to answer: the next turn asks again if it must.
    this.#o.supervise?.cancelAll?.(bottle.slug, 'the turn it was asked in ended before a decision');
    // The operator approved a new image: this turn ends, the next starts in it at once.
    const rebuilt = this.#o.runner.takeResumeRequest?.(bottle.slug);
    if (rebuilt && !fired && !bottle.state.closing)
      fired = {
        reason: 'stopped',
        detail: `the operator approved a rebuilt image (${rebuilt.requestId}); the agent continues in it`,
      };
    if (outcome.vanished && !fired)
      fired = {
        reason: 'vanished',
        detail: 'the agent container was gone when its turn was looked for',
      };
    if (!fired && bottle.state.closing)
      fired = { reason: 'closed', detail: 'its PR or issue was closed while the agent worked' };
    let done: Awaited<ReturnType<typeof recordTurn>>['done'] = null;
    try {
      const recorded = await recordTurn({
        slug: bottle.slug,
        agent: bottle.agent,
        env: this.#o.env,
        storage: this.#o.runner.storage,
        forge: { owner: bottle.owner, repo: bottle.repo, issue: bottle.issue },
        prs: bottle.state.prs,
        outcome,
        startedAt:
          this.#o.runner.storage.meta(bottle.slug)?.turns.at(-1)?.startedAt ??
          new Date().toISOString(),
        fired,
        provenance: this.#o.provenance,
        ...(this.#o.supervise?.auditTurn
          ? { supervise: (slug: string, at: string) => this.#o.supervise!.auditTurn!(slug, at) }
          : {}),
      });
      done = recorded.done;
      for (const pr of recorded.prs)
        if (!bottle.state.prs.includes(pr)) {
          bottle.state = { ...bottle.state, prs: [...bottle.state.prs, pr] };
          await this.#routeParked(bottle, pr);
        }
    } catch (err) {
      this.#log({
        msg: 'could not record the turn',
        key,
        slug: bottle.slug,
        error: errorMessage(err),
      });
    }
    try {
      await this.#save(bottle, 'frozen');
    } finally {
      this.#monitors.delete(bottle.slug);
    }
    this.#log({
      msg: 'turn ended',
      key,
      slug: bottle.slug,
      exitCode: outcome.exitCode,
      done: done?.status ?? null,
      ...(fired ? { fired: fired.reason } : {}),
    });
    if (rebuilt && !bottle.state.closing) {
      this.#log({
        msg: 'resuming in the rebuilt image',
        key,
        slug: bottle.slug,
        request: rebuilt.requestId,
      });
      bottle.state = { ...bottle.state, status: 'frozen' };
      await this.#resume(key, bottle, rebuilt.prompt);
      return;
    }
    const input: LifecycleInput =
      fired && fired.reason !== 'closed'
        ? { type: 'watchdog', reason: fired.reason }
        : done || bottle.state.closing
          ? { type: 'agent_stopped' }
          : { type: 'watchdog', reason: 'exit_without_signal' };
    const next = transition(bottle.state, input, this.#ctx());
    bottle.state = next.state;
    await this.#carryOut(key, bottle, next.actions);
    this.#freed();
  }

  /** Room came free: whoever waited for it tries again. */
  #freed(): void {
    if (this.capacity.waiting().length > 0)
      this.#push('_capacity', { type: 'retry_waiting', occurredAt: '' });
  }

  /** Put every event that waited for capacity back on its issue's queue. */
  async #retryWaiting(): Promise<void> {
    const waiting = new Set(this.capacity.takeWaiting());
    if (waiting.size === 0) return;
    for (const e of await this.#o.inbox.openEvents()) {
      if (e.state !== 'deferred' || !e.issue || !waiting.has(e.issue)) continue;
      const bottle = this.#bottles.get(e.issue);
      // Comments deferred behind a running turn are not capacity waits.
      if (bottle?.deferred.includes(e.id)) continue;
      this.#push(e.issue, eventWork(e));
    }
  }

  // ---- carrying out ----

  async #carryOut(
    key: string,
    bottle: Bottle,
    actions: LifecycleAction[],
    agent?: string,
  ): Promise<void> {
    for (const action of actions) {
      switch (action.type) {
        case 'log':
          this.#log({ msg: action.message, key });
          break;
        case 'launch':
          await this.#launch(key, bottle, agent ?? bottle.agent);
          break;
        case 'resume':
          await this.#resume(key, bottle, action.prompt);
          break;
        case 'stop':
          if (action.reason === 'closed')
            await this.#fire(bottle.slug, {
              reason: 'closed',
              detail: action.why ?? 'its PR was closed while the agent worked',
            });
          else if (action.reason === 'untargeted')
            await this.#fire(bottle.slug, {
              reason: 'stopped',
              detail: action.why ?? 'the issue was taken back from the bot',
            });
          else this.#monitors.get(bottle.slug)?.stopAfter(action.graceMs);
          break;
        case 'freeze':
          // The turn already ended and was recorded (#turnEnded): nothing more.
          break;
        case 'destroy':
          this.#o.supervise?.cancelAll?.(bottle.slug, 'the bottle was destroyed');
          this.#warm.forget(bottle.slug);
          await this.#warm.cooling(bottle.slug);
          await this.#o.runner.destroy(bottle.slug);
          await this.#save(bottle, 'destroyed');
          this.#log({ msg: 'bottle destroyed', key, slug: bottle.slug });
          break;
      }
    }
  }

  async #launch(key: string, bottle: Bottle, agent: string): Promise<void> {
    const { owner, repo, issue } = parseIssueKey(key);
    bottle.agent = agent;
    bottle.slug = `${agent}-${randomBytes(4).toString('hex').slice(0, 5)}`;
    const bytes = this.#o.runner.memoryOf(agent, bottle.bottles);
    this.capacity.tryRun(bottle.slug, bytes);
    const forge = this.#forgeFor(owner, repo);
    try {
      const read = await forge.readIssue(issue);
      const prompt = `${FORGE_PROMPT_OVERLAY}\nYour issue is #${issue} of ${owner}/${repo}: ${read.title}\n\n${read.body}`;
      // The row first: a crash from here on leaves something reconcile can see. Before
      // the row, a mark in this BB_HOME: whoever takes the issue over knows the bottle
      // was launched here even if the crash came before its directory was made.
      this.#starting.add(bottle.slug);
      const mark = this.#fleet.launchMark(bottle.slug);
      mkdirSync(dirname(mark), { recursive: true, mode: 0o700 });
      writeFileSync(mark, `${key}\n`);
      await this.#save(bottle, 'running');
      await this.capacity.starting(() =>
        this.#o.runner.startLaunch({
          agent,
          slug: bottle.slug,
          prompt,
          bottles: bottle.bottles,
          forge: {
            kind: this.#o.forge.kind.name,
            site: this.#o.forge.site.env(),
            token: this.#o.token,
            owner,
            repo,
            issue,
            cloneUrl: this.#o.forge.site.cloneUrl({ owner, repo }),
          },
          // The forge's API says where the default branch is: a mirror already there
          // needs no fetch.
          defaultHead: () => forge.defaultBranchHead(),
        }),
      );
    } catch (err) {
      // Nothing ran: nothing to keep. The issue is launchable again; the event retries.
      this.capacity.release(bottle.slug);
      this.#freed();
      bottle.state = INITIAL;
      // Its own row only, while the issue is still this process's.
      if (
        (await this.#o.store.get(owner, repo, issue))?.slug === bottle.slug &&
        (await this.#fleet.stillHolds(key))
      )
        await this.#o.store.delete(owner, repo, issue);
      this.#log({ msg: 'launch failed', key, slug: bottle.slug, error: errorMessage(err) });
      if (isBbError(err, 'INVALID_INPUT') || isBbError(err, 'NOT_FOUND')) {
        // Nothing a retry fixes (an unknown agent or bottle): the person who asked is told.
        await this.#feedback(
          key,
          `bot-bottle could not start agent ${agent}${bottle.bottles ? ` in bottle ${bottle.bottles.join(', ')}` : ''}: ${errorMessage(err)}`,
        );
        return;
      }
      throw err;
    } finally {
      this.#starting.delete(bottle.slug);
      rmSync(this.#fleet.launchMark(bottle.slug), { force: true });
    }
    this.#log({ msg: 'bottle launched', key, slug: bottle.slug, agent });
    this.watch(bottle.slug);
  }

  /**
   * A fresh session in place of one that ran its agent's turn limit: the
   * prompt carries a summary of the work so far, and the turn's record says so.
   */
  async #rotation(key: string, bottle: Bottle, prompt: string): Promise<string | undefined> {
    const limits =
      this.#o.sessionLimits?.(bottle.agent) ?? this.#o.runner.sessionLimits?.(bottle.agent) ?? {};
    const meta = this.#o.runner.storage.meta(bottle.slug);
    if (!meta || (!limits.maxTurns && !limits.maxTokens)) return undefined;
    const inSession = meta.turns.length - (meta.sessionStart ?? 1) + 1;
    const read = meta.turns.at(-1)?.tokens;
    const reason =
      limits.maxTurns && inSession >= limits.maxTurns
        ? `the session ran ${inSession} turns (limit ${limits.maxTurns})`
        : limits.maxTokens && read !== undefined && read >= limits.maxTokens
          ? `its last turn read ${read} input tokens (limit ${limits.maxTokens})`
          : undefined;
    if (!reason) return undefined;
    const { owner, repo, issue } = parseIssueKey(key);
    const summaries = (await this.#o.provenance.store.chain(bottle.slug))
      .slice(-inSession)
      .map((r) => r.record.done?.summary ?? `(turn ${r.record.turn} ended without a summary)`);
    const rotated = await rotationPrompt(this.#forgeFor(owner, repo), {
      overlay: FORGE_PROMPT_OVERLAY,
      issue,
      pr: bottle.state.prs.at(-1),
      previousTurns: inSession,
      summaries,
      now: prompt,
    });
    const storage = this.#o.runner.storage;
    writeTurnLog(storage, bottle.slug, {
      ...readTurnLog(storage, bottle.slug),
      rotated: {
        reason,
        previousTurns: inSession,
        summary: rotated.summary,
      },
    });
    this.#log({ msg: 'session rotated', key, slug: bottle.slug, previousTurns: inSession });
    return rotated.prompt;
  }

  async #resume(key: string, bottle: Bottle, prompt: string): Promise<void> {
    // Its warm containers are this turn's now, unless they are being cooled (then it waits).
    this.#warm.forget(bottle.slug);
    const cooling = this.#warm.cooling(bottle.slug);
    if (cooling) await cooling;
    this.capacity.tryRun(bottle.slug, this.#o.runner.memoryOf(bottle.agent));
    // Until its turn has started, the watchdog must not take the row for a turn it lost.
    this.#starting.add(bottle.slug);
    await this.#save(bottle, 'running');
    const pr = bottle.state.prs.at(-1);
    try {
      const fresh = await this.#rotation(key, bottle, prompt);
      await this.capacity.starting(() =>
        this.#o.runner.startResume({
          slug: bottle.slug,
          prompt: fresh ?? prompt,
          pr,
          ...(fresh ? { freshSession: true } : {}),
          // The PR's head as the forge's API says: no git process, no request of its git server.
          ...(pr !== undefined
            ? {
                prHead: async () =>
                  (await this.#forgeFor(bottle.owner, bottle.repo).readPr(pr)).head.sha,
              }
            : {}),
        }),
      );
    } catch (err) {
      // The bottle is frozen again, workspace and session intact; the comments wait
      // (they are still open in the inbox) and are tried again.
      this.capacity.release(bottle.slug);
      this.#freed();
      bottle.state = { ...bottle.state, status: 'frozen', pending: [] };
      await this.#save(bottle, 'frozen');
      this.#starting.delete(bottle.slug);
      this.#log({ msg: 'resume failed', key, slug: bottle.slug, error: errorMessage(err) });
      const waiting = new Set(bottle.deferred.splice(0));
      if (waiting.size > 0)
        this.#later((this.#o.retryMs ?? RETRY_MS)[0] ?? 2000, async () => {
          for (const e of await this.#o.inbox.openEvents())
            if (waiting.has(e.id)) this.#push(key, eventWork(e, 1));
        });
      throw err;
    }
    // The comments that waited for this turn are delivered.
    for (const id of bottle.deferred.splice(0)) await this.#o.inbox.settle(id, 'done');
    this.#log({ msg: 'bottle resumed', key, slug: bottle.slug });
    this.watch(bottle.slug);
    this.#starting.delete(bottle.slug);
  }

  /**
   * Write the bottle's row. Writes of one bottle happen one after another, in
   * the order asked (a check-in's write never lands after the turn's end); a
   * function as `status` is asked when the write's turn comes (`undefined`:
   * nothing to write any more).
   */
  #save(
    bottle: Bottle,
    status: ForgeState['status'] | (() => ForgeState['status'] | undefined),
  ): Promise<void> {
    const before = this.#saves.get(bottle.slug) ?? Promise.resolve();
    const write = before
      .catch(() => {})
      .then(async () => {
        const now = typeof status === 'function' ? status() : status;
        if (now === undefined) return;
        // Only the issue's holder writes its row: a process that stalled past its lease
        // (and may have lost it) asks again first, and writes nothing if it did.
        const key = issueKey(bottle.owner, bottle.repo, bottle.issue);
        if (!(await this.#fleet.stillHolds(key))) {
          this.#log({
            msg: 'row not written: another orchestrator holds the issue',
            key,
            slug: bottle.slug,
            status: now,
          });
          return;
        }
        return this.#writeRow(bottle, now);
      });
    this.#saves.set(bottle.slug, write);
    const forget = () => {
      if (this.#saves.get(bottle.slug) === write) this.#saves.delete(bottle.slug);
    };
    write.then(forget, forget);
    return write;
  }

  #writeRow(bottle: Bottle, status: ForgeState['status']): Promise<void> {
    return saveBottleRow(
      this.#o.store,
      {
        owner: bottle.owner,
        repo: bottle.repo,
        issue: bottle.issue,
        slug: bottle.slug,
        agent: bottle.agent,
        backendName: this.#o.runner.backendName,
        botLogin: this.#o.botLogin,
        prNumber: bottle.state.prs.at(-1) ?? null,
        status,
        lastCheckinAt: readTurnLog(this.#o.runner.storage, bottle.slug).lastCheckinAt,
      },
      this.#o.runner.storage,
    );
  }

  /**
   * Give up every issue lease this process holds (a clean shutdown, after
   * `coolAll`): the other orchestrators take its issues over at once instead of
   * after the leases run out.
   */
  async releaseLeases(): Promise<void> {
    await this.#fleet.leases.releaseAll();
  }

  /** Claim a task only one orchestrator does at a time (`false`: another does it now). */
  claimTask(name: string, ttlMs: number): Promise<boolean> {
    return this.#fleet.leases.claimTask(name, ttlMs);
  }

  releaseTask(name: string): Promise<void> {
    return this.#fleet.leases.releaseTask(name);
  }

  /** Cool every warm bottle (a shutdown: nothing stays paused with nobody to resume it). */
  coolAll(): Promise<void> {
    return this.#warm.coolAll();
  }
}

function occurredAt(w: Work): string {
  return w.type === 'event' ? w.event.occurredAt : w.occurredAt;
}
