import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { BbError } from '@bb/errors';
import {
  commentCreatedKey,
  type ForgeEvent,
  header,
  type IssueRef,
  type ParsedWebhook,
  type PrRef,
  type WebhookHeaders,
} from '../events';
import type { GiteaIssue, GiteaPull, GiteaUser } from './mapping';

const HEX64 = /^[0-9a-f]{64}$/i;

/** The first of these headers present wins: Gitea, then Forgejo, then Gogs. */
function first(headers: WebhookHeaders, names: string[]): string | undefined {
  for (const n of names) {
    const v = header(headers, n);
    if (v !== undefined && v !== '') return v;
  }
  return undefined;
}

/**
 * Verify a Gitea (or Forgejo) delivery: HMAC-SHA256 of the raw body with the
 * hook's secret, from `X-Gitea-Signature` / `X-Forgejo-Signature` (bare hex) or
 * `X-Hub-Signature-256` (`sha256=` hex), compared in constant time. An empty
 * secret never verifies.
 */
export function verifyGiteaWebhook(
  headers: WebhookHeaders,
  rawBody: Uint8Array | string,
  secret: string,
): boolean {
  if (!secret) return false;
  let given = first(headers, ['x-gitea-signature', 'x-forgejo-signature', 'x-gogs-signature']);
  if (given === undefined) {
    const hub = header(headers, 'x-hub-signature-256');
    if (hub?.startsWith('sha256=')) given = hub.slice('sha256='.length);
  }
  if (given === undefined || !HEX64.test(given)) return false;
  const expected = createHmac('sha256', secret).update(rawBody).digest();
  const actual = Buffer.from(given, 'hex');
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}

interface RepoPayload {
  name: string;
  full_name: string;
  owner: { login: string };
}

interface Payload {
  action?: string;
  number?: number;
  issue?: GiteaIssue;
  pull_request?: GiteaPull;
  comment?: {
    id: number;
    body: string;
    user: GiteaUser;
    html_url?: string;
    created_at: string;
    updated_at: string;
  };
  repository?: RepoPayload;
  sender?: GiteaUser;
  is_pull?: boolean;
  review?: { type: string; content: string } | null;
  commit_id?: string;
}

const shortHash = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 16);

/**
 * Normalise a Gitea (or Forgejo) delivery into a `ForgeEvent`, dispatching on both
 * `X-Gitea-Event` and `X-Gitea-Event-Type` (the string `pull_request_comment` means
 * an ordinary PR comment as an event type, but a comment review as an event).
 */
export function parseGiteaWebhook(
  headers: WebhookHeaders,
  rawBody: Uint8Array | string,
): ParsedWebhook {
  const deliveryId = first(headers, ['x-gitea-delivery', 'x-forgejo-delivery', 'x-gogs-delivery']);
  const contentType = header(headers, 'content-type') ?? '';
  if (!/^application\/json\b/i.test(contentType)) {
    throw new BbError(
      'INVALID_INPUT',
      `webhook content type ${JSON.stringify(contentType)} is not supported: set the hook's content type to application/json`,
      { data: { deliveryId } },
    );
  }
  const event = first(headers, ['x-gitea-event', 'x-forgejo-event', 'x-gogs-event']);
  const eventType =
    first(headers, ['x-gitea-event-type', 'x-forgejo-event-type', 'x-gogs-event-type']) ?? event;
  if (!event) {
    throw new BbError(
      'INVALID_INPUT',
      'webhook has no X-Gitea-Event header: is this a Gitea hook?',
      {
        data: { deliveryId },
      },
    );
  }
  let body: Payload;
  try {
    body = JSON.parse(
      typeof rawBody === 'string' ? rawBody : Buffer.from(rawBody).toString('utf8'),
    ) as Payload;
  } catch (err) {
    throw new BbError(
      'INVALID_INPUT',
      `webhook body is not valid JSON: ${(err as Error).message}`,
      {
        data: { deliveryId },
      },
    );
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new BbError('INVALID_INPUT', 'webhook body is not a JSON object', {
      data: { deliveryId },
    });
  }
  const ignored = (reason: string): ParsedWebhook => ({ kind: 'ignored', reason, deliveryId });
  const repo = body.repository;
  if (!repo?.owner?.login || !repo.name) return ignored(`${event} delivery has no repository`);
  const owner = repo.owner.login;
  const name = repo.name;
  const sender = body.sender
    ? { id: body.sender.id, login: body.sender.login }
    : { id: 0, login: '' };
  const base = { deliveryId, owner, repo: name, sender };
  const keyPrefix = `gitea:${owner}/${name}`;
  const action = body.action ?? '';

  try {
    switch (event) {
      case 'issues': {
        const issue = need(body.issue, 'issue');
        const ref = issueRef(issue);
        if (action === 'closed') {
          return {
            ...base,
            kind: 'issue_closed',
            key: `${keyPrefix}:issue#${issue.number}:closed:${issue.closed_at ?? issue.updated_at}`,
            occurredAt: issue.closed_at ?? issue.updated_at,
            issue: ref,
          };
        }
        const targeting = [
          'opened',
          'reopened',
          'edited',
          'assigned',
          'unassigned',
          'label_updated',
          'label_cleared',
        ];
        if (!targeting.includes(action))
          return ignored(`issues/${action} does not change targeting`);
        return {
          ...base,
          kind: 'issue_targeting_changed',
          action: action as 'opened',
          key: `${keyPrefix}:issue#${issue.number}:${action}:${issue.updated_at}:${shortHash(JSON.stringify([ref.labels, ref.assignees, ref.state, issue.title]))}`,
          occurredAt: issue.updated_at,
          issue: ref,
        };
      }
      case 'issue_comment': {
        if (action !== 'created') return ignored(`comment ${action || 'change'} is not acted on`);
        const issue = need(body.issue, 'issue');
        const comment = need(body.comment, 'comment');
        const onPr =
          body.is_pull === true || eventType === 'pull_request_comment' || !!issue.pull_request;
        return {
          ...base,
          kind: 'comment_created',
          key: commentCreatedKey('gitea', owner, name, comment.id),
          occurredAt: comment.created_at,
          on: onPr ? 'pr' : 'issue',
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
          case 'synchronized':
            return {
              ...base,
              kind: 'pr_synchronized',
              key: `${keyPrefix}:pr#${pr.number}:sync:${pr.head.sha}`,
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
      case 'pull_request_approved':
      case 'pull_request_rejected':
      case 'pull_request_comment': {
        // As an *event*, pull_request_comment is a comment review. Its event type
        // says which review; an ordinary PR comment arrives as issue_comment.
        const pr = need(body.pull_request, 'pull_request');
        const type = body.review?.type ?? eventType ?? event;
        const state = type.endsWith('approved')
          ? 'approved'
          : type.endsWith('rejected')
            ? 'changes_requested'
            : 'commented';
        const content = body.review?.content ?? '';
        return {
          ...base,
          kind: 'review_submitted',
          key: `${keyPrefix}:pr#${pr.number}:review:${state}:${sender.login}:${pr.updated_at}:${shortHash(content)}`,
          occurredAt: pr.updated_at,
          pr: prRef(pr),
          state,
          author: sender.login,
          body: content,
          ...(pr.html_url ? { url: pr.html_url } : {}),
        };
      }
      case 'push':
        return ignored(
          'push events are not acted on (PR updates arrive as pull_request/synchronized)',
        );
      default:
        return ignored(`event ${event}/${eventType} is not acted on`);
    }
  } catch (err) {
    if (err instanceof MissingField) {
      throw new BbError(
        'INVALID_INPUT',
        `${event} delivery lacks the ${err.field} object Gitea always sends`,
        {
          data: { deliveryId },
        },
      );
    }
    throw err;
  }
}

class MissingField extends Error {
  constructor(readonly field: string) {
    super(field);
  }
}

function need<T>(value: T | undefined | null, field: string): T {
  if (value === undefined || value === null || typeof value !== 'object')
    throw new MissingField(field);
  return value;
}

function issueRef(i: GiteaIssue): IssueRef {
  return {
    number: i.number,
    title: i.title,
    labels: (i.labels ?? []).map((l) => l.name),
    assignees: (i.assignees ?? []).map((a) => a.login),
    state: i.state === 'closed' ? 'closed' : 'open',
  };
}

function prRef(p: GiteaPull): PrRef {
  return {
    number: p.number,
    title: p.title,
    body: p.body ?? '',
    state: p.state === 'closed' ? 'closed' : 'open',
    head: p.head?.ref ?? '',
    headSha: p.head?.sha ?? '',
    base: p.base?.ref ?? '',
    author: p.user?.login ?? '',
  };
}

export type { ForgeEvent };
