import { BbError } from '@bb/errors';
import {
  checkTrustedKey,
  GENESIS_HASH,
  type RunFilter,
  type RunRecordStore,
  recordStatus,
  type SignedRecord,
  type TrustedKey,
} from '@bb/provenance';
import type pg from 'pg';
import type { PostgresDatabase } from './database';
import { RUNS_PG_MIGRATIONS } from './migrations';

const HEAD =
  'SELECT hash FROM provenance_records WHERE slug = $1 ORDER BY started_at DESC, seq DESC LIMIT 1';

/**
 * Signed run records on PostgreSQL (table `provenance_records`). An append
 * checks and extends its bottle's chain under a per-chain advisory lock, and a
 * unique index forbids two records following the same one: replicas racing on
 * a chain cannot fork it.
 */
export class PostgresRunRecordStore implements RunRecordStore {
  private constructor(readonly database: PostgresDatabase) {}

  static async open(database: PostgresDatabase): Promise<PostgresRunRecordStore> {
    await database.migrate('provenance', RUNS_PG_MIGRATIONS);
    return new PostgresRunRecordStore(database);
  }

  async trustKey(key: TrustedKey): Promise<void> {
    const k = checkTrustedKey(key);
    await this.database.query(
      'trust a signing key in',
      `INSERT INTO provenance_keys (key_id, public_key, added_by, added_at) VALUES ($1, $2, $3, $4)
       ON CONFLICT (key_id) DO NOTHING`,
      [k.keyId, k.publicKey, k.by, k.addedAt],
    );
  }

  async trustedKeys(): Promise<TrustedKey[]> {
    const r = await this.database.query<{
      key_id: string;
      public_key: string;
      added_by: string;
      added_at: string;
    }>(
      'read the trusted keys of',
      'SELECT key_id, public_key, added_by, added_at FROM provenance_keys ORDER BY added_at, key_id',
    );
    return r.rows.map((row) => ({
      keyId: row.key_id,
      publicKey: row.public_key,
      by: row.added_by,
      addedAt: row.added_at,
    }));
  }

  async head(slug: string): Promise<string> {
    const r = await this.database.query<{ hash: string }>('read a chain in', HEAD, [slug]);
    return r.rows[0]?.hash ?? GENESIS_HASH;
  }

  async append(s: SignedRecord): Promise<void> {
    const rec = s.record;
    await this.database.transaction('append a run record to', async (c: pg.PoolClient) => {
      await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`bb:chain:${rec.slug}`]);
      const head =
        (await c.query<{ hash: string }>(HEAD, [rec.slug])).rows[0]?.hash ?? GENESIS_HASH;
      if (rec.prev !== head)
        throw new BbError(
          'CONFLICT',
          `record ${rec.id} names ${rec.prev.slice(0, 12)} as previous, but ${rec.slug}'s chain ends at ${head.slice(0, 12)}`,
        );
      try {
        await c.query(
          `INSERT INTO provenance_records (id, slug, owner, repo, issue, agent, status, started_at, hash, prev, signed)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
          [
            rec.id,
            rec.slug,
            rec.forge?.owner ?? null,
            rec.forge?.repo ?? null,
            rec.forge?.issue ?? null,
            rec.agent,
            recordStatus(s),
            rec.startedAt,
            s.hash,
            rec.prev,
            JSON.stringify(s),
          ],
        );
      } catch (err) {
        if ((err as { code?: string }).code === '23505')
          throw new BbError('CONFLICT', `record ${rec.id} (or its hash) is stored already`, {
            cause: err,
          });
        throw err;
      }
    });
  }

  async get(id: string): Promise<SignedRecord | undefined> {
    const r = await this.database.query<{ signed: string }>(
      'read a run record from',
      'SELECT signed FROM provenance_records WHERE id = $1',
      [id],
    );
    return r.rows[0] ? (JSON.parse(r.rows[0].signed) as SignedRecord) : undefined;
  }

  async chain(slug: string): Promise<SignedRecord[]> {
    const r = await this.database.query<{ signed: string }>(
      'read a chain in',
      'SELECT signed FROM provenance_records WHERE slug = $1 ORDER BY started_at, seq',
      [slug],
    );
    return r.rows.map((row) => JSON.parse(row.signed) as SignedRecord);
  }

  async list(
    filter: RunFilter = {},
    page = 1,
    limit = 20,
  ): Promise<{ total: number; records: SignedRecord[] }> {
    const where: string[] = [];
    const args: unknown[] = [];
    const add = (column: string, value: unknown) => {
      args.push(value);
      where.push(`${column} = $${args.length}`);
    };
    if (filter.repo) {
      const [owner, repo] = filter.repo.split('/');
      add('owner', owner);
      add('repo', repo);
    }
    if (filter.issue !== undefined) add('issue', filter.issue);
    if (filter.agent) add('agent', filter.agent);
    if (filter.status) add('status', filter.status);
    if (filter.slug) add('slug', filter.slug);
    const clause = where.length ? `WHERE ${where.join(' AND ')}` : '';
    const total = await this.database.query<{ n: string }>(
      'count run records in',
      `SELECT count(*) AS n FROM provenance_records ${clause}`,
      args,
    );
    const rows = await this.database.query<{ signed: string }>(
      'list run records in',
      `SELECT signed FROM provenance_records ${clause} ORDER BY started_at DESC, seq DESC
       LIMIT $${args.length + 1} OFFSET $${args.length + 2}`,
      [...args, limit, (page - 1) * limit],
    );
    return {
      total: Number(total.rows[0]?.n ?? 0),
      records: rows.rows.map((row) => JSON.parse(row.signed) as SignedRecord),
    };
  }
}
