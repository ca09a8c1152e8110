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
import {
  closeGiteaPools,
  GiteaClient,
  type GiteaHttpClient,
  giteaApiBase,
  giteaCloneUrl,
  giteaWebBase,
} from './client';
import { GiteaForge } from './gitea-forge';
import { adminCheck, scopeCheck } from './site-checks';
import { parseGiteaWebhook, verifyGiteaWebhook } from './webhooks';

/** The events the orchestrator acts on (`pull_request` covers PR comments, reviews and pushes). */
export const GITEA_HOOK_EVENTS = ['issues', 'issue_comment', 'pull_request'];

/** The variable naming Gitea's API. */
export const GITEA_API_VAR = 'FORGE_GITEA_API';

function apiUrlFrom(env: Record<string, string | undefined>): string {
  const v = env[GITEA_API_VAR];
  if (!v)
    throw new BbError(
      'INVALID_INPUT',
      `${GITEA_API_VAR} is required: the Gitea API URL, e.g. https://gitea.example.com/api/v1`,
    );
  giteaApiBase(v);
  return v;
}

/**
 * The variable choosing the HTTP client (`undici`, the default, or `node`; see
 * `GiteaClientOptions.transport`): bot-bottle's own setting, not one of the site's.
 */
export const HTTP_CLIENT_VAR = 'BB_FORGE_HTTP_CLIENT';

function httpClientFrom(env: Record<string, string | undefined>): GiteaHttpClient | undefined {
  const v = env[HTTP_CLIENT_VAR];
  if (v === undefined || v === '') return undefined;
  if (v === 'undici' || v === 'node') return v;
  throw new BbError(
    'INVALID_INPUT',
    `${HTTP_CLIENT_VAR} ${JSON.stringify(v)} must be undici or node (or unset: undici)`,
  );
}

const enc = (s: string) => encodeURIComponent(s);

/** One Gitea (or Forgejo) server. */
export class GiteaSite implements ForgeSite {
  readonly kind = 'gitea';
  readonly location: string;
  readonly #web: string;

  constructor(
    readonly apiUrl: string,
    private readonly options: { transport?: GiteaHttpClient | undefined } = {},
  ) {
    this.location = apiUrl;
    // Worked out as a client would, without making one (nor its connection pool).
    this.#web = giteaWebBase(giteaApiBase(apiUrl));
  }

  env(): Record<string, string> {
    return { [GITEA_API_VAR]: this.apiUrl };
  }

  client(token: string): GiteaClient {
    return new GiteaClient({ baseUrl: this.apiUrl, token, transport: this.options.transport });
  }

  forgeFor(target: RepoName & { token?: string | undefined }): GiteaForge {
    return new GiteaForge({
      baseUrl: this.apiUrl,
      token: target.token,
      owner: target.owner,
      repo: target.repo,
      clientOptions: { transport: this.options.transport },
    });
  }

  async whoami(token: string): Promise<string> {
    const res = await this.client(token).request<{ login: string }>({
      method: 'GET',
      path: '/user',
    });
    return res.body.login;
  }

  async repositories(token: string, named: readonly RepoName[]): Promise<RepoName[]> {
    const client = this.client(token);
    const out: RepoName[] = [];
    const all = async (path: string) => {
      for await (const r of client.paginate<{ name: string; owner: { login: string } }>(path))
        out.push({ owner: r.owner.login, repo: r.name });
    };
    if (named.length === 0) await all('/user/repos');
    for (const r of named) {
      if (r.repo === '*') await all(`/orgs/${enc(r.owner)}/repos`);
      else out.push({ owner: r.owner, repo: r.repo });
    }
    return out;
  }

  cloneUrl(target: RepoName): string {
    return giteaCloneUrl(this.#web, target.owner, target.repo);
  }

  webUrl(target: WebTarget): string {
    const repo = `${this.#web}/${enc(target.owner)}/${enc(target.repo)}`;
    if ('issue' in target) return `${repo}/issues/${target.issue}`;
    if ('pr' in target) return `${repo}/pulls/${target.pr}`;
    return repo;
  }

  async installHook(token: string, hook: HookRequest): Promise<string> {
    const client = this.client(token);
    const [owner, repo] = hook.target.split('/');
    const base = repo ? `/repos/${enc(owner!)}/${enc(repo)}/hooks` : `/orgs/${enc(owner!)}/hooks`;
    const where = repo ? hook.target : `org ${owner}`;
    const body = {
      config: { url: hook.url, content_type: 'json', secret: hook.secret },
      events: GITEA_HOOK_EVENTS,
      active: true,
    };
    type Hook = { id: number; config: { url?: string } };
    const { body: hooks } = await client.request<Hook[] | null>({ method: 'GET', path: base });
    const existing = (hooks ?? []).find((h) => h.config.url === hook.url);
    const events = GITEA_HOOK_EVENTS.join(', ');
    const note =
      'Gitea delivers to private addresses only when its [webhook] ALLOWED_HOST_LIST allows them: see docs/gitea-setup.md';
    if (existing) {
      await client.request({ method: 'PATCH', path: `${base}/${existing.id}`, body });
      return `updated webhook ${existing.id} of ${where}: ${hook.url}, events ${events}\n${note}`;
    }
    const { body: made } = await client.request<Hook>(
      { method: 'POST', path: base, body: { type: 'gitea', ...body } },
      [201],
    );
    return `created webhook ${made.id} of ${where}: ${hook.url}, events ${events}\n${note}`;
  }

  async checks(token: string, repos: readonly RepoName[]): Promise<SiteCheck[]> {
    const client = this.client(token);
    // Before anything that needs a scope: a missing one is named, not met as a failure later.
    const scopes = await scopeCheck(client);
    if (scopes.ok === false) return [scopes];
    const me = await this.whoami(token);
    return [scopes, await adminCheck(client, me, repos)];
  }

  close(): Promise<void> {
    return closeGiteaPools();
  }
}

/** Gitea (and Forgejo): `FORGE_KIND=gitea`, configured by `FORGE_GITEA_API`. */
export const giteaKind: ForgeKind = {
  name: 'gitea',
  summary:
    'Gitea or Forgejo; FORGE_GITEA_API is its API URL, e.g. https://gitea.example.com/api/v1',
  fromEnv: (env) => new GiteaSite(apiUrlFrom(env), { transport: httpClientFrom(env) }),
  // Gitea's API is under the web root.
  siteAt: (webBase) =>
    new GiteaSite(apiUrlFrom({ FORGE_GITEA_API: `${webBase.replace(/\/$/, '')}/api/v1` })),
  webhook: {
    path: '/webhooks/gitea',
    deliveryId: (headers: WebhookHeaders) =>
      header(headers, 'x-gitea-delivery') ?? header(headers, 'x-forgejo-delivery'),
    verify: (headers, rawBody, secrets) => {
      // Every secret is tried, so the time taken tells nothing of which one matched.
      let ok = false;
      for (const s of secrets) if (verifyGiteaWebhook(headers, rawBody, s)) ok = true;
      return ok;
    },
    parse: parseGiteaWebhook,
  },
  ...defaultBottleBranches,
};

/**
 * The kind and site of a bottle recorded before forges were plugs, when a
 * bottle named only the API URL of the one forge there was.
 */
export function legacyForgeWiring(apiUrl: string): { kind: string; site: Record<string, string> } {
  return { kind: giteaKind.name, site: { [GITEA_API_VAR]: apiUrl } };
}
