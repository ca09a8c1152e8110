import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ForkliftResult } from './run';

/** Keep a run's result beside it (`<run>/result.json`), for `forklift runs`. */
export function saveResult(dir: string, r: ForkliftResult): void {
  writeFileSync(join(dir, 'result.json'), `${JSON.stringify(r, null, 2)}\n`);
}

/** Past runs, newest first: each run directory's result (runs with no agent keep only their log line). */
export function listRuns(runs: string): Array<ForkliftResult & { dir: string }> {
  if (!existsSync(runs)) return [];
  return readdirSync(runs)
    .sort()
    .reverse()
    .flatMap((name) => {
      const f = join(runs, name, 'result.json');
      try {
        return [
          { ...(JSON.parse(readFileSync(f, 'utf8')) as ForkliftResult), dir: join(runs, name) },
        ];
      } catch {
        return [];
      }
    });
}
