/**
 * @module
 * The bot-bottle orchestrator app: configuration from the environment and HTTP
 * routing. Behaviour lives in `@bb/lifecycle` (webhook handler, queue, state
 * machine, Orchestrator) and the packages it composes.
 */
export { createApp } from './app';
export { ConfigSchema, loadConfig, type OrchestratorConfig, parseDuration } from './config';
