/**
 * The test server's endpoints for issues: list and open them, read and edit
 * one, its comments, its timeline, its labels, and the repository's labels.
 * Each route checks what Gitea checks, in Gitea's order, before its method.
 */
import { type ApiCore, ApiError, type Route, type RouteRequest } from './api-core';
import type { IssueModel, RepoModel } from './model';
import { commentJson, issueJson, labelJson, type ShapeContext, timelineJson } from './shapes';

const ANY = ['*'];
const index = (p: Record<string, string>) => Number(p['index']);

/** GET shows an issue (or PR) as `shape` has it; PATCH edits it, for a writer or its author. */
export async function showOrEdit(
  core: ApiCore,
  req: RouteRequest,
  repo: RepoModel,
  issue: IssueModel,
  shape: (ctx: ShapeContext, issue: IssueModel) => unknown,
): Promise<{ status?: number; body: unknown }> {
  if (req.method === 'GET') return { body: shape(core.ctx(repo), issue) };
  if (req.method !== 'PATCH') throw new ApiError(405, null);
  const as = req.needUser();
  if (!core.canWrite(repo, as) && issue.author !== as) throw new ApiError(403, null);
  await core.editIssue(repo, issue, as, await req.readJson());
  return { status: 201, body: shape(core.ctx(repo), issue) };
}

export const ISSUE_ROUTES: Route[] = [
  {
    pattern: '/repos/{owner}/{repo}/issues',
    methods: ANY,
    async handle(core, req) {
      const repo = req.repo();
      if (req.method === 'POST') {
        const as = req.needUser();
        const b = await req.readJson();
        if (typeof b['title'] !== 'string' || b['title'].length === 0)
          throw new ApiError(422, core.apiError('[Title]: Required'));
        const labels = core.labelNames(repo, b['labels']);
        const issue = core.newIssue(
          repo,
          as,
          { title: b['title'], body: typeof b['body'] === 'string' ? b['body'] : '' },
          true,
        );
        if (labels.length) core.setLabels(repo, issue, as, labels);
        if (Array.isArray(b['assignees']) && b['assignees'].length)
          core.assign(repo, issue, as, b['assignees'] as string[]);
        return { status: 201, body: issueJson(core.ctx(repo), issue) };
      }
      if (req.method !== 'GET') throw new ApiError(405, null);
      const q = req.url.searchParams;
      const state = q.get('state') ?? 'open';
      const type = q.get('type');
      // Gitea: comma-separated label names, every one of them on the issue.
      const labels = (q.get('labels') ?? '').split(',').filter(Boolean);
      const items = [...repo.issues.values()]
        .filter((i) => state === 'all' || i.state === state)
        .filter((i) => (type === 'pulls' ? !!i.pull : type === 'issues' ? !i.pull : true))
        .filter((i) => labels.every((l) => i.labels.includes(l)))
        .sort((a, b) => b.number - a.number);
      return core.page(req.url, items, (i) => issueJson(core.ctx(repo), i));
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/issues/{index}',
    methods: ANY,
    async handle(core, req) {
      const repo = req.repo();
      const issue = core.issueOr404(repo, index(req.params));
      return showOrEdit(core, req, repo, issue, issueJson);
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/issues/{index}/comments',
    methods: ANY,
    async handle(core, req) {
      const repo = req.repo();
      const issue = repo.issues.get(index(req.params));
      // Gitea answers 500 (with the message hidden) for a missing issue here.
      if (!issue) throw new ApiError(500, core.apiError(''));
      if (req.method === 'GET')
        return {
          body: issue.comments.map((c) => commentJson(core.ctx(repo), issue, c)),
          headers: { 'x-total-count': String(issue.comments.length) },
        };
      if (req.method !== 'POST') throw new ApiError(405, null);
      const as = req.needUser();
      const b = await req.readJson();
      if (typeof b['body'] !== 'string' || b['body'].length === 0)
        throw new ApiError(422, core.apiError('[Body]: Required'));
      const c = core.comment(repo, issue, as, b['body']);
      return { status: 201, body: commentJson(core.ctx(repo), issue, c) };
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/issues/{index}/timeline',
    methods: ['GET'],
    otherMethods: 'next',
    handle(core, req) {
      const repo = req.repo();
      const issue = repo.issues.get(index(req.params));
      if (!issue) throw new ApiError(500, core.apiError(''));
      const q = req.url.searchParams;
      const limit = Math.min(50, Math.max(1, Number(q.get('limit') ?? 30) || 30));
      const page = Math.max(1, Number(q.get('page') ?? 1) || 1);
      const items = issue.timeline
        .slice((page - 1) * limit, page * limit)
        .map((t) => timelineJson(core.ctx(repo), issue, t));
      return {
        body: items.length ? items : null,
        headers: { 'x-total-count': String(items.length) },
      };
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/issues/{index}/labels',
    methods: ANY,
    async handle(core, req) {
      const repo = req.repo();
      const issue = core.issueOr404(repo, index(req.params));
      const as = req.needUser();
      if (!core.canWrite(repo, as)) throw new ApiError(403, null);
      const names = core.labelNames(repo, (await req.readJson())['labels']);
      if (req.method === 'POST')
        core.setLabels(repo, issue, as, [...new Set([...issue.labels, ...names])]);
      else if (req.method === 'PUT') core.setLabels(repo, issue, as, names);
      else throw new ApiError(405, null);
      return { body: issue.labels.map((n) => labelJson(core.ctx(repo), repo.labels.get(n)!)) };
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/labels',
    methods: ANY,
    async handle(core, req) {
      const repo = req.repo();
      if (req.method === 'GET')
        return { body: [...repo.labels.values()].map((l) => labelJson(core.ctx(repo), l)) };
      if (req.method !== 'POST') throw new ApiError(405, null);
      const as = req.needUser();
      if (!core.canWrite(repo, as)) throw new ApiError(403, null);
      const b = await req.readJson();
      if (typeof b['name'] !== 'string' || !b['name'])
        throw new ApiError(422, core.apiError('[Name]: Required'));
      const label = core.label(
        repo,
        b['name'],
        String(b['color'] ?? 'e4e669'),
        String(b['description'] ?? ''),
      );
      return { status: 201, body: labelJson(core.ctx(repo), label) };
    },
  },
];
