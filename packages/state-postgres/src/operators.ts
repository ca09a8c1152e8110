import {
  newOperatorToken,
  noLiveOperator,
  OPERATOR_TOKEN,
  type OperatorInfo,
  type OperatorTokenStore,
  operatorTaken,
  operatorTokenHash,
} from '@bb/state';
import type { PgMigration, PostgresDatabase } from './database';

/** The `operators` component on PostgreSQL: the SQLite table's columns. Append; never edit a shipped step. */
export const OPERATORS_PG_MIGRATIONS: readonly PgMigration[] = [
  {
    version: 1,
    up: `
      CREATE TABLE operator_tokens (
        name TEXT COLLATE "C" NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        created_at TEXT COLLATE "C" NOT NULL,
        last_used_at TEXT,
        revoked_at TEXT
      );
      CREATE UNIQUE INDEX operator_tokens_active ON operator_tokens (name) WHERE revoked_at IS NULL;
    `,
  },
];

/** Operators' tokens on the PostgreSQL a fleet shares: a token made on one replica works on all. */
export class PostgresOperatorTokens implements OperatorTokenStore {
  private constructor(
    readonly database: PostgresDatabase,
    readonly now: () => number,
  ) {}

  static async open(
    database: PostgresDatabase,
    now: () => number = Date.now,
  ): Promise<PostgresOperatorTokens> {
    await database.migrate('operators', OPERATORS_PG_MIGRATIONS);
    return new PostgresOperatorTokens(database, now);
  }

  async add(name: string): Promise<string> {
    const { token, hash } = newOperatorToken(name);
    try {
      await this.database.query(
        "make an operator's token in",
        'INSERT INTO operator_tokens (name, token_hash, created_at) VALUES ($1, $2, $3)',
        [name, hash, new Date(this.now()).toISOString()],
      );
    } catch (err) {
      if ((err as { data?: { pg?: string } }).data?.pg === '23505') throw operatorTaken(name);
      throw err;
    }
    return token;
  }

  async list(): Promise<OperatorInfo[]> {
    const r = await this.database.query<Record<string, string | null>>(
      'list the operators in',
      'SELECT name, created_at, last_used_at, revoked_at FROM operator_tokens ORDER BY name, created_at',
    );
    return r.rows.map((row) => ({
      name: row['name']!,
      createdAt: row['created_at']!,
      lastUsedAt: row['last_used_at'] ?? null,
      revokedAt: row['revoked_at'] ?? null,
    }));
  }

  async revoke(name: string): Promise<void> {
    const r = await this.database.query(
      "revoke an operator's token in",
      'UPDATE operator_tokens SET revoked_at = $1 WHERE name = $2 AND revoked_at IS NULL',
      [new Date(this.now()).toISOString(), name],
    );
    if (!r.rowCount) throw noLiveOperator(name);
  }

  async verify(token: string): Promise<string | undefined> {
    if (!OPERATOR_TOKEN.test(token)) return undefined;
    // One statement: the name, and the use noted.
    const r = await this.database.query<{ name: string }>(
      "check an operator's token in",
      'UPDATE operator_tokens SET last_used_at = $1 WHERE token_hash = $2 AND revoked_at IS NULL RETURNING name',
      [new Date(this.now()).toISOString(), operatorTokenHash(token)],
    );
    return r.rows[0]?.name;
  }
}
