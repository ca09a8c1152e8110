// The Kubernetes runner's own rules, against the fake API server: what it refuses
// before making anything, and whose bottles it calls its own (a restart removes
// the orphans among those: never another orchestrator's).
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isBbError } from '@bb/errors';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kubernetesRunnerFromEnv } from '../src/from-env';
import { KubernetesBottles, kubeConfigFor } from '../src/kubernetes-bottles';
import { kubernetesRunner } from '../src/runner';
import { FakeKubernetesApi, publishedSchemas } from '../src/testing/index';

const NS = 'bots';
let api: FakeKubernetesApi;
const homes: string[] = [];

function home(bottles: Record<string, unknown> = { default: { image: 'bb-agents:1' } }) {
  const h = mkdtempSync(join(tmpdir(), 'bb-k8s-runner-'));
  homes.push(h);
  const write = (kind: string, name: string, m: unknown) => {
    mkdirSync(join(h, 'config', kind), { recursive: true });
    writeFileSync(join(h, 'config', kind, `${name}.json`), JSON.stringify(m));
  };
  write('agents', 'impl', {
    provider: 'script',
    git: { name: 'Impl', email: 'impl@example.test' },
    script: { turns: [] },
  });
  for (const [n, m] of Object.entries(bottles)) write('bottles', n, m);
  return { BB_HOME: h };
}

const runnerFor = (env: Record<string, string>) =>
  kubernetesRunner({
    bottles: new KubernetesBottles({ kubeConfig: kubeConfigFor(api.url), namespace: NS }),
    env,
    token: 'tok',
    gateImage: 'bb-gate:1',
    stateClaim: 'bb-bottle-state',
  });

const forge = {
  kind: 'gitea',
  site: { FORGE_GITEA_API: 'http://127.0.0.1:9/api/v1' },
  token: 'tok',
  owner: 'acme',
  repo: 'app',
  issue: 1,
  cloneUrl: 'http://127.0.0.1:9/acme/app.git',
};

const code = async (p: Promise<unknown>) => {
  try {
    await p;
    return 'resolved';
  } catch (err) {
    return isBbError(err) ? `${err.code}: ${err.message}` : `not a BbError: ${String(err)}`;
  }
};

beforeAll(async () => {
  api = await FakeKubernetesApi.start({ check: publishedSchemas });
});
afterAll(async () => {
  await api.close();
  for (const h of homes) rmSync(h, { recursive: true, force: true });
});

describe('kubernetesRunner', () => {
  it("lists only its own orchestrator's bottles: another's in the namespace are not orphans to it", async () => {
    const a = runnerFor(home());
    const b = runnerFor(home());
    await a.startLaunch({ agent: 'impl', slug: 'impl-aaaa1', prompt: 'p', forge });
    await b.startLaunch({ agent: 'impl', slug: 'impl-bbbb2', prompt: 'p', forge });
    const slugs = async (r: typeof a) => [
      ...new Set((await r.ours()).map((c) => c.labels['bb.slug'])),
    ];
    expect(await slugs(a)).toEqual(['impl-aaaa1']);
    expect(await slugs(b)).toEqual(['impl-bbbb2']);
    expect((await a.containers('impl-aaaa1')).map((c) => [c.labels['bb.role'], c.state])).toEqual([
      ['gate', 'running'],
      ['agent', 'running'],
    ]);
    await a.destroy('impl-aaaa1');
    await b.destroy('impl-bbbb2');
  });

  it('refuses, before making anything: a bottle with only a dockerfile, a slug taken, a resume of a running bottle', async () => {
    const env = home({ default: { dockerfile: 'FROM scratch' } });
    const r = runnerFor(env);
    const before = api.calls.length;
    expect(
      await code(r.startLaunch({ agent: 'impl', slug: 'impl-cccc3', prompt: 'p', forge })),
    ).toMatch(
      /^INVALID_INPUT: bottle default gives a dockerfile: on Kubernetes a bottle needs an image/,
    );
    expect(api.calls.length).toBe(before);
    const ok = runnerFor(home());
    await ok.startLaunch({ agent: 'impl', slug: 'impl-dddd4', prompt: 'p', forge });
    expect(
      await code(ok.startLaunch({ agent: 'impl', slug: 'impl-dddd4', prompt: 'p', forge })),
    ).toMatch(/^CONFLICT: bottle impl-dddd4 exists already/);
    expect(await code(ok.startResume({ slug: 'impl-dddd4', prompt: 'again' }))).toMatch(
      /^CONFLICT: bottle impl-dddd4 is running; only a frozen bottle can be resumed/,
    );
    expect(await code(ok.startResume({ slug: 'impl-none5', prompt: 'again' }))).toMatch(
      /^NOT_FOUND/,
    );
    await ok.destroy('impl-dddd4');
  });

  it('ends a stopped turn as vanished with the kill code, and freezes the bottle', async () => {
    const r = runnerFor(home());
    await r.startLaunch({ agent: 'impl', slug: 'impl-eeee6', prompt: 'p', forge });
    const ending = r.finishTurn('impl-eeee6');
    await r.stopAgent('impl-eeee6', 1000);
    expect(await ending).toMatchObject({ exitCode: 137, vanished: true, ok: false });
    expect(await r.storage.meta('impl-eeee6')).toMatchObject({ status: 'frozen', current: null });
    expect((await r.containers('impl-eeee6')).length).toBe(0);
    await r.destroy('impl-eeee6');
    expect(await r.storage.meta('impl-eeee6')).toBeUndefined();
  });
});

describe('kubernetesRunnerFromEnv', () => {
  it('names every problem of its configuration at once', () => {
    let msg = '';
    try {
      kubernetesRunnerFromEnv({
        env: { BB_K8S_NAMESPACE: 'Not_A_Namespace' },
        token: 't',
        warmMs: 0,
      });
    } catch (err) {
      expect(isBbError(err, 'INVALID_INPUT')).toBe(true);
      msg = (err as Error).message;
    }
    expect(msg.split('\n')).toEqual([
      "the kubernetes backend's configuration is invalid:",
      expect.stringMatching(/^- BB_K8S_GATE_IMAGE must name the gate image/),
      expect.stringMatching(/^- BB_K8S_STATE_CLAIM must name the ReadWriteMany claim/),
      '- BB_K8S_NAMESPACE "Not_A_Namespace" is not a namespace name',
      expect.stringMatching(/^- BB_K8S_API is not set and this is not a pod of a cluster/),
    ]);
    expect(() =>
      kubernetesRunnerFromEnv({
        env: {
          BB_K8S_API: 'http://10.0.0.1:6443',
          BB_K8S_GATE_IMAGE: 'g',
          BB_K8S_STATE_CLAIM: 'c',
        },
        token: 't',
        warmMs: 0,
      }),
    ).toThrow(/must be reached over https/);
  });

  it('says a warm window is not kept', () => {
    const warned: string[] = [];
    const r = kubernetesRunnerFromEnv({
      env: { BB_K8S_API: api.url, BB_K8S_GATE_IMAGE: 'g', BB_K8S_STATE_CLAIM: 'c', ...home() },
      token: 't',
      warmMs: 180_000,
      warn: (m) => warned.push(m),
    });
    expect(r.backendName).toBe('kubernetes');
    expect(warned).toEqual([expect.stringMatching(/keeps no bottle warm/)]);
  });
});

describe('the launch clone', () => {
  it('runs as the agent with the forge token alone, before the gate, and only at a launch', async () => {
    const { planBottle } = await import('../src/manifests');
    const spec = {
      slug: 'clone-a1',
      agent: { image: 'a', command: ['a'] },
      gate: { image: 'g', command: ['g'], clone: { name: 'I', email: 'i@example.test' } },
      secrets: { token: 't', 'keys.json': '{"K":"model-key"}', 'link-key': 'ab'.repeat(24) },
    };
    const gate = planBottle(spec).gate.spec!;
    const init = gate.initContainers![0]!;
    expect(init.securityContext).toMatchObject({ runAsUser: 1000, runAsGroup: 1000 });
    const mount = init.volumeMounts!.find((m) => m.mountPath === '/run/bb-secrets')!;
    const volume = gate.volumes!.find((v) => v.name === mount.name)!;
    expect(volume.secret?.items).toEqual([{ key: 'token', path: 'token' }]);
    const { clone: _, ...resumed } = spec.gate;
    expect(planBottle({ ...spec, gate: resumed }).gate.spec!.initContainers).toBeUndefined();
  });

  it("serves a supervised bottle's supervise sidecar from its gate: the exchange and its files on the claim, the agent none of it, a rebuild refused", async () => {
    const env = home({
      default: { image: 'bb-agents:1', egress: { allow: ['registry.npmjs.org'] } },
    });
    const runner = runnerFor(env);
    expect(runner.supervise).toBe(true);
    await runner.startLaunch({ agent: 'impl', slug: 'sup-a1', prompt: 'go', forge });
    type Pod = {
      metadata: { name: string };
      spec: {
        containers: Array<{
          command: string[];
          env?: Array<{ name: string; value: string }>;
          volumeMounts?: Array<{
            name: string;
            mountPath: string;
            subPath?: string;
            readOnly?: boolean;
          }>;
        }>;
      };
    };
    const pods = api.objects('pods', NS) as Pod[];
    const gate = pods.find((p) => p.metadata.name === 'bb-sup-a1-gate')!.spec.containers[0]!;
    const agent = pods.find((p) => p.metadata.name === 'bb-sup-a1-agent')!.spec.containers[0]!;
    const envOf = (c: typeof gate) =>
      Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value]));
    const mounts = (gate.volumeMounts ?? []).filter((m) => m.name === 'shared');
    expect(mounts).toEqual(
      expect.arrayContaining([
        { name: 'shared', mountPath: '/proxy', subPath: 'sup-a1/proxy', readOnly: true },
        { name: 'shared', mountPath: '/supervise', subPath: 'sup-a1/supervise' },
        {
          name: 'shared',
          mountPath: '/etc/bot-bottle/current-config',
          subPath: 'sup-a1/current-config',
          readOnly: true,
        },
      ]),
    );
    expect(envOf(gate)).toMatchObject({
      BB_SUPERVISE_SOCKET: '/tmp/bb/supervise.sock',
      BB_EGRESS_RULES: '/proxy/rules.json',
      BB_PROXY_WATCH_MS: '250',
    });
    expect(JSON.parse(envOf(gate)['BB_SUPERVISE_POLICY']!).refused.dockerfile).toMatch(
      /runs on Kubernetes, where its image is not rebuilt/,
    );
    // The agent reaches the sidecar through its bridge, and nothing of the shared claim.
    expect(agent.command).toContain('/tmp/bb/supervise.sock=gate:supervise');
    expect((agent.volumeMounts ?? []).filter((m) => m.name === 'shared')).toEqual([]);
    // The files the gate reads, written by the orchestrator on the claim; the allowlist
    // is nowhere in the gate's Secret any more (a reload rewrites it on the claim).
    const dir = join(env.BB_HOME, 'bottles', 'sup-a1');
    expect(JSON.parse(readFileSync(join(dir, 'proxy', 'rules.json'), 'utf8'))).toEqual({
      allow: ['registry.npmjs.org'],
    });
    expect(readFileSync(join(dir, 'current-config', 'allowlist.json'), 'utf8')).toContain(
      'registry.npmjs.org',
    );
    const secret = (
      api.objects('secrets', NS) as Array<{
        metadata: { name: string };
        stringData?: Record<string, string>;
        data?: Record<string, string>;
      }>
    ).find((x) => x.metadata.name.includes('sup-a1'))!;
    expect(Object.keys({ ...secret.stringData, ...secret.data }).sort()).not.toContain(
      'rules.json',
    );
    await runner.destroy('sup-a1');
  });
});
