import { describe, expect, it } from 'vitest';
import type { KubeBottleSpec } from '../manifests';
import type { FakeKubernetesApi } from './fake-api-server';

export interface KubernetesIsolationOptions {
  /** A backend that launches bottles on `api`, in `namespace`. */
  create: () => Promise<{
    launch(spec: KubeBottleSpec): Promise<void>;
    api: FakeKubernetesApi;
    namespace: string;
  }>;
}

type Json = Record<string, unknown>;
const at = (o: unknown, ...path: string[]): unknown =>
  path.reduce<unknown>((v, k) => (v && typeof v === 'object' ? (v as Json)[k] : undefined), o);

/**
 * What a Kubernetes backend must ask of the cluster for each bottle, read from
 * the objects the API server was given: the agent's pod holds no Secret (no
 * secret volume, no `secretKeyRef`, no `envFrom` of one, no service account
 * token), runs non-root with a read-only root, every capability dropped, no
 * privilege escalation, seccomp's default profile and limits; a network policy
 * selects it, allows no ingress and egress only to its own gate; the bottle's
 * secrets are in the gate's pod alone; and nothing runs in, attaches to or
 * forwards to a pod. (A kubelet enforces these; the API server double only
 * shows they were asked for.)
 */
export function describeKubernetesIsolation(name: string, options: KubernetesIsolationOptions) {
  describe(`Kubernetes isolation: ${name}`, () => {
    const spec = (slug: string): KubeBottleSpec => ({
      slug,
      agent: { image: 'agent:1', command: ['run'], resources: { memoryBytes: 1024 ** 3, cpus: 1 } },
      gate: { image: 'gate:1', command: ['gate'] },
      secrets: { token: `forge-token-${slug}` },
    });
    const launched = async (slug: string) => {
      const b = await options.create();
      await b.launch(spec(slug));
      const of = (plural: string) =>
        b.api.objects(plural, b.namespace).filter((o) => o.metadata.labels?.['bb.slug'] === slug);
      const pods = of('pods');
      const role = (r: string) => pods.find((p) => p.metadata.labels?.['bb.role'] === r);
      return { b, of, agent: role('agent'), gate: role('gate') };
    };

    it("the agent's pod holds no Secret and no service account token", async () => {
      const { agent, of } = await launched('iso-secrets');
      expect(agent, 'an agent pod').toBeDefined();
      const text = JSON.stringify(agent);
      expect(text).not.toMatch(/forge-token-/);
      expect(at(agent, 'spec', 'automountServiceAccountToken')).toBe(false);
      const volumes = (at(agent, 'spec', 'volumes') as Json[] | undefined) ?? [];
      expect(volumes.filter((v) => 'secret' in v || 'projected' in v)).toEqual([]);
      for (const c of (at(agent, 'spec', 'containers') as Json[]) ?? []) {
        expect(JSON.stringify(c['env'] ?? [])).not.toContain('secretKeyRef');
        expect(JSON.stringify(c['envFrom'] ?? [])).not.toContain('secretRef');
      }
      // The secrets are the gate's alone.
      const secretNames = of('secrets').map((s) => s.metadata.name);
      expect(secretNames.length).toBeGreaterThan(0);
      expect(text).not.toMatch(new RegExp(secretNames.join('|')));
    });

    it("the agent runs non-root, read-only, with no capabilities, seccomp's default and limits", async () => {
      const { agent } = await launched('iso-hardened');
      const pod = at(agent, 'spec', 'securityContext') as Json;
      expect(pod['runAsNonRoot']).toBe(true);
      expect(Number(pod['runAsUser'])).toBeGreaterThan(0);
      expect(at(pod, 'seccompProfile', 'type')).toBe('RuntimeDefault');
      expect(at(agent, 'spec', 'hostNetwork') ?? false).toBe(false);
      expect(at(agent, 'spec', 'hostPID') ?? false).toBe(false);
      for (const c of at(agent, 'spec', 'containers') as Json[]) {
        const sc = c['securityContext'] as Json;
        expect(sc['readOnlyRootFilesystem']).toBe(true);
        expect(sc['allowPrivilegeEscalation']).toBe(false);
        expect(at(sc, 'capabilities', 'drop')).toEqual(['ALL']);
        expect(sc['privileged'] ?? false).toBe(false);
        expect(at(c, 'resources', 'limits', 'memory')).toBeDefined();
        expect(at(c, 'resources', 'limits', 'cpu')).toBeDefined();
      }
    });

    it('a network policy lets the agent reach its gate and nothing else', async () => {
      const { of, agent, gate } = await launched('iso-network');
      const labels = (agent!.metadata.labels ?? {}) as Record<string, string>;
      const gateLabels = (gate!.metadata.labels ?? {}) as Record<string, string>;
      const selectsAgent = of('networkpolicies').filter((p) => {
        const want = at(p, 'spec', 'podSelector', 'matchLabels') as Record<string, string>;
        return want && Object.entries(want).every(([k, v]) => labels[k] === v);
      });
      expect(selectsAgent.length, 'a policy selecting the agent').toBeGreaterThan(0);
      for (const p of selectsAgent) {
        expect(at(p, 'spec', 'policyTypes')).toEqual(expect.arrayContaining(['Ingress', 'Egress']));
        expect((at(p, 'spec', 'ingress') as unknown[] | undefined) ?? []).toEqual([]);
        for (const rule of at(p, 'spec', 'egress') as Json[]) {
          const to = rule['to'] as Json[];
          expect(to?.length, 'an egress rule names where it goes').toBeGreaterThan(0);
          for (const peer of to) {
            expect(Object.keys(peer)).toEqual(['podSelector']);
            const sel = at(peer, 'podSelector', 'matchLabels') as Record<string, string>;
            expect(Object.entries(sel).every(([k, v]) => gateLabels[k] === v)).toBe(true);
            expect(sel['bb.role']).toBe('gate');
          }
        }
      }
    });

    it('nothing runs in, attaches to or forwards to a pod', async () => {
      const { b } = await launched('iso-calls');
      expect(b.api.calls.length).toBeGreaterThan(0);
      expect(b.api.calls.filter((c) => /\/(exec|attach|portforward)$/.test(c.path))).toEqual([]);
    });
  });
}
