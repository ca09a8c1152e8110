/**
 * Gitea's JSON shapes, with keys in Gitea's order (its Go structs), built from
 * the test server's model. Checked against Gitea 1.26's swagger in the tests.
 */
import { createHash } from 'node:crypto';
import type {
  CommentModel,
  IssueModel,
  LabelModel,
  RepoModel,
  TimelineModel,
  UserModel,
} from './model';

export interface ShapeContext {
  /** Web root with a trailing slash, e.g. `http://127.0.0.1:3000/`. */
  base: string;
  user: (login: string) => UserModel;
  repo: RepoModel;
}

const ZERO_TIME = '0001-01-01T00:00:00Z';

/**
 * A user. `anonymous` is Gitea's "no viewer" conversion used in webhook payloads
 * (noreply email, inactive, no last login).
 */
export function userJson(base: string, u: UserModel, anonymous = false): Record<string, unknown> {
  const host = new URL(base).hostname;
  return {
    id: u.id,
    login: u.login,
    login_name: '',
    source_id: 0,
    full_name: u.fullName,
    email: anonymous && !u.isOrg ? `${u.id}+${u.login}@noreply.${host}` : u.isOrg ? '' : u.email,
    avatar_url: `${base}avatars/${createHash('md5')
      .update(u.email || u.login)
      .digest('hex')}`,
    html_url: `${base}${u.login}`,
    language: anonymous || u.isOrg ? '' : 'en-US',
    is_admin: u.isAdmin,
    last_login: anonymous || u.isOrg ? ZERO_TIME : u.lastLogin,
    created: u.created,
    restricted: false,
    active: !anonymous && !u.isOrg,
    prohibit_login: false,
    location: '',
    website: '',
    description: '',
    visibility: 'public',
    followers_count: 0,
    following_count: 0,
    starred_repos_count: 0,
    username: u.login,
  };
}

export function repoJson(
  ctx: ShapeContext,
  permissions = { admin: true, push: true, pull: true },
): Record<string, unknown> {
  const r = ctx.repo;
  const issues = [...r.issues.values()];
  return {
    id: r.id,
    owner: userJson(ctx.base, ctx.user(r.owner), true),
    name: r.name,
    full_name: `${r.owner}/${r.name}`,
    description: r.description,
    empty: false,
    private: false,
    fork: false,
    template: false,
    mirror: false,
    size: 1,
    language: '',
    languages_url: `${ctx.base}api/v1/repos/${r.owner}/${r.name}/languages`,
    html_url: `${ctx.base}${r.owner}/${r.name}`,
    url: `${ctx.base}api/v1/repos/${r.owner}/${r.name}`,
    link: '',
    ssh_url: `git@${new URL(ctx.base).hostname}:${r.owner}/${r.name}.git`,
    clone_url: `${ctx.base}${r.owner}/${r.name}.git`,
    original_url: '',
    website: '',
    stars_count: 0,
    forks_count: 0,
    watchers_count: 1,
    branch_count: 1,
    open_issues_count: issues.filter((i) => !i.pull && i.state === 'open').length,
    open_pr_counter: issues.filter((i) => i.pull && i.state === 'open').length,
    release_counter: 0,
    default_branch: r.defaultBranch,
    archived: false,
    created_at: r.createdAt,
    updated_at: r.updatedAt,
    archived_at: '1970-01-01T00:00:00Z',
    permissions,
    has_code: true,
    has_issues: true,
    internal_tracker: {
      enable_time_tracker: true,
      allow_only_contributors_to_track_time: true,
      enable_issue_dependencies: true,
    },
    has_wiki: true,
    has_pull_requests: true,
    has_projects: true,
    projects_mode: 'all',
    has_releases: true,
    has_packages: true,
    has_actions: true,
    ignore_whitespace_conflicts: false,
    allow_merge_commits: true,
    allow_rebase: true,
    allow_rebase_explicit: true,
    allow_squash_merge: true,
    allow_fast_forward_only_merge: true,
    allow_rebase_update: true,
    allow_manual_merge: false,
    autodetect_manual_merge: false,
    default_delete_branch_after_merge: false,
    default_merge_style: 'merge',
    default_allow_maintainer_edit: true,
    avatar_url: '',
    internal: false,
    mirror_interval: '',
    object_format_name: 'sha1',
    mirror_updated: ZERO_TIME,
    topics: [],
    licenses: [],
  };
}

export function labelJson(ctx: ShapeContext, l: LabelModel): Record<string, unknown> {
  return {
    id: l.id,
    name: l.name,
    exclusive: false,
    is_archived: false,
    color: l.color,
    description: l.description,
    url: `${ctx.base}api/v1/repos/${ctx.repo.owner}/${ctx.repo.name}/labels/${l.id}`,
  };
}

function labelsOf(ctx: ShapeContext, i: IssueModel) {
  return i.labels
    .map((n) => ctx.repo.labels.get(n))
    .filter((l): l is LabelModel => !!l)
    .map((l) => labelJson(ctx, l));
}

/** An Issue. `anonymous` users for assignees as in payloads. */
export function issueJson(
  ctx: ShapeContext,
  i: IssueModel,
  anonymous = false,
): Record<string, unknown> {
  const r = ctx.repo;
  const assignees = i.assignees.map((a) => userJson(ctx.base, ctx.user(a), anonymous));
  const kind = i.pull ? 'pulls' : 'issues';
  return {
    id: i.id,
    url: `${ctx.base}api/v1/repos/${r.owner}/${r.name}/issues/${i.number}`,
    html_url: `${ctx.base}${r.owner}/${r.name}/${kind}/${i.number}`,
    number: i.number,
    user: userJson(ctx.base, ctx.user(i.author)),
    original_author: '',
    original_author_id: 0,
    title: i.title,
    body: i.body,
    ref: '',
    assets: [],
    labels: labelsOf(ctx, i),
    milestone: null,
    assignee: assignees[0] ?? null,
    assignees,
    state: i.state,
    is_locked: false,
    comments: i.comments.length,
    created_at: i.createdAt,
    updated_at: i.updatedAt,
    closed_at: i.closedAt,
    due_date: null,
    time_estimate: 0,
    pull_request: i.pull
      ? {
          merged: i.pull.merged,
          merged_at: i.pull.mergedAt,
          draft: false,
          html_url: `${ctx.base}${r.owner}/${r.name}/pulls/${i.number}`,
        }
      : null,
    repository: { id: r.id, name: r.name, owner: r.owner, full_name: `${r.owner}/${r.name}` },
    pin_order: 0,
    content_version: 0,
  };
}

export function pullJson(
  ctx: ShapeContext,
  i: IssueModel,
  anonymous = false,
): Record<string, unknown> {
  const r = ctx.repo;
  const p = i.pull!;
  const assignees = i.assignees.map((a) => userJson(ctx.base, ctx.user(a), anonymous));
  const repo = repoJson(ctx);
  const html = `${ctx.base}${r.owner}/${r.name}/pulls/${i.number}`;
  return {
    id: p.id,
    url: html,
    number: i.number,
    user: userJson(ctx.base, ctx.user(i.author), anonymous),
    title: i.title,
    body: i.body,
    labels: labelsOf(ctx, i),
    milestone: null,
    assignee: assignees[0] ?? null,
    assignees,
    requested_reviewers: [],
    requested_reviewers_teams: [],
    state: i.state,
    draft: false,
    is_locked: false,
    comments: i.comments.length,
    additions: 0,
    deletions: 0,
    changed_files: 0,
    html_url: html,
    diff_url: `${html}.diff`,
    patch_url: `${html}.patch`,
    mergeable: !p.merged && i.state === 'open',
    merged: p.merged,
    merged_at: p.mergedAt,
    merge_commit_sha: p.mergeCommitSha,
    merged_by: p.mergedBy ? userJson(ctx.base, ctx.user(p.mergedBy), true) : null,
    allow_maintainer_edit: true,
    base: { label: p.baseRef, ref: p.baseRef, sha: p.baseSha, repo_id: r.id, repo },
    head: { label: p.headRef, ref: p.headRef, sha: p.headSha, repo_id: r.id, repo },
    merge_base: p.mergeBase,
    due_date: null,
    created_at: i.createdAt,
    updated_at: i.updatedAt,
    closed_at: i.closedAt,
    pin_order: 0,
    content_version: 0,
  };
}

export function commentJson(
  ctx: ShapeContext,
  i: IssueModel,
  c: CommentModel,
  anonymous = false,
): Record<string, unknown> {
  const r = ctx.repo;
  const page = `${ctx.base}${r.owner}/${r.name}/${i.pull ? 'pulls' : 'issues'}/${i.number}`;
  return {
    id: c.id,
    html_url: `${page}#issuecomment-${c.id}`,
    pull_request_url: i.pull ? page : '',
    issue_url: i.pull ? '' : page,
    user: userJson(ctx.base, ctx.user(c.author), anonymous),
    original_author: '',
    original_author_id: 0,
    body: c.body,
    assets: [],
    created_at: c.createdAt,
    updated_at: c.updatedAt,
  };
}

export function timelineJson(
  ctx: ShapeContext,
  i: IssueModel,
  t: TimelineModel,
): Record<string, unknown> {
  const r = ctx.repo;
  const page = `${ctx.base}${r.owner}/${r.name}/${i.pull ? 'pulls' : 'issues'}/${i.number}`;
  const refIssue = t.refIssue !== undefined ? r.issues.get(t.refIssue) : undefined;
  const label = t.label !== undefined ? r.labels.get(t.label) : undefined;
  return {
    id: t.id,
    type: t.type,
    html_url: `${page}#issuecomment-${t.id}`,
    pull_request_url: i.pull ? page : '',
    issue_url: i.pull ? '' : page,
    user: userJson(ctx.base, ctx.user(t.actor)),
    body: t.body ?? (t.type === 'label' ? (t.labelRemoved ? '' : '1') : ''),
    created_at: t.createdAt,
    updated_at: t.createdAt,
    old_project_id: 0,
    project_id: 0,
    old_milestone: null,
    milestone: null,
    tracked_time: null,
    old_title: '',
    new_title: '',
    old_ref: '',
    new_ref: '',
    ref_issue: refIssue ? issueJson(ctx, refIssue) : null,
    ref_comment: null,
    ref_action: t.refAction ?? '',
    ref_commit_sha: '',
    review_id: 0,
    label: label ? labelJson(ctx, label) : null,
    assignee: t.assignee ? userJson(ctx.base, ctx.user(t.assignee)) : null,
    assignee_team: null,
    removed_assignee: t.removedAssignee ?? false,
    resolve_doer: null,
    dependent_issue: null,
  };
}

/** Gitea's API encoding: compact JSON, `<>&` escaped, a trailing newline. */
export function encodeApiJson(value: unknown): string {
  return `${escapeGo(JSON.stringify(value))}\n`;
}

/** Gitea's webhook encoding: two-space indent, `<>&` escaped, no trailing newline. */
export function encodePayloadJson(value: unknown): string {
  return escapeGo(JSON.stringify(value, null, 2));
}

function escapeGo(json: string): string {
  return json.replace(
    /[<>&\u2028\u2029]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}
