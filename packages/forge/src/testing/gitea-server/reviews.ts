/**
 * Pull request reviews as Gitea 1.26 has them: a submitted review (approve,
 * request changes, comment) with inline comments on lines of the PR's files,
 * its REST endpoints and the `pull_request_review_*` webhook it sends.
 */
import { type ApiCore, ApiError, type NewReview, type Route } from './api-core';
import type { IssueModel, RepoModel, ReviewCommentModel, ReviewModel, ReviewState } from './model';
import { now } from './model';
import { type ShapeContext, userJson } from './shapes';

const STATE: Record<NewReview['state'], ReviewState> = {
  approved: 'APPROVED',
  changes_requested: 'REQUEST_CHANGES',
  commented: 'COMMENT',
};

/** The hook event type Gitea sends for a review of each state. */
const EVENT_TYPE: Record<ReviewState, string> = {
  APPROVED: 'pull_request_review_approved',
  REQUEST_CHANGES: 'pull_request_review_rejected',
  COMMENT: 'pull_request_review_comment',
};

const prPage = (ctx: ShapeContext, pr: IssueModel) =>
  `${ctx.base}${ctx.repo.owner}/${ctx.repo.name}/pulls/${pr.number}`;

export function reviewJson(ctx: ShapeContext, pr: IssueModel, r: ReviewModel) {
  return {
    id: r.id,
    user: userJson(ctx.base, ctx.user(r.author)),
    team: null,
    state: r.state,
    body: r.body,
    commit_id: r.commitId,
    stale: false,
    official: r.state !== 'COMMENT',
    dismissed: false,
    comments_count: r.comments.length,
    submitted_at: r.submittedAt,
    updated_at: r.submittedAt,
    html_url: `${prPage(ctx, pr)}#issuecomment-${r.id}`,
    pull_request_url: prPage(ctx, pr),
  };
}

export function reviewCommentJson(
  ctx: ShapeContext,
  pr: IssueModel,
  r: ReviewModel,
  c: ReviewCommentModel,
) {
  return {
    id: c.id,
    body: c.body,
    user: userJson(ctx.base, ctx.user(c.author)),
    resolver: null,
    pull_request_review_id: r.id,
    created_at: c.createdAt,
    updated_at: c.updatedAt,
    path: c.path,
    commit_id: c.commitId,
    original_commit_id: c.commitId,
    diff_hunk: `@@ -${Math.max(1, c.line - 1)},1 +${Math.max(1, c.line - 1)},2 @@`,
    position: c.line,
    original_position: c.oldLine,
    html_url: `${prPage(ctx, pr)}/files#issuecomment-${c.id}`,
    pull_request_url: prPage(ctx, pr),
  };
}

/** Submit a review of `pr` as `as`: stored, the PR touched, the review webhook sent. */
export function submitReview(
  core: ApiCore,
  repo: RepoModel,
  pr: IssueModel,
  as: string,
  input: NewReview,
): ReviewModel {
  if (!pr.pull) throw new ApiError(404, core.notFound());
  core.user(as);
  const state = STATE[input.state];
  if (!state) throw new ApiError(422, core.apiError(`unknown review state ${String(input.state)}`));
  const body = input.body ?? '';
  // Gitea: a review that approves nothing and says nothing is refused.
  if (state !== 'APPROVED' && !body.trim() && !input.comments?.length)
    throw new ApiError(422, core.apiError('review event COMMENT requires a body or a comment'));
  if (state !== 'COMMENT' && pr.author === as)
    throw new ApiError(
      422,
      core.apiError(`${state === 'APPROVED' ? 'approve' : 'reject'} your own pull is not allowed`),
    );
  const t = now();
  const id = core.id();
  const review: ReviewModel = {
    id,
    author: as,
    state,
    body,
    commitId: pr.pull.headSha,
    submittedAt: t,
    comments: (input.comments ?? []).map((c) => ({
      id: core.id(),
      author: as,
      body: c.body,
      path: c.path,
      line: c.line,
      oldLine: 0,
      commitId: pr.pull!.headSha,
      createdAt: t,
      updatedAt: t,
    })),
  };
  pr.reviews.push(review);
  core.touch(repo, pr);
  const ctx = core.ctx(repo);
  const eventType = EVENT_TYPE[state];
  core.emit(repo, eventType, {
    ...core.issuePayload(repo, pr, 'reviewed', as),
    requested_reviewer: userJson(ctx.base, ctx.user(as), true),
    review: { type: eventType, content: body },
  });
  return review;
}

function reviewOf(core: ApiCore, pr: IssueModel, id: string): ReviewModel {
  const r = pr.reviews.find((x) => String(x.id) === id);
  if (!r) throw new ApiError(404, core.notFound('GetReviewByID'));
  return r;
}

function pullOf(core: ApiCore, repo: RepoModel, index: string): IssueModel {
  const pr = repo.issues.get(Number(index));
  if (!pr?.pull) throw new ApiError(404, core.notFound('GetPullRequestByIndex'));
  return pr;
}

const EVENTS: Record<string, NewReview['state']> = {
  APPROVED: 'approved',
  REQUEST_CHANGES: 'changes_requested',
  COMMENT: 'commented',
};

export const REVIEW_ROUTES: Route[] = [
  {
    pattern: '/repos/{owner}/{repo}/pulls/{index}/reviews',
    methods: ['GET', 'POST'],
    async handle(core, req) {
      const repo = req.repo();
      const pr = pullOf(core, repo, req.params['index']!);
      const ctx = core.ctx(repo);
      if (req.method === 'GET')
        return core.page(req.url, pr.reviews, (r) => reviewJson(ctx, pr, r));
      const as = req.needUser();
      const b = await req.readJson();
      const event = typeof b['event'] === 'string' ? EVENTS[b['event']] : undefined;
      // A pending review (no event) is a draft nobody else sees: not modelled.
      if (!event)
        throw new ApiError(
          422,
          core.apiError(`review event ${String(b['event'])} is not supported`),
        );
      const comments = Array.isArray(b['comments'])
        ? (b['comments'] as Array<Record<string, unknown>>).map((c) => ({
            path: String(c['path'] ?? ''),
            line: Number(c['new_position'] ?? 0),
            body: String(c['body'] ?? ''),
          }))
        : [];
      const review = submitReview(core, repo, pr, as, {
        state: event,
        body: typeof b['body'] === 'string' ? b['body'] : '',
        comments,
      });
      return { status: 200, body: reviewJson(ctx, pr, review) };
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/pulls/{index}/reviews/{id}',
    methods: ['GET'],
    handle(core, req) {
      const repo = req.repo();
      const pr = pullOf(core, repo, req.params['index']!);
      return { body: reviewJson(core.ctx(repo), pr, reviewOf(core, pr, req.params['id']!)) };
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/pulls/{index}/reviews/{id}/comments',
    methods: ['GET'],
    handle(core, req) {
      const repo = req.repo();
      const pr = pullOf(core, repo, req.params['index']!);
      const review = reviewOf(core, pr, req.params['id']!);
      const ctx = core.ctx(repo);
      return { body: review.comments.map((c) => reviewCommentJson(ctx, pr, review, c)) };
    },
  },
];
