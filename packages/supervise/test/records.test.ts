// The SQLite store of supervise requests meets the suite every store must.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BbDatabase } from '@bb/state';
import { SuperviseStore } from '../src/store';
import { describeSuperviseRecords } from '../src/testing';

const dirs: string[] = [];
describeSuperviseRecords('SQLite (SuperviseStore)', {
  create: () => {
    const dir = mkdtempSync(join(tmpdir(), 'bb-supervise-records-'));
    dirs.push(dir);
    const db = BbDatabase.open({ path: join(dir, 'bot-bottle.db') });
    return Object.assign(new SuperviseStore(db), { close: () => db.close() });
  },
  dispose: (s) => {
    s.close();
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  },
});
