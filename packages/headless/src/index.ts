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
  VERSION_LABEL,
  type WaitResult,
} from './backend';
export {
  type BottleMeta,
  type BottleOptions,
  BRIDGE_PORTS,
  bottleDir,
  destroy,
  type ForgeWiring,
  freeze,
  HOME_LABEL,
  homeLabel,
  type LaunchOptions,
  launch,
  listBottles,
  type ResumeOptions,
  readMeta,
  reattach,
  resume,
  type TurnOutcome,
} from './bottles';
export { DockerBackend, type DockerBackendOptions, demux } from './docker-backend';
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
  type AgentProvider,
  claudeProvider,
  codexProvider,
  type Invocation,
  PROVIDERS,
  PROXY_API_KEY,
  piProvider,
  providerFor,
  scriptProvider,
  type TurnInput,
  type TurnResult,
} from './providers';
export { type AgentScript, AgentScriptSchema } from './script-agent';
