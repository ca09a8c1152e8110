import { createHmac, timingSafeEqual } from 'node:crypto';
import { BbError } from '@bb/errors';
import { type ForgeEvent, header, type ParsedWebhook } from '../events';
import { Forge } from '../forge';
import type { WebhookScheme } from '../kind';
import {
  type Comment,
  type Issue,
  type OpenPrInput,
  OpenPrInputSchema,
  type Permission,
  type PullRequest,
  type Reaction,
  type Review,
  type ReviewComment,
  type User,
} from '../types';

interface MemIssue {
  issue: Issue;
  comments: Comment[];
  pr?: PullRequest;
  reviews?: Array<{ review: Review; comments: ReviewComment[] }>;
  reactions?: Array<{ user: string; content: Reaction; comment?: number }>;
}

/** The shared state behind one or more `MemoryForge`s (one per repository and user). */
export class MemoryForgeWorld {
  readonly users = new Map<string, User>();
  readonly orgs = new Map<string, Set<string>>();
  /** `owner/repo` → user → permission (the owner is admin; anyone else reads). */
  readonly permissions = new Map<string, Map<string, Permission>>();
  readonly repos = new Map<
    string,
    { items: Map<number, MemIssue>; branches: Map<string, string>; next: number }
  >();
  #ids = 1000;
  #clock = Date.parse('2026-01-01T00:00:00Z');

  user(login: string): User {
    let u = this.users.get(login);
    if (!u) {
      u = { id: this.nextId(), login };
      this.users.set(login, u);
    }
    return u;
  }

  repo(owner: string, repo: string) {
    const key = `${owner}/${repo}`;
    let r = this.repos.get(key);
    if (!r) {
      r = { items: new Map(), branches: new Map([['main', 'a'.repeat(40)]]), next: 1 };
      this.repos.set(key, r);
    }
    return r;
  }

  nextId(): number {
    return ++this.#ids;
  }

  /** A strictly increasing clock, so ordering by time is well defined. */
  tick(): string {
    this.#clock += 1000;
    return new Date(this.#clock).toISOString();
  }

  addIssue(
    owner: string,
    repo: string,
    input: {
      title: string;
      body?: string;
      author: string;
      labels?: string[];
      assignees?: string[];
    },
  ): number {
    const r = this.repo(owner, repo);
    const n = r.next++;
    const t = this.tick();
    r.items.set(n, {
      issue: {
        number: n,
        title: input.title,
        body: input.body ?? '',
        state: 'open',
        author: this.user(input.author),
        labels: (input.labels ?? []).map((name) => ({ name })),
        assignees: (input.assignees ?? []).map((a) => this.user(a)),
        isPullRequest: false,
        url: `memory://${owner}/${repo}/issues/${n}`,
        createdAt: t,
        updatedAt: t,
        closedAt: null,
      },
      comments: [],
    });
    return n;
  }

  /** Create or move a branch (what a git push would do). */
  pushBranch(
    owner: string,
    repo: string,
    branch: string,
    sha = this.nextId().toString(16).padStart(40, '0'),
  ): string {
    this.repo(owner, repo).branches.set(branch, sha);
    return sha;
  }

  addMember(org: string, user: string): void {
    this.user(user);
    let m = this.orgs.get(org);
    if (!m) {
      m = new Set();
      this.orgs.set(org, m);
    }
    m.add(user);
  }

  /** Set what `user` may do in `owner/repo`. */
  grant(owner: string, repo: string, user: string, permission: Permission): void {
    this.user(user);
    const key = `${owner}/${repo}`;
    if (!this.permissions.has(key)) this.permissions.set(key, new Map());
    this.permissions.get(key)!.set(user, permission);
  }

  /** Submit a review of PR `n` as `author`, with inline comments. */
  review(
    owner: string,
    repo: string,
    n: number,
    input: {
      author: string;
      state: Review['state'];
      body?: string;
      comments?: Array<{ path: string; line: number; body: string }>;
    },
  ): Review {
    const item = this.repo(owner, repo).items.get(n);
    if (!item?.pr) throw new BbError('NOT_FOUND', `PR #${n} not found`);
    const t = this.tick();
    const review: Review = {
      id: this.nextId(),
      state: input.state,
      body: input.body ?? '',
      author: this.user(input.author),
      commitId: item.pr.head.sha,
      url: `${item.pr.url}#review`,
      submittedAt: t,
    };
    review.url = `${item.pr.url}#review-${review.id}`;
    const comments = (input.comments ?? []).map((c) => {
      const id = this.nextId();
      return {
        id,
        reviewId: review.id,
        path: c.path,
        line: c.line,
        body: c.body,
        author: review.author,
        url: `${item.pr!.url}/files#comment-${id}`,
        createdAt: t,
      };
    });
    item.reviews = [...(item.reviews ?? []), { review, comments }];
    return structuredClone(review);
  }

  merge(owner: string, repo: string, n: number): void {
    const item = this.repo(owner, repo).items.get(n);
    if (!item?.pr) throw new BbError('NOT_FOUND', `PR #${n} not found`);
    const t = this.tick();
    item.pr = {
      ...item.pr,
      state: 'closed',
      merged: true,
      mergedAt: t,
      mergeCommitSha: 'm'.repeat(40),
      closedAt: t,
      updatedAt: t,
    };
    item.issue = { ...item.issue, state: 'closed', closedAt: t, updatedAt: t };
  }
}

/** The webhook header `MemoryForge` signs with (hex HMAC-SHA256). */
export const MEMORY_SIGNATURE_HEADER = 'x-memory-signature';

/**
 * A complete `Forge` held in memory: for tests of code that uses a forge, and as
 * the reference implementation of the conformance suite. Its webhook format is
 * its own: a JSON `ForgeEvent` signed in `x-memory-signature`.
 */
export class MemoryForge extends Forge {
  readonly kind = 'memory';
  readonly owner: string;
  readonly repo: string;
  readonly world: MemoryForgeWorld;
  readonly as: User;

  constructor(options: { owner: string; repo: string; as: string; world?: MemoryForgeWorld }) {
    super();
    this.owner = options.owner;
    this.repo = options.repo;
    this.world = options.world ?? new MemoryForgeWorld();
    this.as = this.world.user(options.as);
    this.world.repo(this.owner, this.repo);
  }

  get #items() {
    return this.world.repo(this.owner, this.repo).items;
  }

  #get(n: number, what: string): MemIssue {
    if (!Number.isSafeInteger(n) || n <= 0)
      throw new BbError(
        'INVALID_INPUT',
        `${what} number must be a positive whole number, got ${String(n)}`,
      );
    const item = this.#items.get(n);
    if (!item)
      throw new BbError('NOT_FOUND', `${what} #${n} not found in ${this.owner}/${this.repo}`);
    return item;
  }

  async readIssue(n: number): Promise<Issue> {
    return structuredClone(this.#get(n, 'issue').issue);
  }

  async readPr(n: number): Promise<PullRequest> {
    const item = this.#get(n, 'PR');
    if (!item.pr)
      throw new BbError(
        'NOT_FOUND',
        `PR #${n} not found in ${this.owner}/${this.repo} (#${n} is an issue)`,
      );
    return structuredClone(item.pr);
  }

  async listOpenIssues(): Promise<Issue[]> {
    return [...this.#items.values()]
      .filter((i) => !i.pr && i.issue.state === 'open')
      .map((i) => structuredClone(i.issue))
      .sort((a, b) => b.number - a.number);
  }

  async readComments(n: number): Promise<Comment[]> {
    return structuredClone(this.#get(n, 'issue').comments);
  }

  async postComment(n: number, body: string): Promise<Comment> {
    const item = this.#get(n, 'issue');
    if (typeof body !== 'string' || body.trim() === '')
      throw new BbError('INVALID_INPUT', 'a comment needs a non-empty body');
    const t = this.world.tick();
    const c: Comment = {
      id: this.world.nextId(),
      body,
      author: this.as,
      url: `${item.issue.url}#c`,
      createdAt: t,
      updatedAt: t,
    };
    c.url = `${item.issue.url}#comment-${c.id}`;
    item.comments.push(c);
    return structuredClone(c);
  }

  async updateDescription(n: number, body: string): Promise<void> {
    const item = this.#get(n, 'issue');
    if (typeof body !== 'string')
      throw new BbError('INVALID_INPUT', 'a description must be a string');
    const t = this.world.tick();
    item.issue = { ...item.issue, body, updatedAt: t };
    if (item.pr) item.pr = { ...item.pr, body, updatedAt: t };
  }

  async openPr(input: OpenPrInput): Promise<PullRequest> {
    const parsed = OpenPrInputSchema.safeParse(input);
    if (!parsed.success)
      throw new BbError(
        'INVALID_INPUT',
        `invalid PR: ${parsed.error.issues.map((i) => i.message).join('; ')}`,
      );
    const { head, base, title, body } = parsed.data;
    const repo = this.world.repo(this.owner, this.repo);
    const headSha = repo.branches.get(head);
    const baseSha = repo.branches.get(base);
    if (!headSha || !baseSha)
      throw new BbError('NOT_FOUND', `branch ${!headSha ? head : base} does not exist`);
    for (const item of repo.items.values()) {
      if (
        item.pr &&
        item.pr.state === 'open' &&
        item.pr.head.ref === head &&
        item.pr.base.ref === base
      ) {
        throw new BbError('CONFLICT', `an open PR from ${head} into ${base} already exists`);
      }
    }
    const n = this.world.addIssue(this.owner, this.repo, { title, body, author: this.as.login });
    const item = repo.items.get(n)!;
    item.issue = {
      ...item.issue,
      isPullRequest: true,
      url: `memory://${this.owner}/${this.repo}/pulls/${n}`,
    };
    item.pr = {
      number: n,
      title,
      body,
      state: 'open',
      author: this.as,
      labels: [],
      assignees: [],
      url: item.issue.url,
      head: { ref: head, sha: headSha },
      base: { ref: base, sha: baseSha },
      merged: false,
      mergedAt: null,
      mergeCommitSha: null,
      createdAt: item.issue.createdAt,
      updatedAt: item.issue.updatedAt,
      closedAt: null,
    };
    return structuredClone(item.pr);
  }

  async isOrgMember(org: string, user: string): Promise<boolean> {
    return this.world.orgs.get(org)?.has(user) ?? false;
  }

  async readReviews(n: number): Promise<Review[]> {
    await this.readPr(n);
    return structuredClone((this.#get(n, 'PR').reviews ?? []).map((r) => r.review));
  }

  async readReviewComments(n: number, reviewId: number): Promise<ReviewComment[]> {
    await this.readPr(n);
    const r = this.#get(n, 'PR').reviews?.find((x) => x.review.id === reviewId);
    if (!r) throw new BbError('NOT_FOUND', `review ${reviewId} of PR #${n} not found`);
    return structuredClone(r.comments);
  }

  async permissionOf(user: string): Promise<Permission> {
    if (typeof user !== 'string' || !user)
      throw new BbError('INVALID_INPUT', `${JSON.stringify(user)} is not a user name`);
    if (!this.world.users.has(user)) throw new BbError('NOT_FOUND', `no user ${user}`);
    if (user === this.owner) return 'admin';
    return this.world.permissions.get(`${this.owner}/${this.repo}`)?.get(user) ?? 'read';
  }

  override async react(
    target: { comment: number } | { issue: number } | { review: number; pr: number },
    reaction: Reaction,
  ): Promise<boolean> {
    let item: MemIssue | undefined;
    if ('issue' in target) item = this.#get(target.issue, 'issue');
    else if ('review' in target) item = this.#get(target.pr, 'PR');
    else
      item = [...this.#items.values()].find((i) => i.comments.some((c) => c.id === target.comment));
    if (!item) throw new BbError('NOT_FOUND', `comment ${JSON.stringify(target)} not found`);
    const comment =
      'comment' in target ? target.comment : 'review' in target ? target.review : undefined;
    item.reactions ??= [];
    if (
      !item.reactions.some(
        (r) => r.user === this.as.login && r.content === reaction && r.comment === comment,
      )
    )
      item.reactions.push({
        user: this.as.login,
        content: reaction,
        ...(comment === undefined ? {} : { comment }),
      });
    return true;
  }

  async getPrForIssue(n: number): Promise<number | undefined> {
    this.#get(n, 'issue');
    const mention = new RegExp(`\\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\\s+#${n}(?!\\d)`, 'i');
    let found: number | undefined;
    for (const item of this.#items.values()) {
      if (!item.pr) continue;
      if (
        mention.test(item.pr.body) ||
        new RegExp(`^bb/[a-z0-9._-]+-${n}$`).test(item.pr.head.ref)
      ) {
        if (item.pr.state === 'open') return item.pr.number;
        found = item.pr.number;
      }
    }
    return found;
  }

  override async findPrs(query: {
    head: string;
    base: string;
    state?: 'open' | 'all';
  }): Promise<PullRequest[]> {
    return [...this.#items.values()]
      .flatMap((i) => (i.pr ? [i.pr] : []))
      .filter((p) => p.head.ref === query.head && p.base.ref === query.base)
      .filter((p) => query.state === 'all' || p.state === 'open')
      .map((p) => structuredClone(p))
      .sort((a, b) => b.number - a.number);
  }

  override async openIssue(input: { title: string; body: string }): Promise<Issue> {
    if (typeof input.title !== 'string' || !input.title.trim())
      throw new BbError('INVALID_INPUT', 'an issue needs a title');
    const n = this.world.addIssue(this.owner, this.repo, { ...input, author: this.as.login });
    return this.readIssue(n);
  }

  override async closeIssue(n: number): Promise<void> {
    const item = this.#get(n, 'issue');
    const t = this.world.tick();
    item.issue = { ...item.issue, state: 'closed', closedAt: t, updatedAt: t };
    if (item.pr) item.pr = { ...item.pr, state: 'closed', closedAt: t, updatedAt: t };
  }

  override async whoami(): Promise<string> {
    return this.as.login;
  }

  /** Sign an event as this forge's webhooks would be: `{ headers, body }`. */
  static signWebhook(
    event: ForgeEvent,
    secret: string,
  ): { headers: Record<string, string>; body: string } {
    const body = JSON.stringify(event);
    return {
      headers: {
        'content-type': 'application/json',
        [MEMORY_SIGNATURE_HEADER]: createHmac('sha256', secret).update(body).digest('hex'),
      },
      body,
    };
  }
}

/**
 * The memory forge's webhooks: the event itself as JSON, signed with
 * HMAC-SHA256 in `MEMORY_SIGNATURE_HEADER` (see `MemoryForge.signWebhook`).
 */
export const memoryWebhooks: WebhookScheme = {
  path: '/webhooks/memory',
  deliveryId: (headers) => header(headers, 'x-memory-delivery'),
  verify(headers, rawBody, secrets) {
    const given = header(headers, MEMORY_SIGNATURE_HEADER);
    if (!given || !/^[0-9a-f]{64}$/.test(given)) return false;
    let ok = false;
    for (const secret of secrets) {
      if (!secret) continue;
      const expected = createHmac('sha256', secret).update(rawBody).digest();
      if (timingSafeEqual(expected, Buffer.from(given, 'hex'))) ok = true;
    }
    return ok;
  },
  parse(headers, rawBody): ParsedWebhook {
    if (!/^application\/json/.test(header(headers, 'content-type') ?? '')) {
      throw new BbError('INVALID_INPUT', 'memory webhooks are application/json');
    }
    try {
      const event = JSON.parse(
        typeof rawBody === 'string' ? rawBody : Buffer.from(rawBody).toString('utf8'),
      ) as ParsedWebhook;
      if (typeof event?.kind !== 'string') throw new Error('no kind');
      return event;
    } catch (err) {
      throw new BbError(
        'INVALID_INPUT',
        `memory webhook body is not an event: ${(err as Error).message}`,
      );
    }
  },
};
