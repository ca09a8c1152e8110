import type { ScopedForge } from '@bb/forge';
import { ERROR_TABLE } from './codes';
import type { GitGate } from './git-push';
import { callMethod, METHOD_NAMES, type MethodContext } from './methods';
import type { OpLog } from './op-log';
import { CheckinThrottle, type QueueWriter } from './queue';
import { type RpcLogger, type RpcMethod, serveRpc } from './rpc-server';

/** Where the sidecar writes its own diagnostics (never the token). */
export type SidecarLogger = RpcLogger;

export interface SidecarOptions {
  forge: ScopedForge;
  socketPath: string;
  opLog: OpLog;
  queue: QueueWriter;
  /** Where the agent's commits are received (as data) and pushed from. */
  git: GitGate;
  branch: string;
  /** uid/gid allowed to connect; the socket and its directory are given to them. */
  socketOwner?: { uid: number; gid: number } | undefined;
  /**
   * The socket's mode. 0o666 lets an agent running as another user connect; its
   * directory is then 0755, so only the sidecar's user can remove the socket.
   * @default 0o600
   */
  socketMode?: number;
  /** At most one check-in event per this many ms (the latest always lands). @default 1000 */
  checkinIntervalMs?: number;
  /** Largest request body accepted. @default 1 MiB */
  maxBodyBytes?: number;
  logger?: SidecarLogger;
  /**
   * The turn being served, as the host says (a warm bottle's gate serves
   * several): a `signal_done` closes writes for its turn only. @default always 0
   */
  turn?: () => number;
  /**
   * Fencing: why the host does not hold this bottle's issue now, or `undefined`
   * when it does (`holdReader`). Asked before every forge write. @default always held
   */
  notHeld?: () => string | undefined;
}

export interface RunningSidecar {
  socketPath: string;
  /** Stop accepting, let calls in flight finish, remove the socket. */
  close(): Promise<void>;
}

const silent: SidecarLogger = { info() {}, warn() {}, error() {} };

/**
 * Start the forge sidecar: the contract's methods (`contract.ts`) as JSON-RPC 2.0
 * on a Unix socket (`serveRpc`: newline-delimited JSON, what `ForgeSidecarClient`
 * speaks, or HTTP `POST /rpc` and `GET /healthz`).
 */
export async function startSidecar(options: SidecarOptions): Promise<RunningSidecar> {
  const log = options.logger ?? silent;
  const ctx: MethodContext = {
    turn: options.turn ?? (() => 0),
    ...(options.notHeld ? { notHeld: options.notHeld } : {}),
    forge: options.forge,
    opLog: options.opLog,
    queue: options.queue,
    checkins: new CheckinThrottle(options.queue, options.checkinIntervalMs ?? 1000),
    git: options.git,
    branch: options.branch,
  };
  const methods = new Map<string, RpcMethod>(
    METHOD_NAMES.map((name) => [name, (params) => callMethod(ctx, name, params)]),
  );
  const server = await serveRpc({
    name: 'forge sidecar',
    socketPath: options.socketPath,
    methods,
    maxBodyBytes: options.maxBodyBytes ?? 1024 * 1024,
    socketOwner: options.socketOwner,
    ...(options.socketMode !== undefined ? { socketMode: options.socketMode } : {}),
    health: () => ({
      ok: true,
      issue: options.forge.issue,
      scope: options.forge.scope,
      turn: ctx.turn(),
    }),
    log,
  });
  log.info({ socket: options.socketPath, issue: options.forge.issue }, 'forge sidecar listening');
  let closing: Promise<void> | undefined;
  return {
    socketPath: options.socketPath,
    close: () => {
      closing ??= (async () => {
        await server.close();
        ctx.checkins.flush();
        options.opLog.sync();
        log.info({}, 'forge sidecar stopped');
      })();
      return closing;
    },
  };
}

export { ERROR_TABLE };
