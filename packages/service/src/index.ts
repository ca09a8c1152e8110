/**
 * @module
 * `@bb/service`: the bot-bottle orchestrator service as a library, shared by
 * `bb-orchestrator` and `bb`: configuration from the environment (the forge
 * kind's own variables with it), HTTP routing, the dashboard and `serve`,
 * which composes a forge kind, a state store and a backend. Behaviour lives in `@bb/lifecycle` (webhook handler, queue, state
 * machine, Orchestrator) and the packages it composes.
 */

export { installedCommit } from '@bb/lifecycle';
export {
  type Access,
  type AccessPolicy,
  authenticate,
  checkAccess,
  isLoopbackHost,
  TOKEN_COOKIE,
} from './access';
export { createApp } from './app';
export {
  ConfigSchema,
  loadConfig,
  type OrchestratorConfig,
  parseDuration,
  webhookSecretsOf,
} from './config';
export { type DashboardInput, renderDashboard } from './dashboard';
export { OPERATOR_NAME, OPERATOR_TOKEN, type OperatorInfo, OperatorTokens } from './operators';
export { type RunningOrchestrator, type ServeOptions, serve } from './serve';
export { type OrchestratorState, openState } from './state';
