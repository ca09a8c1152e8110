import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadAllYaml } from '@kubernetes/client-node';
import type { PolicyRule } from '../access';

/** The objects of one file of `deploy/` (`orchestrator.yaml`, say), as this package ships them. */
export function deployedObjects(file: string): Array<{ kind: string; [k: string]: unknown }> {
  const here = dirname(fileURLToPath(import.meta.url));
  // From src/testing/ or from the bundle in dist/ alike.
  const path = [join(here, '..', '..', 'deploy', file), join(here, '..', 'deploy', file)].find(
    (f) => existsSync(f),
  );
  if (!path) throw new Error(`no deploy/${file} beside ${here}`);
  return loadAllYaml(readFileSync(path, 'utf8')) as Array<{ kind: string }>;
}

/** The rules of the orchestrator's Role as `deploy/rbac.yaml` ships them (for `FakeClusterOptions.access`). */
export function deployedRoleRules(): PolicyRule[] {
  const role = deployedObjects('rbac.yaml').find((d) => d.kind === 'Role') as
    | { rules?: PolicyRule[] }
    | undefined;
  if (!role?.rules) throw new Error('deploy/rbac.yaml has no Role with rules');
  return role.rules;
}
