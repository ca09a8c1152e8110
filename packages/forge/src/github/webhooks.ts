/**
 * GitHub's webhooks: verified with `X-Hub-Signature-256` (HMAC-SHA256 of the raw body,
 * `sha256=<hex>`), named by `X-GitHub-Event` and `X-GitHub-Delivery`, read into the same
 * events as every forge's. The signature is checked with node's crypto (the scheme's
 * `verify` is synchronous; @octokit/webhooks-methods' is not), in constant time.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { BbError } from '@bb/errors';
import {
  commentCreatedKey,
  header,
  type IssueRef,
  type ParsedWebhook,
  type PrRef,
  type WebhookHeaders,
} from '../events';

export function verifyGitHubWebhook(
  headers: WebhookHeaders,
  rawBody: Uint8Array | string,
  secrets: readonly string[],
): boolean {
  const given = /^sha256=([0-9a-f]{64})$/.exec(header(headers, 'x-hub-signature-256') ?? '')?.[1];
  if (!given) return false;
  const body = typeof rawBody === 'string' ? Buffer.from(rawBody) : Buffer.from(rawBody);
  let ok = false;
  for (const secret of secrets) {
    if (!secret) continue;
    const want = createHmac('sha256', secret).update(body).digest();
    if (timingSafeEqual(want, Buffer.from(given, 'hex'))) ok = true;
  }
  return ok;
}

interface GhUser {
  id: number;
  login: string;
}
interface GhIssue {
  number: number;
  title: string;
  state: string;
  labels?: Array<{ name: string }>;
  assignees?: GhUser[];
  pull_request?: unknown;
  updated_at: string;
  closed_at?: string | null;
}
interface GhPull {
  number: number;
  title: string;
  body?: string | null;
  state: string;
  head?: { ref: string; sha: string };
  base?: { ref: string };
  user?: GhUser;
  merged?: boolean;
  merge_commit_sha?: string | null;
  created_at: string;
  updated_at: string;
  closed_at?: string | null;
  html_url?: string;
}
interface Payload {
  action?: string;
  before?: string;
  after?: string;
  repository?: { name: string; owner: { login: string } };
  sender?: GhUser;
  issue?: GhIssue;
  comment?: { id: number; body: string; user: GhUser; created_at: string; html_url?: string };
  pull_request?: GhPull;
  review?: {
    id: number;
    state: string;
    body?: string | null;
    submitted_at?: string;
    user?: GhUser;
  };
}

const shortHash = (s: string) => createHash('sha256').update(s).digest('hex').slice(0, 12);

const issueRef = (i: GhIssue): IssueRef => ({
  number: i.number,
  title: i.title,
  labels: (i.labels ?? []).map((l) => l.name),
  assignees: (i.assignees ?? []).map((a) => a.login),
  state: i.state === 'closed' ? 'closed' : 'open',
});

const prRef = (p: GhPull): PrRef => ({
  number: p.number,
  title: p.title,
  body: p.body ?? '',
  state: p.state === 'closed' ? 'closed' : 'open',
  head: p.head?.ref ?? '',
  headSha: p.head?.sha ?? '',
  base: p.base?.ref ?? '',
  author: p.user?.login ?? '',
});

/** GitHub's issue actions that may change whether an issue is targeted, as the events name them. */
const TARGETING: Record<
  string,
  'opened' | 'reopened' | 'edited' | 'assigned' | 'unassigned' | 'label_updated'
> = {
  opened: 'opened',
  reopened: 'reopened',
  edited: 'edited',
  assigned: 'assigned',
  unassigned: 'unassigned',
  labeled: 'label_updated',
  unlabeled: 'label_updated',
};

export function parseGitHubWebhook(
  headers: WebhookHeaders,
  rawBody: Uint8Array | string,
): ParsedWebhook {
  const deliveryId = header(headers, 'x-github-delivery');
  const contentType = header(headers, 'content-type') ?? '';
  if (!/^application\/json\b/i.test(contentType))
    throw new BbError(
      'INVALID_INPUT',
      `webhook content type ${JSON.stringify(contentType)} is not supported: set the hook's content type to application/json`,
      { data: { deliveryId } },
    );
  const event = header(headers, 'x-github-event');
  if (!event)
    throw new BbError(
      'INVALID_INPUT',
      'webhook has no X-GitHub-Event header: is this a GitHub hook?',
      {
        data: { deliveryId },
      },
    );
  let body: Payload;
  try {
    body = JSON.parse(
      typeof rawBody === 'string' ? rawBody : Buffer.from(rawBody).toString('utf8'),
    );
  } catch (err) {
    throw new BbError(
      'INVALID_INPUT',
      `webhook body is not valid JSON: ${(err as Error).message}`,
      {
        data: { deliveryId },
      },
    );
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new BbError('INVALID_INPUT', 'webhook body is not a JSON object', {
      data: { deliveryId },
    });
  const ignored = (reason: string): ParsedWebhook => ({ kind: 'ignored', reason, deliveryId });
  if (event === 'ping') return ignored('ping: the hook works');
  const repo = body.repository;
  if (!repo?.owner?.login || !repo.name) return ignored(`${event} delivery has no repository`);
  const owner = repo.owner.login;
  const name = repo.name;
  const sender = body.sender
    ? { id: body.sender.id, login: body.sender.login }
    : { id: 0, login: '' };
  const base = { deliveryId, owner, repo: name, sender };
  const keyPrefix = `github:${owner}/${name}`;
  const action = body.action ?? '';
  const need = <T>(v: T | undefined | null, field: string): T => {
    if (v === undefined || v === null || typeof v !== 'object')
      throw new BbError(
        'INVALID_INPUT',
        `${event} delivery lacks the ${field} object GitHub always sends`,
        {
          data: { deliveryId },
        },
      );
    return v;
  };
  switch (event) {
    case 'issues': {
      const issue = need(body.issue, 'issue');
      const ref = issueRef(issue);
      // Deleted or moved away, an issue is as good as closed here.
      if (action === 'closed' || action === 'deleted' || action === 'transferred')
        return {
          ...base,
          kind: 'issue_closed',
          key: `${keyPrefix}:issue#${issue.number}:closed:${issue.closed_at ?? issue.updated_at}`,
          occurredAt: issue.closed_at ?? issue.updated_at,
          issue: ref,
        };
      const mapped = TARGETING[action];
      if (!mapped) return ignored(`issues/${action} does not change targeting`);
      return {
        ...base,
        kind: 'issue_targeting_changed',
        action: mapped,
        key: `${keyPrefix}:issue#${issue.number}:${action}:${issue.updated_at}:${shortHash(JSON.stringify([ref.labels, ref.assignees, ref.state, issue.title]))}`,
        occurredAt: issue.updated_at,
        issue: ref,
      };
    }
    case 'issue_comment': {
      if (action !== 'created') return ignored(`comment ${action || 'change'} is not acted on`);
      const issue = need(body.issue, 'issue');
      const comment = need(body.comment, 'comment');
      return {
        ...base,
        kind: 'comment_created',
        key: commentCreatedKey('github', owner, name, comment.id),
        occurredAt: comment.created_at,
        on: issue.pull_request ? 'pr' : 'issue',
        number: issue.number,
        comment: {
          id: comment.id,
          author: comment.user.login,
          body: comment.body,
          ...(comment.html_url ? { url: comment.html_url } : {}),
        },
      };
    }
    case 'pull_request': {
      const pr = need(body.pull_request, 'pull_request');
      const ref = prRef(pr);
      const at = pr.updated_at;
      switch (action) {
        case 'opened':
          return {
            ...base,
            kind: 'pr_opened',
            key: `${keyPrefix}:pr#${pr.number}:opened:${pr.created_at}`,
            occurredAt: pr.created_at,
            pr: ref,
          };
        case 'synchronize':
          return {
            ...base,
            kind: 'pr_synchronized',
            // before..after: a force-push back to an earlier head is a change of its own.
            key: `${keyPrefix}:pr#${pr.number}:sync:${body.before ?? ''}..${body.after ?? ref.headSha}`,
            occurredAt: at,
            pr: ref,
          };
        case 'closed':
          return {
            ...base,
            kind: 'pr_closed',
            key: `${keyPrefix}:pr#${pr.number}:closed:${pr.closed_at ?? at}`,
            occurredAt: pr.closed_at ?? at,
            pr: ref,
            merged: pr.merged === true,
            mergeCommitSha: pr.merge_commit_sha ?? null,
          };
        case 'reopened':
          return {
            ...base,
            kind: 'pr_reopened',
            key: `${keyPrefix}:pr#${pr.number}:reopened:${at}`,
            occurredAt: at,
            pr: ref,
          };
        default:
          return ignored(`pull_request/${action} is not acted on`);
      }
    }
    case 'pull_request_review': {
      if (action !== 'submitted') return ignored(`pull_request_review/${action} is not acted on`);
      const pr = need(body.pull_request, 'pull_request');
      const review = need(body.review, 'review');
      const state = (
        {
          approved: 'approved',
          changes_requested: 'changes_requested',
          commented: 'commented',
        } as const
      )[review.state.toLowerCase() as 'approved'];
      if (!state) return ignored(`a review in state ${review.state} is not acted on`);
      return {
        ...base,
        kind: 'review_submitted',
        key: `${keyPrefix}:pr#${pr.number}:review#${review.id}:${state}`,
        occurredAt: review.submitted_at ?? pr.updated_at,
        pr: prRef(pr),
        state,
        author: review.user?.login ?? sender.login,
        body: review.body ?? '',
        ...(pr.html_url ? { url: pr.html_url } : {}),
      };
    }
    case 'pull_request_review_comment':
      return ignored('inline comments arrive with their review (pull_request_review/submitted)');
    case 'push':
      return ignored(
        'push events are not acted on (PR updates arrive as pull_request/synchronize)',
      );
    default:
      return ignored(`event ${event} is not acted on`);
  }
}
