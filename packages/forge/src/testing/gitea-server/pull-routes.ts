/**
 * The test server's endpoints for pull requests: list and open them, read and
 * edit one (by number, or by its base and head), and merge it.
 */
import { ApiError, type Route } from './api-core';
import { showOrEdit } from './issue-routes';
import { pullJson } from './shapes';

const ANY = ['*'];

export const PULL_ROUTES: Route[] = [
  {
    pattern: '/repos/{owner}/{repo}/pulls',
    methods: ANY,
    async handle(core, req) {
      const repo = req.repo();
      if (req.method === 'GET') {
        const state = req.url.searchParams.get('state') ?? 'open';
        const base = req.url.searchParams.get('base_branch');
        const items = [...repo.issues.values()]
          .filter((i) => i.pull && (state === 'all' || i.state === state))
          .filter((i) => !base || i.pull!.baseRef === base)
          .sort((a, b) => b.number - a.number);
        return core.page(req.url, items, (i) => pullJson(core.ctx(repo), i));
      }
      if (req.method !== 'POST') throw new ApiError(405, null);
      const pr = await core.openPr(repo, req.needUser(), await req.readJson());
      return { status: 201, body: pullJson(core.ctx(repo), pr) };
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/pulls/{index}/merge',
    methods: ANY,
    async handle(core, req) {
      const repo = req.repo();
      const issue = repo.issues.get(Number(req.params['index']));
      if (!issue?.pull) throw new ApiError(404, core.notFound());
      if (req.method === 'GET')
        return issue.pull.merged
          ? { status: 204, body: null }
          : { status: 404, body: core.notFound() };
      if (req.method !== 'POST') throw new ApiError(405, null);
      const as = req.needUser();
      if (!core.canWrite(repo, as)) throw new ApiError(403, null);
      // Gitea's MergePullRequestOption: `Do` is the style; merge commits and squashes here.
      // (Go reads JSON keys case-insensitively: `do` and `Do` are the same field.)
      const form = await req.readJson();
      const how = form['Do'] ?? form['do'] ?? 'merge';
      if (how !== 'merge' && how !== 'squash')
        throw new ApiError(405, core.apiError(`merge style ${String(how)} is not served here`));
      await core.merge(repo, issue, as, how);
      return { status: 200, body: null };
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/pulls/{index}',
    methods: ANY,
    where: (p) => /^\d+$/.test(p['index']!),
    async handle(core, req) {
      const repo = req.repo();
      const issue = repo.issues.get(Number(req.params['index']));
      if (!issue?.pull) throw new ApiError(404, core.notFound());
      return showOrEdit(core, req, repo, issue, pullJson);
    },
  },
  {
    pattern: '/repos/{owner}/{repo}/pulls/{base}/{head*}',
    methods: ['GET'],
    otherMethods: 'next',
    handle(core, req) {
      const repo = req.repo();
      const { base, head } = req.params as { base: string; head: string };
      const pr = [...repo.issues.values()].find(
        (i) => i.pull && i.pull.baseRef === base && i.pull.headRef === head,
      );
      if (!pr) throw new ApiError(404, core.notFound());
      return { body: pullJson(core.ctx(repo), pr) };
    },
  },
];
