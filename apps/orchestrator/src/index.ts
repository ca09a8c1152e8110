/**
 * @module
 * The bot-bottle orchestrator. This app is wiring only: the webhook listener,
 * lifecycle loop, watchdog and status API are composed from the packages as they
 * land (see docs/architecture.md). Nothing runs yet.
 */
export const ORCHESTRATOR_ROUTES = [] as const;
