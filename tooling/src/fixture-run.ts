/**
 * @module
 * Run one fixture test file in a child vitest and report which tests failed. Used
 * to prove that a conformance suite fails on a deliberately broken implementation.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';

export interface FixtureRun {
  exitCode: number;
  passed: string[];
  failed: string[];
  skipped: string[];
}

/**
 * Where a fixture is: a URL (`new URL('fixtures/x.fixture.ts', import.meta.url)`)
 * or a path. Its package is the nearest folder above it with a `package.json`.
 */
export type FixtureFile = URL | string;

function locate(fixture: FixtureFile): { packageDir: string; file: string } {
  const path = fixture instanceof URL ? fileURLToPath(fixture) : fixture;
  let dir = dirname(path);
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error(`no package.json above the fixture ${path}`);
    dir = up;
  }
  return { packageDir: dir, file: relative(dir, path) };
}

export function runFixtureSuite(fixture: FixtureFile): FixtureRun {
  const { packageDir, file } = locate(fixture);
  const require = createRequire(join(packageDir, 'package.json'));
  const vitestBin = join(require.resolve('vitest/package.json'), '..', 'vitest.mjs');
  const out = mkdtempSync(join(tmpdir(), 'bb-fixture-'));
  const report = join(out, 'report.json');
  try {
    const res = spawnSync(
      process.execPath,
      [vitestBin, 'run', file, '--reporter=json', `--outputFile=${report}`],
      {
        cwd: packageDir,
        env: {
          ...process.env,
          BB_FIXTURE_RUN: '1',
          VITEST: undefined,
          VITEST_POOL_ID: undefined,
          VITEST_WORKER_ID: undefined,
        } as NodeJS.ProcessEnv,
        encoding: 'utf8',
        timeout: 120_000,
      },
    );
    const json = JSON.parse(readFileSync(report, 'utf8')) as {
      testResults: Array<{
        assertionResults: Array<{ title: string; fullName: string; status: string }>;
      }>;
    };
    const all = json.testResults.flatMap((f) => f.assertionResults);
    return {
      exitCode: res.status ?? -1,
      passed: all.filter((a) => a.status === 'passed').map((a) => a.title),
      failed: all.filter((a) => a.status === 'failed').map((a) => a.title),
      skipped: all
        .filter((a) => a.status === 'skipped' || a.status === 'pending')
        .map((a) => a.title),
    };
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

/**
 * Run a fixture suite and expect it to fail, with these tests among its
 * failures (`atLeast`) or exactly these, and these among its passes (what the
 * broken build does right still passes: the suite does not fail blindly).
 * The run, for further checks.
 */
export function expectFixtureFails(
  fixture: FixtureFile,
  want: { failed: string[]; atLeast?: boolean; passed?: string[] },
): FixtureRun {
  const run = runFixtureSuite(fixture);
  expect(run.exitCode, `${String(fixture)} must fail`).not.toBe(0);
  if (want.atLeast) expect(run.failed).toEqual(expect.arrayContaining(want.failed));
  else expect(run.failed).toEqual(want.failed);
  if (want.passed) expect(run.passed).toEqual(expect.arrayContaining(want.passed));
  return run;
}
