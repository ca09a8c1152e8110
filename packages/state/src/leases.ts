import { BbError } from '@bb/errors';
import type { ForgeState } from './forge-state';
import type { InboxEvent } from './inbox';
import type { Awaitable } from './store';

/** A lease as it stands: who holds `name` until when (ISO 8601). */
export interface Lease {
  name: string;
  holder: string;
  expiresAt: string;
}

/** What a claim found. */
export interface ClaimResult {
  /** Whether `holder` holds the lease now. */
  held: boolean;
  /** Who holds it (the claimant, or whoever kept it). */
  holder: string;
  expiresAt: string;
  /**
   * The lease's fencing token: the same for as long as one holder keeps it
   * (claimed again, renewed, or run out and taken by nobody), and larger each
   * time it changes hands or is released and claimed again. A holder that
   * claims again after a stall and gets a token other than the one it had has
   * lost the lease meanwhile: whatever it knew of the work is stale. `0` when
   * not held.
   */
  token: number;
  /** When it was taken from another holder whose lease had run out: who, and when it ran out. */
  takenFrom?: { holder: string; expiredAt: string } | undefined;
}

/**
 * Time-limited, exclusive claims on named work (an issue's events, the REST
 * sweep), shared by every orchestrator using one database: at most one holder
 * per name at any instant, a holder that stops renewing loses it when it runs
 * out, and anyone may then take it. Time is the database's own where it has
 * one (PostgreSQL), so holders on several machines need no common clock.
 * Implementations must pass `describeLeaseConformance` from `@bb/state/testing`.
 */
export interface LeaseStore {
  /**
   * Take `name` for `holder` for `ttlMs` when it is free, has run out, or is
   * `holder`'s already (then it is extended). Atomic: of two claimants of a
   * free lease exactly one gets it.
   */
  claim(name: string, holder: string, ttlMs: number): Awaitable<ClaimResult>;
  /**
   * Extend the leases of `names` that `holder` still holds (run out or not, as
   * long as nobody took them) by `ttlMs` from now; returns the names it holds.
   */
  renew(holder: string, names: readonly string[], ttlMs: number): Awaitable<string[]>;
  /** Give `name` up if `holder` holds it (otherwise nothing happens). */
  release(name: string, holder: string): Awaitable<void>;
  /** Every lease that has not run out, by name. */
  leases(): Awaitable<Lease[]>;
}

/**
 * What nobody holds, read by the database in one statement each where the
 * leases live beside the bottles and the inbox (`PostgresForgeStateStore`): a
 * fleet's take-over scan then reads only what it may take, not every row and
 * every lease. `prefix` is what a lease name puts before the issue key
 * (`issue:`).
 */
export interface UnleasedWork {
  /**
   * Live bottle rows whose issue's lease nobody but `holder` holds (none, run
   * out, released, or `holder`'s own: a restarted holder takes its own back).
   */
  unleasedRows(prefix: string, holder: string): Awaitable<ForgeState[]>;
  /** Open events of issues nobody but `holder` holds, and the parked ones (no issue yet), in order. */
  unleasedEvents(prefix: string, holder: string): Awaitable<InboxEvent[]>;
}

export function checkLeaseName(name: unknown): string {
  if (typeof name !== 'string' || name.length === 0 || name.length > 512)
    throw new BbError(
      'INVALID_INPUT',
      `invalid lease name ${JSON.stringify(name)}: must be a string of 1 to 512 characters`,
    );
  return name;
}

export function checkLeaseHolder(holder: unknown): string {
  if (typeof holder !== 'string' || !/^[\w.:@/-]{1,200}$/.test(holder))
    throw new BbError(
      'INVALID_INPUT',
      `invalid lease holder ${JSON.stringify(holder)}: 1 to 200 letters, digits and . : @ / _ -`,
    );
  return holder;
}

export function checkTtl(ttlMs: unknown): number {
  if (!Number.isSafeInteger(ttlMs) || (ttlMs as number) < 1 || (ttlMs as number) > 3_600_000)
    throw new BbError(
      'INVALID_INPUT',
      `lease time ${String(ttlMs)} ms must be a whole number of milliseconds from 1 to 3600000`,
    );
  return ttlMs as number;
}

/** Leases in this process's memory: one orchestrator, nothing shared. */
export class MemoryLeaseStore implements LeaseStore {
  /** Released leases stay, with no holder, so their tokens keep rising. */
  readonly #leases = new Map<string, { holder: string; until: number; token: number }>();
  constructor(private readonly now: () => number = Date.now) {}

  claim(name: string, holder: string, ttlMs: number): ClaimResult {
    checkLeaseName(name);
    checkLeaseHolder(holder);
    checkTtl(ttlMs);
    const now = this.now();
    const cur = this.#leases.get(name);
    if (cur && cur.holder !== holder && cur.until > now)
      return {
        held: false,
        holder: cur.holder,
        expiresAt: new Date(cur.until).toISOString(),
        token: 0,
      };
    const until = now + ttlMs;
    const token = cur ? (cur.holder === holder ? cur.token : cur.token + 1) : 1;
    this.#leases.set(name, { holder, until, token });
    return {
      held: true,
      holder,
      expiresAt: new Date(until).toISOString(),
      token,
      ...(cur?.holder && cur.holder !== holder
        ? { takenFrom: { holder: cur.holder, expiredAt: new Date(cur.until).toISOString() } }
        : {}),
    };
  }

  renew(holder: string, names: readonly string[], ttlMs: number): string[] {
    checkLeaseHolder(holder);
    checkTtl(ttlMs);
    const until = this.now() + ttlMs;
    const held: string[] = [];
    for (const name of names) {
      const cur = this.#leases.get(checkLeaseName(name));
      if (cur?.holder !== holder) continue;
      cur.until = until;
      held.push(name);
    }
    return held;
  }

  release(name: string, holder: string): void {
    checkLeaseName(name);
    checkLeaseHolder(holder);
    const cur = this.#leases.get(name);
    if (cur?.holder === holder) this.#leases.set(name, { holder: '', until: 0, token: cur.token });
  }

  leases(): Lease[] {
    const now = this.now();
    return [...this.#leases]
      .filter(([, l]) => l.holder !== '' && l.until > now)
      .map(([name, l]) => ({ name, holder: l.holder, expiresAt: new Date(l.until).toISOString() }))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }
}
