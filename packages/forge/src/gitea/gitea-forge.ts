import { BbError, isBbError } from '@bb/errors';
import { Forge, type GitRemote } from '../forge';
import { BOTTLE_BRANCH } from '../kind';
import {
  type Comment,
  type Issue,
  type OpenPrInput,
  OpenPrInputSchema,
  PERMISSIONS,
  type Permission,
  type PullRequest,
  type Reaction,
  type Review,
  type ReviewComment,
} from '../types';
import { GiteaClient, type GiteaClientOptions, giteaCloneUrl } from './client';
import {
  type GiteaComment,
  type GiteaIssue,
  type GiteaPull,
  type GiteaReview,
  type GiteaReviewComment,
  type GiteaTimelineItem,
  type GiteaUser,
  toComment,
  toIssue,
  toPullRequest,
  toReview,
  toReviewComment,
} from './mapping';

export interface GiteaForgeOptions {
  owner: string;
  repo: string;
  /** A client to share; otherwise one is made from `baseUrl` and `token`. */
  client?: GiteaClient;
  baseUrl?: string;
  token?: string | undefined;
  clientOptions?: Omit<GiteaClientOptions, 'baseUrl' | 'token'>;
  /** Called when the forge cannot tell something (e.g. org membership answered 303). */
  onWarning?: (message: string) => void;
}

const positive = (n: number, what: string) => {
  if (!Number.isSafeInteger(n) || n <= 0) {
    throw new BbError('INVALID_INPUT', `${what} must be a positive whole number, got ${String(n)}`);
  }
};

/** `Forge` for Gitea (and Forgejo) through its REST API. */
export class GiteaForge extends Forge {
  readonly kind = 'gitea';
  readonly owner: string;
  readonly repo: string;
  readonly client: GiteaClient;
  readonly #warn: (message: string) => void;

  constructor(options: GiteaForgeOptions) {
    super();
    this.owner = options.owner;
    this.repo = options.repo;
    if (!options.client && !options.baseUrl) {
      throw new BbError(
        'INVALID_INPUT',
        'GiteaForge needs a client or a baseUrl (FORGE_GITEA_API)',
      );
    }
    this.client =
      options.client ??
      new GiteaClient({
        baseUrl: options.baseUrl!,
        token: options.token,
        ...options.clientOptions,
      });
    this.#warn = options.onWarning ?? (() => {});
  }

  get #repoPath(): string {
    return `/repos/${encodeURIComponent(this.owner)}/${encodeURIComponent(this.repo)}`;
  }

  async readIssue(n: number): Promise<Issue> {
    positive(n, 'issue number');
    const res = await this.#notFound(`issue #${n}`, () =>
      this.client.request<GiteaIssue>({ method: 'GET', path: `${this.#repoPath}/issues/${n}` }),
    );
    return toIssue(res.body);
  }

  async readPr(n: number): Promise<PullRequest> {
    positive(n, 'PR number');
    const res = await this.#notFound(`PR #${n}`, () =>
      this.client.request<GiteaPull>({ method: 'GET', path: `${this.#repoPath}/pulls/${n}` }),
    );
    return toPullRequest(res.body);
  }

  override async defaultBranchHead(): Promise<string | undefined> {
    try {
      const repo = await this.client.request<{ default_branch?: string; empty?: boolean }>({
        method: 'GET',
        path: this.#repoPath,
      });
      const name = repo.body.default_branch;
      if (!name || repo.body.empty) return undefined;
      const branch = await this.client.request<{ commit?: { id?: string } }>({
        method: 'GET',
        path: `${this.#repoPath}/branches/${encodeURIComponent(name)}`,
      });
      const id = branch.body.commit?.id;
      return id && /^[0-9a-f]{40}([0-9a-f]{24})?$/.test(id) ? id : undefined;
    } catch {
      // Not told: the caller asks the forge's git.
      return undefined;
    }
  }

  async readComments(n: number): Promise<Comment[]> {
    positive(n, 'issue number');
    // Gitea answers 500 (not 404) for comments of a missing issue: ask about the
    // issue itself before trusting a 5xx.
    try {
      const res = await this.client.request<GiteaComment[] | null>({
        method: 'GET',
        path: `${this.#repoPath}/issues/${n}/comments`,
      });
      return (res.body ?? []).map(toComment);
    } catch (err) {
      if (isBbError(err, 'FORGE_UNAVAILABLE') || isBbError(err, 'NOT_FOUND'))
        await this.readIssue(n);
      throw err;
    }
  }

  async listOpenIssues(): Promise<Issue[]> {
    const out: Issue[] = [];
    for await (const i of this.client.paginate<GiteaIssue>(`${this.#repoPath}/issues`, {
      state: 'open',
      type: 'issues',
    }))
      out.push(toIssue(i));
    return out;
  }

  async postComment(n: number, body: string): Promise<Comment> {
    positive(n, 'issue number');
    if (typeof body !== 'string' || body.trim().length === 0) {
      throw new BbError('INVALID_INPUT', 'a comment needs a non-empty body');
    }
    try {
      const res = await this.client.request<GiteaComment>({
        method: 'POST',
        path: `${this.#repoPath}/issues/${n}/comments`,
        body: { body },
      });
      return toComment(res.body);
    } catch (err) {
      if (isBbError(err, 'FORGE_UNAVAILABLE') || isBbError(err, 'NOT_FOUND'))
        await this.readIssue(n);
      throw err;
    }
  }

  async updateDescription(n: number, body: string): Promise<void> {
    positive(n, 'issue number');
    if (typeof body !== 'string')
      throw new BbError('INVALID_INPUT', 'a description must be a string');
    // Gitea answers PATCH /issues/{n} with 201 (not 200); PRs are issues here too.
    await this.#notFound(`issue #${n}`, () =>
      this.client.request(
        { method: 'PATCH', path: `${this.#repoPath}/issues/${n}`, body: { body } },
        [200, 201],
      ),
    );
  }

  async openPr(input: OpenPrInput): Promise<PullRequest> {
    const parsed = OpenPrInputSchema.safeParse(input);
    if (!parsed.success) {
      throw new BbError(
        'INVALID_INPUT',
        `invalid PR: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
      );
    }
    const { head, base, title, body } = parsed.data;
    try {
      const res = await this.client.request<GiteaPull>(
        { method: 'POST', path: `${this.#repoPath}/pulls`, body: { head, base, title, body } },
        [201],
      );
      return toPullRequest(res.body);
    } catch (err) {
      if (isBbError(err, 'CONFLICT')) {
        throw new BbError('CONFLICT', `an open PR from ${head} into ${base} already exists`, {
          cause: err,
          data: { head, base },
        });
      }
      throw err;
    }
  }

  async isOrgMember(org: string, user: string): Promise<boolean> {
    const res = await this.client.request(
      {
        method: 'GET',
        path: `/orgs/${encodeURIComponent(org)}/members/${encodeURIComponent(user)}`,
      },
      [204, 404, 303, 302],
    );
    if (res.status === 204) return true;
    if (res.status === 404) return false;
    // 303: the token's user is not a member of the org, so Gitea will not say.
    // That is a misconfiguration, never a membership.
    const message = `cannot tell whether ${user} is a member of ${org}: Gitea redirected (${res.status}) because the token's user is not a member of ${org}; use a token of an ${org} member`;
    this.#warn(message);
    throw new BbError('FORGE_ERROR', message, { data: { org, user, status: res.status } });
  }

  async getPrForIssue(n: number): Promise<number | undefined> {
    positive(n, 'issue number');
    // The timeline's pull_ref items with ref_action "closes" are what Gitea itself
    // uses to close the issue on merge.
    const candidates: number[] = [];
    for (let page = 1; page <= 20; page++) {
      const res = await this.#notFound(`issue #${n}`, () =>
        this.client.request<GiteaTimelineItem[] | null>({
          method: 'GET',
          path: `${this.#repoPath}/issues/${n}/timeline`,
          query: { page, limit: 50 },
        }),
      );
      const items = res.body ?? [];
      for (const item of items) {
        if (
          item.type === 'pull_ref' &&
          item.ref_action === 'closes' &&
          item.ref_issue?.pull_request
        ) {
          candidates.push(item.ref_issue.number);
        }
      }
      if (items.length < 50) break;
    }
    if (candidates.length > 0) {
      // Prefer an open PR; otherwise the most recent reference.
      for (const c of [...candidates].reverse()) {
        try {
          if (await this.isPrOpen(c)) return c;
        } catch (err) {
          if (!isBbError(err, 'NOT_FOUND')) throw err;
        }
      }
      return candidates.at(-1);
    }
    // Fall back to the bottle branch convention bb/<agent>-<issue>.
    for await (const pr of this.client.paginate<GiteaPull>(`${this.#repoPath}/pulls`, {
      state: 'all',
    })) {
      const m = BOTTLE_BRANCH.exec(pr.head.ref);
      if (m && Number(m[1]) === n) return pr.number;
    }
    return undefined;
  }

  async readReviews(n: number): Promise<Review[]> {
    positive(n, 'PR number');
    await this.readPr(n);
    const out: Review[] = [];
    for await (const r of this.client.paginate<GiteaReview>(
      `${this.#repoPath}/pulls/${n}/reviews`,
    )) {
      const review = toReview(r);
      if (review) out.push(review);
    }
    return out;
  }

  async readReviewComments(n: number, reviewId: number): Promise<ReviewComment[]> {
    positive(n, 'PR number');
    positive(reviewId, 'review id');
    const res = await this.#notFound(`review ${reviewId} of PR #${n}`, () =>
      this.client.request<GiteaReviewComment[] | null>({
        method: 'GET',
        path: `${this.#repoPath}/pulls/${n}/reviews/${reviewId}/comments`,
      }),
    );
    return (res.body ?? []).map(toReviewComment);
  }

  async permissionOf(user: string): Promise<Permission> {
    if (typeof user !== 'string' || !/^[A-Za-z0-9_.-]{1,64}$/.test(user))
      throw new BbError('INVALID_INPUT', `${JSON.stringify(user)} is not a user name`);
    let res: { body: { permission?: string } };
    try {
      res = await this.client.request<{ permission?: string }>({
        method: 'GET',
        path: `${this.#repoPath}/collaborators/${encodeURIComponent(user)}/permission`,
      });
    } catch (err) {
      if (isBbError(err, 'FORBIDDEN'))
        throw new BbError(
          'FORBIDDEN',
          `cannot tell what ${user} may do in ${this.owner}/${this.repo}: Gitea tells only a repository admin; make the bot an admin of ${this.owner}/${this.repo} (or rely on org membership)`,
          { cause: err, data: { user } },
        );
      throw err;
    }
    const p = res.body.permission === 'owner' ? 'admin' : res.body.permission;
    return (PERMISSIONS as readonly string[]).includes(p ?? '') ? (p as Permission) : 'none';
  }

  override async react(
    target: { comment: number } | { issue: number } | { review: number; pr: number },
    reaction: Reaction,
  ): Promise<boolean> {
    let comment = 'comment' in target ? target.comment : undefined;
    if ('review' in target) {
      // A review's text is a comment of its own, named in the review's page anchor.
      const reviews = await this.readReviews(target.pr);
      const url = reviews.find((r) => r.id === target.review)?.url ?? '';
      const id = /#issuecomment-(\d+)$/.exec(url)?.[1];
      if (!id) return false;
      comment = Number(id);
    }
    const path =
      comment !== undefined
        ? `${this.#repoPath}/issues/comments/${comment}/reactions`
        : `${this.#repoPath}/issues/${(target as { issue: number }).issue}/reactions`;
    await this.client.request({ method: 'POST', path, body: { content: reaction } }, [200, 201]);
    return true;
  }

  override async addLabels(n: number, names: string[]): Promise<boolean> {
    positive(n, 'issue number');
    if (names.length === 0) return true;
    await this.#notFound(`issue #${n}`, () =>
      this.client.request({
        method: 'POST',
        path: `${this.#repoPath}/issues/${n}/labels`,
        body: { labels: names },
      }),
    );
    return true;
  }

  override async findPrs(query: {
    head: string;
    base: string;
    state?: 'open' | 'all';
  }): Promise<PullRequest[]> {
    const state = query.state ?? 'open';
    const full = `${this.owner}/${this.repo}`.toLowerCase();
    const out: PullRequest[] = [];
    let seen = 0;
    // Gitea filters by base branch and state; the head is matched here, in this
    // repository only (a PR from another fork's branch of the same name is not ours).
    for await (const p of this.client.paginate<GiteaPull>(`${this.#repoPath}/pulls`, {
      state,
      base_branch: query.base,
      sort: 'recentupdate',
    })) {
      if (
        p.head.ref === query.head &&
        p.base.ref === query.base &&
        // A head whose repository is not named (a deleted fork) is not this one's.
        (p.head.repo?.full_name ?? '').toLowerCase() === full
      )
        out.push(toPullRequest(p));
      // A closed sync PR older than the last 500 of its base is history, not state.
      if (++seen >= 500) break;
    }
    return out.sort((a, b) => b.number - a.number);
  }

  override async openIssue(input: { title: string; body: string }): Promise<Issue> {
    if (typeof input.title !== 'string' || !input.title.trim())
      throw new BbError('INVALID_INPUT', 'an issue needs a title');
    const res = await this.client.request<GiteaIssue>(
      {
        method: 'POST',
        path: `${this.#repoPath}/issues`,
        body: { title: input.title.slice(0, 255), body: input.body },
      },
      [201],
    );
    return toIssue(res.body);
  }

  override async closeIssue(n: number): Promise<void> {
    positive(n, 'issue number');
    await this.#notFound(`issue #${n}`, () =>
      this.client.request(
        { method: 'PATCH', path: `${this.#repoPath}/issues/${n}`, body: { state: 'closed' } },
        [200, 201],
      ),
    );
  }

  override async whoami(): Promise<string> {
    const res = await this.client.request<GiteaUser>({ method: 'GET', path: '/user' });
    return res.body.login;
  }

  /** `<web root>/<owner>/<repo>.git`, authenticated with the client's token header. */
  override gitRemote(): GitRemote {
    const auth = this.client.authorization();
    return {
      url: giteaCloneUrl(this.client.webBase, this.owner, this.repo),
      headers: auth ? { Authorization: auth } : {},
    };
  }

  async #notFound<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (isBbError(err, 'NOT_FOUND')) {
        throw new BbError('NOT_FOUND', `${what} not found in ${this.owner}/${this.repo}`, {
          cause: err,
          data: { owner: this.owner, repo: this.repo, what },
        });
      }
      throw err;
    }
  }
}
