import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runFixtureSuite } from '@bb/tooling/fixture-run';
import { describe, expect, it } from 'vitest';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..');

describe('describeKubernetesIsolation', () => {
  it('fails on a backend that takes shortcuts, test by test', () => {
    const run = runFixtureSuite(pkg, 'test/fixtures/leaky-kubernetes.fixture.ts');
    expect(run.exitCode).not.toBe(0);
    expect(run.failed).toEqual([
      "the agent's pod holds no Secret and no service account token",
      "the agent runs non-root, read-only, with no capabilities, seccomp's default and limits",
      'a network policy lets the agent reach its gate and nothing else',
      'nothing runs in, attaches to or forwards to a pod',
    ]);
  }, 120_000);
});
