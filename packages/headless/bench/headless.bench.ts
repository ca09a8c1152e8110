// launch-to-sidecar-ping (a script agent whose first act is read_issue) vs a bare
// container of the same image doing the same ping against an already running
// sidecar, in a network namespace made ahead of need as ours are, in one run.
// Goal: <= 1.2x. Freeze and rehydrate (resume) are reported.
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { closeGiteaPools } from '@bb/forge';
import { createGiteaTestServer } from '@bb/forge/testing';
import { benchRounds, reportBench } from '@bb/tooling/bench';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { destroy, launch, resume } from '../src/bottle/bottles';
import { bottleDir, GATE_USER } from '../src/bottle/layout';
import { DockerBackend } from '../src/engine/docker-backend';
import { giteaWiring, makeTestHome, scriptAgent } from '../src/test-home';

const docker = await probeDocker();
if (!docker.ok) {
  console.log(`headless bench skipped: ${docker.reason}`);
  process.exit(0);
}
const TOKEN = 'bench-token-0123456789';
const ROUNDS = benchRounds(7, 2);
const server = await createGiteaTestServer({
  world: {
    users: [{ login: 'alice' }, { login: 'bot', tokens: [TOKEN] }],
    orgs: [{ name: 'acme', members: ['alice'] }],
    repos: [{ owner: 'acme', name: 'widgets', collaborators: ['bot'] }],
    issues: [{ repo: 'acme/widgets', title: 'Bench', author: 'alice', assignees: ['bot'] }],
  },
});
const home = makeTestHome('bb-bench-', {
  agents: { bench: scriptAgent([{ steps: [{ do: 'read_issue' }] }], { name: 'B' }) },
  image: BASE_IMAGE,
});
const env = { BB_HOME: home, BB_BASE_IMAGE: BASE_IMAGE };
const backend = new DockerBackend();
const forge = giteaWiring(server, TOKEN);
const firstOpAt = (slug: string) =>
  Date.parse(
    JSON.parse(
      readFileSync(join(bottleDir(slug, env), 'state', 'ops.jsonl'), 'utf8').split('\n')[0]!,
    ).time,
  );
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const ours: number[] = [];
const oursTotal: number[] = [];
const rehydrate: number[] = [];
const base: number[] = [];
for (let r = 0; r < ROUNDS; r++) {
  // Ours: from launch() to the agent's first call reaching its sidecar.
  const t0 = Date.now();
  const out = await launch({ agent: 'bench', prompt: 'go', forge, backend, env });
  oursTotal.push(Date.now() - t0);
  ours.push(firstOpAt(out.slug) - t0);
  const t1 = Date.now();
  await resume({ slug: out.slug, prompt: 'again', forgeToken: TOKEN, backend, env });
  rehydrate.push(Date.now() - t1);

  // Baseline: a sidecar already up (we start it by launching a bottle that sleeps is
  // not needed: reuse the frozen bottle's files), then a bare container of the same
  // image that does the same ping with bb-forge.
  const dir = bottleDir(out.slug, env);
  // The frozen bottle's gate left its socket: the bare sidecar makes its own.
  rmSync(join(dir, 'sock', 'forge.sock'), { force: true });
  const sidecarId = await backend.create({
    name: `bb-bench-sidecar-${r}`,
    image: BASE_IMAGE,
    cmd: ['node', '/opt/bb/sidecar.mjs'],
    // The gate's user owns the socket directory; the agent (another user) connects.
    user: `${GATE_USER.uid}:${GATE_USER.gid}`,
    labels: { 'bb.slug': `bench-${r}`, 'bb.role': 'sidecar' },
    network: 'host',
    env: {
      HOME: '/tmp',
      FORGE_GITEA_API: server.apiUrl,
      FORGE_OWNER: 'acme',
      FORGE_REPO: 'widgets',
      FORGE_ISSUE_NUMBER: '1',
      FORGE_TOKEN: TOKEN,
      BB_SIDECAR_SOCKET: '/run/bb/forge.sock',
      BB_QUEUE_DIR: '/tmp/q',
      // Where the host reads it: the bare call is timed to its op-log line, as ours is.
      BB_OPS_LOG: '/run/bb/bare-ops.jsonl',
      BB_WORKSPACE: '/workspace',
      BB_BRANCH: 'bb/bench-1',
      BB_SOCKET_MODE: '666',
    },
    mounts: [
      { source: join(home, 'runtime'), target: '/opt/bb', readOnly: true },
      { source: join(dir, 'sock'), target: '/run/bb' },
      { source: join(dir, 'workspace'), target: '/workspace' },
    ],
  });
  await backend.start(sidecarId);
  for (let i = 0; i < 100; i++) {
    try {
      readFileSync(join(dir, 'sock', 'forge.sock'));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') break;
    }
    await new Promise((res) => setTimeout(res, 50));
  }
  // A network namespace made ahead of need, as ours draws one from the engine's pool
  // (making it is most of what starting a container costs). Its own holder, not one
  // of the pool's: the next round's launch must find the pool as this one did.
  const net = await backend.create({
    name: `bb-bench-netns-${r}`,
    image: BASE_IMAGE,
    cmd: ['sleep', '3600'],
    user: '65534:65534',
    labels: { 'bb.slug': `bench-${r}`, 'bb.role': 'netns' },
    network: 'none',
    env: {},
    mounts: [],
  });
  await backend.start(net);
  const t2 = Date.now();
  const id = await backend.create({
    name: `bb-bench-bare-${r}`,
    image: BASE_IMAGE,
    cmd: ['node', '/opt/bb/bb-forge.mjs', 'read-issue', '1'],
    user: '1000:1000',
    labels: { 'bb.slug': `bench-${r}`, 'bb.role': 'agent' },
    network: 'none',
    netns: net,
    env: { BB_SIDECAR_SOCKET: '/run/bb/forge.sock' },
    mounts: [
      { source: join(home, 'runtime'), target: '/opt/bb', readOnly: true },
      { source: join(dir, 'sock'), target: '/run/bb' },
    ],
  });
  await backend.start(id);
  const done = await backend.wait(id);
  const bareOps = join(dir, 'sock', 'bare-ops.jsonl');
  base.push(Date.parse(JSON.parse(readFileSync(bareOps, 'utf8').split('\n')[0]!).time) - t2);
  rmSync(bareOps, { force: true });
  // A baseline that did not do the call measures nothing: stop rather than report it.
  const said = await backend.logs(id);
  if (done.exitCode !== 0 || !said.includes('"number": 1'))
    throw new Error(
      `the bare container's call failed (exit ${done.exitCode}): ${said.slice(0, 400)}`,
    );
  await backend.destroy(id);
  await backend.destroy(net);
  await backend.destroy(sidecarId);
  await destroy(out.slug, { backend, env });
}

// Median of per-round ratios: each round's two sides ran back to back.
const ratio = median(ours.map((o, i) => o / base[i]!));
reportBench({
  name: 'headless',
  metric:
    "ms from launch to the agent's first sidecar call (vs a bare container doing the same call, in a network namespace made beforehand)",
  ours: median(base) * ratio,
  baseline: median(base),
  goal: 1.2,
  higherIsBetter: false,
  extra: {
    rounds: ROUNDS,
    launchToPingMedianMs: median(ours),
    launchTotalMs: median(oursTotal),
    freezeAndResumeTurnMs: median(rehydrate),
  },
});
await server.close();
await closeGiteaPools();
rmSync(home, { recursive: true, force: true });
