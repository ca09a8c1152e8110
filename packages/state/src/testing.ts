/**
 * @module
 * `@bb/state/testing`: the behaviour suites every `ForgeStateStore`,
 * `DeliveryLedger`, `EventInbox` and `LeaseStore` implementation must pass. Call them from a vitest test file:
 *
 * ```ts
 * import { describeStoreConformance } from '@bb/state/testing';
 * describeStoreConformance('my store', { create: () => new MyStore() });
 * ```
 *
 * `vitest` is an optional peer dependency, needed only here.
 */
export { describeInboxConformance, describeRoutedInboxConformance } from './testing/inbox-suite';
export { describeLeaseConformance } from './testing/lease-suite';
export { describeLedgerConformance } from './testing/ledger-suite';
export { describeOperatorTokensConformance } from './testing/operators-suite';
export { describeRosterConformance } from './testing/roster-suite';
export {
  type ConformanceOptions,
  conformanceSetup,
  conformanceSuite,
  expectCode,
} from './testing/setup';
export { describeStoreConformance } from './testing/store-suite';
export { sampleState } from './testing-data';
