import { bundleBuild, packageBuild } from '@bb/tooling/tsup';
import { defineConfig } from 'tsup';

export default defineConfig([
  packageBuild({ index: 'src/index.ts', testing: 'src/testing.ts' }, { external: ['vitest'] }),
  // Mounted into bottles: the script agent, the gate (forge sidecar, supervise
  // sidecar and proxies in one process) and the waiter (a warm agent container's).
  bundleBuild({
    'script-agent': 'src/providers/script-agent-bin.ts',
    'bb-gate': 'src/bottle/gate-bin.ts',
    'bb-waiter': 'src/bottle/waiter-bin.ts',
  }),
]);
