import { BbError, isBbError, registerSecret } from '@bb/errors';
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
import { type GitHubClient, gitHubClient, gitHubError, webOf } from './client';
import {
  type GhIssue,
  type GhPull,
  type GhUser,
  positive,
  REVIEW_STATES,
  toIssue,
  toPull,
  user,
} from './mapping';
import { orgMembership } from './membership';

export interface GitHubForgeOptions {
  owner: string;
  repo: string;
  /** A client to share; otherwise one is made from `apiUrl` and `token`. */
  client?: GitHubClient;
  apiUrl?: string;
  token?: string | undefined;
  /** The web root clone URLs are under. @default the API's own (github.com for api.github.com, <web> for <web>/api/v3) */
  webUrl?: string;
  onWarning?: (message: string) => void;
  /**
   * The client that may see an org's members (a GitHub App's installation on that org);
   * undefined, or one that fails, leaves `client`.
   */
  orgClient?: (org: string) => Promise<GitHubClient | undefined>;
}

/** `Forge` for GitHub (github.com or an Enterprise Server) through its REST API v3. */
export class GitHubForge extends Forge {
  readonly kind = 'github';
  readonly owner: string;
  readonly repo: string;
  readonly client: GitHubClient;
  readonly #token: string | undefined;
  readonly #web: string;
  readonly #warn: (message: string) => void;
  readonly #orgClient: GitHubForgeOptions['orgClient'];

  constructor(o: GitHubForgeOptions) {
    super();
    this.owner = o.owner;
    this.repo = o.repo;
    if (!o.client && !o.apiUrl)
      throw new BbError(
        'INVALID_INPUT',
        'GitHubForge needs a client or an apiUrl (FORGE_GITHUB_API)',
      );
    this.client = o.client ?? gitHubClient({ apiUrl: o.apiUrl!, token: o.token });
    this.#token = o.token;
    if (o.token) registerSecret(o.token);
    this.#web = (o.webUrl ?? webOf(o.apiUrl ?? 'https://api.github.com')).replace(/\/+$/, '');
    this.#warn = o.onWarning ?? (() => {});
    this.#orgClient = o.orgClient;
  }

  get #r() {
    return { owner: this.owner, repo: this.repo };
  }

  async #call<T>(what: string, fn: () => Promise<{ data: T }>): Promise<T> {
    try {
      return (await fn()).data;
    } catch (err) {
      const e = gitHubError(err, what);
      if (e.code === 'NOT_FOUND')
        throw new BbError('NOT_FOUND', `${what} not found in ${this.owner}/${this.repo}`, {
          cause: err,
          data: { owner: this.owner, repo: this.repo, what },
        });
      throw e;
    }
  }

  async #all<T>(
    what: string,
    route: string,
    params: Record<string, unknown>,
    max = 5000,
  ): Promise<T[]> {
    const out: T[] = [];
    try {
      for await (const page of this.client.paginate.iterator(route, {
        ...this.#r,
        per_page: 100,
        ...params,
      })) {
        out.push(...(page.data as T[]));
        if (out.length >= max) break;
      }
    } catch (err) {
      const e = gitHubError(err, what);
      throw e.code === 'NOT_FOUND'
        ? new BbError('NOT_FOUND', `${what} not found in ${this.owner}/${this.repo}`, {
            cause: err,
          })
        : e;
    }
    return out;
  }

  async readIssue(n: number): Promise<Issue> {
    positive(n, 'issue number');
    const i = await this.#call(`issue #${n}`, () =>
      this.client.rest.issues.get({ ...this.#r, issue_number: n }),
    );
    return toIssue(i as GhIssue);
  }

  async readPr(n: number): Promise<PullRequest> {
    positive(n, 'PR number');
    const p = await this.#call(`PR #${n}`, () =>
      this.client.rest.pulls.get({ ...this.#r, pull_number: n }),
    );
    return toPull(p as unknown as GhPull);
  }

  override async defaultBranchHead(): Promise<string | undefined> {
    try {
      const repo = await this.client.rest.repos.get(this.#r);
      const b = await this.client.rest.repos.getBranch({
        ...this.#r,
        branch: repo.data.default_branch,
      });
      const sha = b.data.commit.sha;
      return /^[0-9a-f]{40}([0-9a-f]{24})?$/.test(sha) ? sha : undefined;
    } catch {
      return undefined;
    }
  }

  async readComments(n: number): Promise<Comment[]> {
    positive(n, 'issue number');
    const cs = await this.#all<{
      id: number;
      body?: string;
      user: GhUser | null;
      html_url: string;
      created_at: string;
      updated_at: string;
    }>(`issue #${n}`, 'GET /repos/{owner}/{repo}/issues/{issue_number}/comments', {
      issue_number: n,
    });
    return cs.map((c) => ({
      id: c.id,
      body: c.body ?? '',
      author: user(c.user),
      url: c.html_url,
      createdAt: c.created_at,
      updatedAt: c.updated_at,
    }));
  }

  async listOpenIssues(): Promise<Issue[]> {
    // GitHub lists PRs among issues: they are left out here.
    const items = await this.#all<GhIssue>('open issues', 'GET /repos/{owner}/{repo}/issues', {
      state: 'open',
      sort: 'created',
      direction: 'desc',
    });
    return items.filter((i) => !i.pull_request).map(toIssue);
  }

  async postComment(n: number, body: string): Promise<Comment> {
    positive(n, 'issue number');
    if (typeof body !== 'string' || body.trim().length === 0)
      throw new BbError('INVALID_INPUT', 'a comment needs a non-empty body');
    const c = await this.#call(`issue #${n}`, () =>
      this.client.rest.issues.createComment({ ...this.#r, issue_number: n, body }),
    );
    return {
      id: c.id,
      body: c.body ?? '',
      author: user(c.user as GhUser),
      url: c.html_url,
      createdAt: c.created_at,
      updatedAt: c.updated_at,
    };
  }

  async updateDescription(n: number, body: string): Promise<void> {
    positive(n, 'issue number');
    if (typeof body !== 'string')
      throw new BbError('INVALID_INPUT', 'a description must be a string');
    await this.#call(`issue #${n}`, () =>
      this.client.rest.issues.update({ ...this.#r, issue_number: n, body }),
    );
  }

  async openPr(input: OpenPrInput): Promise<PullRequest> {
    const parsed = OpenPrInputSchema.safeParse(input);
    if (!parsed.success)
      throw new BbError(
        'INVALID_INPUT',
        `invalid PR: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
      );
    const { head, base, title, body } = parsed.data;
    try {
      const p = await this.client.rest.pulls.create({ ...this.#r, head, base, title, body });
      return toPull(p.data as unknown as GhPull);
    } catch (err) {
      const e = gitHubError(err, `a PR from ${head} into ${base}`);
      const said = JSON.stringify((err as { response?: { data?: unknown } }).response?.data ?? '');
      if (e.code === 'INVALID_INPUT' && /already exists/i.test(said))
        throw new BbError('CONFLICT', `an open PR from ${head} into ${base} already exists`, {
          cause: err,
          data: { head, base },
        });
      if (e.code === 'INVALID_INPUT' && /"field":"(head|base)"/.test(said))
        throw new BbError(
          'NOT_FOUND',
          `branch ${/"field":"base"/.test(said) ? base : head} does not exist`,
          {
            cause: err,
          },
        );
      throw e;
    }
  }

  async isOrgMember(org: string, login: string): Promise<boolean> {
    const client = (await this.#orgClient?.(org).catch(() => undefined)) ?? this.client;
    return orgMembership(client, org, login, this.#warn);
  }

  async getPrForIssue(n: number): Promise<number | undefined> {
    positive(n, 'issue number');
    type Event = {
      event?: string;
      source?: {
        issue?: {
          number: number;
          body?: string | null;
          pull_request?: unknown;
          repository_url?: string;
        };
      };
    };
    const events = await this.#all<Event>(
      `issue #${n}`,
      'GET /repos/{owner}/{repo}/issues/{issue_number}/timeline',
      { issue_number: n },
      1000,
    );
    const repoUrl = `/repos/${this.owner}/${this.repo}`.toLowerCase();
    // A PR of this repository that closes the issue (GitHub's closing keywords); a mere
    // mention ("see #12") or a PR elsewhere is not it.
    const closes = new RegExp(`\\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\\s+#${n}(?!\\d)`, 'i');
    const candidates = events
      .filter(
        (e) =>
          e.event === 'cross-referenced' &&
          e.source?.issue?.pull_request &&
          (e.source.issue.repository_url ?? '').toLowerCase().endsWith(repoUrl) &&
          closes.test(e.source.issue.body ?? ''),
      )
      .map((e) => e.source!.issue!.number);
    for (const c of [...candidates].reverse()) {
      try {
        if (await this.isPrOpen(c)) return c;
      } catch (err) {
        if (!isBbError(err, 'NOT_FOUND')) throw err;
      }
    }
    if (candidates.length) return candidates.at(-1);
    // The bottle branch convention bb/<agent>-<issue>, on this repository's own branches.
    const full = `${this.owner}/${this.repo}`.toLowerCase();
    const prs = await this.#all<GhPull>(
      'pull requests',
      'GET /repos/{owner}/{repo}/pulls',
      { state: 'all' },
      1000,
    );
    return prs.find(
      (p) =>
        (p.head.repo?.full_name ?? '').toLowerCase() === full &&
        Number(BOTTLE_BRANCH.exec(p.head.ref)?.[1]) === n,
    )?.number;
  }

  async readReviews(n: number): Promise<Review[]> {
    positive(n, 'PR number');
    await this.readPr(n);
    type R = {
      id: number;
      state: string;
      body?: string;
      user: GhUser | null;
      commit_id: string;
      html_url: string;
      submitted_at?: string;
    };
    const rs = await this.#all<R>(
      `PR #${n}`,
      'GET /repos/{owner}/{repo}/pulls/{pull_number}/reviews',
      { pull_number: n },
    );
    return rs.flatMap((r) => {
      const state = REVIEW_STATES[r.state];
      if (!state || !r.submitted_at) return [];
      return [
        {
          id: r.id,
          state,
          body: r.body ?? '',
          author: user(r.user),
          commitId: r.commit_id ?? '',
          url: r.html_url,
          submittedAt: r.submitted_at,
        },
      ];
    });
  }

  async readReviewComments(n: number, reviewId: number): Promise<ReviewComment[]> {
    positive(n, 'PR number');
    positive(reviewId, 'review id');
    type C = {
      id: number;
      pull_request_review_id: number | null;
      path: string;
      line?: number | null;
      original_line?: number | null;
      body: string;
      user: GhUser | null;
      html_url: string;
      created_at: string;
    };
    const cs = await this.#all<C>(
      `review ${reviewId} of PR #${n}`,
      'GET /repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}/comments',
      {
        pull_number: n,
        review_id: reviewId,
      },
    );
    return cs.map((c) => ({
      id: c.id,
      reviewId: c.pull_request_review_id ?? reviewId,
      path: c.path,
      // An outdated comment has no line in the new file; where it was is the best there is.
      line: c.line ?? c.original_line ?? null,
      body: c.body,
      author: user(c.user),
      url: c.html_url,
      createdAt: c.created_at,
    }));
  }

  async permissionOf(login: string): Promise<Permission> {
    if (typeof login !== 'string' || !/^[A-Za-z0-9_.-]{1,64}(\[bot\])?$/.test(login))
      throw new BbError('INVALID_INPUT', `${JSON.stringify(login)} is not a user name`);
    let p: string;
    try {
      p = (
        await this.client.rest.repos.getCollaboratorPermissionLevel({ ...this.#r, username: login })
      ).data.permission;
    } catch (err) {
      const e = gitHubError(err, `${login}'s permission`);
      if (e.code === 'FORBIDDEN')
        throw new BbError(
          'FORBIDDEN',
          `cannot tell what ${login} may do in ${this.owner}/${this.repo}: GitHub tells only a user with push access (or an App with metadata: read and administration: read)`,
          { cause: err, data: { user: login } },
        );
      if (e.code === 'NOT_FOUND')
        throw new BbError('NOT_FOUND', `user ${login} not found`, { cause: err });
      throw e;
    }
    // GitHub's `permission` folds maintain into write and triage into read.
    return (PERMISSIONS as readonly string[]).includes(p) ? (p as Permission) : 'none';
  }

  override async react(
    target: { comment: number } | { issue: number } | { review: number; pr: number },
    reaction: Reaction,
  ): Promise<boolean> {
    // GitHub has no reactions on a review itself.
    if ('review' in target) return false;
    if ('comment' in target)
      await this.#call(`comment ${target.comment}`, () =>
        this.client.rest.reactions.createForIssueComment({
          ...this.#r,
          comment_id: target.comment,
          content: reaction,
        }),
      );
    else
      await this.#call(`issue #${target.issue}`, () =>
        this.client.rest.reactions.createForIssue({
          ...this.#r,
          issue_number: target.issue,
          content: reaction,
        }),
      );
    return true;
  }

  override async addLabels(n: number, names: string[]): Promise<boolean> {
    positive(n, 'issue number');
    if (names.length === 0) return true;
    await this.#call(`issue #${n}`, () =>
      this.client.rest.issues.addLabels({ ...this.#r, issue_number: n, labels: names }),
    );
    return true;
  }

  /** `<web>/<owner>/<repo>.git`, authenticated as GitHub's git wants a token: Basic `x-access-token:<token>`. */
  override gitRemote(): GitRemote {
    return {
      url: `${this.#web}/${encodeURIComponent(this.owner)}/${encodeURIComponent(this.repo)}.git`,
      headers: this.#token
        ? {
            Authorization: `Basic ${Buffer.from(`x-access-token:${this.#token}`).toString('base64')}`,
          }
        : {},
    };
  }

  override async findPrs(query: {
    head: string;
    base: string;
    state?: 'open' | 'all';
  }): Promise<PullRequest[]> {
    const prs = await this.#all<GhPull>(
      'pull requests',
      'GET /repos/{owner}/{repo}/pulls',
      {
        state: query.state ?? 'open',
        head: `${this.owner}:${query.head}`,
        base: query.base,
        sort: 'created',
        direction: 'desc',
      },
      500,
    );
    const full = `${this.owner}/${this.repo}`.toLowerCase();
    return prs
      .filter(
        (p) =>
          p.head.ref === query.head &&
          p.base.ref === query.base &&
          (p.head.repo?.full_name ?? '').toLowerCase() === full,
      )
      .map(toPull)
      .sort((a, b) => b.number - a.number);
  }

  override async openIssue(input: { title: string; body: string }): Promise<Issue> {
    if (typeof input.title !== 'string' || !input.title.trim())
      throw new BbError('INVALID_INPUT', 'an issue needs a title');
    const i = await this.#call('a new issue', () =>
      this.client.rest.issues.create({
        ...this.#r,
        title: input.title.slice(0, 256),
        body: input.body,
      }),
    );
    return toIssue(i as GhIssue);
  }

  override async closeIssue(n: number): Promise<void> {
    positive(n, 'issue number');
    await this.#call(`issue #${n}`, () =>
      this.client.rest.issues.update({ ...this.#r, issue_number: n, state: 'closed' }),
    );
  }

  override async whoami(): Promise<string> {
    return (await this.#call('the token user', () => this.client.rest.users.getAuthenticated()))
      .login;
  }
}
