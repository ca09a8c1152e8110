// biome-ignore-all lint/suspicious/noAssignInExpressions: the router matches a route and captures its parameters in one expression (`(g = route(...))`), which keeps each branch of the dispatch on one line.
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ApiCore, ApiError, type NewReview } from './api-core';
import { GitStore } from './git';
import { type Delivery, HookSender } from './hooks';
import {
  type GiteaWorldSeed,
  type HookModel,
  type IssueModel,
  type LabelModel,
  now,
  type OrgModel,
  type RepoModel,
  type ReviewModel,
  type UserModel,
} from './model';
import { REPO_ROUTES } from './repo-routes';
import { REVIEW_ROUTES, submitReview } from './reviews';
import {
  commentJson,
  encodeApiJson,
  issueJson,
  labelJson,
  pullJson,
  repoJson,
  type ShapeContext,
  timelineJson,
  userJson,
} from './shapes';

export interface TestHookOptions {
  url: string;
  secret: string;
  /** Gitea hook events. @default ['issues', 'issue_comment', 'pull_request'] */
  events?: string[];
  /** @default 'repository' */
  level?: 'repository' | 'organization';
}

/** One API response, for checking against Gitea's swagger. */
export interface ApiExchange {
  method: string;
  /** The swagger path template that matched, e.g. `/repos/{owner}/{repo}/issues/{index}`. */
  template: string;
  path: string;
  status: number;
  body: unknown;
}

export interface GiteaTestServerOptions {
  world?: GiteaWorldSeed;
  hooks?: TestHookOptions[];
  /** @default 0 (any free port) */
  port?: number;
  /** Only loopback by default. @default '127.0.0.1' */
  host?: string;
  /** Where bare repositories live. @default a new temporary directory, removed on close */
  dataDir?: string;
  /** Called for every API response. */
  onResponse?: (exchange: ApiExchange) => void;
  /** Webhook delivery timeout, as Gitea's DELIVER_TIMEOUT. @default 5000 */
  webhookTimeoutMs?: number;
}

export interface NewIssue {
  title: string;
  body?: string;
  labels?: string[];
  assignees?: string[];
}

const CLOSE_KEYWORDS = /\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s+#(\d+)\b/gi;
const ANY_REF = /(?:^|[^\w/])#(\d+)\b/g;

/**
 * A Gitea-compatible server for tests and the demo: an in-memory world (users,
 * orgs, repos, issues, PRs, comments, labels, timeline), the REST subset
 * bot-bottle uses with Gitea 1.26's status codes and JSON shapes, token auth, git
 * smart HTTP through the real `git http-backend`, and webhooks for its own
 * mutations, signed and shaped like Gitea's. Listens on loopback only.
 */
export class GiteaTestServer {
  readonly users = new Map<string, UserModel>();
  readonly orgs = new Map<string, OrgModel>();
  readonly repos = new Map<string, RepoModel>();
  readonly hooks: HookModel[] = [];
  readonly tokens = new Map<string, string>();
  /** Scopes of tokens that do not have them all. */
  readonly tokenScopes = new Map<string, string[]>();
  readonly sender: HookSender;
  readonly git: GitStore;
  #server: Server | undefined;
  #ids = 100;
  #base = 'http://127.0.0.1/';
  readonly #ownsData: boolean;
  readonly #options: GiteaTestServerOptions;
  readonly #core: ApiCore;
  /** The token of the request being authenticated (its scopes are checked per route). */
  #lastToken: string | undefined;

  private constructor(options: GiteaTestServerOptions) {
    this.#options = options;
    this.#ownsData = options.dataDir === undefined;
    this.git = new GitStore(options.dataDir ?? mkdtempSync(join(tmpdir(), 'bb-gitea-')));
    this.sender = new HookSender(options.webhookTimeoutMs ?? 5000);
    const self = this;
    this.#core = {
      get base() {
        return self.#base;
      },
      users: this.users,
      orgs: this.orgs,
      repos: this.repos,
      hooks: this.hooks,
      git: this.git,
      id: () => this.#id(),
      user: (l) => this.#user(l),
      ctx: (r) => this.#ctx(r),
      canWrite: (r, l) => this.#canWrite(r, l),
      isRepoAdmin: (r, l) => this.#isRepoAdmin(r, l),
      issueOr404: (r, n) => this.#issueOr404(r, n),
      notFound: (m) => this.#notFound(m),
      apiError: (m) => this.#apiError(m),
      touch: (r, i) => this.#touch(r, i),
      emit: (r, t, p) => this.#emit(r, t, p),
      issuePayload: (r, i, a, sender, extra) => this.#issuePayload(r, i, a, sender, extra),
      page: (url, items, shape) => this.#page(url, items, shape),
      review: (r, pr, as, input) => submitReview(this.#core, r, pr, as, input),
    };
  }

  static async start(options: GiteaTestServerOptions = {}): Promise<GiteaTestServer> {
    const s = new GiteaTestServer(options);
    const server = createServer((req, res) => {
      void s.#handle(req, res);
    });
    s.#server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
    });
    const { port } = server.address() as AddressInfo;
    s.#base = `http://${options.host ?? '127.0.0.1'}:${port}/`;
    try {
      await s.seed(options.world ?? {});
      for (const h of options.hooks ?? []) s.addHook(h);
      s.#ready = true;
    } catch (err) {
      await s.close();
      throw err;
    }
    return s;
  }

  /** The web root, e.g. `http://127.0.0.1:41234` (no trailing slash). */
  get url(): string {
    return this.#base.replace(/\/$/, '');
  }

  /** The API base, e.g. `http://127.0.0.1:41234/api/v1`. */
  get apiUrl(): string {
    return `${this.#base}api/v1`;
  }

  /** The clone URL of a repository. */
  cloneUrl(fullName: string): string {
    return `${this.#base}${fullName}.git`;
  }

  /** How many git smart-HTTP requests (clone, fetch, push, ls-remote) it has answered. */
  get gitRequests(): number {
    return this.#gitRequests;
  }

  #gitRequests = 0;
  /** Seeded: requests are answered. */
  #ready = false;

  get deliveries(): Delivery[] {
    return this.sender.deliveries;
  }

  /** Wait until all queued webhook deliveries are done. */
  settle(): Promise<void> {
    return this.sender.settle();
  }

  /** Redeliver a recorded webhook with a new delivery UUID, as Gitea's "Replay" does. */
  replay(uuid: string): string {
    return this.sender.replay(uuid, this.hooks);
  }

  addHook(h: TestHookOptions): HookModel {
    const hook: HookModel = {
      id: this.#id(),
      url: h.url,
      secret: h.secret,
      events: h.events ?? ['issues', 'issue_comment', 'pull_request'],
      level: h.level ?? 'repository',
      active: true,
    };
    this.hooks.push(hook);
    return hook;
  }

  /** The first token of a user (creating one when the user has none). */
  tokenOf(login: string): string {
    for (const [t, l] of this.tokens) if (l === login) return t;
    const t = `tok-${login}-${this.#id()}`;
    this.tokens.set(t, login);
    return t;
  }

  async close(): Promise<void> {
    await this.sender.settle();
    await new Promise<void>((resolve) => {
      if (!this.#server) return resolve();
      this.#server.closeAllConnections?.();
      this.#server.close(() => resolve());
    });
    if (this.#ownsData) rmSync(this.git.root, { recursive: true, force: true });
  }

  // ---------------------------------------------------------------- world

  async seed(world: GiteaWorldSeed): Promise<void> {
    for (const u of world.users ?? []) {
      this.#addUser(u.login, { fullName: u.fullName, email: u.email, isAdmin: u.isAdmin });
      for (const t of u.tokens ?? []) this.tokens.set(t, u.login);
      for (const [t, scopes] of Object.entries(u.scopedTokens ?? {})) {
        this.tokens.set(t, u.login);
        this.tokenScopes.set(t, scopes);
      }
    }
    for (const o of world.orgs ?? []) {
      this.#addUser(o.name, { fullName: o.fullName, isOrg: true });
      for (const m of o.members) this.#user(m);
      this.orgs.set(o.name, {
        name: o.name,
        members: new Set(o.members),
        publicMembers: new Set(o.publicMembers ?? []),
      });
    }
    for (const r of world.repos ?? []) {
      this.#user(r.owner);
      const branch = r.defaultBranch ?? 'main';
      const gitDir = await this.git.create(
        r.owner,
        r.name,
        branch,
        r.files ?? { 'README.md': `# ${r.name}\n` },
      );
      const t = now();
      this.repos.set(`${r.owner}/${r.name}`, {
        id: this.#id(),
        owner: r.owner,
        name: r.name,
        description: r.description ?? '',
        defaultBranch: branch,
        collaborators: new Set(r.collaborators ?? []),
        admins: new Set(r.admins ?? []),
        labels: new Map(),
        issues: new Map(),
        nextNumber: 1,
        createdAt: t,
        updatedAt: t,
        gitDir,
      });
    }
    for (const l of world.labels ?? [])
      this.#label(this.#repo(l.repo), l.name, l.color, l.description);
    for (const i of world.issues ?? []) {
      const repo = this.#repo(i.repo);
      this.#newIssue(
        repo,
        i.author,
        { title: i.title, body: i.body, labels: i.labels, assignees: i.assignees },
        false,
      );
    }
  }

  /** Look up an issue or PR of `owner/name` (throws when missing). */
  issue(fullName: string, n: number): IssueModel {
    const i = this.#repo(fullName).issues.get(n);
    if (!i) throw new Error(`no issue #${n} in ${fullName}`);
    return i;
  }

  // ------------------------------------------------- actions (as a user)

  /** Open an issue as `as`. Sends `issues/opened` (and label/assign deliveries as Gitea would). */
  createIssue(as: string, fullName: string, input: NewIssue): number {
    return this.#newIssue(this.#repo(fullName), as, input, true).number;
  }

  comment(as: string, fullName: string, n: number, body: string): number {
    const repo = this.#repo(fullName);
    const issue = this.#issueOr404(repo, n);
    return this.#comment(repo, issue, as, body).id;
  }

  setLabels(as: string, fullName: string, n: number, labels: string[]): void {
    const repo = this.#repo(fullName);
    this.#setLabels(repo, this.#issueOr404(repo, n), as, labels);
  }

  assign(as: string, fullName: string, n: number, assignees: string[]): void {
    const repo = this.#repo(fullName);
    this.#assign(repo, this.#issueOr404(repo, n), as, assignees);
  }

  setState(as: string, fullName: string, n: number, state: 'open' | 'closed'): void {
    const repo = this.#repo(fullName);
    this.#setState(repo, this.#issueOr404(repo, n), as, state);
  }

  /** Submit a review of PR `n` as `as` (sends the `pull_request_review_*` webhook). */
  review(as: string, fullName: string, n: number, input: NewReview): ReviewModel {
    const repo = this.#repo(fullName);
    return submitReview(this.#core, repo, this.#issueOr404(repo, n), as, input);
  }

  /** The reactions on a comment or a review's text (by id): who reacted with what. */
  reactions(fullName: string, commentId: number): Array<{ user: string; content: string }> {
    for (const issue of this.#repo(fullName).issues.values()) {
      const c =
        issue.comments.find((x) => x.id === commentId) ??
        issue.reviews.find((x) => x.id === commentId);
      if (c) return (c.reactions ?? []).map((r) => ({ user: r.user, content: r.content }));
    }
    throw new Error(`no comment ${commentId} in ${fullName}`);
  }

  async mergePr(as: string, fullName: string, n: number): Promise<string> {
    const repo = this.#repo(fullName);
    return this.#merge(repo, this.#issueOr404(repo, n), as);
  }

  // ------------------------------------------------------------ internals

  #id(): number {
    return ++this.#ids;
  }

  #addUser(
    login: string,
    o: {
      fullName?: string | undefined;
      email?: string | undefined;
      isAdmin?: boolean | undefined;
      isOrg?: boolean;
    },
  ): UserModel {
    const existing = this.users.get(login);
    if (existing) return existing;
    const t = now();
    const u: UserModel = {
      id: this.#id(),
      login,
      fullName: o.fullName ?? '',
      email: o.isOrg ? '' : (o.email ?? `${login}@example.test`),
      isAdmin: o.isAdmin ?? false,
      isOrg: o.isOrg ?? false,
      created: t,
      lastLogin: t,
    };
    this.users.set(login, u);
    return u;
  }

  #user(login: string): UserModel {
    const u = this.users.get(login);
    if (!u) throw new Error(`unknown user ${login}: add it to the world's users`);
    return u;
  }

  #repo(fullName: string): RepoModel {
    const r = this.repos.get(fullName);
    if (!r) throw new Error(`unknown repository ${fullName}`);
    return r;
  }

  #ctx(repo: RepoModel): ShapeContext {
    return { base: this.#base, user: (l) => this.#user(l), repo };
  }

  #label(repo: RepoModel, name: string, color = 'e4e669', description = ''): LabelModel {
    let l = repo.labels.get(name);
    if (!l) {
      l = { id: this.#id(), name, color: color.replace(/^#/, ''), description };
      repo.labels.set(name, l);
    }
    return l;
  }

  #canWrite(repo: RepoModel, login: string): boolean {
    if (repo.owner === login || repo.collaborators.has(login)) return true;
    if (this.users.get(login)?.isAdmin) return true;
    return this.orgs.get(repo.owner)?.members.has(login) ?? false;
  }

  /** The owner, a listed admin, a site admin: who may manage hooks and read others' permissions. */
  #isRepoAdmin(repo: RepoModel, login: string): boolean {
    return repo.owner === login || repo.admins.has(login) || !!this.users.get(login)?.isAdmin;
  }

  #issueOr404(repo: RepoModel, n: number): IssueModel {
    const i = repo.issues.get(n);
    if (!i) throw new ApiError(404, this.#notFound());
    return i;
  }

  #notFound(message = 'not found'): unknown {
    return { errors: null, message, url: `${this.#base}api/swagger` };
  }

  #apiError(message: string): unknown {
    return { message, url: `${this.#base}api/swagger` };
  }

  #touch(repo: RepoModel, issue: IssueModel): void {
    issue.updatedAt = now();
    repo.updatedAt = issue.updatedAt;
  }

  #repoHooks(repo: RepoModel): HookModel[] {
    // Repository hooks of this repo and org hooks of its owner: a test server has
    // one set, so both levels fire for every repository.
    void repo;
    return this.hooks;
  }

  #issuePayload(
    repo: RepoModel,
    issue: IssueModel,
    action: string,
    sender: string,
    extra: Record<string, unknown> = {},
  ) {
    const ctx = this.#ctx(repo);
    if (issue.pull) {
      return {
        action,
        number: issue.number,
        ...extra,
        pull_request: pullJson(ctx, issue, true),
        requested_reviewer: null,
        repository: repoJson(ctx),
        sender: userJson(this.#base, this.#user(sender), true),
        commit_id: '',
        review: null,
      };
    }
    return {
      action,
      number: issue.number,
      ...extra,
      issue: issueJson(ctx, issue, true),
      repository: repoJson(ctx),
      sender: userJson(this.#base, this.#user(sender), true),
      commit_id: (extra['commit_id'] as string | undefined) ?? '',
    };
  }

  #emit(repo: RepoModel, eventType: string, payload: unknown): void {
    this.sender.send(this.#repoHooks(repo), eventType, payload);
  }

  #newIssue(repo: RepoModel, author: string, input: NewIssue, notify: boolean): IssueModel {
    this.#user(author);
    const t = now();
    const issue: IssueModel = {
      id: this.#id(),
      number: repo.nextNumber++,
      title: input.title,
      body: input.body ?? '',
      author,
      labels: [],
      assignees: [],
      state: 'open',
      createdAt: t,
      updatedAt: t,
      closedAt: null,
      comments: [],
      timeline: [],
      pull: null,
      reviews: [],
      reactions: [],
    };
    for (const l of input.labels ?? []) {
      this.#label(repo, l);
      issue.labels.push(l);
    }
    for (const a of input.assignees ?? []) {
      this.#user(a);
      issue.assignees.push(a);
    }
    repo.issues.set(issue.number, issue);
    if (notify) this.#emit(repo, 'issues', this.#issuePayload(repo, issue, 'opened', author));
    return issue;
  }

  #comment(repo: RepoModel, issue: IssueModel, author: string, body: string) {
    const t = now();
    const c = { id: this.#id(), author, body, createdAt: t, updatedAt: t };
    issue.comments.push(c);
    issue.timeline.push({
      id: c.id,
      type: 'comment',
      actor: author,
      createdAt: t,
      body,
      commentId: c.id,
    });
    this.#touch(repo, issue);
    const ctx = this.#ctx(repo);
    const payload: Record<string, unknown> = {
      action: 'created',
      issue: issueJson(ctx, issue, true),
    };
    if (issue.pull) payload['pull_request'] = pullJson(ctx, issue, true);
    payload['comment'] = commentJson(ctx, issue, c, true);
    payload['repository'] = repoJson(ctx);
    payload['sender'] = userJson(this.#base, this.#user(author), true);
    payload['is_pull'] = issue.pull !== null;
    this.#emit(repo, issue.pull ? 'pull_request_comment' : 'issue_comment', payload);
    return c;
  }

  #setLabels(repo: RepoModel, issue: IssueModel, as: string, labels: string[]): void {
    const t = now();
    const before = new Set(issue.labels);
    for (const l of labels) this.#label(repo, l);
    for (const l of labels)
      if (!before.has(l))
        issue.timeline.push({ id: this.#id(), type: 'label', actor: as, createdAt: t, label: l });
    for (const l of before)
      if (!labels.includes(l))
        issue.timeline.push({
          id: this.#id(),
          type: 'label',
          actor: as,
          createdAt: t,
          label: l,
          labelRemoved: true,
        });
    issue.labels = [...new Set(labels)];
    this.#touch(repo, issue);
    const action = issue.labels.length === 0 ? 'label_cleared' : 'label_updated';
    this.#emit(
      repo,
      issue.pull ? 'pull_request_label' : 'issue_label',
      this.#issuePayload(repo, issue, action, as),
    );
  }

  #assign(repo: RepoModel, issue: IssueModel, as: string, assignees: string[]): void {
    for (const a of assignees) this.#user(a);
    const before = new Set(issue.assignees);
    const t = now();
    const added = assignees.filter((a) => !before.has(a));
    const removed = [...before].filter((a) => !assignees.includes(a));
    issue.assignees = [...new Set(assignees)];
    this.#touch(repo, issue);
    const type = issue.pull ? 'pull_request_assign' : 'issue_assign';
    for (const a of removed) {
      issue.timeline.push({
        id: this.#id(),
        type: 'assignees',
        actor: as,
        createdAt: t,
        assignee: a,
        removedAssignee: true,
      });
      this.#emit(repo, type, this.#issuePayload(repo, issue, 'unassigned', as));
    }
    for (const a of added) {
      issue.timeline.push({
        id: this.#id(),
        type: 'assignees',
        actor: as,
        createdAt: t,
        assignee: a,
      });
      this.#emit(repo, type, this.#issuePayload(repo, issue, 'assigned', as));
    }
  }

  #setState(
    repo: RepoModel,
    issue: IssueModel,
    as: string,
    state: 'open' | 'closed',
    commitId = '',
  ): void {
    if (issue.state === state) return;
    issue.state = state;
    issue.closedAt = state === 'closed' ? now() : null;
    issue.timeline.push({
      id: this.#id(),
      type: state === 'closed' ? 'close' : 'reopen',
      actor: as,
      createdAt: now(),
    });
    this.#touch(repo, issue);
    const action = state === 'closed' ? 'closed' : 'reopened';
    const extra = commitId ? { commit_id: commitId } : {};
    this.#emit(
      repo,
      issue.pull ? 'pull_request' : 'issues',
      this.#issuePayload(repo, issue, action, as, issue.pull ? {} : extra),
    );
  }

  #crossReference(repo: RepoModel, pr: IssueModel): void {
    const text = `${pr.title}\n${pr.body}`;
    const closing = new Set<number>();
    for (const m of text.matchAll(CLOSE_KEYWORDS)) closing.add(Number(m[1]));
    const all = new Set<number>(closing);
    for (const m of text.matchAll(ANY_REF)) all.add(Number(m[1]));
    for (const n of all) {
      const target = repo.issues.get(n);
      if (!target || target === pr) continue;
      const action = closing.has(n) ? 'closes' : 'none';
      const existing = target.timeline.find(
        (t) => t.type === 'pull_ref' && t.refIssue === pr.number,
      );
      if (existing) existing.refAction = action;
      else
        target.timeline.push({
          id: this.#id(),
          type: 'pull_ref',
          actor: pr.author,
          createdAt: now(),
          refIssue: pr.number,
          refAction: action,
        });
    }
    // References edited away become "neutered".
    for (const target of repo.issues.values()) {
      for (const t of target.timeline) {
        if (t.type === 'pull_ref' && t.refIssue === pr.number && !all.has(target.number))
          t.refAction = 'neutered';
      }
    }
  }

  async #merge(repo: RepoModel, issue: IssueModel, as: string): Promise<string> {
    const p = issue.pull;
    if (!p) throw new ApiError(404, this.#notFound());
    if (p.merged) throw new ApiError(405, null);
    if (issue.state !== 'open') throw new ApiError(405, null);
    const user = this.#user(as);
    const sha = await this.git.merge(
      repo.gitDir,
      p.baseRef,
      p.headRef,
      `Merge pull request '${issue.title}' (#${issue.number}) from ${p.headRef} into ${p.baseRef}`,
      {
        name: user.login,
        email: user.email || `${user.login}@example.test`,
      },
    );
    if (!sha) throw new ApiError(409, this.#apiError('merge conflict'));
    const t = now();
    p.merged = true;
    p.mergedAt = t;
    p.mergedBy = as;
    p.mergeCommitSha = sha;
    issue.state = 'closed';
    issue.closedAt = t;
    issue.timeline.push({ id: this.#id(), type: 'merge_pull', actor: as, createdAt: t });
    this.#touch(repo, issue);
    this.#emit(repo, 'pull_request', this.#issuePayload(repo, issue, 'closed', as));
    // Gitea then closes the issues the PR resolves, each with the merge commit.
    for (const target of repo.issues.values()) {
      if (target.pull || target.state !== 'open') continue;
      if (
        target.timeline.some(
          (x) => x.type === 'pull_ref' && x.refIssue === issue.number && x.refAction === 'closes',
        )
      ) {
        this.#setState(repo, target, as, 'closed', sha);
      }
    }
    return sha;
  }

  // ----------------------------------------------------------------- HTTP

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.#base);
    // Listening is not ready: until its world is seeded it answers nothing (as Gitea
    // does while it starts), `/version` included, so a poll for it cannot race the seed.
    if (!this.#ready) {
      res
        .writeHead(503, { 'content-type': 'application/json', 'retry-after': '1' })
        .end(
          `${JSON.stringify({ message: 'the server is starting: its world is being seeded' })}\n`,
        );
      return;
    }
    try {
      const git =
        /^\/([^/]+)\/([^/]+?)(?:\.git)?\/(info\/refs|git-upload-pack|git-receive-pack)$/.exec(
          url.pathname,
        );
      if (git) {
        this.#gitRequests++;
        return await this.#handleGit(req, res, git[1]!, git[2]!, git[3]!, url);
      }
      if (!url.pathname.startsWith('/api/v1/')) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
        return;
      }
      await this.#handleApi(req, res, url);
    } catch (err) {
      if (!res.headersSent) {
        res.writeHead(500, { 'content-type': 'application/json;charset=utf-8' });
        res.end(encodeApiJson(this.#apiError('')));
      }
      if (!(err instanceof ApiError)) console.error('[gitea-test-server]', err);
    }
  }

  /** The user behind the request's credentials; `null` when none; throws 401 for a bad one. */
  #authenticate(req: IncomingMessage, url: URL): string | null {
    let token: string | undefined;
    const auth = req.headers.authorization;
    if (auth) {
      const [scheme, value, ...rest] = auth.split(' ');
      if (rest.length === 0 && value && /^(token|bearer)$/i.test(scheme ?? '')) token = value;
      else if (rest.length === 0 && value && /^basic$/i.test(scheme ?? '')) {
        const [user, pass] = Buffer.from(value, 'base64').toString('utf8').split(':');
        if (pass && pass !== 'x-oauth-basic' && this.tokens.get(pass) === user) return user!;
        token = pass && pass !== 'x-oauth-basic' ? pass : user;
      }
    } else {
      token = url.searchParams.get('token') ?? url.searchParams.get('access_token') ?? undefined;
    }
    if (token === undefined) return null;
    const login = this.tokens.get(token);
    if (!login) throw new ApiError(401, this.#apiError('invalid username, password or token'));
    this.#lastToken = token;
    return login;
  }

  /**
   * Gitea's token scopes: each route needs `read:<category>` (GET) or
   * `write:<category>`, where the category is user, organization, issue or
   * repository; `write:x` includes `read:x`, `all` everything.
   */
  #checkScope(token: string | undefined, method: string, path: string): void {
    const scopes = token === undefined ? undefined : this.tokenScopes.get(token);
    if (!scopes || scopes.includes('all')) return;
    const category = /^\/(user|users)\b/.test(path)
      ? 'user'
      : /^\/notifications\b/.test(path)
        ? 'notification'
        : /^\/orgs\//.test(path)
          ? 'organization'
          : /^\/repos\/[^/]+\/[^/]+\/(issues|labels)\b/.test(path)
            ? 'issue'
            : /^\/repos\//.test(path)
              ? 'repository'
              : undefined;
    if (!category) return;
    const level = method === 'GET' || method === 'HEAD' ? 'read' : 'write';
    const ok =
      scopes.includes(`write:${category}`) ||
      (level === 'read' && scopes.includes(`read:${category}`));
    if (!ok)
      throw new ApiError(
        403,
        this.#apiError(
          `token does not have at least one of required scope(s), required=[${level}:${category}], token scope=${scopes.join(',')}`,
        ),
      );
  }

  async #readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of req) {
      size += (c as Buffer).length;
      if (size > 10 * 1024 * 1024)
        throw new ApiError(413, this.#apiError('request body too large'));
      chunks.push(c as Buffer);
    }
    if (size === 0) return {};
    try {
      const v = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not an object');
      return v as Record<string, unknown>;
    } catch {
      throw new ApiError(422, this.#apiError('[Body]: invalid JSON'));
    }
  }

  async #handleApi(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const method = req.method ?? 'GET';
    const path = url.pathname.slice('/api/v1'.length);
    let template = '';
    let status = 200;
    let body: unknown = null;
    let headers: Record<string, string> = {};
    try {
      this.#lastToken = undefined;
      const user = this.#authenticate(req, url);
      this.#checkScope(this.#lastToken, method, path);
      const needUser = (): string => {
        if (!user) throw new ApiError(401, this.#apiError('token is required'));
        return user;
      };
      const route = (pattern: string) => {
        const re = new RegExp(
          `^${pattern.replace(/\{(\w+)\*\}/g, '(?<$1>.+)').replace(/\{(\w+)\}/g, '(?<$1>[^/]+)')}$`,
        );
        const m = re.exec(path);
        if (m) template = pattern;
        return m?.groups ?? (m ? {} : undefined);
      };
      const repoOf = (g: Record<string, string>) => {
        const r = this.repos.get(
          `${decodeURIComponent(g['owner']!)}/${decodeURIComponent(g['repo']!)}`,
        );
        if (!r) throw new ApiError(404, this.#notFound('GetRepositoryByName'));
        return r;
      };
      const num = (g: Record<string, string>) => Number(g['index']);
      let g: Record<string, string> | undefined;
      const extra = [...REVIEW_ROUTES, ...REPO_ROUTES].find((r) => (g = route(r.pattern)));
      if (extra && !extra.methods.includes(method)) throw new ApiError(405, null);

      if (extra && g) {
        template = extra.pattern.replace('*}', '}');
        const params = Object.fromEntries(
          Object.entries(g).map(([k, v]) => [k, decodeURIComponent(v)]),
        );
        const answer = await extra.handle(this.#core, {
          method,
          params,
          url,
          user,
          needUser,
          readJson: () => this.#readJson(req),
          repo: () => repoOf(g!),
        });
        status = answer.status ?? 200;
        body = answer.body;
        headers = answer.headers ?? {};
      } else if (method === 'GET' && route('/version')) {
        body = { version: '1.26.3' };
      } else if (method === 'GET' && route('/user')) {
        body = userJson(this.#base, this.#user(needUser()));
      } else if (method === 'GET' && (g = route('/users/{username}'))) {
        const u = this.users.get(g['username']!);
        if (!u) throw new ApiError(404, this.#notFound('GetUserByName'));
        body = userJson(this.#base, u);
      } else if (method === 'GET' && (g = route('/orgs/{org}/members/{username}'))) {
        const caller = needUser();
        const org = this.orgs.get(g['org']!);
        if (!org) throw new ApiError(404, this.#notFound('GetOrgByName'));
        if (!this.users.has(g['username']!))
          throw new ApiError(404, this.#notFound('GetUserByName'));
        const callerUser = this.#user(caller);
        if (org.members.has(caller) || callerUser.isAdmin) {
          status = org.members.has(g['username']!) ? 204 : 404;
          body = status === 404 ? this.#notFound() : null;
        } else if (caller === g['username']) {
          status = 404;
          body = this.#notFound();
        } else {
          status = 303;
          headers = { location: `/api/v1/orgs/${g['org']}/public_members/${g['username']}` };
        }
      } else if (method === 'GET' && (g = route('/orgs/{org}/public_members/{username}'))) {
        const org = this.orgs.get(g['org']!);
        if (!org) throw new ApiError(404, this.#notFound('GetOrgByName'));
        status = org.publicMembers.has(g['username']!) ? 204 : 404;
        body = status === 404 ? this.#notFound() : null;
      } else if (method === 'GET' && (g = route('/repos/{owner}/{repo}'))) {
        body = repoJson(this.#ctx(repoOf(g)));
      } else if ((g = route('/repos/{owner}/{repo}/issues'))) {
        const repo = repoOf(g);
        if (method === 'POST') {
          const as = needUser();
          const b = await this.#readJson(req);
          if (typeof b['title'] !== 'string' || b['title'].length === 0)
            throw new ApiError(422, this.#apiError('[Title]: Required'));
          const labels = this.#labelNames(repo, b['labels']);
          const issue = this.#newIssue(
            repo,
            as,
            { title: b['title'], body: typeof b['body'] === 'string' ? b['body'] : '' },
            true,
          );
          if (labels.length) this.#setLabels(repo, issue, as, labels);
          if (Array.isArray(b['assignees']) && b['assignees'].length)
            this.#assign(repo, issue, as, b['assignees'] as string[]);
          status = 201;
          body = issueJson(this.#ctx(repo), issue);
        } else if (method === 'GET') {
          const state = url.searchParams.get('state') ?? 'open';
          const type = url.searchParams.get('type');
          // Gitea: comma-separated label names, every one of them on the issue.
          const labels = (url.searchParams.get('labels') ?? '').split(',').filter(Boolean);
          const items = [...repo.issues.values()]
            .filter((i) => state === 'all' || i.state === state)
            .filter((i) => (type === 'pulls' ? !!i.pull : type === 'issues' ? !i.pull : true))
            .filter((i) => labels.every((l) => i.labels.includes(l)))
            .sort((a, b) => b.number - a.number);
          ({ body, headers } = this.#page(url, items, (i) => issueJson(this.#ctx(repo), i)));
        } else throw new ApiError(405, null);
      } else if ((g = route('/repos/{owner}/{repo}/issues/{index}'))) {
        const repo = repoOf(g);
        const issue = this.#issueOr404(repo, num(g));
        if (method === 'GET') body = issueJson(this.#ctx(repo), issue);
        else if (method === 'PATCH') {
          const as = needUser();
          if (!this.#canWrite(repo, as) && issue.author !== as) throw new ApiError(403, null);
          const b = await this.#readJson(req);
          await this.#editIssue(repo, issue, as, b);
          status = 201;
          body = issueJson(this.#ctx(repo), issue);
        } else throw new ApiError(405, null);
      } else if ((g = route('/repos/{owner}/{repo}/issues/{index}/comments'))) {
        const repo = repoOf(g);
        const issue = repo.issues.get(num(g));
        // Gitea answers 500 (with the message hidden) for a missing issue here.
        if (!issue) throw new ApiError(500, this.#apiError(''));
        if (method === 'GET') {
          body = issue.comments.map((c) => commentJson(this.#ctx(repo), issue, c));
          headers = { 'x-total-count': String(issue.comments.length) };
        } else if (method === 'POST') {
          const as = needUser();
          const b = await this.#readJson(req);
          if (typeof b['body'] !== 'string' || b['body'].length === 0)
            throw new ApiError(422, this.#apiError('[Body]: Required'));
          const c = this.#comment(repo, issue, as, b['body']);
          status = 201;
          body = commentJson(this.#ctx(repo), issue, c);
        } else throw new ApiError(405, null);
      } else if (method === 'GET' && (g = route('/repos/{owner}/{repo}/issues/{index}/timeline'))) {
        const repo = repoOf(g);
        const issue = repo.issues.get(num(g));
        if (!issue) throw new ApiError(500, this.#apiError(''));
        const limit = Math.min(50, Math.max(1, Number(url.searchParams.get('limit') ?? 30) || 30));
        const page = Math.max(1, Number(url.searchParams.get('page') ?? 1) || 1);
        const items = issue.timeline
          .slice((page - 1) * limit, page * limit)
          .map((t) => timelineJson(this.#ctx(repo), issue, t));
        body = items.length ? items : null;
        headers = { 'x-total-count': String(items.length) };
      } else if ((g = route('/repos/{owner}/{repo}/issues/{index}/labels'))) {
        const repo = repoOf(g);
        const issue = this.#issueOr404(repo, num(g));
        const as = needUser();
        if (!this.#canWrite(repo, as)) throw new ApiError(403, null);
        const b = await this.#readJson(req);
        const names = this.#labelNames(repo, b['labels']);
        if (method === 'POST')
          this.#setLabels(repo, issue, as, [...new Set([...issue.labels, ...names])]);
        else if (method === 'PUT') this.#setLabels(repo, issue, as, names);
        else throw new ApiError(405, null);
        body = issue.labels.map((n) => labelJson(this.#ctx(repo), repo.labels.get(n)!));
      } else if ((g = route('/repos/{owner}/{repo}/labels'))) {
        const repo = repoOf(g);
        if (method === 'GET')
          body = [...repo.labels.values()].map((l) => labelJson(this.#ctx(repo), l));
        else if (method === 'POST') {
          const as = needUser();
          if (!this.#canWrite(repo, as)) throw new ApiError(403, null);
          const b = await this.#readJson(req);
          if (typeof b['name'] !== 'string' || !b['name'])
            throw new ApiError(422, this.#apiError('[Name]: Required'));
          status = 201;
          body = labelJson(
            this.#ctx(repo),
            this.#label(
              repo,
              b['name'],
              String(b['color'] ?? 'e4e669'),
              String(b['description'] ?? ''),
            ),
          );
        } else throw new ApiError(405, null);
      } else if ((g = route('/repos/{owner}/{repo}/pulls'))) {
        const repo = repoOf(g);
        if (method === 'GET') {
          const state = url.searchParams.get('state') ?? 'open';
          const items = [...repo.issues.values()]
            .filter((i) => i.pull && (state === 'all' || i.state === state))
            .sort((a, b) => b.number - a.number);
          ({ body, headers } = this.#page(url, items, (i) => pullJson(this.#ctx(repo), i)));
        } else if (method === 'POST') {
          const as = needUser();
          const b = await this.#readJson(req);
          const pr = await this.#openPr(repo, as, b);
          status = 201;
          body = pullJson(this.#ctx(repo), pr);
        } else throw new ApiError(405, null);
      } else if ((g = route('/repos/{owner}/{repo}/pulls/{index}/merge'))) {
        const repo = repoOf(g);
        const issue = repo.issues.get(num(g));
        if (!issue?.pull) throw new ApiError(404, this.#notFound());
        if (method === 'GET') {
          status = issue.pull.merged ? 204 : 404;
          body = status === 404 ? this.#notFound() : null;
        } else if (method === 'POST') {
          const as = needUser();
          if (!this.#canWrite(repo, as)) throw new ApiError(403, null);
          await this.#merge(repo, issue, as);
          status = 200;
          body = null;
        } else throw new ApiError(405, null);
      } else if ((g = route('/repos/{owner}/{repo}/pulls/{index}')) && /^\d+$/.test(g['index']!)) {
        const repo = repoOf(g);
        const issue = repo.issues.get(num(g));
        if (!issue?.pull) throw new ApiError(404, this.#notFound());
        if (method === 'GET') body = pullJson(this.#ctx(repo), issue);
        else if (method === 'PATCH') {
          const as = needUser();
          if (!this.#canWrite(repo, as) && issue.author !== as) throw new ApiError(403, null);
          await this.#editIssue(repo, issue, as, await this.#readJson(req));
          status = 201;
          body = pullJson(this.#ctx(repo), issue);
        } else throw new ApiError(405, null);
      } else if (method === 'GET' && (g = route('/repos/{owner}/{repo}/pulls/{base}/{head*}'))) {
        template = '/repos/{owner}/{repo}/pulls/{base}/{head}';
        const repo = repoOf(g);
        const head = decodeURIComponent(g['head']!);
        const pr = [...repo.issues.values()].find(
          (i) => i.pull && i.pull.baseRef === g!['base'] && i.pull.headRef === head,
        );
        if (!pr) throw new ApiError(404, this.#notFound());
        body = pullJson(this.#ctx(repo), pr);
      } else {
        throw new ApiError(404, this.#notFound());
      }
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      status = err.status;
      body = err.body;
      headers = err.headers;
    }
    this.#options.onResponse?.({ method, template, path, status, body });
    if (status === 204 || status === 303 || body === null) {
      const h: Record<string, string> = { ...headers };
      if (status === 303) h['content-type'] = 'text/html; charset=utf-8';
      if (status !== 204 && status !== 303 && status !== 200)
        h['content-type'] = 'application/json;charset=utf-8';
      if (status === 200 && body === null && template.endsWith('/timeline')) {
        res
          .writeHead(status, { ...h, 'content-type': 'application/json;charset=utf-8' })
          .end('null\n');
        return;
      }
      res.writeHead(status, h).end();
      return;
    }
    res.writeHead(status, { 'content-type': 'application/json;charset=utf-8', ...headers });
    res.end(encodeApiJson(body));
  }

  #labelNames(repo: RepoModel, value: unknown): string[] {
    if (value === undefined) return [];
    if (!Array.isArray(value)) throw new ApiError(422, this.#apiError('[Labels]: must be a list'));
    return value.map((v) => {
      if (typeof v === 'number') {
        const l = [...repo.labels.values()].find((x) => x.id === v);
        if (!l) throw new ApiError(404, this.#notFound('GetLabelByID'));
        return l.name;
      }
      return this.#label(repo, String(v)).name;
    });
  }

  async #editIssue(
    repo: RepoModel,
    issue: IssueModel,
    as: string,
    b: Record<string, unknown>,
  ): Promise<void> {
    const changes: Record<string, unknown> = {};
    if (typeof b['title'] === 'string' && b['title'] !== issue.title) {
      changes['title'] = { from: issue.title };
      issue.title = b['title'];
    }
    if (typeof b['body'] === 'string' && b['body'] !== issue.body) {
      changes['body'] = { from: issue.body };
      issue.body = b['body'];
    }
    if (Object.keys(changes).length) {
      this.#touch(repo, issue);
      if (issue.pull) this.#crossReference(repo, issue);
      this.#emit(
        repo,
        issue.pull ? 'pull_request' : 'issues',
        this.#issuePayload(repo, issue, 'edited', as, { changes }),
      );
    }
    if (Array.isArray(b['assignees'])) this.#assign(repo, issue, as, b['assignees'] as string[]);
    if (b['state'] === 'closed' || b['state'] === 'open')
      this.#setState(repo, issue, as, b['state']);
  }

  async #openPr(repo: RepoModel, as: string, b: Record<string, unknown>): Promise<IssueModel> {
    const head = b['head'];
    const base = b['base'];
    const title = b['title'];
    if (
      typeof head !== 'string' ||
      typeof base !== 'string' ||
      typeof title !== 'string' ||
      !head ||
      !base ||
      !title
    ) {
      throw new ApiError(422, this.#apiError('[Head Base Title]: Required'));
    }
    const headSha = await this.git.branchSha(repo.gitDir, head);
    const baseSha = await this.git.branchSha(repo.gitDir, base);
    if (!headSha || !baseSha)
      throw new ApiError(404, this.#notFound(`branch ${!headSha ? head : base} does not exist`));
    const dup = [...repo.issues.values()].find(
      (i) => i.pull && i.state === 'open' && i.pull.headRef === head && i.pull.baseRef === base,
    );
    if (dup) {
      throw new ApiError(
        409,
        this.#apiError(
          `pull request already exists for these targets [id: ${dup.pull!.id}, issue_id: ${dup.id}, head_repo_id: ${repo.id}, base_repo_id: ${repo.id}, head_branch: ${head}, base_branch: ${base}]`,
        ),
      );
    }
    const issue = this.#newIssue(
      repo,
      as,
      { title, body: typeof b['body'] === 'string' ? b['body'] : '' },
      false,
    );
    issue.pull = {
      id: this.#id(),
      headRef: head,
      baseRef: base,
      headSha,
      baseSha,
      mergeBase: await this.git.mergeBase(repo.gitDir, headSha, baseSha),
      merged: false,
      mergedAt: null,
      mergedBy: null,
      mergeCommitSha: null,
    };
    this.#crossReference(repo, issue);
    this.#emit(repo, 'pull_request', this.#issuePayload(repo, issue, 'opened', as));
    return issue;
  }

  #page<T>(
    url: URL,
    items: T[],
    shape: (t: T) => unknown,
  ): { body: unknown; headers: Record<string, string> } {
    const limit = Math.min(50, Math.max(1, Number(url.searchParams.get('limit') ?? 30) || 30));
    const page = Math.max(1, Number(url.searchParams.get('page') ?? 1) || 1);
    const last = Math.max(1, Math.ceil(items.length / limit));
    const link = (p: number) => {
      const q = new URLSearchParams(url.searchParams);
      q.set('page', String(p));
      q.set('limit', String(limit));
      const sorted = new URLSearchParams(
        [...q.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
      );
      return `<${this.#base}api/v1${url.pathname.slice('/api/v1'.length)}?${sorted}>`;
    };
    const links: string[] = [];
    if (page < last) links.push(`${link(page + 1)}; rel="next"`, `${link(last)}; rel="last"`);
    if (page > 1) links.push(`${link(1)}; rel="first"`, `${link(page - 1)}; rel="prev"`);
    const headers: Record<string, string> = {
      'x-total-count': String(items.length),
      'access-control-expose-headers': 'Link, X-Total-Count',
    };
    if (links.length) headers['link'] = links.join(',');
    return { body: items.slice((page - 1) * limit, page * limit).map(shape), headers };
  }

  async #handleGit(
    req: IncomingMessage,
    res: ServerResponse,
    owner: string,
    name: string,
    what: string,
    url: URL,
  ): Promise<void> {
    const repo = this.repos.get(`${owner}/${name}`);
    if (!repo) {
      res.writeHead(404).end();
      return;
    }
    const push =
      what === 'git-receive-pack' || url.searchParams.get('service') === 'git-receive-pack';
    let user: string | null = null;
    try {
      user = this.#authenticate(req, url);
    } catch {
      user = null;
      if (push) {
        res.writeHead(401, { 'www-authenticate': 'Basic realm="Gitea"' }).end();
        return;
      }
    }
    if (push && !user) {
      res.writeHead(401, { 'www-authenticate': 'Basic realm="Gitea"' }).end();
      return;
    }
    if (push && user && !this.#canWrite(repo, user)) {
      res.writeHead(403).end();
      return;
    }
    const before = what === 'git-receive-pack' ? await this.git.branches(repo.gitDir) : undefined;
    await this.git.serveHttp(
      req,
      res,
      `/${owner}/${name}.git/${what}`,
      url.search.slice(1),
      user ?? undefined,
    );
    if (before && user) await this.#afterPush(repo, before, user);
  }

  async #afterPush(repo: RepoModel, before: Map<string, string>, pusher: string): Promise<void> {
    const after = await this.git.branches(repo.gitDir);
    for (const issue of repo.issues.values()) {
      const p = issue.pull;
      if (!p || issue.state !== 'open') continue;
      const sha = after.get(p.headRef);
      if (sha && sha !== before.get(p.headRef) && sha !== p.headSha) {
        p.headSha = sha;
        p.mergeBase = await this.git.mergeBase(repo.gitDir, sha, p.baseSha);
        this.#touch(repo, issue);
        this.#emit(
          repo,
          'pull_request_sync',
          this.#issuePayload(repo, issue, 'synchronized', pusher),
        );
      }
      const baseSha = after.get(p.baseRef);
      if (baseSha) p.baseSha = baseSha;
    }
  }
}

/** Start a Gitea-compatible test server on loopback. */
export function createGiteaTestServer(
  options: GiteaTestServerOptions = {},
): Promise<GiteaTestServer> {
  return GiteaTestServer.start(options);
}
