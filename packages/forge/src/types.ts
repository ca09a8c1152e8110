import { z } from 'zod';

/** A forge account (a person, a bot or an organisation). */
export const UserSchema = z.object({
  id: z.number().int(),
  login: z.string().min(1),
});
export type User = z.infer<typeof UserSchema>;

export const LabelSchema = z.object({
  name: z.string(),
});
export type Label = z.infer<typeof LabelSchema>;

const time = z.string();

/** An issue. A forge that treats PRs as issues reports them with `isPullRequest: true`. */
export const IssueSchema = z.object({
  number: z.number().int().positive(),
  title: z.string(),
  body: z.string(),
  state: z.enum(['open', 'closed']),
  author: UserSchema,
  labels: z.array(LabelSchema),
  assignees: z.array(UserSchema),
  isPullRequest: z.boolean(),
  url: z.string(),
  createdAt: time,
  updatedAt: time,
  closedAt: time.nullable(),
});
export type Issue = z.infer<typeof IssueSchema>;

export const BranchRefSchema = z.object({
  ref: z.string(),
  sha: z.string(),
});
export type BranchRef = z.infer<typeof BranchRefSchema>;

/** A pull request: an issue's fields plus where it goes and whether it merged. */
export const PullRequestSchema = IssueSchema.omit({ isPullRequest: true }).extend({
  head: BranchRefSchema,
  base: BranchRefSchema,
  merged: z.boolean(),
  mergedAt: time.nullable(),
  mergeCommitSha: z.string().nullable(),
});
export type PullRequest = z.infer<typeof PullRequestSchema>;

export const CommentSchema = z.object({
  id: z.number().int(),
  body: z.string(),
  author: UserSchema,
  url: z.string(),
  createdAt: time,
  updatedAt: time,
});
export type Comment = z.infer<typeof CommentSchema>;

/** What `openPr` needs. `head` is the branch already pushed. */
export const OpenPrInputSchema = z.object({
  title: z.string().min(1, 'a PR needs a title').max(255),
  body: z.string().max(65_535),
  head: z.string().min(1),
  base: z.string().min(1),
});
export type OpenPrInput = z.infer<typeof OpenPrInputSchema>;

/** Which repository a forge instance works on. */
export interface RepoRef {
  owner: string;
  repo: string;
}

/** A submitted review of a PR. */
export const ReviewSchema = z.object({
  id: z.number().int(),
  state: z.enum(['approved', 'changes_requested', 'commented']),
  body: z.string(),
  author: UserSchema,
  /** The PR head the review was made on. */
  commitId: z.string(),
  url: z.string(),
  submittedAt: time,
});
export type Review = z.infer<typeof ReviewSchema>;

/** An inline comment of a review: a text on one line of one file. */
export const ReviewCommentSchema = z.object({
  id: z.number().int(),
  reviewId: z.number().int(),
  path: z.string(),
  /** The line of the new file it is on; `null` when it is on a removed line. */
  line: z.number().int().nullable(),
  body: z.string(),
  author: UserSchema,
  url: z.string(),
  createdAt: time,
});
export type ReviewComment = z.infer<typeof ReviewCommentSchema>;

/** What a user may do in a repository, weakest first. */
export const PERMISSIONS = ['none', 'read', 'write', 'admin'] as const;
export type Permission = (typeof PERMISSIONS)[number];

/** A reaction the bot may leave on a comment (a subset every forge knows). */
export type Reaction = 'eyes' | '+1' | 'rocket';
