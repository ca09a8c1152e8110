/**
 * @module
 * `@bb/headless`: bottles on a backend. This release provides the `Backend`
 * interface (plain data, no Docker types), the Docker backend (default) and the
 * local-process backend for development; the conformance suite is in
 * `@bb/headless/testing`.
 */
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
} from './backend';
export {
  type BackendFactory,
  BackendRegistry,
  backendKinds,
  type RunnerFactory,
  type RunnerOptions,
  registerBackend,
  registerRunner,
} from './backends';
export { endedTurn, writeTurnFile } from './bottle-parts';
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
} from './bottles';
export { canBuildBounded, reclaimBuildEngines } from './build-engine';
export { canMountDisks, DEFAULT_DISK, diskQuota } from './disk';
export { DockerBackend, type DockerBackendOptions, demux } from './docker-backend';
export {
  bridgePrelude,
  GATE_ROLE,
  type ProxyGateDirs,
  type ProxyGateOptions,
  routeSecrets,
  startProxyGate,
} from './gate';
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
} from './layout';
export { LOCAL_BACKEND_WARNING, LocalBackend } from './local-backend';
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
} from './manifests';
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
} from './plan';
export { secretValue } from './plan-host';
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
} from './providers';
export {
  type BottleRunner,
  headlessRunner,
  MANAGED_LABEL,
  type SessionLimits,
} from './runner';
export { prepareRuntime } from './runtime';
export { type AgentScript, AgentScriptSchema } from './script-agent';
export { removeSecrets } from './secrets';
export {
  type BottleStorage,
  hostBottleStorage,
  importedCommits,
  type TurnEvidence,
} from './storage';
export {
  type BottleConfig,
  effectiveConfig,
  writeCurrentConfig,
} from './supervise-gate';
export {
  bottleRemediator,
  type RemedyOptions,
  type RemedyResult,
  rebuildBottle,
  reloadBottleProxies,
  supervisedBottles,
  takeResumeRequest,
} from './supervise-remedy';
export { canKeepWarm } from './warm';
