import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadAllYaml } from '@kubernetes/client-node';
import type { PolicyRule } from '../access';

/** The rules of the orchestrator's Role as `deploy/rbac.yaml` ships them (for `FakeClusterOptions.access`). */
export function deployedRoleRules(): PolicyRule[] {
  const here = dirname(fileURLToPath(import.meta.url));
  // From src/testing/ or from the bundle in dist/ alike.
  const file = [
    join(here, '..', '..', 'deploy', 'rbac.yaml'),
    join(here, '..', 'deploy', 'rbac.yaml'),
  ].find((f) => existsSync(f));
  if (!file) throw new Error(`no deploy/rbac.yaml beside ${here}`);
  const docs = loadAllYaml(readFileSync(file, 'utf8')) as Array<{
    kind: string;
    rules?: PolicyRule[];
  }>;
  const role = docs.find((d) => d.kind === 'Role');
  if (!role?.rules) throw new Error(`${file} has no Role with rules`);
  return role.rules;
}
