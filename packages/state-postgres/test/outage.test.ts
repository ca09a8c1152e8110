// A PostgreSQL outage, for real: the server this file starts is stopped at once (every
// connection dropped, as a crash would) and started again. What was in flight fails as
// a call's error, the process goes on, and the stores work again once it is back.
import { isBbError } from '@bb/errors';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresDatabase, PostgresLeaseStore } from '../src/index';
import { postgresSkipReason, startPostgres, type TestPostgres } from '../src/testing';

const skipped = postgresSkipReason();
let server: TestPostgres | undefined;
beforeAll(async () => {
  // Durable, as a production server: what was committed before the crash is there after it.
  if (!skipped) server = await startPostgres({ durable: true });
}, 60_000);
afterAll(async () => {
  await server?.stop();
});

describe.skipIf(skipped)(`a PostgreSQL outage${skipped ? ` (skipped: ${skipped})` : ''}`, () => {
  it('a connection dropped inside a transaction fails that call, not the process; the next calls work once the server is back', async () => {
    const db = await PostgresDatabase.open({ url: server!.url, schema: 'outage', max: 4 });
    const leases = await PostgresLeaseStore.open(db);
    expect((await leases.claim('issue:a/b#1', 'r1', 60_000)).held).toBe(true);
    let inside!: () => void;
    const entered = new Promise<void>((r) => (inside = r));
    const tx = db.transaction('hold a transaction open in', async (c) => {
      await c.query('SELECT 1');
      inside();
      // The server goes away while this transaction is open.
      await new Promise((r) => setTimeout(r, 1500));
      await c.query('SELECT 2');
    });
    tx.catch(() => {});
    await entered;
    await server!.restart(300);
    const err = await tx.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isBbError(err)).toBe(true);
    expect((err as { code: string }).code).toMatch(/^STATE_(UNWRITABLE|BUSY)$/);
    // Back: the pool makes new connections; what was stored is there.
    let back: Awaited<ReturnType<typeof leases.leases>> | undefined;
    for (let i = 0; i < 50 && !back; i++)
      back = await Promise.resolve(leases.leases()).catch(async () => {
        await new Promise((r) => setTimeout(r, 100));
        return undefined;
      });
    expect(back?.map((l) => l.name)).toEqual(['issue:a/b#1']);
    await db.close();
  }, 30_000);
});

describe.skipIf(skipped)(
  `the test server's outage${skipped ? ` (skipped: ${skipped})` : ''}`,
  () => {
    it('is refused on a server that does not make its commits durable (it would lose the last ones)', async () => {
      const fast = await startPostgres();
      try {
        await expect(fast.restart(0)).rejects.toThrow(/durable: true/);
      } finally {
        await fast.stop();
      }
    }, 60_000);
  },
);
