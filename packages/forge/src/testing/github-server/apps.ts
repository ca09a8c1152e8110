/**
 * GitHub Apps on the GitHub test server, as GitHub has them: an App signs JWTs with its
 * private key (RS256, at most ten minutes) for the `/app` endpoints; an installation on
 * an account covers some or all of its repositories with the App's permissions; an
 * installation token (`ghs_…`, an hour unless told otherwise) may be narrowed to some
 * repositories and permissions, and is refused past its expiry. What a token may do is
 * checked per route the way GitHub answers: 404 for a repository it does not cover, 403
 * "Resource not accessible by integration" for a permission it lacks.
 */
import {
  createPublicKey,
  createVerify,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
} from 'node:crypto';
import { ApiError } from '../gitea-server/api-core';
import type { GiteaWorld } from '../gitea-server/world';
import { from, type GhContext, ghRepo, ghUser } from './shapes';

const DOCS = 'https://docs.github.com/rest';
type Level = 'read' | 'write' | 'admin';
type Perms = Record<string, Level>;

export interface GitHubAppSeed {
  id?: number;
  slug: string;
  name?: string;
  /** The public half of the key the App signs its JWTs with (PEM, or a KeyObject). */
  publicKey: string | KeyObject;
  /** What the App may do once installed. @default contents, issues, pull requests write; metadata, members read */
  permissions?: Perms;
  /** The events it subscribes to. */
  events?: string[];
}

export interface AppModel {
  id: number;
  slug: string;
  name: string;
  key: KeyObject;
  permissions: Perms;
  events: string[];
  hook: { url: string; content_type: string; secret: string; insecure_ssl: string };
  /** The user its installation tokens act as: `<slug>[bot]`. */
  bot: string;
}

export interface InstallationModel {
  id: number;
  app: AppModel;
  account: string;
  /** `all`, or the `owner/name` of each repository selected. */
  repos: 'all' | Set<string>;
  permissions: Perms;
}

export interface InstallationTokenModel {
  token: string;
  installation: InstallationModel;
  repos: 'all' | Set<string>;
  permissions: Perms;
  expiresAt: number;
}

/** Who a request is, once its credentials are read. */
export type GhPrincipal =
  | { kind: 'anonymous' }
  | { kind: 'user'; login: string }
  | { kind: 'app'; app: AppModel }
  | { kind: 'installation'; token: InstallationTokenModel; login: string };

const DEFAULT_PERMISSIONS: Perms = {
  contents: 'write',
  issues: 'write',
  pull_requests: 'write',
  metadata: 'read',
  members: 'read',
};

const rank = (l: string | undefined) =>
  l === 'admin' ? 3 : l === 'write' ? 2 : l === 'read' ? 1 : 0;

const unauthorized = (message: string) =>
  new ApiError(401, { message, documentation_url: DOCS, status: '401' });
const notAccessible = (need: string) =>
  new ApiError(
    403,
    { message: 'Resource not accessible by integration', documentation_url: DOCS, status: '403' },
    { 'x-accepted-github-permissions': need },
  );
const notFound = () =>
  new ApiError(404, { message: 'Not Found', documentation_url: DOCS, status: '404' });

/**
 * The permissions a route needs of an installation token, by GitHub's documented
 * fine-grained permissions; undefined for one no installation may use (a write the
 * table does not know is refused, never let through).
 */
export function neededPermission(
  method: string,
  template: string,
): Array<{ permission: string; level: Level }> | undefined {
  const level: Level = method === 'GET' || method === 'HEAD' ? 'read' : 'write';
  const one = (permission: string, l: Level = level) => [{ permission, level: l }];
  const t = template.replace(/^\/repos\/\{owner\}\/\{repo\}/, '');
  if (template.startsWith('/orgs/{org}/hooks')) return one('organization_hooks');
  if (/^\/orgs\/\{org\}\/(members|public_members)/.test(template)) return one('members');
  if (template === '/orgs/{org}/repos' || template === '/installation/repositories')
    return one('metadata', 'read');
  if (!template.startsWith('/repos/')) return undefined;
  if (t.startsWith('/hooks')) return one('repository_hooks');
  // Merging writes the base branch as well as the PR.
  if (t === '/pulls/{pull_number}/merge') return [...one('pull_requests'), ...one('contents')];
  if (t.startsWith('/pulls')) return one('pull_requests');
  if (t.startsWith('/issues') || t.startsWith('/labels')) return one('issues');
  if (t.startsWith('/branches') || t.startsWith('/git') || t.startsWith('/contents'))
    return one('contents');
  return level === 'read' ? one('metadata', 'read') : undefined;
}

/** The Apps, their installations and their tokens. */
export class GitHubApps {
  readonly apps = new Map<number, AppModel>();
  readonly installations = new Map<number, InstallationModel>();
  readonly tokens = new Map<string, InstallationTokenModel>();
  /** How long a new installation token lasts. @default one hour, as GitHub's */
  tokenTtlMs = 60 * 60_000;
  /** Hand out whole installation tokens whatever is asked (as a server too old to narrow would). */
  ignoreNarrowing = false;
  #nextApp = 1000;
  #nextInstallation = 5000;

  constructor(
    readonly world: GiteaWorld,
    /** Token → login, the world's: an installation token acts as its App's bot there. */
    readonly userTokens: Map<string, string>,
  ) {}

  /** Register an App; its bot user is added to the world. */
  async add(seed: GitHubAppSeed): Promise<AppModel> {
    const id = seed.id ?? this.#nextApp++;
    const app: AppModel = {
      id,
      slug: seed.slug,
      name: seed.name ?? seed.slug,
      key: typeof seed.publicKey === 'string' ? createPublicKey(seed.publicKey) : seed.publicKey,
      permissions: { ...(seed.permissions ?? DEFAULT_PERMISSIONS) },
      events: seed.events ?? [],
      hook: { url: '', content_type: 'json', secret: '', insecure_ssl: '0' },
      bot: `${seed.slug}[bot]`,
    };
    this.apps.set(id, app);
    if (!this.world.users.has(app.bot)) await this.world.seed({ users: [{ login: app.bot }] });
    return app;
  }

  /**
   * Register an App with a new key pair, as GitHub makes one: the App, and its private
   * key as the `.pem` GitHub hands out (PKCS#1).
   */
  async create(
    seed: Omit<GitHubAppSeed, 'publicKey'>,
  ): Promise<{ app: AppModel; privateKey: string }> {
    const { privateKey, publicKey } = generateKeyPairSync('rsa', {
      modulusLength: 2048,
      privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
      publicKeyEncoding: { type: 'spki', format: 'pem' },
    });
    return { app: await this.add({ ...seed, publicKey }), privateKey };
  }

  /** Install `app` on `account`: all its repositories, or those named (`name` or `owner/name`). */
  install(app: AppModel, account: string, repos?: string[]): InstallationModel {
    const inst: InstallationModel = {
      id: this.#nextInstallation++,
      app,
      account,
      repos: repos ? new Set(repos.map((r) => (r.includes('/') ? r : `${account}/${r}`))) : 'all',
      permissions: { ...app.permissions },
    };
    this.installations.set(inst.id, inst);
    // What the App may write, its bot may write (the world's own checks then apply).
    for (const repo of this.world.repos.values())
      if (covers(inst.repos, account, `${repo.owner}/${repo.name}`))
        repo.collaborators.add(app.bot);
    return inst;
  }

  /** The App whose JWT this is, or 401 as GitHub words it. */
  verifyJwt(jwt: string): AppModel {
    const [h, p, sig] = jwt.split('.');
    if (!h || !p || !sig) throw unauthorized('A JSON web token could not be decoded');
    let claims: { iss?: unknown; iat?: unknown; exp?: unknown };
    let header: { alg?: unknown };
    try {
      header = JSON.parse(Buffer.from(h, 'base64url').toString('utf8'));
      claims = JSON.parse(Buffer.from(p, 'base64url').toString('utf8'));
    } catch {
      throw unauthorized('A JSON web token could not be decoded');
    }
    const app = this.apps.get(Number(claims.iss));
    if (!app || header.alg !== 'RS256')
      throw unauthorized(`'Issuer' claim ('iss') must be an Integer`);
    const ok = createVerify('RSA-SHA256')
      .update(`${h}.${p}`)
      .verify(app.key, Buffer.from(sig, 'base64url'));
    if (!ok) throw unauthorized('A JSON web token could not be decoded');
    const now = Math.floor(Date.now() / 1000);
    if (typeof claims.iat !== 'number' || claims.iat > now + 60)
      throw unauthorized(
        `'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued`,
      );
    if (typeof claims.exp !== 'number' || claims.exp < now)
      throw unauthorized(
        `'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires`,
      );
    if (claims.exp - claims.iat > 600)
      throw unauthorized(`'Expiration time' claim ('exp') is too far in the future`);
    return app;
  }

  /** The installation token `token`, or undefined when it is not one; 401 once it has expired. */
  installationToken(token: string): InstallationTokenModel | undefined {
    const t = this.tokens.get(token);
    if (t && t.expiresAt <= Date.now()) throw unauthorized('Bad credentials');
    return t;
  }

  /**
   * Whether `t` may make this request: its repository covered (else 404), the route's
   * permission held (else 403, naming what it needs in `x-accepted-github-permissions`).
   */
  check(
    t: InstallationTokenModel,
    method: string,
    template: string,
    params: Record<string, string>,
  ): void {
    const needs = neededPermission(method, template);
    if (!needs) throw notAccessible('');
    const owner = params['owner'] ?? params['org'];
    if (
      params['owner'] &&
      params['repo'] &&
      !covers(t.repos, t.installation.account, `${params['owner']}/${params['repo']}`)
    )
      throw notFound();
    // Another org's members: GitHub sends the token to the public list (the route's 302).
    if (
      owner &&
      owner !== t.installation.account &&
      !needs.some((n) => n.permission === 'metadata' || n.permission === 'members')
    )
      throw notFound();
    for (const need of needs)
      if (rank(t.permissions[need.permission]) < rank(need.level))
        throw notAccessible(`${need.permission}=${need.level}`);
  }

  /** Whether `t` may fetch (`write` false) or push to `fullName` over git. */
  mayGit(t: InstallationTokenModel, fullName: string, write: boolean): boolean {
    if (!covers(t.repos, t.installation.account, fullName)) return false;
    return rank(t.permissions['contents']) >= (write ? 2 : 1);
  }

  /** `POST /app/installations/{id}/access_tokens`: a token, narrowed as asked, never wider than the installation. */
  mint(inst: InstallationModel, body: Record<string, unknown>): InstallationTokenModel {
    let repos: 'all' | Set<string> = inst.repos;
    if (this.ignoreNarrowing) body = {};
    const names = body['repositories'];
    if (names !== undefined) {
      if (!Array.isArray(names) || names.some((n) => typeof n !== 'string'))
        throw validation('repositories must be an array of names');
      const full = (names as string[]).map((n) => `${inst.account}/${n}`);
      for (const f of full)
        if (!covers(inst.repos, inst.account, f) || !this.world.repos.has(f))
          throw validation(
            `There is at least one repository that does not exist or is not accessible to the parent installation.`,
          );
      repos = new Set(full);
    }
    let permissions = inst.permissions;
    const asked = body['permissions'];
    if (asked !== undefined) {
      if (typeof asked !== 'object' || asked === null)
        throw validation('permissions must be an object');
      permissions = {};
      for (const [k, v] of Object.entries(asked as Record<string, unknown>)) {
        if (rank(String(v)) === 0 || rank(String(v)) > rank(inst.permissions[k]))
          throw validation(`The permissions requested are not granted to this installation.`);
        permissions[k] = v as Level;
      }
      permissions['metadata'] ??= 'read';
    }
    const t: InstallationTokenModel = {
      token: `ghs_${randomBytes(18).toString('base64url')}`,
      installation: inst,
      repos,
      permissions,
      expiresAt: Date.now() + this.tokenTtlMs,
    };
    this.tokens.set(t.token, t);
    this.userTokens.set(t.token, inst.app.bot);
    return t;
  }

  /** Revoke a token (`DELETE /installation/token`, or a test). */
  revoke(token: string): void {
    this.tokens.delete(token);
    this.userTokens.delete(token);
  }

  // ------------------------------------------------------------- shapes

  appJson(ctx: GhContext, app: AppModel): Record<string, unknown> {
    return {
      ...from('app', ctx),
      id: app.id,
      slug: app.slug,
      name: app.name,
      node_id: Buffer.from(`0:Integration${app.id}`).toString('base64'),
      html_url: `${ctx.web}/apps/${app.slug}`,
      permissions: app.permissions,
      events: app.events,
    };
  }

  installationJson(ctx: GhContext, inst: InstallationModel): Record<string, unknown> {
    const account = this.world.users.has(inst.account) ? ghUser(ctx, inst.account) : null;
    return {
      ...from('installation', ctx),
      id: inst.id,
      account,
      app_id: inst.app.id,
      app_slug: inst.app.slug,
      target_id: account ? (account['id'] as number) : 0,
      target_type: this.world.orgs.has(inst.account) ? 'Organization' : 'User',
      repository_selection: inst.repos === 'all' ? 'all' : 'selected',
      permissions: inst.permissions,
      events: inst.app.events,
      access_tokens_url: `${ctx.api}/app/installations/${inst.id}/access_tokens`,
      repositories_url: `${ctx.api}/installation/repositories`,
      html_url: `${ctx.web}/settings/installations/${inst.id}`,
    };
  }

  tokenJson(ctx: GhContext, t: InstallationTokenModel): Record<string, unknown> {
    const selected = t.repos === 'all' ? undefined : [...t.repos];
    return {
      ...from('installationToken', ctx),
      token: t.token,
      expires_at: new Date(t.expiresAt).toISOString().replace(/\.\d{3}Z$/, 'Z'),
      permissions: t.permissions,
      repository_selection: selected ? 'selected' : 'all',
      ...(selected
        ? { repositories: selected.map((f) => ghRepo(ctx, this.world.repos.get(f)!)) }
        : { repositories: undefined }),
    };
  }

  /** The repositories a token covers, as `/installation/repositories` lists them. */
  reposOf(t: InstallationTokenModel) {
    return [...this.world.repos.values()].filter((r) =>
      covers(t.repos, t.installation.account, `${r.owner}/${r.name}`),
    );
  }
}

function covers(repos: 'all' | Set<string>, account: string, fullName: string): boolean {
  return repos === 'all' ? fullName.startsWith(`${account}/`) : repos.has(fullName);
}

function validation(message: string) {
  return new ApiError(422, { message, documentation_url: DOCS, status: '422' });
}
