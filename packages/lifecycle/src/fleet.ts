import { existsSync, rmSync } from 'node:fs';
import { BbError, errorMessage } from '@bb/errors';
import type { ForgeEvent, ForgeKind } from '@bb/forge';
import type { BottleRunner } from '@bb/headless';
import { homeLayout, LABEL } from '@bb/names';
import {
  type EventInbox,
  type ForgeStateStore,
  type InboxEvent,
  openEventsOfIssue,
} from '@bb/state';
import type { Capacity } from './capacity';
import { GateHolds } from './gate-holds';
import { ISSUE_LEASE, type IssueLeases } from './issue-leases';
import { issueKey, issueOf, parseIssueKey } from './routing';
import type { Sessions } from './session';
import { eventWork, keyOf, type Work } from './work';

/** How long a take-over pass waits for the claims it queued. */
const CLAIM_WAIT_MS = 10_000;

/** What taking an issue over found (see `Orchestrator.adoptIssue`). */
export interface AdoptReport {
  /** Open events put back on the issue's queue. */
  replayed: number;
  /** The issue's open events (by inbox id) when it was taken. */
  open: Set<number>;
  /** Its bottle is another machine's: left alone (the issue is not taken). */
  foreign?: boolean;
  /** Its bottle's turn was in progress: watched again. */
  reattached?: string;
  /** Its bottle never got as far as its agent: removed, the issue launchable again. */
  neverStarted?: string;
  /** Its bottle was left warm: cooled. */
  cooled?: string;
}

/** What the fleet's work needs of the orchestrator it runs in. */
export interface FleetHost {
  store: ForgeStateStore;
  /** The forge kind's bottle branches (which issue a PR's branch belongs to). */
  branches: Pick<ForgeKind, 'issueOfBranch'>;
  inbox: EventInbox;
  runner: BottleRunner;
  env: Record<string, string | undefined>;
  capacity: Capacity;
  /** What this process holds of each issue's bottle. */
  sessions: Sessions;
  /** Inbox events on this process's queues (or waiting for a retry), by id. */
  queued: Set<number>;
  /** Keys of the events this process is accepting now (their inbox write is in flight). */
  accepting: Set<string>;
  /**
   * Whether event `id` of issue `key` needs nothing more from this process: queued
   * here, settled here lately, or waiting in its session for the running turn.
   */
  seen(key: string, id: number): boolean;
  push(key: string, work: Work): void;
  /** Items of `key` queued or running. */
  pending(key: string): number;
  watch(slug: string, startedAt: number): void;
  closed(): boolean;
  log(entry: Record<string, unknown>): void;
}

/**
 * An orchestrator's share of the work when several share one database: which
 * issues it holds, taking issues over (a bottle left by an orchestrator that
 * stopped, events nobody handles), reading events others accepted, and letting
 * an issue go. One orchestrator alone runs the same code with leases in memory.
 */
export class Fleet {
  readonly leases: IssueLeases;
  readonly #h: FleetHost;
  /** Issues being taken over right now. */
  readonly #taking = new Set<string>();
  /** Issues whose bottle is another machine's, and since when (see `#takeIssue`). */
  readonly #foreign = new Map<string, number>();
  /** Event retries waiting on a timer, by issue: its lease is kept for them. */
  readonly retrying = new Map<string, number>();

  readonly #holds: GateHolds;

  constructor(leases: IssueLeases, host: FleetHost) {
    this.leases = leases;
    this.#h = host;
    this.#holds = new GateHolds({
      leases,
      runner: host.runner,
      sessions: host.sessions,
      log: (e) => host.log(e),
    });
  }

  /** Whether `key` is being taken over now (the watchdog leaves it to that). */
  taking(key: string): boolean {
    return this.#taking.has(key);
  }

  /**
   * Take over every issue with open inbox events that nobody else holds (after
   * a restart): parked events that can be routed are routed first. Returns how
   * many events went back on queues.
   */
  async replayInbox(): Promise<number> {
    const issues = new Set<string>();
    for (const e of await this.#h.inbox.openEvents()) {
      let issue = e.issue;
      if (!issue) {
        const event = e.payload as ForgeEvent;
        const found = await issueOf(
          event,
          async (o, r, pr) => (await this.#h.store.findByPr(o, r, pr))?.issueNumber,
          this.#h.branches,
        );
        if (found === undefined) continue;
        issue = issueKey(event.owner, event.repo, found);
        await this.#h.inbox.settle(e.id, 'pending', issue);
      }
      issues.add(issue);
    }
    let n = 0;
    for (const issue of issues) n += (await this.adoptIssue(issue))?.replayed ?? 0;
    return n;
  }

  /**
   * Claim `key`'s lease and take the issue over as the store has it: its
   * bottle's row; a turn in progress watched again (or, if its agent never
   * started, the bottle removed and the issue launchable again); a bottle left
   * warm cooled; its open events back on its queue, in order. `undefined` when
   * another orchestrator holds it. Holding it already, only events not queued
   * yet are queued.
   */
  async adoptIssue(key: string): Promise<AdoptReport | undefined> {
    if (this.#h.closed() || this.isForeign(key)) return undefined;
    const report: AdoptReport = { replayed: 0, open: new Set() };
    if (!this.leases.holds(key)) {
      // Held before and only run out here (a stall): this process's state of it stands
      // if nobody took it meanwhile.
      let knew = this.leases.knows(key);
      const claim = await this.leases.claim(key);
      if (!claim.held) {
        if (knew) this.letGo(key);
        return undefined;
      }
      if (knew && !claim.continued) {
        // Its lease changed hands while this process stalled, and came back: what this
        // process knew of the issue is stale. It is taken over afresh, from the store.
        this.#dropLocal(key);
        knew = false;
        this.#h.log({ msg: 'lease came back after another held it: issue read again', key });
      }
      if (claim.takenFrom)
        this.#h.log({
          msg: 'lease taken over',
          key,
          from: claim.takenFrom.holder,
          expiredAt: claim.takenFrom.expiredAt,
        });
      if (!knew) {
        let took: Omit<AdoptReport, 'replayed' | 'open'>;
        this.#taking.add(key);
        try {
          took = await this.#takeIssue(key, claim.takenFrom?.holder);
        } catch (err) {
          // Half taken is not taken: the next claim starts again from the store.
          this.#h.sessions.delete(key);
          await this.leases.release(key).catch(() => {});
          throw err;
        } finally {
          this.#taking.delete(key);
        }
        if (took.foreign) {
          await this.leases.release(key).catch(() => {});
          return undefined;
        }
        Object.assign(report, took);
      }
    }
    for (const e of await openEventsOfIssue(this.#h.inbox, key)) {
      if (e.state === 'parked') continue;
      report.open.add(e.id);
      // Queued, or a comment waiting in its session for the running turn: not taken again.
      if (this.#h.seen(key, e.id)) continue;
      this.#h.push(key, eventWork(e));
      report.replayed++;
    }
    return report;
  }

  /** Issues whose bottle lives on another machine (or another BB_HOME), left alone for a minute. */
  isForeign(key: string): boolean {
    const since = this.#foreign.get(key);
    if (since === undefined) return false;
    if (Date.now() - since < 60_000) return true;
    this.#foreign.delete(key);
    return false;
  }

  /** Where a launch marks its slug before the row names it (see `#launch`). */
  launchMark(slug: string): string {
    return homeLayout(this.#h.env).launchMark(slug);
  }

  /** An issue just claimed: its bottle as the store and the backend have it. */
  async #takeIssue(
    key: string,
    from: string | undefined,
  ): Promise<Omit<AdoptReport, 'replayed' | 'open'>> {
    const out: Omit<AdoptReport, 'replayed' | 'open'> = {};
    const { owner, repo, issue } = parseIssueKey(key);
    const row = await this.#h.store.get(owner, repo, issue);
    if (!row || row.status === 'destroyed') {
      this.#h.sessions.delete(key);
      return out;
    }
    this.#h.sessions.fromRow(row);
    const runner = this.#h.runner;
    if (
      runner.cool &&
      (await runner.storage.meta(row.slug))?.warm &&
      !this.#h.capacity.isWarm(row.slug)
    ) {
      // Left warm by an orchestrator that is gone (or this one before a restart).
      try {
        if (await runner.cool(row.slug)) out.cooled = row.slug;
        this.#h.log({ msg: 'warm bottle cooled', slug: row.slug, why: 'nobody held it' });
      } catch (err) {
        this.#h.log({
          msg: 'could not cool a warm bottle',
          slug: row.slug,
          error: errorMessage(err),
        });
      }
    }
    if (row.status !== 'running' || this.#h.sessions.busy(row.slug)) return out;
    const meta = await runner.storage.meta(row.slug);
    if (!meta && !existsSync(this.launchMark(row.slug)) && from && from !== this.leases.holder) {
      // No trace of it here: its orchestrator launched it on another machine (or in
      // another BB_HOME). Not this process's to watch, and never to remove.
      this.#foreign.set(key, Date.now());
      this.#h.log({
        msg: 'bottle not on this machine: left to its own orchestrator',
        key,
        slug: row.slug,
        from,
      });
      return { foreign: true };
    }
    const ours = await runner.ours();
    // A bottle in a shared store whose turn ran on another engine: its containers are
    // not here to ask, its meta says whether its agent got as far as running.
    const here = meta?.engine ? await runner.engine?.() : undefined;
    const elsewhere = here !== undefined && meta?.engine !== here;
    // An agent container made but never started, or one whose program still waits for
    // its workspace (the launch was cut short while it was made), did not run.
    const agentRan =
      !meta?.preparing &&
      (elsewhere ||
        ours.some(
          (c) =>
            c.labels[LABEL.slug] === row.slug &&
            c.labels[LABEL.role] === 'agent' &&
            c.state !== 'created',
        ));
    if (
      !meta ||
      (meta.turns.length === 0 && !agentRan && !(await runner.storage.hasOperations(row.slug)))
    ) {
      // Killed before its agent: nothing happened worth keeping. Launchable again;
      // the event that launched it is still open in the inbox and comes back.
      try {
        await runner.destroy(row.slug);
      } catch (err) {
        this.#h.log({
          msg: 'could not remove a bottle that never started',
          slug: row.slug,
          error: errorMessage(err),
        });
      }
      await this.#h.store.delete(owner, repo, issue);
      rmSync(this.launchMark(row.slug), { force: true });
      this.#h.sessions.delete(key);
      out.neverStarted = row.slug;
      this.#h.log({
        msg: 'bottle never started: removed, issue launchable again',
        key,
        slug: row.slug,
      });
      return out;
    }
    this.#h.capacity.adopt(row.slug, runner.memoryOf(row.agentName));
    this.#h.watch(row.slug, Date.parse(meta.current?.startedAt ?? row.lastCheckinAt) || Date.now());
    out.reattached = row.slug;
    this.#h.log(
      elsewhere
        ? {
            msg: 'bottle ran on another engine: its turn is recorded as lost, it resumes here',
            key,
            slug: row.slug,
            engine: meta.engine,
          }
        : { msg: 'watching a running bottle again', key, slug: row.slug },
    );
    return out;
  }

  /**
   * Live bottles nobody holds (their orchestrator stopped renewing its leases)
   * and open events of issues nobody holds: claimed, and taken over.
   */
  async takeOver(): Promise<void> {
    if (this.#h.closed()) return;
    const want = new Set<string>();
    const u = this.leases.unleased;
    // Where the database can say what nobody holds, only that is read; else every row,
    // every open event and every lease, compared here.
    const others = u ? new Set<string>() : await this.leases.heldByOthers();
    for (const row of u
      ? await u.unleasedRows(ISSUE_LEASE, this.leases.holder)
      : await this.#h.store.all()) {
      const key = keyOf(row);
      if (!this.leases.holds(key) && !others.has(key)) want.add(key);
    }
    for (const e of u
      ? await u.unleasedEvents(ISSUE_LEASE, this.leases.holder)
      : await this.#h.inbox.openEvents()) {
      if (e.state === 'parked') {
        await this.routeIfClaimed(e);
        continue;
      }
      if (e.issue && !this.leases.holds(e.issue) && !others.has(e.issue)) want.add(e.issue);
    }
    // Each claim is waited for (a pass ends with what it took over watched), a while at most.
    const claims: Promise<void>[] = [];
    for (const key of want)
      if (!this.isForeign(key) && this.#h.pending(key) === 0)
        claims.push(
          new Promise<void>((done) => this.#h.push(key, { type: 'claim', occurredAt: '', done })),
        );
    if (claims.length === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(claims),
      new Promise<void>((r) => {
        timer = setTimeout(r, CLAIM_WAIT_MS);
        timer.unref();
      }),
    ]);
    clearTimeout(timer);
  }

  /**
   * Events other orchestrators accepted: queued here for issues this one
   * holds; issues nobody holds are claimed.
   */
  async pollInbox(): Promise<void> {
    const unheld = new Set<string>();
    for (const e of await this.#h.inbox.openEvents()) {
      if (!e.issue || e.state !== 'pending' || this.#h.seen(e.issue, e.id)) continue;
      if (this.leases.holds(e.issue)) this.#h.push(e.issue, eventWork(e));
      else unheld.add(e.issue);
    }
    if (unheld.size === 0) return;
    const others = await this.leases.heldByOthers();
    for (const key of unheld)
      if (!others.has(key) && !this.isForeign(key) && this.#h.pending(key) === 0)
        this.#h.push(key, { type: 'claim', occurredAt: '' });
  }

  /** Issues whose open events are being read for a notice (`heard`), and whether another came meanwhile. */
  readonly #hearing = new Map<string, boolean>();

  /**
   * An event of an issue was accepted, by whichever orchestrator (the inbox's
   * `watchPending`): queued here when this one holds the issue; left to its
   * holder when a claim found one lately; else claimed. `null`: some
   * may have been missed, the whole inbox is read. Notices of one issue that
   * come while its events are read are answered by one more read.
   */
  async heard(event: { id: number; issue: string; key: string } | null): Promise<void> {
    if (this.#h.closed()) return;
    if (event === null) return this.pollInbox();
    const { issue } = event;
    // Accepted here: queued already, or about to be (the notice can come before the answer).
    if (this.#h.seen(issue, event.id) || this.#h.accepting.has(event.key)) return;
    if (!this.leases.holds(issue)) {
      // Its holder hears it. Held by nobody that this process knows of (a lease given up
      // a moment ago, say): claimed, as the poll would, without waiting for it.
      if (
        !this.leases.heldElsewhere(issue) &&
        !this.isForeign(issue) &&
        this.#h.pending(issue) === 0
      )
        this.#h.push(issue, { type: 'claim', occurredAt: '' });
      return;
    }
    if (this.#hearing.has(issue)) {
      this.#hearing.set(issue, true);
      return;
    }
    this.#hearing.set(issue, false);
    try {
      do {
        this.#hearing.set(issue, false);
        for (const e of await openEventsOfIssue(this.#h.inbox, issue))
          if (e.state === 'pending' && !this.#h.seen(issue, e.id))
            this.#h.push(issue, eventWork(e, 0, true));
      } while (this.#hearing.get(issue));
    } finally {
      this.#hearing.delete(issue);
    }
  }

  /**
   * A parked event whose PR a bottle has claimed since (its routing raced the
   * bottle learning the PR, possibly in another orchestrator): routed to it.
   */
  async routeIfClaimed(e: InboxEvent): Promise<boolean> {
    const event = e.payload as ForgeEvent;
    const found = await issueOf(
      event,
      async (o, r, pr) => (await this.#h.store.findByPr(o, r, pr))?.issueNumber,
      this.#h.branches,
    );
    if (found === undefined) return false;
    await this.#h.inbox.settle(e.id, 'pending', issueKey(event.owner, event.repo, found));
    return true;
  }

  /** Renew this process's leases; an issue lost (taken after its lease ran out) is let go. */
  async heartbeat(): Promise<void> {
    for (const key of await this.leases.renew()) {
      this.#h.log({ msg: 'lease lost: another orchestrator holds the issue now', key });
      this.letGo(key);
    }
    this.#holds.renew();
  }

  /** Until when a bottle's gate may write for `key` (`IssueLeases.holdUntil`). */
  holdUntil(key: string): number | undefined {
    return this.leases.holdUntil(key);
  }

  /**
   * Stop working on `key` here (its lease is someone else's). With a shared
   * bottle store, what of its bottle runs on this engine goes (the new holder
   * runs it on its own): no container is left behind on an engine nobody watches.
   */
  letGo(key: string): void {
    const slug = this.#h.sessions.get(key)?.slug;
    this.#dropLocal(key);
    this.leases.forget(key);
    const { runner } = this.#h;
    if (slug && runner.release)
      void runner.release(slug).then(
        (removed) => {
          if (removed)
            this.#h.log({ msg: "a lost issue's containers removed from this engine", key, slug });
        },
        (err) =>
          this.#h.log({
            msg: "could not remove a lost issue's containers",
            key,
            slug,
            error: errorMessage(err),
          }),
      );
  }

  /** Forget what this process holds of `key`'s bottle (its room, its session, its turn's watch). */
  #dropLocal(key: string): void {
    const s = this.#h.sessions.get(key);
    if (s?.slug) this.#h.capacity.release(s.slug);
    this.#h.sessions.delete(key);
  }

  /**
   * Give the issue's lease up when there is nothing of it to hold: no live
   * bottle, nothing queued or starting, no event waiting here.
   */
  async maybeRelease(key: string): Promise<void> {
    const s = this.#h.sessions.get(key);
    if (s && (s.state.status === 'running' || s.state.status === 'frozen')) return;
    if (s && (s.starting || s.monitor)) return;
    if (s && s.deferred.length > 0) return;
    if (this.#h.pending(key) > 1 || this.#h.capacity.isWaiting(key)) return;
    if ((this.retrying.get(key) ?? 0) > 0) return;
    // What this process knew of it stays for status; the next claim reads the store again.
    await this.leases.release(key);
  }

  /**
   * Whether this process may still act on `key`: held by its own reckoning, or,
   * once that ran out, claimed again by the same fencing token. Lost (taken, even
   * if it came back since): the issue is let go here.
   */
  async stillHolds(key: string): Promise<boolean> {
    if (this.leases.holds(key)) return true;
    const knew = this.leases.knows(key);
    if (await this.leases.confirm(key)) return true;
    if (knew) {
      this.#h.log({ msg: 'lease lost: another orchestrator held the issue meanwhile', key });
      this.letGo(key);
    }
    return false;
  }

  /**
   * Throw unless this process may still act on `key` (`stillHolds`): asked
   * just before each thing that cannot be taken back (a forge write, an agent
   * started, a turn recorded), so one that stalled past its lease and lost the
   * issue does none of them after it wakes.
   */
  async fence(key: string): Promise<void> {
    if (!(await this.stillHolds(key)))
      throw new BbError(
        'CONFLICT',
        `issue ${key} is another orchestrator's now (this one stalled past its lease): its work here stops`,
      );
  }
}
