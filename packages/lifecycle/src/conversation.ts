/**
 * The forge conversation, as the orchestrator hears it: who may drive an agent,
 * and what a person's comment, review or push tells the agent. Forge-agnostic:
 * everything goes through `Forge`.
 */

import { errorMessage, isBbError } from '@bb/errors';
import type { Forge, ReviewComment } from '@bb/forge';
import { CONTINUE } from './budget';
import { type HiddenNote, Seen } from './visible';

/** Who may start an agent turn with a comment, a review or a push. */
export interface TriggerPolicy {
  /** Members of this org may always drive agents. */
  org: string;
  /** The bot's login: its own words never drive it. */
  botLogin: string;
  /** Only messages that mention `@<botLogin>` start a turn. @default false */
  mentionOnly?: boolean;
}

export type Verdict = { ok: true; why: string } | { ok: false; why: string };

/**
 * May `author` drive the agent with `body`? Yes for users with write access to
 * the repository (the forge's permission API) and members of the policy's org;
 * with `mentionOnly`, only when the text mentions the bot. A forge that cannot
 * tell (the bot may not read permissions) falls back to org membership; nobody
 * is let in on a guess.
 */
export async function mayDrive(
  forge: Forge,
  policy: TriggerPolicy,
  author: string,
  body: string | undefined,
): Promise<Verdict> {
  if (author === policy.botLogin) return { ok: false, why: 'written by the bot itself' };
  // `/bb continue` is addressed to the bot as plainly as a mention is.
  if (
    policy.mentionOnly &&
    body !== undefined &&
    !mentions(body, policy.botLogin) &&
    !CONTINUE.test(body)
  )
    return { ok: false, why: `does not mention @${policy.botLogin} (mention-only is on)` };
  let permission: string | undefined;
  let unknown = '';
  try {
    permission = await forge.permissionOf(author);
    if (permission === 'write' || permission === 'admin')
      return { ok: true, why: `${author} may write to ${forge.owner}/${forge.repo}` };
  } catch (err) {
    if (!isBbError(err, 'FORBIDDEN') && !isBbError(err, 'NOT_FOUND')) throw err;
    unknown = errorMessage(err);
  }
  let member: boolean | undefined;
  try {
    member = await forge.isOrgMember(policy.org, author);
  } catch (err) {
    if (isBbError(err, 'FORGE_UNAVAILABLE')) throw err;
    member = undefined;
  }
  if (member) return { ok: true, why: `${author} is a member of ${policy.org}` };
  return {
    ok: false,
    why:
      permission !== undefined
        ? `${author} has ${permission} access to ${forge.owner}/${forge.repo} and is not a member of ${policy.org}`
        : `${author} is not a member of ${policy.org}, and the forge would not say whether they may write (${unknown})`,
  };
}

function mentions(body: string, login: string): boolean {
  const escaped = login.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`(^|[^\\w@])@${escaped}(?![\\w-])`, 'i').test(body);
}

const quote = (text: string) =>
  text
    .trim()
    .split('\n')
    .map((l) => `> ${l}`)
    .join('\n');

/**
 * What the agent is told of a comment: who, where, a link, the words (as its
 * readers see them: what they cannot see is taken out, and `hidden` says what).
 */
export function commentPrompt(o: {
  author: string;
  issue: number;
  pr?: number | undefined;
  url?: string | undefined;
  body: string;
}): { prompt: string; hidden: HiddenNote[] } {
  const place = o.pr === undefined ? `issue #${o.issue}` : `PR #${o.pr}`;
  const seen = new Seen();
  const body = seen.md(o.body, `comment by ${o.author} on ${place}`);
  return {
    prompt: `${o.author} commented on your ${place}${o.url ? ` (${o.url})` : ''}:\n\n${quote(body)}`,
    hidden: seen.hidden,
  };
}

const STATE_WORDS = {
  approved: 'approved',
  changes_requested: 'requested changes on',
  commented: 'reviewed',
} as const;

/**
 * What the agent is told of a review: its verdict, its text and every inline
 * comment with its file and line. The inline comments are read from the forge
 * (a review's webhook does not carry them).
 */
export async function reviewPrompt(
  forge: Forge,
  o: {
    author: string;
    pr: number;
    state: keyof typeof STATE_WORDS;
    body: string;
    url?: string | undefined;
  },
): Promise<{ prompt: string; reviewId: number | undefined; hidden: HiddenNote[] }> {
  let inline: ReviewComment[] = [];
  let reviewId: number | undefined;
  // The newest review of this author with this verdict and text is the one that was submitted.
  const reviews = await forge.readReviews(o.pr);
  const match = [...reviews]
    .reverse()
    .find((r) => r.author.login === o.author && r.state === o.state && r.body === o.body);
  if (match) {
    reviewId = match.id;
    inline = await forge.readReviewComments(o.pr, match.id);
  }
  const lines = [
    `${o.author} ${STATE_WORDS[o.state]} your PR #${o.pr}${match?.url ? ` (${match.url})` : o.url ? ` (${o.url})` : ''}.`,
  ];
  const seen = new Seen();
  const from = `review by ${o.author} on PR #${o.pr}`;
  if (o.body.trim()) lines.push('', quote(seen.md(o.body, from)));
  if (inline.length > 0) {
    lines.push('', `Inline comments (${inline.length}):`);
    for (const c of inline)
      lines.push(
        `- ${seen.plain(c.path, from)}${c.line !== null ? `:${c.line}` : ''}: ${seen.md(c.body, `inline comment of the ${from}`).trim()}`,
      );
  }
  if (o.state === 'changes_requested')
    lines.push('', 'Address each point, push your changes, and say what you did.');
  return { prompt: lines.join('\n'), reviewId, hidden: seen.hidden };
}

/** What the agent is told of commits a person pushed to its PR's branch. */
export function pushPrompt(o: {
  author: string;
  pr: number;
  before?: string | undefined;
  after: string;
  branch: string;
}): string {
  const range = o.before
    ? `${o.before.slice(0, 12)}..${o.after.slice(0, 12)}`
    : o.after.slice(0, 12);
  return `${o.author} pushed new commits to your PR #${o.pr}: ${range}. Your checkout has them (the forge's branch is at refs/remotes/pr/${o.branch}; your branch was fast-forwarded to it when it could be). Look at what changed and carry on.`;
}

/**
 * The first prompt of a fresh session that replaces a long one: the overlay,
 * the issue, what each earlier turn said it did (its done summary), the PR and
 * the reviews that still ask for something, then what woke it now.
 */
export async function rotationPrompt(
  forge: Forge,
  o: {
    overlay: string;
    issue: number;
    pr: number | undefined;
    previousTurns: number;
    summaries: string[];
    now: string;
    /**
     * Whether a review's author may drive the agent: only theirs are quoted (anyone
     * may review a PR on a public forge). @default everyone's
     */
    mayQuote?: (author: string) => Promise<boolean>;
  },
): Promise<{ prompt: string; summary: string; hidden: HiddenNote[] }> {
  const issue = await forge.readIssue(o.issue);
  const seen = new Seen();
  const lines: string[] = [
    `This continues earlier work on your issue in a fresh session: the last one ran ${o.previousTurns} turns.`,
    '',
    'What you did so far, turn by turn:',
    ...(o.summaries.length ? o.summaries.map((s, i) => `${i + 1}. ${s}`) : ['(nothing recorded)']),
  ];
  if (o.pr !== undefined) {
    const pr = await forge.readPr(o.pr);
    lines.push(
      '',
      `Your PR: #${pr.number} "${seen.plain(pr.title, `title of PR #${pr.number}`)}" (${pr.state}), branch ${pr.head.ref}.`,
    );
    const all = (await forge.readReviews(o.pr)).filter((r) => r.state !== 'approved');
    const reviews: typeof all = [];
    for (const r of all)
      if (!o.mayQuote || (await o.mayQuote(r.author.login).catch(() => false))) reviews.push(r);
    const open: string[] = [];
    const left = all.length - reviews.length;
    if (left > 0)
      open.push(
        `- (${left === 1 ? 'a review by someone' : `${left} reviews by people`} who may not drive you left out)`,
      );
    for (const r of reviews.slice(-5)) {
      const from = `review by ${r.author.login} on PR #${o.pr}`;
      open.push(
        `- ${r.author.login} (${r.state.replace('_', ' ')}): ${seen.md(r.body, from).trim() || '(no text)'}`,
      );
      for (const c of await forge.readReviewComments(o.pr, r.id))
        open.push(
          `  - ${seen.plain(c.path, from)}${c.line !== null ? `:${c.line}` : ''}: ${seen.md(c.body, `inline comment of the ${from}`).trim()}`,
        );
    }
    if (open.length) lines.push('Review threads:', ...open);
  }
  const summary = lines.join('\n');
  const prompt = `${o.overlay}\n${issueText(seen, o.issue, forge, issue)}\n\n${summary}\n\nNow:\n${o.now}`;
  return { prompt, summary, hidden: seen.hidden };
}

/** The issue as the agent is first told it: its number, title and body, as readers see them. */
export function issueText(
  seen: Seen,
  n: number,
  where: { owner: string; repo: string },
  issue: { title: string; body: string },
): string {
  const from = `issue #${n}`;
  return `Your issue is #${n} of ${where.owner}/${where.repo}: ${seen.plain(issue.title, `title of ${from}`)}\n\n${seen.md(issue.body, from)}`;
}
