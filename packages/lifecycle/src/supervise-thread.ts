/**
 * The supervise plane where the people are: a request a bottle makes is posted
 * once on its issue (what the agent asked for, its reason quoted as the agent's
 * words, the diff, the analyser's findings, the id and how to decide), and a
 * person allowed to decide answers on the thread:
 *
 *   /bb approve <id> [--scope turn|bottle]
 *   /bb modify <id> [--scope turn|bottle]   (the whole new file in a code block below)
 *   /bb reject <id> <reason>
 *
 * The decision is the desk's, bound to the proposal that was posted (its hash),
 * recorded as made on the forge by that person, and answered on the thread.
 * Who may decide: the logins the operator names, else the repository's admins;
 * never the bot (the agent writes as the bot). Anything else is ignored and logged.
 */

import { errorMessage, isBbError } from '@bb/errors';
import type { Forge } from '@bb/forge';
import {
  autoApprovable,
  type Decider,
  type Decision,
  type DecisionOutcome,
  REQUEST_ID,
  type RequestView,
} from '@bb/supervise';
import { forMarkdown, markdownFence } from '@bb/wall';
import { CONTINUE } from './budget';
import type { Core } from './core';
import { parseIssueKey } from './routing';

/** What the thread needs of the supervise desk (a `SuperviseDesk` has it). */
export interface ThreadDesk {
  list(filter: { status: 'pending' }): Promise<RequestView[]>;
  show(id: string): Promise<RequestView>;
  /** As the desk approves (`edited`: the decider's own file, in the proposal's place). */
  approve(
    id: string,
    d: Pick<Decision, 'by' | 'via' | 'edited' | 'expect'> & { scope?: 'turn' | 'bottle' },
  ): Promise<DecisionOutcome>;
  reject(id: string, reason: string, who: Decider): unknown;
}

/** The longest diff posted: a longer one is decided on the host (`bb supervise show`). */
const MAX_DIFF_LINES = 200;
const MAX_DIFF_CHARS = 20_000;

/** Whether the thread cannot show all of a request's change (and so cannot approve it). */
const tooLongToShow = (r: Pick<RequestView, 'diff'>): boolean =>
  r.diff.length > MAX_DIFF_CHARS || r.diff.split('\n').length > MAX_DIFF_LINES;

/** A `/bb …` command, or why it is not one. */
export type ThreadCommand =
  | { verb: 'approve'; id: string; scope?: 'turn' | 'bottle' }
  | { verb: 'modify'; id: string; file: string; scope?: 'turn' | 'bottle' }
  | { verb: 'reject'; id: string; reason: string }
  | { error: string };

/** The longest file a `/bb modify` may carry (a longer one is edited on the host). */
const MAX_FILE_CHARS = 20_000;

/** The first fenced code block of a comment (``` or ~~~, any info string), or undefined. */
function firstCodeBlock(body: string): string | undefined {
  const m = /^[ \t]*(`{3,}|~{3,})[^\n]*\n([\s\S]*?)^[ \t]*\1[ \t]*$/m.exec(body);
  return m ? m[2]! : undefined;
}

/** Whether a comment is addressed to bot-bottle (`/bb` at its start). */
export const isThreadCommand = (body: string): boolean =>
  /^\s*\/bb\b/.test(body) && !CONTINUE.test(body);

/** Parse a `/bb` comment: its first line, and for `modify` the code block after it. */
export function parseThreadCommand(raw: string): ThreadCommand {
  // A browser sends a comment's lines ended with CRLF: the file is taken with LF alone.
  const body = raw.replace(/\r\n?/g, '\n');
  const line = body.trim().split('\n', 1)[0]!.trim();
  const [, verb, id, ...rest] = line.split(/\s+/);
  const usage =
    'write `/bb approve <id> [--scope turn|bottle]`, `/bb modify <id>` with the whole new file in a code block, or `/bb reject <id> <reason>`';
  if (verb !== 'approve' && verb !== 'reject' && verb !== 'modify') return { error: usage };
  if (!id || !REQUEST_ID.test(id))
    return { error: `name the request (an id such as sr_…): ${usage}` };
  if (verb === 'reject') {
    const reason = body
      .trim()
      .slice(body.trim().indexOf(id) + id.length)
      .trim();
    if (!reason) return { error: 'a rejection needs a reason: the agent is told it' };
    return { verb, id, reason };
  }
  let scope: 'turn' | 'bottle' | undefined;
  if (rest.length === 2 && rest[0] === '--scope' && (rest[1] === 'turn' || rest[1] === 'bottle'))
    scope = rest[1];
  else if (rest.length > 0)
    return { error: `${verb} takes only --scope turn or --scope bottle: ${usage}` };
  if (verb === 'approve') return scope ? { verb, id, scope } : { verb, id };
  const file = firstCodeBlock(body.slice(body.indexOf(line) + line.length));
  if (file === undefined)
    return {
      error: `a modification carries the whole new file in a code block (\`\`\` … \`\`\`) after \`/bb modify ${id}\``,
    };
  if (file.length > MAX_FILE_CHARS)
    return { error: `that file is too long to take from a comment: edit it on the host` };
  return scope ? { verb, id, file, scope } : { verb, id, file };
}

/** As much of `r`'s diff as a comment shows. */
const shownDiff = (r: Pick<RequestView, 'diff'>): string =>
  tooLongToShow(r)
    ? `${r.diff.split('\n').slice(0, MAX_DIFF_LINES).join('\n').slice(0, MAX_DIFF_CHARS)}\n…`
    : r.diff;

/** What a comment shows of a request: the agent's reason as its words, the diff, the findings. */
const proposalLines = (r: RequestView): string[] => [
  '',
  'Its reason, in its own words:',
  '',
  `> ${forMarkdown(r.justification)}`,
  '',
  markdownFence(shownDiff(r), 'diff'),
  ...(r.findings.length
    ? [
        '',
        'What the analyser found:',
        ...r.findings.slice(0, MAX_FINDINGS).map((f) => `- ${forMarkdown(f.message)}`),
        ...(r.findings.length > MAX_FINDINGS
          ? [`- … and ${r.findings.length - MAX_FINDINGS} more (\`bb supervise show ${r.id}\`)`]
          : []),
      ]
    : []),
];

/** The most findings a comment lists (a forge limits a comment's length). */
const MAX_FINDINGS = 20;

/** The comment that puts request `r` before the people on the thread. */
export function requestComment(r: RequestView, deciders: string): string {
  const cut = tooLongToShow(r);
  const scope = r.kind === 'dockerfile' ? 'the bottle (a rebuilt image)' : 'this turn';
  return [
    `**The agent asks for a change to its ${r.kind === 'dockerfile' ? 'image' : r.kind}** (\`${r.tool}\`, request \`${r.id}\`).`,
    ...proposalLines(r),
    ...(r.beyondCeiling.length
      ? [
          '',
          `It goes beyond the operator's ceiling (${forMarkdown(r.beyondCeiling.join('; '))}): only the operator can approve it, on the host.`,
        ]
      : []),
    '',
    cut
      ? `The change is too long to show here in full: decide it on the host (\`bb supervise show ${r.id}\`), or reply \`/bb reject ${r.id} <reason>\`. ${deciders} may reject it here.`
      : `To decide, reply \`/bb approve ${r.id}\` (for ${scope}; \`--scope bottle\` keeps a proxy change for every later turn), \`/bb modify ${r.id}\` with your version of the whole file in a code block, or \`/bb reject ${r.id} <reason>\`. ${deciders} may decide. Proposal \`${r.candidateHash.slice(0, 12)}\`.`,
  ].join('\n');
}

/**
 * In auto mode, approve `r` when the analyser finds it harmless; the outcome, or
 * undefined when it waits for a person (a failed approval waits too).
 */
async function autoDecide(
  core: Core,
  desk: ThreadDesk,
  r: RequestView,
  key: string,
): Promise<DecisionOutcome | undefined> {
  if (!core.o.superviseAuto || !autoApprovable(r)) return undefined;
  try {
    const out = await desk.approve(r.id, {
      by: 'auto',
      via: 'auto',
      expect: { candidateHash: r.candidateHash },
    });
    core.log({
      msg: 'supervise request approved automatically',
      key,
      request: r.id,
      applied: out.remediation?.ok ?? false,
    });
    return out;
  } catch (err) {
    core.log({
      msg: 'supervise request left for a person',
      key,
      request: r.id,
      why: errorMessage(err),
    });
    return undefined;
  }
}

/** The comment that says auto mode approved request `r`, and what came of it. */
export function autoComment(r: RequestView, out: DecisionOutcome): string {
  return [
    `**Approved automatically** (\`BB_SUPERVISE_AUTO\`): the agent's change to its ${r.kind} (\`${r.tool}\`, request \`${r.id}\`), which the analyser found harmless and within the operator's ceiling.`,
    ...proposalLines(r),
    '',
    out.remediation?.ok
      ? `Applied for ${out.request.scope === 'bottle' ? 'the bottle' : 'this turn'}: ${forMarkdown(out.remediation.detail)}.`
      : `Applying it failed: ${forMarkdown(out.remediation?.detail ?? 'no remediation')}. The agent is told.`,
  ].join('\n');
}

/**
 * Post each pending request of a live bottle on its issue, once (the delivery
 * ledger keeps it across restarts and replicas).
 */
export async function announceRequests(core: Core, desk: ThreadDesk): Promise<void> {
  // What this process could not post: tried again, a request that waits as long as it
  // waits, and an automatic approval until it is said (it applies either way).
  for (const [id, u] of unposted(core)) {
    if (!u.auto && !(await isPending(desk, id))) unposted(core).delete(id);
    else await post(core, id, u);
  }
  for (const r of await desk.list({ status: 'pending' })) {
    const s = core.sessions.bySlug(r.slug);
    if (!s || unposted(core).has(r.id)) continue;
    // Asked before the ledger notes the post: one that lost the issue leaves it to its holder.
    if (!(await core.fleet.stillHolds(s.key))) continue;
    const first = await core.o.inbox.accept(`bb:supervise:${r.id}`, {
      issue: null,
      occurredAt: new Date().toISOString(),
      payload: { issue: s.key, request: r.id },
      deliveryId: undefined,
      kind: 'supervise-thread',
      done: true,
    });
    if (!first) continue;
    const auto = await autoDecide(core, desk, r, s.key);
    await post(core, r.id, {
      key: s.key,
      owner: s.owner,
      repo: s.repo,
      issue: s.issue,
      auto: !!auto,
      body: auto ? autoComment(r, auto) : requestComment(r, decidersInWords(core)),
    });
  }
}

const isPending = async (desk: ThreadDesk, id: string): Promise<boolean> => {
  try {
    return (await desk.show(id)).status === 'pending';
  } catch {
    return false;
  }
};

/** A comment on a request, for its bottle's issue. */
interface ThreadPost {
  key: string;
  owner: string;
  repo: string;
  issue: number;
  /** It says an automatic approval (posted whatever becomes of the request). */
  auto: boolean;
  body: string;
  /** Failed posts so far. */
  tries?: number;
}

/** Posts of one comment tried before it is given up (about a minute of passes). */
const MAX_TRIES = 30;

/** Post `u`; kept for the next pass when the forge fails (the ledger marked it already). */
async function post(core: Core, id: string, u: ThreadPost): Promise<void> {
  try {
    if (!(await core.fleet.stillHolds(u.key))) {
      // Its issue is another orchestrator's now (this one stalled past its lease).
      unposted(core).delete(id);
      core.log({
        msg: 'supervise request not posted: another orchestrator holds the issue',
        key: u.key,
        request: id,
      });
      return;
    }
    await core.forgeFor(u.owner, u.repo).postComment(u.issue, u.body);
    unposted(core).delete(id);
    core.log({ msg: 'supervise request posted', key: u.key, request: id });
  } catch (err) {
    const tries = (u.tries ?? 0) + 1;
    // A comment the forge keeps refusing is not tried forever (the token's rate is shared).
    if (tries < MAX_TRIES) unposted(core).set(id, { ...u, tries });
    else unposted(core).delete(id);
    core.log({
      msg:
        tries < MAX_TRIES
          ? 'could not post a supervise request'
          : 'gave up posting a supervise request',
      key: u.key,
      request: id,
      tries,
      error: errorMessage(err),
    });
  }
}

/** Comments this process could not post, by request (tried again on each pass). */
const UNPOSTED = new WeakMap<Core, Map<string, ThreadPost>>();
const unposted = (core: Core): Map<string, ThreadPost> => {
  const map = UNPOSTED.get(core) ?? new Map<string, ThreadPost>();
  UNPOSTED.set(core, map);
  return map;
};

const decidersInWords = (core: Core): string =>
  core.o.superviseDeciders?.length
    ? core.o.superviseDeciders.map((l) => `@${l}`).join(', ')
    : "The repository's admins";

/** Whether `login` may decide this repository's requests. */
async function mayDecide(core: Core, forge: Forge, login: string, key: string): Promise<boolean> {
  // Logins as the forge compares them: without case.
  const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();
  if (same(login, core.o.botLogin)) return false;
  if (core.o.superviseDeciders?.length) return core.o.superviseDeciders.some((d) => same(d, login));
  try {
    return (await forge.permissionOf(login)) === 'admin';
  } catch (err) {
    // A forge that does not answer now: the comment is tried again later, not dropped.
    if (isBbError(err, 'FORGE_UNAVAILABLE')) throw err;
    if (isBbError(err, 'FORBIDDEN'))
      core.log({
        msg: 'cannot tell who may decide supervise requests',
        key,
        why: 'the bot may not read permissions (it must administer the repository), so only BB_SUPERVISE_DECIDERS could decide',
      });
    return false;
  }
}

/**
 * A `/bb` comment on an issue (or its PR): carried out when its author may
 * decide and it names a request of this issue's bottle; answered on the thread.
 */
export async function handleThreadCommand(
  core: Core,
  desk: ThreadDesk,
  key: string,
  comment: { author: string; body: string },
  /** The issue or PR it was written on: the answer goes there. */
  on: number,
): Promise<void> {
  const { owner, repo } = parseIssueKey(key);
  const forge = core.forgeFor(owner, repo);
  if (!(await mayDecide(core, forge, comment.author, key))) {
    core.log({
      msg: 'supervise command ignored',
      key,
      author: comment.author,
      why: 'not a decider',
    });
    return;
  }
  const reply = (text: string) =>
    forge
      .postComment(on, text)
      .catch((err: unknown) =>
        core.log({ msg: 'could not answer a supervise command', key, error: errorMessage(err) }),
      );
  const cmd = parseThreadCommand(comment.body);
  if ('error' in cmd) {
    await reply(`@${comment.author}: ${cmd.error}`);
    return;
  }
  const slug = core.sessions.get(key)?.slug;
  let request: RequestView | undefined;
  try {
    request = await desk.show(cmd.id);
  } catch {}
  if (!request || !slug || request.slug !== slug) {
    await reply(`@${comment.author}: \`${cmd.id}\` is not a request of this issue's bottle.`);
    return;
  }
  const by = `forge:${comment.author}`;
  try {
    if (cmd.verb === 'reject') {
      await desk.reject(cmd.id, cmd.reason, { by, via: 'forge' });
      core.log({ msg: 'supervise request rejected on the forge', key, request: cmd.id, by });
      await reply(`Rejected \`${cmd.id}\` (@${comment.author}); the agent is told why.`);
      return;
    }
    if (cmd.verb === 'approve' && tooLongToShow(request)) {
      await reply(
        `@${comment.author}: \`${cmd.id}\` is too long to show here in full, so it is not approved here: decide it on the host (\`bb supervise show ${cmd.id}\`).`,
      );
      return;
    }
    const modified = cmd.verb === 'modify';
    const out = await desk.approve(cmd.id, {
      by,
      via: 'forge',
      ...(cmd.scope ? { scope: cmd.scope } : {}),
      ...(modified ? { edited: cmd.file } : {}),
      // The proposal that was posted: a different one under the same id is not decided.
      expect: { candidateHash: request.candidateHash },
    });
    core.log({
      msg: modified
        ? 'supervise request modified on the forge'
        : 'supervise request approved on the forge',
      key,
      request: cmd.id,
      by,
      applied: out.remediation?.ok ?? false,
    });
    const what = modified ? 'Approved, as modified,' : 'Approved';
    await reply(
      out.remediation?.ok
        ? `${what} \`${cmd.id}\` (@${comment.author}, scope ${out.request.scope}): ${forMarkdown(out.remediation.detail)}. The agent carries on${modified ? ' with your file' : ''}.`
        : `${what} \`${cmd.id}\` (@${comment.author}), but applying it failed: ${forMarkdown(out.remediation?.detail ?? 'no remediation')}. The agent is told.`,
    );
  } catch (err) {
    await reply(
      `@${comment.author}: \`${cmd.id}\` was not decided: ${forMarkdown(errorMessage(err))}`,
    );
  }
}
