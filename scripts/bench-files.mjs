// A package's `bench` script: run each benchmark file given, one after another, every
// one of them even when an earlier one failed or missed its goal (one miss must not
// leave the package's other figures unmeasured); exit non-zero if any did.
//
//   node ../../scripts/bench-files.mjs bench/a.bench.ts bench/b.bench.ts
import { spawnSync } from 'node:child_process';

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('bench-files: name the benchmark files to run');
  process.exit(2);
}
const failed = files.filter((f) => {
  const start = Date.now();
  const { status } = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--conditions=@bb/source', f],
    {
      stdio: 'inherit',
    },
  );
  console.log(
    `bench-files: ${f} ${status === 0 ? 'done' : 'FAILED'} in ${((Date.now() - start) / 1000).toFixed(1)} s`,
  );
  return status !== 0;
});
if (failed.length > 0) console.error(`bench-files: failed or missed a goal: ${failed.join(', ')}`);
process.exit(failed.length > 0 ? 1 : 0);
