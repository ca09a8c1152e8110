import {
  type ClaimResult,
  checkLeaseHolder,
  checkLeaseName,
  checkTtl,
  type Lease,
  type LeaseStore,
} from '@bb/state';
import type { PostgresDatabase } from './database';
import { LEASES_PG_MIGRATIONS } from './migrations';

/** The SQL the lease store runs, exported so the benchmark's baseline runs the same. */
export const PG_LEASE_SQL = {
  // One statement: taken when free, run out, released or already ours (`held`), else who
  // holds it; `old` is the row before. The token stays while the holder does and rises
  // when the lease changes hands.
  claim: `WITH old AS (SELECT holder, expires_at FROM work_leases WHERE name = $1),
    won AS (
      INSERT INTO work_leases AS l (name, holder, expires_at, token)
      VALUES ($1, $2, now() + $3 * interval '1 millisecond', 1)
      ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
        token = CASE WHEN l.holder = excluded.holder THEN l.token ELSE l.token + 1 END
        WHERE l.holder = excluded.holder OR l.holder = '' OR l.expires_at <= now()
      RETURNING holder, expires_at, token
    )
    SELECT true AS held, won.holder, won.expires_at, won.token,
      (SELECT holder FROM old) AS old_holder, (SELECT expires_at FROM old) AS old_expires_at
    FROM won
    UNION ALL
    SELECT false, old.holder, old.expires_at, 0, NULL, NULL
    FROM old WHERE NOT EXISTS (SELECT 1 FROM won)`,
  current: 'SELECT holder, expires_at FROM work_leases WHERE name = $1',
  renew: `UPDATE work_leases SET expires_at = now() + $3 * interval '1 millisecond'
    WHERE holder = $1 AND name = ANY($2) RETURNING name`,
  release: `UPDATE work_leases SET holder = '', expires_at = now()
    WHERE name = $1 AND holder = $2`,
  leases: `SELECT name, holder, expires_at FROM work_leases
    WHERE expires_at > now() AND holder <> '' ORDER BY name`,
} as const;

/**
 * Leases on PostgreSQL, timed by the server's clock: orchestrators on several
 * machines share the work of one database with no common clock of their own.
 */
export class PostgresLeaseStore implements LeaseStore {
  private constructor(readonly database: PostgresDatabase) {}

  static async open(database: PostgresDatabase): Promise<PostgresLeaseStore> {
    await database.migrate('leases', LEASES_PG_MIGRATIONS);
    return new PostgresLeaseStore(database);
  }

  async claim(name: string, holder: string, ttlMs: number): Promise<ClaimResult> {
    checkLeaseName(name);
    checkLeaseHolder(holder);
    checkTtl(ttlMs);
    const r = await this.database.query<{
      held: boolean;
      holder: string;
      expires_at: Date;
      token: string;
      old_holder: string | null;
      old_expires_at: Date | null;
    }>('claim a lease in', PG_LEASE_SQL.claim, [name, holder, ttlMs]);
    const won = r.rows[0];
    if (won && !won.held)
      return { held: false, holder: won.holder, expiresAt: won.expires_at.toISOString(), token: 0 };
    if (won)
      return {
        held: true,
        holder,
        expiresAt: won.expires_at.toISOString(),
        token: Number(won.token),
        ...(won.old_holder && won.old_holder !== holder && won.old_expires_at
          ? { takenFrom: { holder: won.old_holder, expiredAt: won.old_expires_at.toISOString() } }
          : {}),
      };
    // Made by another claimant after this statement's snapshot: who holds it, asked again.
    const cur = await this.database.query<{ holder: string; expires_at: Date }>(
      'read a lease in',
      PG_LEASE_SQL.current,
      [name],
    );
    const row = cur.rows[0];
    return {
      held: false,
      holder: row?.holder ?? '',
      expiresAt: row?.expires_at.toISOString() ?? new Date().toISOString(),
      token: 0,
    };
  }

  async renew(holder: string, names: readonly string[], ttlMs: number): Promise<string[]> {
    checkLeaseHolder(holder);
    checkTtl(ttlMs);
    for (const n of names) checkLeaseName(n);
    if (names.length === 0) return [];
    const r = await this.database.query<{ name: string }>('renew leases in', PG_LEASE_SQL.renew, [
      holder,
      names,
      ttlMs,
    ]);
    const held = new Set(r.rows.map((row) => row.name));
    return names.filter((n) => held.has(n));
  }

  async release(name: string, holder: string): Promise<void> {
    checkLeaseName(name);
    checkLeaseHolder(holder);
    await this.database.query('release a lease in', PG_LEASE_SQL.release, [name, holder]);
  }

  async leases(): Promise<Lease[]> {
    const r = await this.database.query<{ name: string; holder: string; expires_at: Date }>(
      'read leases in',
      PG_LEASE_SQL.leases,
    );
    return r.rows.map((row) => ({
      name: row.name,
      holder: row.holder,
      expiresAt: row.expires_at.toISOString(),
    }));
  }
}
