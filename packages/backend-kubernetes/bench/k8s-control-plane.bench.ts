// The Kubernetes backend's control plane against the fake API server (in a process of
// its own, every object checked against the published schemas, pods "running" at once:
// pod start is excluded). Two figures, each beside its floor measured in the same run:
// - launch: 100 bottles launched at once, orchestrator-side time per launch, p95
//   (goal <= 2 s), vs the same API calls made bare with @kubernetes/client-node;
// - reconcile: after a restart, reading 1,000 bottles back (goal <= 10 s), vs the two
//   bare list calls it is made of.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { benchSize, p95, reportBench } from '@bb/tooling/bench';
import { CoreV1Api } from '@kubernetes/client-node';
import { KubernetesBottles, kubeConfigFor } from '../src/kubernetes-bottles';
import { BareLauncher, spec } from './bare-launch';

const BIN = fileURLToPath(new URL('./fake-server-bin.ts', import.meta.url));
const LAUNCHES = benchSize(100, 10);
const SEEDED = benchSize(1000, 100);

async function server(seed: number): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=@bb/source', BIN], {
    env: { ...process.env, SEED_BOTTLES: String(seed) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const [line] = (await once(child.stdout!, 'data')) as [Buffer];
  return { url: line.toString().trim(), child };
}

async function timed(n: number, one: (i: number) => Promise<void>): Promise<number[]> {
  return Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const t0 = performance.now();
      await one(i);
      return performance.now() - t0;
    }),
  );
}

// ---- launches
{
  const { url, child } = await server(0);
  try {
    const bottles = new KubernetesBottles({ kubeConfig: kubeConfigFor(url), namespace: 'ours' });
    // One of each first, so neither side pays for loading the client.
    await bottles.launch(spec('warm-ours'));
    const bare0 = new BareLauncher(url, 'bare');
    await bare0.launch('warm-bare');
    const ours = await timed(LAUNCHES, (i) => bottles.launch(spec(`ours-${i}`)));
    const bare = await timed(LAUNCHES, (i) => bare0.launch(`bare-${i}`));
    await bare0.close();
    reportBench({
      name: 'k8s-control-plane',
      metric: `launch time p95, ${LAUNCHES} at once, ms (excluding pod start)`,
      ours: p95(ours),
      baseline: p95(bare),
      goal: 2000,
      higherIsBetter: false,
      target: '<= 2000 ms p95',
      pass: p95(ours) <= 2000,
      extra: {
        oursMedianMs: Math.round([...ours].sort((a, b) => a - b)[LAUNCHES / 2]!),
        bareMedianMs: Math.round([...bare].sort((a, b) => a - b)[LAUNCHES / 2]!),
      },
    });
  } finally {
    child.kill();
  }
}

// ---- reconcile after a restart
{
  const { url, child } = await server(SEEDED);
  try {
    const kc = kubeConfigFor(url);
    // A fresh backend, as after a restart.
    const t0 = performance.now();
    const found = await new KubernetesBottles({ kubeConfig: kc, namespace: 'bench' }).list();
    const ours = performance.now() - t0;
    if (found.length !== SEEDED)
      throw new Error(`reconcile found ${found.length} of ${SEEDED} bottles`);
    const core = kc.makeApiClient(CoreV1Api);
    const t1 = performance.now();
    await Promise.all([
      core.listNamespacedPersistentVolumeClaim({ namespace: 'bench', labelSelector: 'bb.slug' }),
      core.listNamespacedPod({ namespace: 'bench', labelSelector: 'bb.slug' }),
    ]);
    const bare = performance.now() - t1;
    reportBench({
      name: 'k8s-reconcile',
      metric: `reading ${SEEDED} bottles back after a restart, ms`,
      ours,
      baseline: bare,
      goal: 10_000,
      higherIsBetter: false,
      target: '<= 10000 ms',
      pass: ours <= 10_000,
    });
  } finally {
    child.kill();
  }
}
