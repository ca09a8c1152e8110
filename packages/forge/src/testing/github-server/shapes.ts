/**
 * The GitHub test server's JSON: GitHub's own examples (templates.json, from its published
 * OpenAPI description) with the server's hosts put in and the world's values laid over
 * them, so every field GitHub documents is there, of the type it documents.
 */
import type {
  IssueModel,
  RepoModel,
  ReviewCommentModel,
  ReviewModel,
  UserModel,
} from '../gitea-server/model';
import TEMPLATES from './templates.json' with { type: 'json' };

type Json = Record<string, unknown>;

export interface GhContext {
  /** The API base, e.g. http://127.0.0.1:4000/api/v3 (no trailing slash). */
  api: string;
  /** The web root, e.g. http://127.0.0.1:4000 (no trailing slash). */
  web: string;
  user(login: string): UserModel;
}

/** A template with GitHub's hosts replaced by the server's. */
export function from(name: keyof typeof TEMPLATES, ctx: GhContext): Json {
  const text = JSON.stringify(TEMPLATES[name])
    .replaceAll('https://api.github.com', ctx.api)
    .replaceAll('https://github.com', ctx.web)
    .replaceAll('https://uploads.github.com', ctx.api);
  return JSON.parse(text) as Json;
}

const nodeId = (kind: string, id: number) => Buffer.from(`0:${kind}${id}`).toString('base64');

export function ghUser(ctx: GhContext, login: string): Json {
  const u = ctx.user(login);
  const t = from('user', ctx);
  const url = `${ctx.api}/users/${login}`;
  return {
    ...t,
    login,
    id: u.id,
    node_id: nodeId('User', u.id),
    avatar_url: `${ctx.web}/avatars/${login}`,
    url,
    html_url: `${ctx.web}/${login}`,
    followers_url: `${url}/followers`,
    following_url: `${url}/following{/other_user}`,
    gists_url: `${url}/gists{/gist_id}`,
    starred_url: `${url}/starred{/owner}{/repo}`,
    subscriptions_url: `${url}/subscriptions`,
    organizations_url: `${url}/orgs`,
    repos_url: `${url}/repos`,
    events_url: `${url}/events{/privacy}`,
    received_events_url: `${url}/received_events`,
    type: u.isOrg ? 'Organization' : login.endsWith('[bot]') ? 'Bot' : 'User',
    site_admin: false,
  };
}

export function ghPrivateUser(ctx: GhContext, login: string): Json {
  const u = ctx.user(login);
  return {
    ...from('privateUser', ctx),
    ...ghUser(ctx, login),
    name: u.fullName || null,
    email: u.email || null,
    created_at: u.created,
    updated_at: u.lastLogin,
  };
}

export function ghRepo(ctx: GhContext, r: RepoModel): Json {
  const t = from('repository', ctx);
  const full = `${r.owner}/${r.name}`;
  const url = `${ctx.api}/repos/${full}`;
  const out: Json = {};
  // Every URL field of the template, pointed at this repository.
  for (const [k, v] of Object.entries(t))
    out[k] =
      typeof v === 'string' && v.startsWith(`${ctx.api}/repos/octocat/Hello-World`)
        ? v.replace(`${ctx.api}/repos/octocat/Hello-World`, url)
        : v;
  delete out['organization'];
  delete out['parent'];
  delete out['source'];
  delete out['template_repository'];
  return {
    ...out,
    id: r.id,
    node_id: nodeId('Repository', r.id),
    name: r.name,
    full_name: full,
    owner: ghUser(ctx, r.owner),
    private: false,
    html_url: `${ctx.web}/${full}`,
    description: r.description || null,
    fork: false,
    url,
    clone_url: `${ctx.web}/${full}.git`,
    git_url: `git://127.0.0.1/${full}.git`,
    ssh_url: `git@127.0.0.1:${full}.git`,
    svn_url: `${ctx.web}/${full}`,
    mirror_url: null,
    homepage: null,
    default_branch: r.defaultBranch,
    created_at: r.createdAt,
    updated_at: r.updatedAt,
    pushed_at: r.updatedAt,
    topics: [],
    visibility: 'public',
    license: null,
  };
}

function labels(ctx: GhContext, r: RepoModel, names: string[]): Json[] {
  return names.map((n) => {
    const l = r.labels.get(n);
    const id = l?.id ?? 0;
    return {
      ...from('label', ctx),
      id,
      node_id: nodeId('Label', id),
      url: `${ctx.api}/repos/${r.owner}/${r.name}/labels/${encodeURIComponent(n)}`,
      name: n,
      color: l?.color ?? 'ededed',
      description: l?.description || null,
      default: false,
    };
  });
}

const association = (r: RepoModel, login: string) =>
  login === r.owner || r.admins.has(login)
    ? 'OWNER'
    : r.collaborators.has(login)
      ? 'COLLABORATOR'
      : 'NONE';

export function ghIssue(ctx: GhContext, r: RepoModel, i: IssueModel): Json {
  const full = `${r.owner}/${r.name}`;
  const url = `${ctx.api}/repos/${full}/issues/${i.number}`;
  const t = from('issue', ctx);
  delete t['milestone'];
  delete t['closed_by'];
  return {
    ...t,
    id: i.id,
    node_id: nodeId('Issue', i.id),
    url,
    repository_url: `${ctx.api}/repos/${full}`,
    labels_url: `${url}/labels{/name}`,
    comments_url: `${url}/comments`,
    events_url: `${url}/events`,
    html_url: `${ctx.web}/${full}/${i.pull ? 'pull' : 'issues'}/${i.number}`,
    number: i.number,
    state: i.state,
    state_reason: i.state === 'closed' ? 'completed' : null,
    title: i.title,
    body: i.body || null,
    user: ghUser(ctx, i.author),
    labels: labels(ctx, r, i.labels),
    assignee: i.assignees[0] ? ghUser(ctx, i.assignees[0]) : null,
    assignees: i.assignees.map((a) => ghUser(ctx, a)),
    milestone: null,
    locked: false,
    active_lock_reason: null,
    comments: i.comments.length,
    ...(i.pull
      ? {
          pull_request: {
            url: `${ctx.api}/repos/${full}/pulls/${i.number}`,
            html_url: `${ctx.web}/${full}/pull/${i.number}`,
            diff_url: `${ctx.web}/${full}/pull/${i.number}.diff`,
            patch_url: `${ctx.web}/${full}/pull/${i.number}.patch`,
            merged_at: i.pull.mergedAt,
          },
        }
      : { pull_request: undefined }),
    closed_at: i.closedAt,
    created_at: i.createdAt,
    updated_at: i.updatedAt,
    author_association: association(r, i.author),
    repository: undefined,
  };
}

export function ghComment(
  ctx: GhContext,
  r: RepoModel,
  i: IssueModel,
  c: { id: number; author: string; body: string; createdAt: string; updatedAt: string },
): Json {
  const full = `${r.owner}/${r.name}`;
  return {
    ...from('comment', ctx),
    id: c.id,
    node_id: nodeId('IssueComment', c.id),
    url: `${ctx.api}/repos/${full}/issues/comments/${c.id}`,
    html_url: `${ctx.web}/${full}/${i.pull ? 'pull' : 'issues'}/${i.number}#issuecomment-${c.id}`,
    issue_url: `${ctx.api}/repos/${full}/issues/${i.number}`,
    body: c.body,
    user: ghUser(ctx, c.author),
    created_at: c.createdAt,
    updated_at: c.updatedAt,
    author_association: association(r, c.author),
  };
}

function branchRef(ctx: GhContext, r: RepoModel, ref: string, sha: string): Json {
  return { label: `${r.owner}:${ref}`, ref, sha, user: ghUser(ctx, r.owner), repo: ghRepo(ctx, r) };
}

/** A PR: the full shape (`simple` for a list's items). */
export function ghPull(ctx: GhContext, r: RepoModel, i: IssueModel, simple = false): Json {
  const p = i.pull!;
  const full = `${r.owner}/${r.name}`;
  const url = `${ctx.api}/repos/${full}/pulls/${i.number}`;
  const html = `${ctx.web}/${full}/pull/${i.number}`;
  const t = from(simple ? 'pullSimple' : 'pull', ctx);
  const issue = ghIssue(ctx, r, i);
  const out: Json = {
    ...t,
    url,
    id: p.id,
    node_id: nodeId('PullRequest', p.id),
    html_url: html,
    diff_url: `${html}.diff`,
    patch_url: `${html}.patch`,
    issue_url: `${ctx.api}/repos/${full}/issues/${i.number}`,
    commits_url: `${url}/commits`,
    review_comments_url: `${url}/comments`,
    review_comment_url: `${ctx.api}/repos/${full}/pulls/comments{/number}`,
    comments_url: `${ctx.api}/repos/${full}/issues/${i.number}/comments`,
    statuses_url: `${ctx.api}/repos/${full}/statuses/${p.headSha}`,
    number: i.number,
    state: i.state,
    locked: false,
    title: i.title,
    user: issue['user'],
    body: i.body || null,
    labels: issue['labels'],
    milestone: null,
    active_lock_reason: null,
    created_at: i.createdAt,
    updated_at: i.updatedAt,
    closed_at: i.closedAt,
    merged_at: p.mergedAt,
    merge_commit_sha: p.mergeCommitSha,
    assignee: issue['assignee'],
    assignees: issue['assignees'],
    requested_reviewers: [],
    requested_teams: [],
    head: branchRef(ctx, r, p.headRef, p.headSha),
    base: branchRef(ctx, r, p.baseRef, p.baseSha),
    _links: {
      self: { href: url },
      html: { href: html },
      issue: { href: `${ctx.api}/repos/${full}/issues/${i.number}` },
      comments: { href: `${ctx.api}/repos/${full}/issues/${i.number}/comments` },
      review_comments: { href: `${url}/comments` },
      review_comment: { href: `${ctx.api}/repos/${full}/pulls/comments{/number}` },
      commits: { href: `${url}/commits` },
      statuses: { href: `${ctx.api}/repos/${full}/statuses/${p.headSha}` },
    },
    author_association: issue['author_association'],
    auto_merge: null,
    draft: false,
  };
  if (simple) return out;
  return {
    ...out,
    merged: p.merged,
    mergeable: p.merged ? null : true,
    rebaseable: p.merged ? null : true,
    mergeable_state: p.merged ? 'unknown' : 'clean',
    merged_by: p.mergedBy ? ghUser(ctx, p.mergedBy) : null,
    comments: i.comments.length,
    review_comments: i.reviews.reduce((n, rv) => n + rv.comments.length, 0),
    maintainer_can_modify: false,
    commits: 1,
    additions: 0,
    deletions: 0,
    changed_files: 0,
  };
}

const REVIEW_STATE: Record<string, string> = {
  APPROVED: 'APPROVED',
  REQUEST_CHANGES: 'CHANGES_REQUESTED',
  COMMENT: 'COMMENTED',
};

export function ghReview(ctx: GhContext, r: RepoModel, i: IssueModel, rv: ReviewModel): Json {
  const full = `${r.owner}/${r.name}`;
  const html = `${ctx.web}/${full}/pull/${i.number}#pullrequestreview-${rv.id}`;
  return {
    ...from('review', ctx),
    id: rv.id,
    node_id: nodeId('PullRequestReview', rv.id),
    user: ghUser(ctx, rv.author),
    body: rv.body,
    state: REVIEW_STATE[rv.state] ?? 'COMMENTED',
    html_url: html,
    pull_request_url: `${ctx.api}/repos/${full}/pulls/${i.number}`,
    _links: {
      html: { href: html },
      pull_request: { href: `${ctx.api}/repos/${full}/pulls/${i.number}` },
    },
    submitted_at: rv.submittedAt,
    commit_id: rv.commitId,
    author_association: association(r, rv.author),
  };
}

export function ghReviewComment(
  ctx: GhContext,
  r: RepoModel,
  i: IssueModel,
  rv: ReviewModel,
  c: ReviewCommentModel,
): Json {
  const full = `${r.owner}/${r.name}`;
  const url = `${ctx.api}/repos/${full}/pulls/comments/${c.id}`;
  const html = `${ctx.web}/${full}/pull/${i.number}#discussion_r${c.id}`;
  const t = from('reviewComment', ctx);
  return {
    ...t,
    url,
    pull_request_review_id: rv.id,
    id: c.id,
    node_id: nodeId('PullRequestReviewComment', c.id),
    diff_hunk: '@@ -1 +1 @@',
    path: c.path,
    commit_id: c.commitId,
    original_commit_id: c.commitId,
    in_reply_to_id: undefined,
    user: ghUser(ctx, c.author),
    body: c.body,
    created_at: c.createdAt,
    updated_at: c.updatedAt,
    html_url: html,
    pull_request_url: `${ctx.api}/repos/${full}/pulls/${i.number}`,
    author_association: association(r, c.author),
    _links: {
      self: { href: url },
      html: { href: html },
      pull_request: { href: `${ctx.api}/repos/${full}/pulls/${i.number}` },
    },
    line: c.line > 0 ? c.line : null,
    original_line: c.line > 0 ? c.line : c.oldLine,
    side: c.line > 0 ? 'RIGHT' : 'LEFT',
    start_line: null,
    original_start_line: null,
    start_side: null,
    position: c.line > 0 ? c.line : null,
    original_position: c.line > 0 ? c.line : c.oldLine,
    subject_type: 'line',
  };
}

export function ghReaction(
  ctx: GhContext,
  id: number,
  login: string,
  content: string,
  at: string,
): Json {
  return {
    ...from('reaction', ctx),
    id,
    node_id: nodeId('Reaction', id),
    user: ghUser(ctx, login),
    content,
    created_at: at,
  };
}

export function ghPermission(ctx: GhContext, login: string, permission: string): Json {
  return {
    ...from('permission', ctx),
    permission,
    role_name: permission === 'none' ? 'none' : permission,
    user: { ...ghUser(ctx, login), role_name: permission === 'none' ? 'none' : permission },
  };
}

export function ghBranch(ctx: GhContext, r: RepoModel, name: string, sha: string): Json {
  const t = from('branch', ctx);
  return {
    ...t,
    name,
    commit: {
      ...(t['commit'] as Json),
      sha,
      url: `${ctx.api}/repos/${r.owner}/${r.name}/commits/${sha}`,
    },
    protected: false,
    _links: {
      self: `${ctx.api}/repos/${r.owner}/${r.name}/branches/${name}`,
      html: `${ctx.web}/${r.owner}/${r.name}/tree/${name}`,
    },
    protection_url: `${ctx.api}/repos/${r.owner}/${r.name}/branches/${name}/protection`,
  };
}

/** JSON without the keys whose value is `undefined` (a template's keys this answer drops). */
export function encode(body: unknown): string {
  return `${JSON.stringify(body)}\n`;
}
