/**
 * "No change the merge does not need": the agent's result with the paths it changed
 * beyond the merge's conflicts put back as the automatic merge has them. When the
 * fork's tests pass on that too, those changes were not needed to merge, and forklift
 * proposes none of them (they may as well break what no test covers).
 */
import { rmSync } from 'node:fs';
import { runGit, wallGitEnv } from '@bb/wall';
import { unquotePath } from './verify';
import { FORKLIFT_IDENTITY } from './verify-repo';

/** A commit of `merged` with `paths` (as git quotes them) taken from `autoTree`; its parent is `merged`. */
export async function withoutBeyond(o: {
  gitDir: string;
  merged: string;
  autoTree: string;
  paths: string[];
  /** A scratch index file of the host's. */
  index: string;
}): Promise<string> {
  const git = (args: string[]) =>
    runGit(['--git-dir', o.gitDir, ...args], {
      env: wallGitEnv({ env: { GIT_INDEX_FILE: o.index } }),
      timeoutMs: 300_000,
    });
  try {
    await git(['read-tree', o.merged]);
    for (const quoted of o.paths) {
      const path = unquotePath(quoted);
      const entry = (await git(['ls-tree', '-z', o.autoTree, '--', `:(literal)${path}`]))
        .split('\0')
        .find(Boolean);
      if (entry) {
        const [mode, , blob] = entry.split('\t')[0]!.split(' ');
        await git(['update-index', '--add', '--cacheinfo', `${mode},${blob},${path}`]);
      } else
        await git(['rm', '--cached', '--quiet', '--ignore-unmatch', '--', `:(literal)${path}`]);
    }
    const tree = (await git(['write-tree'])).trim();
    return (
      await runGit(
        [
          '--git-dir',
          o.gitDir,
          'commit-tree',
          tree,
          '-p',
          o.merged,
          '-m',
          'the agent result without its changes beyond the merge',
        ],
        {
          env: { ...wallGitEnv(), ...FORKLIFT_IDENTITY },
          timeoutMs: 300_000,
        },
      )
    ).trim();
  } finally {
    rmSync(o.index, { force: true });
  }
}
