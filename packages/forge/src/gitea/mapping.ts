import type { Comment, Issue, PullRequest, Review, ReviewComment, User } from '../types';

/** The parts of Gitea's JSON that bot-bottle reads. */
export interface GiteaUser {
  id: number;
  login: string;
}
export interface GiteaLabel {
  name: string;
}
/** What an issue and a pull request share. */
interface GiteaIssueLike {
  number: number;
  title: string;
  body: string | null;
  state: string;
  user: GiteaUser;
  labels: GiteaLabel[] | null;
  assignees: GiteaUser[] | null;
  html_url: string;
  created_at: string;
  updated_at: string;
  closed_at: string | null;
}
export interface GiteaIssue extends GiteaIssueLike {
  pull_request: unknown | null;
}
export interface GiteaBranch {
  ref: string;
  sha: string;
  label?: string;
  repo_id?: number;
  repo?: { full_name?: string } | null;
}
export interface GiteaPull extends GiteaIssueLike {
  head: GiteaBranch;
  base: GiteaBranch;
  merged: boolean;
  merged_at: string | null;
  merge_commit_sha: string | null;
}
export interface GiteaComment {
  id: number;
  body: string;
  user: GiteaUser;
  html_url: string;
  created_at: string;
  updated_at: string;
}
export interface GiteaTimelineItem {
  type: string;
  ref_action?: string;
  ref_issue?: { number: number; pull_request: unknown | null; state?: string } | null;
}

export function toUser(u: GiteaUser): User {
  return { id: u.id, login: u.login };
}

const state = (s: string): 'open' | 'closed' => (s === 'closed' ? 'closed' : 'open');

/** What an issue and a PR map to alike. */
function issueLike(i: GiteaIssueLike): Omit<Issue, 'isPullRequest'> {
  return {
    number: i.number,
    title: i.title,
    body: i.body ?? '',
    state: state(i.state),
    author: toUser(i.user),
    labels: (i.labels ?? []).map((l) => ({ name: l.name })),
    assignees: (i.assignees ?? []).map(toUser),
    url: i.html_url,
    createdAt: i.created_at,
    updatedAt: i.updated_at,
    closedAt: i.closed_at,
  };
}

export function toIssue(i: GiteaIssue): Issue {
  return {
    ...issueLike(i),
    isPullRequest: i.pull_request !== null && i.pull_request !== undefined,
  };
}

export function toPullRequest(p: GiteaPull): PullRequest {
  return {
    ...issueLike(p),
    head: { ref: p.head.ref, sha: p.head.sha },
    base: { ref: p.base.ref, sha: p.base.sha },
    merged: p.merged,
    mergedAt: p.merged_at,
    mergeCommitSha: p.merge_commit_sha,
  };
}

export function toComment(c: GiteaComment): Comment {
  return {
    id: c.id,
    body: c.body,
    author: toUser(c.user),
    url: c.html_url,
    createdAt: c.created_at,
    updatedAt: c.updated_at,
  };
}

export interface GiteaReview {
  id: number;
  user: GiteaUser | null;
  state: string;
  body: string;
  commit_id: string;
  html_url: string;
  submitted_at: string;
}

export interface GiteaReviewComment {
  id: number;
  pull_request_review_id: number;
  path: string;
  /** The line of the new file (0 when the comment is on a removed line). */
  position: number;
  body: string;
  user: GiteaUser | null;
  html_url: string;
  created_at: string;
}

const REVIEW_STATES: Record<string, Review['state']> = {
  APPROVED: 'approved',
  REQUEST_CHANGES: 'changes_requested',
  COMMENT: 'commented',
};

/** A submitted review; `undefined` for drafts (PENDING) and review requests, which nobody submitted. */
export function toReview(r: GiteaReview): Review | undefined {
  const state = REVIEW_STATES[r.state];
  if (!state) return undefined;
  return {
    id: r.id,
    state,
    body: r.body ?? '',
    author: r.user ? toUser(r.user) : { id: 0, login: '' },
    commitId: r.commit_id ?? '',
    url: r.html_url,
    submittedAt: r.submitted_at,
  };
}

export function toReviewComment(c: GiteaReviewComment): ReviewComment {
  return {
    id: c.id,
    reviewId: c.pull_request_review_id,
    path: c.path,
    line: c.position > 0 ? c.position : null,
    body: c.body,
    author: c.user ? toUser(c.user) : { id: 0, login: '' },
    url: c.html_url,
    createdAt: c.created_at,
  };
}
