import { createHash } from 'node:crypto';
import { BbError, isBbError } from '@bb/errors';
import pg from 'pg';

/** One step of a component's PostgreSQL schema. Append; never edit a shipped step. */
export interface PgMigration {
  version: number;
  up: string;
}

export interface OpenPostgresOptions {
  /** `postgres://user:password@host:port/database` (a socket directory as a %2F-encoded host). */
  url: string;
  /**
   * The schema bot-bottle's tables live in, created when missing: several
   * installs (or tests) may share one database.
   * @default the URL's `?schema=` parameter, else 'public'
   */
  schema?: string;
  /** Connections in the pool. @default 10 */
  max?: number;
  /** A statement running longer is cancelled (`STATE_BUSY`). @default 30 s */
  statementTimeoutMs?: number;
  /** Waiting for a free connection longer fails (`STATE_BUSY`). @default 10 s */
  connectTimeoutMs?: number;
  /** Shown in `pg_stat_activity`. @default 'bot-bottle' */
  applicationName?: string;
}

const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

const names = new Map<string, string>();

/** A prepared statement's name for `text` (the same text, the same name, in every pool). */
export function statementName(text: string): string {
  let name = names.get(text);
  if (!name) {
    name = `bb_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
    names.set(text, name);
  }
  return name;
}

/** The `?schema=` parameter of a database URL. */
function schemaOf(url: string): string | undefined {
  try {
    return new URL(url).searchParams.get('schema') ?? undefined;
  } catch {
    return undefined;
  }
}

/**
 * The URL as messages and logs show it: user, host, port, database and schema
 * only (no password, no other parameter: `?password=` or `?sslpassword=` would
 * carry secrets too).
 */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    const schema = u.searchParams.get('schema');
    const user = u.username ? `${u.username}@` : '';
    return `${u.protocol}//${user}${u.host}${u.pathname}${schema ? `?schema=${encodeURIComponent(schema)}` : ''}`;
  } catch {
    return '(an unparsable database URL)';
  }
}

/**
 * A pool of connections to one PostgreSQL database, with per-component
 * migrations (table `bb_schema`, the same bookkeeping as the SQLite file).
 * Every error is a `BbError` whose message names the server, never its password.
 */
export class PostgresDatabase {
  readonly pool: pg.Pool;
  /** The URL with its password hidden. */
  readonly where: string;
  readonly schema: string;

  /** How a connection of its own is made (the pool's settings): for `listen`. */
  readonly #config: pg.ClientConfig;
  readonly #listeners = new Set<{ stop(): void }>();

  private constructor(pool: pg.Pool, where: string, schema: string, config: pg.ClientConfig) {
    this.pool = pool;
    this.where = where;
    this.schema = schema;
    this.#config = config;
  }

  /**
   * Hear `channel`'s notifications (`NOTIFY`, `pg_notify`) on a connection of
   * their own: `onMessage` gets each payload. The connection is made again when
   * it drops (an outage, a restart: 0.25 s doubling to 5 s between tries), and
   * `onGap` is called once it is back, since what was sent meanwhile was not
   * heard. Returns what stops it.
   */
  listen(channel: string, onMessage: (payload: string) => void, onGap: () => void): () => void {
    if (!/^[a-z_][a-z0-9_]{0,62}$/.test(channel))
      throw new BbError(
        'INVALID_INPUT',
        `channel ${JSON.stringify(channel)} is not a plain SQL name`,
      );
    let stopped = false;
    let client: pg.Client | undefined;
    let wait = 250;
    let connected = false;
    const connect = async (): Promise<void> => {
      if (stopped) return;
      // TCP keep-alive: a connection left half-open by a failover is found dead, and made again.
      const c = new pg.Client({ ...this.#config, keepAlive: true });
      client = c;
      let failed = false;
      const retry = () => {
        if (failed || stopped) return;
        failed = true;
        c.removeAllListeners('notification');
        c.end().catch(() => {});
        const t = setTimeout(() => void connect(), wait);
        t.unref();
        wait = Math.min(wait * 2, 5000);
      };
      c.on('error', retry);
      c.on('end', retry);
      c.on('notification', (m) => {
        if (m.channel === channel) onMessage(m.payload ?? '');
      });
      try {
        await c.connect();
        await c.query(`LISTEN ${channel}`);
      } catch {
        retry();
        return;
      }
      wait = 250;
      if (connected) onGap();
      connected = true;
    };
    void connect();
    const handle = {
      stop: () => {
        stopped = true;
        client?.removeAllListeners();
        client?.on('error', () => {});
        client?.end().catch(() => {});
      },
    };
    this.#listeners.add(handle);
    return () => {
      this.#listeners.delete(handle);
      handle.stop();
    };
  }

  /** Connect (one round trip, to fail early with a clear error) and create the schema. */
  static async open(options: OpenPostgresOptions): Promise<PostgresDatabase> {
    const schema = options.schema ?? schemaOf(options.url) ?? 'public';
    if (!SCHEMA_NAME.test(schema))
      throw new BbError(
        'INVALID_INPUT',
        `schema ${JSON.stringify(schema)} is not a plain lower-case SQL name (letters, digits, _)`,
      );
    if (!/^postgres(ql)?:\/\//.test(options.url))
      throw new BbError(
        'INVALID_INPUT',
        `database URL ${redactUrl(options.url)} is not a postgres:// URL (e.g. postgres://bb@db.internal:5432/bot_bottle)`,
      );
    const where = redactUrl(options.url);
    const config: pg.ClientConfig = {
      connectionString: options.url,
      statement_timeout: options.statementTimeoutMs ?? 30_000,
      connectionTimeoutMillis: options.connectTimeoutMs ?? 10_000,
      application_name: options.applicationName ?? 'bot-bottle',
      options: `-c search_path=${schema}`,
    };
    const pool = new pg.Pool({ ...config, max: options.max ?? 10 });
    // A connection the server drops while idle is replaced; it must not crash the process.
    pool.on('error', () => {});
    const db = new PostgresDatabase(pool, where, schema, config);
    try {
      await db.query('open', `CREATE SCHEMA IF NOT EXISTS ${schema}`);
    } catch (err) {
      await pool.end().catch(() => {});
      throw err;
    }
    return db;
  }

  /** Run one statement; errors are mapped to `BbError`s naming `action`. */
  async query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    action: string,
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>> {
    try {
      // Named, so each connection parses and plans a statement once, not per call.
      return await this.pool.query<R>({ name: statementName(text), text, values: values ?? [] });
    } catch (err) {
      throw mapPgError(err, this.where, action);
    }
  }

  /** Run `fn` in one transaction on one connection: committed when it returns, rolled back when it throws. */
  async transaction<T>(action: string, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw mapPgError(err, this.where, action);
    }
    let broken = false;
    // A connection the server drops while it is checked out (an outage mid-transaction)
    // fails the statement in flight; its 'error' event must not end the process.
    const dropped = () => {
      broken = true;
    };
    client.on('error', dropped);
    try {
      await client.query('BEGIN');
      const out = await fn(client);
      await client.query('COMMIT');
      return out;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {
        broken = true;
      });
      throw isBbError(err) ? err : mapPgError(err, this.where, action);
    } finally {
      client.removeListener('error', dropped);
      client.release(broken);
    }
  }

  /** The schema version `component` is at (0: never migrated). */
  async schemaVersion(component: string): Promise<number> {
    await this.#bookkeeping();
    const r = await this.query<{ version: number }>(
      'read the schema version of',
      'SELECT version FROM bb_schema WHERE component = $1',
      [component],
    );
    return r.rows[0]?.version ?? 0;
  }

  /**
   * Bring `component`'s tables up to the newest of `migrations`, in one
   * transaction under an advisory lock: replicas starting together migrate
   * once. Refuses (`STATE_TOO_NEW`, nothing changed) a schema written by a
   * newer bot-bottle.
   */
  async migrate(component: string, migrations: readonly PgMigration[]): Promise<void> {
    await this.#bookkeeping();
    const sorted = [...migrations].sort((a, b) => a.version - b.version);
    const newest = sorted.at(-1)?.version ?? 0;
    await this.transaction(`migrate ${component} in`, async (c) => {
      await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`bb:migrate:${this.schema}`]);
      const r = await c.query<{ version: number }>(
        'SELECT version FROM bb_schema WHERE component = $1',
        [component],
      );
      const current = r.rows[0]?.version ?? 0;
      if (current > newest)
        throw new BbError(
          'STATE_TOO_NEW',
          `${this.where} (schema ${this.schema}) has ${component} schema version ${current}, but this bot-bottle knows versions up to ${newest}. Upgrade bot-bottle. The database was not changed.`,
          { data: { component, version: current, supported: newest } },
        );
      for (const m of sorted) if (m.version > current) await c.query(m.up);
      if (newest > current)
        await c.query(
          `INSERT INTO bb_schema (component, version, updated_at) VALUES ($1, $2, $3)
           ON CONFLICT (component) DO UPDATE SET version = excluded.version, updated_at = excluded.updated_at`,
          [component, newest, new Date().toISOString()],
        );
    });
  }

  #bookkept = false;
  async #bookkeeping(): Promise<void> {
    if (this.#bookkept) return;
    await this.transaction('create the schema table in', async (c) => {
      await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`bb:migrate:${this.schema}`]);
      await c.query(`CREATE TABLE IF NOT EXISTS bb_schema (
        component  TEXT PRIMARY KEY,
        version    INTEGER NOT NULL,
        updated_at TEXT NOT NULL
      )`);
    });
    this.#bookkept = true;
  }

  async close(): Promise<void> {
    for (const l of [...this.#listeners]) l.stop();
    this.#listeners.clear();
    await this.pool.end().catch(() => {});
  }
}

const BUSY = new Set([
  '40001', // serialization_failure
  '40P01', // deadlock_detected
  '55P03', // lock_not_available
  '53300', // too_many_connections
  '57014', // query_canceled (statement_timeout)
]);

/** A `pg` error as a `BbError`: what was being done, where, and what to do; never the password. */
export function mapPgError(err: unknown, where: string, action: string): BbError {
  if (isBbError(err)) return err;
  const code = (err as { code?: string }).code ?? '';
  const msg = (err as Error).message ?? String(err);
  if (BUSY.has(code))
    return new BbError(
      'STATE_BUSY',
      `PostgreSQL at ${where} was busy (${action}): ${msg}; try again`,
      {
        cause: err,
        data: { pg: code },
      },
    );
  if (code === '22021' || code === '22P05')
    return new BbError(
      'INVALID_INPUT',
      `a value cannot be stored in PostgreSQL (${action}): ${msg}`,
      {
        cause: err,
        data: { pg: code },
      },
    );
  if (
    code.startsWith('08') ||
    code.startsWith('57P') ||
    code.startsWith('53') ||
    code === '25006' ||
    ['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'ETIMEDOUT', 'EPIPE', 'ENOENT'].includes(code) ||
    /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error/i.test(
      msg,
    )
  )
    return new BbError(
      'STATE_UNWRITABLE',
      `cannot reach PostgreSQL at ${where} (${action}): ${msg}. Check that the server runs and BB_DATABASE_URL is right.`,
      { cause: err, data: { pg: code } },
    );
  if (code === '28P01' || code === '28000' || code === '3D000' || code === '42501')
    return new BbError(
      'STATE_UNWRITABLE',
      `PostgreSQL at ${where} refused bot-bottle (${action}): ${msg}. Check the user, password, database and grants in BB_DATABASE_URL.`,
      { cause: err, data: { pg: code } },
    );
  return new BbError(
    'INTERNAL',
    `unexpected PostgreSQL error during ${action} at ${where}: ${msg}`,
    {
      cause: err,
      data: { pg: code },
    },
  );
}
