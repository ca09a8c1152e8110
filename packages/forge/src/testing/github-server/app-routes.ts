/**
 * The GitHub test server's App endpoints: what an App asks with its JWT (itself, its
 * installations, their tokens, its webhook's configuration) and what an installation
 * asks with its token (its repositories).
 */
import { ApiError } from '../gitea-server/api-core';
import type { AppModel, InstallationModel } from './apps';
import { type GhRequest, type GhRoute, notFound, page, route } from './routes';
import { ghRepo } from './shapes';

const DOCS = 'https://docs.github.com/rest';

function app(r: GhRequest): AppModel {
  if (r.principal.kind !== 'app')
    throw new ApiError(401, {
      message: 'A JSON web token could not be decoded',
      documentation_url: DOCS,
      status: '401',
    });
  return r.principal.app;
}

function installation(r: GhRequest, id: string): InstallationModel {
  const mine = app(r);
  const inst = r.apps.installations.get(Number(id));
  if (!inst || inst.app !== mine) throw notFound();
  return inst;
}

function installationOf(r: GhRequest, account: string, repo?: string): InstallationModel {
  const mine = app(r);
  for (const inst of r.apps.installations.values())
    if (
      inst.app === mine &&
      inst.account === account &&
      (!repo || inst.repos === 'all' || inst.repos.has(`${account}/${repo}`))
    )
      return inst;
  throw notFound();
}

export const APP_ROUTES: GhRoute[] = [
  route('GET', '/app', (r) => ({ body: r.apps.appJson(r.ctx, app(r)) })),
  route('GET', '/app/installations', (r) => {
    const mine = app(r);
    return page(
      r,
      [...r.apps.installations.values()].filter((i) => i.app === mine),
      (i) => r.apps.installationJson(r.ctx, i),
    );
  }),
  route('GET', '/app/installations/{installation_id}', (r) => ({
    body: r.apps.installationJson(r.ctx, installation(r, r.params['installation_id']!)),
  })),
  route('POST', '/app/installations/{installation_id}/access_tokens', async (r) => {
    const inst = installation(r, r.params['installation_id']!);
    return { status: 201, body: r.apps.tokenJson(r.ctx, r.apps.mint(inst, await r.json())) };
  }),
  route('GET', '/repos/{owner}/{repo}/installation', (r) => ({
    body: r.apps.installationJson(r.ctx, installationOf(r, r.params['owner']!, r.params['repo']!)),
  })),
  route('GET', '/orgs/{org}/installation', (r) => ({
    body: r.apps.installationJson(r.ctx, installationOf(r, r.params['org']!)),
  })),
  route('GET', '/app/hook/config', (r) => {
    const { secret: _s, ...config } = app(r).hook;
    return { body: { ...config, ...(_s ? { secret: '********' } : {}) } };
  }),
  route('PATCH', '/app/hook/config', async (r) => {
    const hook = app(r).hook;
    const b = await r.json();
    for (const k of ['url', 'content_type', 'secret', 'insecure_ssl'] as const)
      if (typeof b[k] === 'string') hook[k] = b[k] as string;
    const { secret: _s, ...config } = hook;
    return { body: { ...config, ...(_s ? { secret: '********' } : {}) } };
  }),
  route('GET', '/installation/repositories', (r) => {
    if (r.principal.kind !== 'installation')
      throw new ApiError(403, {
        message:
          'You must authenticate with an installation access token in order to list repositories for an installation.',
        documentation_url: DOCS,
        status: '403',
      });
    const t = r.principal.token;
    const all = r.apps.reposOf(t);
    const listed = page(r, all, (repo) => ghRepo(r.ctx, repo));
    return {
      ...listed,
      body: {
        total_count: all.length,
        repository_selection: t.repos === 'all' ? 'all' : 'selected',
        repositories: listed.body,
      },
    };
  }),
];

/** Whether a route is one an App asks with its JWT. */
export const isAppRoute = (template: string) =>
  template.startsWith('/app') || template.endsWith('/installation');
