import { BbError } from '@bb/errors';
import { type BbDatabase, COLUMNS } from '@bb/state';
import type pg from 'pg';
import type { PostgresState } from './open';

/** One table copied, for progress and the summary. */
export interface CopiedTable {
  table: string;
  rows: number;
}

export interface CopyOptions {
  /** The SQLite database to read (opened by the caller; only read). */
  from: BbDatabase;
  /** The PostgreSQL state to write: migrated, and empty. */
  to: PostgresState;
  /** Called after each table. */
  progress?: (done: CopiedTable) => void;
  /** Rows per INSERT. @default 500 */
  batch?: number;
}

interface TablePlan {
  table: string;
  /** Columns copied, in order. */
  columns: string[];
  /** The SQLite order rows are read in (their order in PostgreSQL follows). */
  order: string;
  /** Whether the SQLite file has it (a component never used has no tables). */
  optional?: boolean;
}

const PLANS: TablePlan[] = [
  { table: 'forge_state', columns: COLUMNS.split(', '), order: 'owner, repo, issue_number' },
  { table: 'forge_state_history', columns: COLUMNS.split(', '), order: 'updated_at, slug' },
  {
    table: 'webhook_deliveries',
    columns: ['key', 'delivery_id', 'event', 'received_at'],
    order: 'received_at, key',
  },
  {
    table: 'event_inbox',
    columns: ['id', 'key', 'issue', 'state', 'occurred_at', 'received_at', 'payload'],
    order: 'id',
  },
  {
    // rowid order is each chain's order for records started in the same instant.
    table: 'provenance_records',
    columns: [
      'id',
      'slug',
      'owner',
      'repo',
      'issue',
      'agent',
      'status',
      'started_at',
      'hash',
      'prev',
      'signed',
    ],
    order: 'rowid',
    optional: true,
  },
  {
    // A fleet decides them through any replica: they move with the rest.
    table: 'supervise_requests',
    columns: [
      'id',
      'slug',
      'kind',
      'tool',
      'status',
      'created_at',
      'expires_at',
      'turn',
      'base_text',
      'base_hash',
      'candidate_text',
      'candidate_hash',
      'justification',
      'rerouted',
      'evidence',
      'findings',
      'decided_by',
      'decided_via',
      'decided_at',
      'scope',
      'final_text',
      'final_hash',
      'reason',
      'override',
      'remediation',
      'remediated_at',
      'applying_by',
      'applying_at',
    ],
    order: 'created_at, id',
    optional: true,
  },
  {
    // Operators' tokens (their hashes): a token works on every replica.
    table: 'operator_tokens',
    columns: ['name', 'token_hash', 'created_at', 'last_used_at', 'revoked_at'],
    order: 'created_at, name',
    optional: true,
  },
];

/**
 * Copy an existing SQLite install's state (bottles, their history, the delivery
 * ledger, the event inbox, run records, supervise requests) into an empty, migrated PostgreSQL
 * state, in one transaction: on any failure PostgreSQL is left as it was, and
 * the SQLite file is only read. Refuses (`CONFLICT`) a target that has rows.
 * Supervise requests and operators' tokens are copied too (a fleet shares them).
 */
export async function copySqliteToPostgres(options: CopyOptions): Promise<CopiedTable[]> {
  const { from, to } = options;
  const batch = options.batch ?? 500;
  const present = new Set(
    (
      from.db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{
        name: string;
      }>
    ).map((r) => r.name),
  );
  for (const plan of PLANS)
    if (!plan.optional && !present.has(plan.table))
      throw new BbError(
        'INVALID_INPUT',
        `${from.path} has no ${plan.table} table: it is not a bot-bottle state file (or was never opened by bb)`,
      );
  const copied: CopiedTable[] = [];
  // One read transaction over every table: a consistent picture even if something writes.
  from.db.exec('BEGIN');
  try {
    await copyInto(from, to, options, present, batch, copied);
  } finally {
    from.db.exec('COMMIT');
  }
  return copied;
}

async function copyInto(
  from: BbDatabase,
  to: PostgresState,
  options: CopyOptions,
  present: Set<string>,
  batch: number,
  copied: CopiedTable[],
): Promise<void> {
  await to.database.transaction('copy the SQLite state into', async (c: pg.PoolClient) => {
    for (const plan of PLANS) {
      const existing = await c.query<{ n: string }>(`SELECT count(*) AS n FROM ${plan.table}`);
      if (Number(existing.rows[0]?.n) > 0)
        throw new BbError(
          'CONFLICT',
          `${to.database.where} already has rows in ${plan.table}: bb state migrate copies into an empty database only (nothing was changed)`,
        );
    }
    for (const plan of PLANS) {
      if (!present.has(plan.table)) {
        copied.push({ table: plan.table, rows: 0 });
        options.progress?.({ table: plan.table, rows: 0 });
        continue;
      }
      const rows = from.db
        .prepare(`SELECT ${plan.columns.join(', ')} FROM ${plan.table} ORDER BY ${plan.order}`)
        .raw(true)
        .iterate() as IterableIterator<unknown[]>;
      let n = 0;
      let chunk: unknown[][] = [];
      const flush = async () => {
        if (chunk.length === 0) return;
        const width = plan.columns.length;
        const values = chunk
          .map((_, i) => `(${plan.columns.map((__, j) => `$${i * width + j + 1}`).join(', ')})`)
          .join(', ');
        await c.query(
          `INSERT INTO ${plan.table} (${plan.columns.join(', ')}) VALUES ${values}`,
          chunk.flat(),
        );
        n += chunk.length;
        chunk = [];
      };
      for (const row of rows) {
        chunk.push(row);
        if (chunk.length >= batch) await flush();
      }
      await flush();
      if (plan.table === 'event_inbox')
        // New events are numbered after the copied ones.
        await c.query(
          "SELECT setval(pg_get_serial_sequence('event_inbox', 'id'), GREATEST((SELECT max(id) FROM event_inbox), 1))",
        );
      copied.push({ table: plan.table, rows: n });
      options.progress?.({ table: plan.table, rows: n });
    }
  });
}
