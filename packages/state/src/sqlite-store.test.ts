import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteOperatorTokens } from './operators';
import { SqliteFleetRoster } from './roster';
import { SqliteLeaseStore } from './sqlite-leases';
import { SqliteForgeStateStore } from './sqlite-store';
import {
  describeInboxConformance,
  describeLeaseConformance,
  describeLedgerConformance,
  describeOperatorTokensConformance,
  describeRosterConformance,
  describeRoutedInboxConformance,
  describeStoreConformance,
} from './testing';

const dirs: string[] = [];
function create(): SqliteForgeStateStore {
  const dir = mkdtempSync(join(tmpdir(), 'bb-state-'));
  dirs.push(dir);
  return new SqliteForgeStateStore({ path: join(dir, 'bot-bottle.db') });
}
function dispose(store: SqliteForgeStateStore): void {
  store.close();
  const dir = dirs.shift();
  if (dir) rmSync(dir, { recursive: true, force: true });
}

describeStoreConformance('SqliteForgeStateStore', { create, dispose });
describeLedgerConformance('SqliteForgeStateStore', { create, dispose });
describeInboxConformance('SqliteForgeStateStore', { create, dispose });
describeRoutedInboxConformance('SqliteForgeStateStore', { create, dispose });
const leaseFiles = new Map<SqliteLeaseStore, SqliteForgeStateStore>();
describeLeaseConformance('SqliteLeaseStore', {
  create: () => {
    const store = create();
    const leases = new SqliteLeaseStore(store.database);
    leaseFiles.set(leases, store);
    return leases;
  },
  dispose: (leases) => {
    dispose(leaseFiles.get(leases)!);
    leaseFiles.delete(leases);
  },
});

const rosterFiles = new Map<SqliteFleetRoster, SqliteForgeStateStore>();
describeRosterConformance('SqliteFleetRoster', {
  create: () => {
    const store = create();
    const roster = new SqliteFleetRoster(store.database);
    rosterFiles.set(roster, store);
    return roster;
  },
  dispose: (roster) => {
    dispose(rosterFiles.get(roster)!);
    rosterFiles.delete(roster);
  },
});

const operatorFiles = new Map<SqliteOperatorTokens, SqliteForgeStateStore>();
describeOperatorTokensConformance('SqliteOperatorTokens', {
  create: () => {
    const store = create();
    const tokens = new SqliteOperatorTokens(store.database);
    operatorFiles.set(tokens, store);
    return tokens;
  },
  dispose: (tokens) => {
    dispose(operatorFiles.get(tokens)!);
    operatorFiles.delete(tokens);
  },
});
