/** The REST client for one GitHub: Octokit with GitHub's limits honoured, and its errors as BbErrors. */
import { BbError, type BbErrorCode, isBbError, registerSecret } from '@bb/errors';
import { retry } from '@octokit/plugin-retry';
import { throttling } from '@octokit/plugin-throttling';
import { Octokit } from '@octokit/rest';

/** Octokit with GitHub's rate limits honoured (Retry-After, x-ratelimit-reset) and transient failures retried. */
const GitHubOctokit: typeof Octokit = Octokit.plugin(throttling, retry);
export type GitHubClient = Octokit;

export interface GitHubClientOptions {
  /** The REST API's base, e.g. https://api.github.com or https://ghe.example.com/api/v3. */
  apiUrl: string;
  token?: string | undefined;
  /**
   * The token of each request, asked for as it is sent (a GitHub App's installation
   * token, made again before it expires); instead of `token`.
   */
  tokenFor?: (() => Promise<string>) | undefined;
  /** Retries of a rate-limited request before it fails. @default 2 */
  rateLimitRetries?: number;
  /** The longest wait for a rate limit to reset, in seconds; longer fails at once. @default 60 */
  maxRateLimitWaitS?: number;
  /** Retries of a 5xx or a dropped connection, for reads and idempotent writes only. @default 2 */
  retries?: number;
  /** The most one request may take before it fails as TIMEOUT. @default 15000 */
  timeoutMs?: number;
  /**
   * Space writes a second apart, one at a time, and honour rate limits
   * (@octokit/plugin-throttling), as GitHub asks of every client. Off only for a test
   * server on loopback: then nothing waits for a limit, and a limited answer fails.
   * @default true
   */
  spaceWrites?: boolean;
}

/** `fetch` with every request bounded to `timeoutMs` (and to the caller's own signal). */
export function boundedFetch(timeoutMs = 15_000) {
  return (url: string, init: RequestInit = {}) =>
    fetch(url, {
      ...init,
      signal: init.signal
        ? AbortSignal.any([init.signal, AbortSignal.timeout(timeoutMs)])
        : AbortSignal.timeout(timeoutMs),
    });
}

/** An Octokit client for one GitHub (github.com or an Enterprise Server). */
export function gitHubClient(o: GitHubClientOptions): GitHubClient {
  if (o.token) registerSecret(o.token);
  const retries = o.rateLimitRetries ?? 2;
  const maxWait = o.maxRateLimitWaitS ?? 60;
  const onLimit = (after: number, _options: unknown, _octokit: unknown, count: number) =>
    count < retries && after <= maxWait;
  // The plugins' own options (throttle, retry) are not in the base class's type.
  const options = {
    baseUrl: o.apiUrl.replace(/\/+$/, ''),
    ...(o.token ? { auth: o.token } : {}),
    userAgent: 'bot-bottle',
    log: { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} },
    throttle: {
      enabled: o.spaceWrites !== false,
      onRateLimit: onLimit,
      onSecondaryRateLimit: onLimit,
    },
    // A 429 is the throttling plugin's to wait out (its Retry-After), never retried blindly.
    retry: { retries: o.retries ?? 2, doNotRetry: [400, 401, 403, 404, 410, 422, 429, 451] },
    // Every request is bounded; a slow forge is a TIMEOUT, never a hang.
    request: { fetch: boundedFetch(o.timeoutMs) },
  };
  const client = new GitHubOctokit(options as ConstructorParameters<typeof Octokit>[0]);
  const tokenFor = o.tokenFor;
  if (tokenFor)
    client.hook.before('request', async (req) => {
      req.headers.authorization = `token ${await tokenFor()}`;
    });
  // A POST or PATCH that failed may have happened: it is never sent again (a second
  // comment, a second PR), and its outcome is left unknown to the caller.
  client.hook.before('request', (req) => {
    if (!['GET', 'HEAD', 'PUT', 'DELETE'].includes(req.method))
      (req.request as { retries?: number }).retries = 0;
  });
  return client;
}

/** What a GitHub error status means here. */
function codeOf(status: number): BbErrorCode {
  if (status === 401) return 'UNAUTHORIZED';
  if (status === 403) return 'FORBIDDEN';
  if (status === 404 || status === 410) return 'NOT_FOUND';
  if (status === 409) return 'CONFLICT';
  if (status === 422 || status === 400) return 'INVALID_INPUT';
  if (status >= 500 || status === 0) return 'FORGE_UNAVAILABLE';
  return 'FORGE_ERROR';
}

/**
 * Octokit's error as a BbError (its message has no token: Octokit redacts the header).
 * GitHub's answer gives the code and `data.status`; no answer (a dropped connection, a
 * timeout) gives none, so a write's outcome is not taken for a refusal.
 */
export function gitHubError(err: unknown, what: string): BbError {
  if (isBbError(err)) return err;
  const e = err as {
    status?: number;
    name?: string;
    message?: string;
    cause?: unknown;
    response?: { data?: { message?: string }; headers?: Record<string, string | undefined> };
  };
  const said = e.response?.data?.message ?? e.message ?? String(err);
  if (!e.response) {
    const inner = (e.cause ?? err) as { name?: string; code?: string; cause?: { code?: string } };
    const timedOut = inner.name === 'TimeoutError' || /timeout|aborted/i.test(String(said));
    return new BbError(
      timedOut ? 'TIMEOUT' : 'FORGE_UNAVAILABLE',
      `GitHub did not answer ${what}: ${said}`,
      { cause: (inner.cause as object | undefined) ?? inner },
    );
  }
  const status = typeof e.status === 'number' ? e.status : 0;
  const h = e.response.headers ?? {};
  // A rate limit is the forge being busy, not a refusal: retried later, never "forbidden".
  const limited =
    status === 429 ||
    (status === 403 && (h['x-ratelimit-remaining'] === '0' || /rate limit/i.test(said)));
  return new BbError(
    limited ? 'FORGE_UNAVAILABLE' : codeOf(status),
    `GitHub ${status} on ${what}: ${said}${limited ? ` (rate limited${h['retry-after'] ? `; retry after ${h['retry-after']} s` : ''})` : ''}`,
    {
      cause: err,
      data: {
        status,
        ...(limited && h['retry-after'] ? { retryAfter: Number(h['retry-after']) } : {}),
      },
    },
  );
}

/** The web root of the GitHub whose API is `api`: api.github.com's is github.com, a server's <web>/api/v3's is <web>. */
export function webOf(api: string): string {
  const u = new URL(api);
  if (u.host === 'api.github.com') return 'https://github.com';
  if (/\/api\/v3\/?$/.test(u.pathname)) return api.replace(/\/api\/v3\/?$/, '');
  throw new BbError(
    'INVALID_INPUT',
    `FORGE_GITHUB_API ${api} is neither api.github.com nor a server's <web>/api/v3: set FORGE_GITHUB_URL to its web root too`,
  );
}
