// `bb doctor --backend kubernetes`'s checks against the fake API server, playing a
// cluster that gives bottles what they need (the Role of deploy/rbac.yaml, Pod Security
// "restricted", a CNI that drops what no policy allows, images that run) and one that
// does not. The fake's kubelet is this test: it ends each probe pod as a node of such
// a cluster would (what a probe prints is the probe's own contract, see doctor.ts).
import { afterEach, describe, expect, it } from 'vitest';
import {
  ORCHESTRATOR_ACCESS,
  ORCHESTRATOR_FORBIDDEN,
  type PolicyRule,
  rulesAllow,
} from '../src/access';
import { type ClusterCheck, clusterChecks, NETWORK_PROBE } from '../src/doctor';
import { kubeConfigFor } from '../src/kubernetes-bottles';
import { planBottle } from '../src/manifests';
import {
  deployedRoleRules,
  type FakeClusterOptions,
  FakeKubernetesApi,
  type PodFate,
  publishedSchemas,
  restrictedViolations,
} from '../src/testing/index';

const NS = 'bot-bottle-bottles';
const role = { rules: deployedRoleRules() };

let api: FakeKubernetesApi | undefined;
afterEach(() => api?.close());

type Node = (pod: { name: string; image: string }) => PodFate;

/** The fake cluster, ending each probe pod once it runs as `node` says. */
async function cluster(o: FakeClusterOptions, node: Node) {
  api = await FakeKubernetesApi.start({ check: publishedSchemas, ...o, kubelet: node });
  return api;
}

const byName = (checks: ClusterCheck[]) => Object.fromEntries(checks.map((c) => [c.check, c]));

describe('clusterChecks', () => {
  it('passes a cluster that gives bottles what they need, and leaves no probe pod behind', async () => {
    const a = await cluster(
      { access: { [NS]: role.rules! }, podSecurity: { [NS]: 'restricted' } },
      ({ image }) =>
        image === 'reg.test/gate:1'
          ? { exit: 0, log: 'RUNTIME ok\nBLOCKED 10.96.0.1:443 timeout\n' }
          : { exit: 0, log: 'NODE v20.19.5\n' },
    );
    const checks = await clusterChecks({
      kubeConfig: kubeConfigFor(a.url),
      namespace: NS,
      gateImage: 'reg.test/gate:1',
      agentImages: ['reg.test/agents:1', 'reg.test/agents:1'],
      timeoutMs: 10_000,
    });
    expect(checks.map((c) => [c.check, c.ok])).toEqual([
      ['kubernetes access', true],
      ['pod security', true],
      ['gate image', true],
      ['network policy', true],
      ['agent image reg.test/agents:1', true],
    ]);
    expect(byName(checks)['network policy']!.detail).toContain('10.96.0.1:443');
    expect(byName(checks)['pod security']!.detail).toContain('violates PodSecurity');
    // Every probe pod was deleted; the privileged one was a dry run, never stored.
    expect(a.objects('pods', NS)).toEqual([]);
    const made = a.calls.filter((c) => c.method === 'POST' && c.path.endsWith('/pods'));
    expect(made.map((c) => c.query['dryRun'] ?? 'made')).toEqual(
      expect.arrayContaining(['All', 'made', 'made']),
    );
    expect(a.calls.filter((c) => c.path.includes('/exec') || c.path.includes('/attach'))).toEqual(
      [],
    );
    // One review for each thing needed and each thing refused.
    expect(a.calls.filter((c) => c.path.endsWith('selfsubjectaccessreviews')).length).toBe(
      ORCHESTRATOR_ACCESS.length + ORCHESTRATOR_FORBIDDEN.length,
    );
  });

  it('fails a cluster that grants a way into pods, admits privileged pods, enforces no policy, and cannot pull an image, naming each', async () => {
    const loose: PolicyRule[] = [
      ...role.rules!.filter((r) => !r.resources.includes('services')),
      { apiGroups: [''], resources: ['pods/exec'], verbs: ['create'] },
      { apiGroups: [''], resources: ['secrets'], verbs: ['get'] },
    ];
    const a = await cluster({ access: { [NS]: loose } }, ({ image }) =>
      image === 'reg.test/gate:1'
        ? { exit: 2, log: 'RUNTIME ok\nREACHED 10.96.0.1:443\n' }
        : { stall: 'ImagePullBackOff' },
    );
    const checks = byName(
      await clusterChecks({
        kubeConfig: kubeConfigFor(a.url),
        namespace: NS,
        gateImage: 'reg.test/gate:1',
        agentImages: ['reg.test/missing:1'],
        timeoutMs: 10_000,
      }),
    );
    expect(checks['kubernetes access']).toMatchObject({ ok: false });
    expect(checks['kubernetes access']!.detail).toContain(
      'not allowed in bot-bottle-bottles: services get',
    );
    expect(checks['kubernetes access']!.detail).toMatch(
      /must not be: pods\/exec create, secrets get$/,
    );
    expect(checks['pod security']).toMatchObject({ ok: false });
    expect(checks['pod security']!.fix).toContain('pod-security.kubernetes.io/enforce=restricted');
    expect(checks['network policy']).toMatchObject({ ok: false });
    expect(checks['network policy']!.detail).toContain('reached 10.96.0.1:443');
    expect(checks['agent image reg.test/missing:1']).toMatchObject({ ok: false });
    expect(checks['agent image reg.test/missing:1']!.detail).toContain('ImagePullBackOff');
    expect(a.objects('pods', NS)).toEqual([]);
  });

  it('fails a gate image without the runtime, and says the network was not probed', async () => {
    const a = await cluster({}, () => ({ exit: 3, log: 'RUNTIME missing /opt/bb/runtime\n' }));
    const checks = byName(
      await clusterChecks({
        kubeConfig: kubeConfigFor(a.url),
        namespace: NS,
        gateImage: 'bb-base:1',
        timeoutMs: 10_000,
      }),
    );
    expect(checks['gate image']).toMatchObject({ ok: false });
    expect(checks['gate image']!.detail).toContain('no bot-bottle runtime');
    expect(checks['network policy']).toMatchObject({ ok: null });
  });

  it('names a pod that never ends within its time', async () => {
    api = await FakeKubernetesApi.start({ check: publishedSchemas });
    const checks = byName(
      await clusterChecks({
        kubeConfig: kubeConfigFor(api.url),
        namespace: NS,
        gateImage: 'g:1',
        timeoutMs: 600,
      }),
    );
    expect(checks['gate image']).toMatchObject({ ok: false });
    expect(checks['gate image']!.detail).toMatch(/did not end in 1 s \(phase Running\)/);
    expect(api.objects('pods', NS)).toEqual([]);
  });
});

describe('what the checks tell apart', () => {
  it('a namespace that enforces only "baseline" fails the Pod Security check, naming the level', async () => {
    const a = await cluster({ podSecurity: { [NS]: 'baseline' } }, () => ({
      exit: 0,
      log: 'RUNTIME ok\nBLOCKED 10.96.0.1:443 timeout\n',
    }));
    const checks = byName(
      await clusterChecks({
        kubeConfig: kubeConfigFor(a.url),
        namespace: NS,
        gateImage: 'g:1',
        timeoutMs: 10_000,
      }),
    );
    expect(checks['pod security']).toMatchObject({ ok: false });
    expect(checks['pod security']!.detail).toMatch(/looser level than "restricted"|admits a pod/);
  });

  it('a probe refused by a host is inconclusive, not blocked; a bad target is named; leftovers of a stopped run are removed', async () => {
    const a = await cluster({}, () => ({
      exit: 5,
      log: 'RUNTIME ok\nINCONCLUSIVE 10.0.0.9:80 ECONNREFUSED\n',
    }));
    a.seed('pods', NS, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'bb-doctor-old-network', labels: { 'bb.doctor': 'probe' } },
      spec: { containers: [{ name: 'main', image: 'g:1' }] },
    });
    const o = {
      kubeConfig: kubeConfigFor(a.url),
      namespace: NS,
      gateImage: 'g:1',
      timeoutMs: 10_000,
    };
    const checks = byName(await clusterChecks({ ...o, probeTarget: '[fd00::1]:80' }));
    expect(checks['network policy']).toMatchObject({ ok: null });
    expect(checks['network policy']!.detail).toContain(
      '10.0.0.9:80 was answered (ECONNREFUSED), not dropped',
    );
    expect(a.objects('pods', NS)).toEqual([]);
    for (const bad of ['10.0.0.9', '10.0.0.9:0', '10.0.0.9:70000'])
      expect(
        byName(await clusterChecks({ ...o, probeTarget: bad }))['network policy'],
      ).toMatchObject({
        ok: false,
        detail: expect.stringContaining('is not host:port'),
      });
  });

  it("the probe's own script: reached, refused (inconclusive), and no runtime, as node runs it", async () => {
    const { execFile } = await import('node:child_process');
    const { createServer } = await import('node:net');
    const server = createServer((c) => c.end());
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    const probe = (env: Record<string, string>) =>
      new Promise<{ code: number; out: string }>((resolve) =>
        execFile(process.execPath, ['-e', NETWORK_PROBE], { env }, (err, out) =>
          resolve({ code: (err as { code?: number } | null)?.code ?? 0, out }),
        ),
      );
    try {
      expect(await probe({ BB_PROBE_HOST: '127.0.0.1', BB_PROBE_PORT: String(port) })).toEqual({
        code: 2,
        out: `REACHED 127.0.0.1:${port}\n`,
      });
      server.close();
      await new Promise((r) => setTimeout(r, 50));
      expect(await probe({ BB_PROBE_HOST: '127.0.0.1', BB_PROBE_PORT: String(port) })).toEqual({
        code: 5,
        out: `INCONCLUSIVE 127.0.0.1:${port} ECONNREFUSED\n`,
      });
      expect(await probe({ BB_PROBE_RUNTIME: '/nonexistent', BB_PROBE_HOST: '127.0.0.1' })).toEqual(
        {
          code: 3,
          out: 'RUNTIME missing /nonexistent\n',
        },
      );
      expect(await probe({})).toEqual({ code: 4, out: 'NOTARGET\n' });
    } finally {
      server.close();
    }
  });
});

describe('the orchestrator access and Pod Security the checks hold a cluster to', () => {
  it('deploy/rbac.yaml grants exactly what is needed and nothing forbidden', () => {
    for (const a of ORCHESTRATOR_ACCESS)
      expect(rulesAllow(role.rules!, a), JSON.stringify(a)).toBe(true);
    for (const a of ORCHESTRATOR_FORBIDDEN)
      expect(rulesAllow(role.rules!, a), JSON.stringify(a)).toBe(false);
    const granted = role.rules!.flatMap((r) =>
      r.resources.flatMap((res) => r.verbs.map((v) => `${res} ${v}`)),
    );
    const needed = ORCHESTRATOR_ACCESS.map(
      (a) => `${a.resource}${a.subresource ? `/${a.subresource}` : ''} ${a.verb}`,
    );
    expect(granted.sort()).toEqual(needed.sort());
  });

  it('"restricted" admits a bottle\'s pods and refuses one that runs privileged or as root', () => {
    const plan = planBottle({
      slug: 'ps-1',
      agent: { image: 'a', command: ['a'] },
      gate: { image: 'g', command: ['g'], clone: { name: 'bot', email: 'bot@test' } },
      secrets: { token: 't' },
      stateClaim: 'bb-bottle-state',
    });
    for (const pod of [plan.gate, plan.agent])
      expect(restrictedViolations(pod.spec as never)).toEqual([]);
    const bad = structuredClone(plan.agent.spec!) as unknown as {
      containers: Array<{ securityContext: Record<string, unknown> }>;
    };
    bad.containers[0]!.securityContext['privileged'] = true;
    bad.containers[0]!.securityContext['runAsUser'] = 0;
    bad.containers[0]!.securityContext['allowPrivilegeEscalation'] = true;
    expect(restrictedViolations(bad as never).map((v) => v.split(' (')[0])).toEqual([
      'privileged',
      'allowPrivilegeEscalation != false',
      'runAsUser=0',
    ]);
  });
});
