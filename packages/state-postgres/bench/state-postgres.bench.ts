// The store's workload on a real PostgreSQL server (started here, durable commits):
// upserts, reads, inbox accepts and settles through PostgresForgeStateStore vs raw `pg`
// running exactly the same SQL on the same server, 8 operations in flight on each side,
// in one run. Goal: ratio >= 0.8 of raw pg's operations per second. Also reports the
// lease claim p99 (PostgresLeaseStore, 8 in flight).

import { stateToRow } from '@bb/state';
import { sampleState } from '@bb/state/testing';
import { benchRounds, benchSize, reportBench } from '@bb/tooling/bench';
import {
  PG_STATE_SQL,
  PostgresDatabase,
  PostgresForgeStateStore,
  PostgresLeaseStore,
  statementName,
} from '../src/index';
import { rowValues as rawRow } from '../src/state-store';
import { startPostgres } from '../src/testing';

const N = benchSize(4000, 400);
const IN_FLIGHT = 8;
const ROUNDS = benchRounds(5, 1);

const pg = await startPostgres({ durable: true });
try {
  const ours = await PostgresForgeStateStore.open(
    await PostgresDatabase.open({ url: pg.url, schema: 'ours', max: IN_FLIGHT }),
  );
  const raw = await PostgresDatabase.open({ url: pg.url, schema: 'raw', max: IN_FLIGHT });
  await PostgresForgeStateStore.open(raw); // the same tables, in their own schema
  const leases = await PostgresLeaseStore.open(
    await PostgresDatabase.open({ url: pg.url, schema: 'leases', max: IN_FLIGHT }),
  );

  /** Run `op(i)` for i in [0, n) with `IN_FLIGHT` at once; operations per second. */
  async function rate(n: number, op: (i: number) => Promise<unknown>): Promise<number> {
    let next = 0;
    const t0 = process.hrtime.bigint();
    await Promise.all(
      Array.from({ length: IN_FLIGHT }, async () => {
        while (next < n) await op(next++);
      }),
    );
    return n / (Number(process.hrtime.bigint() - t0) / 1e9);
  }

  const states = Array.from({ length: N }, (_, i) => sampleState(i + 1, { slug: `s-${i + 1}` }));
  const rows = states.map((s) => rawRow(stateToRow(s)));
  const payload = { kind: 'comment_created', body: 'x'.repeat(2000) };
  const payloadJson = JSON.stringify(payload);

  const workload = {
    ours: async (round: number) => {
      const up = await rate(N, (i) => ours.upsert(states[i]!));
      const get = await rate(N, (i) => ours.get('acme', 'widgets', i + 1));
      const ids: number[] = [];
      const acc = await rate(N, async (i) => {
        const e = await ours.accept(`k:${round}:${i}`, {
          issue: `acme/widgets#${(i % 200) + 1}`,
          occurredAt: '2026-11-24T08:00:00.000Z',
          payload,
        });
        ids.push(e!.id);
      });
      const settle = await rate(N, (i) => ours.settle(ids[i]!, 'done'));
      return [up, get, acc, settle];
    },
    raw: async (round: number) => {
      // Prepared by name, as the store's statements are: the same SQL, the same protocol.
      const q = (text: string, values: unknown[]) =>
        raw.pool.query({ name: statementName(text), text, values });
      const up = await rate(N, (i) => q(PG_STATE_SQL.upsert, rows[i]!));
      const get = await rate(N, async (i) => {
        const r = await q(PG_STATE_SQL.get, ['acme', 'widgets', i + 1]);
        if (!r.rows[0]) await q(PG_STATE_SQL.histLatest, ['acme', 'widgets', i + 1]);
      });
      const ids: string[] = [];
      const acc = await rate(N, async (i) => {
        const now = new Date().toISOString();
        const r = await q(PG_STATE_SQL.accept, [
          `k:${round}:${i}`,
          null,
          null,
          now,
          `acme/widgets#${(i % 200) + 1}`,
          'pending',
          '2026-11-24T08:00:00.000Z',
          payloadJson,
          null,
          null,
          null,
          null,
          false,
        ]);
        ids.push(r.rows[0].id);
      });
      const settle = await rate(N, (i) => q(PG_STATE_SQL.inboxSettle, ['done', null, ids[i]]));
      return [up, get, acc, settle];
    },
  };

  // Warm both sides (plans, caches), then alternate who goes first.
  await workload.ours(-1);
  await workload.raw(-1);
  const ratios: number[] = [];
  const perOp: Record<string, number[]> = { ours: [], raw: [] };
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? (['ours', 'raw'] as const) : (['raw', 'ours'] as const);
    const got: Record<string, number[]> = {};
    for (const who of order) got[who] = await workload[who](r);
    // One figure per side: the harmonic mean of the four operations' rates.
    const hm = (xs: number[]) => xs.length / xs.reduce((s, x) => s + 1 / x, 0);
    perOp['ours']!.push(hm(got['ours']!));
    perOp['raw']!.push(hm(got['raw']!));
    ratios.push(hm(got['ours']!) / hm(got['raw']!));
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

  // Lease claims: 8 in flight, each a fresh name (a takeover's cost), p99.
  const lat: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (next < N) {
        const i = next++;
        const t0 = process.hrtime.bigint();
        await leases.claim(`issue:acme/widgets#${i}`, `r${i % 3}`, 15_000);
        lat.push(Number(process.hrtime.bigint() - t0) / 1e6);
      }
    }),
  );
  lat.sort((a, b) => a - b);

  reportBench({
    name: 'state-postgres',
    metric: `store workload ops/s on PostgreSQL (upsert, get, inbox accept, settle; ${IN_FLIGHT} in flight, durable commits) vs raw pg with the same SQL`,
    ours: Math.round(median(perOp['ours']!)),
    baseline: Math.round(median(perOp['raw']!)),
    goal: 0.8,
    higherIsBetter: true,
    extra: {
      medianRatioOfRounds: Math.round(median(ratios) * 1000) / 1000,
      leaseClaimP50ms: Math.round(lat[Math.floor(lat.length * 0.5)]! * 1000) / 1000,
      leaseClaimP99ms: Math.round(lat[Math.floor(lat.length * 0.99)]! * 1000) / 1000,
    },
  });
  await ours.database.close();
  await raw.close();
  await leases.database.close();
} finally {
  await pg.stop();
}
