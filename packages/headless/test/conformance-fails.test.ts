import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runFixtureSuite } from '@bb/tooling/fixture-run';
import { describe, expect, it } from 'vitest';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..');

describe('describeBackendConformance', () => {
  it('fails on a deliberately broken backend', () => {
    const run = runFixtureSuite(pkg, 'test/fixtures/broken-backend.fixture.ts');
    expect(run.exitCode).not.toBe(0);
    expect(run.failed).toEqual(
      expect.arrayContaining([
        'runs a command and reports its exit code',
        'labels bottles and lists them by label, with the version label added',
        'destroy removes the bottle and is idempotent; missing bottles are NOT_FOUND',
      ]),
    );
    expect(run.passed).toContain('captures stdout and stderr, and passes the environment');
  });
});
