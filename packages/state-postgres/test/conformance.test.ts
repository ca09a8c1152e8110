// The same conformance suites SQLite and memory pass, against a real PostgreSQL
// server this file starts (initdb + pg_ctl), one fresh schema per test.

import { describeRunStoreConformance } from '@bb/provenance/testing';
import {
  describeInboxConformance,
  describeLeaseConformance,
  describeLedgerConformance,
  describeOperatorTokensConformance,
  describeRosterConformance,
  describeRoutedInboxConformance,
  describeStoreConformance,
} from '@bb/state/testing';
import { describeSuperviseRecords } from '@bb/supervise/testing';
import { afterAll, beforeAll, describe, it } from 'vitest';
import {
  PostgresDatabase,
  PostgresFleetRoster,
  PostgresForgeStateStore,
  PostgresLeaseStore,
  PostgresOperatorTokens,
  PostgresRunRecordStore,
  PostgresSuperviseStore,
} from '../src/index';
import { postgresSkipReason, startPostgres, type TestPostgres } from '../src/testing';

// Missing PostgreSQL skips with the reason shown; under BB_REQUIRE_DOCKER=1 it fails instead.
const skipped = postgresSkipReason();
if (skipped)
  describe.skip(`PostgreSQL conformance (skipped: ${skipped})`, () => it('runs', () => {}));
let server: TestPostgres | undefined;
beforeAll(async () => {
  if (!skipped) server = await startPostgres();
}, 60_000);
afterAll(async () => {
  await server?.stop();
});

let n = 0;
const freshSchema = () => {
  if (!server) throw new Error('no PostgreSQL server');
  return PostgresDatabase.open({ url: server.url, schema: `t_${process.pid}_${++n}`, max: 4 });
};
const states = {
  create: async () => PostgresForgeStateStore.open(await freshSchema()),
  dispose: (s: PostgresForgeStateStore) => s.database.close(),
};

if (!skipped) {
  describeStoreConformance('PostgresForgeStateStore', states);
  describeLedgerConformance('PostgresForgeStateStore', states);
  describeInboxConformance('PostgresForgeStateStore', states);
  describeRoutedInboxConformance('PostgresForgeStateStore', states);
  describeLeaseConformance('PostgresLeaseStore', {
    create: async () => PostgresLeaseStore.open(await freshSchema()),
    dispose: (s) => s.database.close(),
  });
  describeRosterConformance('PostgresFleetRoster', {
    create: async () => PostgresFleetRoster.open(await freshSchema()),
    dispose: (s) => s.database.close(),
  });
  describeRunStoreConformance('PostgresRunRecordStore', {
    create: async () => PostgresRunRecordStore.open(await freshSchema()),
    dispose: (s) => s.database.close(),
  });
  describeOperatorTokensConformance('PostgresOperatorTokens', {
    create: async () => PostgresOperatorTokens.open(await freshSchema()),
    dispose: (s) => s.database.close(),
  });
  describeSuperviseRecords('PostgresSuperviseStore', {
    create: async () => PostgresSuperviseStore.open(await freshSchema()),
    dispose: (s) => s.database.close(),
  });
}
