import { errorMessage } from '@bb/errors';
import { type RpcMethod, serveRpc } from '@bb/forge-sidecar';
import type { SuperviseSidecar } from './sidecar';

export interface RunningSuperviseServer {
  socketPath: string;
  close(): Promise<void>;
}

const MAX_BODY = 256 * 1024;

/**
 * Serve a supervise sidecar on a Unix socket: `propose`, `wait` and `config` as
 * JSON-RPC 2.0 through the gates' one server (`serveRpc` of
 * `@bb/forge-sidecar`: newline-delimited JSON or HTTP `POST /rpc`). A call that
 * waits is ended early when its caller goes away.
 */
export async function serveSupervise(
  sidecar: SuperviseSidecar,
  socketPath: string,
  options: { mode?: number; log?: (line: Record<string, unknown>) => void } = {},
): Promise<RunningSuperviseServer> {
  const log = options.log ?? (() => {});
  const methods = new Map<string, RpcMethod>([
    ['propose', (p, s) => sidecar.propose(p, s)],
    ['wait', (p, s) => sidecar.wait(p, s)],
    ['config', () => sidecar.config()],
  ]);
  const server = await serveRpc({
    name: 'supervise sidecar',
    socketPath,
    methods,
    maxBodyBytes: MAX_BODY,
    // A handful of waiting calls is all an agent needs; more is a flood (and no batches).
    maxConnections: 32,
    maxBatch: 1,
    // Long enough for the longest wait a call may ask for, plus slack.
    requestTimeoutMs: 11 * 60_000,
    socketMode: options.mode ?? 0o600,
    onCall: (method, failed) =>
      log(failed === undefined ? { method, ok: true } : { method, ok: false, error: failed }),
    log: {
      info: () => {},
      warn: (o, msg) => log({ msg, ...o }),
      error: (o, msg) => log({ ok: false, msg, error: errorMessage(o['err'] ?? msg) }),
    },
  });
  return {
    socketPath,
    close: async () => {
      sidecar.close();
      await server.close();
    },
  };
}
