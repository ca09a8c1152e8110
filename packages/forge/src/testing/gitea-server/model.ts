/** The in-memory world of the Gitea-compatible test server. */

export interface SeedUser {
  login: string;
  fullName?: string;
  email?: string;
  isAdmin?: boolean;
  /** Personal access tokens of this user (with every scope). */
  tokens?: string[];
  /**
   * Tokens with only these scopes (Gitea's `read:issue`, `write:repository`,
   * ...): a request outside them is answered 403 as Gitea does.
   */
  scopedTokens?: Record<string, string[]>;
}

export interface SeedOrg {
  name: string;
  fullName?: string;
  members: string[];
  /** Members whose membership is public (visible to non-members). */
  publicMembers?: string[];
}

export interface SeedRepo {
  owner: string;
  name: string;
  description?: string;
  defaultBranch?: string;
  /** Files of the first commit on the default branch. @default { 'README.md': '# <name>\n' } */
  files?: Record<string, string>;
  /** Users (besides the owner and, for an org, its members) who may write. */
  collaborators?: string[];
  /** Users (besides the owner) who administer the repository. */
  admins?: string[];
}

export interface SeedLabel {
  repo: string;
  name: string;
  color?: string;
  description?: string;
}

export interface SeedIssue {
  /** `owner/name` */
  repo: string;
  title: string;
  body?: string;
  author: string;
  labels?: string[];
  assignees?: string[];
}

/** What a test server starts with. Users named by orgs/repos must be listed. */
export interface GiteaWorldSeed {
  users?: SeedUser[];
  orgs?: SeedOrg[];
  repos?: SeedRepo[];
  labels?: SeedLabel[];
  issues?: SeedIssue[];
}

export interface UserModel {
  id: number;
  login: string;
  fullName: string;
  email: string;
  isAdmin: boolean;
  isOrg: boolean;
  created: string;
  lastLogin: string;
}

export interface OrgModel {
  name: string;
  members: Set<string>;
  publicMembers: Set<string>;
}

export interface LabelModel {
  id: number;
  name: string;
  color: string;
  description: string;
}

export interface ReactionModel {
  user: string;
  content: string;
  createdAt: string;
}

export interface CommentModel {
  id: number;
  author: string;
  body: string;
  createdAt: string;
  updatedAt: string;
  reactions?: ReactionModel[];
}

/** An inline comment of a review, on one line of one file. */
export interface ReviewCommentModel {
  id: number;
  author: string;
  body: string;
  path: string;
  /** The line in the new file (0 when the comment is on an old line). */
  line: number;
  /** The line in the old file (0 when the comment is on a new line). */
  oldLine: number;
  commitId: string;
  createdAt: string;
  updatedAt: string;
}

export type ReviewState = 'APPROVED' | 'REQUEST_CHANGES' | 'COMMENT';

export interface ReviewModel {
  id: number;
  author: string;
  state: ReviewState;
  body: string;
  commitId: string;
  submittedAt: string;
  comments: ReviewCommentModel[];
  /** Gitea keeps a review's text as a comment: reactions go on it by the review's id. */
  reactions?: ReactionModel[];
}

export interface TimelineModel {
  id: number;
  type: 'comment' | 'label' | 'assignees' | 'pull_ref' | 'close' | 'reopen' | 'merge_pull';
  actor: string;
  createdAt: string;
  body?: string;
  label?: string;
  labelRemoved?: boolean;
  assignee?: string;
  removedAssignee?: boolean;
  /** For pull_ref: the referencing PR's number and the action (closes, none, ...). */
  refIssue?: number;
  refAction?: string;
  commentId?: number;
}

export interface PullModel {
  id: number;
  headRef: string;
  baseRef: string;
  headSha: string;
  baseSha: string;
  mergeBase: string;
  merged: boolean;
  mergedAt: string | null;
  mergedBy: string | null;
  mergeCommitSha: string | null;
}

export interface IssueModel {
  id: number;
  number: number;
  title: string;
  body: string;
  author: string;
  labels: string[];
  assignees: string[];
  state: 'open' | 'closed';
  createdAt: string;
  updatedAt: string;
  closedAt: string | null;
  comments: CommentModel[];
  timeline: TimelineModel[];
  pull: PullModel | null;
  /** Reviews of a PR, oldest first (empty for an issue). */
  reviews: ReviewModel[];
  reactions: ReactionModel[];
}

export interface RepoModel {
  id: number;
  owner: string;
  name: string;
  description: string;
  defaultBranch: string;
  collaborators: Set<string>;
  admins: Set<string>;
  labels: Map<string, LabelModel>;
  issues: Map<number, IssueModel>;
  nextNumber: number;
  createdAt: string;
  updatedAt: string;
  gitDir: string;
}

export interface HookModel {
  id: number;
  url: string;
  secret: string;
  /** Gitea hook events: `issues`, `issue_comment`, `pull_request`, `push`, ... (empty: push only). */
  events: string[];
  /** Which level the hook is installed at; a repo and an org hook may both fire. */
  level: 'repository' | 'organization';
  active: boolean;
}

/** Gitea's timestamps: RFC 3339, whole seconds, UTC. */
export function now(): string {
  return new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
}
