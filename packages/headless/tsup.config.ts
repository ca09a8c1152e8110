import { packageBuild } from '@bb/tooling/tsup';
import { defineConfig } from 'tsup';

export default defineConfig([
  packageBuild({ index: 'src/index.ts', testing: 'src/testing.ts' }, { external: ['vitest'] }),
  // The script agent as one self-contained file, mounted into bottles.
  {
    entry: { 'script-agent': 'src/script-agent-bin.ts' },
    outDir: 'dist/bundle',
    format: ['esm'],
    outExtension: () => ({ js: '.mjs' }),
    target: 'node20',
    platform: 'node',
    noExternal: [/.*/],
    splitting: false,
    clean: false,
    dts: false,
    banner: {
      js: "import { createRequire as __bbCreateRequire } from 'node:module'; const require = __bbCreateRequire(import.meta.url);",
    },
  },
]);
