// No issue waits for another in the orchestrator's dispatch: the time from a new
// issue's delivery being accepted to the orchestrator's first forge call for it (its
// fresh read), with 8 long agent turns running, vs the same with none running, in one
// run. The turns are a test runner's, not bottles: this isolates the orchestrator
// (apps/cli/bench/head-of-line.bench.ts measures the same with real bottles).
// The design's floor, reported beside them: the forge call made directly. Goal:
// <= 1.5x.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ForgeEvent } from '@bb/forge';
import { MemoryForge } from '@bb/forge/testing';
import { ProvenanceStore } from '@bb/provenance';
import { SqliteForgeStateStore } from '@bb/state';
import { benchSize, reportBench } from '@bb/tooling/bench';
import { ms3, pct } from './load';
import { benchOrchestrator } from './orchestrator';

const TRIALS = benchSize(200, 20);
const LONG = 8;

async function measure(long: number): Promise<{ lat: number[]; floor: number[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'bb-hol-'));
  const store = new SqliteForgeStateStore({ path: join(dir, 'bb.db') });
  let firstCall: ((issue: number) => void) | undefined;
  const { orch, runner, world } = benchOrchestrator(
    store,
    new ProvenanceStore(store.database),
    dir,
    {
      // The first forge call of an issue is its fresh read: that is what is timed.
      forgeFor: (owner, repo) => {
        const f = new MemoryForge({ owner, repo, as: 'bb-bot', world });
        const read = f.readIssue.bind(f);
        f.readIssue = (n) => {
          firstCall?.(n);
          return read(n);
        };
        return f;
      },
    },
  );
  let seq = 0;
  const targeted = (n: number): ForgeEvent => ({
    kind: 'issue_targeting_changed',
    action: 'assigned',
    key: `hol:${n}:${++seq}`,
    deliveryId: undefined,
    owner: 'acme',
    repo: 'widgets',
    sender: { id: 1, login: 'alice' },
    occurredAt: new Date(Date.UTC(2026, 0, 1) + seq * 1000).toISOString(),
    issue: {
      number: n,
      title: 't',
      labels: ['bot-bottle:claude'],
      assignees: ['bb-bot'],
      state: 'open',
    },
  });
  const addIssue = () =>
    world.addIssue('acme', 'widgets', {
      title: 'x',
      author: 'alice',
      labels: ['bot-bottle:claude'],
      assignees: ['bb-bot'],
    });
  // The long turns: launched, and never ending while we measure.
  for (let i = 0; i < long; i++) await orch.accept(targeted(addIssue()));
  while (runner.runningSlugs.length < long) await new Promise((r) => setTimeout(r, 5));
  await orch.idle();
  const lat: number[] = [];
  const floor: number[] = [];
  const direct = new MemoryForge({ owner: 'acme', repo: 'widgets', as: 'bb-bot', world });
  for (let t = 0; t < TRIALS; t++) {
    const n = addIssue();
    const seen = new Promise<number>((resolve) => {
      firstCall = (i) => {
        if (i === n) resolve(performance.now());
      };
    });
    const s = performance.now();
    await orch.accept(targeted(n));
    lat.push((await seen) - s);
    await orch.idle();
    // That issue's agent: ended at once, so only the long ones keep running.
    const slug = orch.bottle(`acme/widgets#${n}`)?.slug;
    if (slug) runner.agent(slug).exit(0);
    const f = performance.now();
    await direct.readIssue(n);
    floor.push(performance.now() - f);
  }
  for (const slug of runner.runningSlugs) runner.agent(slug).exit(0);
  await orch.settled();
  orch.close();
  store.close();
  rmSync(dir, { recursive: true, force: true });
  return { lat: lat.sort((a, b) => a - b), floor: floor.sort((a, b) => a - b) };
}

await measure(0); // warm-up
const idle = await measure(0);
const busy = await measure(LONG);
reportBench({
  name: 'head-of-line-dispatch',
  metric: `median ms from a new issue's accepted delivery to the orchestrator's first forge call for it, ${LONG} long turns of a test runner running vs none`,
  ours: pct(busy.lat, 50),
  baseline: pct(idle.lat, 50),
  goal: 1.5,
  higherIsBetter: false,
  extra: {
    busyP99ms: ms3(pct(busy.lat, 99)),
    idleP99ms: ms3(pct(idle.lat, 99)),
    floorDirectCallMedianMs: ms3(pct(busy.floor, 50)),
    longTurns: LONG,
    trials: TRIALS,
  },
});
