// Launch and resume through the running service: `bb orchestrate serve` (the real
// binary) with the Gitea-compatible test server delivering signed webhooks, the
// script agent in real bottles. Each figure is timed to the agent's first forge
// call (its entry in the op log) and set, round by round in the same run, against
// the design's floor on this machine:
//   lifecycle        issue webhook -> first call vs a bare `docker run` of the same
//                    agent making the same call to an already running sidecar, in a
//                    network namespace made beforehand as the service's are (<= 1.2x)
//   lifecycle-large  the same on a 20,000-file repository, from its second bottle
//                    on, vs `git clone --shared` of a local mirror onto a loop-mounted
//                    disk made beforehand + that `docker run` (<= 1.2x)
//   resume-warm      PR-comment webhook -> the resumed agent's first call inside the
//                    bottle's warm window vs a `docker exec` of the same agent in an
//                    idle running container (<= 1.2x)
//   resume-cold      the same once the window is over vs a `docker start` of a
//                    stopped sidecar + agent pair, both at once (<= 0.6x)
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BottleMeta } from '@bb/headless';
import { benchRounds, benchSize, median, QUICK, reportBench, waitForPath } from '@bb/tooling/bench';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { floorPieces } from './floor-pieces';
import { opTimesIn, prAgent, startServeBench, TOKEN, until } from './serve-harness';

const docker = await probeDocker();
if (!docker.ok) {
  console.log(`lifecycle bench skipped: ${docker.reason}`);
  process.exit(0);
}
const ROUNDS = benchRounds(5, 1);
const WARM_WINDOW_MS = 4000;
const LARGE_FILES = Number(process.env['BB_BENCH_LARGE_FILES'] ?? benchSize(20_000, 2000));
const large: Record<string, string> = {};
for (let i = 0; i < LARGE_FILES; i++) large[`f${i}.txt`] = `file ${i}\n${'x'.repeat(i % 300)}\n`;
const h = await startServeBench({
  prefix: 'bb-bench-life-',
  repos: { large },
  agents: { bench: prAgent() },
  // Short, so a round also measures the cold resume once it is over.
  serviceEnv: { BB_WARM_WINDOW: `${WARM_WINDOW_MS}ms` },
});
const { server, home, backend, run, ops, untilFrozen } = h;
const bottleOf2 = h.meta;

/** Issue webhook -> the launched agent's first forge call; the bottle frozen after. */
async function launchRound(repo: string, title: string): Promise<{ ms: number; slug: string }> {
  const out = await h.firstCall(repo, title, 'bench');
  // Its turn recorded by the service: the next event of the issue is not queued behind it.
  await untilFrozen(out.slug, 1);
  return out;
}

/** The id of a bottle's agent container, when it has one. */
async function agentOf(slug: string): Promise<string | undefined> {
  return (await backend.list({ 'bb.slug': slug })).find((c) => c.labels['bb.role'] === 'agent')?.id;
}

/** Wait until the service has cooled a warm bottle (its window over): its containers gone. */
async function untilCooled(slug: string): Promise<void> {
  await until(
    'the warm bottle to be cooled',
    () => (!bottleOf2(slug)?.warm ? true : undefined),
    WARM_WINDOW_MS + 60_000,
  );
  for (let i = 0; (await agentOf(slug)) !== undefined; i++) {
    if (i > 600) throw new Error(`the containers of ${slug} stayed after it was cooled`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** PR comment webhook -> the resumed agent's first forge call; `warm`: it must (not) be warm. */
async function resumeRound(repo: string, slug: string, warm: boolean): Promise<number> {
  const agentBefore = await agentOf(slug);
  const turns = bottleOf2(slug)?.turns.length ?? 0;
  if (warm !== !!agentBefore)
    throw new Error(
      `${slug} is ${agentBefore ? 'warm' : 'cold'}, the round needs it ${warm ? 'warm' : 'cold'}`,
    );
  const meta = bottleOf2(slug)!;
  const issue = server.issue(`acme/${repo}`, meta.forge!.issue);
  const pr = [...server.repos.get(`acme/${repo}`)!.issues.values()].find(
    (i) => i.pull && i.pull.headRef === meta.branch,
  );
  if (!pr) throw new Error(`no PR for ${slug} (issue #${issue.number})`);
  const before = ops(slug).length;
  const t0 = Date.now();
  server.comment('alice', `acme/${repo}`, pr.number, 'Once more, please.');
  const first = await until('the resumed first call', () => ops(slug)[before]);
  const agentAfter = await agentOf(slug);
  await untilFrozen(slug, turns + 1);
  // Warm: the turn ran in the container kept; cold: in a new one.
  if (warm !== (agentAfter === agentBefore))
    throw new Error(
      `${slug} resumed ${warm ? 'cold' : 'warm'} where the round measures it ${warm ? 'warm' : 'cold'}`,
    );
  return first - t0;
}

const { bareSidecar, bareDirs, loopDisk, own, netnsHolder, agentFlags, agentArgs, AGENT_CMD } =
  floorPieces(h);

const ours: number[] = [];
const base: number[] = [];
const resumes: number[] = [];
const starts: number[] = [];
const warmResumes: number[] = [];
const execs: number[] = [];
const oursLarge: number[] = [];
const baseLarge: number[] = [];
try {
  // One bottle first: the service's runtime files and the repository's mirror exist after it.
  const warm = await launchRound('widgets', 'Warm-up');
  await resumeRound('widgets', warm.slug, true);
  await untilCooled(warm.slug);
  await resumeRound('widgets', warm.slug, false);
  await untilCooled(warm.slug);
  for (let r = 0; r < ROUNDS; r++) {
    const { ms, slug } = await launchRound('widgets', `Bench ${r}`);
    ours.push(ms);
    // Inside its warm window, then once the window is over.
    warmResumes.push(await resumeRound('widgets', slug, true));
    await untilCooled(slug);
    resumes.push(await resumeRound('widgets', slug, false));
    // Kept warm again: cooled before anything else is measured, so no cooling runs beside it.
    await untilCooled(slug);

    const d = bareDirs();
    await own(d);
    const issue = (
      JSON.parse(readFileSync(join(home, 'bottles', slug, 'meta.json'), 'utf8')) as BottleMeta
    ).forge!.issue;
    const sidecar = await bareSidecar('widgets', issue, d.sock, d.state, d.ws);
    await waitForPath(join(d.sock, 'forge.sock'));
    const bare = () => opTimesIn(join(d.state, 'ops.jsonl'));
    const net = await netnsHolder();
    const t1 = Date.now();
    await run('docker', ['run', '--rm', ...agentArgs(d, net)]);
    base.push(bare()[0]! - t1);
    // A stopped pair, started again: the cheapest way back to a bottle that ran.
    const agent = (await run('docker', ['create', ...agentArgs(d, net)])).trim();
    await run('docker', ['start', '-a', agent]);
    await run('docker', ['stop', '-t', '1', sidecar]);
    const before = bare().length;
    const t2 = Date.now();
    // Both at once, as the service starts a bottle's pair.
    await Promise.all([run('docker', ['start', sidecar]), run('docker', ['start', agent])]);
    const firstAgain = await until('the restarted pair to call', () => bare()[before]);
    starts.push(firstAgain - t2);
    // The same agent run by `docker exec` in a running, idle container beside a running sidecar.
    const idle = (
      await run('docker', ['run', '-d', ...agentFlags(d, net), BASE_IMAGE, 'sleep', '3600'])
    ).trim();
    const beforeExec = bare().length;
    const t3 = Date.now();
    await run('docker', ['exec', idle, ...AGENT_CMD]);
    execs.push((await until('the exec to call', () => bare()[beforeExec])) - t3);
    await run('docker', ['rm', '-f', sidecar, agent, idle, net]);
    rmSync(d.root, { recursive: true, force: true });
  }

  // A large repository: the first bottle fills the mirror; the rest only fetch.
  process.stderr.write(`lifecycle-large: ${LARGE_FILES} files\n`);
  await untilCooled((await launchRound('large', 'Large warm-up')).slug);
  const mirror = mkdtempSync(join(tmpdir(), 'bb-bench-mirror-'));
  await run('git', [
    'clone',
    '-q',
    '--bare',
    '-c',
    `http.extraHeader=Authorization: token ${TOKEN}`,
    server.cloneUrl('acme/large'),
    join(mirror, 'large.git'),
  ]);
  const largeRounds = QUICK ? 1 : Math.max(3, Math.ceil(ROUNDS / 2));
  for (let r = 0; r < largeRounds; r++) {
    const large = await launchRound('large', `Large ${r}`);
    oursLarge.push(large.ms);
    await untilCooled(large.slug);
    const d = bareDirs();
    // The clone lands on a disk like a bottle's, formatted before the clock starts (the
    // service takes its disks from a pool of formatted images) and mounted after it: the
    // same filesystem, not the host's, which is slower at 20,000 small files.
    const disk = await loopDisk(d.ws);
    await own(d);
    const mounted = d.ws;
    d.ws = join(mounted, 'workspace');
    const issue = server.createIssue('alice', 'acme/large', { title: `Bare ${r}` });
    const sidecar = await bareSidecar('large', issue, d.sock, d.state, d.root);
    await waitForPath(join(d.sock, 'forge.sock'));
    const net = await netnsHolder();
    const t = Date.now();
    await disk.mount();
    await run('git', ['clone', '-q', '--shared', join(mirror, 'large.git'), d.ws]);
    // As in a bottle: the agent's files are its user's.
    await run('chown', ['-R', '1000:1000', d.ws]);
    await run('docker', ['run', '--rm', ...agentArgs(d, net)]);
    baseLarge.push(opTimesIn(join(d.state, 'ops.jsonl'))[0]! - t);
    await run('docker', ['rm', '-f', sidecar, net]);
    await run('umount', [join(d.root, 'ws')]);
    rmSync(d.root, { recursive: true, force: true });
  }
  rmSync(mirror, { recursive: true, force: true });
} catch (err) {
  h.failed(err);
} finally {
  await h.close();
}

if (process.exitCode !== 1) {
  // Median of per-round ratios: each round's sides ran back to back.
  const ratioOf = (a: number[], b: number[]) => median(a.map((o, i) => o / b[i]!));
  const report = (name: string, metric: string, a: number[], b: number[], goal: number) => {
    const ratio = ratioOf(a, b);
    reportBench({
      name,
      metric,
      ours: median(b) * ratio,
      baseline: median(b),
      goal,
      higherIsBetter: false,
      extra: {
        rounds: a.length,
        oursMedianMs: median(a),
        baselineMedianMs: median(b),
        oursMs: a.join(' '),
        baselineMs: b.join(' '),
      },
    });
  };
  report(
    'lifecycle',
    "ms from the issue webhook to the agent's first forge call through `bb orchestrate serve` (vs a bare `docker run` of the same agent making the same call, in a network namespace made beforehand)",
    ours,
    base,
    1.2,
  );
  report(
    'resume-warm',
    "ms from the PR-comment webhook to the resumed agent's first forge call inside the bottle's warm window (vs `docker exec` of the same agent in an idle running container)",
    warmResumes,
    execs,
    1.2,
  );
  report(
    'resume-cold',
    "ms from the PR-comment webhook to the resumed agent's first forge call (vs `docker start` of a stopped sidecar + agent pair, both at once)",
    resumes,
    starts,
    0.6,
  );
  report(
    'lifecycle-large',
    `ms from the issue webhook to the agent's first forge call on a ${LARGE_FILES}-file repository, second bottle on (vs a formatted disk mounted, \`git clone --shared\` of a local mirror onto it, the files given to the agent, then a bare \`docker run\`)`,
    oursLarge,
    baseLarge,
    1.2,
  );
}
