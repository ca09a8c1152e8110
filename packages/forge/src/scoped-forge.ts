import { BbError } from '@bb/errors';
import { Forge } from './forge';
import type {
  Comment,
  Issue,
  OpenPrInput,
  Permission,
  PullRequest,
  Review,
  ReviewComment,
} from './types';

export type ScopedOp = 'postComment' | 'updateDescription' | 'openPr';

export interface ForgeScopeErrorData {
  op: ScopedOp;
  target: number | string;
  reason: string;
}

/** A write outside the bottle's scope. Code `SCOPE_DENIED`; nothing reached the forge. */
export class ForgeScopeError extends BbError<ForgeScopeErrorData> {
  constructor(data: ForgeScopeErrorData) {
    super(
      'SCOPE_DENIED',
      `${data.op} on ${typeof data.target === 'number' ? `#${data.target}` : data.target} denied: ${data.reason}`,
      {
        data,
      },
    );
  }
}

export interface ScopedForgeOptions {
  /** The issue the bottle was launched for. */
  issue: number;
  /** PRs already known to belong to that issue (e.g. after a restart). */
  prs?: number[];
  /** The bottle's own branch; when set, `openPr` accepts only this head. */
  branch?: string;
}

/**
 * Wraps any `Forge` with one bottle's write scope: reads go anywhere in the
 * repository; comments and description edits only to the assigned issue and its
 * PRs; `openPr` only for the assigned issue, after which the new PR joins the
 * scope. A denied write throws `ForgeScopeError` before any request is made.
 */
export class ScopedForge extends Forge {
  readonly kind: string;
  readonly owner: string;
  readonly repo: string;
  readonly issue: number;
  readonly #inner: Forge;
  readonly #prs: Set<number>;
  readonly #branch: string | undefined;

  constructor(inner: Forge, options: ScopedForgeOptions) {
    super();
    if (!Number.isSafeInteger(options.issue) || options.issue <= 0) {
      throw new BbError(
        'INVALID_INPUT',
        `ScopedForge needs a positive issue number, got ${String(options.issue)}`,
      );
    }
    this.#inner = inner;
    this.kind = inner.kind;
    this.owner = inner.owner;
    this.repo = inner.repo;
    this.issue = options.issue;
    this.#prs = new Set(options.prs ?? []);
    this.#branch = options.branch;
  }

  /** The issue and PR numbers writes may target now. */
  get scope(): number[] {
    return [this.issue, ...[...this.#prs].sort((a, b) => a - b)];
  }

  inScope(n: number): boolean {
    return n === this.issue || this.#prs.has(n);
  }

  /** Add a PR to the scope (e.g. one found through `getPrForIssue` after a restart). */
  addPr(n: number): void {
    this.#prs.add(n);
  }

  readIssue(n: number): Promise<Issue> {
    return this.#inner.readIssue(n);
  }
  readPr(n: number): Promise<PullRequest> {
    return this.#inner.readPr(n);
  }
  readComments(n: number): Promise<Comment[]> {
    return this.#inner.readComments(n);
  }
  listOpenIssues(): Promise<Issue[]> {
    return this.#inner.listOpenIssues();
  }
  isOrgMember(org: string, user: string): Promise<boolean> {
    return this.#inner.isOrgMember(org, user);
  }
  getPrForIssue(n: number): Promise<number | undefined> {
    return this.#inner.getPrForIssue(n);
  }
  readReviews(n: number): Promise<Review[]> {
    return this.#inner.readReviews(n);
  }
  readReviewComments(n: number, reviewId: number): Promise<ReviewComment[]> {
    return this.#inner.readReviewComments(n, reviewId);
  }
  permissionOf(user: string): Promise<Permission> {
    return this.#inner.permissionOf(user);
  }
  override isPrOpen(n: number): Promise<boolean> {
    return this.#inner.isPrOpen(n);
  }
  override gitRemote() {
    return this.#inner.gitRemote();
  }

  /**
   * Throw `ForgeScopeError` when this write would be refused, without making
   * it (for callers that must log a write before attempting it). For `openPr`,
   * `target` is the head branch.
   */
  checkWrite(op: ScopedOp, target: number | string): void {
    if (op === 'openPr') {
      if (this.#branch !== undefined && target !== this.#branch)
        throw new ForgeScopeError({
          op,
          target,
          reason: `this bottle may open a PR only from its own branch ${this.#branch}`,
        });
      return;
    }
    this.#check(op, Number(target));
  }

  async postComment(n: number, body: string): Promise<Comment> {
    this.#check('postComment', n);
    return this.#inner.postComment(n, body);
  }

  async updateDescription(n: number, body: string): Promise<void> {
    this.#check('updateDescription', n);
    return this.#inner.updateDescription(n, body);
  }

  /**
   * Open a PR for the assigned issue. The head must be the bottle's branch (when
   * one was given), and the body is made to reference the issue with a closing
   * keyword if it does not already mention it, so the forge links the two.
   */
  async openPr(input: OpenPrInput): Promise<PullRequest> {
    this.checkWrite('openPr', input.head);
    const mentions = new RegExp(`#${this.issue}(?!\\d)`).test(input.body);
    const body = mentions
      ? input.body
      : `${input.body}${input.body ? '\n\n' : ''}Fixes #${this.issue}`;
    const pr = await this.#inner.openPr({ ...input, body });
    this.#prs.add(pr.number);
    return pr;
  }

  #check(op: ScopedOp, n: number): void {
    if (!this.inScope(n)) {
      throw new ForgeScopeError({
        op,
        target: n,
        reason: `this bottle may write only to issue #${this.issue}${this.#prs.size ? ` and its PRs (${[...this.#prs].map((p) => `#${p}`).join(', ')})` : ' and the PRs it opens'}`,
      });
    }
  }
}
