import type { Pool } from 'undici';
import type { MethodName, ParamsOf, ResultOf } from './contract';
import { untilListening } from './line-client';
import { RpcSocketClient } from './rpc-client';

export interface ForgeSidecarClientOptions {
  /** The sidecar's socket. @default process.env.BB_SIDECAR_SOCKET ?? '/run/bb/forge.sock' */
  socketPath?: string;
  /** @default 120000 (a push can take a while) */
  timeoutMs?: number;
  /** Connections kept to the sidecar, for concurrent calls. @default 4 */
  connections?: number;
  /**
   * How long to keep retrying while the socket does not exist or refuses
   * connections (a bottle's agent may start while its sidecar is still coming up;
   * the host gives the sidecar up to about 15 s, then stops the agent). @default 30000
   */
  connectWaitMs?: number;
}

/**
 * A typed client of the forge sidecar. Errors come back as the same `BbError`
 * codes the sidecar raised (`SCOPE_DENIED`, `NOT_FOUND`, `INVALID_INPUT`, ...).
 */
export class ForgeSidecarClient {
  readonly socketPath: string;
  // undici loads at the first health check, not with the package: the orchestrator,
  // which imports this package and never calls it, does not carry it.
  #client: Pool | Promise<Pool> | undefined;
  readonly #poolOptions: { connections: number; timeoutMs: number };
  readonly #rpc: RpcSocketClient;
  readonly #connectWait: number;

  constructor(options: ForgeSidecarClientOptions = {}) {
    this.socketPath =
      options.socketPath ?? process.env['BB_SIDECAR_SOCKET'] ?? '/run/bb/forge.sock';
    this.#connectWait = options.connectWaitMs ?? 30_000;
    this.#rpc = new RpcSocketClient({
      socketPath: this.socketPath,
      timeoutMs: options.timeoutMs ?? 120_000,
      connections: options.connections ?? 4,
      connectWaitMs: this.#connectWait,
    });
    this.#poolOptions = {
      connections: options.connections ?? 4,
      timeoutMs: options.timeoutMs ?? 120_000,
    };
  }

  #pool(): Pool | Promise<Pool> {
    this.#client ??= import('undici').then((m) => {
      // A bundler may hand the CommonJS module over as its default export only.
      const { Pool } = 'Pool' in m ? m : (m as unknown as { default: typeof m }).default;
      const pool = new Pool('http://sidecar', {
        socketPath: this.socketPath,
        connections: this.#poolOptions.connections,
        headersTimeout: this.#poolOptions.timeoutMs,
        bodyTimeout: this.#poolOptions.timeoutMs,
      });
      this.#client = pool;
      return pool;
    });
    return this.#client;
  }

  /**
   * Call a method of the contract (`contract.ts`); resolves with its result or
   * throws the typed error. Calls go as newline-delimited JSON-RPC on kept
   * connections (no HTTP on either side). Any other name is sent as it is (the
   * sidecar answers `method_not_found`).
   */
  call<M extends MethodName>(method: M, params: ParamsOf<M>): Promise<ResultOf<M>>;
  call<T = unknown>(method: string, params?: Record<string, unknown>): Promise<T>;
  call(method: string, params: Record<string, unknown> = {}): Promise<unknown> {
    return this.#rpc.call(method, params);
  }

  async health(): Promise<{ ok: boolean; issue: number; scope: number[]; turn?: number }> {
    const res = await this.#request({ method: 'GET', path: '/healthz' });
    return (await res.body.json()) as {
      ok: boolean;
      issue: number;
      scope: number[];
      turn?: number;
    };
  }

  #request(options: Parameters<Pool['request']>[0]): Promise<Awaited<ReturnType<Pool['request']>>> {
    return untilListening(this.socketPath, this.#connectWait, async () =>
      (await this.#pool()).request(options),
    );
  }

  readIssue(number: number) {
    return this.call('read_issue', { number });
  }
  readPr(number: number) {
    return this.call('read_pr', { number });
  }
  readComments(number: number) {
    return this.call('read_comments', { number });
  }
  /** The reviews of PR `number`, oldest first, each with its inline comments. */
  readReviews(number: number) {
    return this.call('read_reviews', { number });
  }
  postComment(number: number, body: string) {
    return this.call('post_comment', { number, body });
  }
  updateDescription(number: number, body: string) {
    return this.call('update_description', { number, body });
  }
  openPr(input: ParamsOf<'open_pr'>) {
    return this.call('open_pr', input);
  }
  push() {
    return this.call('push', {});
  }
  signalDone(status: ParamsOf<'signal_done'>['status'], summary: string) {
    return this.call('signal_done', { status, summary });
  }

  async close(): Promise<void> {
    this.#rpc.close();
    const pool = this.#client;
    this.#client = undefined;
    if (pool) await (await pool).close();
  }
}
