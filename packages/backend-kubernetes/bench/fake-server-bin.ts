// The fake Kubernetes API server in a process of its own, so the benchmark measures
// the orchestrator's side alone. SEED_BOTTLES bottles' objects exist before it listens.
import { planBottle } from '../src/manifests';
import { FakeKubernetesApi, publishedSchemas } from '../src/testing/index';

const api = await FakeKubernetesApi.start({ check: publishedSchemas, startDelayMs: 0 });
const seed = Number(process.env['SEED_BOTTLES'] ?? 0);
for (let i = 0; i < seed; i++) {
  const p = planBottle({
    slug: `seed-${i}`,
    agent: { image: 'a', command: ['a'] },
    gate: { image: 'g', command: ['g'] },
    secrets: { token: 't' },
  });
  const ns = 'bench';
  api.seed('persistentvolumeclaims', ns, p.claim as never);
  api.seed('secrets', ns, JSON.parse(JSON.stringify(p.secret)));
  api.seed('services', ns, p.service as never);
  api.seed('pods', ns, p.gate as never);
  api.seed('pods', ns, p.agent as never);
}
process.stdout.write(`${api.url}\n`);
