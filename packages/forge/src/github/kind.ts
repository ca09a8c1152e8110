import { BbError } from '@bb/errors';
import { header, type WebhookHeaders } from '../events';
import {
  defaultBottleBranches,
  type ForgeKind,
  type ForgeSite,
  type HookRequest,
  type RepoName,
  type SiteCheck,
  type WebTarget,
} from '../kind';
import { type GitHubApp, gitHubAppFromEnv } from './app';
import { type GitHubClient, gitHubClient, gitHubError, webOf } from './client';
import { GitHubForge } from './github-forge';
import { appChecks, GITHUB_HOOK_EVENTS, tokenChecks } from './site-checks';
import { parseGitHubWebhook, verifyGitHubWebhook } from './webhooks';

export { GITHUB_HOOK_EVENTS };

/** The variables naming a GitHub: its REST API, and its web root (clone URLs, pages). */
export const GITHUB_API_VAR = 'FORGE_GITHUB_API';
export const GITHUB_WEB_VAR = 'FORGE_GITHUB_URL';

const DEFAULT_API = 'https://api.github.com';
const DEFAULT_WEB = 'https://github.com';

function url(name: string, v: string): string {
  let u: URL;
  try {
    u = new URL(v);
    if (u.username || u.password) throw new Error('credentials in a URL');
  } catch {
    throw new BbError(
      'INVALID_INPUT',
      `${name} ${JSON.stringify(v)} is not a URL: e.g. ${name === GITHUB_API_VAR ? DEFAULT_API : DEFAULT_WEB}`,
    );
  }
  if (u.protocol !== 'https:' && !['127.0.0.1', 'localhost', '[::1]'].includes(u.hostname))
    throw new BbError('INVALID_INPUT', `${name} ${v} must be https (plain http only to loopback)`);
  return v.replace(/\/+$/, '');
}

const enc = (s: string) => encodeURIComponent(s);

/**
 * One GitHub: github.com, or an Enterprise Server (its API at <web>/api/v3). With an
 * App, the site acts as the App: its methods need no token, and each bottle's gate gets
 * a token of its own, narrowed to its repository.
 */
export class GitHubSite implements ForgeSite {
  readonly kind = 'github';
  readonly location: string;
  readonly credentials: ForgeSite['credentials'];

  constructor(
    readonly apiUrl: string,
    readonly webUrl_: string,
    readonly app?: GitHubApp,
  ) {
    this.location = apiUrl;
    this.credentials = app && {
      describe: `GitHub App ${app.appId}`,
      bottleToken: (target) => app.bottleToken(target),
    };
  }

  /** A client acting with `token`, or as the App on `target`'s installation. */
  client(token: string | undefined, target: RepoName | { owner: string }): GitHubClient {
    if (token || !this.app) return gitHubClient({ apiUrl: this.apiUrl, token });
    const app = this.app;
    return gitHubClient({ apiUrl: this.apiUrl, tokenFor: () => app.token(target) });
  }

  env(): Record<string, string> {
    return { [GITHUB_API_VAR]: this.apiUrl, [GITHUB_WEB_VAR]: this.webUrl_ };
  }

  forgeFor(target: RepoName & { token?: string | undefined }): GitHubForge {
    if (target.token || !this.app)
      return new GitHubForge({ ...target, apiUrl: this.apiUrl, webUrl: this.webUrl_ });
    const app = this.app;
    return new GitHubForge({
      owner: target.owner,
      repo: target.repo,
      client: this.client(undefined, target),
      webUrl: this.webUrl_,
      // An org's members are seen through the App's installation on that org.
      orgClient: async (org) => {
        await app.installationFor({ owner: org });
        return this.client(undefined, { owner: org });
      },
    });
  }

  async whoami(token?: string): Promise<string> {
    if (!token && this.app) return this.app.login();
    try {
      return (await gitHubClient({ apiUrl: this.apiUrl, token }).rest.users.getAuthenticated()).data
        .login;
    } catch (err) {
      throw gitHubError(err, 'the token user');
    }
  }

  async repositories(token: string | undefined, named: readonly RepoName[]): Promise<RepoName[]> {
    const out: RepoName[] = [];
    const all = async (client: GitHubClient, route: string, params: Record<string, unknown>) => {
      for await (const page of client.paginate.iterator(route, { per_page: 100, ...params }))
        for (const r of page.data as Array<{ name: string; owner: { login: string } }>)
          out.push({ owner: r.owner.login, repo: r.name });
    };
    const app = token ? undefined : this.app;
    try {
      // An App reaches the repositories it is installed on (paginate flattens the list).
      if (named.length === 0 && app)
        for (const i of await app.installations()) {
          const t = await app.installationToken(i.id);
          await all(
            gitHubClient({ apiUrl: this.apiUrl, token: t }),
            'GET /installation/repositories',
            {},
          );
        }
      else if (named.length === 0)
        await all(gitHubClient({ apiUrl: this.apiUrl, token }), 'GET /user/repos', {});
      for (const r of named)
        if (r.repo === '*')
          await all(this.client(token, { owner: r.owner }), 'GET /orgs/{org}/repos', {
            org: r.owner,
          });
        else out.push({ owner: r.owner, repo: r.repo });
    } catch (err) {
      throw gitHubError(err, 'the repositories');
    }
    return out;
  }

  cloneUrl(target: RepoName): string {
    return `${this.webUrl_}/${enc(target.owner)}/${enc(target.repo)}.git`;
  }

  webUrl(target: WebTarget): string {
    const repo = `${this.webUrl_}/${enc(target.owner)}/${enc(target.repo)}`;
    if ('issue' in target) return `${repo}/issues/${target.issue}`;
    if ('pr' in target) return `${repo}/pull/${target.pr}`;
    return repo;
  }

  async installHook(token: string | undefined, hook: HookRequest): Promise<string> {
    if (!token && this.app) return this.#installAppHook(this.app, hook);
    // The route is one of two, chosen at run time: requested untyped.
    const request = gitHubClient({ apiUrl: this.apiUrl, token }).request as unknown as (
      route: string,
      params: Record<string, unknown>,
    ) => Promise<{ data: unknown }>;
    const [owner = '', repo] = hook.target.split('/');
    const config = { url: hook.url, content_type: 'json', secret: hook.secret, insecure_ssl: '0' };
    const route = repo ? '/repos/{owner}/{repo}/hooks' : '/orgs/{org}/hooks';
    const params: Record<string, string> = repo ? { owner, repo } : { org: owner };
    try {
      const { data: hooks } = await request(`GET ${route}`, params);
      const existing = (hooks as Array<{ id: number; config: { url?: string } }>).find(
        (h) => h.config.url === hook.url,
      );
      const body = { config, events: GITHUB_HOOK_EVENTS, active: true };
      if (existing) {
        await request(`PATCH ${route}/{hook_id}`, {
          ...params,
          hook_id: existing.id,
          ...body,
        });
        return `updated webhook ${existing.id} of ${hook.target}: ${hook.url}, events ${GITHUB_HOOK_EVENTS.join(', ')}`;
      }
      const { data: made } = await request(`POST ${route}`, {
        ...params,
        name: 'web',
        ...body,
      });
      return `created webhook ${(made as { id: number }).id} of ${hook.target}: ${hook.url}, events ${GITHUB_HOOK_EVENTS.join(', ')}`;
    } catch (err) {
      throw gitHubError(err, `the webhooks of ${hook.target}`);
    }
  }

  /** An App has one webhook, its own: its address and secret are set; its events are the App's. */
  async #installAppHook(app: GitHubApp, hook: HookRequest): Promise<string> {
    await app.setHook(hook.url, hook.secret);
    return `set the webhook of GitHub App ${app.appId} to ${hook.url} (it covers every installation; subscribe the App to ${GITHUB_HOOK_EVENTS.join(', ')} on its settings page)`;
  }

  checks(token: string | undefined, repos: readonly RepoName[]): Promise<SiteCheck[]> {
    if (!token && this.app) return appChecks(this.app, repos);
    return tokenChecks(this.apiUrl, token, repos);
  }
}

/** The site of a GitHub whose web pages are at `webBase`: github.com's API is api.github.com, a server's is <web>/api/v3. */
function siteAt(webBase: string): GitHubSite {
  const web = url(GITHUB_WEB_VAR, webBase);
  return new GitHubSite(new URL(web).host === 'github.com' ? DEFAULT_API : `${web}/api/v3`, web);
}

/** GitHub: `FORGE_KIND=github`, configured by `FORGE_GITHUB_API` and `FORGE_GITHUB_URL` (github.com's by default). */
export const githubKind: ForgeKind = {
  name: 'github',
  summary:
    'GitHub or GitHub Enterprise Server; FORGE_GITHUB_API is its REST API (default https://api.github.com), FORGE_GITHUB_URL its web root (default https://github.com)',
  fromEnv: (env) => {
    const api = env[GITHUB_API_VAR];
    const web = env[GITHUB_WEB_VAR];
    const base = !api
      ? web
        ? siteAt(web)
        : new GitHubSite(DEFAULT_API, DEFAULT_WEB)
      : // The web root is the API's own unless named: a server's token never goes to github.com's git.
        new GitHubSite(
          url(GITHUB_API_VAR, api),
          web ? url(GITHUB_WEB_VAR, web) : webOf(url(GITHUB_API_VAR, api)),
        );
    const app = gitHubAppFromEnv(env, base.apiUrl);
    return app ? new GitHubSite(base.apiUrl, base.webUrl_, app) : base;
  },
  siteAt,
  ownsUrl: (webBase) => {
    try {
      return new URL(webBase).host === 'github.com';
    } catch {
      return false;
    }
  },
  webhook: {
    path: '/webhooks/github',
    deliveryId: (headers: WebhookHeaders) => header(headers, 'x-github-delivery'),
    verify: verifyGitHubWebhook,
    parse: parseGitHubWebhook,
  },
  ...defaultBottleBranches,
};
