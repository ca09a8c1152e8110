import { execFile, spawnSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { isBbError } from '@bb/errors';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  BbDatabase,
  defaultDatabasePath,
  resolveBbHome,
  SqliteForgeStateStore,
  STATE_MIGRATIONS,
} from '../src/index';
import { stateToRow } from '../src/rows';
import { sampleState } from '../src/testing-data';

const run = promisify(execFile);
const here = dirname(fileURLToPath(import.meta.url));
const pkg = join(here, '..');
const tsx = ['--import', 'tsx', '--conditions=@bb/source'];

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'bb-sqlite-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    return isBbError(err) ? err.code : `not a BbError: ${String(err)}`;
  }
  return undefined;
}

/** What opening the store at `path` throws (undefined when it opens). */
function openFails(path: string): unknown {
  try {
    new SqliteForgeStateStore({ path }).close();
  } catch (e) {
    return e;
  }
  return undefined;
}

describe('SqliteForgeStateStore on disk', () => {
  it('keeps rows across close and reopen', () => {
    const path = join(dir, 'bot-bottle.db');
    const a = new SqliteForgeStateStore({ path });
    a.upsert(sampleState(17, { status: 'frozen', sessionId: 's-1' }));
    a.recordDelivery('k');
    a.close();
    const b = new SqliteForgeStateStore({ path });
    expect(b.get('acme', 'widgets', 17)?.sessionId).toBe('s-1');
    expect(b.recordDelivery('k')).toBe(false);
    b.close();
  });

  it('defaults to $BB_HOME/bot-bottle.db and creates BB_HOME with mode 0700', () => {
    const home = join(dir, 'home', 'nested');
    const env = { BB_HOME: home };
    expect(resolveBbHome(env)).toBe(home);
    expect(defaultDatabasePath(env)).toBe(join(home, 'bot-bottle.db'));
    const store = new SqliteForgeStateStore({ env });
    expect(store.path).toBe(join(home, 'bot-bottle.db'));
    expect(statSync(home).mode & 0o777).toBe(0o700);
    store.close();
    expect(resolveBbHome({})).toMatch(/\.bot-bottle$/);
  });

  it('uses WAL, a busy timeout and NORMAL sync by default; FULL on request', () => {
    const store = new SqliteForgeStateStore({ path: join(dir, 'a.db') });
    const db = store.database.db;
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(db.pragma('busy_timeout', { simple: true })).toBe(5000);
    expect(db.pragma('synchronous', { simple: true })).toBe(1);
    store.close();
    const full = new SqliteForgeStateStore({ path: join(dir, 'b.db'), synchronous: 'FULL' });
    expect(full.database.db.pragma('synchronous', { simple: true })).toBe(2);
    full.close();
  });

  it('refuses a file that is not SQLite and leaves it byte for byte', () => {
    const path = join(dir, 'bot-bottle.db');
    writeFileSync(path, 'this is my shopping list, not a database\n');
    const before = readFileSync(path);
    const err = openFails(path);
    expect(isBbError(err, 'STATE_CORRUPT')).toBe(true);
    expect((err as Error).message).toContain(path);
    expect(readFileSync(path).equals(before)).toBe(true);
  });

  it('refuses a damaged SQLite file and leaves it byte for byte', () => {
    const path = join(dir, 'bot-bottle.db');
    const good = new Database(path);
    good.exec('CREATE TABLE t (x); INSERT INTO t VALUES (1);');
    good.close();
    const bytes = readFileSync(path);
    bytes.fill(0xab, 100, bytes.length); // keep the header, wreck the pages
    writeFileSync(path, bytes);
    expect(codeOf(() => new SqliteForgeStateStore({ path }))).toBe('STATE_CORRUPT');
    expect(readFileSync(path).equals(bytes)).toBe(true);
  });

  it('refuses a database from a newer schema version without changing it', () => {
    const path = join(dir, 'bot-bottle.db');
    const store = new SqliteForgeStateStore({ path });
    store.upsert(sampleState(1));
    store.database.db.prepare("UPDATE bb_schema SET version = 99 WHERE component = 'state'").run();
    store.close();
    const err = openFails(path);
    expect(isBbError(err, 'STATE_TOO_NEW')).toBe(true);
    expect((err as Error).message).toMatch(/schema version 99.*knows versions up to 3/);
    const db = new Database(path, { readonly: true });
    expect(db.prepare('SELECT count(*) AS n FROM forge_state').get()).toEqual({ n: 1 });
    expect(db.prepare("SELECT version FROM bb_schema WHERE component = 'state'").get()).toEqual({
      version: 99,
    });
    db.close();
  });

  it('migrates components forward once, in order', () => {
    const db = BbDatabase.open({ path: join(dir, 'm.db') });
    const log: number[] = [];
    const steps = [
      { version: 2, up: () => log.push(2) },
      { version: 1, up: 'CREATE TABLE extra (x INTEGER)' },
    ];
    db.migrate('extra', steps);
    db.migrate('extra', steps);
    expect(log).toEqual([2]);
    expect(db.schemaVersion('extra')).toBe(2);
    db.migrate('extra', [...steps, { version: 3, up: 'ALTER TABLE extra ADD COLUMN y TEXT' }]);
    expect(db.schemaVersion('extra')).toBe(3);
    db.close();
  });

  it('a failed migration rolls back and leaves the old version', () => {
    const db = BbDatabase.open({ path: join(dir, 'm.db') });
    db.migrate('c', [{ version: 1, up: 'CREATE TABLE c1 (x)' }]);
    expect(() =>
      db.migrate('c', [
        { version: 1, up: 'CREATE TABLE c1 (x)' },
        { version: 2, up: 'CREATE TABLE c2 (x); THIS IS NOT SQL' },
      ]),
    ).toThrow();
    expect(db.schemaVersion('c')).toBe(1);
    expect(db.db.prepare("SELECT name FROM sqlite_master WHERE name = 'c2'").get()).toBeUndefined();
    db.close();
  });

  it('says clearly when the directory cannot be written', async () => {
    const ro = join(dir, 'ro');
    mkdirSync(ro, { mode: 0o755 });
    const path = join(ro, 'bot-bottle.db');
    let out: { ok: boolean; code?: string; message?: string };
    const asRoot = process.getuid?.() === 0;
    // Root ignores permission bits, but not an immutable directory (ext4 and most
    // Linux filesystems). Where that is not possible, ask as an ordinary user.
    const immutable = asRoot && spawnSync('chattr', ['+i', ro]).status === 0;
    try {
      if (!asRoot || immutable) {
        if (!asRoot) chmodSync(ro, 0o555);
        try {
          new SqliteForgeStateStore({ path }).close();
          out = { ok: true };
        } catch (err) {
          out = {
            ok: false,
            code: (err as { code: string }).code,
            message: (err as Error).message,
          };
        }
      } else {
        chmodSync(dir, 0o755);
        const { stdout } = await run(
          process.execPath,
          [...tsx, join(here, 'fixtures', 'open.ts'), path],
          {
            cwd: pkg,
            uid: 65534,
            gid: 65534,
            env: { ...process.env, HOME: dir },
          },
        );
        out = JSON.parse(stdout);
      }
    } finally {
      if (immutable) spawnSync('chattr', ['-i', ro]);
    }
    expect(out.ok).toBe(false);
    expect(out.code).toBe('STATE_UNWRITABLE');
    expect(out.message).toContain(path);
    expect(existsSync(path)).toBe(false);
  });

  it('two processes writing one database lose no write, and each ledger key is new exactly once', async () => {
    const path = join(dir, 'shared.db');
    new SqliteForgeStateStore({ path }).close();
    const count = 300;
    const child = (who: string) =>
      run(
        process.execPath,
        [...tsx, join(here, 'fixtures', 'writer.ts'), path, who, String(count)],
        {
          cwd: pkg,
        },
      ).then(({ stdout }) => JSON.parse(stdout) as { newKeys: number });
    const [a, b] = await Promise.all([child('a'), child('b')]);
    expect(a.newKeys + b.newKeys).toBe(count);
    const store = new SqliteForgeStateStore({ path });
    expect(store.all()).toHaveLength(2 * count);
    for (let i = 1; i <= count; i++) expect(store.getDelivery(`shared-${i}`)).toBeDefined();
    store.close();
  });
});

describe('migration to version 2', () => {
  it('moves destroyed rows into the history and keeps live ones', () => {
    const dir = mkdtempSync(join(tmpdir(), 'bb-migrate-'));
    const path = join(dir, 'bot-bottle.db');
    try {
      // A version-1 file, as an older bot-bottle left it.
      const v1 = BbDatabase.open({ path });
      v1.migrate('state', STATE_MIGRATIONS.slice(0, 1));
      const insert = v1.db.prepare(
        `INSERT INTO forge_state VALUES (@owner, @repo, @issue_number, @slug, @agent_name, @bottle_names, @backend_name, @agent_git_user, @pr_number, @status, @last_checkin_at, @session_id, @cwd, @created_at, @updated_at)`,
      );
      insert.run(stateToRow(sampleState(1, { slug: 'live-1', status: 'frozen', prNumber: 9 })));
      insert.run(stateToRow(sampleState(2, { slug: 'gone-2', status: 'destroyed' })));
      v1.close();
      const store = new SqliteForgeStateStore({ path });
      expect(store.all().map((r) => r.slug)).toEqual(['live-1']);
      expect(store.history().map((r) => r.slug)).toEqual(['gone-2']);
      expect(store.findByPr('acme', 'widgets', 9)?.slug).toBe('live-1');
      store.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
