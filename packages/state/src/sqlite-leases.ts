import { isBbError } from '@bb/errors';
import type Database from 'better-sqlite3';
import { type BbDatabase, type Migration, mapSqliteError } from './database';
import {
  type ClaimResult,
  checkLeaseHolder,
  checkLeaseName,
  checkTtl,
  type Lease,
  type LeaseStore,
} from './leases';

/** The `leases` component's schema. Append; never edit a shipped step. */
export const LEASE_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    up: `
      CREATE TABLE work_leases (
        name       TEXT PRIMARY KEY,
        holder     TEXT NOT NULL,
        expires_at INTEGER NOT NULL
      ) WITHOUT ROWID;
    `,
  },
  {
    // Fencing tokens (see `ClaimResult.token`); a released lease keeps its row with no holder.
    version: 2,
    up: `ALTER TABLE work_leases ADD COLUMN token INTEGER NOT NULL DEFAULT 1;`,
  },
];

const iso = (ms: number) => new Date(ms).toISOString();

/**
 * Leases in the SQLite file: several orchestrator processes on one machine
 * share the work of one file (each claim is one write transaction). Time is
 * this machine's clock, which they all share.
 */
export class SqliteLeaseStore implements LeaseStore {
  readonly #db: Database.Database;
  readonly #path: string;
  readonly #claim: (name: string, holder: string, ttlMs: number) => ClaimResult;

  constructor(database: BbDatabase) {
    database.migrate('leases', LEASE_MIGRATIONS);
    this.#db = database.db;
    this.#path = database.path;
    const get = this.#db.prepare(
      'SELECT holder, expires_at, token FROM work_leases WHERE name = ?',
    );
    const put = this.#db.prepare(
      `INSERT INTO work_leases (name, holder, expires_at, token) VALUES (?, ?, ?, ?)
       ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
         token = excluded.token`,
    );
    const claim = this.#db.transaction((name: string, holder: string, ttlMs: number) => {
      const now = Date.now();
      const cur = get.get(name) as
        | { holder: string; expires_at: number; token: number }
        | undefined;
      if (cur && cur.holder !== holder && cur.holder !== '' && cur.expires_at > now)
        return { held: false, holder: cur.holder, expiresAt: iso(cur.expires_at), token: 0 };
      const token = cur ? (cur.holder === holder ? cur.token : cur.token + 1) : 1;
      put.run(name, holder, now + ttlMs, token);
      return {
        held: true,
        holder,
        expiresAt: iso(now + ttlMs),
        token,
        ...(cur?.holder && cur.holder !== holder
          ? { takenFrom: { holder: cur.holder, expiredAt: iso(cur.expires_at) } }
          : {}),
      };
    });
    this.#claim = (name, holder, ttlMs) => claim.immediate(name, holder, ttlMs);
  }

  claim(name: string, holder: string, ttlMs: number): ClaimResult {
    checkLeaseName(name);
    checkLeaseHolder(holder);
    checkTtl(ttlMs);
    return this.#run('claim a lease in', () => this.#claim(name, holder, ttlMs));
  }

  renew(holder: string, names: readonly string[], ttlMs: number): string[] {
    checkLeaseHolder(holder);
    checkTtl(ttlMs);
    for (const n of names) checkLeaseName(n);
    if (names.length === 0) return [];
    const until = Date.now() + ttlMs;
    const stmt = this.#db.prepare(
      'UPDATE work_leases SET expires_at = ? WHERE holder = ? AND name = ? RETURNING name',
    );
    return this.#run('renew leases in', () =>
      this.#db
        .transaction(() => names.filter((n) => stmt.get(until, holder, n) !== undefined))
        .immediate(),
    );
  }

  release(name: string, holder: string): void {
    checkLeaseName(name);
    checkLeaseHolder(holder);
    this.#run('release a lease in', () =>
      this.#db
        .prepare("UPDATE work_leases SET holder = '', expires_at = 0 WHERE name = ? AND holder = ?")
        .run(name, holder),
    );
  }

  leases(): Lease[] {
    const rows = this.#run(
      'read leases in',
      () =>
        this.#db
          .prepare(
            `SELECT name, holder, expires_at FROM work_leases
             WHERE expires_at > ? AND holder <> '' ORDER BY name`,
          )
          .all(Date.now()) as Array<{ name: string; holder: string; expires_at: number }>,
    );
    return rows.map((r) => ({ name: r.name, holder: r.holder, expiresAt: iso(r.expires_at) }));
  }

  #run<T>(action: string, fn: () => T): T {
    try {
      return fn();
    } catch (err) {
      throw isBbError(err) ? err : mapSqliteError(err, this.#path, action);
    }
  }
}
