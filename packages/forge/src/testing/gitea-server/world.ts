/**
 * The test server's world: users, organisations, repositories with their
 * issues, PRs, comments, labels and timelines, and every change to them, each
 * sending the webhooks Gitea would. The routes (`routes.ts`) and the server's
 * own test API change it only through here.
 */
import type { ApiCore, NewIssue, NewReview } from './api-core';
import { ApiError } from './api-core';
import type { GitStore } from './git';
import type { HookSender } from './hooks';
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
import { submitReview } from './reviews';
import { commentJson, issueJson, pullJson, repoJson, type ShapeContext, userJson } from './shapes';

const CLOSE_KEYWORDS = /\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s+#(\d+)\b/gi;
const ANY_REF = /(?:^|[^\w/])#(\d+)\b/g;

export class GiteaWorld implements ApiCore {
  readonly users = new Map<string, UserModel>();
  readonly orgs = new Map<string, OrgModel>();
  readonly repos = new Map<string, RepoModel>();
  readonly hooks: HookModel[] = [];
  /** Web root with a trailing slash: the server's, once it listens. */
  base = 'http://127.0.0.1/';
  #ids = 100;

  constructor(
    readonly git: GitStore,
    readonly sender: HookSender,
  ) {}

  /** Add a seed's users, organisations, repositories (made in git), labels and issues. */
  async seed(world: GiteaWorldSeed): Promise<void> {
    for (const u of world.users ?? []) {
      this.addUser(u.login, { fullName: u.fullName, email: u.email, isAdmin: u.isAdmin });
    }
    for (const o of world.orgs ?? []) {
      this.addUser(o.name, { fullName: o.fullName, isOrg: true });
      for (const m of o.members) this.user(m);
      this.orgs.set(o.name, {
        name: o.name,
        members: new Set(o.members),
        publicMembers: new Set(o.publicMembers ?? []),
      });
    }
    for (const r of world.repos ?? []) {
      this.user(r.owner);
      const branch = r.defaultBranch ?? 'main';
      const gitDir = await this.git.create(
        r.owner,
        r.name,
        branch,
        r.files ?? { 'README.md': `# ${r.name}\n` },
      );
      const t = now();
      this.repos.set(`${r.owner}/${r.name}`, {
        id: this.id(),
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
      this.label(this.repo(l.repo), l.name, l.color, l.description);
    for (const i of world.issues ?? []) {
      const repo = this.repo(i.repo);
      this.newIssue(
        repo,
        i.author,
        { title: i.title, body: i.body, labels: i.labels, assignees: i.assignees },
        false,
      );
    }
  }

  review(repo: RepoModel, pr: IssueModel, as: string, input: NewReview): ReviewModel {
    return submitReview(this, repo, pr, as, input);
  }

  id(): number {
    return ++this.#ids;
  }

  addUser(
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
      id: this.id(),
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

  user(login: string): UserModel {
    const u = this.users.get(login);
    if (!u) throw new Error(`unknown user ${login}: add it to the world's users`);
    return u;
  }

  repo(fullName: string): RepoModel {
    const r = this.repos.get(fullName);
    if (!r) throw new Error(`unknown repository ${fullName}`);
    return r;
  }

  ctx(repo: RepoModel): ShapeContext {
    return { base: this.base, user: (l) => this.user(l), repo };
  }

  label(repo: RepoModel, name: string, color = 'e4e669', description = ''): LabelModel {
    let l = repo.labels.get(name);
    if (!l) {
      l = { id: this.id(), name, color: color.replace(/^#/, ''), description };
      repo.labels.set(name, l);
    }
    return l;
  }

  canWrite(repo: RepoModel, login: string): boolean {
    if (repo.owner === login || repo.collaborators.has(login)) return true;
    if (this.users.get(login)?.isAdmin) return true;
    return this.orgs.get(repo.owner)?.members.has(login) ?? false;
  }

  /** The owner, a listed admin, a site admin: who may manage hooks and read others' permissions. */
  isRepoAdmin(repo: RepoModel, login: string): boolean {
    return repo.owner === login || repo.admins.has(login) || !!this.users.get(login)?.isAdmin;
  }

  issueOr404(repo: RepoModel, n: number): IssueModel {
    const i = repo.issues.get(n);
    if (!i) throw new ApiError(404, this.notFound());
    return i;
  }

  notFound(message = 'not found'): unknown {
    return { errors: null, message, url: `${this.base}api/swagger` };
  }

  apiError(message: string): unknown {
    return { message, url: `${this.base}api/swagger` };
  }

  touch(repo: RepoModel, issue: IssueModel): void {
    issue.updatedAt = now();
    repo.updatedAt = issue.updatedAt;
  }

  #repoHooks(repo: RepoModel): HookModel[] {
    // Repository hooks of this repo and org hooks of its owner: a test server has
    // one set, so both levels fire for every repository.
    void repo;
    return this.hooks;
  }

  issuePayload(
    repo: RepoModel,
    issue: IssueModel,
    action: string,
    sender: string,
    extra: Record<string, unknown> = {},
  ) {
    const ctx = this.ctx(repo);
    if (issue.pull) {
      return {
        action,
        number: issue.number,
        ...extra,
        pull_request: pullJson(ctx, issue, true),
        requested_reviewer: null,
        repository: repoJson(ctx),
        sender: userJson(this.base, this.user(sender), true),
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
      sender: userJson(this.base, this.user(sender), true),
      commit_id: (extra['commit_id'] as string | undefined) ?? '',
    };
  }

  emit(repo: RepoModel, eventType: string, payload: unknown): void {
    this.sender.send(this.#repoHooks(repo), eventType, payload);
  }

  newIssue(repo: RepoModel, author: string, input: NewIssue, notify: boolean): IssueModel {
    this.user(author);
    const t = now();
    const issue: IssueModel = {
      id: this.id(),
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
      this.label(repo, l);
      issue.labels.push(l);
    }
    for (const a of input.assignees ?? []) {
      this.user(a);
      issue.assignees.push(a);
    }
    repo.issues.set(issue.number, issue);
    if (notify) this.emit(repo, 'issues', this.issuePayload(repo, issue, 'opened', author));
    return issue;
  }

  comment(repo: RepoModel, issue: IssueModel, author: string, body: string) {
    const t = now();
    const c = { id: this.id(), author, body, createdAt: t, updatedAt: t };
    issue.comments.push(c);
    issue.timeline.push({
      id: c.id,
      type: 'comment',
      actor: author,
      createdAt: t,
      body,
      commentId: c.id,
    });
    this.touch(repo, issue);
    const ctx = this.ctx(repo);
    const payload: Record<string, unknown> = {
      action: 'created',
      issue: issueJson(ctx, issue, true),
    };
    if (issue.pull) payload['pull_request'] = pullJson(ctx, issue, true);
    payload['comment'] = commentJson(ctx, issue, c, true);
    payload['repository'] = repoJson(ctx);
    payload['sender'] = userJson(this.base, this.user(author), true);
    payload['is_pull'] = issue.pull !== null;
    this.emit(repo, issue.pull ? 'pull_request_comment' : 'issue_comment', payload);
    return c;
  }

  setLabels(repo: RepoModel, issue: IssueModel, as: string, labels: string[]): void {
    const t = now();
    const before = new Set(issue.labels);
    for (const l of labels) this.label(repo, l);
    for (const l of labels)
      if (!before.has(l))
        issue.timeline.push({ id: this.id(), type: 'label', actor: as, createdAt: t, label: l });
    for (const l of before)
      if (!labels.includes(l))
        issue.timeline.push({
          id: this.id(),
          type: 'label',
          actor: as,
          createdAt: t,
          label: l,
          labelRemoved: true,
        });
    issue.labels = [...new Set(labels)];
    this.touch(repo, issue);
    const action = issue.labels.length === 0 ? 'label_cleared' : 'label_updated';
    this.emit(
      repo,
      issue.pull ? 'pull_request_label' : 'issue_label',
      this.issuePayload(repo, issue, action, as),
    );
  }

  assign(repo: RepoModel, issue: IssueModel, as: string, assignees: string[]): void {
    for (const a of assignees) this.user(a);
    const before = new Set(issue.assignees);
    const t = now();
    const added = assignees.filter((a) => !before.has(a));
    const removed = [...before].filter((a) => !assignees.includes(a));
    issue.assignees = [...new Set(assignees)];
    this.touch(repo, issue);
    const type = issue.pull ? 'pull_request_assign' : 'issue_assign';
    const change = (assignee: string, removedAssignee: boolean) => {
      issue.timeline.push({
        id: this.id(),
        type: 'assignees',
        actor: as,
        createdAt: t,
        assignee,
        ...(removedAssignee ? { removedAssignee } : {}),
      });
      const action = removedAssignee ? 'unassigned' : 'assigned';
      this.emit(repo, type, this.issuePayload(repo, issue, action, as));
    };
    for (const a of removed) change(a, true);
    for (const a of added) change(a, false);
  }

  setState(
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
      id: this.id(),
      type: state === 'closed' ? 'close' : 'reopen',
      actor: as,
      createdAt: now(),
    });
    this.touch(repo, issue);
    const action = state === 'closed' ? 'closed' : 'reopened';
    const extra = commitId ? { commit_id: commitId } : {};
    this.emit(
      repo,
      issue.pull ? 'pull_request' : 'issues',
      this.issuePayload(repo, issue, action, as, issue.pull ? {} : extra),
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
          id: this.id(),
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

  async merge(
    repo: RepoModel,
    issue: IssueModel,
    as: string,
    style: 'merge' | 'squash' = 'merge',
  ): Promise<string> {
    const p = issue.pull;
    if (!p) throw new ApiError(404, this.notFound());
    if (p.merged) throw new ApiError(405, null);
    if (issue.state !== 'open') throw new ApiError(405, null);
    const user = this.user(as);
    const sha = await this.git.merge(
      repo.gitDir,
      p.baseRef,
      p.headRef,
      `Merge pull request '${issue.title}' (#${issue.number}) from ${p.headRef} into ${p.baseRef}`,
      {
        name: user.login,
        email: user.email || `${user.login}@example.test`,
      },
      style,
    );
    if (!sha) throw new ApiError(409, this.apiError('merge conflict'));
    const t = now();
    p.merged = true;
    p.mergedAt = t;
    p.mergedBy = as;
    p.mergeCommitSha = sha;
    issue.state = 'closed';
    issue.closedAt = t;
    issue.timeline.push({ id: this.id(), type: 'merge_pull', actor: as, createdAt: t });
    this.touch(repo, issue);
    this.emit(repo, 'pull_request', this.issuePayload(repo, issue, 'closed', as));
    // Gitea then closes the issues the PR resolves, each with the merge commit.
    for (const target of repo.issues.values()) {
      if (target.pull || target.state !== 'open') continue;
      if (
        target.timeline.some(
          (x) => x.type === 'pull_ref' && x.refIssue === issue.number && x.refAction === 'closes',
        )
      ) {
        this.setState(repo, target, as, 'closed', sha);
      }
    }
    return sha;
  }

  labelNames(repo: RepoModel, value: unknown): string[] {
    if (value === undefined) return [];
    if (!Array.isArray(value)) throw new ApiError(422, this.apiError('[Labels]: must be a list'));
    return value.map((v) => {
      if (typeof v === 'number') {
        const l = [...repo.labels.values()].find((x) => x.id === v);
        if (!l) throw new ApiError(404, this.notFound('GetLabelByID'));
        return l.name;
      }
      return this.label(repo, String(v)).name;
    });
  }

  async editIssue(
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
      this.touch(repo, issue);
      if (issue.pull) this.#crossReference(repo, issue);
      this.emit(
        repo,
        issue.pull ? 'pull_request' : 'issues',
        this.issuePayload(repo, issue, 'edited', as, { changes }),
      );
    }
    if (Array.isArray(b['assignees'])) this.assign(repo, issue, as, b['assignees'] as string[]);
    if (b['state'] === 'closed' || b['state'] === 'open')
      this.setState(repo, issue, as, b['state']);
  }

  async openPr(repo: RepoModel, as: string, b: Record<string, unknown>): Promise<IssueModel> {
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
      throw new ApiError(422, this.apiError('[Head Base Title]: Required'));
    }
    const headSha = await this.git.branchSha(repo.gitDir, head);
    const baseSha = await this.git.branchSha(repo.gitDir, base);
    if (!headSha || !baseSha)
      throw new ApiError(404, this.notFound(`branch ${!headSha ? head : base} does not exist`));
    const dup = [...repo.issues.values()].find(
      (i) => i.pull && i.state === 'open' && i.pull.headRef === head && i.pull.baseRef === base,
    );
    if (dup) {
      throw new ApiError(
        409,
        this.apiError(
          `pull request already exists for these targets [id: ${dup.pull!.id}, issue_id: ${dup.id}, head_repo_id: ${repo.id}, base_repo_id: ${repo.id}, head_branch: ${head}, base_branch: ${base}]`,
        ),
      );
    }
    const issue = this.newIssue(
      repo,
      as,
      { title, body: typeof b['body'] === 'string' ? b['body'] : '' },
      false,
    );
    issue.pull = {
      id: this.id(),
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
    // Gitea keeps every PR's head at refs/pull/<n>/head, after its branch is gone too.
    await this.git.git(repo.gitDir, ['update-ref', `refs/pull/${issue.number}/head`, headSha]);
    this.#crossReference(repo, issue);
    this.emit(repo, 'pull_request', this.issuePayload(repo, issue, 'opened', as));
    return issue;
  }

  page<T>(
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
      return `<${this.base}api/v1${url.pathname.slice('/api/v1'.length)}?${sorted}>`;
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

  async afterPush(repo: RepoModel, before: Map<string, string>, pusher: string): Promise<void> {
    const after = await this.git.branches(repo.gitDir);
    for (const issue of repo.issues.values()) {
      const p = issue.pull;
      if (!p || issue.state !== 'open') continue;
      const sha = after.get(p.headRef);
      if (sha && sha !== before.get(p.headRef) && sha !== p.headSha) {
        p.headSha = sha;
        await this.git.git(repo.gitDir, ['update-ref', `refs/pull/${issue.number}/head`, sha]);
        p.mergeBase = await this.git.mergeBase(repo.gitDir, sha, p.baseSha);
        this.touch(repo, issue);
        this.emit(
          repo,
          'pull_request_sync',
          this.issuePayload(repo, issue, 'synchronized', pusher),
        );
      }
      const baseSha = after.get(p.baseRef);
      if (baseSha) p.baseSha = baseSha;
    }
  }
}
