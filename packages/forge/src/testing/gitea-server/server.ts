import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApiError, type NewIssue, type NewReview } from './api-core';
import { GitStore } from './git';
import { serveGit } from './git-http';
import { type Delivery, HookSender } from './hooks';
import type {
  GiteaWorldSeed,
  HookModel,
  IssueModel,
  OrgModel,
  RepoModel,
  ReviewModel,
  UserModel,
} from './model';
import { matchRoute } from './routes';
import { encodeApiJson } from './shapes';
import { GiteaWorld } from './world';

export interface TestHookOptions {
  url: string;
  secret: string;
  /** Gitea hook events. @default ['issues', 'issue_comment', 'pull_request'] */
  events?: string[];
  /** @default 'repository' */
  level?: 'repository' | 'organization';
}

/** One API response, for checking against Gitea's swagger. */
export interface ApiExchange {
  method: string;
  /** The swagger path template that matched, e.g. `/repos/{owner}/{repo}/issues/{index}`. */
  template: string;
  path: string;
  status: number;
  body: unknown;
}

export interface GiteaTestServerOptions {
  world?: GiteaWorldSeed;
  hooks?: TestHookOptions[];
  /** @default 0 (any free port) */
  port?: number;
  /** Only loopback by default. @default '127.0.0.1' */
  host?: string;
  /** Where bare repositories live. @default a new temporary directory, removed on close */
  dataDir?: string;
  /** Called for every API response. */
  onResponse?: (exchange: ApiExchange) => void;
  /** Webhook delivery timeout, as Gitea's DELIVER_TIMEOUT. @default 5000 */
  webhookTimeoutMs?: number;
}

export type { NewIssue } from './api-core';

/**
 * A Gitea-compatible server for tests and the demo: an in-memory world (users,
 * orgs, repos, issues, PRs, comments, labels, timeline), the REST subset
 * bot-bottle uses with Gitea 1.26's status codes and JSON shapes, token auth, git
 * smart HTTP through the real `git http-backend`, and webhooks for its own
 * mutations, signed and shaped like Gitea's. Listens on loopback only.
 */
export class GiteaTestServer {
  /** Its world: what the API answers from and changes. */
  readonly world: GiteaWorld;
  readonly tokens = new Map<string, string>();
  /** Scopes of tokens that do not have them all. */
  readonly tokenScopes = new Map<string, string[]>();
  #server: Server | undefined;
  readonly #ownsData: boolean;
  readonly #options: GiteaTestServerOptions;
  /** The token of the request being authenticated (its scopes are checked per route). */
  #lastToken: string | undefined;

  private constructor(options: GiteaTestServerOptions) {
    this.#options = options;
    this.#ownsData = options.dataDir === undefined;
    this.world = new GiteaWorld(
      new GitStore(options.dataDir ?? mkdtempSync(join(tmpdir(), 'bb-gitea-'))),
      new HookSender(options.webhookTimeoutMs ?? 5000),
    );
  }

  get users(): Map<string, UserModel> {
    return this.world.users;
  }
  get orgs(): Map<string, OrgModel> {
    return this.world.orgs;
  }
  get repos(): Map<string, RepoModel> {
    return this.world.repos;
  }
  get hooks(): HookModel[] {
    return this.world.hooks;
  }
  get sender(): HookSender {
    return this.world.sender;
  }
  get git(): GitStore {
    return this.world.git;
  }

  static async start(options: GiteaTestServerOptions = {}): Promise<GiteaTestServer> {
    const s = new GiteaTestServer(options);
    const server = createServer((req, res) => {
      void s.#handle(req, res);
    });
    s.#server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
    });
    const { port } = server.address() as AddressInfo;
    s.world.base = `http://${options.host ?? '127.0.0.1'}:${port}/`;
    try {
      await s.seed(options.world ?? {});
      for (const h of options.hooks ?? []) s.addHook(h);
      s.#ready = true;
    } catch (err) {
      await s.close();
      throw err;
    }
    return s;
  }

  /** The web root, e.g. `http://127.0.0.1:41234` (no trailing slash). */
  get url(): string {
    return this.world.base.replace(/\/$/, '');
  }

  /** The API base, e.g. `http://127.0.0.1:41234/api/v1`. */
  get apiUrl(): string {
    return `${this.world.base}api/v1`;
  }

  /** The clone URL of a repository. */
  cloneUrl(fullName: string): string {
    return `${this.world.base}${fullName}.git`;
  }

  /** How many git smart-HTTP requests (clone, fetch, push, ls-remote) it has answered. */
  get gitRequests(): number {
    return this.#gitRequests;
  }

  #gitRequests = 0;
  /** Seeded: requests are answered. */
  #ready = false;

  get deliveries(): Delivery[] {
    return this.sender.deliveries;
  }

  /** Wait until all queued webhook deliveries are done. */
  settle(): Promise<void> {
    return this.sender.settle();
  }

  /** Redeliver a recorded webhook with a new delivery UUID, as Gitea's "Replay" does. */
  replay(uuid: string): string {
    return this.sender.replay(uuid, this.hooks);
  }

  addHook(h: TestHookOptions): HookModel {
    const hook: HookModel = {
      id: this.world.id(),
      url: h.url,
      secret: h.secret,
      events: h.events ?? ['issues', 'issue_comment', 'pull_request'],
      level: h.level ?? 'repository',
      active: true,
    };
    this.hooks.push(hook);
    return hook;
  }

  /** The first token of a user (creating one when the user has none). */
  tokenOf(login: string): string {
    for (const [t, l] of this.tokens) if (l === login) return t;
    const t = `tok-${login}-${this.world.id()}`;
    this.tokens.set(t, login);
    return t;
  }

  async close(): Promise<void> {
    await this.sender.settle();
    await new Promise<void>((resolve) => {
      if (!this.#server) return resolve();
      this.#server.closeAllConnections?.();
      this.#server.close(() => resolve());
    });
    if (this.#ownsData) rmSync(this.git.root, { recursive: true, force: true });
  }

  // ---------------------------------------------------------------- world

  /** Add users (with their tokens), organisations, repositories, labels and issues. */
  async seed(world: GiteaWorldSeed): Promise<void> {
    for (const u of world.users ?? []) {
      for (const t of u.tokens ?? []) this.tokens.set(t, u.login);
      for (const [t, scopes] of Object.entries(u.scopedTokens ?? {})) {
        this.tokens.set(t, u.login);
        this.tokenScopes.set(t, scopes);
      }
    }
    await this.world.seed(world);
  }

  /** Look up an issue or PR of `owner/name` (throws when missing). */
  issue(fullName: string, n: number): IssueModel {
    const i = this.world.repo(fullName).issues.get(n);
    if (!i) throw new Error(`no issue #${n} in ${fullName}`);
    return i;
  }

  // ------------------------------------------------- actions (as a user)

  /** Open an issue as `as`. Sends `issues/opened` (and label/assign deliveries as Gitea would). */
  createIssue(as: string, fullName: string, input: NewIssue): number {
    return this.world.newIssue(this.world.repo(fullName), as, input, true).number;
  }

  comment(as: string, fullName: string, n: number, body: string): number {
    const repo = this.world.repo(fullName);
    const issue = this.world.issueOr404(repo, n);
    return this.world.comment(repo, issue, as, body).id;
  }

  setLabels(as: string, fullName: string, n: number, labels: string[]): void {
    const repo = this.world.repo(fullName);
    this.world.setLabels(repo, this.world.issueOr404(repo, n), as, labels);
  }

  assign(as: string, fullName: string, n: number, assignees: string[]): void {
    const repo = this.world.repo(fullName);
    this.world.assign(repo, this.world.issueOr404(repo, n), as, assignees);
  }

  setState(as: string, fullName: string, n: number, state: 'open' | 'closed'): void {
    const repo = this.world.repo(fullName);
    this.world.setState(repo, this.world.issueOr404(repo, n), as, state);
  }

  /** Submit a review of PR `n` as `as` (sends the `pull_request_review_*` webhook). */
  review(as: string, fullName: string, n: number, input: NewReview): ReviewModel {
    const repo = this.world.repo(fullName);
    return this.world.review(repo, this.world.issueOr404(repo, n), as, input);
  }

  /** The reactions on a comment or a review's text (by id): who reacted with what. */
  reactions(fullName: string, commentId: number): Array<{ user: string; content: string }> {
    for (const issue of this.world.repo(fullName).issues.values()) {
      const c =
        issue.comments.find((x) => x.id === commentId) ??
        issue.reviews.find((x) => x.id === commentId);
      if (c) return (c.reactions ?? []).map((r) => ({ user: r.user, content: r.content }));
    }
    throw new Error(`no comment ${commentId} in ${fullName}`);
  }

  async mergePr(as: string, fullName: string, n: number, style?: 'merge' | 'squash') {
    const repo = this.world.repo(fullName);
    return this.world.merge(repo, this.world.issueOr404(repo, n), as, style);
  }

  // ------------------------------------------------------------ internals

  // ----------------------------------------------------------------- HTTP

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.world.base);
    // Listening is not ready: until its world is seeded it answers nothing (as Gitea
    // does while it starts), `/version` included, so a poll for it cannot race the seed.
    if (!this.#ready) {
      res
        .writeHead(503, { 'content-type': 'application/json', 'retry-after': '1' })
        .end(
          `${JSON.stringify({ message: 'the server is starting: its world is being seeded' })}\n`,
        );
      return;
    }
    try {
      const git =
        /^\/([^/]+)\/([^/]+?)(?:\.git)?\/(info\/refs|git-upload-pack|git-receive-pack)$/.exec(
          url.pathname,
        );
      if (git) {
        this.#gitRequests++;
        return await this.#handleGit(req, res, git[1]!, git[2]!, git[3]!, url);
      }
      if (!url.pathname.startsWith('/api/v1/')) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
        return;
      }
      await this.#handleApi(req, res, url);
    } catch (err) {
      if (!res.headersSent) {
        res.writeHead(500, { 'content-type': 'application/json;charset=utf-8' });
        res.end(encodeApiJson(this.world.apiError('')));
      }
      if (!(err instanceof ApiError)) console.error('[gitea-test-server]', err);
    }
  }

  /** The user behind the request's credentials; `null` when none; throws 401 for a bad one. */
  #authenticate(req: IncomingMessage, url: URL): string | null {
    let token: string | undefined;
    const auth = req.headers.authorization;
    if (auth) {
      const [scheme, value, ...rest] = auth.split(' ');
      if (rest.length === 0 && value && /^(token|bearer)$/i.test(scheme ?? '')) token = value;
      else if (rest.length === 0 && value && /^basic$/i.test(scheme ?? '')) {
        const [user, pass] = Buffer.from(value, 'base64').toString('utf8').split(':');
        if (pass && pass !== 'x-oauth-basic' && this.tokens.get(pass) === user) return user!;
        token = pass && pass !== 'x-oauth-basic' ? pass : user;
      }
    } else {
      token = url.searchParams.get('token') ?? url.searchParams.get('access_token') ?? undefined;
    }
    if (token === undefined) return null;
    const login = this.tokens.get(token);
    if (!login) throw new ApiError(401, this.world.apiError('invalid username, password or token'));
    this.#lastToken = token;
    return login;
  }

  /**
   * Gitea's token scopes: each route needs `read:<category>` (GET) or
   * `write:<category>`, where the category is user, organization, issue or
   * repository; `write:x` includes `read:x`, `all` everything.
   */
  #checkScope(token: string | undefined, method: string, path: string): void {
    const scopes = token === undefined ? undefined : this.tokenScopes.get(token);
    if (!scopes || scopes.includes('all')) return;
    const category = /^\/(user|users)\b/.test(path)
      ? 'user'
      : /^\/notifications\b/.test(path)
        ? 'notification'
        : /^\/orgs\//.test(path)
          ? 'organization'
          : /^\/repos\/[^/]+\/[^/]+\/(issues|labels)\b/.test(path)
            ? 'issue'
            : /^\/repos\//.test(path)
              ? 'repository'
              : undefined;
    if (!category) return;
    const level = method === 'GET' || method === 'HEAD' ? 'read' : 'write';
    const ok =
      scopes.includes(`write:${category}`) ||
      (level === 'read' && scopes.includes(`read:${category}`));
    if (!ok)
      throw new ApiError(
        403,
        this.world.apiError(
          `token does not have at least one of required scope(s), required=[${level}:${category}], token scope=${scopes.join(',')}`,
        ),
      );
  }

  async #readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of req) {
      size += (c as Buffer).length;
      if (size > 10 * 1024 * 1024)
        throw new ApiError(413, this.world.apiError('request body too large'));
      chunks.push(c as Buffer);
    }
    if (size === 0) return {};
    try {
      const v = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not an object');
      return v as Record<string, unknown>;
    } catch {
      throw new ApiError(422, this.world.apiError('[Body]: invalid JSON'));
    }
  }

  async #handleApi(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const method = req.method ?? 'GET';
    const path = url.pathname.slice('/api/v1'.length);
    let template = '';
    let status = 200;
    let body: unknown = null;
    let headers: Record<string, string> = {};
    try {
      this.#lastToken = undefined;
      const user = this.#authenticate(req, url);
      this.#checkScope(this.#lastToken, method, path);
      const needUser = (): string => {
        if (!user) throw new ApiError(401, this.world.apiError('token is required'));
        return user;
      };
      const found = matchRoute(method, path);
      if (!found) throw new ApiError(404, this.world.notFound());
      const { route, raw } = found;
      template = route.pattern.replace('*}', '}');
      if (!route.methods.includes(method) && !route.methods.includes('*'))
        throw new ApiError(405, null);
      const answer = await route.handle(this.world, {
        method,
        params: Object.fromEntries(Object.entries(raw).map(([k, v]) => [k, decodeURIComponent(v)])),
        url,
        user,
        needUser,
        readJson: () => this.#readJson(req),
        repo: () => {
          const r = this.repos.get(
            `${decodeURIComponent(raw['owner']!)}/${decodeURIComponent(raw['repo']!)}`,
          );
          if (!r) throw new ApiError(404, this.world.notFound('GetRepositoryByName'));
          return r;
        },
      });
      status = answer.status ?? 200;
      body = answer.body;
      headers = answer.headers ?? {};
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      status = err.status;
      body = err.body;
      headers = err.headers;
    }
    this.#options.onResponse?.({ method, template, path, status, body });
    if (status === 204 || status === 303 || body === null) {
      const h: Record<string, string> = { ...headers };
      if (status === 303) h['content-type'] = 'text/html; charset=utf-8';
      if (status !== 204 && status !== 303 && status !== 200)
        h['content-type'] = 'application/json;charset=utf-8';
      if (status === 200 && body === null && template.endsWith('/timeline')) {
        res
          .writeHead(status, { ...h, 'content-type': 'application/json;charset=utf-8' })
          .end('null\n');
        return;
      }
      res.writeHead(status, h).end();
      return;
    }
    res.writeHead(status, { 'content-type': 'application/json;charset=utf-8', ...headers });
    res.end(encodeApiJson(body));
  }

  async #handleGit(
    req: IncomingMessage,
    res: ServerResponse,
    owner: string,
    name: string,
    what: string,
    url: URL,
  ): Promise<void> {
    let user: string | null = null;
    try {
      user = this.#authenticate(req, url);
    } catch {
      user = null;
    }
    await serveGit({ world: this.world, req, res, owner, name, what, url, user, realm: 'Gitea' });
  }
}

/** Start a Gitea-compatible test server on loopback. */
export function createGiteaTestServer(
  options: GiteaTestServerOptions = {},
): Promise<GiteaTestServer> {
  return GiteaTestServer.start(options);
}
