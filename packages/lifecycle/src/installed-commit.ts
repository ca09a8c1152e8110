import { execFileSync } from 'node:child_process';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { minimalEnv } from '@bb/wall';

const here = dirname(fileURLToPath(import.meta.url));

/** The commit of the installed bot-bottle when it runs from a git checkout, else null. */
export function installedCommit(dir: string = here): string | null {
  try {
    return execFileSync('git', ['-C', dir, 'rev-parse', 'HEAD'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 5000,
      // Never the orchestrator's environment (its token, secrets) in a child.
      env: minimalEnv(),
    }).trim();
  } catch {
    return null;
  }
}
