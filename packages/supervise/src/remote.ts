import { BB_ERROR_CODES, BbError, type BbErrorCode, registerSecret } from '@bb/errors';
import { SUPERVISE_API } from './api';
import type { DecisionScope, ProposalKind } from './contract';
import type { DecisionOutcome, RequestView } from './desk';
import type { Approval, DeskPort, ListFilter } from './port';
import type { SuperviseRequest } from './store';

export interface RemoteDeskOptions {
  /** The orchestrator, `http(s)://host:port` (what `bb orchestrate serve` says it listens on). */
  url: string;
  /** The operator's own token (`bb operator add NAME` on the orchestrator's host); reads need none on loopback. */
  token?: string | undefined;
  /** How long one call may take. @default 15 minutes (an approved rebuild answers once it is built) */
  timeoutMs?: number;
  fetch?: typeof fetch;
}

/**
 * A remote orchestrator's desk over `/api/supervise` (see `createSuperviseApi`):
 * the same calls as a local desk, decided as the operator its token names.
 * The token goes in the `Authorization` header only, never in a URL or a log.
 */
export class RemoteDesk implements DeskPort {
  readonly where: string;
  readonly #base: string;
  readonly #token: string | undefined;
  readonly #timeoutMs: number;
  readonly #fetch: typeof fetch;

  constructor(o: RemoteDeskOptions) {
    let u: URL;
    try {
      u = new URL(o.url);
    } catch {
      throw new BbError(
        'INVALID_INPUT',
        `--server must be the orchestrator's URL, such as http://127.0.0.1:8080 (got ${JSON.stringify(o.url)})`,
      );
    }
    if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.username || u.password || u.search)
      throw new BbError(
        'INVALID_INPUT',
        `--server must be an http(s) URL with no credentials or query (got ${JSON.stringify(`${u.protocol}//${u.host}${u.pathname}`)}): give the token in BB_OPERATOR_TOKEN`,
      );
    // The token crosses the network: in the clear only to this machine.
    const host = u.hostname.replace(/^\[|\]$/g, '');
    const loopback = host === 'localhost' || host === '::1' || /^127\./.test(host);
    if (u.protocol === 'http:' && !loopback)
      throw new BbError(
        'INVALID_INPUT',
        `--server ${u.origin} is plain http to another machine, where the operator token would cross the network in the clear: use https (a TLS-terminating proxy in front of the orchestrator), or http to loopback only`,
      );
    this.#base = `${u.origin}${u.pathname.replace(/\/+$/, '')}`;
    this.where = this.#base;
    this.#token = o.token?.trim() || undefined;
    if (this.#token) registerSecret(this.#token);
    this.#timeoutMs = o.timeoutMs ?? 15 * 60_000;
    this.#fetch = o.fetch ?? fetch;
  }

  list(f: ListFilter = {}): Promise<RequestView[]> {
    const q = new URLSearchParams();
    if (f.status) q.set('status', f.status);
    else q.set('all', '1');
    if (f.slug) q.set('slug', f.slug);
    return this.#call<{ requests: RequestView[] }>('GET', `/requests?${q}`).then((r) => r.requests);
  }

  show(id: string): Promise<RequestView> {
    return this.#call('GET', `/requests/${encodeURIComponent(id)}`);
  }

  approve(id: string, a: Approval): Promise<DecisionOutcome> {
    return this.#call('POST', `/requests/${encodeURIComponent(id)}/approve`, {
      ...(a.scope ? { scope: a.scope } : {}),
      ...(a.edited !== undefined ? { file: a.edited } : {}),
      ...(a.expect ? { expect: a.expect } : {}),
      ...(a.override ? { override: true } : {}),
    });
  }

  reject(id: string, reason: string): Promise<SuperviseRequest> {
    return this.#call('POST', `/requests/${encodeURIComponent(id)}/reject`, { reason });
  }

  cancel(id: string): Promise<SuperviseRequest> {
    return this.#call('POST', `/requests/${encodeURIComponent(id)}/cancel`, {});
  }

  current(slug: string, kind: Exclude<ProposalKind, 'dockerfile'>): Promise<string> {
    return this.#call<{ file: string }>('GET', `/bottles/${encodeURIComponent(slug)}/${kind}`).then(
      (r) => r.file,
    );
  }

  edit(
    slug: string,
    kind: Exclude<ProposalKind, 'dockerfile'>,
    text: string,
    scope: DecisionScope,
    o: { override?: boolean } = {},
  ): Promise<DecisionOutcome> {
    return this.#call('PUT', `/bottles/${encodeURIComponent(slug)}/${kind}`, {
      file: text,
      scope,
      ...(o.override ? { override: true } : {}),
    });
  }

  async #call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const url = `${this.#base}${SUPERVISE_API}${path}`;
    let res: Response;
    try {
      res = await this.#fetch(url, {
        method,
        headers: {
          accept: 'application/json',
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...(this.#token ? { authorization: `Bearer ${this.#token}` } : {}),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(this.#timeoutMs),
        redirect: 'error',
      });
    } catch (err) {
      const e = err as Error;
      if (e.name === 'TimeoutError')
        throw new BbError(
          'TIMEOUT',
          `${this.where} did not answer ${method} ${path} within ${Math.round(this.#timeoutMs / 1000)} s: it may still have been decided (bb supervise show)`,
        );
      throw new BbError(
        'BACKEND_UNAVAILABLE',
        `cannot reach the orchestrator at ${this.where}: ${(e.cause as Error | undefined)?.message ?? e.message}`,
      );
    }
    const text = await res.text();
    let v: unknown;
    try {
      v = JSON.parse(text);
    } catch {
      v = undefined;
    }
    if (res.ok && v !== undefined) return v as T;
    if (res.status === 401 || (res.status === 403 && v === undefined))
      throw new BbError(
        'OPERATOR_DENIED',
        `${this.where} refused the operator token (${res.status}): ${this.#token ? 'it is wrong or was revoked' : 'set BB_OPERATOR_TOKEN to the token bb operator add printed'}`,
      );
    const e = (v as { error?: { code?: string; message?: string; data?: unknown } } | undefined)
      ?.error;
    const code: BbErrorCode =
      e?.code && Object.hasOwn(BB_ERROR_CODES, e.code) ? (e.code as BbErrorCode) : 'INTERNAL';
    throw new BbError(
      code,
      e?.message ?? `${this.where} answered ${res.status} to ${method} ${path}`,
      e?.data ? { data: e.data as Record<string, unknown> } : {},
    );
  }
}
