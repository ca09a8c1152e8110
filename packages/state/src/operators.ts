import { createHash, randomBytes } from 'node:crypto';
import { BbError } from '@bb/errors';
import type { BbDatabase, Migration } from './database';

/** An operator's name: what their decisions are recorded as. */
export const OPERATOR_NAME = /^[a-z0-9][a-z0-9._-]{0,38}$/;
/** What an operator's token looks like (`bbop_` and 256 random bits). */
export const OPERATOR_TOKEN = /^bbop_[A-Za-z0-9_-]{43}$/;

export interface OperatorInfo {
  name: string;
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
}

/**
 * Operators' own tokens for the orchestrator's API: named (decisions are recorded by
 * that name), revocable, kept only as their SHA-256 hash (a token is 256 random bits,
 * so a hash is enough); the token itself is shown once, when made. In this machine's
 * SQLite (`SqliteOperatorTokens`), or in the PostgreSQL a fleet shares
 * (`PostgresOperatorTokens` of `@bb/state-postgres`), so a token works on every
 * replica. Checked by `describeOperatorTokensConformance`.
 */
export interface OperatorTokenStore {
  /** Make a token for `name` (who has none live); returns it, the only time it is seen. */
  add(name: string): Promise<string>;
  /** Every operator, with when their token was last used; revoked ones too. */
  list(): Promise<OperatorInfo[]>;
  /** Revoke `name`'s token: the next call with it is refused. */
  revoke(name: string): Promise<void>;
  /** The operator a token belongs to, if it is theirs and not revoked (and note its use). */
  verify(token: string): Promise<string | undefined>;
}

/** The name checked, and a new token with the hash that is kept of it. */
export function newOperatorToken(name: string): { token: string; hash: string } {
  if (!OPERATOR_NAME.test(name))
    throw new BbError(
      'INVALID_INPUT',
      `an operator's name is 1 to 39 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit (got ${JSON.stringify(name)})`,
    );
  const token = `bbop_${randomBytes(32).toString('base64url')}`;
  return { token, hash: operatorTokenHash(token) };
}

export const operatorTokenHash = (token: string): string =>
  createHash('sha256').update(token).digest('hex');

/** `add`'s refusal when the name has a live token. */
export const operatorTaken = (name: string): BbError =>
  new BbError(
    'CONFLICT',
    `operator ${name} has a token already: bb operator revoke ${name} first to replace it`,
  );

/** `revoke`'s refusal when the name has no live token. */
export const noLiveOperator = (name: string): BbError =>
  new BbError(
    'NOT_FOUND',
    `no operator ${JSON.stringify(name)} with a live token: bb operator list`,
  );

export const OPERATOR_MIGRATIONS: Migration[] = [
  {
    version: 1,
    up: `
      CREATE TABLE operator_tokens (
        name TEXT NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        created_at TEXT NOT NULL,
        last_used_at TEXT,
        revoked_at TEXT
      );
      CREATE UNIQUE INDEX operator_tokens_active ON operator_tokens (name) WHERE revoked_at IS NULL;
    `,
  },
];

/** Operators' tokens in this machine's SQLite file. */
export class SqliteOperatorTokens implements OperatorTokenStore {
  readonly #db: BbDatabase;
  readonly #now: () => number;

  constructor(db: BbDatabase, now: () => number = Date.now) {
    this.#db = db;
    this.#now = now;
    db.migrate('operators', OPERATOR_MIGRATIONS);
  }

  async add(name: string): Promise<string> {
    const { token, hash } = newOperatorToken(name);
    try {
      this.#db.db
        .prepare('INSERT INTO operator_tokens (name, token_hash, created_at) VALUES (?, ?, ?)')
        .run(name, hash, new Date(this.#now()).toISOString());
    } catch (err) {
      if ((err as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE') throw operatorTaken(name);
      throw err;
    }
    return token;
  }

  async list(): Promise<OperatorInfo[]> {
    return (
      this.#db.db
        .prepare(
          'SELECT name, created_at, last_used_at, revoked_at FROM operator_tokens ORDER BY name, created_at',
        )
        .all() as Array<Record<string, string | null>>
    ).map((r) => ({
      name: r['name']!,
      createdAt: r['created_at']!,
      lastUsedAt: r['last_used_at'] ?? null,
      revokedAt: r['revoked_at'] ?? null,
    }));
  }

  async revoke(name: string): Promise<void> {
    const n = this.#db.db
      .prepare('UPDATE operator_tokens SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL')
      .run(new Date(this.#now()).toISOString(), name).changes;
    if (!n) throw noLiveOperator(name);
  }

  async verify(token: string): Promise<string | undefined> {
    if (!OPERATOR_TOKEN.test(token)) return undefined;
    const hash = operatorTokenHash(token);
    const row = this.#db.db
      .prepare('SELECT name FROM operator_tokens WHERE token_hash = ? AND revoked_at IS NULL')
      .get(hash) as { name: string } | undefined;
    if (!row) return undefined;
    this.#db.db
      .prepare('UPDATE operator_tokens SET last_used_at = ? WHERE token_hash = ?')
      .run(new Date(this.#now()).toISOString(), hash);
    return row.name;
  }
}
