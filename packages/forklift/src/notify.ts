/**
 * Telling people: a run that leaves the fork behind opens (or updates) one issue on
 * the fork saying why, and the next run that syncs closes it. The issue is found again
 * by its title and its author (the token's user), so a lost state directory loses
 * nothing; its body also records what the run saw (upstream and FORK.md), so an
 * unchanged trouble is not retried night after night.
 */
import { errorMessage } from '@bb/errors';
import type { Forge } from '@bb/forge';
import { fenced, plain } from './propose';

export const troubleTitle = (branch: string) =>
  `forklift: syncing ${branch} with upstream needs a person`;

export interface TroubleIssue {
  number: number;
  url: string;
  /** The upstream commit and FORK.md blob the issue was written for, as its body says. */
  upstream?: string | undefined;
  forkMd?: string | undefined;
}

const UPSTREAM_LINE = /^- upstream commit: `([0-9a-f]{40,64})`$/m;
const FORKMD_LINE = /^- FORK\.md: `([0-9a-f]{40,64}|none)`$/m;

/** The open trouble issue forklift opened for `branch`, if any. */
export async function findTrouble(forge: Forge, branch: string): Promise<TroubleIssue | undefined> {
  const me = await forge.whoami();
  const issue = (await forge.listOpenIssues()).find(
    (i) => i.title === troubleTitle(branch) && i.author.login === me,
  );
  if (!issue) return undefined;
  // Only the host's lines, which come before any fenced text (the agent's words are in fences).
  const own = issue.body.split(/^`{3,}/m)[0]!;
  const forkMd = FORKMD_LINE.exec(own)?.[1];
  return {
    number: issue.number,
    url: issue.url,
    upstream: UPSTREAM_LINE.exec(own)?.[1],
    forkMd: forkMd === 'none' ? '' : forkMd,
  };
}

export interface TroubleReport {
  branch: string;
  outcome: string;
  detail: string;
  upstream: string;
  fork: string;
  forkMd: string;
  /** The first lines of STUCK.md (the agent's words: shown as text, never rendered). */
  stuck?: string | undefined;
  /** What the operator runs on the host to see more. */
  hint: string;
}

function troubleBody(r: TroubleReport): string {
  return [
    `forklift could not sync \`${r.branch}\` with upstream: **${r.outcome}**.`,
    '',
    `- upstream commit: \`${r.upstream}\``,
    `- fork commit: \`${r.fork}\``,
    `- FORK.md: \`${r.forkMd || 'none'}\``,
    '',
    `forklift tries again when upstream or FORK.md changes (or with \`forklift --force\`), and closes this issue when it syncs. ${r.hint}`,
    ...fenced('What happened:', plain(r.detail)),
    ...(r.stuck ? fenced("The agent's STUCK.md (its words, unverified):", r.stuck) : []),
  ].join('\n');
}

/**
 * Open the trouble issue, or update the open one (with a comment when its upstream
 * moved, so watchers hear of it). Resolves the issue's number, or undefined when the
 * forge could not be told (the run's own result is unchanged by that).
 */
export async function reportTrouble(
  forge: Forge,
  r: TroubleReport,
  warn: (line: string) => void,
): Promise<number | undefined> {
  try {
    const open = await findTrouble(forge, r.branch);
    const body = troubleBody(r);
    if (!open) return (await forge.openIssue({ title: troubleTitle(r.branch), body })).number;
    await forge.updateDescription(open.number, body);
    if (open.upstream !== r.upstream)
      await forge.postComment(
        open.number,
        `Still not synced at upstream \`${r.upstream.slice(0, 12)}\`: ${r.outcome}. The description has the details.`,
      );
    return open.number;
  } catch (err) {
    warn(`could not open or update the trouble issue on the fork: ${errorMessage(err)}`);
    return undefined;
  }
}

/** Close the open trouble issue, pointing at what fixed it. */
export async function clearTrouble(
  forge: Forge,
  branch: string,
  why: string,
  warn: (line: string) => void,
): Promise<void> {
  try {
    const open = await findTrouble(forge, branch);
    if (!open) return;
    await forge.postComment(open.number, why);
    await forge.closeIssue(open.number);
  } catch (err) {
    warn(`could not close the trouble issue on the fork: ${errorMessage(err)}`);
  }
}
