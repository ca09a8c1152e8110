import { type OpenPostgresOptions, PostgresDatabase } from './database';
import { PostgresLeaseStore } from './leases';
import { PostgresOperatorTokens } from './operators';
import { PostgresFleetRoster } from './roster';
import { PostgresRunRecordStore } from './run-store';
import { PostgresForgeStateStore } from './state-store';
import { PostgresSuperviseStore } from './supervise-store';

/** Everything an orchestrator keeps, on one PostgreSQL database. */
export interface PostgresState {
  database: PostgresDatabase;
  /** Forge state, delivery ledger and event inbox. */
  store: PostgresForgeStateStore;
  /** Signed run records. */
  runs: PostgresRunRecordStore;
  /** Claims on work shared by the orchestrators. */
  leases: PostgresLeaseStore;
  /** Who is in the fleet, with what configuration. */
  roster: PostgresFleetRoster;
  /** Supervise requests, decisions and remediations, shared by every replica. */
  supervise: PostgresSuperviseStore;
  /** Operators' tokens for the API: one made on any replica works on all. */
  operators: PostgresOperatorTokens;
  close(): Promise<void>;
}

/** Connect, migrate every component, and return the stores. */
export async function openPostgresState(options: OpenPostgresOptions): Promise<PostgresState> {
  const database = await PostgresDatabase.open(options);
  try {
    const store = await PostgresForgeStateStore.open(database);
    const runs = await PostgresRunRecordStore.open(database);
    const leases = await PostgresLeaseStore.open(database);
    const roster = await PostgresFleetRoster.open(database);
    const supervise = await PostgresSuperviseStore.open(database);
    const operators = await PostgresOperatorTokens.open(database);
    return {
      database,
      store,
      runs,
      leases,
      roster,
      supervise,
      operators,
      close: () => database.close(),
    };
  } catch (err) {
    await database.close();
    throw err;
  }
}
