import { BbError, isBbError } from '@bb/errors';
import type Database from 'better-sqlite3';
import { type BbDatabase, type Migration, mapSqliteError } from './database';
import { checkLeaseHolder, checkTtl } from './leases';
import type { Awaitable } from './store';

/** An orchestrator of the fleet, as it last said. */
export interface Member {
  replica: string;
  /** What its configuration (agents, bottles, policy) hashes to (`configHash`). */
  configHash: string;
  /** When it joined (ISO 8601): its first check-in since it was last away. */
  joinedAt: string;
  /** Its latest check-in. */
  seenAt: string;
}

/**
 * Who is in the fleet now and with what configuration. Each orchestrator checks
 * in at start and at each renewal; a member not seen for the time it gave is
 * gone. The fleet's configuration is the one of the member that joined first:
 * one whose own differs waits (`agreement`). Time is the database's own where
 * it has one. Implementations must pass `describeRosterConformance` from
 * `@bb/state/testing`.
 */
export interface FleetRoster {
  /**
   * `replica` is here, with `configHash`, for `ttlMs` more; returns every member
   * seen within its own time, the earliest joined first (`replica` among them).
   */
  checkIn(replica: string, configHash: string, ttlMs: number): Awaitable<Member[]>;
  /** `replica` leaves (a clean shutdown): the others need not wait for its time to run out. */
  leave(replica: string): Awaitable<void>;
}

/** Whether `replica` agrees with the fleet: its configuration is the first-joined member's. */
export function agreement(
  members: readonly Member[],
  replica: string,
): { agreed: true } | { agreed: false; with: Member } {
  const me = members.find((m) => m.replica === replica);
  const first = members[0];
  if (!me || !first || first.configHash === me.configHash) return { agreed: true };
  return { agreed: false, with: first };
}

export function checkConfigHash(hash: unknown): string {
  if (typeof hash !== 'string' || !/^[0-9a-f]{16,64}$/.test(hash))
    throw new BbError(
      'INVALID_INPUT',
      `config hash ${JSON.stringify(hash)} must be 16 to 64 lower-case hex digits`,
    );
  return hash;
}

const iso = (ms: number) => new Date(ms).toISOString();

/** The roster in this process's memory: one orchestrator, or tests. */
export class MemoryFleetRoster implements FleetRoster {
  readonly #members = new Map<
    string,
    { hash: string; joined: number; seen: number; until: number }
  >();
  constructor(private readonly now: () => number = Date.now) {}

  checkIn(replica: string, configHash: string, ttlMs: number): Member[] {
    checkLeaseHolder(replica);
    checkConfigHash(configHash);
    checkTtl(ttlMs);
    const now = this.now();
    const cur = this.#members.get(replica);
    const back = cur && cur.until > now;
    this.#members.set(replica, {
      hash: configHash,
      joined: back ? cur.joined : now,
      seen: now,
      until: now + ttlMs,
    });
    return [...this.#members]
      .filter(([, m]) => m.until > now)
      .sort(([a, x], [b, y]) => x.joined - y.joined || (a < b ? -1 : a > b ? 1 : 0))
      .map(([r, m]) => ({
        replica: r,
        configHash: m.hash,
        joinedAt: iso(m.joined),
        seenAt: iso(m.seen),
      }));
  }

  leave(replica: string): void {
    this.#members.delete(checkLeaseHolder(replica));
  }
}

/** The `roster` component's schema. Append; never edit a shipped step. */
export const ROSTER_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    up: `
      CREATE TABLE fleet_members (
        replica     TEXT PRIMARY KEY,
        config_hash TEXT NOT NULL,
        joined_at   INTEGER NOT NULL,
        seen_at     INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL
      ) WITHOUT ROWID;
    `,
  },
];

/** The roster in the SQLite file: processes on one machine, timed by its clock. */
export class SqliteFleetRoster implements FleetRoster {
  readonly #db: Database.Database;
  readonly #path: string;
  readonly #checkIn: (replica: string, hash: string, ttlMs: number) => Member[];

  constructor(database: BbDatabase) {
    database.migrate('roster', ROSTER_MIGRATIONS);
    this.#db = database.db;
    this.#path = database.path;
    const put = this.#db.prepare(
      `INSERT INTO fleet_members (replica, config_hash, joined_at, seen_at, expires_at)
       VALUES (@replica, @hash, @now, @now, @until)
       ON CONFLICT (replica) DO UPDATE SET config_hash = excluded.config_hash,
         joined_at = CASE WHEN fleet_members.expires_at > @now THEN fleet_members.joined_at
                          ELSE excluded.joined_at END,
         seen_at = excluded.seen_at, expires_at = excluded.expires_at`,
    );
    const live = this.#db.prepare(
      `SELECT replica, config_hash, joined_at, seen_at FROM fleet_members
       WHERE expires_at > ? ORDER BY joined_at, replica`,
    );
    const checkIn = this.#db.transaction((replica: string, hash: string, ttlMs: number) => {
      const now = Date.now();
      put.run({ replica, hash, now, until: now + ttlMs });
      return (
        live.all(now) as Array<{
          replica: string;
          config_hash: string;
          joined_at: number;
          seen_at: number;
        }>
      ).map((r) => ({
        replica: r.replica,
        configHash: r.config_hash,
        joinedAt: iso(r.joined_at),
        seenAt: iso(r.seen_at),
      }));
    });
    this.#checkIn = (r, h, t) => checkIn.immediate(r, h, t);
  }

  checkIn(replica: string, configHash: string, ttlMs: number): Member[] {
    checkLeaseHolder(replica);
    checkConfigHash(configHash);
    checkTtl(ttlMs);
    return this.#run('check in to', () => this.#checkIn(replica, configHash, ttlMs));
  }

  leave(replica: string): void {
    checkLeaseHolder(replica);
    this.#run('leave', () =>
      this.#db.prepare('DELETE FROM fleet_members WHERE replica = ?').run(replica),
    );
  }

  #run<T>(action: string, fn: () => T): T {
    try {
      return fn();
    } catch (err) {
      throw isBbError(err) ? err : mapSqliteError(err, this.#path, `${action} the fleet roster in`);
    }
  }
}
