/**
 * Bringing a resumed agent's checkout up to date with its PR branch as the
 * forge has it (a person may have pushed to it), across the wall: the sidecar
 * fetches the branch with its token into its own repository (never the
 * agent's), bundles what came after the launch's base, and leaves the bundle
 * in its socket directory, which the agent may read but not write. Inside the
 * bottle the agent's own git takes it in before the agent starts.
 */
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { errorMessage } from '@bb/errors';
import type { GitRemote } from '@bb/forge';
import { ensureBareRepo, runGit, wallGitEnv, withAlternates } from '@bb/wall';
import { forgeGitEnv } from './git-push';

/** The bundle's file name, next to the sidecar's socket; `<name>.done` says the attempt is over. */
export const PR_BUNDLE = 'pr-branch.bundle';

export interface PrBundleOptions {
  /** The sidecar's own bare repository. */
  repo: string;
  remote: GitRemote;
  branch: string;
  /** The launch's base commit: the checkout has it, so the bundle starts after it. */
  base?: string | undefined;
  /** Where the bundle goes (`<socket dir>/pr-branch.bundle`). */
  out: string;
  /** Object stores `repo` borrows, read-only (the repository's mirror, which holds the base). */
  alternates?: string[];
  /** @default 120000 */
  timeoutMs?: number;
}

/**
 * Fetch `branch` and bundle it for the agent; then write `<out>.done` whatever
 * happened. Returns what happened, for the log; never throws (a forge that
 * does not answer leaves the checkout as it was, and the turn goes on).
 */
export async function bundlePrBranch(o: PrBundleOptions): Promise<string> {
  const timeoutMs = o.timeoutMs ?? 120_000;
  const ref = `refs/heads/${o.branch}`;
  const local = `refs/bb/forge/${o.branch}`;
  let said: string;
  try {
    ensureBareRepo(o.repo);
    await runGit(
      [`--git-dir=${o.repo}`, 'fetch', '-q', '--no-tags', o.remote.url, `+${ref}:${local}`],
      {
        env: withAlternates(forgeGitEnv(o.remote), o.alternates ?? []),
        timeoutMs,
      },
    );
    const quiet = { env: withAlternates(wallGitEnv(), o.alternates ?? []), timeoutMs };
    const tip = (await runGit([`--git-dir=${o.repo}`, 'rev-parse', local], quiet)).trim();
    const since =
      o.base &&
      (await runGit([`--git-dir=${o.repo}`, 'merge-base', '--is-ancestor', o.base, local], quiet)
        .then(() => true)
        .catch(() => false))
        ? [`^${o.base}`]
        : [];
    if (since.length && tip === o.base) said = `${o.branch} has nothing beyond the launch base`;
    else {
      const tmp = `${o.out}.tmp`;
      rmSync(tmp, { force: true });
      await runGit([`--git-dir=${o.repo}`, 'bundle', 'create', '-q', tmp, local, ...since], quiet);
      renameSync(tmp, o.out);
      said = `${o.branch} at ${tip.slice(0, 12)} is bundled for the checkout`;
    }
  } catch (err) {
    said = `could not bring ${o.branch} up to date from the forge: ${errorMessage(err)}`;
  }
  writeFileSync(`${o.out}.done`, `${said}\n`, { mode: 0o644 });
  return said;
}
