/**
 * @module
 * `@bb/forge-sidecar`: the agent's only door to the forge. A per-bottle process
 * that holds the forge token and serves a small JSON-RPC 2.0 API on a Unix
 * socket: reads anywhere in the repository, writes only to the bottle's issue
 * and its PRs, one hash-chained op-log line per call, and events relayed to the
 * orchestrator through a queue directory. The MCP bridge is in
 * `@bb/forge-sidecar/mcp`.
 */

export { runBbForge } from './bb-forge';
export { ForgeSidecarClient, type ForgeSidecarClientOptions } from './client';
export { ERROR_TABLE, fromWireError, toWireError, type WireCode, type WireError } from './codes';
export { loadSidecarEnv, readSidecarToken, type SidecarEnv, SidecarEnvSchema } from './config';
export {
  DONE_STATUSES,
  METHODS,
  type ParamsOf,
  type ResultOf,
} from './contract';
export {
  createGitGate,
  forgeGitEnv,
  type GitGate,
  pushCommit,
  remoteDefaultBranch,
} from './git-push';
export { formatHold, HOLD_FILE, holdReader } from './hold';
export type { Peer, Unreachable } from './line-client';
export {
  BASE_FILE,
  forgeSiteFromEnv,
  type RunSidecarOptions,
  runSidecarFromEnv,
  stderrLogger,
} from './main';
export {
  callMethod,
  METHOD_NAMES,
  type MethodContext,
  type MethodName,
  PARAMS,
  WRITE_METHODS,
} from './methods';
export {
  GENESIS,
  OpLog,
  type OpLogEntry,
  type OpLogOptions,
  type OpLogVerification,
  type OpOutcome,
  verifyOpLog,
  verifyOpLogFile,
} from './op-log';
export { FORGE_PROMPT_OVERLAY } from './prompt';
export {
  CheckinThrottle,
  type DoneSignal,
  type QueueEvent,
  type QueueEventType,
  QueueReader,
  type QueueReaderOptions,
  QueueWriter,
} from './queue';
export { RpcSocketClient, type RpcSocketClientOptions } from './rpc-client';
export {
  type RpcLogger,
  type RpcMethod,
  type RpcServerOptions,
  type RunningRpcServer,
  serveRpc,
} from './rpc-server';
export {
  type RunningSidecar,
  type SidecarLogger,
  type SidecarOptions,
  startSidecar,
} from './server';
