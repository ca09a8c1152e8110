import { closeSync, mkdirSync, openSync, readSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { BbError, isBbError } from '@bb/errors';
import { bbHome, homeLayout } from '@bb/names';
import Database from 'better-sqlite3';

/** How hard SQLite works to make each commit survive. */
export type SynchronousMode = 'NORMAL' | 'FULL';

export interface OpenDatabaseOptions {
  /** The database file. @default `$BB_HOME/bot-bottle.db` */
  path?: string;
  /** Where `BB_HOME` is read from. @default process.env */
  env?: Record<string, string | undefined>;
  /**
   * `NORMAL` (the default): in WAL mode a commit survives a crash or `kill -9` of
   * any process; a power cut may lose the last commits but never corrupts the
   * file. `FULL` also survives power cuts, at one fsync per commit.
   * @default 'NORMAL'
   */
  synchronous?: SynchronousMode;
  /** How long a writer waits for another process's lock before `STATE_BUSY`. @default 5000 */
  busyTimeoutMs?: number;
}

/** One step of a component's schema, applied once, in order, inside a transaction. */
export interface Migration {
  version: number;
  up: string | ((db: Database.Database) => void);
}

/** `$BB_HOME`, defaulting to `~/.bot-bottle` (`bbHome` of `@bb/names`). */
export function resolveBbHome(env: Record<string, string | undefined> = process.env): string {
  return bbHome(env);
}

/** `$BB_HOME/bot-bottle.db`. */
export function defaultDatabasePath(env: Record<string, string | undefined> = process.env): string {
  return homeLayout(env).database;
}

const SQLITE_HEADER = 'SQLite format 3\u0000';

/**
 * bot-bottle's SQLite database: WAL, a busy timeout, and per-component schema
 * versions in `bb_schema`, migrated forward on open. Packages that keep their own
 * tables (state, provenance) call {@link BbDatabase.migrate} with their own
 * component name.
 */
export class BbDatabase {
  readonly path: string;
  readonly db: Database.Database;

  private constructor(path: string, db: Database.Database) {
    this.path = path;
    this.db = db;
  }

  static open(options: OpenDatabaseOptions = {}): BbDatabase {
    const path = resolve(options.path ?? defaultDatabasePath(options.env));
    ensureDirectory(dirname(path));
    checkHeader(path);
    let db: Database.Database;
    try {
      db = new Database(path);
    } catch (err) {
      throw mapSqliteError(err, path, 'open');
    }
    try {
      db.pragma(`busy_timeout = ${Math.max(0, Math.floor(options.busyTimeoutMs ?? 5000))}`);
      const mode = db.pragma('journal_mode = WAL', { simple: true });
      if (String(mode).toLowerCase() !== 'wal') {
        throw new BbError(
          'STATE_UNWRITABLE',
          `cannot use WAL journal for ${path} (got ${String(mode)})`,
        );
      }
      db.pragma(`synchronous = ${options.synchronous ?? 'NORMAL'}`);
      db.pragma('foreign_keys = ON');
      db.exec(`CREATE TABLE IF NOT EXISTS bb_schema (
        component TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        updated_at TEXT NOT NULL
      ) WITHOUT ROWID`);
    } catch (err) {
      db.close();
      throw isBbError(err) ? err : mapSqliteError(err, path, 'open');
    }
    return new BbDatabase(path, db);
  }

  /** The schema version recorded for `component` (0 when it has none). */
  schemaVersion(component: string): number {
    const row = this.db
      .prepare('SELECT version FROM bb_schema WHERE component = ?')
      .get(component) as { version: number } | undefined;
    return row?.version ?? 0;
  }

  /**
   * Bring `component`'s tables up to the newest of `migrations`. Refuses, with
   * `STATE_TOO_NEW` and without touching anything, a database written by a newer
   * bot-bottle. Safe when several processes open the database at once.
   */
  migrate(component: string, migrations: readonly Migration[]): void {
    const sorted = [...migrations].sort((a, b) => a.version - b.version);
    const newest = sorted.at(-1)?.version ?? 0;
    const run = this.db.transaction(() => {
      const current = this.schemaVersion(component);
      if (current > newest) {
        throw new BbError(
          'STATE_TOO_NEW',
          `${this.path} has ${component} schema version ${current}, but this bot-bottle knows versions up to ${newest}. ` +
            'Upgrade bot-bottle, or point BB_HOME at another directory. The database was not changed.',
          { data: { path: this.path, component, version: current, supported: newest } },
        );
      }
      for (const m of sorted) {
        if (m.version <= current) continue;
        if (typeof m.up === 'string') this.db.exec(m.up);
        else m.up(this.db);
      }
      if (newest > current) {
        this.db
          .prepare(
            `INSERT INTO bb_schema (component, version, updated_at) VALUES (?, ?, ?)
             ON CONFLICT (component) DO UPDATE SET version = excluded.version, updated_at = excluded.updated_at`,
          )
          .run(component, newest, new Date().toISOString());
      }
    });
    try {
      run.immediate();
    } catch (err) {
      throw isBbError(err) ? err : mapSqliteError(err, this.path, `migrate ${component}`);
    }
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}

function ensureDirectory(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw new BbError(
      'STATE_UNWRITABLE',
      `cannot create the state directory ${dir}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}. ` +
        'Set BB_HOME to a directory you can write.',
      { cause: err, data: { path: dir } },
    );
  }
}

function checkHeader(path: string): void {
  let size: number;
  try {
    size = statSync(path).size;
  } catch {
    return; // missing: SQLite creates it
  }
  if (size === 0) return;
  const buf = Buffer.alloc(16);
  let fd: number | undefined;
  try {
    fd = openSync(path, 'r');
    readSync(fd, buf, 0, 16, 0);
  } catch (err) {
    throw new BbError(
      'STATE_UNWRITABLE',
      `cannot read ${path}: ${(err as NodeJS.ErrnoException).code}`,
      {
        cause: err,
        data: { path },
      },
    );
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
  if (buf.toString('latin1') !== SQLITE_HEADER) {
    throw new BbError(
      'STATE_CORRUPT',
      `${path} is not an SQLite database. It was left untouched; move it aside or set BB_HOME to another directory.`,
      { data: { path } },
    );
  }
}

/** Turn a better-sqlite3 error into a BbError that names the file and what to do. */
export function mapSqliteError(err: unknown, path: string, action: string): BbError {
  const code = (err as { code?: string }).code ?? '';
  const msg = (err as Error).message ?? String(err);
  if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED')) {
    return new BbError(
      'STATE_BUSY',
      `${path} is locked by another process (${action}); try again`,
      {
        cause: err,
        data: { path, sqlite: code },
      },
    );
  }
  if (code === 'SQLITE_NOTADB' || code.startsWith('SQLITE_CORRUPT')) {
    return new BbError(
      'STATE_CORRUPT',
      `${path} is damaged or not an SQLite database (${msg}). It was left untouched; move it aside or restore a backup.`,
      { cause: err, data: { path, sqlite: code } },
    );
  }
  if (
    code.startsWith('SQLITE_READONLY') ||
    code.startsWith('SQLITE_CANTOPEN') ||
    code.startsWith('SQLITE_IOERR') ||
    code === 'SQLITE_FULL' ||
    code.startsWith('SQLITE_PERM')
  ) {
    return new BbError(
      'STATE_UNWRITABLE',
      `cannot ${action} ${path}: ${msg} (${code}). Check that its directory is writable and the disk has space, or set BB_HOME elsewhere.`,
      { cause: err, data: { path, sqlite: code } },
    );
  }
  return new BbError('INTERNAL', `unexpected SQLite error during ${action} of ${path}: ${msg}`, {
    cause: err,
    data: { path, sqlite: code },
  });
}
