/**
 * Bringing a resumed bottle's workspace up to date with its PR branch as the
 * forge has it (a person may have pushed to it), without ever running git with
 * the token in the agent's repository: the host fetches the branch into a bare
 * repository of its own (outside the bottle), bundles what the workspace lacks,
 * and leaves the bundle in the gate's socket directory, which the agent may
 * read but not write. Inside the bottle, before the agent starts, the agent's
 * own git fetches the bundle into `refs/remotes/pr/<branch>` and fast-forwards
 * the branch when the checkout is clean and has nothing the forge lacks.
 */
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { errorMessage } from '@bb/errors';
import { runGit, wallGitEnv } from '@bb/wall';
import type { BottleMeta, BottlePaths } from './layout';

/** The bundle's name in the socket directory. */
export const PR_BUNDLE = 'pr-branch.bundle';

/**
 * Fetch `meta.branch` from the forge and bundle it for the agent. Returns what
 * happened, for progress; never throws (a forge that does not answer leaves the
 * workspace as it was, and the turn goes on).
 */
export async function bundlePrBranch(
  meta: BottleMeta,
  p: BottlePaths,
  token: string,
  timeoutMs = 120_000,
): Promise<string> {
  const bundle = join(p.sock, PR_BUNDLE);
  rmSync(bundle, { force: true });
  if (!meta.forge?.cloneUrl || meta.forge.pr === undefined) return 'no PR to bring up to date';
  const mirror = join(p.dir, 'pr-mirror.git');
  const scheme = new URL(meta.forge.cloneUrl).protocol.replace(':', '');
  const git = (args: string[], withToken = false) =>
    runGit(args, {
      env: wallGitEnv({
        config: withToken
          ? [
              [`protocol.${scheme}.allow`, 'always'],
              ['http.lowSpeedLimit', '1000'],
              ['http.lowSpeedTime', '30'],
              ['http.extraHeader', `Authorization: token ${token}`],
            ]
          : [],
      }),
      timeoutMs,
    });
  try {
    if (!existsSync(mirror)) await git(['init', '--bare', '-q', mirror]);
    const ref = `refs/heads/${meta.branch}`;
    await git(
      [`--git-dir=${mirror}`, 'fetch', '-q', '--no-tags', meta.forge.cloneUrl, `+${ref}:${ref}`],
      true,
    );
    // Only what came after the launch's base (the workspace has that), when the mirror knows it.
    const base = meta.baseCommit
      ? await git([`--git-dir=${mirror}`, 'merge-base', '--is-ancestor', meta.baseCommit, ref])
          .then(() => [`^${meta.baseCommit}`])
          .catch(() => [])
      : [];
    if (base.length > 0) {
      const tip = (await git([`--git-dir=${mirror}`, 'rev-parse', ref])).trim();
      if (tip === meta.baseCommit) return `${meta.branch} has nothing beyond the launch base`;
    }
    await git([`--git-dir=${mirror}`, 'bundle', 'create', '-q', bundle, ref, ...base]);
    return `${meta.branch} as the forge has it is bundled for the workspace`;
  } catch (err) {
    rmSync(bundle, { force: true });
    return `could not bring ${meta.branch} up to date from the forge: ${errorMessage(err)}`;
  }
}

/**
 * The shell lines that, inside the bottle and as the agent, take the bundle in
 * before the agent starts: `refs/remotes/pr/<branch>` always, the branch itself
 * fast-forwarded when the checkout is clean. Never fails the start.
 */
export function takeBundleScript(): string {
  return [
    'if [ -n "$BB_PR_BUNDLE" ] && [ -f "$BB_PR_BUNDLE" ]; then',
    '  if ! out=$(git -C "$BB_WORKSPACE_DIR" fetch -q --no-tags "$BB_PR_BUNDLE" "+refs/heads/$BB_PR_BRANCH:refs/remotes/pr/$BB_PR_BRANCH" 2>&1); then',
    '    echo "bb: could not take in the PR branch: $out" >&2',
    '  elif [ -n "$(git -C "$BB_WORKSPACE_DIR" status --porcelain --untracked-files=no 2>/dev/null)" ]; then',
    '    echo "bb: the PR branch is at refs/remotes/pr/$BB_PR_BRANCH (the checkout has uncommitted changes)" >&2',
    '  elif ! out=$(git -C "$BB_WORKSPACE_DIR" merge -q --ff-only "refs/remotes/pr/$BB_PR_BRANCH" 2>&1); then',
    '    echo "bb: the PR branch is at refs/remotes/pr/$BB_PR_BRANCH (not a fast-forward: $out)" >&2',
    '  fi',
    'fi',
  ].join('\n');
}
