import { setTimeout as sleep } from 'node:timers/promises';
import { BbError, type BbErrorCode, redactString, registerSecret } from '@bb/errors';
import type { Dispatcher } from 'undici';
import { type GiteaTransport, nodeTransport } from './node-transport';

export interface GiteaClientOptions {
  /** Gitea's API base, e.g. `https://gitea.example.com/api/v1` (`/api/v1` is added when missing). */
  baseUrl: string;
  /** A personal access token; sent as `Authorization: token …`, never in a URL. */
  token?: string | undefined;
  /** Connect timeout. @default 5000 */
  connectTimeoutMs?: number;
  /** Time to the response headers. @default 15000 */
  headersTimeoutMs?: number;
  /** Idle time allowed while reading a body. @default 15000 */
  bodyTimeoutMs?: number;
  /** Retries for idempotent requests after network errors, 5xx and 429. @default 3 */
  retries?: number;
  /** First backoff; doubles each retry, with full jitter. @default 200 */
  retryBaseMs?: number;
  /** Longest wait for one retry, including a server's Retry-After. @default 10000 */
  retryMaxMs?: number;
  /** Keep-alive connections per origin. @default 8 */
  connections?: number;
  /**
   * The HTTP client: undici's pool, or node's own (`nodeTransport`: about 20 MB less
   * per process, which a bottle's gate, one per bottle, takes). @default 'undici'
   */
  transport?: GiteaHttpClient | undefined;
  /** Called on each retry, for logs. */
  onRetry?: (info: {
    method: string;
    path: string;
    attempt: number;
    waitMs: number;
    reason: string;
  }) => void;
}

/** What `GiteaClientOptions.transport` may name. */
export type GiteaHttpClient = 'undici' | 'node';

export interface GiteaRequest {
  method: Dispatcher.HttpMethod;
  /** Path below the API base, e.g. `/repos/acme/widgets/issues/17`. */
  path: string;
  query?: Record<string, string | number | undefined>;
  body?: unknown;
}

export interface GiteaResponse<T = unknown> {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: T;
}

const IDEMPOTENT = new Set(['GET', 'HEAD', 'PUT', 'DELETE', 'OPTIONS']);

// undici loads on the first request, so programs that only import this package
// (for its types, webhooks or targeting) do not pay for it at start-up.
// A bundler may hand a CommonJS module to `import()` as its default export only,
// so the named export is taken from either shape.
type Undici = typeof import('undici');
let undici: Promise<Undici> | undefined;
const loadUndici = (): Promise<Undici> =>
  import('undici').then((m) => ('Pool' in m ? m : (m as unknown as { default: Undici }).default));

// One pool per origin (and timeouts) for the whole process, shared by every client of it.
const pools = new Map<string, GiteaTransport | Promise<GiteaTransport>>();
function poolFor(
  origin: string,
  options: GiteaClientOptions,
): GiteaTransport | Promise<GiteaTransport> {
  const transport = options.transport ?? 'undici';
  const timeouts = {
    connections: options.connections ?? 8,
    connectTimeoutMs: options.connectTimeoutMs ?? 5000,
    headersTimeoutMs: options.headersTimeoutMs ?? 15_000,
    bodyTimeoutMs: options.bodyTimeoutMs ?? 15_000,
  };
  // Timeouts are the pool's: clients that ask for other ones get a pool of their own.
  const key = [origin, transport, ...Object.values(timeouts)].join('|');
  let pool = pools.get(key);
  if (!pool && transport === 'node') {
    pool = nodeTransport(origin, timeouts);
    pools.set(key, pool);
  }
  if (!pool) {
    undici ??= loadUndici();
    const made = undici.then(({ Pool }) => {
      const p = new Pool(origin, {
        connections: timeouts.connections,
        connect: { timeout: timeouts.connectTimeoutMs },
        keepAliveTimeout: 30_000,
        headersTimeout: timeouts.headersTimeoutMs,
        bodyTimeout: timeouts.bodyTimeoutMs,
      }) as unknown as GiteaTransport;
      // Later callers get the pool itself, without a promise in between.
      if (pools.get(key) === made) pools.set(key, p);
      return p;
    });
    pool = made;
    pools.set(key, pool);
  }
  return pool;
}

/** Close every keep-alive pool (for tests and clean shutdown). */
export async function closeGiteaPools(): Promise<void> {
  const all = [...pools.values()];
  pools.clear();
  await Promise.all(all.map(async (p) => (await p).close()));
}

/**
 * Gitea's API base from `baseUrl` (`/api/v1` added when missing), checked:
 * http(s), and no credentials in it. `INVALID_INPUT` naming what to do.
 */
export function giteaApiBase(baseUrl: string): URL {
  let base: URL;
  try {
    base = new URL(baseUrl);
  } catch {
    throw new BbError(
      'INVALID_INPUT',
      `FORGE_GITEA_API must be the Gitea API URL, e.g. https://gitea.example.com/api/v1 (got ${JSON.stringify(baseUrl)})`,
    );
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:') {
    throw new BbError('INVALID_INPUT', `Gitea URL ${base.href} must be http(s)`);
  }
  if (base.username || base.password) {
    throw new BbError('INVALID_INPUT', 'put the token in FORGE_TOKEN, not in the Gitea URL');
  }
  let path = base.pathname.replace(/\/+$/, '');
  if (!path.endsWith('/api/v1')) path = `${path}/api/v1`;
  base.pathname = path;
  return base;
}

/** The web root of a Gitea API base (without `/api/v1`). */
export function giteaWebBase(apiBase: URL): string {
  return `${apiBase.origin}${apiBase.pathname.replace(/\/api\/v1$/, '')}`;
}

/** Where a Gitea repository is cloned from. */
export function giteaCloneUrl(webBase: string, owner: string, repo: string): string {
  return `${webBase}/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}.git`;
}

/**
 * A small Gitea REST client on undici (or node's own HTTP client): keep-alive, timeouts, bounded retries with
 * jittered backoff (idempotent requests only), pagination, redirects not
 * followed, and errors that name the request but never the token.
 */
export class GiteaClient {
  readonly apiBase: URL;
  readonly #options: GiteaClientOptions;
  readonly #auth: string | undefined;
  #pool: GiteaTransport | Promise<GiteaTransport>;

  constructor(options: GiteaClientOptions) {
    const base = giteaApiBase(options.baseUrl);
    this.apiBase = base;
    this.#options = options;
    registerSecret(options.token);
    this.#auth = options.token ? `token ${options.token}` : undefined;
    this.#pool = poolFor(base.origin, options);
  }

  /** The HTTP client its requests go through. */
  get transport(): GiteaHttpClient {
    return this.#options.transport ?? 'undici';
  }

  /** The `Authorization` header value this client sends, for git pushes. Never log it. */
  authorization(): string | undefined {
    return this.#auth;
  }

  /** The web root (the API base without `/api/v1`). */
  get webBase(): string {
    return giteaWebBase(this.apiBase);
  }

  /**
   * Make a request. Resolves for any status in `expect` (default: 2xx); otherwise
   * throws a BbError chosen by status. Bodies are parsed as JSON when they are.
   */
  async request<T = unknown>(
    req: GiteaRequest,
    expect?: readonly number[],
  ): Promise<GiteaResponse<T>> {
    const retries = IDEMPOTENT.has(req.method) ? (this.#options.retries ?? 3) : 0;
    const path = this.#path(req);
    for (let attempt = 0; ; attempt++) {
      let res: GiteaResponse<T>;
      try {
        res = await this.#once<T>(req.method, path, req.body);
      } catch (err) {
        if (attempt < retries) {
          await this.#backoff(req.method, path, attempt, undefined, networkReason(err));
          continue;
        }
        throw new BbError(
          'FORGE_UNAVAILABLE',
          `${req.method} ${this.#display(path)} failed: ${networkReason(err)}${attempt ? ` (after ${attempt + 1} tries)` : ''}`,
          {
            cause: err,
            data: { method: req.method, path: this.#display(path), tries: attempt + 1 },
          },
        );
      }
      const ok = expect ? expect.includes(res.status) : res.status >= 200 && res.status < 300;
      if (ok) return res;
      if ((res.status >= 500 || res.status === 429) && attempt < retries) {
        await this.#backoff(
          req.method,
          path,
          attempt,
          retryAfter(res.headers['retry-after']),
          `HTTP ${res.status}`,
        );
        continue;
      }
      throw this.#statusError(req.method, path, res, attempt + 1);
    }
  }

  /** Every item of a paginated list (`page`/`limit`, up to 50 per page), following `Link: rel="next"`. */
  async *paginate<T>(
    path: string,
    query: Record<string, string | number | undefined> = {},
  ): AsyncGenerator<T> {
    const limit = 50;
    for (let page = 1; page < 10_000; page++) {
      const res = await this.request<T[] | null>({
        method: 'GET',
        path,
        query: { ...query, page, limit },
      });
      const items = res.body ?? [];
      for (const item of items) yield item;
      const link = String(res.headers['link'] ?? '');
      const total = Number(res.headers['x-total-count']);
      const more = link
        ? /rel="next"/.test(link)
        : Number.isFinite(total)
          ? page * limit < total
          : items.length === limit;
      if (!more || items.length === 0) return;
    }
  }

  async #once<T>(
    method: Dispatcher.HttpMethod,
    path: string,
    body: unknown,
  ): Promise<GiteaResponse<T>> {
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.#auth) headers['authorization'] = this.#auth;
    let payload: string | undefined;
    if (body !== undefined) {
      headers['content-type'] = 'application/json';
      payload = JSON.stringify(body);
    }
    if (!('request' in this.#pool)) this.#pool = await this.#pool;
    const res = await this.#pool.request({ method, path, headers, body: payload });
    const text = await res.body.text();
    let parsed: unknown = text;
    const type = String(res.headers['content-type'] ?? '');
    if (text.length > 0 && type.includes('json')) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = text;
      }
    } else if (text.length === 0) {
      parsed = null;
    }
    return {
      status: res.statusCode,
      headers: res.headers as GiteaResponse['headers'],
      body: parsed as T,
    };
  }

  #path(req: GiteaRequest): string {
    const url = new URL(this.apiBase.href);
    url.pathname = `${this.apiBase.pathname}${req.path}`;
    for (const [k, v] of Object.entries(req.query ?? {})) {
      if (v !== undefined) url.searchParams.set(k, String(v));
    }
    return `${url.pathname}${url.search}`;
  }

  #display(path: string): string {
    return redactString(path);
  }

  async #backoff(
    method: string,
    path: string,
    attempt: number,
    serverWaitMs: number | undefined,
    reason: string,
  ) {
    const base = this.#options.retryBaseMs ?? 200;
    const max = this.#options.retryMaxMs ?? 10_000;
    const jittered = Math.random() * base * 2 ** attempt;
    const waitMs = Math.min(max, serverWaitMs ?? jittered);
    this.#options.onRetry?.({
      method,
      path: this.#display(path),
      attempt: attempt + 1,
      waitMs,
      reason,
    });
    await sleep(waitMs);
  }

  #statusError(method: string, path: string, res: GiteaResponse, tries: number): BbError {
    const message =
      res.body && typeof res.body === 'object' && 'message' in res.body
        ? String((res.body as { message: unknown }).message)
        : '';
    const code: BbErrorCode =
      res.status === 401
        ? 'UNAUTHORIZED'
        : res.status === 403
          ? 'FORBIDDEN'
          : res.status === 404
            ? 'NOT_FOUND'
            : res.status === 409
              ? 'CONFLICT'
              : res.status === 422 || res.status === 400
                ? 'INVALID_INPUT'
                : res.status >= 500 || res.status === 429
                  ? 'FORGE_UNAVAILABLE'
                  : 'FORGE_ERROR';
    const hint =
      res.status === 401
        ? ': the token was refused; check FORGE_TOKEN'
        : res.status === 403
          ? ': the token lacks a permission or scope for this'
          : '';
    return new BbError(
      code,
      `Gitea answered ${res.status} to ${method} ${this.#display(path)}${message ? ` (${message})` : ''}${hint}${tries > 1 ? ` after ${tries} tries` : ''}`,
      {
        data: {
          status: res.status,
          method,
          path: this.#display(path),
          giteaMessage: redactString(message),
        },
      },
    );
  }
}

function retryAfter(value: string | string[] | undefined): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (!v) return undefined;
  const secs = Number(v);
  if (Number.isFinite(secs)) return Math.max(0, secs * 1000);
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

function networkReason(err: unknown): string {
  const e = err as { code?: string; message?: string };
  return redactString(e.code ? `${e.code}: ${e.message ?? ''}`.trim() : (e.message ?? String(err)));
}
