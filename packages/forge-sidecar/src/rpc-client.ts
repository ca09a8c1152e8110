import { fromWireError, type WireError } from './codes';
import { LineClient, type Peer } from './line-client';

export interface RpcSocketClientOptions {
  socketPath: string;
  /** Whom it talks to, for its errors, and the error when nobody answers at the socket. */
  peer?: Peer;
  /** The longest one call may take. */
  timeoutMs: number;
  /** Connections kept, for concurrent calls. @default 4 */
  connections?: number;
  /** How long to keep trying while the socket is missing or refuses (its server still starting). */
  connectWaitMs: number;
}

/**
 * The client side of `serveRpc`: JSON-RPC 2.0 calls as newline-delimited JSON on
 * kept Unix-socket connections; an error comes back as the `BbError` the server
 * raised (its code, its message).
 */
export class RpcSocketClient {
  readonly socketPath: string;
  readonly #lines: LineClient;
  readonly #timeout: number;
  #id = 0;

  constructor(o: RpcSocketClientOptions) {
    this.socketPath = o.socketPath;
    this.#timeout = o.timeoutMs;
    this.#lines = new LineClient(o.socketPath, o.connections ?? 4, o.connectWaitMs, o.peer);
  }

  async call<T = unknown>(method: string, params: Record<string, unknown> = {}): Promise<T> {
    const id = ++this.#id;
    const body = (await this.#lines.call(
      id,
      { jsonrpc: '2.0', id, method, params },
      this.#timeout,
    )) as { result?: T; error?: WireError };
    if (body.error) throw fromWireError(body.error);
    return body.result as T;
  }

  close(): void {
    this.#lines.close();
  }
}
