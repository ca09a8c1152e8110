/**
 * @module
 * `@bb/lifecycle`: the orchestrator's behaviour, apart from its wiring. The
 * webhook endpoint as a `(Request) => Response` handler, event routing, a
 * per-issue serial queue, the pure state machine of an issue's bottle, the
 * turn monitor, capacity, the sweep, reconcile, and the slim orchestrator
 * that composes them.
 */

export {
  type BottleRunner,
  headlessRunner,
  MANAGED_LABEL,
  type SessionLimits,
} from '@bb/headless';
export { type BottleRow, saveBottleRow } from './bottle-row';
export {
  type Allowance,
  type Budget,
  type BudgetPolicy,
  DEFAULT_BUDGET,
  type Grant,
  type Hold,
  parseContinue,
  tokenAmount,
} from './budget';
export { Capacity, type CapacityOptions } from './capacity';
export {
  type BottleView,
  type Decision,
  decide,
  type FactNeed,
  type Facts,
  type IssueFacts,
} from './decide';
export { installedCommit } from './installed-commit';
export { type FleetOptions, IssueLeases, soloFleet } from './issue-leases';
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
  type AdoptReport,
  type Notice,
  Orchestrator,
  type OrchestratorOptions,
  type SupervisePlane,
} from './orchestrator';
export { type ReconcileReport, reconcile } from './reconcile';
export {
  type ProvenanceOptions,
  type RecordedTurn,
  type RecordTurnOptions,
  recordTurn,
} from './record-turn';
export { issueKey, issueOf, parseIssueKey, prOf } from './routing';
export { SerialQueue } from './serial-queue';
export { sweep } from './sweep';
export {
  clearTurnLog,
  drainTurn,
  readTurnLog,
  type TurnLog,
  type TurnNews,
  updateTurnLog,
  withTurnLog,
  writeTurnLog,
} from './turn-log';
export { TurnMonitor, type TurnMonitorOptions, type TurnReport } from './turn-monitor';
export {
  createWebhookHandler,
  createWebhookListener,
  type DeliveryAnswer,
  type WebhookHandlerOptions,
} from './webhook';
