/**
 * @module
 * `@bb/forklift`: keep a fork in sync with its upstream with an agent that holds no
 * credential. The host fetches, runs the agent in a container on a copy with no
 * remotes, verifies the result as data, and only then pushes and opens the PR.
 */
export {
  type AgentChoice,
  type AgentName,
  agentNames,
  DEFAULT_ALLOW,
  type ModelRoute,
  modelRouteFromEnv,
  readScript,
} from './agent';
export { FORKLIFT_USAGE, type ForkliftIo, runForkliftCli } from './cli';
export { checkForkWork, type ForkWorkCheck } from './fork-work';
export { agentPrompt, DEFAULT_INSTRUCTIONS } from './prompt';
export { forkForge, parseRemote, type RemoteRepo } from './remotes';
export {
  type ForkliftOptions,
  type ForkliftResult,
  OUTCOMES,
  type Outcome,
  runForklift,
  runsDir,
} from './run';
export { listRuns, saveResult } from './runs';
export { type SyncState, statePath, syncBranchFor } from './sync-state';
export {
  CI_DIRS,
  CI_FILES,
  checkTree,
  type ForkRules,
  globMatch,
  isCiPath,
  parseForkMd,
  type TreeCheck,
  unquotePath,
} from './verify';
