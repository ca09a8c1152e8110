/**
 * @module
 * `@bb/state-postgres`: bot-bottle's state on PostgreSQL, for teams that run
 * several orchestrators against one database. The same seams as `@bb/state`
 * (and the same conformance suites pass):
 *
 * - {@link PostgresForgeStateStore}: `ForgeStateStore`, `DeliveryLedger` and
 *   `EventInbox` in one.
 * - {@link PostgresRunRecordStore}: the `RunRecordStore` of `@bb/provenance`.
 * - {@link PostgresSuperviseStore}: the `SuperviseRecords` of `@bb/supervise`.
 * - {@link PostgresDatabase}: the connection pool, with per-component migrations.
 * - {@link openPostgresState}: all of it from one URL (`BB_DATABASE_URL`).
 *
 * A real throwaway server for tests: `@bb/state-postgres/testing`.
 */

export { type CopiedTable, type CopyOptions, copySqliteToPostgres } from './copy-from-sqlite';
export {
  mapPgError,
  type OpenPostgresOptions,
  type PgMigration,
  PostgresDatabase,
  redactUrl,
  statementName,
} from './database';
export { PG_LEASE_SQL, PostgresLeaseStore } from './leases';
export { LEASES_PG_MIGRATIONS, RUNS_PG_MIGRATIONS, STATE_PG_MIGRATIONS } from './migrations';
export { openPostgresState, type PostgresState } from './open';
export { OPERATORS_PG_MIGRATIONS, PostgresOperatorTokens } from './operators';
export { PostgresFleetRoster, ROSTER_PG_MIGRATIONS } from './roster';
export { PostgresRunRecordStore } from './run-store';
export { PG_STATE_SQL, PostgresForgeStateStore, rowValues } from './state-store';
export { PostgresSuperviseStore, SUPERVISE_PG_MIGRATIONS } from './supervise-store';
