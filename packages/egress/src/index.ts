/**
 * @module
 * `@bb/egress`: what a bottle may reach. A deny-by-default forward proxy
 * (allowlist, CONNECT for TLS) and a credential-injecting reverse proxy (the agent
 * never holds the key), both logging every connection; `summarizeEgress` turns
 * the logs into the egress section of a run record.
 */

export { isInternalAddress } from './addresses';
export {
  type BridgeMapping,
  type BridgeTarget,
  GATE_SURFACES,
  type GateSurface,
  parseBridgeArgs,
  type RunningBridge,
  type StartBridgeOptions,
  startBridge,
  startGateLink,
} from './bridge';
export {
  type CredentialProxy,
  type CredentialRoute,
  createCredentialProxy,
  loadRoutes,
  RoutesFileSchema,
} from './cred-proxy';
export { failedToStart, serveUntilStopped } from './daemon';
export { DENIAL_FIX, type Denial, denialBody } from './denial';
export { createEgressProxy, type EgressProxy, type EgressProxyOptions } from './egress-proxy';
export {
  type EgressLogEntry,
  type EgressLogger,
  type FileLogger,
  fileLogger,
  LINE_ROOM,
  type LogTicket,
} from './log';
export { type ProxiesOptions, type ReloadStatus, startProxies } from './proxies';
export { runProxiesFromEnv } from './proxies-main';
export { isReservedSecret } from './reserved';
export { type Decision, decide, type EgressRule, parseRules } from './rules';
export { type EgressSummary, parseEgressLog, summarizeEgress } from './summary';
export { type ModelUsage, UsageMeter } from './usage-meter';
