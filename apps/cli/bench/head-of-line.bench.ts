// No issue waits for another, with real bottles: through `bb orchestrate serve` (the
// real binary, the Gitea-compatible test server delivering signed webhooks), the time
// from a new issue's webhook to its agent's first forge call while 8 long agent turns
// run in their own bottles, vs the same launch with none running, in one run (the
// idle rounds first, then the 8 turns are started and kept going through the busy
// rounds). Goal: <= 1.5x.
import { scriptAgent } from '@bb/headless/testing';
import { benchRounds, benchSize, median, reportBench } from '@bb/tooling/bench';
import { probeDocker } from '@bb/tooling/docker';
import { startServeBench, until } from './serve-harness';

const docker = await probeDocker();
if (!docker.ok) {
  console.log(`head-of-line bench skipped: ${docker.reason}`);
  process.exit(0);
}
const ROUNDS = benchRounds(5, 1);
const LONG = benchSize(8, 2);
const h = await startServeBench({
  prefix: 'bb-bench-hol-',
  agents: {
    // A long turn: it reads its issue, then works (sleeps) past the end of the bench.
    long: scriptAgent([{ steps: [{ do: 'read_issue' }, { do: 'sleep', ms: 900_000 }] }], {
      name: 'L',
    }),
    bench: scriptAgent(
      [{ steps: [{ do: 'read_issue' }, { do: 'done', status: 'success', summary: 'ok' }] }],
      { name: 'B' },
    ),
  },
});

const idle: number[] = [];
const busy: number[] = [];
try {
  // One bottle first: the service's runtime files and the repository's mirror exist after it.
  await h.untilFrozen((await h.firstCall('widgets', 'Warm-up', 'bench')).slug, 1);
  for (let r = 0; r < ROUNDS; r++) {
    const { ms, slug } = await h.firstCall('widgets', `Idle ${r}`, 'bench');
    idle.push(ms);
    await h.untilFrozen(slug, 1);
  }
  // The long turns, all at once, each until its agent is at work.
  const longs = Array.from({ length: LONG }, (_, i) => h.file('widgets', `Long ${i}`, 'long'));
  await Promise.all(
    longs.map(async ({ issue }) => {
      const { slug } = await until('a long bottle to be made', () => h.bottleOf('widgets', issue));
      await until('its agent at work', () => h.ops(slug)[0], 180_000);
    }),
  );
  for (let r = 0; r < ROUNDS; r++) {
    const { ms, slug } = await h.firstCall('widgets', `Busy ${r}`, 'bench');
    busy.push(ms);
    await h.untilFrozen(slug, 1);
  }
  // Still running: the busy rounds were measured beside them.
  for (const { issue } of longs)
    if (h.bottleOf('widgets', issue)?.meta.status !== 'running')
      throw new Error(`the long turn of issue #${issue} ended before the busy rounds did`);
} catch (err) {
  h.failed(err);
} finally {
  await h.close();
}

if (process.exitCode !== 1)
  reportBench({
    name: 'head-of-line',
    metric: `median ms from a new issue's webhook to its agent's first forge call in a real bottle, ${LONG} long turns running in theirs vs none`,
    ours: median(busy),
    baseline: median(idle),
    goal: 1.5,
    higherIsBetter: false,
    extra: {
      rounds: ROUNDS,
      longTurns: LONG,
      busyMs: busy.join(' '),
      idleMs: idle.join(' '),
    },
  });
