/**
 * @module
 * Run one fixture test file in a child vitest and report which tests failed. Used
 * to prove that a conformance suite fails on a deliberately broken implementation.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { probeDocker } from './docker';

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

/** What one fixture's run must show, as `fixtures/expected.json` declares it. */
export interface FixtureExpectation {
  /** What the test says the suite catches. */
  title: string;
  /** Tests that must fail: exactly these (in any order), or at least these with `atLeast`. */
  failed: string[];
  atLeast?: boolean;
  /** Tests that must pass (what the broken build does right: the suite does not fail blindly). */
  passed?: string[];
  /** Tests that must be skipped (and not passed); with these the run exits 0. */
  skipped?: string[];
  /** Runs only where a Docker engine answers (skipped visibly elsewhere). */
  docker?: boolean;
  /** @default 120000 */
  timeoutMs?: number;
}

const ExpectationSchema = z.record(
  z.string().regex(/\.fixture\.ts$/),
  z
    .object({
      title: z.string().min(1),
      failed: z.array(z.string()),
      atLeast: z.boolean().optional(),
      passed: z.array(z.string()).optional(),
      skipped: z.array(z.string()).optional(),
      docker: z.boolean().optional(),
      timeoutMs: z.number().int().positive().optional(),
    })
    .strict(),
);

/**
 * One test per fixture of the folder `dir` (a URL ending in `/`): each
 * `*.fixture.ts` runs in a child vitest and must show what `dir/expected.json`
 * declares for it. A fixture with no expectation, or an expectation with no
 * fixture, fails the file: every deliberately broken build is checked.
 */
export async function describeFixtures(dir: URL): Promise<void> {
  const folder = fileURLToPath(dir);
  const expected = ExpectationSchema.parse(
    JSON.parse(readFileSync(join(folder, 'expected.json'), 'utf8')),
  );
  const fixtures = readdirSync(folder).filter((f) => f.endsWith('.fixture.ts'));
  const docker = Object.values(expected).some((e) => e.docker) ? await probeDocker() : undefined;
  describe(`the fixtures in ${relative(process.cwd(), folder) || '.'}`, () => {
    it('each has its expectation, and each expectation its fixture', () => {
      expect(Object.keys(expected).sort()).toEqual(fixtures.sort());
    });
    for (const [file, want] of Object.entries(expected)) {
      const skip = want.docker === true && !docker?.ok;
      it.skipIf(skip)(
        `${file}: ${want.title}`,
        () => {
          const run = runFixtureSuite(new URL(file, dir));
          if (want.skipped) {
            expect(run.exitCode, `${file} must pass what it can check`).toBe(0);
            expect(run.skipped).toEqual(expect.arrayContaining(want.skipped));
            for (const t of want.skipped) expect(run.passed).not.toContain(t);
          } else expect(run.exitCode, `${file} must fail`).not.toBe(0);
          if (want.atLeast) expect(run.failed).toEqual(expect.arrayContaining(want.failed));
          else expect([...run.failed].sort()).toEqual([...want.failed].sort());
          if (want.passed) expect(run.passed).toEqual(expect.arrayContaining(want.passed));
        },
        want.timeoutMs ?? 120_000,
      );
    }
  });
}
