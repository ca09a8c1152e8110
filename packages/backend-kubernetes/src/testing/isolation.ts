import { LABEL } from '@bb/names';
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
const list = (o: unknown, ...path: string[]) => (at(o, ...path) as Json[] | undefined) ?? [];

/** Whether a label selector (matchLabels and matchExpressions; `{}` is everything) selects `labels`. */
export function selectorSelects(selector: unknown, labels: Record<string, string>): boolean {
  const match = (at(selector, 'matchLabels') as Record<string, string> | undefined) ?? {};
  if (!Object.entries(match).every(([k, v]) => labels[k] === v)) return false;
  return list(selector, 'matchExpressions').every((e) => {
    const key = String(e['key']);
    const values = (e['values'] as string[] | undefined) ?? [];
    switch (e['operator']) {
      case 'In':
        return key in labels && values.includes(labels[key]!);
      case 'NotIn':
        return !(key in labels) || !values.includes(labels[key]!);
      case 'Exists':
        return key in labels;
      case 'DoesNotExist':
        return !(key in labels);
      default:
        return false;
    }
  });
}

/** The claim every gate shares (queues, op logs): never an agent's. */
const SHARED_STATE = 'bb-shared-state';

/** The only volumes an agent may have: its bottle's claim and scratch space. */
const AGENT_VOLUMES = new Set(['name', 'persistentVolumeClaim', 'emptyDir']);

/**
 * What a Kubernetes backend must ask of the cluster for each bottle, read from
 * the objects the API server was given. Every pod of the bottle but its gate
 * (there is one gate) is held to the agent's rules: no Secret in any form (no
 * secret, projected, hostPath, CSI or config map volume: only its claim and
 * scratch; no `secretKeyRef`, no `envFrom`), no claim but its own bottle's (never
 * the state claim its gates share), no service account token, no host
 * namespaces, no shared process namespace; every container, init and
 * ephemeral ones included, non-root, read-only root, no capability added and
 * all dropped, no privilege escalation, not privileged, seccomp's default (or
 * a local) profile, with limits. Every network policy that selects an agent
 * (whatever its selector's form) allows it no ingress and egress only to its
 * own bottle's gate, on named ports; policies exist before any pod; and nothing
 * runs in, attaches to or forwards to a pod. (A kubelet and a CNI enforce
 * these; the API server double only shows they were asked for.)
 */
export function describeKubernetesIsolation(name: string, options: KubernetesIsolationOptions) {
  describe(`Kubernetes isolation: ${name}`, () => {
    const spec = (slug: string): KubeBottleSpec => ({
      slug,
      agent: { image: 'agent:1', command: ['run'], resources: { memoryBytes: 1024 ** 3, cpus: 1 } },
      gate: { image: 'gate:1', command: ['gate'] },
      secrets: { token: `forge-token-${slug}` },
      stateClaim: SHARED_STATE,
    });
    const launched = async (slug: string) => {
      const b = await options.create();
      const before = b.api.calls.length;
      await b.launch(spec(slug));
      const calls = b.api.calls.slice(before);
      const mine = (o: { metadata: { labels?: Record<string, string> } }) =>
        o.metadata.labels?.[LABEL.slug] === slug;
      const pods = b.api.objects('pods', b.namespace).filter(mine);
      const gates = pods.filter((p) => p.metadata.labels?.[LABEL.role] === 'gate');
      const agents = pods.filter((p) => p.metadata.labels?.[LABEL.role] !== 'gate');
      return {
        b,
        calls,
        gates,
        agents,
        secrets: b.api.objects('secrets', b.namespace).filter(mine),
        claims: b.api.objects('persistentvolumeclaims', b.namespace),
        // Every policy in the namespace: any of them may select the agent.
        policies: b.api.objects('networkpolicies', b.namespace),
      };
    };
    const containersOf = (pod: unknown) => [
      ...list(pod, 'spec', 'containers'),
      ...list(pod, 'spec', 'initContainers'),
      ...list(pod, 'spec', 'ephemeralContainers'),
    ];

    it("the agent's pods hold no Secret in any form and no service account token", async () => {
      const { agents, gates, secrets } = await launched('iso-secrets');
      expect(gates, 'one gate pod').toHaveLength(1);
      expect(agents.length, 'an agent pod').toBeGreaterThan(0);
      expect(secrets.length, 'the bottle has its secrets (in the gate)').toBeGreaterThan(0);
      for (const agent of agents) {
        const text = JSON.stringify(agent);
        expect(text).not.toMatch(/forge-token-/);
        for (const s of secrets) expect(text).not.toContain(s.metadata.name);
        expect(at(agent, 'spec', 'automountServiceAccountToken')).toBe(false);
        for (const v of list(agent, 'spec', 'volumes'))
          expect(
            Object.keys(v).filter((k) => !AGENT_VOLUMES.has(k)),
            `volume ${String(v['name'])}`,
          ).toEqual([]);
        for (const c of containersOf(agent)) {
          expect(JSON.stringify(c['env'] ?? [])).not.toMatch(/secretKeyRef|configMapKeyRef/);
          expect(c['envFrom'] ?? []).toEqual([]);
        }
      }
    });

    it("the agent's pods mount no claim but their own bottle's (never the state its gates share)", async () => {
      const slug = 'iso-claims';
      const { agents, claims } = await launched(slug);
      expect(agents.length, 'an agent pod').toBeGreaterThan(0);
      for (const agent of agents)
        for (const v of list(agent, 'spec', 'volumes')) {
          const name = at(v, 'persistentVolumeClaim', 'claimName');
          if (name === undefined) continue;
          expect(name, `volume ${String(v['name'])}`).not.toBe(SHARED_STATE);
          const claim = claims.find((c) => c.metadata.name === name);
          expect(claim?.metadata.labels?.[LABEL.slug], `claim ${String(name)}'s bottle`).toBe(slug);
        }
    });

    it("every container of the agent's pods runs non-root, read-only, unprivileged, within limits", async () => {
      const { agents } = await launched('iso-hardened');
      for (const agent of agents) {
        const pod = (at(agent, 'spec', 'securityContext') as Json | undefined) ?? {};
        for (const flag of ['hostNetwork', 'hostPID', 'hostIPC', 'shareProcessNamespace'])
          expect(at(agent, 'spec', flag) ?? false, flag).toBe(false);
        for (const c of containersOf(agent)) {
          const sc = (c['securityContext'] as Json | undefined) ?? {};
          const user = sc['runAsUser'] ?? pod['runAsUser'];
          expect(sc['runAsNonRoot'] ?? pod['runAsNonRoot'], `${c['name']} runAsNonRoot`).toBe(true);
          expect(user === undefined || Number(user) > 0, `${c['name']} uid`).toBe(true);
          const seccomp = at(sc, 'seccompProfile', 'type') ?? at(pod, 'seccompProfile', 'type');
          expect(['RuntimeDefault', 'Localhost'], `${c['name']} seccomp`).toContain(seccomp);
          expect(sc['readOnlyRootFilesystem'], `${c['name']} read-only root`).toBe(true);
          expect(sc['allowPrivilegeEscalation'], `${c['name']} escalation`).toBe(false);
          expect(sc['privileged'] ?? false, `${c['name']} privileged`).toBe(false);
          expect(at(sc, 'capabilities', 'drop'), `${c['name']} capabilities`).toEqual(['ALL']);
          expect(at(sc, 'capabilities', 'add') ?? [], `${c['name']} added capabilities`).toEqual(
            [],
          );
          expect(at(c, 'resources', 'limits', 'memory'), `${c['name']} memory limit`).toBeDefined();
          expect(at(c, 'resources', 'limits', 'cpu'), `${c['name']} cpu limit`).toBeDefined();
        }
      }
    });

    it('every network policy that selects an agent lets it reach its own gate and nothing else', async () => {
      const { agents, gates, policies, calls } = await launched('iso-network');
      const gate = (gates[0]?.metadata.labels ?? {}) as Record<string, string>;
      for (const agent of agents) {
        const labels = (agent.metadata.labels ?? {}) as Record<string, string>;
        const selecting = policies.filter((p) =>
          selectorSelects(at(p, 'spec', 'podSelector'), labels),
        );
        const types = selecting.flatMap((p) => (at(p, 'spec', 'policyTypes') as string[]) ?? []);
        expect(types, 'the agent is isolated both ways').toEqual(
          expect.arrayContaining(['Ingress', 'Egress']),
        );
        for (const p of selecting) {
          expect(list(p, 'spec', 'ingress'), `${p.metadata.name} ingress`).toEqual([]);
          for (const rule of list(p, 'spec', 'egress')) {
            const to = (rule['to'] as Json[] | undefined) ?? [];
            expect(
              to.length,
              `${p.metadata.name}: an egress rule names where it goes`,
            ).toBeGreaterThan(0);
            expect(
              ((rule['ports'] as unknown[]) ?? []).length,
              `${p.metadata.name}: ports`,
            ).toBeGreaterThan(0);
            for (const peer of to) {
              expect(Object.keys(peer), `${p.metadata.name}: peers by pod only`).toEqual([
                'podSelector',
              ]);
              const sel = peer['podSelector'];
              // It selects this bottle's gate, and would select no other pod of the namespace.
              expect(selectorSelects(sel, gate), `${p.metadata.name} selects the gate`).toBe(true);
              expect(at(sel, 'matchLabels', LABEL.slug), `${p.metadata.name}: this bottle's`).toBe(
                gate[LABEL.slug],
              );
              expect(at(sel, 'matchLabels', LABEL.role)).toBe('gate');
            }
          }
        }
      }
      // The policies were there before any pod of the bottle.
      const firstPod = calls.findIndex((c) => c.method === 'POST' && c.path.endsWith('/pods'));
      const firstPolicy = calls.findIndex(
        (c) => c.method === 'POST' && c.path.endsWith('/networkpolicies'),
      );
      expect(firstPolicy, 'a policy was made').toBeGreaterThanOrEqual(0);
      expect(firstPod, 'a pod was made').toBeGreaterThanOrEqual(0);
      expect(firstPolicy).toBeLessThan(firstPod);
    });

    it('nothing runs in, attaches to or forwards to a pod', async () => {
      const { calls } = await launched('iso-calls');
      expect(calls.length).toBeGreaterThan(0);
      expect(
        calls.filter((c) => /\/(exec|attach|portforward|ephemeralcontainers)$/.test(c.path)),
      ).toEqual([]);
    });
  });
}
