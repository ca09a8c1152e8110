// The manifests shipped in deploy/: valid against the API's published schemas, the
// orchestrator's Role grants no way into a pod, and it grants every call
// KubernetesBottles makes (as recorded by the fake API server), and no more kinds.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadAgentManifest, loadBottleManifest } from '@bb/headless';
import { Deployment } from 'kubernetes-models/apps/v1';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { Role, RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import {
  ConfigMap,
  LimitRange,
  Namespace,
  PersistentVolume,
  PersistentVolumeClaim,
  Service,
  ServiceAccount,
} from 'kubernetes-models/v1';
import { afterAll, describe, expect, it } from 'vitest';
import { KubernetesBottles, kubeConfigFor } from '../src/kubernetes-bottles';
import { deployedObjects, FakeKubernetesApi, publishedSchemas } from '../src/testing/index';

const deploy = join(dirname(fileURLToPath(import.meta.url)), '..', 'deploy');
type Doc = {
  apiVersion: string;
  kind: string;
  metadata?: { name?: string; namespace?: string; labels?: Record<string, string> };
  rules?: Rule[];
  resources?: string[];
  subjects?: Array<{ kind: string; name: string; namespace?: string }>;
  spec?: { podSelector?: object; policyTypes?: string[]; ingress?: unknown[]; egress?: unknown[] };
};
type Rule = { apiGroups: string[]; resources: string[]; verbs: string[] };
const load = (f: string) => deployedObjects(f) as unknown as Doc[];
const MODELS: Record<string, new (d: never) => { validate(): void }> = {
  ServiceAccount,
  Role,
  RoleBinding,
  Deployment,
  Service,
  Namespace,
  NetworkPolicy,
  PersistentVolume,
  PersistentVolumeClaim,
  LimitRange,
};

let api: FakeKubernetesApi | undefined;
afterAll(() => api?.close());

describe('deploy/', () => {
  const docs = [
    ...load('namespaces.yaml'),
    ...load('rbac.yaml'),
    ...load('state.yaml'),
    ...load('orchestrator.yaml'),
  ];
  const role = docs.find((d) => d.kind === 'Role')!;

  it('holds only objects the published schemas accept, and the kustomization names its files', () => {
    expect(docs.map((d) => d.kind).sort()).toEqual([
      'Deployment',
      'LimitRange',
      'Namespace',
      'Namespace',
      'NetworkPolicy',
      'PersistentVolume',
      'PersistentVolume',
      'PersistentVolumeClaim',
      'PersistentVolumeClaim',
      'Role',
      'RoleBinding',
      'Service',
      'ServiceAccount',
    ]);
    for (const d of docs) new MODELS[d.kind]!(d as never).validate();
    const k = load('kustomization.yaml')[0]!;
    expect(k.resources).toEqual([
      'namespaces.yaml',
      'rbac.yaml',
      'state.yaml',
      'orchestrator.yaml',
    ]);
  });

  it('runs the orchestrator on the kubernetes backend, its bottles state on the claim its gates share', () => {
    type Spec = {
      template: {
        spec: {
          securityContext: { runAsUser?: number; runAsGroup?: number };
          containers: Array<{
            env: Array<{ name: string; value: string }>;
            volumeMounts: Array<{ name: string; mountPath: string }>;
          }>;
          volumes: Array<{ name: string; persistentVolumeClaim?: { claimName: string } }>;
        };
      };
    };
    const dep = docs.find((d) => d.kind === 'Deployment')!;
    const pod = (dep.spec as unknown as Spec).template.spec;
    const env = Object.fromEntries(pod.containers[0]!.env.map((e) => [e.name, e.value]));
    expect(env).toMatchObject({ BB_BACKEND: 'kubernetes', BB_K8S_NAMESPACE: 'bot-bottle-bottles' });
    const claim = env['BB_K8S_STATE_CLAIM']!;
    // Mounted where the bottles' state is read: $BB_HOME/bottles.
    const mount = pod.containers[0]!.volumeMounts.find(
      (m) => m.mountPath === `${env['BB_HOME']}/bottles`,
    )!;
    expect(pod.volumes.find((v) => v.name === mount.name)?.persistentVolumeClaim?.claimName).toBe(
      claim,
    );
    // The gates' user: it reads what they write (0600), and the folders it makes are theirs.
    expect([pod.securityContext.runAsUser, pod.securityContext.runAsGroup]).toEqual([1001, 1001]);
    // A claim of that name in each namespace, bound to volumes of the same export.
    type PvSpec = {
      claimRef: { namespace: string; name: string };
      nfs: object;
      accessModes: string[];
    };
    const pvs = docs
      .filter((d) => d.kind === 'PersistentVolume')
      .map((d) => d.spec as unknown as PvSpec);
    expect(pvs.map((p) => [p.claimRef.namespace, p.claimRef.name]).sort()).toEqual([
      ['bot-bottle', claim],
      ['bot-bottle-bottles', claim],
    ]);
    expect(pvs[0]!.nfs).toEqual(pvs[1]!.nfs);
    for (const p of pvs) expect(p.accessModes).toEqual(['ReadWriteMany']);
  });

  it('puts bottles in a namespace of their own, Pod Security restricted, denying by default', () => {
    const bottles = docs.find(
      (d) => d.kind === 'Namespace' && d.metadata?.name === 'bot-bottle-bottles',
    )!;
    expect(bottles.metadata?.labels?.['pod-security.kubernetes.io/enforce']).toBe('restricted');
    expect(role.metadata?.namespace).toBe('bot-bottle-bottles');
    const deny = docs.find((d) => d.kind === 'NetworkPolicy')!;
    expect(deny.metadata?.namespace).toBe('bot-bottle-bottles');
    expect(deny.spec).toEqual({ podSelector: {}, policyTypes: ['Ingress', 'Egress'] });
    // The orchestrator and its Secret live apart from the bottles.
    const binding = docs.find((d) => d.kind === 'RoleBinding')!;
    expect(binding.subjects).toEqual([
      { kind: 'ServiceAccount', name: 'bb-orchestrator', namespace: 'bot-bottle' },
    ]);
    expect(docs.find((d) => d.kind === 'Deployment')!.metadata?.namespace).toBe('bot-bottle');
  });

  it('grants no way into a pod, and nothing by wildcard', () => {
    for (const r of role.rules!) {
      expect(
        r.resources.filter((x) => /\*|exec|attach|portforward|ephemeralcontainers|proxy/.test(x)),
      ).toEqual([]);
      expect([...r.verbs, ...r.apiGroups].filter((x) => x.includes('*'))).toEqual([]);
    }
  });

  it('grants every call KubernetesBottles makes: launch, watch, logs, stop, freeze, resume, list, destroy', async () => {
    api = await FakeKubernetesApi.start({ check: publishedSchemas });
    const b = new KubernetesBottles({ kubeConfig: kubeConfigFor(api.url), namespace: 'bb' });
    const spec = {
      slug: 'rbac-1',
      agent: { image: 'a', command: ['a'] },
      gate: { image: 'g', command: ['g'] },
      secrets: { token: 't' },
    };
    await b.launch(spec);
    api.finishPod('bb', 'bb-rbac-1-agent', 0, 'done\n');
    expect(await b.waitForAgent('rbac-1')).toBe(0);
    expect(await b.agentLogs('rbac-1')).toBe('done\n');
    await b.freeze('rbac-1');
    await b.resume(spec);
    await b.stopAgent('rbac-1');
    await b.list({ 'bb.home': 'h' });
    await b.destroy('rbac-1');
    const needed = new Set<string>();
    for (const c of api.calls) {
      const m =
        /^\/(?:api\/v1|apis\/([^/]+)\/v1)\/namespaces\/[^/]+\/([^/]+)(\/[^/]+)?(\/log)?$/.exec(
          c.path,
        )!;
      const [group, resource, one] = [m[1] ?? '', m[4] ? `${m[2]}/log` : m[2]!, m[3]];
      const verb =
        c.method === 'POST'
          ? 'create'
          : c.method === 'DELETE'
            ? one
              ? 'delete'
              : 'deletecollection'
            : c.query['watch'] === 'true'
              ? 'watch'
              : one
                ? 'get'
                : 'list';
      needed.add(`${group}|${resource}|${verb}`);
    }
    const granted = new Set(
      role.rules!.flatMap((r) =>
        r.apiGroups.flatMap((g) =>
          r.resources.flatMap((res) => r.verbs.map((v) => `${g}|${res}|${v}`)),
        ),
      ),
    );
    expect([...needed].filter((n) => !granted.has(n))).toEqual([]);
    expect(needed.size).toBeGreaterThanOrEqual(12);
  });
  it('gives every replica the same agents, bottles and policy from a ConfigMap, and its signing key from a Secret', () => {
    type Pod = {
      containers: Array<{
        env: Array<{ name: string; value: string }>;
        volumeMounts: Array<{ name: string; mountPath: string; readOnly?: boolean }>;
      }>;
      volumes: Array<{
        name: string;
        emptyDir?: object;
        configMap?: { name: string; items: Array<{ key: string; path: string }> };
        secret?: {
          secretName: string;
          defaultMode?: number;
          items: Array<{ key: string; path: string }>;
        };
      }>;
    };
    const pod = (
      docs.find((d) => d.kind === 'Deployment')!.spec as unknown as {
        template: { spec: Pod };
      }
    ).template.spec;
    const c = pod.containers[0]!;
    const home = c.env.find((e) => e.name === 'BB_HOME')!.value;
    const volumeAt = (path: string) => {
      const m = c.volumeMounts.find((v) => v.mountPath === path);
      expect(m, `a volume at ${path}`).toBeDefined();
      expect(m!.readOnly).toBe(true);
      return pod.volumes.find((v) => v.name === m!.name)!;
    };
    // The configuration: a ConfigMap, each key the kustomization makes placed in its folder.
    const config = volumeAt(`${home}/config`);
    expect(config.emptyDir).toBeUndefined();
    const k = load('kustomization.yaml')[0] as unknown as {
      configMapGenerator: Array<{ name: string; namespace: string; files: string[] }>;
    };
    const gen = k.configMapGenerator.find((g) => g.name === config.configMap!.name)!;
    expect(gen.namespace).toBe(docs.find((d) => d.kind === 'Deployment')!.metadata!.namespace);
    const files = Object.fromEntries(gen.files.map((f) => f.split('=') as [string, string]));
    expect(config.configMap!.items.map((i) => i.key).sort()).toEqual(Object.keys(files).sort());
    // The ConfigMap it makes is one the API accepts.
    const data = Object.fromEntries(
      Object.entries(files).map(([key, file]) => [key, readFileSync(join(deploy, file), 'utf8')]),
    );
    new ConfigMap({ metadata: { name: gen.name, namespace: gen.namespace }, data }).validate();
    // Laid out as the pod sees it, the manifests are valid and every agent's bottles exist.
    const bbHome = mkdtempSync(join(tmpdir(), 'bb-deploy-config-'));
    try {
      for (const item of config.configMap!.items) {
        const to = join(bbHome, 'config', item.path);
        mkdirSync(dirname(to), { recursive: true });
        writeFileSync(to, data[item.key]!);
      }
      const env = { BB_HOME: bbHome };
      const agents = config
        .configMap!.items.filter((i) => i.path.startsWith('agents/'))
        .map((i) => basename(i.path).replace(/\.(json|ya?ml)$/, ''));
      expect(agents.length).toBeGreaterThan(0);
      for (const a of agents)
        for (const b of loadAgentManifest(a, env).manifest.bottles) loadBottleManifest(b, env);
    } finally {
      rmSync(bbHome, { recursive: true, force: true });
    }
    // The signing key: a Secret only its owner may read, never a new key at each start.
    const key = volumeAt(`${home}/keys`);
    expect(key.emptyDir).toBeUndefined();
    expect(key.secret!.items).toEqual([
      { key: 'provenance-ed25519.pem', path: 'provenance-ed25519.pem' },
    ]);
    expect(key.secret!.defaultMode).toBe(0o400);
  });
});
