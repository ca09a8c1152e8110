import { errorMessage } from '@bb/errors';
import type { Forge, ForgeEvent } from '@bb/forge';
import type { PoolRoom } from '@bb/headless';
import { sessionRows } from './bottle-row';
import { SpendLedger } from './budget';
import { Capacity } from './capacity';
import { type Core, type Notice, type OrchestratorOptions, RETRY_MS, threadDesk } from './core';
import { handleEvent } from './events';
import { Feedback } from './feedback';
import { type AdoptReport, Fleet } from './fleet';
import { acceptEvent, adoptFor, retryEvent, retryWaiting, takeOlder } from './intake';
import { IssueLeases, soloFleet } from './issue-leases';
import type { LifecycleContext, LifecycleState } from './machine';
import { SerialQueue } from './serial-queue';
import { Sessions } from './session';
import { announceRequests } from './supervise-thread';
import { turnWork } from './turn-end';
import { TurnMonitor } from './turn-monitor';
import { TurnLogs } from './turn-spend';
import { WarmBottles } from './warm-bottles';
import { checkWatchdog, everyInterval, fire, onReport } from './watchdog';
import type { Work } from './work';

export type { Notice, OrchestratorOptions, SupervisePlane } from './core';
export type { AdoptReport } from './fleet';

/**
 * Composes the packages into the forge-driven loop. Events come in through
 * `accept` (webhook and sweep alike), are kept in the durable inbox, and are
 * handled one at a time per issue, in the forge's order. This class only
 * dispatches: each issue's bottle is a `BottleSession`; an event is decided by
 * `events.ts` (facts from the forge, then the pure `decide` and the machine),
 * carried out by `actions.ts`; a turn's reports and end are `turn-end.ts`'s;
 * the watchdog is `watchdog.ts`; intake and parked events are `intake.ts`'s.
 * A turn never holds a queue slot: starting a bottle returns once its agent
 * runs, and everything it says on the way comes back as work on its queue.
 */
export class Orchestrator {
  readonly #o: OrchestratorOptions;
  readonly #core: Core;
  readonly #sessions: Sessions;
  readonly #feedback: Feedback;
  readonly capacity: Capacity;
  /** Bottles kept warm between turns. */
  readonly #warm: WarmBottles;
  readonly queue: SerialQueue<Work>;
  #threadTimer: NodeJS.Timeout | undefined;
  #watchdogTimer: NodeJS.Timeout | undefined;
  /** Retries waiting to be queued again (cleared by `close`; the inbox keeps their events). */
  readonly #timers = new Set<NodeJS.Timeout>();
  #closed = false;
  readonly #fleet: Fleet;
  /** Inbox events on this process's queues (or waiting to be retried), by id. */
  readonly #queued = new Set<number>();
  #fleetTimers: NodeJS.Timeout[] = [];

  constructor(options: OrchestratorOptions) {
    this.#o = options;
    const forgeFor =
      options.forgeFor ??
      ((owner: string, repo: string): Forge =>
        options.forge.site.forgeFor({ owner, repo, token: options.token }));
    const log = (e: Record<string, unknown>) => options.log?.(e);
    this.capacity = new Capacity(options.capacity);
    const retryMs = options.retryMs ?? RETRY_MS;
    this.#warm = new WarmBottles({
      capacity: this.capacity,
      runner: options.runner,
      log,
      freed: () => this.#freed(),
      retryMs: retryMs[2] ?? 60_000,
    });
    this.queue = new SerialQueue<Work>(
      options.concurrency ?? 64,
      (key, work) => this.#handle(key, work),
      (key, work, err) =>
        log({ msg: 'work failed', key, work: work.type, error: errorMessage(err) }),
      (a, b) => occurredAt(a).localeCompare(occurredAt(b)),
    );
    this.#feedback = new Feedback({
      inbox: options.inbox,
      forgeFor,
      ...(options.feedback === false ? { comment: false } : {}),
      ...(options.acknowledge === false ? { acknowledge: false } : {}),
      ...(options.turnOutcomes === false ? { turnOutcomes: false } : {}),
      retryMs,
      later: (ms, fn) => this.#later(ms, fn),
      mayWrite: (key) => this.#fleet.stillHolds(key),
      log,
    });
    // The one writer of a bottle's row: only the issue's holder writes it.
    this.#sessions = new Sessions(sessionRows(options, (key) => this.#fleet.stillHolds(key), log));
    this.#fleet = new Fleet(new IssueLeases(options.fleet ?? soloFleet()), {
      store: options.store,
      branches: options.forge.kind,
      inbox: options.inbox,
      runner: options.runner,
      env: options.env,
      capacity: this.capacity,
      sessions: this.#sessions,
      queued: this.#queued,
      accepting: this.#accepting,
      seen: (key, id) => this.#queued.has(id) || this.#doneWith(key, id),
      push: (key, work) => this.#push(key, work),
      pending: (key) => this.queue.pending(key),
      watch: (slug, startedAt) => this.watch(slug, startedAt),
      closed: () => this.#closed,
      log,
    });
    const ctx: LifecycleContext = {
      botLogin: options.botLogin,
      doneGraceMs: options.doneGraceMs ?? 10_000,
      ...(options.resumeOnHumanPush ? { resumeOnHumanPush: true } : {}),
    };
    this.#core = {
      o: options,
      forgeFor,
      sessions: this.#sessions,
      capacity: this.capacity,
      warm: this.#warm,
      fleet: this.#fleet,
      spend: new SpendLedger(options.provenance.store, options.provenance.prices),
      budgetWaiting: new Set(),
      turnLogs: new TurnLogs(),
      queued: this.#queued,
      accepting: this.#accepting,
      retryMs,
      ctx,
      closed: () => this.#closed,
      push: (key, work) => this.#push(key, work),
      later: (ms, fn) => this.#later(ms, fn),
      watch: (slug, startedAt) => this.watch(slug, startedAt),
      freed: () => this.#freed(),
      feedback: (key, message, once) => this.#feedback.say(key, message, once),
      turnOutcome: (key, on, message, once) => this.#feedback.turnOutcome(key, on, message, once),
      acknowledge: (key, target) => this.#feedback.acknowledge(key, target),
      fire: (s, fired) => fire(this.#core, s, fired),
      log,
    };
  }

  /** The latest notices (newest last, at most 100). */
  get notices(): Notice[] {
    return this.#feedback.notices;
  }

  /** This orchestrator's name among those sharing the database, and the issues it holds. */
  get fleet(): { holder: string; held: string[] } {
    return { holder: this.#fleet.leases.holder, held: this.#fleet.leases.held };
  }

  /** Running turns, for the watchdog, the dashboard and tests. */
  get running(): string[] {
    return this.#sessions.watched().map((s) => s.slug);
  }

  /**
   * Accept a forge event (from the webhook or the sweep): durably, under its
   * semantic key, with the issue it belongs to when that is known (an indexed
   * lookup). `false` for a change accepted before. Resolves once the event is
   * durable (it may then be acknowledged); its handling goes on after.
   */
  accept(event: ForgeEvent): Promise<boolean> {
    return acceptEvent(this.#core, event);
  }

  /** Resolves when nothing is queued or being decided (running turns do not count). */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  /** Resolves when nothing is queued, decided or running: every turn ended and was recorded. */
  async settled(pollMs = 50): Promise<void> {
    for (;;) {
      await this.queue.idle();
      if (
        this.#sessions.watched().length === 0 &&
        !this.#sessions.anyStarting() &&
        this.queue.size === 0
      )
        return;
      await new Promise((r) => setTimeout(r, pollMs));
    }
  }

  /** What the orchestrator holds of an issue's bottle (`owner/repo#n`), for status and tests. */
  bottle(key: string): { slug: string; agent: string; state: LifecycleState } | undefined {
    const s = this.#sessions.get(key);
    return s && { slug: s.slug, agent: s.agent, state: structuredClone(s.state) };
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
    const s = this.#sessions.bySlug(slug);
    if (!s || this.#closed) return;
    // A monitor whose turn ended and was not taken in is no watch: it is replaced.
    if (s.monitor && !s.monitor.ended) return;
    s.monitor?.close();
    s.monitor = new TurnMonitor({
      runner: this.#o.runner,
      slug,
      startedAt,
      pollMs: this.#o.pollMs ?? 500,
      checkMs: this.#o.gateCheckMs ?? 3000,
      report: (report) => onReport(this.#core, report),
      log: (e) => this.#o.log?.(e),
    }).start();
  }

  /**
   * Start the background work (stop it with `stopWatchdog`): the watchdog;
   * renewing this process's leases and taking over bottles and events nobody
   * holds; reading the shared inbox for events other orchestrators accepted.
   */
  startWatchdog(): void {
    const every = (ms: number, what: string, fn: () => Promise<void>) =>
      everyInterval(ms, fn, (err) =>
        this.#o.log?.({ msg: `${what} failed`, error: errorMessage(err) }),
      );
    this.#watchdogTimer ??= every(this.#o.watchdogIntervalMs ?? 60_000, 'watchdog', () =>
      this.checkWatchdog(),
    );
    const desk = threadDesk(this.#o.supervise);
    if (desk)
      this.#threadTimer ??= every(
        this.#o.superviseThreadMs ?? 2000,
        'posting supervise requests',
        () => announceRequests(this.#core, desk),
      );
    // Several orchestrators on one database server: the holder of an issue hears of each
    // event another accepted as it commits; the inbox's poll is then only a safety net.
    const watch = this.#o.fleet ? this.#o.inbox.watchPending?.bind(this.#o.inbox) : undefined;
    if (watch && !this.#unwatchInbox)
      this.#unwatchInbox = watch((issue) =>
        this.#fleet
          .heard(issue)
          .catch((err) => this.#o.log?.({ msg: 'inbox notice failed', error: errorMessage(err) })),
      );
    const pollMs = watch ? Math.max(this.#fleet.leases.pollMs, 5000) : this.#fleet.leases.pollMs;
    if (this.#fleetTimers.length === 0)
      this.#fleetTimers = [
        // Renewal alone on its timer: nothing slow in front of it.
        every(this.#fleet.leases.heartbeatMs, 'lease renewal', () => this.#fleet.heartbeat()),
        every(this.#fleet.leases.heartbeatMs, 'take-over scan', () => this.takeOver()),
        every(pollMs, 'inbox poll', () => this.#fleet.pollInbox()),
      ];
  }

  #unwatchInbox: (() => void) | undefined;
  readonly #accepting = new Set<string>();

  stopWatchdog(): void {
    if (this.#watchdogTimer) clearInterval(this.#watchdogTimer);
    this.#watchdogTimer = undefined;
    if (this.#threadTimer) clearInterval(this.#threadTimer);
    this.#threadTimer = undefined;
    for (const t of this.#fleetTimers) clearInterval(t);
    this.#fleetTimers = [];
    this.#unwatchInbox?.();
    this.#unwatchInbox = undefined;
  }

  /** Stop watching turns and stop the watchdog (the bottles keep running; `coolAll` first for warm ones). */
  close(): void {
    this.#closed = true;
    this.stopWatchdog();
    this.#warm.close();
    for (const s of this.#sessions.watched()) s.unwatch();
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
  }

  /** One watchdog pass (see `watchdog.ts`). */
  checkWatchdog(now = Date.now()): Promise<void> {
    return checkWatchdog(this.#core, now);
  }

  /** Run `fn` after `ms`, unless the orchestrator is closed by then. */
  #later(ms: number, fn: () => void | Promise<void>): void {
    const t = setTimeout(() => {
      this.#timers.delete(t);
      if (this.#closed) return;
      Promise.resolve()
        .then(fn)
        .catch((err) => this.#o.log?.({ msg: 'retry failed', error: errorMessage(err) }));
    }, ms);
    t.unref();
    this.#timers.add(t);
  }

  #push(key: string, work: Work): void {
    if (this.#closed) {
      if (work.type === 'claim') work.done?.();
      return;
    }
    if (work.type === 'event') {
      if (this.#doneWith(key, work.inbox.id)) return;
      this.#queued.add(work.inbox.id);
    }
    this.queue.push(key, work);
  }

  /**
   * Whether this process is done with event `id` of `key` though a listing of open
   * events read before may still show it: settled here as done (it must not be
   * handled a second time), or waiting in its session for the running turn (settled
   * deferred: its comment is in the turn's queue already, never twice).
   */
  #doneWith(key: string, id: number): boolean {
    return this.#settled.has(id) || !!this.#sessions.get(key)?.deferred.includes(id);
  }

  /**
   * Events this process settled as done, the most recent few thousand: what a stale
   * listing of the inbox still shows as open is not queued again.
   */
  readonly #settled = new Set<number>();
  #rememberSettled(id: number): void {
    this.#settled.add(id);
    if (this.#settled.size > 10_000) {
      const oldest = this.#settled.values().next().value;
      if (oldest !== undefined) this.#settled.delete(oldest);
    }
  }

  /** Room came free: whoever waited for it tries again; the warm pool may refill. */
  #freed(): void {
    if (this.capacity.waiting().length > 0)
      this.#push('_capacity', { type: 'retry_waiting', occurredAt: '' });
    else if (this.#poolRoom) this.#o.runner.pool?.fill(this.#poolRoom);
  }

  #poolRoom: PoolRoom | undefined;

  /**
   * Keep the runner's warm pool filled (after `reconcile`, which removes what an
   * earlier process left of its pool): a pooled bottle is made only while the
   * memory budget has room for it, nobody waits for room and no launch is being
   * started; its memory counts in the budget until a launch takes it, and it is
   * removed when work needs the room.
   */
  startPool(): void {
    const pool = this.#o.runner.pool;
    if (!pool || this.#closed) return;
    const c = this.capacity;
    // The room a bottle being made will take, kept for it from the moment it is given.
    const making = '\0pool-making';
    this.#poolRoom = {
      room: (bytes) => {
        const free =
          c.waiting().length === 0 &&
          c.startingNow === 0 &&
          !this.#warm.coolingNow &&
          c.used + bytes <= c.memoryBudget;
        if (free) c.holdPooled(making, bytes);
        return free;
      },
      made: (slug, bytes) => {
        c.releasePooled(making);
        c.holdPooled(slug, bytes);
      },
      unmade: () => {
        c.releasePooled(making);
      },
      gone: (slug) => {
        c.releasePooled(slug);
      },
    };
    pool.fill(this.#poolRoom);
  }

  // ---- dispatching ----

  async #handle(key: string, work: Work): Promise<void> {
    try {
      await this.#dispatch(key, work);
    } finally {
      if (work.type === 'claim') work.done?.();
    }
  }

  async #dispatch(key: string, work: Work): Promise<void> {
    if (work.type === 'retry_waiting') return retryWaiting(this.#core);
    // Only the holder of an issue's lease works on it; this process claims it when free.
    if (!this.#fleet.leases.holds(key)) {
      // Another holds it, as a claim said a moment ago: it hears of the event from the
      // inbox (at once where the inbox tells, else at its next poll); no claim is tried.
      if (work.type === 'event' && this.#fleet.leases.heldElsewhere(key)) {
        this.#queued.delete(work.inbox.id);
        return;
      }
      if (!(await adoptFor(this.#core, key, work, this.queue))) return;
    }
    if (work.type === 'claim') return this.#release(key);
    if (work.type === 'turn') {
      await turnWork(this.#core, key, work.report);
      return this.#release(key);
    }
    const { inbox, event } = work;
    // Shared work: older events of this issue another orchestrator accepted, not read
    // here yet, go first (what happened earlier on the forge is handled earlier).
    if (this.#o.fleet && !work.listed && (await takeOlder(this.#core, key, inbox))) {
      this.queue.push(key, work);
      return;
    }
    // An older event of this issue was queued while this one was being taken up (the
    // inbox's poll, another orchestrator's hand-over): it goes first.
    if (this.queue.hasEarlier(key, work)) {
      this.queue.push(key, work);
      return;
    }
    const began = new Date().toISOString();
    let settled: 'done' | 'deferred';
    try {
      settled = await handleEvent(this.#core, key, inbox, event);
      await this.#o.inbox.settle(inbox.id, settled);
    } catch (err) {
      retryEvent(this.#core, key, work, err);
      return;
    }
    if (settled === 'done') this.#rememberSettled(inbox.id);
    this.#queued.delete(inbox.id);
    // One line per event handled: which, of which issue, when it happened, what became of it.
    this.#o.log?.({
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

  /** `Fleet.maybeRelease`, whose failure only costs the lease's time. */
  async #release(key: string): Promise<void> {
    await this.#fleet
      .maybeRelease(key)
      .catch((err) =>
        this.#o.log?.({ msg: 'could not give a lease up', key, error: errorMessage(err) }),
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
