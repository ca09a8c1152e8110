/**
 * The everyday repository endpoints a Gitea client calls besides issues and
 * PRs: branches, file contents, a comment by id (read, edit, delete), reactions,
 * collaborator permissions, an organisation's repositories and hooks, a hook
 * by id. Status codes and shapes follow Gitea 1.26 (checked against its swagger).
 */
import { type ApiCore, ApiError, type Route, type RouteRequest } from './api-core';
import type { CommentModel, HookModel, IssueModel, ReactionModel, RepoModel } from './model';
import { now } from './model';
import { commentJson, issueJson, pullJson, repoJson, type ShapeContext, userJson } from './shapes';

/** Gitea's default allowed reactions (`[ui] REACTIONS`). */
export const REACTIONS = ['+1', '-1', 'laugh', 'hooray', 'confused', 'heart', 'rocket', 'eyes'];

function reactionJson(ctx: ShapeContext, r: ReactionModel) {
  return {
    user: userJson(ctx.base, ctx.user(r.user)),
    content: r.content,
    created_at: r.createdAt,
  };
}

/**
 * A reactions endpoint over `list`: GET lists them; POST adds the caller's
 * (once per user and content), 201 when new, 200 when it was there.
 */
async function reactions(
  core: ApiCore,
  req: RouteRequest,
  repo: RepoModel,
  list: ReactionModel[],
): Promise<{ status?: number; body: unknown }> {
  const ctx = core.ctx(repo);
  if (req.method === 'GET') return { body: list.map((r) => reactionJson(ctx, r)) };
  const as = req.needUser();
  const content = (await req.readJson())['content'];
  if (typeof content !== 'string' || !REACTIONS.includes(content))
    throw new ApiError(403, core.apiError(`'${String(content)}' is not an allowed reaction`));
  const had = list.find((r) => r.user === as && r.content === content);
  if (had) return { status: 200, body: reactionJson(ctx, had) };
  const reaction = { user: as, content, createdAt: now() };
  list.push(reaction);
  return { status: 201, body: reactionJson(ctx, reaction) };
}

function commentById(
  core: ApiCore,
  repo: RepoModel,
  id: string,
): { issue: IssueModel; comment: CommentModel } {
  for (const issue of repo.issues.values()) {
    const comment = issue.comments.find((c) => String(c.id) === id);
    if (comment) return { issue, comment };
  }
  throw new ApiError(404, core.notFound('GetCommentByID'));
}

async function commitOf(core: ApiCore, repo: RepoModel, ref: string) {
  const out = await core.git
    .git(repo.gitDir, [
      'log',
      '-1',
      '--format=%H%x00%an%x00%ae%x00%cn%x00%ce%x00%cI%x00%B',
      ref,
      '--',
    ])
    .catch(() => '');
  if (!out) return undefined;
  const [id, an, ae, cn, ce, at, ...msg] = out.split('\0');
  return {
    id: id!,
    message: msg.join('\0').replace(/\n$/, ''),
    url: `${core.base}${repo.owner}/${repo.name}/commit/${id}`,
    author: { name: an!, email: ae!, username: '' },
    committer: { name: cn!, email: ce!, username: '' },
    verification: null,
    timestamp: at!,
    added: null,
    removed: null,
    modified: null,
  };
}

async function branchJson(core: ApiCore, repo: RepoModel, name: string, caller: string | null) {
  const commit = await commitOf(core, repo, `refs/heads/${name}`);
  if (!commit) return undefined;
  const push = caller !== null && core.canWrite(repo, caller);
  return {
    name,
    commit,
    protected: false,
    required_approvals: 0,
    enable_status_check: false,
    status_check_contexts: [],
    user_can_push: push,
    user_can_merge: push,
    effective_branch_protection_name: '',
  };
}

function hookJson(h: HookModel) {
  const t = now();
  return {
    id: h.id,
    type: 'gitea',
    name: '',
    branch_filter: '',
    config: { content_type: 'json', url: h.url },
    events: h.events,
    authorization_header: '',
    active: h.active,
    updated_at: t,
    created_at: t,
  };
}

/** Apply a CreateHookOption / EditHookOption body to `hook`. */
function configureHook(core: ApiCore, hook: HookModel, b: Record<string, unknown>): void {
  const config = (b['config'] ?? {}) as Record<string, unknown>;
  if (config['content_type'] !== undefined && config['content_type'] !== 'json')
    throw new ApiError(422, core.apiError('[Config]: only content_type json is modelled'));
  if (typeof config['url'] === 'string') hook.url = config['url'];
  if (typeof config['secret'] === 'string') hook.secret = config['secret'];
  if (Array.isArray(b['events'])) hook.events = b['events'].map(String);
  if (typeof b['active'] === 'boolean') hook.active = b['active'];
}

function newHook(
  core: ApiCore,
  req: RouteRequest,
  level: HookModel['level'],
  b: Record<string, unknown>,
) {
  const config = (b['config'] ?? {}) as Record<string, unknown>;
  if (typeof config['url'] !== 'string' || !config['url'])
    throw new ApiError(422, core.apiError('[Config]: url is required'));
  if (b['type'] !== undefined && b['type'] !== 'gitea')
    throw new ApiError(422, core.apiError(`hook type ${String(b['type'])} is not modelled`));
  void req;
  const hook: HookModel = {
    id: core.id(),
    url: '',
    secret: '',
    events: ['push'],
    level,
    active: false,
  };
  configureHook(core, hook, b);
  core.hooks.push(hook);
  return hook;
}

function orgAdmin(core: ApiCore, org: string, login: string): boolean {
  return (core.orgs.get(org)?.members.has(login) ?? false) || !!core.users.get(login)?.isAdmin;
}

/** A hooks endpoint of one level: GET lists its hooks, POST adds one (201). */
async function hooksAt(
  core: ApiCore,
  req: RouteRequest,
  level: 'organization' | 'repository',
): Promise<{ status?: number; body: unknown }> {
  if (req.method === 'GET')
    return { body: core.hooks.filter((h) => h.level === level).map(hookJson) };
  return { status: 201, body: hookJson(newHook(core, req, level, await req.readJson())) };
}

export const REPO_ROUTES: Route[] = [
  {
    pattern: '/repos/{owner}/{repo}/branches',
    methods: ['GET'],
    async handle(core, req) {
      const repo = req.repo();
      const names = [...(await core.git.branches(repo.gitDir)).keys()].sort();
      const items = [];
      for (const n of names) items.push(await branchJson(core, repo, n, req.user));
      return core.page(req.url, items, (b) => b);
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/branches/{branch}',
    methods: ['GET'],
    async handle(core, req) {
      const b = await branchJson(core, req.repo(), req.params['branch']!, req.user);
      if (!b) throw new ApiError(404, core.notFound('GetBranch'));
      return { body: b };
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/contents/{filepath*}',
    methods: ['GET'],
    async handle(core, req) {
      const repo = req.repo();
      const path = req.params['filepath']!;
      const ref = req.url.searchParams.get('ref') || repo.defaultBranch;
      const entry = await core.git
        .git(repo.gitDir, ['ls-tree', '-l', ref, '--', path])
        .catch(() => '');
      const m = /^\d+ (blob) ([0-9a-f]+)\s+(\d+)\t/.exec(entry);
      if (!m) throw new ApiError(404, core.notFound('GetContentsOrList'));
      const content = Buffer.from(
        await core.git.git(repo.gitDir, ['cat-file', 'blob', m[2]!]),
        'utf8',
      ).toString('base64');
      const last = await commitOf(core, repo, ref);
      const self = `${core.base}api/v1/repos/${repo.owner}/${repo.name}/contents/${path}?ref=${ref}`;
      const html = `${core.base}${repo.owner}/${repo.name}/src/branch/${ref}/${path}`;
      const git = `${core.base}api/v1/repos/${repo.owner}/${repo.name}/git/blobs/${m[2]}`;
      return {
        body: {
          name: path.split('/').pop(),
          path,
          sha: m[2],
          last_commit_sha: last?.id ?? '',
          last_commit_message: last?.message ?? '',
          last_author_date: last?.timestamp ?? '',
          last_committer_date: last?.timestamp ?? '',
          type: 'file',
          size: Number(m[3]),
          encoding: 'base64',
          content,
          target: null,
          url: self,
          html_url: html,
          git_url: git,
          download_url: `${core.base}${repo.owner}/${repo.name}/raw/branch/${ref}/${path}`,
          submodule_git_url: null,
          _links: { self, git, html },
        },
      };
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/collaborators/{collaborator}',
    methods: ['GET'],
    handle(core, req) {
      req.needUser();
      const repo = req.repo();
      const who = req.params['collaborator']!;
      if (!core.users.has(who)) throw new ApiError(422, core.apiError('user does not exist'));
      const is = repo.collaborators.has(who) || repo.admins.has(who);
      return is ? { status: 204, body: null } : { status: 404, body: core.notFound() };
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/collaborators/{collaborator}/permission',
    methods: ['GET'],
    handle(core, req) {
      const caller = req.needUser();
      const repo = req.repo();
      const who = req.params['collaborator']!;
      // Gitea: only site admins, the repository's admins and the user themself may ask.
      if (
        !core.users.get(caller)?.isAdmin &&
        caller.toLowerCase() !== who.toLowerCase() &&
        !core.isRepoAdmin(repo, caller)
      )
        throw new ApiError(
          403,
          core.apiError(
            'Only admins can query all permissions, repo admins can query all repo permissions, collaborators can query only their own',
          ),
        );
      const u = core.users.get(who);
      if (!u) throw new ApiError(404, core.apiError(`user redirect does not exist [name: ${who}]`));
      const permission = core.isRepoAdmin(repo, who)
        ? repo.owner === who
          ? 'owner'
          : 'admin'
        : core.canWrite(repo, who)
          ? 'write'
          : 'read';
      return {
        body: { permission, role_name: permission, user: userJson(core.base, u) },
      };
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/issues/comments/{id}',
    methods: ['GET', 'PATCH', 'DELETE'],
    async handle(core, req) {
      const repo = req.repo();
      const { issue, comment } = commentById(core, repo, req.params['id']!);
      const ctx = core.ctx(repo);
      if (req.method === 'GET') return { body: commentJson(ctx, issue, comment) };
      const as = req.needUser();
      // Gitea: only the poster or someone who may write to the repository.
      if (comment.author !== as && !core.canWrite(repo, as)) throw new ApiError(403, null);
      if (req.method === 'DELETE') {
        issue.comments = issue.comments.filter((c) => c !== comment);
        issue.timeline = issue.timeline.filter((t) => t.commentId !== comment.id);
        core.touch(repo, issue);
        return { status: 204, body: null };
      }
      const b = await req.readJson();
      if (typeof b['body'] !== 'string') throw new ApiError(422, core.apiError('[Body]: Required'));
      if (b['body'] !== comment.body) {
        const from = comment.body;
        comment.body = b['body'];
        comment.updatedAt = now();
        for (const t of issue.timeline) if (t.commentId === comment.id) t.body = comment.body;
        core.emit(repo, issue.pull ? 'pull_request_comment' : 'issue_comment', {
          action: 'edited',
          issue: issueJson(ctx, issue, true),
          ...(issue.pull ? { pull_request: pullJson(ctx, issue, true) } : {}),
          comment: commentJson(ctx, issue, comment, true),
          changes: { body: { from } },
          repository: repoJson(ctx),
          sender: userJson(core.base, core.user(as), true),
          is_pull: issue.pull !== null,
        });
      }
      return { body: commentJson(ctx, issue, comment) };
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/issues/comments/{id}/reactions',
    methods: ['GET', 'POST'],
    async handle(core, req) {
      const repo = req.repo();
      const review = [...repo.issues.values()]
        .flatMap((i) => i.reviews)
        .find((r) => String(r.id) === req.params['id']);
      const comment = review ?? commentById(core, repo, req.params['id']!).comment;
      comment.reactions ??= [];
      return reactions(core, req, repo, comment.reactions);
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/issues/{index}/reactions',
    methods: ['GET', 'POST'],
    async handle(core, req) {
      const repo = req.repo();
      const issue = core.issueOr404(repo, Number(req.params['index']));
      return reactions(core, req, repo, issue.reactions);
    },
  },
  {
    pattern: '/orgs/{org}/repos',
    methods: ['GET'],
    handle(core, req) {
      const org = req.params['org']!;
      if (!core.orgs.has(org)) throw new ApiError(404, core.notFound('GetOrgByName'));
      const repos = [...core.repos.values()]
        .filter((r) => r.owner === org)
        .sort((a, b) => a.name.localeCompare(b.name));
      return core.page(req.url, repos, (r) => repoJson(core.ctx(r)));
    },
  },
  {
    pattern: '/user/repos',
    methods: ['GET'],
    handle(core, req) {
      const me = req.needUser();
      const repos = [...core.repos.values()]
        .filter(
          (r) =>
            r.owner === me ||
            r.collaborators.has(me) ||
            r.admins.has(me) ||
            (core.orgs.get(r.owner)?.members.has(me) ?? false),
        )
        .sort((a, b) => `${a.owner}/${a.name}`.localeCompare(`${b.owner}/${b.name}`));
      return core.page(req.url, repos, (r) => repoJson(core.ctx(r)));
    },
  },
  {
    pattern: '/orgs/{org}/hooks',
    methods: ['GET', 'POST'],
    async handle(core, req) {
      const org = req.params['org']!;
      if (!core.orgs.has(org)) throw new ApiError(404, core.notFound('GetOrgByName'));
      const as = req.needUser();
      if (!orgAdmin(core, org, as)) throw new ApiError(403, null);
      return hooksAt(core, req, 'organization');
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/hooks',
    methods: ['GET', 'POST'],
    async handle(core, req) {
      const repo = req.repo();
      const as = req.needUser();
      if (!core.isRepoAdmin(repo, as)) throw new ApiError(403, null);
      return hooksAt(core, req, 'repository');
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/hooks/{id}',
    methods: ['GET', 'PATCH', 'DELETE'],
    async handle(core, req) {
      const repo = req.repo();
      const as = req.needUser();
      if (!core.isRepoAdmin(repo, as)) throw new ApiError(403, null);
      const i = core.hooks.findIndex(
        (h) => h.level === 'repository' && String(h.id) === req.params['id'],
      );
      if (i < 0) throw new ApiError(404, core.notFound('GetWebhookByRepoID'));
      const hook = core.hooks[i]!;
      if (req.method === 'GET') return { body: hookJson(hook) };
      if (req.method === 'DELETE') {
        core.hooks.splice(i, 1);
        return { status: 204, body: null };
      }
      configureHook(core, hook, await req.readJson());
      return { body: hookJson(hook) };
    },
  },
];
