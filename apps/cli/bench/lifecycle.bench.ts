// `bb orchestrate start` (the real binary: node start-up, state, clone, sidecar,
// bottle) to the agent's first forge call, against a bare `docker run` of the
// same image running the same agent program, making the same call to an already
// running sidecar; both are timed to the call's entry in the op log, round by
// round in one run. Goal: <= 1.2x. `bb orchestrate resume` of the frozen bottle
// to its first forge call is reported against the same baseline.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createGiteaTestServer } from '@bb/forge/test-server';
import { bottleDir, DockerBackend, GATE_USER, HOME_LABEL, homeLabel } from '@bb/headless';
import { reportBench, waitForPath } from '@bb/tooling/bench';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';

const docker = await probeDocker();
if (!docker.ok) {
  console.log(`lifecycle bench skipped: ${docker.reason}`);
  process.exit(0);
}
const BB = fileURLToPath(new URL('../dist/bin.js', import.meta.url));
const TOKEN = 'bench-token-0123456789';
const ROUNDS = 5;
const server = await createGiteaTestServer({
  world: {
    users: [{ login: 'alice' }, { login: 'bot', tokens: [TOKEN] }],
    orgs: [{ name: 'acme', members: ['alice'] }],
    repos: [{ owner: 'acme', name: 'widgets', collaborators: ['bot'], admins: ['bot'] }],
  },
});
const home = mkdtempSync(join(tmpdir(), 'bb-bench-life-'));
mkdirSync(join(home, 'config', 'agents'), { recursive: true });
mkdirSync(join(home, 'config', 'bottles'), { recursive: true });
writeFileSync(
  join(home, 'config', 'agents', 'bench.json'),
  JSON.stringify({
    provider: 'script',
    git: { name: 'B', email: 'b@example.test' },
    script: { turns: [{ steps: [{ do: 'read_issue' }] }, { steps: [{ do: 'read_issue' }] }] },
  }),
);
writeFileSync(
  join(home, 'config', 'bottles', 'default.json'),
  JSON.stringify({ image: BASE_IMAGE }),
);
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
  readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => Date.parse((JSON.parse(l) as { time: string }).time));
const opTimes = (slug: string) => opTimesIn(join(bottleDir(slug, env), 'state', 'ops.jsonl'));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const ours: number[] = [];
const resumes: number[] = [];
const base: number[] = [];
const bbForge: number[] = [];
for (let r = 0; r < ROUNDS; r++) {
  const issue = server.createIssue('alice', 'acme/widgets', { title: `Bench ${r}`, body: '' });
  const forgeEnv = {
    FORGE_GITEA_API: server.apiUrl,
    FORGE_TOKEN: TOKEN,
    FORGE_OWNER: 'acme',
    FORGE_REPO: 'widgets',
    FORGE_ISSUE_NUMBER: String(issue),
  };
  const t0 = Date.now();
  const out = await run(
    process.execPath,
    [BB, 'orchestrate', 'start', '--agent', 'bench', '--prompt', 'go'],
    forgeEnv,
  );
  const slug = (JSON.parse(out) as { slug: string }).slug;
  ours.push(opTimes(slug)[0]! - t0);
  const t1 = Date.now();
  await run(
    process.execPath,
    [BB, 'orchestrate', 'resume', '--slug', slug, '--prompt', 'again'],
    forgeEnv,
  );
  resumes.push(opTimes(slug)[1]! - t1);

  // Baselines: the same image's sidecar already up (its op log on a host directory),
  // then a bare `docker run` of the same agent program (the script agent, with the
  // same script) making the same first call, timed the same way: to the call's
  // entry in the op log. A bare `docker run` of bb-forge (the lightest client) is
  // reported beside it.
  const dir = bottleDir(slug, env);
  const bare = mkdtempSync(join(tmpdir(), 'bb-bench-bare-'));
  for (const d of ['state', 'home/.bb']) mkdirSync(join(bare, d), { recursive: true });
  writeFileSync(
    join(bare, 'home', '.bb', 'script.json'),
    JSON.stringify({ turns: [{ steps: [{ do: 'read_issue' }] }] }),
  );
  // As in a bottle: the agent's files are its user's, the op log the gate user's.
  await run('chown', ['-R', '1000:1000', bare]);
  await run('chown', ['-R', `${GATE_USER.uid}:${GATE_USER.gid}`, join(bare, 'state')]);
  const sidecar = (
    await run('docker', [
      'run',
      '-d',
      '--rm',
      '--network',
      'host',
      '--user',
      `${GATE_USER.uid}:${GATE_USER.gid}`,
      '--label',
      `${HOME_LABEL}=${homeLabel(env)}`,
      '-v',
      `${join(home, 'runtime')}:/opt/bb:ro`,
      '-v',
      `${join(dir, 'sock')}:/run/bb`,
      '-v',
      `${join(dir, 'workspace')}:/workspace`,
      '-v',
      `${join(bare, 'state')}:/run/bb-state`,
      '-e',
      'HOME=/tmp',
      '-e',
      `FORGE_GITEA_API=${server.apiUrl}`,
      '-e',
      'FORGE_OWNER=acme',
      '-e',
      'FORGE_REPO=widgets',
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
      // The agent is another user: it may connect (as in a bottle).
      '-e',
      'BB_SOCKET_MODE=666',
      BASE_IMAGE,
      'node',
      '/opt/bb/sidecar.mjs',
    ])
  ).trim();
  await waitForPath(join(dir, 'sock', 'forge.sock'));
  const bareOps = () => opTimesIn(join(bare, 'state', 'ops.jsonl'));
  const bareRun = (cmd: string[]) =>
    run('docker', [
      'run',
      '--rm',
      '--network',
      'none',
      '--user',
      '1000:1000',
      '-v',
      `${join(home, 'runtime')}:/opt/bb:ro`,
      '-v',
      `${join(dir, 'sock')}:/run/bb`,
      '-v',
      `${join(bare, 'home')}:/home/bottle`,
      '-e',
      'BB_SIDECAR_SOCKET=/run/bb/forge.sock',
      '-e',
      'BB_AGENT_HOME=/home/bottle',
      BASE_IMAGE,
      ...cmd,
    ]);
  const t2 = Date.now();
  await bareRun(['node', '/opt/bb/script-agent.mjs', '--prompt', 'go']);
  base.push(bareOps()[0]! - t2);
  const t3 = Date.now();
  await bareRun(['node', '/opt/bb/bb-forge.mjs', 'read-issue', String(issue)]);
  bbForge.push(bareOps()[1]! - t3);
  await run('docker', ['rm', '-f', sidecar]);
  rmSync(bare, { recursive: true, force: true });
}

// Median of per-round ratios: each round's sides ran back to back.
const ratio = median(ours.map((o, i) => o / base[i]!));
reportBench({
  name: 'lifecycle',
  metric:
    "ms from `bb orchestrate start` to the agent's first forge call (vs a bare `docker run` of the same agent making the same call)",
  ours: median(base) * ratio,
  baseline: median(base),
  goal: 1.2,
  higherIsBetter: false,
  extra: {
    rounds: ROUNDS,
    startToFirstCallMedianMs: median(ours),
    resumeToFirstCallMedianMs: median(resumes),
    bareBbForgeMedianMs: median(bbForge),
    resumeRatio: Math.round(median(resumes.map((o, i) => o / base[i]!)) * 100) / 100,
  },
});
for (const c of await backend.list({ [HOME_LABEL]: homeLabel(env) })) await backend.destroy(c.id);
await server.close();
rmSync(home, { recursive: true, force: true });
