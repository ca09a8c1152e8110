/**
 * What makes forklift idempotent: one sync branch per target branch, the one open
 * sync PR on it, and the last run's result kept in forklift's state directory
 * (recoverable from the forge alone: the PR's branch, or the trouble issue).
 */
import { createHash } from 'node:crypto';
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

/**
 * `$XDG_STATE_HOME/forklift/state/<project>@<branch>-<hash>.json`, beside the runs; the
 * hash of the fork's own URL keeps two forks of the same name on two forges apart.
 */
export function statePath(runs: string, project: string, branch: string, forkUrl: string): string {
  const id = createHash('sha256').update(forkUrl).digest('hex').slice(0, 10);
  return join(dirname(runs), 'state', `${project}@${branch.replace(/\//g, '%2F')}-${id}.json`);
}

export const isSha = (s: unknown): s is string =>
  typeof s === 'string' && /^[0-9a-f]{40}([0-9a-f]{24})?$/.test(s);

/**
 * The commit forklift last pushed to the sync branch: kept in the state, or (the state
 * lost) the `result:` line forklift wrote into the open sync PR's description.
 */
export function ownHead(
  state: SyncState | undefined,
  open: PullRequest | undefined,
): string | undefined {
  if (state?.head && (!open || state.pr === undefined || state.pr === open.number))
    return state.head;
  const said = open && /^- result: `([0-9a-f]{40,64})`$/m.exec(open.body)?.[1];
  return isSha(said) ? said : undefined;
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
    // forklift's own PRs only: the token's user opened every one of them.
    const me = await forge.whoami().catch(() => undefined);
    const prs = (await forge.findPrs({ head, base, state: 'all' })).filter(
      (p) => (!me || p.author.login === me) && isSha(p.head.sha),
    );
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
