// Launch and resume through the running service: `bb orchestrate serve` (the real
// binary) with the Gitea-compatible test server delivering signed webhooks, the
// script agent in real bottles. Each figure is timed to the agent's first forge
// call (its entry in the op log) and set, round by round in the same run, against
// the design's floor on this machine:
//   lifecycle        issue webhook -> first call vs a bare `docker run` of the same
//                    agent making the same call to an already running sidecar (<= 1.2x)
//   lifecycle-large  the same on a 20,000-file repository, from its second bottle
//                    on, vs `git clone --shared` of a local mirror + that `docker run`
//                    (<= 1.2x)
//   resume-warm      PR-comment webhook -> the resumed agent's first call inside the
//                    bottle's warm window vs a `docker exec` of the same agent in an
//                    idle running container (<= 1.2x)
//   resume-cold      the same once the window is over vs a `docker start` of a
//                    stopped sidecar + agent pair (<= 1.0x)
import { spawn } from 'node:child_process';
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createGiteaTestServer } from '@bb/forge/testing';
import { type BottleMeta, DockerBackend, GATE_USER, HOME_LABEL, homeLabel } from '@bb/headless';
import { makeTestHome, prSteps, scriptAgent } from '@bb/headless/testing';
import { benchRounds, benchSize, QUICK, reportBench, waitForPath } from '@bb/tooling/bench';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { freePort } from '@bb/tooling/net';

const docker = await probeDocker();
if (!docker.ok) {
  console.log(`lifecycle bench skipped: ${docker.reason}`);
  process.exit(0);
}
const BB = fileURLToPath(new URL('../dist/bin.js', import.meta.url));
const TOKEN = 'bench-token-0123456789';
const SECRET = 'bench-webhook-secret';
const ROUNDS = benchRounds(5, 1);
const WARM_WINDOW_MS = 4000;
const LARGE_FILES = Number(process.env['BB_BENCH_LARGE_FILES'] ?? benchSize(20_000, 2000));
const large: Record<string, string> = {};
for (let i = 0; i < LARGE_FILES; i++) large[`f${i}.txt`] = `file ${i}\n${'x'.repeat(i % 300)}\n`;
const server = await createGiteaTestServer({
  world: {
    users: [{ login: 'alice' }, { login: 'bot', tokens: [TOKEN] }],
    orgs: [
      { name: 'acme', members: ['alice'] },
      { name: 'bot-bottle', members: ['bot'] },
    ],
    repos: [
      { owner: 'acme', name: 'widgets', collaborators: ['bot'], admins: ['bot'] },
      { owner: 'acme', name: 'large', collaborators: ['bot'], admins: ['bot'], files: large },
    ],
  },
});
const home = makeTestHome('bb-bench-life-', {
  agents: {
    bench: scriptAgent(
      [
        {
          steps: [
            { do: 'read_issue' },
            ...prSteps({
              path: 'bench.txt',
              content: 'turn {{turn}}\n',
              message: 'bench',
              title: 'Bench',
              body: 'bench',
            }),
            { do: 'done', status: 'success', summary: 'ok' },
          ],
        },
        { steps: [{ do: 'read_issue' }, { do: 'done', status: 'success', summary: 'ok' }] },
      ],
      { name: 'B' },
    ),
  },
  image: BASE_IMAGE,
});
const env = { BB_HOME: home, BB_BASE_IMAGE: BASE_IMAGE };
const backend = new DockerBackend();

function run(cmd: string, args: string[], extraEnv: Record<string, string> = {}) {
  return new Promise<string>((resolve, reject) => {
    const child = spawn(cmd, args, {
      env: { ...process.env, ...env, ...extraEnv },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      err += d;
    });
    child.once('exit', (code) =>
      code === 0 ? resolve(out) : reject(new Error(`${cmd} ${args.join(' ')}: ${code} ${err}`)),
    );
  });
}
const opTimesIn = (file: string) =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((l) => Date.parse((JSON.parse(l) as { time: string }).time))
    : [];
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
async function until<T>(what: string, f: () => T | undefined, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = f();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
/** The bottle the service made for an issue, from its meta. */
function bottleOf(repo: string, issue: number): { slug: string; meta: BottleMeta } | undefined {
  const dir = join(home, 'bottles');
  if (!existsSync(dir)) return undefined;
  for (const slug of readdirSync(dir)) {
    const f = join(dir, slug, 'meta.json');
    if (!existsSync(f)) continue;
    try {
      const meta = JSON.parse(readFileSync(f, 'utf8')) as BottleMeta;
      if (meta.forge?.repo === repo && meta.forge.issue === issue) return { slug, meta };
    } catch {}
  }
  return undefined;
}
/** The service's own word on a bottle (its turn recorded and the row saved). */
async function serviceStatus(slug: string): Promise<string | undefined> {
  const r = await fetch(`http://127.0.0.1:${port}/api/bottles`);
  const { bottles } = (await r.json()) as { bottles: Array<{ slug: string; status: string }> };
  return bottles.find((b) => b.slug === slug)?.status;
}
async function untilFrozen(slug: string, turns: number): Promise<void> {
  const deadline = Date.now() + 120_000;
  for (;;) {
    const m = bottleOf2(slug);
    if (
      m?.status === 'frozen' &&
      m.turns.length === turns &&
      (await serviceStatus(slug)) === 'frozen'
    )
      return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${slug} to be frozen`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
const bottleOf2 = (slug: string): BottleMeta | undefined => {
  try {
    return JSON.parse(readFileSync(join(home, 'bottles', slug, 'meta.json'), 'utf8')) as BottleMeta;
  } catch {
    return undefined;
  }
};
const ops = (slug: string) => opTimesIn(join(home, 'bottles', slug, 'state', 'ops.jsonl'));

// The service, as an operator runs it.
const port = await freePort();
const service = spawn(process.execPath, [BB, 'orchestrate', 'serve'], {
  env: {
    ...process.env,
    ...env,
    FORGE_GITEA_API: server.apiUrl,
    FORGE_TOKEN: TOKEN,
    FORGE_WEBHOOK_SECRET: SECRET,
    BB_PORT: String(port),
    BB_SWEEP_INTERVAL: '0',
    BB_DONE_GRACE: '2s',
    // Short, so a round also measures the cold resume once it is over.
    BB_WARM_WINDOW: `${WARM_WINDOW_MS}ms`,
  },
  stdio: ['ignore', 'pipe', 'pipe'],
});
let serviceLog = '';
service.stdout.on('data', (d) => {
  if (process.env['BB_BENCH_SERVICE_LOG']) appendFileSync(process.env['BB_BENCH_SERVICE_LOG'], d);
});
service.stderr.on('data', (d) => {
  serviceLog = (serviceLog + d).slice(-20_000);
  if (process.env['BB_BENCH_SERVICE_LOG']) appendFileSync(process.env['BB_BENCH_SERVICE_LOG'], d);
});
process.on('exit', () => service.kill('SIGKILL'));
for (let i = 0; ; i++) {
  const ok = await fetch(`http://127.0.0.1:${port}/healthz`).then(
    (r) => r.ok,
    () => false,
  );
  if (ok) break;
  if (i > 400 || service.exitCode !== null)
    throw new Error(`bb orchestrate serve did not start:\n${serviceLog}`);
  await new Promise((r) => setTimeout(r, 25));
}
server.addHook({ url: `http://127.0.0.1:${port}/webhooks/gitea`, secret: SECRET });

/** Issue webhook -> the launched agent's first forge call; the bottle frozen after. */
async function launchRound(repo: string, title: string): Promise<{ ms: number; slug: string }> {
  const t0 = Date.now();
  const n = server.createIssue('alice', `acme/${repo}`, {
    title,
    labels: ['bot-bottle:bench'],
    assignees: ['bot'],
  });
  const { slug } = await until('the bottle to be made', () => bottleOf(repo, n));
  const first = await until('its first forge call', () => ops(slug)[0]);
  // Its turn recorded by the service: the next event of the issue is not queued behind it.
  await untilFrozen(slug, 1);
  // Beside the service's own log, for reading a round's timeline against it.
  if (process.env['BB_BENCH_SERVICE_LOG'])
    appendFileSync(
      process.env['BB_BENCH_SERVICE_LOG'],
      `${JSON.stringify({ msg: 'bench launch', slug, webhookAt: t0, firstCallAt: first })}\n`,
    );
  return { ms: first - t0, slug };
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
  const meta = JSON.parse(
    readFileSync(join(home, 'bottles', slug, 'meta.json'), 'utf8'),
  ) as BottleMeta;
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

// The floor's pieces: a sidecar already up, its op log on a host directory, and the
// same agent program in a bare container, as root's `docker run` gives it.
async function bareSidecar(
  repo: string,
  issue: number,
  sock: string,
  state: string,
  workspace: string,
) {
  return (
    await run('docker', [
      'run',
      '-d',
      '--network',
      'host',
      '--user',
      `${GATE_USER.uid}:${GATE_USER.gid}`,
      '--label',
      `${HOME_LABEL}=${homeLabel(env)}`,
      '-v',
      `${join(home, 'runtime')}:/opt/bb:ro`,
      '-v',
      `${sock}:/run/bb`,
      '-v',
      `${workspace}:/workspace:ro`,
      '-v',
      `${state}:/run/bb-state`,
      '-e',
      'HOME=/tmp',
      '-e',
      `FORGE_GITEA_API=${server.apiUrl}`,
      '-e',
      'FORGE_OWNER=acme',
      '-e',
      `FORGE_REPO=${repo}`,
      '-e',
      `FORGE_ISSUE_NUMBER=${issue}`,
      '-e',
      `FORGE_TOKEN=${TOKEN}`,
      '-e',
      'BB_SIDECAR_SOCKET=/run/bb/forge.sock',
      '-e',
      'BB_QUEUE_DIR=/tmp/q',
      '-e',
      'BB_OPS_LOG=/run/bb-state/ops.jsonl',
      '-e',
      'BB_WORKSPACE=/workspace',
      '-e',
      'BB_BRANCH=bb/bench',
      '-e',
      'BB_SOCKET_MODE=666',
      BASE_IMAGE,
      'node',
      '/opt/bb/sidecar.mjs',
    ])
  ).trim();
}
function bareDirs(): { root: string; sock: string; state: string; home: string; ws: string } {
  const root = mkdtempSync(join(tmpdir(), 'bb-bench-bare-'));
  for (const d of ['state', 'sock', 'home/.bb', 'ws'])
    mkdirSync(join(root, d), { recursive: true });
  writeFileSync(
    join(root, 'home', '.bb', 'script.json'),
    JSON.stringify({ turns: [{ steps: [{ do: 'read_issue' }] }] }),
  );
  return {
    root,
    sock: join(root, 'sock'),
    state: join(root, 'state'),
    home: join(root, 'home'),
    ws: join(root, 'ws'),
  };
}
async function own(d: ReturnType<typeof bareDirs>) {
  // As in a bottle: the agent's files are its user's, the gate's its own.
  await run('chown', ['-R', '1000:1000', d.home, d.ws]);
  await run('chown', ['-R', `${GATE_USER.uid}:${GATE_USER.gid}`, d.state, d.sock]);
}
const agentFlags = (d: ReturnType<typeof bareDirs>) => [
  '--network',
  'none',
  '--user',
  '1000:1000',
  '--label',
  `${HOME_LABEL}=${homeLabel(env)}`,
  '-v',
  `${join(home, 'runtime')}:/opt/bb:ro`,
  '-v',
  `${d.sock}:/run/bb`,
  '-v',
  `${d.home}:/home/bottle`,
  '-v',
  `${d.ws}:/workspace`,
  '-e',
  'BB_SIDECAR_SOCKET=/run/bb/forge.sock',
  '-e',
  'BB_AGENT_HOME=/home/bottle',
];
const AGENT_CMD = ['node', '/opt/bb/script-agent.mjs', '--prompt', 'go'];
const agentArgs = (d: ReturnType<typeof bareDirs>) => [...agentFlags(d), BASE_IMAGE, ...AGENT_CMD];

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
    const t1 = Date.now();
    await run('docker', ['run', '--rm', ...agentArgs(d)]);
    base.push(bare()[0]! - t1);
    // A stopped pair, started again: the cheapest way back to a bottle that ran.
    const agent = (await run('docker', ['create', ...agentArgs(d)])).trim();
    await run('docker', ['start', '-a', agent]);
    await run('docker', ['stop', '-t', '1', sidecar]);
    const before = bare().length;
    const t2 = Date.now();
    await run('docker', ['start', sidecar]);
    await run('docker', ['start', agent]);
    const firstAgain = await until('the restarted pair to call', () => bare()[before]);
    starts.push(firstAgain - t2);
    // The same agent run by `docker exec` in a running, idle container beside a running sidecar.
    const idle = (
      await run('docker', ['run', '-d', ...agentFlags(d), BASE_IMAGE, 'sleep', '3600'])
    ).trim();
    const beforeExec = bare().length;
    const t3 = Date.now();
    await run('docker', ['exec', idle, ...AGENT_CMD]);
    execs.push((await until('the exec to call', () => bare()[beforeExec])) - t3);
    await run('docker', ['rm', '-f', sidecar, agent, idle]);
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
    await own(d);
    rmSync(d.ws, { recursive: true });
    const issue = server.createIssue('alice', 'acme/large', { title: `Bare ${r}` });
    const sidecar = await bareSidecar('large', issue, d.sock, d.state, d.root);
    await waitForPath(join(d.sock, 'forge.sock'));
    const t = Date.now();
    await run('git', ['clone', '-q', '--shared', join(mirror, 'large.git'), d.ws]);
    await run('docker', ['run', '--rm', ...agentArgs(d)]);
    baseLarge.push(opTimesIn(join(d.state, 'ops.jsonl'))[0]! - t);
    await run('docker', ['rm', '-f', sidecar]);
    rmSync(d.root, { recursive: true, force: true });
  }
  rmSync(mirror, { recursive: true, force: true });
} catch (err) {
  console.error(
    `${(err as Error).message}\n--- service log (tail) ---\n${serviceLog.slice(-4000)}`,
  );
  process.exitCode = 1;
} finally {
  service.kill('SIGTERM');
  await new Promise((r) => service.once('exit', r));
  for (const c of await backend.list({ [HOME_LABEL]: homeLabel(env) })) await backend.destroy(c.id);
  await server.close();
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
    "ms from the issue webhook to the agent's first forge call through `bb orchestrate serve` (vs a bare `docker run` of the same agent making the same call)",
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
    "ms from the PR-comment webhook to the resumed agent's first forge call (vs `docker start` of a stopped sidecar + agent pair)",
    resumes,
    starts,
    1.0,
  );
  report(
    'lifecycle-large',
    `ms from the issue webhook to the agent's first forge call on a ${LARGE_FILES}-file repository, second bottle on (vs \`git clone --shared\` of a local mirror + a bare \`docker run\`)`,
    oursLarge,
    baseLarge,
    1.2,
  );
}
rmSync(home, { recursive: true, force: true });
