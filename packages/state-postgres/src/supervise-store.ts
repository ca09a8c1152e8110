import type {
  IngestExtra,
  ProposalKind,
  Remediation,
  RequestDecision,
  RequestFile,
  RequestFilter,
  Row,
  SuperviseRecords,
  SuperviseRequest,
} from '@bb/supervise';
import { decisionValues, ingestValues, requestFromRow, streakOf } from '@bb/supervise';
import type { PgMigration, PostgresDatabase } from './database';

/**
 * The `supervise` component on PostgreSQL: the columns of the SQLite table
 * (`@bb/supervise`'s `SuperviseStore`), so a fleet's replicas share every request,
 * decision and remediation. Append; never edit a shipped step.
 */
export const SUPERVISE_PG_MIGRATIONS: readonly PgMigration[] = [
  {
    version: 1,
    up: `
      CREATE TABLE supervise_requests (
        id TEXT COLLATE "C" PRIMARY KEY,
        slug TEXT COLLATE "C" NOT NULL,
        kind TEXT NOT NULL,
        tool TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at TEXT COLLATE "C" NOT NULL,
        expires_at TEXT COLLATE "C" NOT NULL,
        turn INTEGER,
        base_text TEXT NOT NULL,
        base_hash TEXT NOT NULL,
        candidate_text TEXT NOT NULL,
        candidate_hash TEXT NOT NULL,
        justification TEXT NOT NULL,
        rerouted INTEGER NOT NULL DEFAULT 0,
        evidence TEXT NOT NULL DEFAULT '[]',
        findings TEXT NOT NULL DEFAULT '[]',
        decided_by TEXT,
        decided_via TEXT,
        decided_at TEXT COLLATE "C",
        scope TEXT,
        final_text TEXT,
        final_hash TEXT,
        reason TEXT,
        override INTEGER NOT NULL DEFAULT 0,
        remediation TEXT,
        remediated_at TEXT,
        applying_by TEXT,
        applying_at TEXT COLLATE "C"
      );
      CREATE INDEX supervise_requests_status ON supervise_requests (status, created_at);
      CREATE INDEX supervise_requests_slug ON supervise_requests (slug, created_at);
      CREATE INDEX supervise_requests_unapplied ON supervise_requests (decided_at)
        WHERE status IN ('approved', 'modified') AND remediation IS NULL;
    `,
  },
];

/**
 * Supervise requests on the PostgreSQL database a fleet shares: a request a bottle
 * of one replica made is listed, and decided, through any replica (its API, its
 * forge thread), and applied by the one whose engine runs the bottle
 * (`SuperviseDeskOptions.appliesTo`, `unapplied`). A decision is one conditional
 * update: of two replicas deciding at once, one wins and the other is told.
 */
export class PostgresSuperviseStore implements SuperviseRecords {
  private constructor(readonly database: PostgresDatabase) {}

  static async open(database: PostgresDatabase): Promise<PostgresSuperviseStore> {
    await database.migrate('supervise', SUPERVISE_PG_MIGRATIONS);
    return new PostgresSuperviseStore(database);
  }

  async #rows(action: string, text: string, values: unknown[] = []): Promise<SuperviseRequest[]> {
    return (await this.database.query<Row>(action, text, values)).rows.map(requestFromRow);
  }

  async ingest(r: RequestFile, extra: IngestExtra): Promise<boolean> {
    const res = await this.database.query(
      'record a supervise request in',
      `INSERT INTO supervise_requests
         (id, slug, kind, tool, status, created_at, expires_at, turn, base_text, base_hash,
          candidate_text, candidate_hash, justification, rerouted, evidence, findings)
       VALUES ($1, $2, $3, $4, 'pending', $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
       ON CONFLICT (id) DO NOTHING`,
      ingestValues(r, extra),
    );
    return (res.rowCount ?? 0) > 0;
  }

  async get(id: string): Promise<SuperviseRequest | undefined> {
    return (
      await this.#rows(
        'read a supervise request in',
        'SELECT * FROM supervise_requests WHERE id = $1',
        [id],
      )
    )[0];
  }

  async known(ids: readonly string[]): Promise<Set<string>> {
    const r = await this.database.query<{ id: string }>(
      'read which supervise requests are known in',
      'SELECT id FROM supervise_requests WHERE id = ANY($1::text[])',
      [ids],
    );
    return new Set(r.rows.map((row) => row.id));
  }

  async list(filter: RequestFilter = {}): Promise<SuperviseRequest[]> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (filter.status) {
      args.push(filter.status);
      where.push(`status = $${args.length}`);
    }
    if (filter.slug) {
      args.push(filter.slug);
      where.push(`slug = $${args.length}`);
    }
    return this.#rows(
      'list supervise requests in',
      `SELECT * FROM supervise_requests ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY created_at, id`,
      args,
    );
  }

  async hasPending(slug: string, now = Date.now()): Promise<boolean> {
    const r = await this.database.query(
      'read the pending supervise requests of',
      "SELECT 1 FROM supervise_requests WHERE slug = $1 AND status = 'pending' AND expires_at > $2 LIMIT 1",
      [slug, new Date(now).toISOString()],
    );
    return (r.rowCount ?? 0) > 0;
  }

  async decide(id: string, d: RequestDecision): Promise<boolean> {
    const r = await this.database.query(
      'decide a supervise request in',
      `UPDATE supervise_requests SET status = $1, decided_by = $2, decided_via = $3, decided_at = $4,
         scope = $5, final_text = $6, final_hash = $7, reason = $8, override = $9,
         applying_by = $10, applying_at = $11
       WHERE id = $12 AND status = 'pending'`,
      [...decisionValues(d), id],
    );
    return (r.rowCount ?? 0) > 0;
  }

  async claimApply(id: string, by: string, at: string, staleBefore: string): Promise<boolean> {
    const r = await this.database.query(
      'claim the applying of a decision in',
      `UPDATE supervise_requests SET applying_by = $1, applying_at = $2
       WHERE id = $3 AND status IN ('approved', 'modified') AND remediation IS NULL
         AND (applying_by IS NULL OR applying_by = $1 OR applying_at < $4)`,
      [by, at, id, staleBefore],
    );
    return (r.rowCount ?? 0) > 0;
  }

  async recordRemediation(id: string, rem: Remediation, at: string, by?: string): Promise<boolean> {
    const r = await this.database.query(
      'record a remediation in',
      `UPDATE supervise_requests SET remediation = $1, remediated_at = $2
       WHERE id = $3 AND remediation IS NULL AND ($4::text IS NULL OR applying_by = $4)`,
      [JSON.stringify(rem), at, id, by ?? null],
    );
    return (r.rowCount ?? 0) > 0;
  }

  async unapplied(): Promise<SuperviseRequest[]> {
    return this.#rows(
      'list the decisions not applied yet in',
      "SELECT * FROM supervise_requests WHERE status IN ('approved', 'modified') AND remediation IS NULL ORDER BY decided_at, id",
    );
  }

  async expired(now = Date.now()): Promise<SuperviseRequest[]> {
    return this.#rows(
      'list the expired supervise requests in',
      "SELECT * FROM supervise_requests WHERE status = 'pending' AND expires_at <= $1 ORDER BY created_at, id",
      [new Date(now).toISOString()],
    );
  }

  async rejectionStreak(slug: string, kind: ProposalKind): Promise<number> {
    const r = await this.database.query<{ status: string }>(
      'read the rejections of',
      "SELECT status FROM supervise_requests WHERE slug = $1 AND kind = $2 AND status NOT IN ('pending', 'cancelled') ORDER BY decided_at DESC",
      [slug, kind],
    );
    return streakOf(r.rows.map((row) => row.status));
  }
}
