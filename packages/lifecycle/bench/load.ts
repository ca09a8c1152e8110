// What the webhook benches share: signed Gitea PR-comment deliveries (~11 KB,
// from the recorded fixtures), a bare node:http 202 server as the baseline, and
// a load client that measures each delivery's ack latency.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';

// better-sqlite3 is @bb/state's dependency, not ours: resolved from there.
const require = createRequire(createRequire(import.meta.url).resolve('@bb/state'));

export const SECRET = 'bench-webhook-secret';
const fixtures = fileURLToPath(
  new URL('../../forge/test/fixtures/gitea/webhooks', import.meta.url),
);
const template = JSON.parse(
  readFileSync(join(fixtures, 'issue_comment.created.on_pull.json'), 'utf8'),
);
const headers0 = JSON.parse(
  readFileSync(join(fixtures, 'issue_comment.created.on_pull.headers.json'), 'utf8'),
) as Record<string, string>;

/** `n` distinct PR-comment deliveries (comment ids from `firstId`). */
export function deliveries(n: number, firstId = 10_000): Buffer[] {
  return Array.from({ length: n }, (_, i) => {
    const p = structuredClone(template);
    p.comment.id = firstId + i;
    p.comment.body = `comment ${i}`;
    return Buffer.from(JSON.stringify(p));
  });
}

const issueHeaders = JSON.parse(
  readFileSync(join(fixtures, 'issue_comment.created.headers.json'), 'utf8'),
) as Record<string, string>;
const issueTemplate = JSON.parse(
  readFileSync(join(fixtures, 'issue_comment.created.json'), 'utf8'),
);

/** `n` distinct issue-comment deliveries over issues 1..`issues` (comment ids from `firstId`). */
export function issueDeliveries(n: number, firstId: number, issues: number): Buffer[] {
  return Array.from({ length: n }, (_, i) => {
    const p = structuredClone(issueTemplate);
    p.comment.id = firstId + i;
    p.comment.body = `comment ${i}`;
    p.issue.number = 1 + (i % issues);
    return Buffer.from(JSON.stringify(p));
  });
}

const sign = (b: Buffer) => createHmac('sha256', SECRET).update(b).digest('hex');
const headersFor = (b: Buffer, good = true, onIssue = false) => ({
  ...(onIssue ? issueHeaders : headers0),
  'Content-Length': String(b.length),
  'X-Gitea-Signature': good ? sign(b) : '0'.repeat(64),
  'X-Hub-Signature-256': '',
});

export async function listen(s: Server): Promise<number> {
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return (s.address() as AddressInfo).port;
}

/** A node:http server that answers every request 202: the floor of any endpoint. */
export function bareServer(): Server {
  return createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(202).end());
  });
}

/**
 * The least a webhook endpoint does before its write: node:http, the HMAC check
 * over the raw bytes (401 when it fails), JSON.parse. Then `write(body)`, and 202
 * once it is done (503 when it fails).
 */
export function signedJsonServer(
  write: (body: { comment: { id: number }; issue: { number: number } }) => unknown,
): Server {
  return createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const want = Buffer.from(sign(raw));
      const got = Buffer.from(String(req.headers['x-gitea-signature'] ?? ''));
      if (got.length !== want.length || !timingSafeEqual(got, want)) {
        res.writeHead(401).end();
        return;
      }
      Promise.resolve()
        .then(() => write(JSON.parse(raw.toString('utf8'))))
        .then(
          () =>
            res.writeHead(202, { 'content-type': 'application/json' }).end('{"accepted":true}\n'),
          () => res.writeHead(503).end(),
        );
    });
  });
}

/**
 * The design's floor: the least any durable webhook endpoint does on this
 * machine — node:http, the HMAC check over the raw bytes, JSON.parse, and one
 * SQLite insert of the event in WAL mode (the same pragmas as the store), then
 * 202. No routing, no validation, no Request/Response objects.
 */
export function floorServer(dbPath: string): { server: Server; close: () => void } {
  const Sqlite = require('better-sqlite3') as new (
    path: string,
  ) => {
    pragma(sql: string): unknown;
    exec(sql: string): void;
    prepare(sql: string): { run(...args: unknown[]): unknown };
    close(): void;
  };
  const db = new Sqlite(dbPath);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.exec('CREATE TABLE IF NOT EXISTS floor (key TEXT PRIMARY KEY, payload TEXT NOT NULL)');
  const insert = db.prepare('INSERT OR IGNORE INTO floor (key, payload) VALUES (?, ?)');
  const server = signedJsonServer((body) => {
    insert.run(`comment:${body.comment.id}`, JSON.stringify(body.comment));
  });
  return {
    server,
    close: () => {
      server.close();
      db.close();
    },
  };
}

/** POST every delivery at `conc` at a time; each one's latency (ms, sorted), the run's seconds, the statuses. */
export async function load(
  port: number | number[],
  list: Buffer[],
  good = true,
  conc = 10,
  /** The deliveries are issue comments (`issueDeliveries`): sent with their headers. */
  onIssue = false,
): Promise<{ lat: number[]; seconds: number; statuses: Map<number, number> }> {
  // Several ports: a load balancer's round robin, one delivery to each in turn.
  const pools = (Array.isArray(port) ? port : [port]).map(
    (p) => new Pool(`http://127.0.0.1:${p}`, { connections: conc }),
  );
  const lat: number[] = [];
  const statuses = new Map<number, number>();
  let next = 0;
  const t0 = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: conc }, async () => {
      while (next < list.length) {
        const i = next++;
        const b = list[i]!;
        const s = process.hrtime.bigint();
        const res = await pools[i % pools.length]!.request({
          method: 'POST',
          path: '/webhooks/gitea',
          headers: headersFor(b, good, onIssue),
          body: b,
        });
        await res.body.dump();
        lat.push(Number(process.hrtime.bigint() - s) / 1e6);
        statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
      }
    }),
  );
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  await Promise.all(pools.map((p) => p.close()));
  return { lat: lat.sort((a, b) => a - b), seconds, statuses };
}

export const pct = (xs: number[], p: number) =>
  xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

export const ms3 = (n: number) => Math.round(n * 1000) / 1000;

/**
 * A webhook ack benchmark's result, for `reportBench`: ours against bare node:http on
 * `n` deliveries, passing at p99 within 3x and 1,500 acks a second (and `more`).
 */
export function ackResult(o: {
  name: string;
  metric: string;
  n: number;
  mine: { lat: number[]; seconds: number };
  base: { lat: number[]; seconds: number };
  target?: string;
  more?: boolean;
  extra?: Record<string, number | string>;
}) {
  const perSec = o.n / o.mine.seconds;
  return {
    name: o.name,
    metric: o.metric,
    ours: pct(o.mine.lat, 99),
    baseline: pct(o.base.lat, 99),
    goal: 3,
    higherIsBetter: false,
    target: o.target ?? 'p99 <= 3x, >= 1,500/s',
    pass: pct(o.mine.lat, 99) <= 3 * pct(o.base.lat, 99) && perSec >= 1500 && (o.more ?? true),
    extra: {
      oursPerSecond: Math.round(perSec),
      barePerSecond: Math.round(o.n / o.base.seconds),
      oursP50ms: ms3(pct(o.mine.lat, 50)),
      bareP50ms: ms3(pct(o.base.lat, 50)),
      ...o.extra,
    },
  };
}

/**
 * `load` run by a process of its own, on `n` deliveries from comment id `firstId`
 * (PR comments; issue comments over `issues` issues when given), to `port` or
 * round robin to each of `port`.
 */
export async function loadInChild(
  port: number | number[],
  n: number,
  firstId: number,
  issues?: number,
): Promise<{ lat: number[]; seconds: number; statuses: Map<number, number> }> {
  const { execFile } = await import('node:child_process');
  const out = await new Promise<string>((resolve, reject) =>
    execFile(
      process.execPath,
      [
        '--import',
        'tsx',
        '--conditions=@bb/source',
        fileURLToPath(new URL('./load-child.ts', import.meta.url)),
        Array.isArray(port) ? port.join(',') : String(port),
        String(n),
        String(firstId),
        ...(issues ? [String(issues)] : []),
      ],
      { maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => (err ? reject(new Error(stderr || String(err))) : resolve(stdout)),
    ),
  );
  const r = JSON.parse(out) as {
    lat: number[];
    seconds: number;
    statuses: Array<[number, number]>;
  };
  return { lat: r.lat, seconds: r.seconds, statuses: new Map(r.statuses) };
}
