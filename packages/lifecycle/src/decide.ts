/**
 * What a forge event means for an issue's bottle, as a pure function beside
 * `machine.ts`: the event, what this process holds of the bottle, and the facts
 * read from the forge go in; the machine's input (or why nothing happens) comes
 * out. Facts it lacks are asked for (`need`), gathered once by the caller, and
 * handed back.
 */
import { AGENT_LABEL_PREFIX, type Forge, type ForgeEvent, type TargetingResult } from '@bb/forge';
import { commentPrompt, pushPrompt } from './conversation';
import type { LifecycleInput, LifecycleState } from './machine';
import type { HiddenNote } from './visible';

/** What the forge is asked before an event is decided. */
export type FactNeed =
  /** The issue as the forge has it now, and whether it targets the bot. */
  | { type: 'targeting' }
  /** Whether any of these PRs is still open. */
  | { type: 'open_prs'; prs: number[] }
  /** Whether `author` may drive the agent with `body` (write access or the org; a mention when asked). */
  | { type: 'may_drive'; author: string; body: string | undefined }
  /** The prompt of a review (its inline comments are read). */
  | {
      type: 'review';
      author: string;
      pr: number;
      state: Extract<ForgeEvent, { kind: 'review_submitted' }>['state'];
      body: string;
      url: string | undefined;
    };

/** The issue as read for its targeting; the launch uses the same read. */
export interface IssueFacts {
  state: string;
  title: string;
  body: string;
  labels: string[];
  assignees: string[];
  targeting: TargetingResult;
}

/** What was read from the forge for one event. */
export interface Facts {
  issue?: IssueFacts;
  openPr?: boolean;
  may?: { ok: boolean; why: string };
  review?: { prompt: string; reviewId?: number | undefined; hidden?: HiddenNote[] };
}

/** What this process holds of the issue's bottle. */
export interface BottleView {
  /** The issue's number (its queue's key). */
  issue: number;
  /** A session exists for the issue (even with no bottle yet). */
  known: boolean;
  state: LifecycleState;
  heads?: Record<number, string> | undefined;
}

export interface DecidePolicy {
  botLogin: string;
  /** Other bots: what they say or push never wakes an agent. */
  ignoreUsers?: string[];
  resumeOnHumanPush?: boolean;
}

export type Ack = Parameters<Forge['react']>[0];

/** A head a PR was seen at (kept for the next push's "a..b"). */
export interface Seen {
  pr: number;
  sha: string;
}

export type Decision =
  | { kind: 'need'; needs: FactNeed[] }
  | {
      kind: 'done';
      /** Log lines to write (what was decided and why). */
      logs?: Record<string, unknown>[];
      /** Said once on the issue: why a targeted issue cannot launch. */
      feedback?: string;
      seen?: Seen;
    }
  | {
      kind: 'input';
      input: LifecycleInput;
      logs?: Record<string, unknown>[];
      /** The agent a launch is for, and the bottle manifests it asked for. */
      agent?: string;
      bottles?: string[];
      /** What to acknowledge with 👀 once the person is heard. */
      ack?: Ack;
      seen?: Seen;
      /** What was taken out of the text the prompt quotes (its readers could not see it). */
      hidden?: HiddenNote[];
    };

/** The bot itself, or a login the operator listed as a bot: never heard (no agent is woken by a bot). */
const isBot = (policy: DecidePolicy, login: string) =>
  login === policy.botLogin ||
  (policy.ignoreUsers?.some((u) => u.toLowerCase() === login.toLowerCase()) ?? false);

const live = (v: BottleView) => v.state.status === 'running' || v.state.status === 'frozen';

/** Decide `event` for the bottle `view` with the `facts` read so far. */
export function decide(
  event: ForgeEvent,
  facts: Facts,
  view: BottleView,
  policy: DecidePolicy,
): Decision {
  const isLive = live(view);
  const prs = view.state.prs;
  switch (event.kind) {
    case 'issue_targeting_changed': {
      // The payload is a hint: the issue as the forge has it now decides.
      const fresh = facts.issue;
      if (!fresh) return { kind: 'need', needs: [{ type: 'targeting' }] };
      const t = fresh.targeting;
      const logs = [{ msg: 'targeting', targeted: t.targeted, reasons: t.reasons }];
      if (fresh.state !== 'open') return { kind: 'done', logs };
      if (t.targeted)
        return {
          kind: 'input',
          input: { type: 'targeted' },
          logs,
          ...(t.agent ? { agent: t.agent } : {}),
          ...(t.bottle ? { bottles: [t.bottle] } : {}),
        };
      // Taken back from the bot: its agent label is gone, or the bot is no longer assigned.
      const labelled = fresh.labels.some((l) => l.startsWith(AGENT_LABEL_PREFIX));
      const assigned = fresh.assignees.includes(policy.botLogin);
      const why = !labelled
        ? `the ${AGENT_LABEL_PREFIX}<agent> label was removed from #${view.issue}`
        : !assigned
          ? `${policy.botLogin} was unassigned from #${view.issue}`
          : undefined;
      if (why && isLive) return { kind: 'input', input: { type: 'untargeted', why }, logs };
      // Meant for the bot (it is assigned and a bot-bottle label is there) but unusable.
      if (!isLive && assigned && labelled) {
        const reasons =
          t.reasons.filter((r) => !r.startsWith('assignee ')).join('; ') || t.reasons.join('; ');
        return {
          kind: 'done',
          logs,
          feedback: `bot-bottle cannot start an agent for this issue: ${reasons}.`,
        };
      }
      return { kind: 'done', logs };
    }
    case 'issue_closed':
      if (!isLive) return { kind: 'done' };
      if (facts.openPr === undefined)
        return { kind: 'need', needs: [{ type: 'open_prs', prs: [...prs] }] };
      return { kind: 'input', input: { type: 'issue_closed', openPr: facts.openPr } };
    case 'pr_opened':
      return {
        kind: 'input',
        input: { type: 'pr_opened', pr: event.pr.number, author: event.pr.author },
        ...(view.known && event.pr.headSha
          ? { seen: { pr: event.pr.number, sha: event.pr.headSha } }
          : {}),
      };
    case 'comment_created': {
      const pr = event.on === 'pr' ? event.number : undefined;
      const author = event.comment.author;
      // Only a live bottle's own issue and PRs are heard; nothing is asked of the forge otherwise.
      if (!isLive || isBot(policy, author)) return { kind: 'done' };
      if (pr !== undefined && !prs.includes(pr)) return { kind: 'done' };
      if (!facts.may)
        return { kind: 'need', needs: [{ type: 'may_drive', author, body: event.comment.body }] };
      if (!facts.may.ok)
        return { kind: 'done', logs: [{ msg: 'comment ignored', author, why: facts.may.why }] };
      const { prompt, hidden } = commentPrompt({
        author,
        issue: view.issue,
        pr,
        url: event.comment.url,
        body: event.comment.body,
      });
      return {
        kind: 'input',
        input: { type: 'message', pr, author, prompt },
        ack: { comment: event.comment.id },
        ...(hidden.length > 0 ? { hidden } : {}),
      };
    }
    case 'review_submitted': {
      const pr = event.pr.number;
      const author = event.author;
      if (!isLive || !prs.includes(pr) || isBot(policy, author)) return { kind: 'done' };
      if (!facts.may)
        return { kind: 'need', needs: [{ type: 'may_drive', author, body: event.body }] };
      if (!facts.may.ok)
        return { kind: 'done', logs: [{ msg: 'review ignored', author, why: facts.may.why }] };
      // Its inline comments are read only for a review that is heard.
      if (!facts.review)
        return {
          kind: 'need',
          needs: [
            { type: 'review', author, pr, state: event.state, body: event.body, url: event.url },
          ],
        };
      const { prompt, reviewId, hidden } = facts.review;
      return {
        kind: 'input',
        input: { type: 'message', pr, author, prompt },
        ...(reviewId !== undefined ? { ack: { review: reviewId, pr } } : {}),
        ...(hidden?.length ? { hidden } : {}),
      };
    }
    case 'pr_synchronized': {
      const pr = event.pr.number;
      if (!view.known) return { kind: 'done' };
      const seen = event.pr.headSha ? { pr, sha: event.pr.headSha } : undefined;
      const at = seen ? { seen } : {};
      const author = event.sender.login;
      if (!isLive || !prs.includes(pr) || isBot(policy, author)) return { kind: 'done', ...at };
      if (policy.resumeOnHumanPush) {
        if (!facts.may)
          return { kind: 'need', needs: [{ type: 'may_drive', author, body: undefined }] };
        if (!facts.may.ok)
          return {
            kind: 'done',
            logs: [{ msg: 'push ignored', author, why: facts.may.why }],
            ...at,
          };
      }
      return {
        kind: 'input',
        input: {
          type: 'pr_synchronized',
          pr,
          author,
          prompt: pushPrompt({
            author,
            pr,
            before: view.heads?.[pr],
            after: event.pr.headSha,
            branch: event.pr.head,
          }),
        },
        ...at,
      };
    }
    case 'pr_closed':
      return {
        kind: 'input',
        input: { type: 'pr_closed', pr: event.pr.number, merged: event.merged },
      };
    default:
      return { kind: 'done', logs: [{ msg: 'event not acted on', kind: event.kind }] };
  }
}
