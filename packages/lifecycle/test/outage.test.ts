// The database goes away while a turn ends (its writes fail as a PostgreSQL outage's
// do, STATE_UNWRITABLE; the real server's outage is in @bb/state-postgres's tests and
// the fleet chaos e2e): the turn is recorded and its bottle frozen once it is back,
// not lost with its bottle left `running`.
import { BbError } from '@bb/errors';
import { describe, expect, it } from 'vitest';
import { setup, until } from './orchestrator-setup';

describe('a database outage at the end of a turn', () => {
  it('records the turn and freezes the bottle once the database is back', async () => {
    const t = setup();
    const n = t.issue();
    await t.orch.accept(t.ev.targeted(n));
    await until('launched', () => t.runner.calls.some((c) => c.startsWith('launch ')));
    const slug = t.orch.bottle(`acme/app#${n}`)!.slug;
    await until('running', () => t.row(n)?.status === 'running');
    // The database goes away: every write fails as an outage's do.
    let down = true;
    // As the PostgreSQL store says it: the server's code in data.pg (57P01: shut down).
    const away = () =>
      new BbError(
        'STATE_UNWRITABLE',
        'cannot reach PostgreSQL at postgres://db/bb (scripted outage)',
        {
          data: { pg: '57P01' },
        },
      );
    const store = t.options.store;
    const upsert = store.upsert.bind(store);
    store.upsert = async (row) => {
      if (down) throw away();
      return upsert(row);
    };
    const records = t.options.provenance.store;
    const append = records.append.bind(records);
    records.append = async (r) => {
      if (down) throw away();
      return append(r);
    };
    t.finish(slug, 80);
    await until('it waits for the database', () =>
      t.logs.some((e) => String(e['msg']).startsWith('database unavailable')),
    );
    await new Promise((r) => setTimeout(r, 600));
    expect(t.records(slug)).toHaveLength(0);
    down = false;
    await until('recorded', () => t.records(slug).length === 1);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    expect(t.logs.some((e) => e['msg'] === 'could not record the turn')).toBe(false);
  });
});
