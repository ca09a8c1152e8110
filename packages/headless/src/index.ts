/**
 * @module
 * `@bb/headless`: bottles on a backend. This release provides the `Backend`
 * interface (plain data, no Docker types), the Docker backend (default) and the
 * local-process backend for development; the conformance suite is in
 * `@bb/headless/testing`.
 */

export {
  type BackendFactory,
  BackendRegistry,
  backendKinds,
  type RunnerFactory,
  type RunnerOptions,
  registerBackend,
  registerRunner,
} from './bottle/backends';
export { endedTurn, writeTurnFile } from './bottle/bottle-parts';
export {
  type BottleOptions,
  cool,
  destroy,
  finishTurn,
  freeze,
  type LaunchOptions,
  launch,
  mountBottleDisk,
  type ResumeOptions,
  reattach,
  resume,
  type StartedTurn,
  startLaunch,
  startResume,
  stopAgent,
  type TurnOutcome,
  unmountBottleDisk,
} from './bottle/bottles';
export {
  bridgePrelude,
  GATE_ROLE,
  type ProxyGateDirs,
  type ProxyGateOptions,
  routeSecrets,
  startProxyGate,
} from './bottle/gate';
export { renewHold } from './bottle/hold';
export {
  AGENT_USER,
  type BottleMeta,
  type BottlePaths,
  BRIDGE_PORTS,
  bottleDir,
  bottlePaths,
  type ForgeWiring,
  GATE_USER,
  HOME_LABEL,
  homeLabel,
  listBottles,
  readMeta,
  writeMeta,
} from './bottle/layout';
export {
  type AgentManifest,
  AgentManifestSchema,
  type BottleManifest,
  BottleManifestSchema,
  configDir,
  loadAgentManifest,
  loadBottleManifest,
  MANIFEST_NAME,
  memoryBytes,
} from './bottle/manifests';
export {
  type AgentPlan,
  type BottlePlan,
  forgeSidecarEnv,
  type GatePlanned,
  type InsidePaths,
  type MountRole,
  modelApiUrl,
  needsProxies,
  type PlanInput,
  type PlannedBottle,
  type PlannedLimits,
  type PlannedMount,
  PROXY_ENV,
  planBottle,
  proxyGateEnv,
  type SecretRef,
  type SupervisePolicyPlan,
} from './bottle/plan';
export { secretValue, supervises } from './bottle/plan-host';
export {
  canPool,
  heldByLivePool,
  makePooled,
  type PoolBottleOptions,
  poolKey,
} from './bottle/pool';
export {
  type PoolRoom,
  parsePoolSizes,
  WarmPool,
  type WarmPoolOptions,
} from './bottle/pool-keeper';
export {
  type BottleRunner,
  type GateTokens,
  gateToken,
  headlessRunner,
  MANAGED_LABEL,
  type PoolSettings,
  type RunnerPool,
  type SessionLimits,
} from './bottle/runner';
export { prepareRuntime } from './bottle/runtime';
export { removeSecrets } from './bottle/secrets';
export {
  type BottleStorage,
  hostBottleStorage,
  importedCommits,
  type TurnEvidence,
} from './bottle/storage';
export {
  atomicWrite,
  type BottleConfig,
  effectiveConfig,
  writeCurrentConfig,
} from './bottle/supervise-gate';
export {
  bottleRemediator,
  type RemedyOptions,
  type RemedyResult,
  rebuildBottle,
  reloadBottleProxies,
  supervisedBottles,
  takeResumeRequest,
} from './bottle/supervise-remedy';
export {
  noteExpiringToken,
  startTokenKeeper,
  type TokenKeeper,
  type TokenKeeperOptions,
} from './bottle/token-keeper';
export { canKeepWarm } from './bottle/warm';
export {
  type Backend,
  type BottleInfo,
  type BottleSpec,
  type BottleState,
  type BuildImageOptions,
  HOST_LABELS,
  NETNS_LABEL,
  VERSION_LABEL,
  type WaitResult,
} from './engine/backend';
export { canBuildBounded, reclaimBuildEngines } from './engine/build-engine';
export { canMountDisks, DEFAULT_DISK, diskQuota, unmountAllUnder } from './engine/disk';
export {
  DockerBackend,
  type DockerBackendOptions,
  demux,
  imageBuildScript,
} from './engine/docker-backend';
export { LOCAL_BACKEND_WARNING, LocalBackend } from './engine/local-backend';
export {
  type AgentProvider,
  claudeProvider,
  codexProvider,
  type Invocation,
  type ModelApiKind,
  modelApiFor,
  namesInWords,
  PROXY_API_KEY,
  piProvider,
  providerFor,
  providerNames,
  registerProvider,
  scriptProvider,
  type TurnInput,
  type TurnResult,
  validSessionId,
} from './providers';
export { type AgentScript, AgentScriptSchema } from './providers/script-agent';
