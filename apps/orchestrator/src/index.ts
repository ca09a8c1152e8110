/**
 * @module
 * The bot-bottle orchestrator app: configuration from the environment, HTTP
 * routing, the dashboard and `serve` (the running service). Behaviour lives in `@bb/lifecycle` (webhook handler, queue, state
 * machine, Orchestrator) and the packages it composes.
 */

export { installedCommit } from '@bb/lifecycle';
export { type AccessPolicy, checkAccess, isLoopbackHost, TOKEN_COOKIE } from './access';
export { createApp } from './app';
export { ConfigSchema, loadConfig, type OrchestratorConfig, parseDuration } from './config';
export { type DashboardInput, renderDashboard } from './dashboard';
export { type RunningOrchestrator, type ServeOptions, serve } from './serve';
export { type OrchestratorState, openState } from './state';
