// Add up every package's vitest JSON report (test-artifacts/vitest/*.json) and print
// one closing line: "tests: N passed, N failed, N skipped". Exits 1 if any failed,
// if a package's report is missing, or if no test ran at all.
//
// With BB_REQUIRE_DOCKER=1 (CI), a skipped test fails the run too, whatever it
// waited for (root, Docker, PostgreSQL, tmux, Chromium, a disk it could mount),
// unless `.ci/allowed-skips.json` names it with the reason it can never run.
// BB_TEST_REPORTS points at another report directory (this script's own test).
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
const dir = process.env.BB_TEST_REPORTS ?? join(root, 'test-artifacts', 'vitest');
const requireAll = process.env.BB_REQUIRE_DOCKER === '1';
const allowedFile = process.env.BB_ALLOWED_SKIPS ?? join(root, '.ci', 'allowed-skips.json');
/** @type {Array<{ test: string; why: string }>} */
const allowed = existsSync(allowedFile) ? JSON.parse(readFileSync(allowedFile, 'utf8')) : [];
const expected = process.argv.slice(2);
let passed = 0;
let failed = 0;
let skipped = 0;
const rows = [];
const refused = [];
const failures = [];
const files = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.json')) : [];
for (const f of files) {
  const r = JSON.parse(readFileSync(join(dir, f), 'utf8'));
  const p = r.numPassedTests ?? 0;
  const x = r.numFailedTests ?? 0;
  const s = (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0);
  passed += p;
  failed += x;
  skipped += s;
  rows.push(`  ${f.replace(/\.json$/, '').padEnd(16)} ${p} passed, ${x} failed, ${s} skipped`);
  for (const file of r.testResults ?? [])
    for (const t of file.assertionResults ?? []) {
      if (t.status === 'failed') {
        // The test's name, its file and the first lines of why: a CI log that shows only
        // its end still says what broke.
        const why = (t.failureMessages ?? [])
          .join('\n')
          .split('\n')
          .filter((l) => l.trim())
          .slice(0, 4)
          .map((l) => `      ${l.trim().slice(0, 300)}`)
          .join('\n');
        const where = (file.name ?? '').replace(`${root}/`, '');
        failures.push(`  ${where}: ${t.fullName} (${Math.round(t.duration ?? 0)} ms)\n${why}`);
        continue;
      }
      if (t.status === 'passed') continue;
      if (allowed.some((a) => a.test === t.fullName)) continue;
      refused.push(`  ${f.replace(/\.json$/, '')}: ${t.fullName}`);
    }
}
const missing = expected.filter((name) => !files.includes(`${name}.json`));
console.log('\nTest results by package:');
for (const r of rows) console.log(r);
for (const m of missing) console.log(`  ${m.padEnd(16)} NO REPORT (its tests did not run)`);
if (failures.length > 0) {
  console.log(`\n${failures.length} test(s) failed:`);
  for (const f of failures) console.log(f);
}
if (requireAll && refused.length > 0) {
  console.log(
    `\n${refused.length} test(s) skipped where every test must run (BB_REQUIRE_DOCKER=1). Make what they need available, or name them in .ci/allowed-skips.json with the reason they can never run here:`,
  );
  for (const r of refused) console.log(r);
}
console.log(`tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);
const bad = failed > 0 || missing.length > 0 || passed === 0 || (requireAll && refused.length > 0);
process.exit(bad ? 1 : 0);
