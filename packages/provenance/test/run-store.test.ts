import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BbDatabase } from '@bb/state';
import { expectFixtureFails } from '@bb/tooling/fixture-run';
import { describe, it } from 'vitest';
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

describe('the run store conformance suite', () => {
  it('fails on a deliberately broken store, and passes what it does right', () => {
    expectFixtureFails(new URL('fixtures/broken-run-store.fixture.ts', import.meta.url), {
      failed: [
        'a record that does not continue its chain is a CONFLICT and stores nothing',
        'two writers racing on one chain: one wins, the other is a CONFLICT',
        'list filters, counts and pages, newest first',
      ],
      atLeast: true,
      passed: ['appended records round-trip and form each bottle its chain, oldest first'],
    });
  });
});
