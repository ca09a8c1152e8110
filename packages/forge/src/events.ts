import type { User } from './types';

/** Fields every normalised webhook event carries. */
interface EventBase {
  /**
   * A key that names the change itself, not the delivery: equal for a replay
   * (which gets a new delivery id) and for the same change arriving through a
   * second hook level. Use it for the delivery ledger.
   */
  key: string;
  /** The forge's delivery id, for logs only. */
  deliveryId: string | undefined;
  owner: string;
  repo: string;
  sender: User;
  /** When the forge says the change happened (ISO 8601); orders events of one issue. */
  occurredAt: string;
}

export interface IssueRef {
  number: number;
  title: string;
  labels: string[];
  assignees: string[];
  state: 'open' | 'closed';
}

export interface PrRef {
  number: number;
  title: string;
  body: string;
  state: 'open' | 'closed';
  head: string;
  headSha: string;
  base: string;
  author: string;
}

/** An issue's labels, assignees or state changed: decide again whether it is targeted. */
export interface IssueTargetingChanged extends EventBase {
  kind: 'issue_targeting_changed';
  action:
    | 'opened'
    | 'reopened'
    | 'edited'
    | 'assigned'
    | 'unassigned'
    | 'label_updated'
    | 'label_cleared';
  issue: IssueRef;
}

export interface IssueClosed extends EventBase {
  kind: 'issue_closed';
  issue: IssueRef;
}

export interface PrOpened extends EventBase {
  kind: 'pr_opened';
  pr: PrRef;
}

export interface PrSynchronized extends EventBase {
  kind: 'pr_synchronized';
  pr: PrRef;
}

export interface PrClosed extends EventBase {
  kind: 'pr_closed';
  pr: PrRef;
  merged: boolean;
  mergeCommitSha: string | null;
}

export interface PrReopened extends EventBase {
  kind: 'pr_reopened';
  pr: PrRef;
}

export interface CommentCreated extends EventBase {
  kind: 'comment_created';
  /** Whether the comment is on an issue or on a PR's conversation. */
  on: 'issue' | 'pr';
  number: number;
  comment: { id: number; author: string; body: string; url?: string };
}

export interface ReviewSubmitted extends EventBase {
  kind: 'review_submitted';
  pr: PrRef;
  state: 'approved' | 'changes_requested' | 'commented';
  author: string;
  body: string;
  /** The PR's page. */
  url?: string;
}

/**
 * The ledger key of "comment `id` was created", the same whether the change
 * came from a webhook or from a reconcile sweep over the REST API, so each
 * comment is acted on once. `kind` is the forge's `Forge.kind`.
 */
export function commentCreatedKey(kind: string, owner: string, repo: string, id: number): string {
  return `${kind}:${owner}/${repo}:comment#${id}:created`;
}

/** A forge-agnostic webhook event. */
export type ForgeEvent =
  | IssueTargetingChanged
  | IssueClosed
  | PrOpened
  | PrSynchronized
  | PrClosed
  | PrReopened
  | CommentCreated
  | ReviewSubmitted;

export type ForgeEventKind = ForgeEvent['kind'];

/** A delivery that was understood but needs no action, with the reason. */
export interface IgnoredEvent {
  kind: 'ignored';
  reason: string;
  deliveryId: string | undefined;
}

export type ParsedWebhook = ForgeEvent | IgnoredEvent;

/** Header names lowercased; values as strings (first of repeated headers). */
export type WebhookHeaders = Record<string, string | string[] | undefined> | Headers;

/** Read a header from either a Fetch `Headers` or a node-style record. */
export function header(headers: WebhookHeaders, name: string): string | undefined {
  if (typeof (headers as Headers).get === 'function') {
    return (headers as Headers).get(name) ?? undefined;
  }
  const lower = name.toLowerCase();
  for (const [k, v] of Object.entries(headers as Record<string, string | string[] | undefined>)) {
    if (k.toLowerCase() === lower) return Array.isArray(v) ? v[0] : v;
  }
  return undefined;
}
