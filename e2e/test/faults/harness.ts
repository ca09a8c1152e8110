// The fault-injection harness: the orchestrator as a real process on a real
// Docker engine, with the Gitea-compatible test server behind a fault proxy
// (what the orchestrator, its clones and every bottle's sidecar talk to), the
// engine behind a socket proxy that can drop every connection, and helpers
// that look at the outcome from the outside, as an operator would.
//
// BB_FAULTS_ORCHESTRATOR names another build's `apps/orchestrator/dist/main.js`:
// the suite is shown to fail on a build without what it checks that way.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import {
  createWriteStream,
  existsSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  unlinkSync,
} from 'node:fs';
import { createServer as createHttpServer, request, type Server } from 'node:http';
import { createRequire } from 'node:module';
import { connect, createServer as createNetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/testing';
import {
  bottlePaths,
  DockerBackend,
  destroy,
  HOME_LABEL,
  homeLabel,
  listBottles,
  readMeta,
} from '@bb/headless';
import type { RunRecord } from '@bb/provenance';
import { BASE_IMAGE } from '@bb/tooling/docker';
import { fileIssue, forgeWorld, makeHome, until } from '../support';

// The state package's own SQLite driver (the e2e package does not depend on it directly).
const require = createRequire(createRequire(import.meta.url).resolve('@bb/state'));
interface SqliteDb {
  prepare(sql: string): { get(...args: unknown[]): unknown; all(...args: unknown[]): unknown[] };
  pragma(text: string): unknown;
  close(): void;
}
const Sqlite = require('better-sqlite3') as new (
  path: string,
  options: { readonly: boolean; fileMustExist: boolean },
) => SqliteDb;

interface Row {
  slug: string;
  status: 'running' | 'frozen' | 'destroyed';
  prNumber: number | null;
  lastCheckinAt: string;
}

export const TOKEN = 'bb-claude-token-faults-4242';
export const SECRET = 'faults-webhook-secret';
export const MAIN =
  process.env['BB_FAULTS_ORCHESTRATOR'] ??
  fileURLToPath(new URL('../../../apps/orchestrator/dist/main.js', import.meta.url));

export type Fault =
  /** Answer 502. */
  | '502'
  /** Answer 429 with `Retry-After: 1`. */
  | '429'
  /** Never answer (the connection stays open until the proxy closes). */
  | 'hang'
  /** Close the connection without an answer. */
  | 'reset'
  /** Forward, but hand the answer's body back a few bytes at a time over ~3 s. */
  | 'slow';

interface Rule {
  match: RegExp;
  times: number;
  fault: Fault;
}

/** An HTTP proxy in front of the forge that fails requests as it is told. */
export class FaultProxy {
  readonly #server: Server;
  readonly #rules: Rule[] = [];
  readonly #held = new Set<Socket>();
  /** Every request, as `METHOD /path`, with the fault it met (if any). */
  readonly seen: Array<{ line: string; fault?: Fault }> = [];
  url = '';

  constructor(readonly upstream: URL) {
    this.#server = createHttpServer((req, res) => {
      const line = `${req.method} ${req.url}`;
      const rule = this.#rules.find((r) => r.times > 0 && r.match.test(line));
      if (rule) rule.times--;
      this.seen.push({ line, ...(rule ? { fault: rule.fault } : {}) });
      switch (rule?.fault) {
        case '502':
          req.resume();
          res.writeHead(502, { 'content-type': 'text/plain' }).end('bad gateway (fault)');
          return;
        case '429':
          req.resume();
          res.writeHead(429, { 'retry-after': '1' }).end('slow down (fault)');
          return;
        case 'hang':
          this.#held.add(req.socket);
          req.socket.once('close', () => this.#held.delete(req.socket));
          return;
        case 'reset':
          req.socket.destroy();
          return;
      }
      const up = request(
        {
          host: upstream.hostname,
          port: upstream.port,
          method: req.method,
          path: req.url,
          headers: { ...req.headers, host: upstream.host },
        },
        (r) => {
          res.writeHead(r.statusCode ?? 502, r.headers);
          if (rule?.fault !== 'slow') {
            r.pipe(res);
            return;
          }
          const chunks: Buffer[] = [];
          r.on('data', (c: Buffer) => chunks.push(c));
          r.on('end', () => {
            const body = Buffer.concat(chunks);
            const step = Math.max(1, Math.ceil(body.length / 10));
            let at = 0;
            const tick = setInterval(() => {
              if (at >= body.length || res.destroyed) {
                clearInterval(tick);
                res.end();
                return;
              }
              res.write(body.subarray(at, at + step));
              at += step;
            }, 300);
          });
        },
      );
      up.on('error', () => res.destroy());
      req.pipe(up);
    });
  }

  async listen(): Promise<this> {
    await new Promise<void>((r) => this.#server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.#server.address() as { port: number }).port}`;
    return this;
  }

  /** Fail the next `times` requests whose `METHOD /path` matches. */
  fail(match: RegExp, fault: Fault, times = 1): void {
    this.#rules.push({ match, fault, times });
  }

  /** Forget every rule and let hung requests go (their connections close). */
  heal(): void {
    this.#rules.length = 0;
    for (const s of this.#held) s.destroy();
    this.#held.clear();
  }

  faulted(match: RegExp): number {
    return this.seen.filter((s) => s.fault && match.test(s.line)).length;
  }

  async close(): Promise<void> {
    this.heal();
    this.#server.closeAllConnections();
    await new Promise((r) => this.#server.close(r));
  }
}

/**
 * A Unix-socket proxy for the Docker engine (set as DOCKER_HOST of the
 * orchestrator only): `drop()` cuts every connection and refuses new ones
 * until `restore()`. The real daemon is never touched.
 */
export class EngineProxy {
  readonly path: string;
  readonly #server = createNetServer((client) => this.#accept(client));
  readonly #open = new Set<Socket>();
  #down = false;

  /** The real engine's socket, as this process knows it now. */
  readonly #real = process.env['DOCKER_HOST']?.replace(/^unix:\/\//, '') ?? '/var/run/docker.sock';

  constructor(dir: string) {
    this.path = join(dir, 'docker.sock');
  }

  get dockerHost(): string {
    return `unix://${this.path}`;
  }

  #accept(client: Socket): void {
    if (this.#down) {
      client.destroy();
      return;
    }
    const engine = connect(this.#real);
    for (const s of [client, engine]) {
      this.#open.add(s);
      s.on('close', () => this.#open.delete(s));
      s.on('error', () => {});
    }
    client.pipe(engine).pipe(client);
    client.on('close', () => engine.destroy());
    engine.on('close', () => client.destroy());
  }

  async listen(): Promise<this> {
    await new Promise<void>((r) => this.#server.listen(this.path, r));
    return this;
  }

  drop(): void {
    this.#down = true;
    for (const s of this.#open) s.destroy();
  }

  restore(): void {
    this.#down = false;
  }

  async close(): Promise<void> {
    this.drop();
    await new Promise((r) => this.#server.close(r));
    try {
      unlinkSync(this.path);
    } catch {
      // gone already
    }
  }
}

/** One fault scenario: a home, a forge behind a fault proxy, and the orchestrator process. */
export class Scenario {
  readonly home: string;
  readonly backend = new DockerBackend();
  gitea!: GiteaTestServer;
  proxy!: FaultProxy;
  engine: EngineProxy | undefined;
  proc: ChildProcess | undefined;
  port = 0;
  #starts = 0;

  /** `home`: a BB_HOME made by the caller (with `config/`), instead of a fresh one. */
  constructor(prefix: string, agents: Record<string, unknown>, o: { home?: string } = {}) {
    this.home = o.home ?? makeHome(prefix, agents);
    // Outside BB_HOME: a full BB_HOME must not cost the test its evidence.
    this.logDir = mkdtempSync(join(tmpdir(), `${prefix}logs-`));
  }

  readonly logDir: string;

  async setup(o: { engineProxy?: boolean } = {}): Promise<this> {
    const hook = createNetServer();
    await new Promise<void>((r) => hook.listen(0, '127.0.0.1', r));
    this.port = (hook.address() as { port: number }).port;
    await new Promise((r) => hook.close(r));
    this.gitea = await createGiteaTestServer({
      world: forgeWorld(TOKEN),
      hooks: [{ url: `http://127.0.0.1:${this.port}/webhooks/gitea`, secret: SECRET }],
    });
    this.proxy = await new FaultProxy(new URL(this.gitea.apiUrl)).listen();
    if (o.engineProxy) this.engine = await new EngineProxy(this.home).listen();
    return this;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Start the orchestrator process and wait until it answers. */
  async start(extra: Record<string, string> = {}): Promise<void> {
    this.#starts++;
    const log = createWriteStream(join(this.logDir, `orchestrator-${this.#starts}.log`));
    const dockerHost = this.engine?.dockerHost ?? process.env['DOCKER_HOST'];
    const proc = spawn(process.execPath, [MAIN], {
      env: {
        PATH: process.env['PATH'],
        ...(dockerHost ? { DOCKER_HOST: dockerHost } : {}),
        BB_HOME: this.home,
        BB_BASE_IMAGE: BASE_IMAGE,
        BB_PORT: String(this.port),
        FORGE_GITEA_API: `${this.proxy.url}/api/v1`,
        FORGE_TOKEN: TOKEN,
        FORGE_WEBHOOK_SECRET: SECRET,
        BB_SWEEP_INTERVAL: '0',
        FORGE_WATCHDOG_INTERVAL: '1s',
        BB_MEMORY_BUDGET: '200g',
        ...extra,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.proc = proc;
    proc.stdout!.pipe(log);
    proc.stderr!.pipe(log);
    await until('the orchestrator to listen', async () => {
      if (proc.exitCode !== null)
        throw new Error(`the orchestrator exited: ${readFileSync(log.path, 'utf8')}`);
      return fetch(`${this.url}/healthz`).then(
        (r) => r.ok,
        () => undefined,
      );
    });
  }

  /** Stop it with `signal` (SIGKILL: as a crash would). */
  async stop(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const p = this.proc;
    this.proc = undefined;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise<void>((r) => p.once('exit', () => r()));
    p.kill(signal);
    await exited;
  }

  #kept: Array<Record<string, unknown>> | undefined;

  /** Every orchestrator log line so far, parsed (after teardown: as it was then). */
  logs(): Array<Record<string, unknown>> {
    if (this.#kept) return this.#kept;
    const out: Array<Record<string, unknown>> = [];
    for (let i = 1; i <= this.#starts; i++) {
      let text = '';
      try {
        text = readFileSync(join(this.logDir, `orchestrator-${i}.log`), 'utf8');
      } catch {
        continue;
      }
      for (const line of text.split('\n'))
        if (line.startsWith('{')) {
          try {
            out.push(JSON.parse(line) as Record<string, unknown>);
          } catch {
            // a line cut by a kill
          }
        }
    }
    return out;
  }

  logText(): string {
    return this.logs()
      .map((l) => JSON.stringify(l))
      .join('\n');
  }

  /**
   * Read the orchestrator's database from the outside, read-only and with
   * plain SQL: no migration runs (so an older build's database stays its own).
   */
  #sql<T>(fn: (db: SqliteDb) => T): T {
    const db = new Sqlite(join(this.home, 'bot-bottle.db'), {
      readonly: true,
      fileMustExist: true,
    });
    db.pragma('busy_timeout = 5000');
    try {
      return fn(db);
    } finally {
      db.close();
    }
  }

  /** The issue's bottle: live, or (once destroyed) its history row. */
  row(n: number): Row | undefined {
    return this.#sql((db) => {
      const tables = (
        db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{
          name: string;
        }>
      ).map((t) => t.name);
      for (const table of ['forge_state', 'forge_state_history']) {
        if (!tables.includes(table)) continue;
        const r = db
          .prepare(
            `SELECT slug, status, pr_number AS prNumber, last_checkin_at AS lastCheckinAt FROM ${table}
             WHERE owner = 'acme' AND repo = 'widgets' AND issue_number = ? ORDER BY updated_at DESC LIMIT 1`,
          )
          .get(n) as Row | undefined;
        if (r) return r;
      }
      return undefined;
    });
  }

  /** Accepted events not handled yet (an older build keeps none). */
  openEvents(): unknown[] {
    return this.#sql((db) => {
      const has = db.prepare("SELECT 1 FROM sqlite_master WHERE name = 'event_inbox'").get();
      return has
        ? db.prepare("SELECT key, state FROM event_inbox WHERE state != 'done'").all()
        : [];
    });
  }

  /** The bottle's run records, in the order they were appended. */
  chain(slug: string): RunRecord[] {
    return this.#sql((db) =>
      (
        db
          .prepare('SELECT signed FROM provenance_records WHERE slug = ? ORDER BY rowid')
          .all(slug) as Array<{ signed: string }>
      ).map((r) => (JSON.parse(r.signed) as { record: RunRecord }).record),
    );
  }

  comments(n: number): string[] {
    return this.gitea.issue('acme/widgets', n).comments.map((c) => c.body);
  }

  issue(title: string, agent: string): number {
    return fileIssue(this.gitea, agent, title, `${title}.`);
  }

  /** Wait until issue `n`'s agent said "Starting." (it is at work). */
  async started(n: number, what = 'the agent to work', ms?: number): Promise<void> {
    await until(what, () => (this.comments(n).includes('Starting.') ? true : undefined), ms);
  }

  /** The containers of this home, by slug and role. */
  async containers(): Promise<Array<{ slug: string; role: string; state: string }>> {
    return (await this.backend.list({ [HOME_LABEL]: homeLabel({ BB_HOME: this.home }) })).map(
      (c) => ({ slug: c.labels['bb.slug'] ?? '', role: c.labels['bb.role'] ?? '', state: c.state }),
    );
  }

  /** Fetches and clones still running on the host for this scenario's forge or home (one left behind). */
  strays(): string[] {
    const port = new URL(this.proxy.url).port;
    return execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' })
      .split('\n')
      .filter(
        (l) => / (clone|fetch) /.test(l) && (l.includes(`:${port}/`) || l.includes(this.home)),
      );
  }

  /** Whether turn `turn` of a bottle ended: its agent's container exited, or its waiter said so. */
  async turnEnded(slug: string, turn: number): Promise<boolean> {
    const p = bottlePaths(slug, { BB_HOME: this.home });
    const nonce = readMeta(slug, { BB_HOME: this.home })?.current?.nonce;
    if (nonce && existsSync(join(p.home, '.bb', 'turn-end', `${turn}-${nonce}.exit`))) return true;
    return (await this.containers()).some(
      (c) => c.slug === slug && c.role === 'agent' && c.state === 'exited',
    );
  }

  /**
   * Nothing left behind: no container of a bottle that has no live row (a warm
   * bottle's two, paused, excepted: they are kept on purpose), no stray
   * process, and every accepted event handled.
   */
  async expectClean(liveSlugs: string[]): Promise<void> {
    const cs = await this.containers();
    const warm = (slug: string) => !!readMeta(slug, { BB_HOME: this.home })?.warm;
    const stray = cs.filter(
      (c) => !liveSlugs.includes(c.slug) && !(c.state === 'paused' && warm(c.slug)),
    );
    if (stray.length > 0) throw new Error(`orphan containers: ${JSON.stringify(stray)}`);
    const procs = this.strays();
    if (procs.length > 0) throw new Error(`stray processes: ${procs.join('\n')}`);
  }

  async teardown(): Promise<void> {
    await this.stop('SIGKILL');
    this.engine?.restore();
    const env = { BB_HOME: this.home };
    // Bottles the orchestrator left (running ones keep their disks mounted): removed in full.
    for (const slug of listBottles(env))
      await destroy(slug, { backend: this.backend, env }).catch(() => {});
    for (const c of await this.backend.list({ [HOME_LABEL]: homeLabel(env) }))
      await this.backend.destroy(c.id).catch(() => {});
    await this.engine?.close();
    await this.proxy?.close();
    await this.gitea?.close();
    // Kept in memory: a failed test prints them after this teardown ran.
    this.#kept = this.logs();
    if (process.env['BB_KEEP_HOME']) console.error(`kept ${this.home} (logs in ${this.logDir})`);
    else rmSync(this.logDir, { recursive: true, force: true });
    if (process.env['BB_KEEP_HOME']) return;
    try {
      rmSync(this.home, { recursive: true, force: true });
    } catch {
      // a mount point: its contents are gone, the caller unmounts it
    }
  }
}

export { until };
