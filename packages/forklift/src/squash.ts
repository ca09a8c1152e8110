/**
 * A sync PR merged without its history (squash or rebase) leaves upstream's commits
 * out of the fork's history, so the next merge would meet them again. forklift reads
 * the PR's own head as the forge keeps it (`refs/pull/<n>/head`, whatever the API says
 * of its branch now), and when that head is not in the fork's branch, records the
 * upstream commit it held as merged: a commit with the fork's tree and that upstream
 * commit as second parent. Only when it is provably a no-op: merging that upstream
 * commit into the fork's branch changes no file.
 */
import type { Forge, PullRequest } from '@bb/forge';
import { forgeGitEnv } from '@bb/forge-sidecar';
import { runGit, wallGitEnv } from '@bb/wall';
import { short } from './verify-repo';

export interface SquashInput {
  pr: PullRequest;
  forge: Forge;
  /** forklift's verification repository (holds both sides' histories). */
  verify: string;
  branch: string;
  published: string;
  upstream: string;
  commitTree: (tree: string, parents: string[], message: string) => Promise<string>;
}

export type SquashFinding =
  | { kind: 'none' }
  | { kind: 'recorded'; commit: string; upstream: string }
  | { kind: 'unrecordable'; upstream: string; why: string };

export async function recordSquash(o: SquashInput): Promise<SquashFinding> {
  const git = (args: string[]) =>
    runGit(['--git-dir', o.verify, ...args], { env: wallGitEnv(), timeoutMs: 600_000 });
  const ancestor = (a: string, b: string) =>
    git(['merge-base', '--is-ancestor', a, b]).then(
      () => true,
      () => false,
    );
  const remote = o.forge.gitRemote();
  if (!remote) throw new Error('the forge gives no git remote');
  // The forge keeps a PR's head after its branch is gone or moved on (refs/pull/<n>/head).
  await runGit(
    [
      '--git-dir',
      o.verify,
      'fetch',
      '--quiet',
      '--no-tags',
      remote.url,
      `+refs/pull/${o.pr.number}/head:refs/bb/squashed`,
    ],
    { env: forgeGitEnv(remote), timeoutMs: 600_000 },
  );
  const head = (await git(['rev-parse', '--verify', 'refs/bb/squashed^{commit}'])).trim();
  if (await ancestor(head, o.published)) return { kind: 'none' };
  // The upstream commit it proposed: what it shares with upstream now.
  const took = (await git(['merge-base', head, o.upstream]).catch(() => '')).trim();
  if (!took || (await ancestor(took, o.published))) return { kind: 'none' };
  // Recorded only when merging it changes nothing: its changes are all in the branch already.
  const tree = (await git(['rev-parse', `${o.published}^{tree}`])).trim();
  const merged = await git(['merge-tree', '--write-tree', o.published, took]).then(
    (out) => out.split('\n')[0]!.trim(),
    () => undefined,
  );
  if (merged !== tree)
    return {
      kind: 'unrecordable',
      upstream: took,
      why: merged
        ? `merging upstream ${short(took)} into ${o.branch} would still change files`
        : `upstream ${short(took)} conflicts with ${o.branch}`,
    };
  const commit = await o.commitTree(
    tree,
    [o.published, took],
    `Record upstream ${short(took)} as merged (PR #${o.pr.number} was merged without its history)`,
  );
  return { kind: 'recorded', commit, upstream: took };
}
