// The warm pool through the running service: `bb orchestrate serve` with
// BB_POOL=bench:1, so a bottle of the agent is made ahead of its issue. Each round
// waits until the pool holds a ready bottle (as it does between issues on a machine
// with room), files an issue and times its webhook to the agent's first forge call
// (its op-log entry), checking that the pooled bottle served it; then, in the same
// round, the floor: a bare `docker run` of the same agent making the same call to an
// already running sidecar, in a network namespace made beforehand (the lifecycle
// bench's floor). Goal: p50 <= 0.5x the floor (#43). Beside it, the design's own
// floor: the same agent started in an already running container by a file the host
// writes, beside a running sidecar (nothing bound, nothing checked out).
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BottleMeta } from '@bb/headless';
import { benchRounds, median, reportBench, waitForPath } from '@bb/tooling/bench';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { floorPieces } from './floor-pieces';
import { opTimesIn, prAgent, startServeBench, until } from './serve-harness';

const docker = await probeDocker();
if (!docker.ok) {
  console.log(`warm-pool bench skipped: ${docker.reason}`);
  process.exit(0);
}
const ROUNDS = benchRounds(7, 2);
const h = await startServeBench({
  prefix: 'bb-bench-pool-',
  agents: { bench: prAgent() },
  serviceEnv: { BB_POOL: 'bench:1', BB_WARM_WINDOW: '0' },
});
const { home, run, untilFrozen } = h;

/** The slugs of the pooled bottles ready now (their containers up, not taken). */
function readyPooled(): string[] {
  const dir = join(home, 'bottles');
  let slugs: string[] = [];
  try {
    slugs = readdirSync(dir);
  } catch {
    return [];
  }
  return slugs.filter((s) => {
    try {
      const m = JSON.parse(readFileSync(join(dir, s, 'meta.json'), 'utf8')) as BottleMeta;
      return !!m.pooled?.key;
    } catch {
      return false;
    }
  });
}

const { bareSidecar, bareDirs, own, netnsHolder, agentArgs, agentFlags, AGENT_CMD } =
  floorPieces(h);
const ours: number[] = [];
const base: number[] = [];
const floor: number[] = [];
try {
  // One bottle first: the runtime files and the repository's mirror exist after it.
  const first = await until('a pooled bottle', () => readyPooled()[0], 120_000);
  const warm = await h.firstCall('widgets', 'Warm-up', 'bench');
  if (warm.slug !== first)
    throw new Error(`the warm-up ran in ${warm.slug}, not the pooled ${first}`);
  await untilFrozen(warm.slug, 1);
  for (let r = 0; r < ROUNDS; r++) {
    // The pool refilled, its bottle up and counted, before the issue comes.
    const ready = await until('the pool to refill', () => readyPooled()[0], 120_000);
    await new Promise((res) => setTimeout(res, 500));
    const { ms, slug } = await h.firstCall('widgets', `Bench ${r}`, 'bench');
    if (slug !== ready) throw new Error(`round ${r} ran in ${slug}, not the pooled ${ready}`);
    ours.push(ms);
    await untilFrozen(slug, 1);
    // The pool refills now: the floor waits for it, so nothing else runs beside it.
    await until('the pool to refill', () => readyPooled()[0], 120_000);
    await new Promise((res) => setTimeout(res, 500));

    const d = bareDirs();
    await own(d);
    const issue = h.meta(slug)!.forge!.issue;
    const sidecar = await bareSidecar('widgets', issue, d.sock, d.state, d.ws);
    await waitForPath(join(d.sock, 'forge.sock'));
    const net = await netnsHolder();
    const t = Date.now();
    await run('docker', ['run', '--rm', ...agentArgs(d, net)]);
    base.push(opTimesIn(join(d.state, 'ops.jsonl'))[0]! - t);
    // The design's own floor: what a pooled bottle cannot do without, and nothing else.
    // A container already running beside a sidecar already serving, its agent started by
    // a file the host writes (as the waiter's turn command), with no binding at all.
    const ops = () => opTimesIn(join(d.state, 'ops.jsonl'));
    const before = ops().length;
    const idle = (
      await run('docker', [
        'run',
        '-d',
        ...agentFlags(d, net),
        BASE_IMAGE,
        'sh',
        '-c',
        `while [ ! -e /home/bottle/.go ]; do sleep 0.005; done; exec ${AGENT_CMD.join(' ')}`,
      ])
    ).trim();
    await new Promise((res) => setTimeout(res, 500));
    const t2 = Date.now();
    writeFileSync(join(d.home, '.go'), '');
    floor.push((await until('the started agent to call', () => ops()[before])) - t2);
    await run('docker', ['rm', '-f', sidecar, net, idle]);
    rmSync(d.root, { recursive: true, force: true });
  }
} catch (err) {
  h.failed(err);
} finally {
  await h.close();
}

if (process.exitCode !== 1) {
  const ratio = median(ours.map((o, i) => o / base[i]!));
  reportBench({
    name: 'warm-pool',
    metric:
      "ms from the issue webhook to the agent's first forge call through `bb orchestrate serve` with a pooled bottle ready (BB_POOL), vs a bare `docker run` of the same agent making the same call, in a network namespace made beforehand",
    ours: median(base) * ratio,
    baseline: median(base),
    goal: 0.5,
    higherIsBetter: false,
    extra: {
      rounds: ours.length,
      oursMedianMs: median(ours),
      baselineMedianMs: median(base),
      oursMs: ours.join(' '),
      baselineMs: base.join(' '),
      // The design's floor (no binding at all: a running container whose agent a file
      // starts, beside a running sidecar), against the same bare run: under the goal
      // only if the agent's own start is under half the bare run's.
      designFloorMedianMs: median(floor),
      designFloorRatio: median(floor.map((f, i) => f / base[i]!)),
      designFloorMs: floor.join(' '),
    },
  });
}
