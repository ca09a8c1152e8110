// The ack path does not slow with history: 5,000 signed ~11 KB PR-comment
// deliveries at concurrency 10 into the real endpoint (signature, parse, the
// orchestrator's accept) with 10,000 destroyed bottles and 100,000 ledger rows
// already in the database, vs a bare node:http 202 (the baseline) and vs the
// same endpoint on an empty database (history's cost), and vs the design's
// floor (node:http + HMAC + JSON.parse + one SQLite insert), in one run. Goals:
// p99 <= 3x the bare 202, and >= 1,500 deliveries/s.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ProvenanceStore } from '@bb/provenance';
import { SqliteForgeStateStore } from '@bb/state';
import { benchSize, reportBench } from '@bb/tooling/bench';
import { ackResult, bareServer, floorServer, listen, loadInChild, ms3, pct, SECRET } from './load';
import { benchOrchestrator, orchestratorEndpoint } from './orchestrator';

const N = benchSize(5000, 500);
const DESTROYED = 10_000;
const LEDGER = 100_000;

function endpoint(label: string, prefill: boolean) {
  const dir = mkdtempSync(join(tmpdir(), `bb-webhook-${label}-`));
  const store = new SqliteForgeStateStore({ path: join(dir, 'bb.db') });
  if (prefill) {
    const t = new Date(Date.now() - 86_400_000).toISOString();
    const db = store.database.db;
    db.transaction(() => {
      for (let i = 1; i <= DESTROYED; i++) {
        const row = {
          owner: 'acme',
          repo: 'widgets',
          issueNumber: 100_000 + i,
          slug: `agent-${i}`,
          agentName: 'agent',
          bottleNames: ['default'],
          backendName: 'docker',
          agentGitUser: 'bot',
          // Their PRs include the one the deliveries comment on: history must not answer for it.
          prNumber: i,
          status: 'frozen' as const,
          lastCheckinAt: t,
          sessionId: null,
          cwd: null,
          createdAt: t,
          updatedAt: t,
        };
        store.upsert(row);
        store.upsert({ ...row, status: 'destroyed' });
      }
      for (let i = 0; i < LEDGER; i++) store.recordDelivery(`history:${i}`, { event: 'issues' });
    })();
  }
  const { orch } = benchOrchestrator(store, new ProvenanceStore(store.database), dir);
  const { server, accepted } = orchestratorEndpoint(orch, SECRET);
  return {
    server,
    store,
    accepted,
    close() {
      server.close();
      orch.close();
      store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const t0 = Date.now();
const full = endpoint('history', true);
const filledIn = Date.now() - t0;
if (full.store.all().length !== 0 || full.store.history({ limit: 10_000 }).length !== DESTROYED)
  throw new Error('the history was not made as asked');
const empty = endpoint('empty', false);
const bare = bareServer();
const floorDir = mkdtempSync(join(tmpdir(), 'bb-webhook-floor-'));
const least = floorServer(join(floorDir, 'floor.db'));
const [fullPort, emptyPort, barePort, leastPort] = [
  await listen(full.server),
  await listen(empty.server),
  await listen(bare),
  await listen(least.server),
];

// The load client runs in a process of its own, as the forge does (in this process it
// would share the event loop with the endpoint it measures).
for (const port of [barePort, fullPort, emptyPort, leastPort]) await loadInChild(port, 500, 1);
const base = await loadInChild(barePort, N, 10_000);
const designFloor = await loadInChild(leastPort, N, 10_000);
const floor = await loadInChild(emptyPort, N, 10_000);
const mine = await loadInChild(fullPort, N, 10_000);
for (const [name, r, ep] of [
  ['history', mine, full],
  ['empty', floor, empty],
] as const)
  if (r.statuses.get(202) !== N || ep.accepted() !== N + 500)
    throw new Error(`${name}: expected ${N} accepted, got ${JSON.stringify([...r.statuses])}`);

reportBench(
  ackResult({
    name: 'webhook-history',
    metric: `ack p99 ms with 10,000 destroyed bottles and 100,000 ledger rows (${N.toLocaleString('en')} signed ~11 KB deliveries, concurrency 10) vs bare node:http 202`,
    n: N,
    mine,
    base,
    extra: {
      emptyDbP99ms: ms3(pct(floor.lat, 99)),
      emptyDbPerSecond: Math.round(N / floor.seconds),
      designFloorP99ms: ms3(pct(designFloor.lat, 99)),
      designFloorPerSecond: Math.round(N / designFloor.seconds),
      destroyedBottles: DESTROYED,
      ledgerRows: LEDGER,
      historyFilledInMs: filledIn,
    },
  }),
);
full.close();
empty.close();
bare.close();
least.close();
rmSync(floorDir, { recursive: true, force: true });
