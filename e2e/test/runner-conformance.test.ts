// Every bottle runner passes the same suite with real turns of the script agent:
// Docker bottles (headlessRunner over DockerBackend), and Kubernetes bottles
// (kubernetesRunner on the fake API server, its pods run by the Docker kubelet double).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubernetesBottles, kubeConfigFor, kubernetesRunner } from '@bb/backend-kubernetes';
import { FakeKubernetesApi, publishedSchemas } from '@bb/backend-kubernetes/testing';
import { giteaKind } from '@bb/forge';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/test-server';
import { DockerBackend, headlessRunner, prepareRuntime } from '@bb/headless';
import { describeRunnerConformance } from '@bb/headless/testing';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { DockerKubelet } from './docker-kubelet';
import { forgeWorld, removeHome } from './support';

const docker = await probeDocker();
const TOKEN = 'bb-claude-token-conformance-77';

/** A BB_HOME with the suite's agents and a default bottle of `image`, and a forge with issues. */
async function world(agents: Record<string, unknown>, image: string) {
  const home = mkdtempSync(join(tmpdir(), 'bb-runner-conf-'));
  for (const [kind, list] of [
    ['agents', agents],
    ['bottles', { default: { image } }],
  ] as const) {
    mkdirSync(join(home, 'config', kind), { recursive: true });
    for (const [n, m] of Object.entries(list))
      writeFileSync(join(home, 'config', kind, `${n}.json`), JSON.stringify(m));
  }
  const gitea: GiteaTestServer = await createGiteaTestServer({ world: forgeWorld(TOKEN) });
  const site = giteaKind.fromEnv({ FORGE_GITEA_API: gitea.apiUrl });
  const forge = () => ({
    kind: 'gitea',
    site: site.env(),
    token: TOKEN,
    owner: 'acme',
    repo: 'widgets',
    issue: gitea.createIssue('alice', 'acme/widgets', { title: 'Conformance', body: 'x' }),
    cloneUrl: gitea.cloneUrl('acme/widgets'),
  });
  return { home, gitea, forge };
}

if (docker.ok) {
  describeRunnerConformance('Docker (headlessRunner over DockerBackend)', {
    create: async (agents) => {
      const w = await world(agents, BASE_IMAGE);
      const env = { BB_HOME: w.home, BB_BASE_IMAGE: BASE_IMAGE };
      return {
        runner: headlessRunner({ backend: new DockerBackend(), env, token: TOKEN }),
        forge: w.forge,
        close: async () => {
          await w.gitea.close();
          await removeHome(w.home);
        },
      };
    },
  });

  describeRunnerConformance(
    'Kubernetes (kubernetesRunner, pods run by the Docker kubelet double)',
    {
      create: async (agents) => {
        const AGENT = 'registry.example.test/bb-agents:1';
        const GATE = 'registry.example.test/bb-gate:1';
        const w = await world(agents, AGENT);
        const claims = mkdtempSync(join(tmpdir(), 'bb-runner-conf-claims-'));
        const api = await FakeKubernetesApi.start({ check: publishedSchemas, startDelayMs: null });
        const backend = new DockerBackend();
        const label = `bb.runner-conf-${process.pid}`;
        const kubelet = new DockerKubelet({
          api,
          namespace: 'conf',
          backend,
          images: { [AGENT]: BASE_IMAGE, [GATE]: BASE_IMAGE },
          imageFiles: {
            [GATE]: [{ source: prepareRuntime({ BB_HOME: w.home }), target: '/opt/bb/runtime' }],
          },
          claim: (n) => (n === 'bb-bottle-state' ? join(w.home, 'bottles') : join(claims, n)),
          label,
        });
        return {
          runner: kubernetesRunner({
            bottles: new KubernetesBottles({
              kubeConfig: kubeConfigFor(api.url),
              namespace: 'conf',
            }),
            env: { BB_HOME: w.home },
            token: TOKEN,
            gateImage: GATE,
            stateClaim: 'bb-bottle-state',
            turnTimeoutMs: 60_000,
          }),
          forge: w.forge,
          close: async () => {
            await kubelet.close();
            for (const c of await backend.list({ [label]: '1' })) await backend.destroy(c.id);
            await api.close();
            await w.gitea.close();
            rmSync(claims, { recursive: true, force: true });
            await removeHome(w.home);
          },
        };
      },
    },
  );
} else {
  const { describe, it } = await import('vitest');
  describe.skip(`BottleRunner conformance (${docker.reason})`, () => {
    it('needs a Docker engine', () => {});
  });
}
