import { type ClaimResult, type LeaseStore, MemoryLeaseStore } from '@bb/state';

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
  /** How often the shared inbox is read for events other orchestrators accepted. @default 500 ms */
  pollMs?: number;
}

/** One orchestrator alone: leases in its own memory, always granted. */
export function soloFleet(): FleetOptions {
  return { leases: new MemoryLeaseStore(), holder: 'solo' };
}

const NAME = 'issue:';

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
  readonly #store: LeaseStore;
  readonly #held = new Set<string>();

  constructor(o: FleetOptions) {
    this.#store = o.leases;
    this.holder = o.holder;
    this.ttlMs = o.ttlMs ?? 15_000;
    this.heartbeatMs = o.heartbeatMs ?? Math.max(1, Math.floor(this.ttlMs / 3));
    this.pollMs = o.pollMs ?? 500;
  }

  /** Whether this process holds `issue` (as of its last claim or renewal). */
  holds(issue: string): boolean {
    return this.#held.has(issue);
  }

  get held(): string[] {
    return [...this.#held];
  }

  /** Claim `issue`; `held` says whether it is ours now. */
  async claim(issue: string): Promise<ClaimResult> {
    const r = await this.#store.claim(NAME + issue, this.holder, this.ttlMs);
    if (r.held) this.#held.add(issue);
    else this.#held.delete(issue);
    return r;
  }

  /** Renew every lease held; returns the issues lost (another took them after they ran out). */
  async renew(): Promise<string[]> {
    const mine = [...this.#held];
    if (mine.length === 0) return [];
    const kept = new Set(
      (
        await this.#store.renew(
          this.holder,
          mine.map((i) => NAME + i),
          this.ttlMs,
        )
      ).map((n) => n.slice(NAME.length)),
    );
    const lost = mine.filter((i) => !kept.has(i));
    for (const i of lost) this.#held.delete(i);
    return lost;
  }

  /** Give `issue` up (its events go to whoever claims it next). */
  async release(issue: string): Promise<void> {
    this.#held.delete(issue);
    await this.#store.release(NAME + issue, this.holder);
  }

  /** Forget `issue` without asking the store (its lease is lost already). */
  forget(issue: string): void {
    this.#held.delete(issue);
  }

  /** Issues someone else holds a live lease on. */
  async heldByOthers(): Promise<Set<string>> {
    const out = new Set<string>();
    for (const l of await this.#store.leases())
      if (l.name.startsWith(NAME) && l.holder !== this.holder) out.add(l.name.slice(NAME.length));
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
