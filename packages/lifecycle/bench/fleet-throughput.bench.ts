// fleet-throughput: webhook acks a second of three replicas against one, on the same
// PostgreSQL server (durable commits) and the same 2 cores. Each replica is its own
// process (fleet-replica.ts: the orchestrator endpoint with its leases, renewals,
// take-over scans and inbox polls running); the load client, a process of its own too,
// spreads issue comments over 200 issues round robin to the replicas, as a load
// balancer would. The one replica gets the same deliveries at the same concurrency.
// Also reported: the statements sent and the rows they returned per delivery, counted
// in the replicas until every event was handled (goal: within 1.2x of one), and the
// floor: the least endpoint doing the same write (no orchestrator), three processes
// against one, on the same server and cores.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface, type Interface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { openPostgresState } from '@bb/state-postgres';
import { startPostgres } from '@bb/state-postgres/testing';
import { benchRounds, benchSize, killOnExit, reportBench } from '@bb/tooling/bench';
import { loadInChild, ms3 } from './load';

const N = Number(process.env['BB_BENCH_N'] ?? benchSize(3000, 300));
const ISSUES = 200;
const ROUNDS = benchRounds(3, 1);

interface Replica {
  child: ChildProcess;
  lines: Interface;
  port: number;
}
interface Stats {
  statements: number;
  rows: number;
  handled: number;
}

const script = fileURLToPath(new URL('./fleet-replica.ts', import.meta.url));

async function replica(url: string, schema: string, holder: string, home: string) {
  const child = killOnExit(
    spawn(
      process.execPath,
      ['--import', 'tsx', '--conditions=@bb/source', script, url, schema, holder, home],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    ),
  );
  const lines = createInterface({ input: child.stdout! });
  const first = await next(lines);
  return { child, lines, port: (JSON.parse(first) as { port: number }).port } satisfies Replica;
}

function next(lines: Interface): Promise<string> {
  return new Promise((resolve) => lines.once('line', resolve));
}

async function stats(rs: Replica[]): Promise<Stats> {
  const all = await Promise.all(
    rs.map(async (r) => {
      const got = next(r.lines);
      r.child.stdin!.write('stats\n');
      return JSON.parse(await got) as Stats;
    }),
  );
  return all.reduce(
    (a, b) => ({
      statements: a.statements + b.statements,
      rows: a.rows + b.rows,
      handled: a.handled + b.handled,
    }),
    { statements: 0, rows: 0, handled: 0 },
  );
}

/** One round on `rs`: acks a second during the load, and what the database was asked per delivery. */
async function round(rs: Replica[], firstId: number) {
  const before = await stats(rs);
  const run = await loadInChild(
    rs.map((r) => r.port),
    N,
    firstId,
    ISSUES,
  );
  if (run.statuses.get(202) !== N)
    throw new Error(`expected ${N} accepted deliveries, got ${JSON.stringify([...run.statuses])}`);
  // Every event handled (by whichever replica held its issue) before the database is counted.
  let after = await stats(rs);
  const end = Date.now() + 60_000;
  while (after.handled - before.handled < N) {
    if (Date.now() > end)
      throw new Error(`only ${after.handled - before.handled} of ${N} events handled in 60 s`);
    await new Promise((r) => setTimeout(r, 100));
    after = await stats(rs);
  }
  return {
    perSecond: N / run.seconds,
    statements: (after.statements - before.statements) / N,
    rows: (after.rows - before.rows) / N,
  };
}

const server = await startPostgres({ durable: true });
const homes: string[] = [];
const home = () => {
  const d = mkdtempSync(join(tmpdir(), 'bb-fleet-bench-'));
  homes.push(d);
  return d;
};
const all: Replica[] = [];
try {
  // The schemas made first, one process at a time, each with a frozen bottle on every
  // issue: each comment is about a bottle, and its issue's holder hears it (the commenter
  // may not drive the agent, so it is answered by a permission check, not a turn).
  for (const schema of ['one', 'three', 'floor1', 'floor3']) {
    const state = await openPostgresState({ url: server.url, schema });
    const now = new Date().toISOString();
    for (let n = 1; n <= ISSUES; n++)
      await state.store.upsert({
        owner: 'acme',
        repo: 'widgets',
        issueNumber: n,
        slug: `claude-fleet${n}`,
        agentName: 'claude',
        bottleNames: ['fake'],
        backendName: 'fake',
        agentGitUser: 'bb-bot',
        prNumber: null,
        status: 'frozen',
        lastCheckinAt: now,
        sessionId: null,
        cwd: null,
        createdAt: now,
        updatedAt: now,
      });
    await state.close();
  }
  const one = [await replica(server.url, 'one', 'solo', home())];
  const sharedHome = home();
  const three = await Promise.all(
    ['r1', 'r2', 'r3'].map((h) => replica(server.url, 'three', h, sharedHome)),
  );
  const floorOne = [await replica(server.url, 'floor1', 'floor-solo', home())];
  const floorThree = await Promise.all(
    ['floor-a', 'floor-b', 'floor-c'].map((h) => replica(server.url, 'floor3', h, home())),
  );
  all.push(...one, ...three, ...floorOne, ...floorThree);
  type Round = Awaited<ReturnType<typeof round>>;
  const sides = { one, three, floorOne, floorThree };
  type Side = keyof typeof sides;
  // Warm: each side's statements planned, its pools filled.
  for (const [i, side] of (Object.keys(sides) as Side[]).entries())
    await round(sides[side], 1 + i * 100_000);
  const rounds: Array<Record<Side, Round>> = [];
  for (let r = 0; r < ROUNDS; r++) {
    const id = 10_000_000 + r * 1_000_000;
    const order: Side[] = ['one', 'three', 'floorOne', 'floorThree'];
    // The order turned each round.
    if (r % 2 === 1) order.reverse();
    const got: Partial<Record<Side, Round>> = {};
    for (const [i, side] of order.entries()) got[side] = await round(sides[side], id + i * 100_000);
    rounds.push(got as Record<Side, Round>);
  }
  const ratios = rounds.map((x) => x.three.perSecond / x.one.perSecond);
  const mid = [...rounds].sort(
    (x, y) => x.three.perSecond / x.one.perSecond - y.three.perSecond / y.one.perSecond,
  )[Math.floor(rounds.length / 2)]!;
  // The database's work per delivery over every round (one round's window is noisy).
  const per = (side: 'one' | 'three', k: 'statements' | 'rows') =>
    rounds.reduce((a, x) => a + x[side][k], 0) / rounds.length;
  const stmtRatio = per('three', 'statements') / per('one', 'statements');
  const rowRatio = per('three', 'rows') / per('one', 'rows');
  const ackRatio = mid.three.perSecond / mid.one.perSecond;
  const floorRatios = rounds.map((x) => x.floorThree.perSecond / x.floorOne.perSecond);
  const floorRatio = [...floorRatios].sort((a, b) => a - b)[Math.floor(rounds.length / 2)]!;
  reportBench({
    name: 'fleet-throughput',
    metric: `webhook acks/s, three replicas (processes) vs one on one PostgreSQL (durable), ${N} issue comments over ${ISSUES} issues at concurrency 10, round robin; median of ${ROUNDS} rounds`,
    ours: mid.three.perSecond,
    baseline: mid.one.perSecond,
    goal: 0.95,
    higherIsBetter: true,
    target: '>= 0.95x; statements and rows per delivery <= 1.2x',
    pass: ackRatio >= 0.95 && stmtRatio <= 1.2 && rowRatio <= 1.2,
    extra: {
      roundRatios: ratios.map(ms3).join(', '),
      statementsPerDeliveryThree: ms3(per('three', 'statements')),
      statementsPerDeliveryOne: ms3(per('one', 'statements')),
      statementsRatio: ms3(stmtRatio),
      rowsPerDeliveryThree: ms3(per('three', 'rows')),
      rowsPerDeliveryOne: ms3(per('one', 'rows')),
      rowsRatio: ms3(rowRatio),
      // The floor: three processes of the least endpoint doing the same write against one.
      floorThreePerSecond: Math.round(mid.floorThree.perSecond),
      floorOnePerSecond: Math.round(mid.floorOne.perSecond),
      floorRatio: ms3(floorRatio),
      floorRoundRatios: floorRatios.map(ms3).join(', '),
    },
  });
} finally {
  for (const r of all) r.child.stdin?.write('quit\n');
  await new Promise((r) => setTimeout(r, 300));
  for (const r of all) r.child.kill('SIGKILL');
  await server.stop();
  for (const d of homes) rmSync(d, { recursive: true, force: true });
}
