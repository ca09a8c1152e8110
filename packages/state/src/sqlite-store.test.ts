import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteForgeStateStore } from './sqlite-store';
import {
  describeInboxConformance,
  describeLedgerConformance,
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
