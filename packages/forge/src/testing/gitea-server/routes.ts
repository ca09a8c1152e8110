/**
 * The test server's route table: every endpoint it answers, as Gitea's swagger
 * names its path, in the order they are tried.
 */
import type { Route } from './api-core';
import { ISSUE_ROUTES } from './issue-routes';
import { PULL_ROUTES } from './pull-routes';
import { REPO_ROUTES } from './repo-routes';
import { REVIEW_ROUTES } from './reviews';
import { USER_ROUTES } from './user-routes';

export const ROUTES: readonly Route[] = [
  ...REVIEW_ROUTES,
  ...REPO_ROUTES,
  ...USER_ROUTES,
  ...ISSUE_ROUTES,
  // Last: `pulls/{base}/{head*}` would take the paths of the reviews' routes.
  ...PULL_ROUTES,
];

const compiled = ROUTES.map((route) => ({
  route,
  re: new RegExp(
    `^${route.pattern.replace(/\{(\w+)\*\}/g, '(?<$1>.+)').replace(/\{(\w+)\}/g, '(?<$1>[^/]+)')}$`,
  ),
}));

/**
 * The route for a request, with the path's parameters (not yet decoded): the
 * first whose pattern matches and whose `where` holds, passing over one that
 * sends other methods on (`otherMethods: 'next'`).
 */
export function matchRoute(
  method: string,
  path: string,
): { route: Route; raw: Record<string, string> } | undefined {
  for (const { route, re } of compiled) {
    const m = re.exec(path);
    if (!m) continue;
    const raw = { ...m.groups };
    if (route.where && !route.where(raw)) continue;
    if (
      route.otherMethods === 'next' &&
      !route.methods.includes(method) &&
      !route.methods.includes('*')
    )
      continue;
    return { route, raw };
  }
  return undefined;
}
