/** GitHub's JSON as bot-bottle's forge types. */
import { BbError } from '@bb/errors';
import type { Issue, PullRequest, Review } from '../types';

export interface GhUser {
  id: number;
  login: string;
}
export interface GhIssue {
  number: number;
  title: string;
  body?: string | null;
  state: string;
  user: GhUser | null;
  labels: Array<string | { name?: string }>;
  assignees?: GhUser[] | null;
  pull_request?: unknown;
  html_url: string;
  created_at: string;
  updated_at: string;
  closed_at: string | null;
}
export interface GhPull extends Omit<GhIssue, 'pull_request' | 'labels'> {
  labels: Array<{ name?: string }>;
  head: { ref: string; sha: string; repo: { full_name: string } | null };
  base: { ref: string; sha: string };
  merged?: boolean;
  merged_at: string | null;
  merge_commit_sha: string | null;
}

export const user = (u: GhUser | null | undefined) =>
  u ? { id: u.id, login: u.login } : { id: 0, login: '' };

function issueLike(i: GhIssue | GhPull) {
  return {
    number: i.number,
    title: i.title,
    body: i.body ?? '',
    state: (i.state === 'closed' ? 'closed' : 'open') as 'open' | 'closed',
    author: user(i.user),
    labels: i.labels.map((l) => ({ name: typeof l === 'string' ? l : (l.name ?? '') })),
    assignees: (i.assignees ?? []).map(user),
    url: i.html_url,
    createdAt: i.created_at,
    updatedAt: i.updated_at,
    closedAt: i.closed_at,
  };
}

export const toIssue = (i: GhIssue): Issue => ({
  ...issueLike(i),
  isPullRequest: !!i.pull_request,
});

export const toPull = (p: GhPull): PullRequest => ({
  ...issueLike(p),
  head: { ref: p.head.ref, sha: p.head.sha },
  base: { ref: p.base.ref, sha: p.base.sha },
  // A listed PR has no `merged`; its merge time says the same.
  merged: p.merged ?? p.merged_at !== null,
  mergedAt: p.merged_at,
  mergeCommitSha: p.merge_commit_sha,
});

export const REVIEW_STATES: Record<string, Review['state']> = {
  APPROVED: 'approved',
  CHANGES_REQUESTED: 'changes_requested',
  COMMENTED: 'commented',
};

/** `n` as an issue or PR number, or INVALID_INPUT naming it. */
export const positive = (n: number, what: string) => {
  if (!Number.isSafeInteger(n) || n <= 0)
    throw new BbError('INVALID_INPUT', `${what} must be a positive whole number, got ${String(n)}`);
};
