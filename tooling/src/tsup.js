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
