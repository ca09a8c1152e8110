import { BbError } from '@bb/errors';
import type { Forge } from '@bb/forge';
import { readFileNoFollow, runGit, wallGitEnv } from '@bb/wall';

/** Push `sha` from a repository of ours to `branch` of the fork, the token in git's environment only. */
export async function push(
  forge: Forge,
  repoDir: string,
  sha: string,
  branch: string,
): Promise<void> {
  const remote = forge.gitRemote();
  if (!remote)
    throw new BbError('INVALID_INPUT', `the ${forge.kind} forge gives forklift no way to push`);
  const scheme = new URL(remote.url).protocol.replace(':', '');
  const config: Array<[string, string]> = [
    // Only the forge's own transport, only for this push.
    [`protocol.${scheme}.allow`, 'always'],
    ...Object.entries(remote.headers).map(
      ([k, v]) => ['http.extraHeader', `${k}: ${v}`] as [string, string],
    ),
  ];
  await runGit(
    ['--git-dir', repoDir, 'push', '--quiet', remote.url, `${sha}:refs/heads/${branch}`],
    {
      env: wallGitEnv({ config }),
      timeoutMs: 600_000,
    },
  );
}

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
  const body = plain(text).trimEnd();
  const fence = '`'.repeat(Math.max(3, ...[...body.matchAll(/`+/g)].map((m) => m[0].length + 1)));
  return ['', heading, '', `${fence}text`, body, fence];
}

/** Text the agent wrote, without the control characters a terminal or a renderer would act on. */
export function plain(text: string): string {
  return text.replace(
    /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069]/g,
    '',
  );
}
