// The manifests shipped in deploy/: valid against the API's published schemas, the
// orchestrator's Role grants no way into a pod, and it grants every call
// KubernetesBottles makes (as recorded by the fake API server), and no more kinds.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadAllYaml } from '@kubernetes/client-node';
import { Deployment } from 'kubernetes-models/apps/v1';
import { Role, RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import { Service, ServiceAccount } from 'kubernetes-models/v1';
import { afterAll, describe, expect, it } from 'vitest';
import { KubernetesBottles, kubeConfigFor } from '../src/kubernetes-bottles';
import { FakeKubernetesApi, publishedSchemas } from '../src/testing/index';

const deploy = join(dirname(fileURLToPath(import.meta.url)), '..', 'deploy');
type Doc = { apiVersion: string; kind: string; rules?: Rule[]; resources?: string[] };
type Rule = { apiGroups: string[]; resources: string[]; verbs: string[] };
const load = (f: string) => loadAllYaml(readFileSync(join(deploy, f), 'utf8')) as Doc[];
const MODELS: Record<string, new (d: never) => { validate(): void }> = {
  ServiceAccount,
  Role,
  RoleBinding,
  Deployment,
  Service,
};

let api: FakeKubernetesApi | undefined;
afterAll(() => api?.close());

describe('deploy/', () => {
  const docs = [...load('rbac.yaml'), ...load('orchestrator.yaml')];
  const role = docs.find((d) => d.kind === 'Role')!;

  it('holds only objects the published schemas accept, and the kustomization names its files', () => {
    expect(docs.map((d) => d.kind).sort()).toEqual([
      'Deployment',
      'Role',
      'RoleBinding',
      'Service',
      'ServiceAccount',
    ]);
    for (const d of docs) new MODELS[d.kind]!(d as never).validate();
    const k = load('kustomization.yaml')[0]!;
    expect(k.resources).toEqual(['rbac.yaml', 'orchestrator.yaml']);
  });

  it('grants no way into a pod, and nothing by wildcard', () => {
    for (const r of role.rules!) {
      expect(r.resources.filter((x) => /^pods\/(exec|attach|portforward)$/.test(x))).toEqual([]);
      expect([...r.resources, ...r.verbs, ...r.apiGroups]).not.toContain('*');
    }
  });

  it('grants every call KubernetesBottles makes: launch, watch, freeze, resume, list, destroy', async () => {
    api = await FakeKubernetesApi.start({ check: publishedSchemas });
    const b = new KubernetesBottles({ kubeConfig: kubeConfigFor(api.url), namespace: 'bb' });
    const spec = {
      slug: 'rbac-1',
      agent: { image: 'a', command: ['a'] },
      gate: { image: 'g', command: ['g'] },
      secrets: { token: 't' },
    };
    await b.launch(spec);
    await b.freeze('rbac-1');
    await b.resume(spec);
    await b.list();
    await b.destroy('rbac-1');
    const needed = new Set<string>();
    for (const c of api.calls) {
      const m = /^\/(?:api\/v1|apis\/([^/]+)\/v1)\/namespaces\/[^/]+\/([^/]+)(\/[^/]+)?$/.exec(
        c.path,
      )!;
      const [group, resource, one] = [m[1] ?? '', m[2]!, m[3]];
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
});
