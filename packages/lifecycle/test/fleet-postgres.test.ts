// Two orchestrators on one real PostgreSQL server (the state, inbox, records and leases
// of @bb/state-postgres), one runner double: the holder of an issue hears of an event
// the other accepted as it commits (not at its next poll), and the take-over scan finds
// what nobody holds by asking the database.
import { openPostgresState, type PostgresState } from '@bb/state-postgres';
import { postgresSkipReason, startPostgres, type TestPostgres } from '@bb/state-postgres/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Orchestrator } from '../src/orchestrator';
import { issueKey } from '../src/routing';
import { cleanups, OWNER, REPO, setup, until } from './orchestrator-setup';

const skipped = postgresSkipReason();
let server: TestPostgres | undefined;
beforeAll(async () => {
  if (!skipped) server = await startPostgres();
}, 60_000);
afterAll(async () => {
  await server?.stop();
});

let schemas = 0;
async function twoOnPostgres(ttlMs: number) {
  const t = setup();
  t.orch.close();
  const state: PostgresState = await openPostgresState({
    url: server!.url,
    schema: `fleet_${process.pid}_${++schemas}`,
  });
  cleanups.push(() => void state.close());
  const logs = { a: [] as Array<Record<string, unknown>>, b: [] as Array<Record<string, unknown>> };
  const make = (holder: 'a' | 'b') => {
    const orch = new Orchestrator({
      ...t.options,
      store: state.store,
      inbox: state.store,
      provenance: { ...t.options.provenance, store: state.runs },
      // The inbox's poll is far off: what reaches the holder sooner came by its notice.
      fleet: { leases: state.leases, holder, ttlMs, pollMs: 60_000, unleased: state.store },
      watchdogIntervalMs: 100,
      log: (e) => logs[holder].push(e),
    });
    orch.startWatchdog();
    cleanups.push(() => orch.close());
    return orch;
  };
  const n = t.issue();
  return { t, state, a: make('a'), b: make('b'), logs, n, key: issueKey(OWNER, REPO, n) };
}

describe.skipIf(skipped)(
  `orchestrators on one PostgreSQL${skipped ? ` (skipped: ${skipped})` : ''}`,
  () => {
    it('an event the other accepted reaches the holder as it commits, not at its next poll', async () => {
      const { t, state, a, b, logs, n, key } = await twoOnPostgres(15_000);
      await a.accept(t.ev.targeted(n));
      await until('launched', () => t.runner.started.length === 1);
      const slug = a.bottle(key)!.slug;
      t.finish(slug, 70);
      await until(
        'frozen',
        async () => (await state.store.get(OWNER, REPO, n))?.status === 'frozen',
      );
      const sent = Date.now();
      await b.accept(t.ev.comment(70, 'one more thing'));
      await until('resumed by the holder', () => t.runner.resumes.length === 1, 3000);
      expect(Date.now() - sent).toBeLessThan(3000);
      expect(logs.a.some((e) => e['msg'] === 'bottle resumed')).toBe(true);
      expect(logs.b.some((e) => e['msg'] === 'bottle resumed')).toBe(false);
    });

    it('takes over from one that stops: the scan finds its bottle by asking the database', async () => {
      const ttl = 600;
      const { t, state, a, b, logs, n, key } = await twoOnPostgres(ttl);
      await a.accept(t.ev.targeted(n));
      await until('launched', () => t.runner.started.length === 1);
      const slug = a.bottle(key)!.slug;
      a.close(); // as a killed process: no release, no renewals
      await until('taken over', () => b.fleet.held.includes(key), ttl * 6);
      expect(logs.b.find((e) => e['msg'] === 'lease taken over')).toMatchObject({ key, from: 'a' });
      t.finish(slug, 71);
      await until(
        'frozen by b',
        async () => (await state.store.get(OWNER, REPO, n))?.status === 'frozen',
      );
    });
  },
);
