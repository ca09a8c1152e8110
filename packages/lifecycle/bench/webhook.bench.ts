// Ack latency for 5,000 signed ~11 KB (Gitea PR-comment) deliveries at concurrency 10: the real
// webhook endpoint (signature check, parse, durable SQLite ledger write) vs a bare
// node:http server answering 202, in one run. Goals: p99 <= 3x and >= 1,500
// deliveries/s; bad-signature rejections p99 <= 1 ms. Also reports the
// orchestrator's RSS with 1,000 tracked issues.
import { createHmac } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseGiteaWebhook, verifyGiteaWebhook } from '@bb/forge';
import { SqliteForgeStateStore } from '@bb/state';
import { reportBench } from '@bb/tooling/bench';
import { Pool } from 'undici';
import { createWebhookHandler, toNodeListener } from '../src/index';

const SECRET = 'bench-webhook-secret';
const N = 5000;
const CONC = 10;
const fixtures = join(
  dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  'forge',
  'test',
  'fixtures',
  'gitea',
  'webhooks',
);
const template = JSON.parse(
  readFileSync(join(fixtures, 'issue_comment.created.on_pull.json'), 'utf8'),
);
const headers0 = JSON.parse(
  readFileSync(join(fixtures, 'issue_comment.created.on_pull.headers.json'), 'utf8'),
) as Record<string, string>;
const bodies = Array.from({ length: N }, (_, i) => {
  const p = structuredClone(template);
  p.comment.id = 10_000 + i;
  // Gitea's PR-comment payload is already ~11 KB compacted: larger than the 8 KB asked for.
  p.comment.body = `comment ${i}`;
  return Buffer.from(JSON.stringify(p));
});
const sign = (b: Buffer) => createHmac('sha256', SECRET).update(b).digest('hex');
const headersFor = (b: Buffer, good = true) => ({
  ...headers0,
  'Content-Length': String(b.length),
  'X-Gitea-Signature': good ? sign(b) : '0'.repeat(64),
  'X-Hub-Signature-256': '',
});

const dir = mkdtempSync(join(tmpdir(), 'bb-webhook-bench-'));
const store = new SqliteForgeStateStore({ path: join(dir, 'bb.db') });
let accepted = 0;
const ours = createServer(
  toNodeListener(
    createWebhookHandler({
      forge: { verifyWebhook: verifyGiteaWebhook, parseWebhook: parseGiteaWebhook },
      secret: SECRET,
      ledger: store,
      enqueue: () => void accepted++,
    }),
  ),
);
const bare = createServer((req, res) => {
  req.resume();
  req.on('end', () => res.writeHead(202).end());
});
const listen = async (s: Server) => {
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return (s.address() as AddressInfo).port;
};
const oursPort = await listen(ours);
const barePort = await listen(bare);

async function load(
  port: number,
  list: Buffer[],
  good = true,
  conc = CONC,
): Promise<{ lat: number[]; seconds: number; statuses: Map<number, number> }> {
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections: conc });
  const lat: number[] = [];
  const statuses = new Map<number, number>();
  let next = 0;
  const t0 = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: conc }, async () => {
      while (next < list.length) {
        const b = list[next++]!;
        const s = process.hrtime.bigint();
        const res = await pool.request({
          method: 'POST',
          path: '/webhooks/gitea',
          headers: headersFor(b, good),
          body: b,
        });
        await res.body.dump();
        lat.push(Number(process.hrtime.bigint() - s) / 1e6);
        statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
      }
    }),
  );
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  await pool.close();
  return { lat: lat.sort((a, b) => a - b), seconds, statuses };
}
const pct = (xs: number[], p: number) =>
  xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

await load(barePort, bodies.slice(0, 500));
const base = await load(barePort, bodies);
const mine = await load(oursPort, bodies);
// A rejection's own cost: one at a time, so no queueing behind other requests.
const bad = await load(oursPort, bodies.slice(0, 1000), false, 1);
if (mine.statuses.get(202) !== N || accepted !== N)
  throw new Error(
    `expected ${N} accepted deliveries, got ${JSON.stringify([...mine.statuses])} / ${accepted}`,
  );
if (bad.statuses.get(401) !== 1000) throw new Error('bad signatures were not all rejected');

// RSS of an orchestrator process tracking 1,000 issues, measured in a child that
// holds only that (this process also holds 55 MB of request bodies and the load client).
const { execFileSync } = await import('node:child_process');
const child = JSON.parse(
  execFileSync(
    process.execPath,
    ['--expose-gc', join(dirname(fileURLToPath(import.meta.url)), 'rss-child.mjs')],
    { cwd: join(dirname(fileURLToPath(import.meta.url)), '..') },
  ).toString(),
) as { rssMb: number; tracked: number };
const rssMb = child.rssMb;
const empty = JSON.parse(
  execFileSync(
    process.execPath,
    ['--expose-gc', join(dirname(fileURLToPath(import.meta.url)), 'rss-child.mjs'), '0'],
    { cwd: join(dirname(fileURLToPath(import.meta.url)), '..') },
  ).toString(),
) as { rssMb: number };
const rows = { length: child.tracked };

const perSec = N / mine.seconds;
reportBench({
  name: 'webhook',
  metric:
    'ack p99 ms, 5,000 signed ~8 KB deliveries at concurrency 10 (endpoint with durable ledger vs bare node:http 202)',
  ours: pct(mine.lat, 99),
  baseline: pct(base.lat, 99),
  goal: 3,
  higherIsBetter: false,
  target: 'p99 <= 3x, >= 1,500/s, bad-signature p99 <= 1 ms, RSS <= 100 MB at 1,000 issues',
  pass:
    pct(mine.lat, 99) <= 3 * pct(base.lat, 99) &&
    perSec >= 1500 &&
    pct(bad.lat, 99) <= 1 &&
    rssMb <= 100,
  extra: {
    oursPerSecond: Math.round(perSec),
    barePerSecond: Math.round(N / base.seconds),
    oursP50ms: Math.round(pct(mine.lat, 50) * 1000) / 1000,
    bareP50ms: Math.round(pct(base.lat, 50) * 1000) / 1000,
    badSignatureP99ms: Math.round(pct(bad.lat, 99) * 1000) / 1000,
    rssMbWith1000Issues: Math.round(rssMb),
    rssMbWithNoIssues: Math.round(empty.rssMb),
    trackedIssues: rows.length,
    bodyBytes: bodies[0]!.length,
  },
});
ours.close();
bare.close();
store.close();
rmSync(dir, { recursive: true, force: true });
