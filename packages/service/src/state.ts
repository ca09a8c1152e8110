import { join } from 'node:path';
import { registerUrlSecrets } from '@bb/errors';
import { ProvenanceStore, type RunRecordStore } from '@bb/provenance';
import {
  BbDatabase,
  type DeliveryLedger,
  type EventInbox,
  type FleetRoster,
  type ForgeStateStore,
  type LeaseStore,
  type OperatorTokenStore,
  SqliteFleetRoster,
  SqliteForgeStateStore,
  SqliteLeaseStore,
  SqliteOperatorTokens,
  type UnleasedWork,
} from '@bb/state';
import { type SuperviseRecords, SuperviseStore } from '@bb/supervise';

/** What the orchestrator keeps, wherever it lives. */
export interface OrchestratorState {
  kind: 'sqlite' | 'postgres';
  /** The SQLite file's path, or the database URL without its password. */
  where: string;
  /** Bottles, the delivery ledger and the event inbox. */
  store: ForgeStateStore & DeliveryLedger & EventInbox;
  /** Signed run records. */
  runs: RunRecordStore;
  /** Leases on work, shared by the orchestrators using this state. */
  leases: LeaseStore;
  /** Who is in the fleet, with what configuration. */
  roster: FleetRoster;
  /** What nobody holds, asked of the database (PostgreSQL, where leases and bottles are one database). */
  unleased?: UnleasedWork;
  /** Supervise requests, decisions and remediations (the fleet's, on PostgreSQL). */
  supervise: SuperviseRecords;
  /** Operators' tokens for the API (the fleet's, on PostgreSQL). */
  operators: OperatorTokenStore;
  /** This machine's own SQLite file. */
  local: BbDatabase;
  close(): Promise<void>;
}

/**
 * Open the state `BB_DATABASE_URL` names (PostgreSQL), or the SQLite file in
 * `home` when it is unset. The URL's password is registered as a secret: no log
 * line or error shows it.
 */
export async function openState(
  databaseUrl: string | undefined,
  home: string,
): Promise<OrchestratorState> {
  const local = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
  if (!databaseUrl) {
    const store = new SqliteForgeStateStore({ database: local });
    return {
      kind: 'sqlite',
      where: local.path,
      store,
      runs: new ProvenanceStore(local),
      leases: new SqliteLeaseStore(local),
      roster: new SqliteFleetRoster(local),
      supervise: new SuperviseStore(local),
      operators: new SqliteOperatorTokens(local),
      local,
      close: async () => local.close(),
    };
  }
  registerUrlSecrets(databaseUrl);
  try {
    // Loaded only when asked for: a SQLite install never loads pg.
    const { openPostgresState } = await import('@bb/state-postgres');
    const pg = await openPostgresState({ url: databaseUrl });
    return {
      kind: 'postgres',
      where: pg.database.where,
      store: pg.store,
      runs: pg.runs,
      leases: pg.leases,
      roster: pg.roster,
      unleased: pg.store,
      supervise: pg.supervise,
      operators: pg.operators,
      local,
      close: async () => {
        await pg.close();
        local.close();
      },
    };
  } catch (err) {
    local.close();
    throw err;
  }
}
