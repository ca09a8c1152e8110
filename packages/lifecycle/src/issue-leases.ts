import { type ClaimResult, type LeaseStore, MemoryLeaseStore, type UnleasedWork } from '@bb/state';

/** How orchestrators sharing one database share the work. */
export interface FleetOptions {
  /** Where leases live: the same database as the inbox (`SqliteLeaseStore`, `PostgresLeaseStore`). */
  leases: LeaseStore;
  /**
   * This orchestrator's name among those sharing the database. Keep it across
   * restarts (its leases are then its own again at once); never give two
   * running orchestrators the same name.
   */
  holder: string;
  /** A lease not renewed for this long is taken over by another orchestrator. @default 15 s */
  ttlMs?: number;
  /** How often leases are renewed and bottles nobody holds are taken over. @default ttlMs / 3 */
  heartbeatMs?: number;
  /**
   * How often the shared inbox is read for events other orchestrators accepted
   * (5 s at least where the inbox tells of them at once: `watchPending`). @default 500 ms
   */
  pollMs?: number;
  /**
   * What nobody holds, read by the database itself, when the leases live in the
   * same database as the bottles and the inbox (the PostgreSQL state store): the
   * take-over scan reads only what it may take. @default every row and every lease, read and compared here
   */
  unleased?: UnleasedWork;
  /**
   * Fence the agents' writes too: a bottle's gate sends forge writes only while
   * this orchestrator renews its hold on the issue (`holdUntil`), so a bottle
   * whose orchestrator stalled past its lease writes nothing through it. Off for
   * one orchestrator alone, whose lease nobody else can take. @default true
   */
  fenceGates?: boolean;
}

/** One orchestrator alone: leases in its own memory, always granted. */
export function soloFleet(): FleetOptions {
  return { leases: new MemoryLeaseStore(), holder: 'solo', fenceGates: false };
}

/** What an issue's lease name puts before its key. */
export const ISSUE_LEASE = 'issue:';

/**
 * This process's side of the issue leases: which issues it holds, claiming,
 * renewing and giving them up. An issue's events are handled, and its bottle's
 * turn watched, only by its lease holder.
 */
export class IssueLeases {
  readonly holder: string;
  readonly ttlMs: number;
  readonly heartbeatMs: number;
  readonly pollMs: number;
  readonly unleased: UnleasedWork | undefined;
  readonly fenceGates: boolean;
  readonly #store: LeaseStore;
  /**
   * Issues held, each with the local time until which this process may act on
   * it: when the claim or renewal that got it was sent, plus the lease's time,
   * less one renewal period (the database's clock and ours may drift apart by
   * that much). Past it the issue counts as not held, renewed or not.
   */
  readonly #held = new Map<string, { until: number; wallUntil: number; token: number }>();
  readonly #now: () => number;
  readonly #wall: () => number;
  /**
   * Issues a claim found another holding, until when (local time) that is
   * trusted without asking again: one renewal period from the claim.
   */
  readonly #others = new Map<string, number>();

  constructor(
    o: FleetOptions,
    now: () => number = () => performance.now(),
    /**
     * The wall clock, held to the same deadline: the monotonic clock does not move
     * while a VM is paused or suspended, the wall clock does (by NTP at the latest).
     */
    wall: () => number = Date.now,
  ) {
    this.#now = now;
    this.#wall = wall;
    this.#store = o.leases;
    this.holder = o.holder;
    this.ttlMs = o.ttlMs ?? 15_000;
    this.heartbeatMs = o.heartbeatMs ?? Math.max(1, Math.floor(this.ttlMs / 3));
    this.pollMs = o.pollMs ?? 500;
    this.unleased = o.unleased;
    this.fenceGates = o.fenceGates ?? true;
  }

  /** Whether this process holds `issue` and its lease has not run out by this process's reckoning. */
  holds(issue: string): boolean {
    const held = this.#held.get(issue);
    return held !== undefined && this.#now() < held.until && this.#wall() < held.wallUntil;
  }

  /**
   * Until when (wall clock) a bottle's gate may write for `issue`: this process's
   * own deadline on its lease, `0` when it does not hold it now, `undefined` when
   * gates are not fenced (`fenceGates`).
   */
  holdUntil(issue: string): number | undefined {
    if (!this.fenceGates) return undefined;
    return this.holds(issue) ? this.#held.get(issue)!.wallUntil : 0;
  }

  get held(): string[] {
    return [...this.#held.keys()].filter((i) => this.holds(i));
  }

  /**
   * Whether a claim of `issue` found another holding it within the last renewal
   * period (so claiming again now would be refused, most likely).
   */
  heldElsewhere(issue: string): boolean {
    const until = this.#others.get(issue);
    if (until === undefined) return false;
    if (this.#now() < until) return true;
    this.#others.delete(issue);
    return false;
  }

  /** Whether this process held `issue` (its lease may have run out since, unrenewed). */
  knows(issue: string): boolean {
    return this.#held.has(issue);
  }

  #deadline(sentAt: number): number {
    return sentAt + this.ttlMs - this.heartbeatMs;
  }

  /**
   * Claim `issue`; `held` says whether it is ours now, `continued` whether this
   * process held it before by the same token (nobody held it in between, so what
   * this process knows of it stands).
   */
  async claim(issue: string): Promise<ClaimResult & { continued: boolean }> {
    const sentAt = this.#now();
    const wallAt = this.#wall();
    const before = this.#held.get(issue)?.token;
    const r = await this.#store.claim(ISSUE_LEASE + issue, this.holder, this.ttlMs);
    if (r.held) {
      this.#held.set(issue, {
        until: this.#deadline(sentAt),
        wallUntil: this.#deadline(wallAt),
        token: r.token,
      });
      this.#others.delete(issue);
    } else {
      this.#held.delete(issue);
      this.#others.set(issue, sentAt + this.heartbeatMs);
      if (this.#others.size > 10_000) this.#others.delete(this.#others.keys().next().value!);
    }
    return { ...r, continued: r.held && before !== undefined && before === r.token };
  }

  /**
   * Whether this process may still act on `issue`: held by its own reckoning, or,
   * once that ran out, claimed again by the same token. A lease that changed hands
   * meanwhile (even if it came back) is lost: it is forgotten here.
   */
  async confirm(issue: string): Promise<boolean> {
    if (this.holds(issue)) return true;
    if (!this.#held.has(issue)) return false;
    const r = await this.claim(issue);
    if (r.continued) return true;
    this.#held.delete(issue);
    // Claimed again but changed hands meanwhile: given back, so whoever takes it (this
    // process included) takes it from the store.
    if (r.held) await this.#store.release(ISSUE_LEASE + issue, this.holder);
    return false;
  }

  /**
   * Renew every lease held; returns the issues lost: taken by another after
   * they ran out, or run out here before a renewal came back.
   */
  async renew(): Promise<string[]> {
    const mine = [...this.#held.keys()];
    if (mine.length === 0) return [];
    const sentAt = this.#now();
    const wallAt = this.#wall();
    const kept = new Set(
      (
        await this.#store.renew(
          this.holder,
          mine.map((i) => ISSUE_LEASE + i),
          this.ttlMs,
        )
      ).map((n) => n.slice(ISSUE_LEASE.length)),
    );
    const lost: string[] = [];
    for (const i of mine) {
      if (!this.#held.has(i)) continue;
      // Kept: nobody took it, even if it ran out meanwhile; this process's state of it stands.
      if (kept.has(i)) {
        const h = this.#held.get(i)!;
        h.until = this.#deadline(sentAt);
        h.wallUntil = this.#deadline(wallAt);
      } else {
        this.#held.delete(i);
        lost.push(i);
      }
    }
    return lost;
  }

  /** Give `issue` up (its events go to whoever claims it next). */
  async release(issue: string): Promise<void> {
    this.#held.delete(issue);
    await this.#store.release(ISSUE_LEASE + issue, this.holder);
  }

  /** Give every issue up (a clean shutdown: the others take them over at once). */
  async releaseAll(): Promise<void> {
    for (const issue of [...this.#held.keys()]) await this.release(issue).catch(() => {});
  }

  /** Forget `issue` without asking the store (its lease is lost already). */
  forget(issue: string): void {
    this.#held.delete(issue);
  }

  /** Issues someone else holds a live lease on. */
  async heldByOthers(): Promise<Set<string>> {
    const out = new Set<string>();
    for (const l of await this.#store.leases())
      if (l.name.startsWith(ISSUE_LEASE) && l.holder !== this.holder)
        out.add(l.name.slice(ISSUE_LEASE.length));
    return out;
  }

  /** A named lease for work one orchestrator does at a time (the sweep, orphan removal). */
  async claimTask(name: string, ttlMs: number): Promise<boolean> {
    return (await this.#store.claim(`task:${name}`, this.holder, ttlMs)).held;
  }

  async releaseTask(name: string): Promise<void> {
    await this.#store.release(`task:${name}`, this.holder);
  }
}
