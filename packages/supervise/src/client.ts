import { BbError } from '@bb/errors';
import { fromWireError, type WireError } from '@bb/forge-sidecar';
import { Pool } from 'undici';
import type { ToolAnswer, ToolName } from './contract';

export interface SuperviseClientOptions {
  /** @default process.env.BB_SUPERVISE_SOCKET ?? '/run/bb/supervise.sock' */
  socketPath?: string;
  /** How long to keep trying while the sidecar is still coming up. @default 30000 */
  connectWaitMs?: number;
}

/** A client of a bottle's supervise sidecar (used by bb-supervise and the MCP bridge). */
export class SuperviseClient {
  readonly socketPath: string;
  readonly #pool: Pool;
  readonly #connectWait: number;
  #id = 0;

  constructor(options: SuperviseClientOptions = {}) {
    this.socketPath =
      options.socketPath ?? process.env['BB_SUPERVISE_SOCKET'] ?? '/run/bb/supervise.sock';
    this.#connectWait = options.connectWaitMs ?? 30_000;
    this.#pool = new Pool('http://supervise', {
      socketPath: this.socketPath,
      connections: 4,
      headersTimeout: 11 * 60_000,
      bodyTimeout: 11 * 60_000,
    });
  }

  async call<T>(method: string, params: Record<string, unknown>): Promise<T> {
    const body = JSON.stringify({ jsonrpc: '2.0', id: ++this.#id, method, params });
    const deadline = Date.now() + this.#connectWait;
    for (;;) {
      try {
        const res = await this.#pool.request({
          method: 'POST',
          path: '/rpc',
          headers: { 'content-type': 'application/json' },
          body,
        });
        const text = await res.body.text();
        if (res.statusCode !== 200)
          throw new BbError('INTERNAL', `the supervise sidecar answered HTTP ${res.statusCode}`);
        const msg = JSON.parse(text) as { result?: T; error?: WireError };
        if (msg.error) throw fromWireError(msg.error);
        return msg.result as T;
      } catch (err) {
        const code = (err as { code?: string }).code;
        if ((code === 'ENOENT' || code === 'ECONNREFUSED') && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 50));
          continue;
        }
        if (code === 'ENOENT' || code === 'ECONNREFUSED')
          throw new BbError(
            'NOT_FOUND',
            `cannot reach the supervise sidecar at ${this.socketPath}: this bottle has no supervise plane`,
            { cause: err },
          );
        throw err;
      }
    }
  }

  propose(tool: ToolName, args: Record<string, string>, waitMs?: number): Promise<ToolAnswer> {
    return this.call('propose', {
      tool,
      args,
      ...(waitMs !== undefined ? { wait_ms: waitMs } : {}),
    });
  }

  wait(requestId: string, waitMs?: number): Promise<ToolAnswer> {
    return this.call('wait', {
      request_id: requestId,
      ...(waitMs !== undefined ? { wait_ms: waitMs } : {}),
    });
  }

  config(): Promise<Record<string, string>> {
    return this.call('config', {});
  }

  close(): Promise<void> {
    return this.#pool.close();
  }
}
