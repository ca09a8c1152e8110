/** What a run leaves behind besides its result: the sync state, and the fork's trouble issue. */
import type { Forge } from '@bb/forge';
import { clearTrouble, reportTrouble } from './notify';
import type { ForkliftResult } from './run';
import { type SyncState, TROUBLE, writeState } from './sync-state';
import { short } from './verify-repo';

export interface RunRecord {
  forge: Forge;
  branch: string;
  upstream: string;
  /** The fork's published branch. */
  fork: string;
  forkMd: string;
  runDir: string;
  stateFile: string;
  /** Paths of the host's (run directory, checkout, home, state) kept out of what the fork's readers see. */
  hostPaths: Record<string, string>;
  notify: boolean;
  warn: (line: string) => void;
}

/**
 * Record `result`: a synced (or nothing-to-do) run closes the trouble issue and keeps
 * what it proposed; one that left the fork behind opens or updates the issue and keeps
 * what it saw, so it is not retried until upstream or FORK.md changes; an error is
 * reported and retried next time; an unchanged run records nothing.
 */
export async function recordRun(result: ForkliftResult, r: RunRecord): Promise<void> {
  const seen: SyncState = {
    upstream: r.upstream,
    fork: r.fork,
    forkMd: r.forkMd,
    outcome: result.outcome,
    at: result.startedAt,
    runDir: r.runDir,
  };
  if (result.outcome === 'synced' || result.outcome === 'nothing-to-do') {
    if (r.notify)
      await clearTrouble(
        r.forge,
        r.branch,
        result.pr
          ? `Synced at upstream \`${short(r.upstream)}\`: ${result.pr.url}`
          : `Upstream \`${short(r.upstream)}\` is in \`${r.branch}\` now: nothing is left to sync.`,
        r.warn,
      );
    writeState(r.stateFile, {
      ...seen,
      ...(result.pr ? { pr: result.pr.number } : {}),
      ...(result.merged ? { head: result.merged } : {}),
    });
    return;
  }
  if (result.outcome === 'unchanged') return;
  const issue = r.notify
    ? await reportTrouble(
        r.forge,
        {
          branch: r.branch,
          outcome: result.outcome,
          // The host's paths are the operator's business, not the fork's readers'.
          detail: scrub(result.detail, r.hostPaths),
          upstream: r.upstream,
          fork: r.fork,
          forkMd: r.forkMd,
          stuck: result.stuck,
          hint: 'On the host, `forklift runs` lists the runs and where each one kept its files.',
        },
        r.warn,
      )
    : undefined;
  if (issue) result.issue = issue;
  // A failed run is retried every time; one that left the fork behind only when something changed.
  if ((TROUBLE as readonly string[]).includes(result.outcome))
    writeState(r.stateFile, {
      ...seen,
      ...(issue ? { issue } : {}),
      // A partial sync's PR is forklift's own push too.
      ...(result.pr ? { pr: result.pr.number } : {}),
      ...(result.pr && result.merged ? { head: result.merged } : {}),
    });
}

/** `text` with each of the host's paths (longest first) replaced by its name. */
export function scrub(text: string, paths: Record<string, string>): string {
  let out = text;
  for (const [path, name] of Object.entries(paths).sort((a, b) => b[0].length - a[0].length))
    if (path.length > 1) out = out.split(path).join(name);
  return out;
}
