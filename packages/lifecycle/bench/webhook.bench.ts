// Ack latency for 5,000 signed ~11 KB (Gitea PR-comment) deliveries at concurrency 10: the real
// webhook endpoint (signature check, parse, the orchestrator's accept: one durable SQLite
// write of ledger and inbox) vs a bare
// node:http server answering 202, in one run. Goals: p99 <= 3x and >= 1,500
// deliveries/s; bad-signature rejections p99 <= 1 ms. Also reports the
// orchestrator's RSS with 1,000 tracked issues.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ProvenanceStore } from '@bb/provenance';
import { SqliteForgeStateStore } from '@bb/state';
import { benchSize, reportBench } from '@bb/tooling/bench';
import { ackResult, bareServer, deliveries, listen, load, pct, SECRET } from './load';
import { benchOrchestrator, orchestratorEndpoint } from './orchestrator';

const N = benchSize(5000, 500);
const bodies = deliveries(N);

const dir = mkdtempSync(join(tmpdir(), 'bb-webhook-bench-'));
const store = new SqliteForgeStateStore({ path: join(dir, 'bb.db') });
// The production path: the orchestrator's accept (ledger and inbox in one write).
const { orch } = benchOrchestrator(store, new ProvenanceStore(store.database), dir);
const { server: ours, accepted } = orchestratorEndpoint(orch, SECRET);
const bare = bareServer();
const oursPort = await listen(ours);
const barePort = await listen(bare);

await load(barePort, bodies.slice(0, 500));
const base = await load(barePort, bodies);
const mine = await load(oursPort, bodies);
// A rejection's own cost: one at a time, so no queueing behind other requests.
const badBodies = bodies.slice(0, 1000);
const bad = await load(oursPort, badBodies, false, 1);
if (mine.statuses.get(202) !== N || accepted() !== N)
  throw new Error(
    `expected ${N} accepted deliveries, got ${JSON.stringify([...mine.statuses])} / ${accepted()}`,
  );
if (bad.statuses.get(401) !== badBodies.length)
  throw new Error('bad signatures were not all rejected');

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

reportBench(
  ackResult({
    name: 'webhook',
    metric: `ack p99 ms, ${N.toLocaleString('en')} signed ~11 KB deliveries at concurrency 10 (the orchestrator endpoint: ledger and inbox in one write) vs bare node:http 202`,
    n: N,
    mine,
    base,
    target: 'p99 <= 3x, >= 1,500/s, bad-signature p99 <= 1 ms, RSS <= 100 MB at 1,000 issues',
    more: pct(bad.lat, 99) <= 1 && rssMb <= 100,
    extra: {
      badSignatureP99ms: Math.round(pct(bad.lat, 99) * 1000) / 1000,
      rssMbWith1000Issues: Math.round(rssMb),
      rssMbWithNoIssues: Math.round(empty.rssMb),
      trackedIssues: rows.length,
      bodyBytes: bodies[0]!.length,
    },
  }),
);
ours.close();
bare.close();
orch.close();
store.close();
rmSync(dir, { recursive: true, force: true });
