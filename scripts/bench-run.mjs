// `pnpm bench`: build, run every package's benchmarks one at a time, then print, keep and
// judge this run's results (scripts/bench-table.mjs). Exits non-zero when a benchmark
// failed, missed its goal, or wrote no result this run.
//
// `pnpm bench --quick`: a few rounds each (BB_BENCH_QUICK=1), to show every benchmark
// runs and writes its result; goals are not judged and no history is kept (CI runs it).
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { report } from './bench-table.mjs';

const quick = process.argv.includes('--quick');
const unknown = process.argv.slice(2).filter((a) => a !== '--quick');
if (unknown.length > 0) {
  console.error(`pnpm bench: unknown ${unknown.join(' ')}; the only option is --quick`);
  process.exit(2);
}
const since = Date.now();
const env = {
  ...process.env,
  TURBO_TELEMETRY_DISABLED: '1',
  ...(quick ? { BB_BENCH_QUICK: '1' } : {}),
};
const run = (args) =>
  spawnSync('pnpm', ['exec', 'turbo', ...args], { stdio: 'inherit', env }).status;
if (run(['run', 'build', '--output-logs=errors-only']) !== 0) process.exit(1);
const ran = run(['run', 'bench', '--concurrency=1', '--continue']);
const verdict = report({ dir: join(import.meta.dirname, '..', 'bench'), since, quick });
process.exit(ran !== 0 ? 1 : verdict);
