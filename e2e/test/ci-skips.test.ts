// CI refuses a silent skip: scripts/test-summary.mjs, which ends `npm test`, fails
// under BB_REQUIRE_DOCKER=1 when any test skipped (whatever it waited for) unless
// .ci/allowed-skips.json names it with a reason.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

const script = join(import.meta.dirname, '..', '..', 'scripts', 'test-summary.mjs');
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function summary(
  env: Record<string, string>,
  allowed: unknown[] = [],
  failed: Array<{ fullName: string; failureMessages: string[] }> = [],
) {
  const dir = mkdtempSync(join(tmpdir(), 'bb-skips-'));
  dirs.push(dir);
  const reports = join(dir, 'reports');
  spawnSync('mkdir', ['-p', reports]);
  const skippedName = 'red team: a rebuild is bounded (skipped: needs root)';
  writeFileSync(
    join(reports, 'e2e.json'),
    JSON.stringify({
      numPassedTests: 1,
      numFailedTests: failed.length,
      numPendingTests: 1,
      numTodoTests: 0,
      testResults: [
        {
          name: 'build.test.ts',
          assertionResults: [
            { fullName: 'runs', status: 'passed' },
            { fullName: skippedName, status: 'skipped' },
            ...failed.map((f) => ({ ...f, status: 'failed', duration: 31000 })),
          ],
        },
      ],
    }),
  );
  writeFileSync(join(dir, 'allowed.json'), JSON.stringify(allowed));
  const r = spawnSync(process.execPath, [script, 'e2e'], {
    env: {
      PATH: process.env['PATH'] ?? '',
      BB_TEST_REPORTS: reports,
      BB_ALLOWED_SKIPS: join(dir, 'allowed.json'),
      ...env,
    },
    encoding: 'utf8',
  });
  return { code: r.status, out: r.stdout, skippedName };
}

describe('the test summary', () => {
  it('fails a CI run in which a test skipped, naming it', () => {
    const r = summary({ BB_REQUIRE_DOCKER: '1' });
    expect(r.code).toBe(1);
    expect(r.out).toContain(r.skippedName);
    expect(r.out).toContain('.ci/allowed-skips.json');
  });

  it('lets a skip pass where it is allowed: off CI, or named with a reason', () => {
    expect(summary({}).code).toBe(0);
    const named = summary({ BB_REQUIRE_DOCKER: '1' }, [
      { test: 'red team: a rebuild is bounded (skipped: needs root)', why: 'test' },
    ]);
    expect(named.code).toBe(0);
  });

  it('names each failed test with the start of its failure, so a log cut to its end says what broke', () => {
    const r = summary(
      {},
      [],
      [
        {
          fullName: 'a killed turn is recorded once',
          failureMessages: [
            'Error: Test timed out in 30000ms.\n    at somewhere (kill.test.ts:1:1)',
          ],
        },
      ],
    );
    expect(r.code).toBe(1);
    expect(r.out).toContain('1 test(s) failed:');
    expect(r.out).toContain('build.test.ts: a killed turn is recorded once (31000 ms)');
    expect(r.out).toContain('Error: Test timed out in 30000ms.');
    // The summary's own line stays last.
    expect(r.out.trim().split('\n').at(-1)).toBe('tests: 1 passed, 1 failed, 1 skipped');
  });
});
