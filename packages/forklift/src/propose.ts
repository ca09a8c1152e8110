import { BbError } from '@bb/errors';
import type { Forge } from '@bb/forge';
import { forgeGitEnv } from '@bb/forge-sidecar';
import { markdownFence, readFileNoFollow, runGit, UNPRINTABLE } from '@bb/wall';

/** What the agent says it ran (harness-state/report.md), as plain text lines for the PR. */
export function readReport(harness: string): string[] {
  try {
    const text = readFileNoFollow(harness, 'report.md', { maxBytes: 16 * 1024 })?.toString('utf8');
    if (!text) return ['- the agent left no report (harness-state/report.md)'];
    // Shown as text, never as Markdown: no link, image, mention or "Closes #n" of the agent's acts.
    return fenced("The agent's report (unverified):", text.split('\n').slice(0, 60).join('\n'));
  } catch {
    return ["- the agent's report could not be read"];
  }
}

/** `text` under a heading, in a fence longer than any run of backticks in it: shown, never rendered. */
export function fenced(heading: string, text: string): string[] {
  return ['', heading, '', ...markdownFence(text).split('\n')];
}

/** Text the agent wrote, without the control characters a terminal or a renderer would act on. */
export function plain(text: string): string {
  return text.replace(UNPRINTABLE, '');
}

/**
 * Push `sha` to the sync branch over what the forge has there now, only when that is
 * nothing or `mayReplace` says it is forklift's (its own last push, or a commit already
 * merged): someone else's commit there is never overwritten, and neither is a branch
 * that moves between the look and the push (the lease). From a repository of ours, the
 * token in git's environment only.
 */
export async function pushSync(
  forge: Forge,
  repoDir: string,
  sha: string,
  branch: string,
  mayReplace: (tip: string) => Promise<boolean>,
): Promise<void> {
  const remote = forge.gitRemote();
  if (!remote)
    throw new BbError('INVALID_INPUT', `the ${forge.kind} forge gives forklift no way to push`);
  // The forge's own git environment (its transport only, its auth headers, stall limits).
  const env = forgeGitEnv(remote);
  const now =
    (
      await runGit(['--git-dir', repoDir, 'ls-remote', remote.url, `refs/heads/${branch}`], {
        env,
        timeoutMs: 120_000,
      })
    ).split(/\s/)[0] ?? '';
  if (now && now !== sha && !(await mayReplace(now)))
    throw new BbError(
      'CONFLICT',
      `${branch} on the fork is at ${now.slice(0, 12)}, which forklift did not push: forklift replaces only its own pushes. Delete that branch (or close its pull request and delete it) to let forklift use it again`,
    );
  await runGit(
    [
      '--git-dir',
      repoDir,
      'push',
      '--quiet',
      `--force-with-lease=refs/heads/${branch}:${now}`,
      remote.url,
      `${sha}:refs/heads/${branch}`,
    ],
    { env, timeoutMs: 600_000 },
  ).catch((err) => {
    throw new BbError(
      'CONFLICT',
      `the sync branch ${branch} moved while forklift pushed (someone else pushed to it): run forklift again`,
      { cause: err },
    );
  });
}
