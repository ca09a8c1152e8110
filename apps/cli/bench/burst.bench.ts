// A burst: 50 issues targeted within one second, through `bb orchestrate serve` (the
// real binary, its default startup concurrency) with real bottles on this machine and
// a memory budget that fits them all. Timed, for each issue, from its webhook to its
// agent's first forge call; counted, the launches that failed or never called; and
// the machine's memory in use at its peak above where it was before the burst. The
// floor, in the same run once ours is torn down: 50 bare pairs, as many at a time as
// the service starts bottles (BB_STARTUP_CONCURRENCY, 8 on both sides), each a sidecar
// holding the token (`docker run`) and, once it listens, the same agent beside it
// (`docker run`) making the same call. Goal: p95 <= 10 s, no launch failed or lost.
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { HOME_LABEL, homeLabel } from '@bb/headless';
import { scriptAgent } from '@bb/headless/testing';
import { benchSize, median, p95, reportBench, waitForPath } from '@bb/tooling/bench';
import { probeDocker } from '@bb/tooling/docker';
import { floorPieces } from './floor-pieces';
import { opTimesIn, startServeBench } from './serve-harness';

const docker = await probeDocker();
if (!docker.ok) {
  console.log(`burst bench skipped: ${docker.reason}`);
  process.exit(0);
}
const N = benchSize(50, 3);
// Bottles started at once, on both sides.
const CONCURRENCY = 8;
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
  serviceEnv: {
    BB_MEMORY_BUDGET: '400g',
    BB_WARM_WINDOW: '0',
    BB_STARTUP_CONCURRENCY: String(CONCURRENCY),
  },
});
const { run } = h;
const { bareSidecar, bareDirs, own, agentArgs } = floorPieces(h);
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
    // One watcher for all of them, every 50 ms: the times are the op logs' own, and 50
    // pollers reading every meta file every 5 ms would take a core from the service.
    const found = new Map<number, { slug: string; ms: number }>();
    const deadline = Date.now() + 240_000;
    while (found.size < N && Date.now() < deadline) {
      for (const { issue, at } of filed) {
        if (found.has(issue)) continue;
        const b = h.bottleOf('widgets', issue);
        const first = b && h.ops(b.slug)[0];
        if (b && first !== undefined) found.set(issue, { slug: b.slug, ms: first - at });
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    failed = N - found.size;
    return [...found.values()];
  });
  oursPeak = burst.peakMiB - before;
  for (const b of burst.value) if (b) ours.push(b.ms);
  // Every turn ends and is recorded (none was lost), and its containers are gone before
  // the floor's clock starts.
  for (const b of burst.value) await h.untilFrozen(b.slug, 1);
  const label = { [HOME_LABEL]: homeLabel(h.env) };
  for (let i = 0; (await h.backend.list(label)).some((c) => c.labels['bb.slug']); i++) {
    if (i > 1200) throw new Error('the burst bottles were not torn down within 2 min');
    await new Promise((r) => setTimeout(r, 100));
  }

  // The floor: N bare pairs, CONCURRENCY at a time, each a sidecar holding the token
  // and the agent beside it making the same call once the sidecar listens: what any
  // design with a gate per issue has to start. Its agents get their network namespace
  // at start, as most of ours do in a burst (the service keeps two made ahead).
  const pairs = Array.from({ length: N }, () => bareDirs());
  for (const d of pairs) await own(d);
  const issue = h.server.createIssue('alice', 'acme/widgets', { title: 'Bare' });
  const floorBefore = inUse();
  const t0 = Date.now();
  let next = 0;
  const bare = await peakDuring(() =>
    Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < N) {
          const d = pairs[next++]!;
          await bareSidecar('widgets', issue, d.sock, d.state, d.ws);
          await waitForPath(join(d.sock, 'forge.sock'), 120_000);
          await run('docker', ['run', '--rm', ...agentArgs(d)]);
        }
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
    metric: `${N} issues within one second through bb orchestrate serve: webhook to each agent's first forge call, p95 ms (vs ${N} bare sidecar + agent pairs, ${CONCURRENCY} at a time on both sides)`,
    ours: p,
    baseline: p95(floor),
    goal: 10_000,
    higherIsBetter: false,
    target: '<= 10000 ms p95, no launch failed or lost',
    pass: p <= 10_000 && failed === 0 && ours.length === N,
    extra: {
      issues: N,
      failed,
      oursMedianMs: median(ours),
      floorMedianMs: median(floor),
      memoryPeakMiB: Math.round(oursPeak),
      floorMemoryPeakMiB: Math.round(floorPeak),
    },
  });
}
