// A burst: 50 issues targeted within one second, through `bb orchestrate serve` (the
// real binary, its default startup concurrency) with real bottles on this machine and
// a memory budget that fits them all. Timed, for each issue, from its webhook to its
// agent's first forge call; counted, the launches that failed or never called; and
// the machine's memory in use at its peak above where it was before the burst. The
// floor, in the same run: 50 bare pairs started at once, each a sidecar holding the
// token (`docker run`) and, once it listens, the same agent beside it (`docker run`,
// in a network namespace made beforehand) making the same call. Goal: p95 <= 10 s, no
// launch failed or lost.
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { scriptAgent } from '@bb/headless/testing';
import { benchSize, reportBench, waitForPath } from '@bb/tooling/bench';
import { probeDocker } from '@bb/tooling/docker';
import { floorPieces } from './floor-pieces';
import { opTimesIn, startServeBench, until } from './serve-harness';

const docker = await probeDocker();
if (!docker.ok) {
  console.log(`burst bench skipped: ${docker.reason}`);
  process.exit(0);
}
const N = benchSize(50, 5);
const h = await startServeBench({
  prefix: 'bb-bench-burst-',
  agents: {
    // Its first call, then a few seconds of work: the burst's bottles all run at once.
    bench: scriptAgent(
      [
        {
          steps: [
            { do: 'read_issue' },
            { do: 'sleep', ms: 5000 },
            { do: 'done', status: 'success', summary: 'ok' },
          ],
        },
      ],
      { name: 'B' },
    ),
  },
  serviceEnv: { BB_MEMORY_BUDGET: '400g', BB_WARM_WINDOW: '0' },
});
const { run } = h;
const { bareSidecar, bareDirs, own, netnsHolder, agentArgs } = floorPieces(h);
const p95 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.ceil(xs.length * 0.95) - 1]!;
const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
/** Memory in use on the machine (MemTotal - MemAvailable), MiB. */
const inUse = () => {
  const m = Object.fromEntries(
    readFileSync('/proc/meminfo', 'utf8')
      .split('\n')
      .map((l) => /^(\w+):\s+(\d+)/.exec(l))
      .filter((x): x is RegExpExecArray => !!x)
      .map((x) => [x[1], Number(x[2])]),
  );
  return (m['MemTotal']! - m['MemAvailable']!) / 1024;
};
/** The peak of `inUse` while `f` runs, sampled every 100 ms. */
async function peakDuring<T>(f: () => Promise<T>): Promise<{ value: T; peakMiB: number }> {
  let peak = inUse();
  const t = setInterval(() => {
    peak = Math.max(peak, inUse());
  }, 100);
  try {
    return { value: await f(), peakMiB: peak };
  } finally {
    clearInterval(t);
  }
}

const ours: number[] = [];
const floor: number[] = [];
let failed = 0;
let oursPeak = 0;
let floorPeak = 0;
try {
  // One bottle first: the service's runtime files and the repository's mirror exist after it.
  await h.untilFrozen((await h.firstCall('widgets', 'Warm-up', 'bench')).slug, 1);

  // Ours: N issues filed within a second, every one launched and calling.
  const before = inUse();
  const burst = await peakDuring(async () => {
    const filed = Array.from({ length: N }, (_, i) => h.file('widgets', `Burst ${i}`, 'bench'));
    return Promise.all(
      filed.map(async ({ issue, at }) => {
        try {
          const { slug } = await until('its bottle', () => h.bottleOf('widgets', issue), 120_000);
          const first = await until('its first call', () => h.ops(slug)[0], 120_000);
          return { slug, ms: first - at };
        } catch {
          failed++;
          return undefined;
        }
      }),
    );
  });
  oursPeak = burst.peakMiB - before;
  for (const b of burst.value) if (b) ours.push(b.ms);
  // Every turn ends and is recorded: none was lost.
  for (const b of burst.value) if (b) await h.untilFrozen(b.slug, 1);

  // The floor: N bare pairs at once, each a sidecar holding the token and the agent
  // beside it (in a network namespace made beforehand) making the same call once the
  // sidecar listens: what any design with a gate per issue has to start.
  const pairs = Array.from({ length: N }, () => bareDirs());
  for (const d of pairs) await own(d);
  const issue = h.server.createIssue('alice', 'acme/widgets', { title: 'Bare' });
  const holders = await Promise.all(pairs.map(() => netnsHolder()));
  const floorBefore = inUse();
  const t0 = Date.now();
  const bare = await peakDuring(() =>
    Promise.all(
      pairs.map(async (d, i) => {
        await bareSidecar('widgets', issue, d.sock, d.state, d.ws);
        await waitForPath(join(d.sock, 'forge.sock'), 120_000);
        await run('docker', ['run', '--rm', ...agentArgs(d, holders[i]!)]);
      }),
    ),
  );
  floorPeak = bare.peakMiB - floorBefore;
  for (const d of pairs) {
    const first = opTimesIn(join(d.state, 'ops.jsonl'))[0];
    if (first === undefined) throw new Error('a bare pair made no call');
    floor.push(first - t0);
    rmSync(d.root, { recursive: true, force: true });
  }
} catch (err) {
  h.failed(err);
} finally {
  await h.close();
}

if (process.exitCode !== 1) {
  const p = p95(ours);
  reportBench({
    name: 'burst',
    metric: `${N} issues within one second through bb orchestrate serve: webhook to each agent's first forge call, p95 ms (vs ${N} bare sidecar + agent pairs started at once)`,
    ours: p,
    baseline: p95(floor),
    goal: 10_000,
    higherIsBetter: false,
    target: '<= 10000 ms p95, no launch failed or lost',
    pass: p <= 10_000 && failed === 0 && ours.length === N,
    extra: {
      issues: N,
      failed,
      oursMedianMs: p50(ours),
      floorMedianMs: p50(floor),
      memoryPeakMiB: Math.round(oursPeak),
      floorMemoryPeakMiB: Math.round(floorPeak),
    },
  });
}
