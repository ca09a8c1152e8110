/**
 * @module
 * `@bb/state`: where bot-bottle remembers forge-managed bottles and accepted
 * webhook deliveries.
 *
 * - {@link ForgeStateStore}: the small interface; {@link SqliteForgeStateStore}
 *   (the default, at `$BB_HOME/bot-bottle.db`) and {@link MemoryForgeStateStore}.
 * - {@link DeliveryLedger}: "have we processed this change already?", atomic
 *   across processes.
 * - {@link EventInbox}: every accepted event kept until its effect happened,
 *   so a restart loses nothing that was waiting.
 * - {@link BbDatabase}: the shared SQLite file with per-component migrations, for
 *   packages that keep tables of their own.
 *
 * Conformance suite for other engines: `@bb/state/testing`.
 */
export {
  BbDatabase,
  defaultDatabasePath,
  type Migration,
  mapSqliteError,
  type OpenDatabaseOptions,
  resolveBbHome,
  type SynchronousMode,
} from './database';
export {
  checkDeliveryKey,
  type DeliveryLedger,
  type DeliveryMeta,
  type DeliveryRecord,
} from './delivery-ledger';
export {
  type ForgeState,
  type ForgeStateKey,
  ForgeStateKeySchema,
  ForgeStateSchema,
  type ForgeStatus,
  ForgeStatusSchema,
  parseForgeState,
  parseForgeStateKey,
} from './forge-state';
// The input checks every engine runs first, so each refuses bad input the same way.
export {
  checkDate,
  checkHistoryOptions,
  checkInboxInput,
  checkRecent,
  checkSettle,
  type EventInbox,
  INBOX_STATES,
  type InboxEvent,
  type InboxInput,
  type InboxRoute,
  type InboxState,
  initialState,
  openEventsOfIssue,
  routeByPr,
} from './inbox';
export {
  type ClaimResult,
  checkLeaseHolder,
  checkLeaseName,
  checkTtl,
  type Lease,
  type LeaseStore,
  MemoryLeaseStore,
  type UnleasedWork,
} from './leases';
export { MemoryForgeStateStore } from './memory-store';
export {
  newOperatorToken,
  noLiveOperator,
  OPERATOR_MIGRATIONS,
  OPERATOR_NAME,
  OPERATOR_TOKEN,
  type OperatorInfo,
  type OperatorTokenStore,
  operatorTaken,
  operatorTokenHash,
  SqliteOperatorTokens,
} from './operators';
export {
  agreement,
  checkConfigHash,
  type FleetRoster,
  type Member,
  MemoryFleetRoster,
  ROSTER_MIGRATIONS,
  SqliteFleetRoster,
} from './roster';
export {
  COLUMNS,
  cellsToRow,
  type DeliveryRow,
  type InboxRow,
  type Row,
  rowToState,
  stateToRow,
  toDeliveryRecord,
  toInboxEvent,
} from './rows';
export { LEASE_MIGRATIONS, SqliteLeaseStore } from './sqlite-leases';
export {
  SqliteForgeStateStore,
  type SqliteForgeStateStoreOptions,
  STATE_MIGRATIONS,
  STATE_SQL,
} from './sqlite-store';
export type { Awaitable, ForgeStateStore, HistoryOptions } from './store';
