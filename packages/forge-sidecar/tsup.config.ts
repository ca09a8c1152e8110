import { bundleBuild, packageBuild } from '@bb/tooling/tsup';
import { defineConfig } from 'tsup';

export default defineConfig([
  packageBuild({ index: 'src/index.ts', mcp: 'src/mcp-bridge.ts' }),
  bundleBuild({
    sidecar: 'src/sidecar-bin.ts',
    'bb-forge': 'src/bb-forge-bin.ts',
    'bb-forge-mcp': 'src/mcp-bin.ts',
  }),
]);
