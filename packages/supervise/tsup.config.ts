import { bundleBuild, packageBuild } from '@bb/tooling/tsup';
import { defineConfig } from 'tsup';

export default defineConfig([
  packageBuild(
    { index: 'src/index.ts', testing: 'src/testing/index.ts', mcp: 'src/mcp.ts' },
    { external: ['vitest'] },
  ),
  bundleBuild({
    'supervise-sidecar': 'src/sidecar-bin.ts',
    'bb-supervise': 'src/bb-supervise-bin.ts',
    'bb-supervise-mcp': 'src/mcp-bin.ts',
  }),
]);
