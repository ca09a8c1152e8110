/**
 * @module
 * `@bb/lifecycle`: the orchestrator's behaviour, apart from its wiring. The
 * webhook endpoint as a `(Request) => Response` handler, a per-issue serial
 * queue, and the pure state machine of an issue's bottle.
 */

export { type BottleRow, saveBottleRow } from './bottle-row';
export { installedCommit } from './installed-commit';
export {
  INITIAL,
  type LifecycleAction,
  type LifecycleContext,
  type LifecycleInput,
  type LifecycleState,
  type LifecycleStatus,
  transition,
  type WatchdogReason,
} from './machine';
export { toNodeListener } from './node-adapter';
export {
  MANAGED_LABEL,
  Orchestrator,
  type OrchestratorOptions,
  type ReconcileReport,
} from './orchestrator';
export {
  type ProvenanceOptions,
  type RecordedTurn,
  type RecordTurnOptions,
  recordTurn,
} from './record-turn';
export { SerialQueue } from './serial-queue';
export { createWebhookHandler, type WebhookHandlerOptions } from './webhook';
