import {
  checkConfigHash,
  checkLeaseHolder,
  checkTtl,
  type FleetRoster,
  type Member,
} from '@bb/state';
import type { PgMigration, PostgresDatabase } from './database';

/** The `roster` component: who is in the fleet, with what configuration. */
export const ROSTER_PG_MIGRATIONS: readonly PgMigration[] = [
  {
    version: 1,
    up: `
      CREATE TABLE fleet_members (
        replica     TEXT COLLATE "C" PRIMARY KEY,
        config_hash TEXT NOT NULL,
        joined_at   TIMESTAMPTZ NOT NULL,
        seen_at     TIMESTAMPTZ NOT NULL,
        expires_at  TIMESTAMPTZ NOT NULL
      );
    `,
  },
];

const SQL = {
  checkIn: `INSERT INTO fleet_members AS m (replica, config_hash, joined_at, seen_at, expires_at)
    VALUES ($1, $2, clock_timestamp(), clock_timestamp(), clock_timestamp() + $3 * interval '1 millisecond')
    ON CONFLICT (replica) DO UPDATE SET config_hash = excluded.config_hash,
      joined_at = CASE WHEN m.expires_at > clock_timestamp() THEN m.joined_at ELSE excluded.joined_at END,
      seen_at = excluded.seen_at, expires_at = excluded.expires_at`,
  live: `SELECT replica, config_hash, joined_at, seen_at FROM fleet_members
    WHERE expires_at > clock_timestamp() ORDER BY joined_at, replica`,
  leave: 'DELETE FROM fleet_members WHERE replica = $1',
} as const;

/** The fleet's roster on PostgreSQL, timed by the server's clock. */
export class PostgresFleetRoster implements FleetRoster {
  private constructor(readonly database: PostgresDatabase) {}

  static async open(database: PostgresDatabase): Promise<PostgresFleetRoster> {
    await database.migrate('roster', ROSTER_PG_MIGRATIONS);
    return new PostgresFleetRoster(database);
  }

  async checkIn(replica: string, configHash: string, ttlMs: number): Promise<Member[]> {
    checkLeaseHolder(replica);
    checkConfigHash(configHash);
    checkTtl(ttlMs);
    await this.database.query('check in to the fleet roster in', SQL.checkIn, [
      replica,
      configHash,
      ttlMs,
    ]);
    const r = await this.database.query<{
      replica: string;
      config_hash: string;
      joined_at: Date;
      seen_at: Date;
    }>('read the fleet roster in', SQL.live);
    return r.rows.map((row) => ({
      replica: row.replica,
      configHash: row.config_hash,
      joinedAt: row.joined_at.toISOString(),
      seenAt: row.seen_at.toISOString(),
    }));
  }

  async leave(replica: string): Promise<void> {
    checkLeaseHolder(replica);
    await this.database.query('leave the fleet roster in', SQL.leave, [replica]);
  }
}
