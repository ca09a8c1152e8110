// Add up every package's vitest JSON report (test-artifacts/vitest/*.json) and print
// one closing line: "tests: N passed, N failed, N skipped". Exits 1 if any failed,
// if a package's report is missing, or if no test ran at all.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = join(import.meta.dirname, '..', 'test-artifacts', 'vitest');
const expected = process.argv.slice(2);
let passed = 0;
let failed = 0;
let skipped = 0;
const rows = [];
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
}
const missing = expected.filter((name) => !files.includes(`${name}.json`));
console.log('\nTest results by package:');
for (const r of rows) console.log(r);
for (const m of missing) console.log(`  ${m.padEnd(16)} NO REPORT (its tests did not run)`);
console.log(`tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 || missing.length > 0 || passed === 0 ? 1 : 0);
