/**
 * @module
 * The shared vitest preset (plain JS so config loaders can import it unbuilt).
 * Tests read workspace packages through the `@bb/source` export condition, so
 * they run against `src` and never wait for a build.
 */
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig, mergeConfig } from 'vitest/config';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
// Each package's results also go to test-artifacts/vitest/<package>.json, which
// scripts/test-summary.mjs adds up into one closing line.
const report = join(root, 'test-artifacts', 'vitest', `${basename(process.cwd())}.json`);

const conditions = ['@bb/source', 'import', 'module', 'node', 'default'];
// Vitest also hands the SSR conditions to each worker's Node (`--conditions`), where
// they apply to `require` too: with `import` among them, a CommonJS package's
// `require` of a dual package (pg → pg-pool) would load its ES module wrapper and
// break. Vite adds `import`/`require` by the kind of each import by itself.
const ssrConditions = ['@bb/source', 'node', 'default'];

export const preset = defineConfig({
  resolve: { conditions },
  ssr: { resolve: { conditions: ssrConditions, externalConditions: ssrConditions } },
  test: {
    environment: 'node',
    // Fixture suites (run by tests that prove a conformance suite fails on a broken
    // implementation) are only collected when a test asks for them.
    include: process.env.BB_FIXTURE_RUN
      ? ['test/fixtures/**/*.fixture.ts']
      : ['src/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    reporters: process.env.BB_FIXTURE_RUN ? ['default'] : ['default', 'json'],
    outputFile: { json: report },
    // Two cores: one worker per core and no more.
    maxWorkers: 2,
  },
});

/** Extend the preset with package-specific options. */
export function definePackageConfig(extra = {}) {
  return mergeConfig(preset, extra);
}
