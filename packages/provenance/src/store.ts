import { BbError } from '@bb/errors';
import type { BbDatabase, Migration } from '@bb/state';
import { checkTrustedKey, type TrustedKey } from './keys';
import { GENESIS_HASH, type SignedRecord } from './record';

export const PROVENANCE_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    up: `
      CREATE TABLE provenance_records (
        id          TEXT PRIMARY KEY,
        slug        TEXT NOT NULL,
        owner       TEXT,
        repo        TEXT,
        issue       INTEGER,
        agent       TEXT NOT NULL,
        status      TEXT NOT NULL,
        started_at  TEXT NOT NULL,
        hash        TEXT NOT NULL UNIQUE,
        prev        TEXT NOT NULL,
        signed      TEXT NOT NULL
      );
      CREATE INDEX provenance_by_slug ON provenance_records (slug, started_at);
      CREATE INDEX provenance_by_started ON provenance_records (started_at);
    `,
  },
  {
    // The keys the fleet trusts to sign records (each orchestrator adds its own).
    version: 2,
    up: `
      CREATE TABLE provenance_keys (
        key_id      TEXT PRIMARY KEY,
        public_key  TEXT NOT NULL,
        added_by    TEXT NOT NULL,
        added_at    TEXT NOT NULL
      );
    `,
  },
];

/** A value now or later: SQLite answers at once, a network database with a promise. */
export type Awaitable<T> = T | Promise<T>;

/**
 * Where signed run records are kept, one hash chain per bottle. Implementations
 * must pass `describeRunStoreConformance` from `@bb/provenance/testing`.
 * Callers always `await`; a refusal is a throw or a rejection alike.
 */
export interface RunRecordStore {
  /** The latest hash of a bottle's chain (the genesis hash when it has none). */
  head(slug: string): Awaitable<string>;
  /**
   * Append a record. It must continue its bottle's chain (its `prev` is the
   * chain's head) or the append is a `CONFLICT` and nothing is stored; two
   * writers racing on one chain: one wins, the other is a `CONFLICT`.
   */
  append(s: SignedRecord): Awaitable<void>;
  /** One record by id, or `undefined`. */
  get(id: string): Awaitable<SignedRecord | undefined>;
  /** One bottle's records, oldest first (its chain). */
  chain(slug: string): Awaitable<SignedRecord[]>;
  /** Newest first, filtered, a page of `limit` at a time (pages count from 1). */
  list(
    filter?: RunFilter,
    page?: number,
    limit?: number,
  ): Awaitable<{ total: number; records: SignedRecord[] }>;
  /**
   * Trust `key` to sign this store's records (an orchestrator adds its own at
   * start). Adding a key already trusted changes nothing (its first `by` and
   * `addedAt` stay); a key whose id is not its own is `INVALID_INPUT` or `STATE_CORRUPT`.
   */
  trustKey(key: TrustedKey): Awaitable<void>;
  /** Every key trusted, oldest first: what `keyRing` makes the verifiers' ring of. */
  trustedKeys(): Awaitable<TrustedKey[]>;
}

export interface RunFilter {
  repo?: string;
  issue?: number;
  agent?: string;
  status?: string;
  slug?: string;
}

/** The status a record is listed under: done status, watchdog, or exit code. */
export function recordStatus(s: SignedRecord): string {
  const r = s.record;
  if (r.watchdogFired && r.watchdogFired.reason !== 'exit_without_signal') return 'watchdog';
  if (r.done) return r.done.status;
  // An agent that stopped without signal_done: its CLI's error, its exit code, or neither.
  if (r.agentError || (r.exitCode !== null && r.exitCode !== 0)) return 'failed';
  return r.watchdogFired ? 'watchdog' : 'exited';
}

/** Signed run records in the bot-bottle SQLite database (table `provenance_records`). */
export class ProvenanceStore implements RunRecordStore {
  constructor(readonly database: BbDatabase) {
    database.migrate('provenance', PROVENANCE_MIGRATIONS);
  }

  trustKey(key: TrustedKey): void {
    const k = checkTrustedKey(key);
    this.database.db
      .prepare(
        `INSERT INTO provenance_keys (key_id, public_key, added_by, added_at) VALUES (?, ?, ?, ?)
         ON CONFLICT (key_id) DO NOTHING`,
      )
      .run(k.keyId, k.publicKey, k.by, k.addedAt);
  }

  trustedKeys(): TrustedKey[] {
    const rows = this.database.db
      .prepare(
        'SELECT key_id, public_key, added_by, added_at FROM provenance_keys ORDER BY added_at, key_id',
      )
      .all() as Array<{ key_id: string; public_key: string; added_by: string; added_at: string }>;
    return rows.map((r) => ({
      keyId: r.key_id,
      publicKey: r.public_key,
      by: r.added_by,
      addedAt: r.added_at,
    }));
  }

  /** The latest hash of a bottle's chain (the genesis hash when it has none). */
  head(slug: string): string {
    const row = this.database.db
      .prepare(
        'SELECT hash FROM provenance_records WHERE slug = ? ORDER BY started_at DESC, rowid DESC LIMIT 1',
      )
      .get(slug) as { hash: string } | undefined;
    return row?.hash ?? GENESIS_HASH;
  }

  /** Append a record; it must continue its bottle's chain. */
  append(s: SignedRecord): void {
    // Head check and insert in one write transaction: another process appending to
    // the same chain waits, then sees the new head.
    this.database.db.transaction(() => this.#append(s)).immediate();
  }

  #append(s: SignedRecord): void {
    const head = this.head(s.record.slug);
    if (s.record.prev !== head) {
      throw new BbError(
        'CONFLICT',
        `record ${s.record.id} names ${s.record.prev.slice(0, 12)} as previous, but ${s.record.slug}'s chain ends at ${head.slice(0, 12)}`,
      );
    }
    const f = s.record.forge;
    this.database.db
      .prepare(
        `INSERT INTO provenance_records (id, slug, owner, repo, issue, agent, status, started_at, hash, prev, signed)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(
        s.record.id,
        s.record.slug,
        f?.owner ?? null,
        f?.repo ?? null,
        f?.issue ?? null,
        s.record.agent,
        recordStatus(s),
        s.record.startedAt,
        s.hash,
        s.record.prev,
        JSON.stringify(s),
      );
  }

  get(id: string): SignedRecord | undefined {
    const row = this.database.db
      .prepare('SELECT signed FROM provenance_records WHERE id = ?')
      .get(id) as { signed: string } | undefined;
    return row ? (JSON.parse(row.signed) as SignedRecord) : undefined;
  }

  /** One bottle's records, oldest first (its chain). */
  chain(slug: string): SignedRecord[] {
    return (
      this.database.db
        .prepare('SELECT signed FROM provenance_records WHERE slug = ? ORDER BY started_at, rowid')
        .all(slug) as Array<{ signed: string }>
    ).map((r) => JSON.parse(r.signed) as SignedRecord);
  }

  /** Newest first, filtered, paginated. */
  list(filter: RunFilter = {}, page = 1, limit = 20): { total: number; records: SignedRecord[] } {
    const where: string[] = [];
    const args: unknown[] = [];
    if (filter.repo) {
      const [owner, repo] = filter.repo.split('/');
      where.push('owner = ? AND repo = ?');
      args.push(owner, repo);
    }
    const add = (sql: string, value: unknown) => {
      where.push(sql);
      args.push(value);
    };
    if (filter.issue !== undefined) add('issue = ?', filter.issue);
    if (filter.agent) add('agent = ?', filter.agent);
    if (filter.status) add('status = ?', filter.status);
    if (filter.slug) add('slug = ?', filter.slug);
    const clause = where.length ? `WHERE ${where.join(' AND ')}` : '';
    const total = (
      this.database.db
        .prepare(`SELECT count(*) AS n FROM provenance_records ${clause}`)
        .get(...args) as { n: number }
    ).n;
    const rows = this.database.db
      .prepare(
        `SELECT signed FROM provenance_records ${clause} ORDER BY started_at DESC, rowid DESC LIMIT ? OFFSET ?`,
      )
      .all(...args, limit, (page - 1) * limit) as Array<{ signed: string }>;
    return { total, records: rows.map((r) => JSON.parse(r.signed) as SignedRecord) };
  }
}
