// A fleet of `bb orchestrate serve` replicas on machines of their own, as far as one
// host allows: each replica with its own BB_HOME and its own Docker engine (`engines.ts`),
// all on one real PostgreSQL and one bottle store (BB_BOTTLE_STORE), behind a load
// balancer that gives each webhook delivery to the first replica that is up. Used by
// the store test and the fleet-takeover benchmark.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { type ApiExchange, createGiteaTestServer, type GiteaTestServer } from '@bb/forge/testing';
import { unmountAllUnder } from '@bb/headless';
import { startPostgres, type TestPostgres } from '@bb/state-postgres/testing';
import { BASE_IMAGE } from '@bb/tooling/docker';
import { freePort } from '@bb/tooling/net';
import { startEngine, type TestEngine } from './engines';
import { killServe, type ServeProcess, startServe } from './serve-process';
import { forgeWorld, makeHome } from './support';

const run = promisify(execFile);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export const STORE_TOKEN = 'bb-claude-token-store-4242';
const SECRET = 'store-webhook-secret';

export interface Replica extends ServeProcess {
  home: string;
  engine: TestEngine;
}

export interface StoreFleet {
  pg: TestPostgres;
  gitea: GiteaTestServer;
  /** The directory every replica's bottles are in. */
  store: string;
  /** Where the replicas' logs and engines are. */
  root: string;
  replicas: Replica[];
  /** Start (or start again) a replica; resolves once it serves. */
  start(r: Replica): Promise<void>;
  /** SIGKILL a replica's process. */
  kill(r: Replica): Promise<void>;
  /** `bb-…` containers of bottles on an engine (its namespace holders aside). */
  containersOn(e: TestEngine): Promise<string[]>;
  /** The engine a bottle's meta names when it ran on `r`. */
  engineOf(r: Replica): string;
  /** Every JSON line every replica logged, with its replica's id. */
  logLines(): Array<Record<string, unknown>>;
  close(): Promise<void>;
}

/** PostgreSQL, the Gitea double, the store and one engine per replica; no replica started. */
export async function storeFleet(o: {
  ids: string[];
  agents: Record<string, unknown>;
  ttlMs: number;
  /** Each answer the Gitea double gives, as it gives it. */
  onResponse?: (x: ApiExchange) => void;
}): Promise<StoreFleet> {
  const root = mkdtempSync(join(tmpdir(), 'bb-store-'));
  const store = join(root, 'store');
  // Durable as a production server: an outage loses no commit.
  const pg = await startPostgres({ maxConnections: 100, durable: true });
  const lbPort = await freePort();
  const gitea = await createGiteaTestServer({
    world: forgeWorld(STORE_TOKEN),
    hooks: [{ url: `http://127.0.0.1:${lbPort}/hook`, secret: SECRET }],
    ...(o.onResponse ? { onResponse: o.onResponse } : {}),
  });
  const replicas: Replica[] = [];
  const lb: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers))
        if (typeof v === 'string' && !['host', 'content-length', 'connection'].includes(k))
          headers[k] = v;
      for (let attempt = 0; attempt < 200; attempt++) {
        for (const r of replicas.filter((x) => x.proc)) {
          try {
            const out = await fetch(`http://127.0.0.1:${r.port}/webhooks/gitea`, {
              method: 'POST',
              headers,
              body: Buffer.concat(chunks),
              signal: AbortSignal.timeout(10_000),
            });
            if (out.status >= 500) continue;
            res.writeHead(out.status, { 'content-type': 'application/json' });
            res.end(await out.text());
            return;
          } catch {
            // down: the next one
          }
        }
        await sleep(50);
      }
      res.writeHead(502);
      res.end();
    });
  });
  await new Promise<void>((r) => lb.listen(lbPort, '127.0.0.1', r));
  for (const id of o.ids) {
    const engine = await startEngine(id, join(root, `engine-${id}`), [BASE_IMAGE]);
    replicas.push({
      id,
      port: await freePort(),
      home: makeHome(`bb-store-${id}-`, o.agents),
      engine,
      proc: undefined,
      starts: 0,
    });
  }

  const env = (r: Replica): Record<string, string> => ({
    PATH: process.env['PATH'] ?? '',
    DOCKER_HOST: r.engine.host,
    BB_HOME: r.home,
    BB_BOTTLE_STORE: store,
    BB_BOTTLE_DISK: '256m',
    BB_BASE_IMAGE: BASE_IMAGE,
    BB_PORT: String(r.port),
    BB_DATABASE_URL: pg.url,
    BB_REPLICA_ID: r.id,
    BB_LEASE_TTL: `${o.ttlMs}ms`,
    BB_WARM_WINDOW: '0',
    FORGE_GITEA_API: gitea.apiUrl,
    FORGE_TOKEN: STORE_TOKEN,
    FORGE_WEBHOOK_SECRET: SECRET,
    BB_SWEEP_INTERVAL: '0',
    FORGE_WATCHDOG_INTERVAL: '1s',
    BB_MEMORY_BUDGET: '200g',
  });
  const logOf = (r: Replica, n: number) => join(root, `${r.id}-${n}.log`);

  const fleet: StoreFleet = {
    pg,
    gitea,
    store,
    root,
    replicas,
    start: (r) => startServe(r, env(r), (n) => logOf(r, n)),
    kill: killServe,
    async containersOn(e) {
      const { stdout } = await run('docker', [
        '-H',
        e.host,
        'ps',
        '-a',
        '--filter',
        'label=bb.slug',
        '--format',
        '{{.Names}}',
      ]);
      // Namespace holders carry the label empty and a name of the engine's.
      return stdout.split('\n').filter((n) => n.startsWith('bb-'));
    },
    engineOf: (r) => `docker:vm:${join(r.engine.dir, 'data')}`,
    logLines: () =>
      replicas.flatMap((r) =>
        Array.from({ length: r.starts }, (_, i) => {
          try {
            return readFileSync(logOf(r, i + 1), 'utf8').split('\n');
          } catch {
            return [];
          }
        })
          .flat()
          .filter((l) => l.startsWith('{'))
          .map((l) => {
            try {
              return { ...(JSON.parse(l) as Record<string, unknown>), replica: r.id };
            } catch {
              return { replica: r.id };
            }
          }),
      ),
    async close() {
      for (const r of replicas) await fleet.kill(r);
      for (const r of replicas) {
        const ids = (
          await run('docker', ['-H', r.engine.host, 'ps', '-aq']).catch(() => ({ stdout: '' }))
        ).stdout
          .split('\n')
          .filter(Boolean);
        if (ids.length)
          await run('docker', ['-H', r.engine.host, 'rm', '-f', ...ids]).catch(() => {});
        await r.engine.remove().catch(() => {});
        await unmountAllUnder(r.home).catch(() => {});
        rmSync(r.home, { recursive: true, force: true });
      }
      await unmountAllUnder(root).catch(() => {});
      await new Promise((r) => lb.close(r));
      await gitea.close();
      await pg.stop();
      if (process.env['BB_KEEP_HOME']) console.error(`kept logs in ${root}`);
      else rmSync(root, { recursive: true, force: true });
    },
  };
  return fleet;
}
