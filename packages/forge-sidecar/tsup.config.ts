import { packageBuild } from '@bb/tooling/tsup';
import { defineConfig } from 'tsup';

export default defineConfig([
  packageBuild({ index: 'src/index.ts' }),
  // Self-contained single files (every dependency inlined) that run with nothing
  // but node, e.g. inside the bottle base image.
  {
    entry: {
      sidecar: 'src/sidecar-bin.ts',
      'bb-forge': 'src/bb-forge-bin.ts',
      'bb-forge-mcp': 'src/mcp-bin.ts',
    },
    outDir: 'dist/bundle',
    format: ['esm'],
    outExtension: () => ({ js: '.mjs' }),
    target: 'node20',
    platform: 'node',
    noExternal: [/.*/],
    splitting: false,
    clean: false,
    dts: false,
    sourcemap: false,
    minify: false,
    // CommonJS dependencies inlined into ESM need a real require().
    banner: {
      js: "import { createRequire as __bbCreateRequire } from 'node:module'; const require = __bbCreateRequire(import.meta.url);",
    },
  },
]);
