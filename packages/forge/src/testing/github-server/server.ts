/**
 * A GitHub-compatible server for tests: GitHub's REST v3 for what bot-bottle uses, at
 * `<url>/api/v3` (as an Enterprise Server has it), with GitHub's status codes, errors,
 * pagination (`Link`) and JSON shapes (GitHub's own published examples with the world's
 * values over them), token auth (`token`/`Bearer`, and git's Basic `x-access-token`), and
 * git smart HTTP through the real `git http-backend`. Its world is the Gitea-compatible
 * server's (people, repositories, issues, PRs, reviews, git), so both answer alike.
 * Webhooks too, signed and shaped as GitHub's (hooks.ts). Listens on loopback only.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApiError } from '../gitea-server/api-core';
import { serveGit } from '../gitea-server/git-http';
import type { GiteaWorldSeed, IssueModel } from '../gitea-server/model';
import { createGiteaTestServer, type GiteaTestServer } from '../gitea-server/server';
import { APP_ROUTES, isAppRoute } from './app-routes';
import { type GhPrincipal, GitHubApps } from './apps';
import { type GitHubDelivery, type GitHubHook, GitHubHooks } from './hooks';
import { type GhRequest, GITHUB_ROUTES, notFound } from './routes';
import { encode, type GhContext } from './shapes';

export type { AppModel, GitHubAppSeed, InstallationModel, InstallationTokenModel } from './apps';
export type { GitHubDelivery, GitHubHook };

/**
 * A failure the server gives instead of its answer, for the next `times` API requests
 * (those `match` picks): GitHub's 5xx, its 429 and secondary limits (`retry-after`), or
 * its primary limit (403 with `x-ratelimit-remaining: 0`).
 */
export interface GitHubFault {
  kind: 'unavailable' | 'secondary-limit' | 'primary-limit';
  /** @default 1 */
  times?: number;
  /** Seconds, in `retry-after` (secondary) or until `x-ratelimit-reset` (primary). @default 1 */
  retryAfterS?: number;
  /** Only requests this picks, e.g. ({ method }) => method === 'POST'. */
  match?: (req: { method: string; path: string }) => boolean;
  /**
   * Do what was asked first, then fail (`unavailable` only): a write that happened whose
   * answer was lost, as a proxy's 502 or a timeout leaves it.
   */
  afterDoing?: boolean;
}

export interface GitHubExchange {
  method: string;
  /** GitHub's OpenAPI path template that matched, e.g. `/repos/{owner}/{repo}/issues/{issue_number}`. */
  template: string;
  path: string;
  status: number;
  body: unknown;
}

export interface GitHubTestServerOptions {
  world?: GiteaWorldSeed;
  /** @default '127.0.0.1' */
  host?: string;
  onResponse?: (x: GitHubExchange) => void;
}

export class GitHubTestServer {
  /** The world, shared with a Gitea-compatible server (its own URL unused here). */
  readonly gitea: GiteaTestServer;
  #server: Server | undefined;
  #base = '';
  readonly #options: GitHubTestServerOptions;

  /** Its webhooks: `hooks.add(url, secret)`; every delivery is in `hooks.deliveries`. */
  readonly hooks: GitHubHooks;
  /** Its GitHub Apps: `apps.add({ slug, publicKey })`, `apps.install(app, account)`. */
  readonly apps: GitHubApps;
  /** Failures to give instead of answers (`fail`), in order. */
  readonly #faults: GitHubFault[] = [];

  private constructor(gitea: GiteaTestServer, options: GitHubTestServerOptions) {
    this.gitea = gitea;
    this.#options = options;
    this.hooks = new GitHubHooks(() => this.#ctx);
    this.apps = new GitHubApps(gitea.world, gitea.tokens);
    // Every change of the shared world is also delivered the way GitHub would.
    const world = gitea.world;
    const emit = world.emit.bind(world);
    world.emit = (repo, type, payload) => {
      emit(repo, type, payload);
      this.hooks.fromWorld(repo, type, payload as Record<string, unknown>);
    };
  }

  static async start(options: GitHubTestServerOptions = {}): Promise<GitHubTestServer> {
    const gitea = await createGiteaTestServer({ world: options.world ?? {} });
    const s = new GitHubTestServer(gitea, options);
    const server = createServer((req, res) => void s.#handle(req, res));
    s.#server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, options.host ?? '127.0.0.1', () => resolve());
    });
    s.#base = `http://${options.host ?? '127.0.0.1'}:${(server.address() as AddressInfo).port}`;
    return s;
  }

  /** The web root (clone URLs, pages), e.g. http://127.0.0.1:41234. */
  get url(): string {
    return this.#base;
  }
  /** The REST API, e.g. http://127.0.0.1:41234/api/v3. */
  get apiUrl(): string {
    return `${this.#base}/api/v3`;
  }
  cloneUrl(fullName: string): string {
    return `${this.#base}/${fullName}.git`;
  }
  get git() {
    return this.gitea.git;
  }
  issue(fullName: string, n: number): IssueModel {
    return this.gitea.issue(fullName, n);
  }
  /** Merge PR `n` as `as`: with a merge commit, or squashed. */
  mergePr(as: string, fullName: string, n: number, style?: 'merge' | 'squash') {
    return this.gitea.mergePr(as, fullName, n, style);
  }

  /** Open an issue as `as` (as a person would, on the web). */
  openIssue(
    as: string,
    fullName: string,
    input: { title: string; body?: string; labels?: string[]; assignees?: string[] },
  ): number {
    return this.gitea.createIssue(as, fullName, input);
  }
  comment(as: string, fullName: string, n: number, body: string): number {
    return this.gitea.comment(as, fullName, n, body);
  }
  setState(as: string, fullName: string, n: number, state: 'open' | 'closed'): void {
    this.gitea.setState(as, fullName, n, state);
  }

  /** Answer the next requests with a failure GitHub gives (a 5xx, a rate limit). */
  fail(fault: GitHubFault): void {
    this.#faults.push({ ...fault, times: fault.times ?? 1 });
  }

  async close(): Promise<void> {
    await this.hooks.settle();
    await new Promise<void>((resolve) =>
      this.#server ? this.#server.close(() => resolve()) : resolve(),
    );
    await this.gitea.close();
  }

  get #ctx(): GhContext {
    return { api: this.apiUrl, web: this.#base, user: (l) => this.gitea.world.user(l) };
  }

  /** Who the request's credentials say it is; 401 for bad ones. */
  #authenticate(req: IncomingMessage): GhPrincipal {
    const auth = req.headers.authorization;
    if (!auth) return { kind: 'anonymous' };
    const [scheme, value] = auth.split(' ');
    let token: string | undefined;
    if (/^(token|bearer)$/i.test(scheme ?? '')) token = value;
    else if (/^basic$/i.test(scheme ?? '') && value) {
      const [user, pass] = Buffer.from(value, 'base64').toString('utf8').split(':');
      token = pass || user;
    }
    // An App's JWT: three base64url parts, the first a JSON header.
    if (token && /^bearer$/i.test(scheme ?? '') && /^eyJ[\w-]*\.[\w-]+\.[\w-]+$/.test(token))
      return { kind: 'app', app: this.apps.verifyJwt(token) };
    const installation = token ? this.apps.installationToken(token) : undefined;
    if (installation)
      return {
        kind: 'installation',
        token: installation,
        login: installation.installation.app.bot,
      };
    const login = token ? this.gitea.tokens.get(token) : undefined;
    if (!login)
      throw new ApiError(401, {
        message: 'Bad credentials',
        documentation_url: 'https://docs.github.com/rest',
        status: '401',
      });
    return { kind: 'user', login };
  }

  /** The next fault for this request, if one is due, and whether it comes after the deed. */
  #fault(method: string, path: string): { error: ApiError; after: boolean } | undefined {
    const i = this.#faults.findIndex((f) => !f.match || f.match({ method, path }));
    if (i < 0) return undefined;
    const f = this.#faults[i]!;
    return { error: this.#faultError(i), after: f.kind === 'unavailable' && !!f.afterDoing };
  }

  #faultError(i: number): ApiError {
    const f = this.#faults[i]!;
    f.times = (f.times ?? 1) - 1;
    if (f.times <= 0) this.#faults.splice(i, 1);
    const after = f.retryAfterS ?? 1;
    const docs = 'https://docs.github.com/rest/overview/rate-limits-for-the-rest-api';
    if (f.kind === 'unavailable') return new ApiError(502, { message: 'Server Error' });
    if (f.kind === 'secondary-limit')
      return new ApiError(
        429,
        {
          message:
            'You have exceeded a secondary rate limit. Please wait a few minutes before you try again.',
          documentation_url: docs,
          status: '429',
        },
        { 'retry-after': String(after) },
      );
    return new ApiError(
      403,
      {
        message: 'API rate limit exceeded for installation.',
        documentation_url: docs,
        status: '403',
      },
      {
        'x-ratelimit-limit': '5000',
        'x-ratelimit-remaining': '0',
        'x-ratelimit-used': '5000',
        'x-ratelimit-reset': String(Math.ceil(Date.now() / 1000) + after),
        'x-ratelimit-resource': 'core',
      },
    );
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.#base);
    try {
      const git =
        /^\/([^/]+)\/([^/]+?)(?:\.git)?\/(info\/refs|git-upload-pack|git-receive-pack)$/.exec(
          url.pathname,
        );
      if (git) return await this.#git(req, res, git[1]!, git[2]!, git[3]!, url);
      if (!url.pathname.startsWith('/api/v3/')) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
        return;
      }
      await this.#api(req, res, url);
    } catch (err) {
      if (!res.headersSent)
        res
          .writeHead(500, { 'content-type': 'application/json' })
          .end('{"message":"Server Error"}\n');
      if (!(err instanceof ApiError)) console.error('[github-test-server]', err);
    }
  }

  async #api(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const method = req.method ?? 'GET';
    const path = url.pathname.slice('/api/v3'.length);
    let template = '';
    let status = 200;
    let body: unknown = null;
    let headers: Record<string, string> = {};
    try {
      let found:
        | { route: (typeof GITHUB_ROUTES)[number]; params: Record<string, string> }
        | undefined;
      for (const route of [...APP_ROUTES, ...GITHUB_ROUTES]) {
        if (route.method !== method) continue;
        const m = route.re.exec(path);
        if (m) {
          found = {
            route,
            params: Object.fromEntries(
              Object.entries(m.groups ?? {}).map(([k, v]) => [k, decodeURIComponent(v)]),
            ),
          };
          break;
        }
      }
      template = found?.route.template ?? '';
      const fault = this.#fault(method, path);
      if (fault && !fault.after) throw fault.error;
      const principal = this.#authenticate(req);
      const user =
        principal.kind === 'user' || principal.kind === 'installation' ? principal.login : null;
      if (!found) throw notFound();
      // An App's JWT opens its own endpoints only; an installation's token what it was given.
      if (principal.kind === 'app' && !isAppRoute(template))
        throw new ApiError(403, {
          message: 'Resource not accessible by integration',
          documentation_url: 'https://docs.github.com/rest',
          status: '403',
        });
      if (principal.kind === 'installation' && !isAppRoute(template))
        this.apps.check(principal.token, method, template, found.params);
      const r: GhRequest = {
        principal,
        apps: this.apps,
        hooks: this.hooks,
        method,
        url,
        params: found.params,
        user,
        ctx: this.#ctx,
        world: this.gitea.world,
        needUser: () => {
          if (!user)
            throw new ApiError(401, {
              message: 'Requires authentication',
              documentation_url: 'https://docs.github.com/rest',
              status: '401',
            });
          return user;
        },
        repo: () => {
          const repo = this.gitea.world.repos.get(
            `${found!.params['owner']}/${found!.params['repo']}`,
          );
          if (!repo) throw notFound();
          return repo;
        },
        json: () => readJson(req),
      };
      const answer = await found.route.handle(r);
      if (fault?.after) throw fault.error;
      status = answer.status ?? 200;
      body = answer.body ?? null;
      headers = answer.headers ?? {};
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      status = err.status;
      body = err.body;
      headers = err.headers;
    }
    this.#options.onResponse?.({ method, template, path, status, body });
    if (body === null) {
      res.writeHead(status, headers).end();
      return;
    }
    res
      .writeHead(status, { 'content-type': 'application/json; charset=utf-8', ...headers })
      .end(encode(body));
  }

  async #git(
    req: IncomingMessage,
    res: ServerResponse,
    owner: string,
    name: string,
    what: string,
    url: URL,
  ) {
    let user: string | null = null;
    try {
      const p = this.#authenticate(req);
      if (p.kind === 'user') user = p.login;
      if (p.kind === 'installation') {
        const write =
          what === 'git-receive-pack' || url.searchParams.get('service') === 'git-receive-pack';
        // A token narrowed to other repositories, or without contents, is nobody here.
        if (this.apps.mayGit(p.token, `${owner}/${name.replace(/\.git$/, '')}`, write))
          user = p.login;
      }
    } catch {
      user = null;
    }
    await serveGit({
      world: this.gitea.world,
      req,
      res,
      owner,
      name,
      what,
      url,
      user,
      realm: 'GitHub',
    });
  }
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  if (!chunks.length) return {};
  try {
    const v = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    if (typeof v === 'object' && v !== null && !Array.isArray(v))
      return v as Record<string, unknown>;
  } catch {}
  throw new ApiError(400, {
    message: 'Problems parsing JSON',
    documentation_url: 'https://docs.github.com/rest',
    status: '400',
  });
}

/** Start a GitHub-compatible test server on loopback. */
export function createGitHubTestServer(
  options: GitHubTestServerOptions = {},
): Promise<GitHubTestServer> {
  return GitHubTestServer.start(options);
}
