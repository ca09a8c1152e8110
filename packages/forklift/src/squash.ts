/**
 * A sync PR merged without its history (squash or rebase) leaves upstream's commits
 * out of the fork's history, so the next merge would redo them. forklift records them
 * as merged: a commit with the fork's tree and, as second parent, the upstream commit
 * the merged PR held, made only when the PR's own merge commit is in the fork's
 * branch (so upstream's changes up to there are in it).
 */
import type { Forge, PullRequest } from '@bb/forge';
import { forgeGitEnv } from '@bb/forge-sidecar';
import { runGit, wallGitEnv } from '@bb/wall';

const short = (sha: string) => sha.slice(0, 12);

export interface SquashInput {
  pr: PullRequest;
  forge: Forge;
  /** forklift's verification repository (holds both sides). */
  verify: string;
  branch: string;
  published: string;
  upstream: string;
  /** Ancestry in the operator's checkout (which has the fork's history). */
  ancestor: (a: string, b: string) => Promise<boolean>;
  commitTree: (tree: string, parents: string[], message: string) => Promise<string>;
}

/** The recording commit and the upstream commit it records, or undefined when there is nothing to record. */
export async function recordSquash(
  o: SquashInput,
): Promise<{ commit: string; upstream: string } | undefined> {
  const git = (args: string[]) =>
    runGit(['--git-dir', o.verify, ...args], { env: wallGitEnv(), timeoutMs: 600_000 });
  const remote = o.forge.gitRemote();
  if (!remote) throw new Error('the forge gives no git remote');
  // The forge keeps a PR's head after its branch is gone (refs/pull/<n>/head).
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
  if (head !== o.pr.head.sha)
    throw new Error(`its head is ${short(head)}, the forge said ${short(o.pr.head.sha)}`);
  // The upstream commit it proposed: what it shares with upstream now.
  const took = (await git(['merge-base', head, o.upstream])).trim();
  const inFork = await git(['merge-base', '--is-ancestor', took, o.published]).then(
    () => true,
    () => false,
  );
  if (!took || inFork) return undefined;
  if (!o.pr.mergeCommitSha || !(await o.ancestor(o.pr.mergeCommitSha, o.published)))
    throw new Error(
      `its merge commit ${o.pr.mergeCommitSha ? short(o.pr.mergeCommitSha) : '(unknown)'} is not in ${o.branch}`,
    );
  const tree = (await git(['rev-parse', `${o.published}^{tree}`])).trim();
  const commit = await o.commitTree(
    tree,
    [o.published, took],
    `Record upstream ${short(took)} as merged (PR #${o.pr.number} was squash-merged)`,
  );
  return { commit, upstream: took };
}
