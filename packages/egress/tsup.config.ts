import { packageBuild } from '@bb/tooling/tsup';
import { defineConfig } from 'tsup';

export default defineConfig([
  packageBuild({ index: 'src/index.ts' }),
  // Single files that run with nothing but node: the proxies beside a bottle, the bridge inside it.
  {
    entry: { 'bb-egress': 'src/proxies-bin.ts', 'bb-bridge': 'src/bridge-bin.ts' },
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
