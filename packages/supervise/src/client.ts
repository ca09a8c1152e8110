import { BbError } from '@bb/errors';
import { RpcSocketClient } from '@bb/forge-sidecar';
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
  readonly #rpc: RpcSocketClient;

  constructor(options: SuperviseClientOptions = {}) {
    this.socketPath =
      options.socketPath ?? process.env['BB_SUPERVISE_SOCKET'] ?? '/run/bb/supervise.sock';
    this.#rpc = new RpcSocketClient({
      socketPath: this.socketPath,
      peer: {
        name: 'the supervise sidecar',
        lost: 'GATE_UNAVAILABLE',
        unreachable: (socketPath, err) =>
          new BbError(
            'NOT_FOUND',
            `cannot reach the supervise sidecar at ${socketPath}: this bottle has no supervise plane`,
            { cause: err },
          ),
      },
      // A call may wait for the operator up to its wait_ms (10 min at most).
      timeoutMs: 11 * 60_000,
      connectWaitMs: options.connectWaitMs ?? 30_000,
    });
  }

  /** Call a method of the sidecar; its error comes back as the `BbError` it raised. */
  call<T>(method: string, params: Record<string, unknown>): Promise<T> {
    return this.#rpc.call<T>(method, params);
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
    this.#rpc.close();
    return Promise.resolve();
  }
}
