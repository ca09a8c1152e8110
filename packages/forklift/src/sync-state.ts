/**
 * What makes forklift idempotent: one sync branch per target branch, the one open
 * sync PR on it, and the last run's result kept in forklift's state directory
 * (recoverable from the forge alone: the PR's branch, or the trouble issue).
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { isBbError } from '@bb/errors';
import type { Forge, PullRequest } from '@bb/forge';

/** `forklift/sync` for `main`, `forklift/sync-<branch>` for any other branch. */
export function syncBranchFor(branch: string): string {
  return branch === 'main' ? 'forklift/sync' : `forklift/sync-${branch.replace(/\//g, '-')}`;
}

/** The outcomes that leave the fork behind and are not retried until something changed. */
export const TROUBLE = ['stuck', 'timed-out', 'verification-failed', 'partial'] as const;

/** The last run that decided something, for one fork and target branch. */
export interface SyncState {
  upstream: string;
  fork: string;
  /** FORK.md's blob on the fork's branch, or '' when it has none. */
  forkMd: string;
  outcome: string;
  at: string;
  runDir?: string;
  pr?: number;
  /** The commit the sync branch was pushed at. */
  head?: string;
  issue?: number;
}

/** `$XDG_STATE_HOME/forklift/state/<project>@<branch>.json`, beside the runs. */
export function statePath(runs: string, project: string, branch: string): string {
  return join(dirname(runs), 'state', `${project}@${branch.replace(/\//g, '%2F')}.json`);
}

export function readState(path: string): SyncState | undefined {
  try {
    const s = JSON.parse(readFileSync(path, 'utf8')) as SyncState;
    return typeof s.upstream === 'string' && typeof s.outcome === 'string' ? s : undefined;
  } catch {
    return undefined;
  }
}

/** Written whole (a temporary file renamed over it): a run killed mid-write leaves the old state. */
export function writeState(path: string, s: SyncState): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(s, null, 2)}\n`, { mode: 0o600 });
  renameSync(tmp, path);
}

export interface SyncPrs {
  /** The open sync PR, if any (there is at most one: the forge refuses a second). */
  open?: PullRequest | undefined;
  /** The newest merged one. */
  merged?: PullRequest | undefined;
}

/** The sync branch's PRs into `base`; none when the forge cannot list them (with a warning). */
export async function findSyncPrs(
  forge: Forge,
  head: string,
  base: string,
  warn: (line: string) => void,
): Promise<SyncPrs> {
  try {
    const prs = await forge.findPrs({ head, base, state: 'all' });
    return { open: prs.find((p) => p.state === 'open'), merged: prs.find((p) => p.merged) };
  } catch (err) {
    if (!isBbError(err, 'UNSUPPORTED')) throw err;
    warn(
      `the ${forge.kind} forge cannot list pull requests: forklift cannot find its open sync PR (a second run may fail to open one)`,
    );
    return {};
  }
}

/** The warning for a sync PR merged without its history, and what to do. */
export function squashWarning(pr: PullRequest, upstreamShort: string): string {
  return `PR #${pr.number} was merged without its history (squash or rebase): upstream's commits up to ${upstreamShort} are not in the fork's history, so every later sync would merge them again. forklift records them as merged in this run's PR (the fork's files are left as they are). Merge forklift's PRs with a merge commit ("Create merge commit") to avoid this.`;
}
