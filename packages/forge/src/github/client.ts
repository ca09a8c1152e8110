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
  /** Retries of a rate-limited request before it fails. @default 2 */
  rateLimitRetries?: number;
  /** The longest wait for a rate limit to reset, in seconds; longer fails at once. @default 60 */
  maxRateLimitWaitS?: number;
  /** Retries of a 5xx or a dropped connection. @default 2 */
  retries?: number;
  /**
   * Space writes a second apart, one at a time, as GitHub asks of every client to stay
   * under its secondary limits (@octokit/plugin-throttling). Off only for a test server
   * on loopback; rate-limited answers are then retried by their Retry-After alone.
   * @default true
   */
  spaceWrites?: boolean;
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
    retry: { retries: o.retries ?? 2 },
  };
  return new GitHubOctokit(options as ConstructorParameters<typeof Octokit>[0]);
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

/** Octokit's error as a BbError (its message has no token: Octokit redacts the header). */
export function gitHubError(err: unknown, what: string): BbError {
  if (isBbError(err)) return err;
  const e = err as {
    status?: number;
    message?: string;
    response?: { data?: { message?: string } };
  };
  const status = typeof e.status === 'number' ? e.status : 0;
  const said = e.response?.data?.message ?? e.message ?? String(err);
  return new BbError(codeOf(status), `GitHub ${status || 'unreachable'} on ${what}: ${said}`, {
    cause: err,
    data: { status },
  });
}
