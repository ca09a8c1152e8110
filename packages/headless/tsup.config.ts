import { bundleBuild, packageBuild } from '@bb/tooling/tsup';
import { defineConfig } from 'tsup';

export default defineConfig([
  packageBuild({ index: 'src/index.ts', testing: 'src/testing.ts' }, { external: ['vitest'] }),
  // The script agent, mounted into bottles.
  bundleBuild({ 'script-agent': 'src/script-agent-bin.ts' }),
]);
