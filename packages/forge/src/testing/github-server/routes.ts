/**
 * The GitHub test server's endpoints: what bot-bottle and forklift ask of GitHub's REST
 * v3, each checking what GitHub checks (its 404 for what the token may not see, its 422
 * "Validation Failed" for bad input) before it answers.
 */
import { ApiError } from '../gitea-server/api-core';
import { type IssueModel, now, type RepoModel } from '../gitea-server/model';
import type { GiteaWorld } from '../gitea-server/world';
import type { GhPrincipal, GitHubApps } from './apps';
import type { GitHubHook, GitHubHooks } from './hooks';
import {
  type GhContext,
  ghBranch,
  ghComment,
  ghIssue,
  ghPermission,
  ghPrivateUser,
  ghPull,
  ghReaction,
  ghRepo,
  ghReview,
  ghReviewComment,
  ghUser,
} from './shapes';

export interface GhRequest {
  hooks: GitHubHooks;
  /** Who asks: a user's token, an App's JWT, an installation's token, or nobody. */
  principal: GhPrincipal;
  apps: GitHubApps;
  method: string;
  url: URL;
  params: Record<string, string>;
  user: string | null;
  ctx: GhContext;
  world: GiteaWorld;
  needUser(): string;
  repo(): RepoModel;
  json(): Promise<Record<string, unknown>>;
}

export interface Answer {
  status?: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export interface GhRoute {
  method: string;
  /** GitHub's OpenAPI path template. */
  template: string;
  re: RegExp;
  handle(r: GhRequest): Answer | Promise<Answer>;
}

export const route = (method: string, template: string, handle: GhRoute['handle']): GhRoute => ({
  method,
  template,
  re: new RegExp(`^${template.replace(/\{(\w+)\}/g, '(?<$1>[^/]+)')}$`),
  handle,
});

const DOCS = 'https://docs.github.com/rest';

export function notFound(): ApiError {
  return new ApiError(404, { message: 'Not Found', documentation_url: DOCS, status: '404' });
}
const invalid = (message: string, errors: unknown[] = []) =>
  new ApiError(422, { message, errors, documentation_url: DOCS, status: '422' });

/** GitHub's pagination: `per_page` (30, at most 100), `page`, and a `Link` header. */
export function page<T>(r: GhRequest, items: T[], shape: (t: T) => unknown): Answer {
  const q = r.url.searchParams;
  const per = Math.min(100, Math.max(1, Number(q.get('per_page') ?? 30) || 30));
  const n = Math.max(1, Number(q.get('page') ?? 1) || 1);
  const last = Math.max(1, Math.ceil(items.length / per));
  const link = (p: number) => {
    const u = new URL(r.url);
    u.searchParams.set('page', String(p));
    u.searchParams.set('per_page', String(per));
    return `<${r.ctx.api}${u.pathname.slice('/api/v3'.length)}${u.search}>`;
  };
  const links: string[] = [];
  if (n < last) links.push(`${link(n + 1)}; rel="next"`, `${link(last)}; rel="last"`);
  if (n > 1) links.push(`${link(n - 1)}; rel="prev"`, `${link(1)}; rel="first"`);
  return {
    body: items.slice((n - 1) * per, n * per).map(shape),
    headers: links.length ? { link: links.join(', ') } : {},
  };
}

/** GitHub answers 404, not 403, for what a token may not see; every repository here is public. */
function issueOf(r: GhRequest, repo: RepoModel): IssueModel {
  const issue = repo.issues.get(Number(r.params['issue_number'] ?? r.params['pull_number']));
  if (!issue) throw notFound();
  return issue;
}

function pullOf(r: GhRequest, repo: RepoModel): IssueModel {
  const issue = issueOf(r, repo);
  if (!issue.pull) throw notFound();
  return issue;
}

function canWrite(r: GhRequest, repo: RepoModel, as: string) {
  if (!r.world.canWrite(repo, as))
    throw new ApiError(403, {
      message: 'Resource not accessible by personal access token',
      documentation_url: DOCS,
      status: '403',
    });
}

/** A webhook as GitHub answers it. */
function hookJson(r: GhRequest, base: string, h: GitHubHook): Record<string, unknown> {
  const url = `${r.ctx.api}${base}/${h.id}`;
  return {
    type: base.startsWith('/orgs/') ? 'Organization' : 'Repository',
    id: h.id,
    name: 'web',
    active: true,
    events: h.events,
    config: { url: h.url, content_type: 'json', insecure_ssl: '0', secret: '********' },
    updated_at: h.at,
    created_at: h.at,
    url,
    test_url: `${url}/test`,
    ping_url: `${url}/pings`,
    deliveries_url: `${url}/deliveries`,
    last_response: { code: null, status: 'unused', message: null },
  };
}

function hookRoutes(prefix: string): GhRoute[] {
  const where = (r: GhRequest) => {
    if (prefix.startsWith('/orgs/')) {
      if (!r.world.orgs.has(r.params['org']!)) throw notFound();
      return `/orgs/${r.params['org']}/hooks`;
    }
    const repo = r.repo();
    return `/repos/${repo.owner}/${repo.name}/hooks`;
  };
  const admin = (r: GhRequest) => {
    const me = r.needUser();
    const ok = prefix.startsWith('/orgs/')
      ? r.world.orgs.get(r.params['org']!)?.members.has(me)
      : r.world.isRepoAdmin(r.repo(), me) || r.repo().owner === me;
    if (!ok) throw notFound();
  };
  const config = (b: Record<string, unknown>) => {
    const c = (b['config'] ?? {}) as Record<string, unknown>;
    if (typeof c['url'] !== 'string' || !c['url'])
      throw invalid('Validation Failed', [
        { resource: 'Hook', field: 'url', code: 'missing_field' },
      ]);
    return c;
  };
  return [
    route('GET', `${prefix}/hooks`, (r) => {
      admin(r);
      const base = where(r);
      return page(
        r,
        r.hooks.hooks.filter((h) => h.scope === base),
        (h) => hookJson(r, base, h),
      );
    }),
    route('POST', `${prefix}/hooks`, async (r) => {
      admin(r);
      const base = where(r);
      const b = await r.json();
      const c = config(b);
      const h = r.hooks.add(String(c['url']), String(c['secret'] ?? ''), {
        scope: base,
        events: Array.isArray(b['events']) ? (b['events'] as unknown[]).map(String) : ['push'],
      });
      return { status: 201, body: hookJson(r, base, h) };
    }),
    route('PATCH', `${prefix}/hooks/{hook_id}`, async (r) => {
      admin(r);
      const base = where(r);
      const h = r.hooks.hooks.find((x) => x.scope === base && x.id === Number(r.params['hook_id']));
      if (!h) throw notFound();
      const b = await r.json();
      if (b['config'] !== undefined) {
        const c = config(b);
        h.url = String(c['url']);
        if (typeof c['secret'] === 'string') h.secret = c['secret'];
      }
      if (Array.isArray(b['events'])) h.events = (b['events'] as unknown[]).map(String);
      return { body: hookJson(r, base, h) };
    }),
  ];
}

export const GITHUB_ROUTES: GhRoute[] = [
  ...hookRoutes('/repos/{owner}/{repo}'),
  ...hookRoutes('/orgs/{org}'),
  route('GET', '/user', (r) => ({ body: ghPrivateUser(r.ctx, r.needUser()) })),
  route('GET', '/user/repos', (r) => {
    const me = r.needUser();
    const mine = [...r.world.repos.values()].filter(
      (repo) => repo.owner === me || r.world.canWrite(repo, me),
    );
    return page(r, mine, (repo) => ghRepo(r.ctx, repo));
  }),
  route('GET', '/orgs/{org}/repos', (r) => {
    if (!r.world.orgs.has(r.params['org']!)) throw notFound();
    return page(
      r,
      [...r.world.repos.values()].filter((repo) => repo.owner === r.params['org']),
      (repo) => ghRepo(r.ctx, repo),
    );
  }),
  route('GET', '/orgs/{org}/members/{username}', (r) => {
    const org = r.world.orgs.get(r.params['org']!);
    if (!org) throw notFound();
    const me = r.needUser();
    // Someone outside the org is sent to the public list (302), as GitHub does; an App
    // installed on the org with its members permission sees them all.
    const app = r.principal.kind === 'installation' ? r.principal.token.installation : undefined;
    if (!org.members.has(me) && app?.account !== r.params['org'])
      return {
        status: 302,
        headers: {
          location: `${r.ctx.api}/orgs/${r.params['org']}/public_members/${r.params['username']}`,
        },
      };
    return {
      status: org.members.has(r.params['username']!) ? 204 : 404,
      ...(org.members.has(r.params['username']!)
        ? {}
        : { body: { message: 'Not Found', documentation_url: DOCS, status: '404' } }),
    };
  }),
  route('GET', '/orgs/{org}/public_members/{username}', (r) => {
    const org = r.world.orgs.get(r.params['org']!);
    if (!org?.publicMembers.has(r.params['username']!)) throw notFound();
    return { status: 204 };
  }),
  route('GET', '/repos/{owner}/{repo}', (r) => ({ body: ghRepo(r.ctx, r.repo()) })),
  route('GET', '/repos/{owner}/{repo}/branches/{branch}', async (r) => {
    const repo = r.repo();
    const sha = await r.world.git.branchSha(repo.gitDir, r.params['branch']!);
    if (!sha)
      throw new ApiError(404, {
        message: 'Branch not found',
        documentation_url: DOCS,
        status: '404',
      });
    return { body: ghBranch(r.ctx, repo, r.params['branch']!, sha) };
  }),
  route('GET', '/repos/{owner}/{repo}/issues', (r) => {
    const repo = r.repo();
    const state = r.url.searchParams.get('state') ?? 'open';
    const dir = r.url.searchParams.get('direction') ?? 'desc';
    const items = [...repo.issues.values()]
      .filter((i) => state === 'all' || i.state === state)
      .sort((a, b) => (dir === 'asc' ? a.number - b.number : b.number - a.number));
    return page(r, items, (i) => ghIssue(r.ctx, repo, i));
  }),
  route('POST', '/repos/{owner}/{repo}/issues', async (r) => {
    const repo = r.repo();
    const as = r.needUser();
    const b = await r.json();
    if (typeof b['title'] !== 'string' || !b['title'].trim())
      throw invalid('Validation Failed', [
        { resource: 'Issue', field: 'title', code: 'missing_field' },
      ]);
    const issue = r.world.newIssue(
      repo,
      as,
      { title: b['title'], body: typeof b['body'] === 'string' ? b['body'] : '' },
      true,
    );
    return { status: 201, body: ghIssue(r.ctx, repo, issue) };
  }),
  route('GET', '/repos/{owner}/{repo}/issues/{issue_number}', (r) => {
    const repo = r.repo();
    return { body: ghIssue(r.ctx, repo, issueOf(r, repo)) };
  }),
  route('PATCH', '/repos/{owner}/{repo}/issues/{issue_number}', async (r) => {
    const repo = r.repo();
    const issue = issueOf(r, repo);
    const as = r.needUser();
    if (issue.author !== as) canWrite(r, repo, as);
    const b = await r.json();
    if (b['state'] !== undefined && b['state'] !== 'open' && b['state'] !== 'closed')
      throw invalid('Validation Failed', [{ resource: 'Issue', field: 'state', code: 'invalid' }]);
    await r.world.editIssue(repo, issue, as, b);
    return { body: ghIssue(r.ctx, repo, issue) };
  }),
  route('GET', '/repos/{owner}/{repo}/issues/{issue_number}/comments', (r) => {
    const repo = r.repo();
    const issue = issueOf(r, repo);
    return page(r, issue.comments, (c) => ghComment(r.ctx, repo, issue, c));
  }),
  route('POST', '/repos/{owner}/{repo}/issues/{issue_number}/comments', async (r) => {
    const repo = r.repo();
    const issue = issueOf(r, repo);
    const as = r.needUser();
    const b = await r.json();
    if (typeof b['body'] !== 'string' || !b['body'])
      throw invalid('Validation Failed', [
        { resource: 'IssueComment', field: 'body', code: 'missing_field' },
      ]);
    const c = r.world.comment(repo, issue, as, b['body']);
    return { status: 201, body: ghComment(r.ctx, repo, issue, c) };
  }),
  route('POST', '/repos/{owner}/{repo}/issues/{issue_number}/labels', async (r) => {
    const repo = r.repo();
    const issue = issueOf(r, repo);
    const as = r.needUser();
    canWrite(r, repo, as);
    const b = await r.json();
    const names = Array.isArray(b['labels']) ? (b['labels'] as unknown[]).map(String) : [];
    for (const n of names) r.world.label(repo, n);
    r.world.setLabels(repo, issue, as, [...new Set([...issue.labels, ...names])]);
    return { body: issue.labels.map((n) => ({ id: repo.labels.get(n)?.id ?? 0, name: n })) };
  }),
  route('GET', '/repos/{owner}/{repo}/issues/{issue_number}/timeline', (r) => {
    const repo = r.repo();
    const issue = issueOf(r, repo);
    const refs = issue.timeline.filter((t) => t.type === 'pull_ref' && t.refIssue);
    return page(r, refs, (t) => {
      const pr = repo.issues.get(t.refIssue!);
      return {
        event: 'cross-referenced',
        actor: ghUser(r.ctx, t.actor),
        created_at: t.createdAt,
        updated_at: t.createdAt,
        source: {
          type: 'issue',
          issue: pr ? { ...ghIssue(r.ctx, repo, pr), repository: ghRepo(r.ctx, repo) } : undefined,
        },
      };
    });
  }),
  route('POST', '/repos/{owner}/{repo}/issues/{issue_number}/reactions', async (r) => {
    const repo = r.repo();
    const issue = issueOf(r, repo);
    const as = r.needUser();
    const content = String((await r.json())['content'] ?? '');
    const at = now();
    issue.reactions.push({ user: as, content, createdAt: at });
    return { status: 201, body: ghReaction(r.ctx, r.world.id(), as, content, at) };
  }),
  route('POST', '/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions', async (r) => {
    const repo = r.repo();
    const as = r.needUser();
    const id = Number(r.params['comment_id']);
    const c = [...repo.issues.values()].flatMap((i) => i.comments).find((x) => x.id === id);
    if (!c) throw notFound();
    const content = String((await r.json())['content'] ?? '');
    const at = now();
    c.reactions ??= [];
    c.reactions.push({ user: as, content, createdAt: at });
    return { status: 201, body: ghReaction(r.ctx, r.world.id(), as, content, at) };
  }),
  route('GET', '/repos/{owner}/{repo}/pulls', (r) => {
    const repo = r.repo();
    const q = r.url.searchParams;
    const state = q.get('state') ?? 'open';
    // `head` is user:branch (or org:branch); `base` a branch name.
    const [headOwner, headRef] = (q.get('head') ?? '').split(':');
    const items = [...repo.issues.values()]
      .filter((i) => i.pull && (state === 'all' || i.state === state))
      .filter((i) => !q.get('base') || i.pull!.baseRef === q.get('base'))
      .filter((i) => !q.get('head') || (headOwner === repo.owner && i.pull!.headRef === headRef))
      .sort((a, b) => b.number - a.number);
    return page(r, items, (i) => ghPull(r.ctx, repo, i, true));
  }),
  route('POST', '/repos/{owner}/{repo}/pulls', async (r) => {
    const repo = r.repo();
    const as = r.needUser();
    const b = await r.json();
    for (const f of ['title', 'head', 'base'])
      if (typeof b[f] !== 'string' || !b[f])
        throw invalid('Validation Failed', [
          { resource: 'PullRequest', field: f, code: 'missing_field' },
        ]);
    const head = String(b['head']).replace(new RegExp(`^${repo.owner}:`), '');
    try {
      const pr = await r.world.openPr(repo, as, { ...b, head });
      return { status: 201, body: ghPull(r.ctx, repo, pr) };
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      if (err.status === 409)
        throw invalid('Validation Failed', [
          {
            resource: 'PullRequest',
            code: 'custom',
            message: `A pull request already exists for ${repo.owner}:${head}.`,
          },
        ]);
      if (err.status === 404) {
        const missingBase = !(await r.world.git.branchSha(repo.gitDir, String(b['base'])));
        throw invalid('Validation Failed', [
          { resource: 'PullRequest', field: missingBase ? 'base' : 'head', code: 'invalid' },
        ]);
      }
      throw err;
    }
  }),
  route('GET', '/repos/{owner}/{repo}/pulls/{pull_number}', (r) => {
    const repo = r.repo();
    return { body: ghPull(r.ctx, repo, pullOf(r, repo)) };
  }),
  route('PUT', '/repos/{owner}/{repo}/pulls/{pull_number}/merge', async (r) => {
    const repo = r.repo();
    const pr = pullOf(r, repo);
    const as = r.needUser();
    canWrite(r, repo, as);
    const how = (await r.json())['merge_method'] ?? 'merge';
    if (how !== 'merge' && how !== 'squash')
      throw invalid('Validation Failed', [
        { resource: 'PullRequest', field: 'merge_method', code: 'invalid' },
      ]);
    if (pr.pull!.merged || pr.state !== 'open')
      throw new ApiError(405, {
        message: 'Pull Request is not mergeable',
        documentation_url: DOCS,
        status: '405',
      });
    const sha = await r.world.merge(repo, pr, as, how);
    return { body: { sha, merged: true, message: 'Pull Request successfully merged' } };
  }),
  route('GET', '/repos/{owner}/{repo}/pulls/{pull_number}/reviews', (r) => {
    const repo = r.repo();
    const pr = pullOf(r, repo);
    return page(r, pr.reviews, (rv) => ghReview(r.ctx, repo, pr, rv));
  }),
  route('GET', '/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}/comments', (r) => {
    const repo = r.repo();
    const pr = pullOf(r, repo);
    const rv = pr.reviews.find((x) => x.id === Number(r.params['review_id']));
    if (!rv) throw notFound();
    return page(r, rv.comments, (c) => ghReviewComment(r.ctx, repo, pr, rv, c));
  }),
  route('GET', '/repos/{owner}/{repo}/collaborators/{username}/permission', (r) => {
    const repo = r.repo();
    const me = r.needUser();
    // GitHub tells it to those with push access only.
    if (!r.world.canWrite(repo, me))
      throw new ApiError(403, {
        message: 'Must have push access to view repository collaborator permission.',
        documentation_url: DOCS,
        status: '403',
      });
    const login = r.params['username']!;
    if (!r.world.users.has(login))
      throw new ApiError(404, {
        message: `${login} is not a user`,
        documentation_url: DOCS,
        status: '404',
      });
    // GitHub's: the owner and admins, collaborators with write, anyone else reads (a public
    // repository; an org's members have its base permission, read by default).
    const p =
      login === repo.owner || repo.admins.has(login)
        ? 'admin'
        : repo.collaborators.has(login)
          ? 'write'
          : 'read';
    return { body: ghPermission(r.ctx, login, p) };
  }),
];
