/**
 * @module
 * `@bb/state-postgres/testing`: a real, throwaway PostgreSQL server for tests
 * and benchmarks (Debian's `postgresql-15` or any `initdb`/`pg_ctl` on PATH),
 * listening only on a Unix socket in a temporary directory. Never a mock.
 *
 * ```ts
 * const pg = await startPostgres();
 * const db = await PostgresDatabase.open({ url: pg.url, schema: 'test_1' });
 * // …
 * await pg.stop();
 * ```
 */
import { execFile, execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface TestPostgres {
  /** `postgres://postgres@<socket dir>:<port>/postgres`, for `PostgresDatabase.open` or `BB_DATABASE_URL`. */
  url: string;
  /** The server's directory (data, socket, log). */
  dir: string;
  /** Stop the server at once and remove its directory. */
  stop(): Promise<void>;
  /**
   * An outage: stop the server at once (every connection dropped, as a crash
   * would), wait `downMs`, and start it again on the same data and socket.
   * Only for a server started `durable` (else its last commits would be lost).
   */
  restart(downMs?: number): Promise<void>;
}

export interface StartPostgresOptions {
  /**
   * Make every commit durable (`fsync`, `synchronous_commit`) as a production
   * server would. Tests leave it off; benchmarks that compare with raw `pg`
   * run both on the same server either way.
   * @default false
   */
  durable?: boolean;
  /** `max_connections`. @default 200 */
  maxConnections?: number;
}

/** Where `initdb` and `pg_ctl` are: on PATH, else Debian's newest `/usr/lib/postgresql/<n>/bin`. */
export function findPostgresBin(): string | undefined {
  for (const dir of (process.env['PATH'] ?? '').split(':'))
    if (dir && existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'pg_ctl'))) return dir;
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root)
    .filter((v) => /^\d+$/.test(v))
    .sort((a, b) => Number(b) - Number(a));
  for (const v of versions)
    if (existsSync(join(root, v, 'bin', 'initdb'))) return join(root, v, 'bin');
  return undefined;
}

/** Whether a PostgreSQL server can be started here. */
export function postgresAvailable(): boolean {
  return findPostgresBin() !== undefined;
}

/**
 * Why tests needing PostgreSQL should skip here, or `undefined` when they run:
 * always when it is installed, and under `BB_REQUIRE_DOCKER=1` (CI) even when it
 * is not, so they fail instead of skipping.
 */
export function postgresSkipReason(): string | undefined {
  if (postgresAvailable() || process.env['BB_REQUIRE_DOCKER'] === '1') return undefined;
  return 'PostgreSQL is not installed: run scripts/ensure-postgres.sh';
}

/**
 * Start a PostgreSQL server of its own in a temporary directory (about a
 * second): no TCP port, trust authentication on its socket only. As root it
 * runs as the `postgres` user (PostgreSQL refuses root).
 */
export async function startPostgres(options: StartPostgresOptions = {}): Promise<TestPostgres> {
  const bin = findPostgresBin();
  if (!bin)
    throw new Error(
      'PostgreSQL is not installed (no initdb/pg_ctl on PATH or in /usr/lib/postgresql/*/bin): install Debian postgresql-15, or run scripts/ensure-postgres.sh',
    );
  const dir = mkdtempSync(join(tmpdir(), 'bb-pg-'));
  const as: { uid?: number; gid?: number } = {};
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, uid, gid);
    as.uid = uid;
    as.gid = gid;
  }
  const data = join(dir, 'data');
  const port = 5432;
  const settings = [
    "listen_addresses=''",
    `unix_socket_directories='${dir}'`,
    `port=${port}`,
    `max_connections=${options.maxConnections ?? 200}`,
    ...(options.durable ? [] : ['fsync=off', 'synchronous_commit=off', 'full_page_writes=off']),
  ];
  const start = () =>
    run(
      join(bin, 'pg_ctl'),
      [
        '-D',
        data,
        '-l',
        join(dir, 'server.log'),
        '-w',
        '-t',
        '60',
        '-o',
        settings.map((s) => `-c ${s}`).join(' '),
        'start',
      ],
      { ...as, cwd: dir },
    );
  const halt = () =>
    run(join(bin, 'pg_ctl'), ['-D', data, '-m', 'immediate', 'stop'], { ...as, cwd: dir });
  try {
    await run(
      join(bin, 'initdb'),
      ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C', '--no-sync'],
      { ...as, cwd: dir, env: { ...process.env, LC_ALL: 'C' } },
    );
    await start();
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(
      `could not start PostgreSQL in ${dir}: ${(err as { stderr?: string }).stderr ?? String(err)}`,
    );
  }
  let stopped = false;
  return {
    url: `postgres://postgres@${encodeURIComponent(dir)}:${port}/postgres`,
    dir,
    async stop() {
      if (stopped) return;
      stopped = true;
      await halt().catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
    async restart(downMs = 0) {
      if (stopped) throw new Error('this PostgreSQL was stopped for good');
      // Without durable commits an immediate stop loses the last ones (a commit the
      // clients were told of is gone after): an outage no production server has.
      if (!options.durable)
        throw new Error(
          'restart() needs a server started with { durable: true }: without it the commits of the last moments before the stop are lost',
        );
      await halt();
      if (downMs > 0) await new Promise((r) => setTimeout(r, downMs));
      await start();
    },
  };
}
