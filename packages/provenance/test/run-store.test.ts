import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BbDatabase } from '@bb/state';
import { ProvenanceStore } from '../src/index';
import { describeRunStoreConformance } from '../src/testing';

const dirs = new Map<ProvenanceStore, string>();
describeRunStoreConformance('ProvenanceStore (SQLite)', {
  create: () => {
    const dir = mkdtempSync(join(tmpdir(), 'bb-prov-'));
    const store = new ProvenanceStore(BbDatabase.open({ path: join(dir, 'bb.db') }));
    dirs.set(store, dir);
    return store;
  },
  dispose: (store) => {
    store.database.close();
    rmSync(dirs.get(store)!, { recursive: true, force: true });
    dirs.delete(store);
  },
});
