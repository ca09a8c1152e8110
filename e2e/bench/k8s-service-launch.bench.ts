// k8s-service-launch: the service's own launch on the Kubernetes backend, not only the
// objects it makes. `bb orchestrate serve` (the real binary, in a process of its own,
// BB_BACKEND=kubernetes) against the fake API server (its own process too, every object
// checked against the published schemas, pods running at once: pod start, image pulls
// and the gate pod's init container, which clones the workspace, are excluded; no
// cluster can run here). N issues are filed at once on the Gitea-compatible test
// server; timed, for each, from its webhook to its agent's pod appearing on a watch of
// the API server: the delivery, its state row, every object.
// The floor, measured in the same run on the same API server: a process of its own
// (packages/backend-kubernetes/bench/bare-launch-bin.ts) that, after one warm-up launch,
// creates N bottles' same objects bare with @kubernetes/client-node (one client, every
// gate awaited on one watch, then the agent's pod), with the service's parallelism
// (BB_STARTUP_CONCURRENCY), timed from its start to each agent pod on the same watch.
// It runs first, while the service idles with one bottle. Goal: p95 <= 1.2x the floor's,
// N = 100.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createGiteaTestServer } from '@bb/forge/test-server';
import { benchSize, median, p95, reportBench } from '@bb/tooling/bench';
import { freePort } from '@bb/tooling/net';
import { killServe, type ServeProcess, startServe } from '../test/serve-process';
import { fileIssue, forgeWorld, makeHome, removeHome, scriptAgent, until } from '../test/support';

const N = benchSize(100, 10);
const CONCURRENCY = 16;
const TOKEN = 'bb-claude-token-k8s-bench-1';
const SECRET = 'k8s-bench-webhook-secret';
const k8sBench = (f: string) =>
  fileURLToPath(new URL(`../../packages/backend-kubernetes/bench/${f}`, import.meta.url));
const tsx = (file: string, args: string[] = []) =>
  spawn(process.execPath, ['--import', 'tsx', '--conditions=@bb/source', file, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });

/** The first line `child` prints. */
async function firstLine(child: ChildProcess): Promise<string> {
  const [chunk] = (await once(child.stdout!, 'data')) as [Buffer];
  return chunk.toString().split('\n')[0]!.trim();
}

/** When each agent pod of `ns` was first seen on a watch (Date.now()), by its bottle's slug. */
function watchAgents(api: string, ns: string): { seen: Map<string, number>; stop: () => void } {
  const seen = new Map<string, number>();
  const req = get(`${api}/api/v1/namespaces/${ns}/pods?watch=true`, (res) => {
    let held = '';
    res.setEncoding('utf8');
    res.on('data', (text: string) => {
      const lines = (held + text).split('\n');
      held = lines.pop()!;
      const at = Date.now();
      for (const line of lines) {
        if (!line) continue;
        const { object } = JSON.parse(line) as {
          object: { metadata: { labels?: Record<string, string> } };
        };
        const labels = object.metadata.labels ?? {};
        if (labels['bb.role'] === 'agent' && labels['bb.slug'] && !seen.has(labels['bb.slug']))
          seen.set(labels['bb.slug'], at);
      }
    });
  });
  req.on('error', () => {});
  return { seen, stop: () => req.destroy() };
}

const fake = tsx(k8sBench('fake-server-bin.ts'));
const api = await firstLine(fake);
const gitea = await createGiteaTestServer({ world: forgeWorld(TOKEN) });
const home = makeHome(
  'bb-bench-k8s-',
  { implementer: scriptAgent([{ steps: [{ do: 'done', status: 'success', summary: 'x' }] }]) },
  { default: { image: 'registry.example.test/bb-agents:1', resources: { memory: '256m' } } },
);
const work = mkdtempSync(join(tmpdir(), 'bb-bench-k8s-bare-'));
const r: ServeProcess = { id: 'service', port: await freePort(), proc: undefined, starts: 0 };
const ours = watchAgents(api, 'ours');
const bare = watchAgents(api, 'bare');
let failed = false;
try {
  await startServe(
    r,
    {
      ...process.env,
      BB_HOME: home,
      BB_PORT: String(r.port),
      FORGE_GITEA_API: gitea.apiUrl,
      FORGE_TOKEN: TOKEN,
      FORGE_WEBHOOK_SECRET: SECRET,
      BB_SWEEP_INTERVAL: '0',
      BB_WARM_WINDOW: '0',
      BB_BACKEND: 'kubernetes',
      BB_K8S_API: api,
      BB_K8S_NAMESPACE: 'ours',
      BB_K8S_GATE_IMAGE: 'registry.example.test/bb-gate:1',
      BB_K8S_STATE_CLAIM: 'bb-bottle-state',
      BB_STARTUP_CONCURRENCY: String(CONCURRENCY),
      // Room for every one of them: none waits for capacity.
      BB_MEMORY_BUDGET: '1000g',
    },
    () => join(work, 'service.log'),
  );
  gitea.addHook({ url: `http://127.0.0.1:${r.port}/webhooks/gitea`, secret: SECRET });
  process.stderr.write(`k8s-service-launch: the service serves; ${N} launches of each side\n`);

  // One first, so the service's mirror of the repository exists, as it does for every
  // launch but a repository's first.
  fileIssue(gitea, 'implementer', 'Warm-up');
  await until('the warm-up agent pod', async () => (ours.seen.size > 0 ? true : undefined), 60_000);
  const warm = new Set(ours.seen.keys());

  // The floor first, while the service idles with its one bottle: once it has a hundred
  // running, its checks of them would weigh on the floor's launches.
  const launcher = tsx(k8sBench('bare-launch-bin.ts'), [
    api,
    'bare',
    String(N),
    String(CONCURRENCY),
  ]);
  const start = Number((await firstLine(launcher)).split(' ')[1]);
  const [code] = (await once(launcher, 'exit')) as [number];
  if (code !== 0) throw new Error(`the bare launcher exited ${code}`);
  await until(`${N} bare agent pods`, async () => (bare.seen.size >= N + 1 ? true : undefined));
  const bareMs = [...bare.seen].filter(([slug]) => slug !== 'bare-warm').map(([, t]) => t - start);

  // Ours: N issues at once.
  const filedAt = new Map<number, number>();
  for (let i = 0; i < N; i++) {
    const at = Date.now();
    filedAt.set(fileIssue(gitea, 'implementer', `Launch ${i}`), at);
  }
  await until(
    `${N} agent pods`,
    async () => (ours.seen.size >= N + warm.size ? true : undefined),
    300_000,
  );
  const rows = (
    (await (await fetch(`http://127.0.0.1:${r.port}/api/bottles`)).json()) as {
      bottles: Array<{ slug: string; issueNumber: number }>;
    }
  ).bottles;
  const oursMs = rows
    .filter((b) => filedAt.has(b.issueNumber))
    .map((b) => ours.seen.get(b.slug)! - filedAt.get(b.issueNumber)!);
  if (oursMs.length !== N || oursMs.some((x) => !Number.isFinite(x)))
    throw new Error(`${oursMs.length} of ${N} launches were timed`);

  process.stderr.write(`k8s-service-launch: p95 ${p95(oursMs)} ms, floor ${p95(bareMs)} ms\n`);
  reportBench({
    name: 'k8s-service-launch',
    metric: `the service's launch on the Kubernetes backend, ${N} issues at once: webhook to the agent's pod, p95 ms (pod start excluded), vs the same objects made bare with the same parallelism (${CONCURRENCY})`,
    ours: p95(oursMs),
    baseline: p95(bareMs),
    goal: 1.2,
    higherIsBetter: false,
    extra: {
      launches: N,
      concurrency: CONCURRENCY,
      oursMedianMs: median(oursMs),
      bareMedianMs: median(bareMs),
    },
  });
} catch (err) {
  failed = true;
  console.error((err as Error).message);
} finally {
  ours.stop();
  bare.stop();
  await killServe(r);
  fake.kill();
  await gitea.close();
  await removeHome(home);
  rmSync(work, { recursive: true, force: true });
}
if (failed) process.exit(1);
