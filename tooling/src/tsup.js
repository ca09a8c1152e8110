/**
 * @module
 * The shared tsup preset: ESM only, Node 20, declarations, code splitting on so each
 * error class exists once however many entries import it.
 */

/** @param {Record<string, string>} entry @param {import('tsup').Options} [extra] */
export function packageBuild(entry, extra = {}) {
  return {
    entry,
    format: ['esm'],
    target: 'node20',
    platform: 'node',
    dts: true,
    sourcemap: true,
    clean: true,
    splitting: true,
    treeshake: true,
    ...extra,
  };
}

/**
 * Self-contained single files (every dependency inlined) that run with nothing
 * but node, e.g. inside a bottle. Entries map an output name to a source file;
 * outputs are `dist/bundle/<name>.mjs`.
 * @param {Record<string, string>} entry
 */
export function bundleBuild(entry) {
  return {
    entry,
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
    // CommonJS dependencies inlined into ESM need a real require().
    banner: {
      js: "import { createRequire as __bbCreateRequire } from 'node:module'; const require = __bbCreateRequire(import.meta.url);",
    },
    esbuildOptions(options) {
      // Workspace packages are read from their sources, module by module, so what an
      // entry does not use is dropped; whitespace and syntax are minified (names are
      // kept, so stack traces stay readable). Both shorten start-up inside a bottle.
      options.conditions = ['@bb/source'];
      options.minifyWhitespace = true;
      options.minifySyntax = true;
    },
  };
}
