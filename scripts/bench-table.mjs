// Print every benchmark result in bench/results as one table (after `pnpm bench`).
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = join(import.meta.dirname, '..', 'bench', 'results');
const rows = readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')));
if (rows.length === 0) {
  console.log('no benchmark results in bench/results');
  process.exit(0);
}
const head = ['name', 'metric', 'ours', 'baseline', 'ratio', 'target', 'pass'];
const body = rows.map((r) =>
  [r.name, r.metric, r.ours, r.baseline, r.ratio, r.target, r.pass ? 'yes' : 'NO'].map(String),
);
const w = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
const fmt = (c) => c.map((x, i) => x.padEnd(w[i])).join('  ');
console.log(`\nAll benchmarks (${rows.length}):`);
console.log(fmt(head));
console.log(w.map((n) => '-'.repeat(n)).join('  '));
for (const b of body) console.log(fmt(b));
const missed = rows.filter((r) => !r.pass).map((r) => r.name);
if (missed.length > 0) {
  console.error(
    `\nmissed ${missed.length === 1 ? 'its goal' : 'their goals'}: ${missed.join(', ')}`,
  );
  process.exit(1);
}
