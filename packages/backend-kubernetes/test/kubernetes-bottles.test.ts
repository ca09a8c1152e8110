import { settledCode as code } from '@bb/errors';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { KubernetesBottles, kubeConfigFor } from '../src/kubernetes-bottles';
import type { KubeBottleSpec } from '../src/manifests';
import {
  type ApiCall,
  describeKubernetesIsolation,
  FakeKubernetesApi,
  publishedSchemas,
} from '../src/testing/index';

const NS = 'bots';
let api: FakeKubernetesApi;
let bottles: KubernetesBottles;

const spec = (slug: string, over: Partial<KubeBottleSpec> = {}): KubeBottleSpec => ({
  slug,
  labels: { 'bb.home': 'test' },
  agent: {
    image: 'bb-agents:latest',
    command: ['bb-waiter'],
    env: { BB_SLUG: slug },
    resources: { memoryBytes: 2 * 1024 ** 3, cpus: 2 },
  },
  gate: { image: 'bb-base:latest', command: ['node', '/opt/bb/runtime/bb-gate.mjs'] },
  secrets: { token: 'forge-token-never-in-the-agent', 'keys.json': '{"ANTHROPIC_API_KEY":"sk"}' },
  ...over,
});

beforeAll(async () => {
  // Pod Security "restricted" enforced, as deploy/namespaces.yaml has it: every pod of a
  // bottle must be admitted under it.
  api = await FakeKubernetesApi.start({
    check: publishedSchemas,
    podSecurity: { [NS]: 'restricted' },
  });
  bottles = new KubernetesBottles({ kubeConfig: kubeConfigFor(api.url), namespace: NS });
});
afterAll(() => api.close());
const seen: ApiCall[] = [];
beforeEach(() => {
  api.calls.length = 0;
});
afterEach(() => {
  seen.push(...api.calls);
});

describe('KubernetesBottles against the fake API server', () => {
  it('launches a bottle as a group every object of which the published schemas accept', async () => {
    await bottles.launch(spec('impl-a1'));
    const kinds = ['persistentvolumeclaims', 'networkpolicies', 'services', 'secrets', 'pods'];
    for (const k of kinds) expect(api.objects(k, NS).length, k).toBeGreaterThan(0);
    expect(
      api
        .objects('pods', NS)
        .map((p) => p.metadata.name)
        .sort(),
    ).toEqual(['bb-impl-a1-agent', 'bb-impl-a1-gate']);
    // The policies were there before any pod: no agent ever runs without its policy.
    const created = api.calls
      .filter((c) => c.method === 'POST')
      .map((c) => c.path.split('/').pop());
    expect(created.indexOf('networkpolicies')).toBeGreaterThanOrEqual(0);
    expect(created.indexOf('networkpolicies')).toBeLessThan(created.indexOf('pods'));
    // The gate ran before its agent was made.
    expect(await bottles.status('impl-a1')).toMatchObject({ claim: true, gate: 'Running' });
  });

  it('freeze deletes the pods and the Secret and keeps the claim; resume makes them again; destroy deletes everything', async () => {
    await bottles.launch(spec('impl-b2'));
    const claim = api
      .objects('persistentvolumeclaims', NS)
      .find((c) => c.metadata.labels?.['bb.slug'] === 'impl-b2')!;
    await bottles.freeze('impl-b2');
    expect(await bottles.status('impl-b2')).toEqual({ slug: 'impl-b2', claim: true });
    expect(
      api.objects('secrets', NS).filter((s) => s.metadata.labels?.['bb.slug'] === 'impl-b2'),
    ).toEqual([]);
    await bottles.resume(spec('impl-b2'));
    const again = api
      .objects('persistentvolumeclaims', NS)
      .find((c) => c.metadata.labels?.['bb.slug'] === 'impl-b2')!;
    expect(again.metadata.uid).toBe(claim.metadata.uid);
    expect(await bottles.status('impl-b2')).toMatchObject({ claim: true, gate: 'Running' });
    await bottles.destroy('impl-b2');
    await bottles.destroy('impl-b2');
    for (const k of ['persistentvolumeclaims', 'networkpolicies', 'services', 'secrets', 'pods'])
      expect(
        api.objects(k, NS).filter((o) => o.metadata.labels?.['bb.slug'] === 'impl-b2'),
        k,
      ).toEqual([]);
    expect(await bottles.status('impl-b2')).toEqual({ slug: 'impl-b2', claim: false });
  });

  it('destroy lets the policies go only once no pod of the bottle is left; resume makes missing policies first', async () => {
    await bottles.launch(spec('impl-e6'));
    api.calls.length = 0;
    await bottles.destroy('impl-e6');
    const at = (method: string, suffix: string) =>
      api.calls.findIndex(
        (c) => c.method === method && c.path.endsWith(suffix) && !c.query['watch'],
      );
    expect(at('DELETE', '/pods')).toBeGreaterThanOrEqual(0);
    const listed = api.calls.findLastIndex((c) => c.method === 'GET' && c.path.endsWith('/pods'));
    expect(listed).toBeGreaterThan(at('DELETE', '/pods'));
    expect(at('DELETE', '/networkpolicies')).toBeGreaterThan(listed);

    await bottles.launch(spec('impl-f7'));
    await bottles.freeze('impl-f7');
    // A destroy that stopped half way: the policies are gone, the claim is not.
    await fetch(
      `${api.url}/apis/networking.k8s.io/v1/namespaces/${NS}/networkpolicies?labelSelector=bb.slug%3Dimpl-f7`,
      { method: 'DELETE' },
    );
    api.calls.length = 0;
    await bottles.resume(spec('impl-f7'));
    const created = api.calls
      .filter((c) => c.method === 'POST')
      .map((c) => c.path.split('/').pop());
    expect(created.indexOf('networkpolicies')).toBeGreaterThanOrEqual(0);
    expect(created.indexOf('networkpolicies')).toBeLessThan(created.indexOf('pods'));
    const mine = api
      .objects('networkpolicies', NS)
      .filter((p) => p.metadata.labels?.['bb.slug'] === 'impl-f7');
    expect(mine).toHaveLength(2);
  });

  it("gives the gate its Secret readable by the gate's group alone", async () => {
    await bottles.launch(spec('impl-g8'));
    const gate = api.objects('pods', NS).find((p) => p.metadata.name === 'bb-impl-g8-gate')!;
    const podSc = (gate.spec as { securityContext: Record<string, unknown> }).securityContext;
    expect(podSc).toMatchObject({ runAsNonRoot: true, runAsUser: 1001, fsGroup: 1001 });
    const volumes = (gate.spec as { volumes: Array<Record<string, unknown>> }).volumes;
    expect(volumes.find((v) => v['name'] === 'secrets')).toMatchObject({
      secret: { secretName: 'bb-impl-g8-gate', defaultMode: 0o440 },
    });
  });

  it("reports the agent's exit code once its pod ends", async () => {
    await bottles.launch(spec('impl-c3'));
    const waiting = bottles.waitForAgent('impl-c3', 10_000);
    setTimeout(() => api.finishPod(NS, 'bb-impl-c3-agent', 3), 50);
    expect(await waiting).toBe(3);
    expect(await bottles.status('impl-c3')).toMatchObject({ agent: 'Failed', exitCode: 3 });
  });

  it('refuses bad input before making anything, names a taken bottle, and a server that is not there', async () => {
    expect(await code(bottles.launch(spec('Bad_Slug')))).toBe('INVALID_INPUT');
    expect(
      await code(
        bottles.launch(
          spec('impl-d4', { agent: { ...spec('x').agent, user: { uid: 0, gid: 0 } } }),
        ),
      ),
    ).toBe('INVALID_INPUT');
    expect(api.calls.filter((c) => c.method === 'POST')).toEqual([]);
    await bottles.launch(spec('impl-d5'));
    expect(await code(bottles.launch(spec('impl-d5')))).toBe('CONFLICT');
    const down = new KubernetesBottles({
      kubeConfig: kubeConfigFor('http://127.0.0.1:9'),
      namespace: NS,
    });
    const err = await down.list().catch((e) => e);
    expect(err.code).toBe('BACKEND_UNAVAILABLE');
    expect(err.message).toMatch(/listing bottles: the Kubernetes API cannot be reached/);
  });

  it('never runs anything in a pod, attaches to one or forwards a port', () => {
    // Every call of every test above, on the record.
    expect(seen.length).toBeGreaterThan(20);
    expect(seen.filter((c) => /\/(exec|attach|portforward)$/.test(c.path))).toEqual([]);
  });
});

describe('the fake API server', () => {
  it('refuses what the published schemas refuse, and records a call into a pod', async () => {
    const post = (path: string, body: unknown) =>
      fetch(`${api.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const bad = await post(`/api/v1/namespaces/${NS}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'no-containers' },
      spec: { containers: [{ image: 'x' }] },
    });
    expect(bad.status).toBe(422);
    expect(((await bad.json()) as { message: string }).message).toMatch(
      /containers\/0 must have required property name/,
    );
    const exec = await post(`/api/v1/namespaces/${NS}/pods/x/exec`, {});
    expect(exec.status).toBe(403);
    expect(api.calls.at(-1)).toMatchObject({
      path: `/api/v1/namespaces/${NS}/pods/x/exec`,
      status: 403,
    });
  });
});

describeKubernetesIsolation('KubernetesBottles', {
  create: async () => ({
    launch: (s) => bottles.launch(s),
    api,
    namespace: NS,
  }),
});
