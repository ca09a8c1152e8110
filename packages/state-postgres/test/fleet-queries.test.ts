// What a fleet of orchestrators asks of one PostgreSQL server beyond the conformance
// suites, against a real server: notices of pending events as they commit (heard by
// every process on the schema, again after an outage), and what nobody holds.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgresState, type PostgresState } from '../src/index';
import { postgresSkipReason, startPostgres, type TestPostgres } from '../src/testing';

const skipped = postgresSkipReason();
let server: TestPostgres | undefined;
beforeAll(async () => {
  if (!skipped) server = await startPostgres({ durable: true });
}, 60_000);
afterAll(async () => {
  await server?.stop();
});

const until = async (what: string, cond: () => boolean, ms = 10_000) => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
};

const event = (issue: string | null, done = false) => ({
  issue,
  occurredAt: new Date().toISOString(),
  payload: { hello: 'world' },
  deliveryId: undefined,
  kind: 'comment_created',
  ...(done ? { done: true } : {}),
});

const row = (n: number) => {
  const now = new Date().toISOString();
  return {
    owner: 'acme',
    repo: 'widgets',
    issueNumber: n,
    slug: `claude-q${n}`,
    agentName: 'claude',
    bottleNames: ['b'],
    backendName: 'docker',
    agentGitUser: 'bb-bot',
    prNumber: null,
    status: 'frozen' as const,
    lastCheckinAt: now,
    sessionId: null,
    cwd: null,
    createdAt: now,
    updatedAt: now,
  };
};

describe.skipIf(skipped)(`a fleet's queries${skipped ? ` (skipped: ${skipped})` : ''}`, () => {
  it('every process on the schema hears each pending event as it commits, and is told to read again after an outage', async () => {
    const a = await openPostgresState({ url: server!.url, schema: 'notices' });
    const b = await openPostgresState({ url: server!.url, schema: 'notices' });
    const elsewhere = await openPostgresState({ url: server!.url, schema: 'notices_other' });
    const heard: Array<{ id: number; issue: string; key: string } | null> = [];
    const stop = a.store.watchPending((e) => heard.push(e));
    // The listener's connection is made in the background: an event of its own is heard once it is up.
    await until('listening', () => {
      void b.store.accept(`warm:${Date.now()}:${Math.random()}`, event('acme/widgets#99'));
      return heard.length > 0;
    });
    heard.length = 0;
    const got = await b.store.accept(
      'gitea:acme/widgets:comment#1:created',
      event('acme/widgets#1'),
    );
    await elsewhere.store.accept('gitea:acme/widgets:comment#2:created', event('acme/widgets#2'));
    await b.store.accept('gitea:acme/widgets:comment#3:created', event(null));
    await b.store.accept('gitea:acme/widgets:comment#4:created', event('acme/widgets#4', true));
    await until('heard', () => heard.length >= 1);
    await new Promise((r) => setTimeout(r, 300));
    // Only the pending event of this schema: not another schema's, a parked or a done one.
    expect(heard.filter((e) => e?.issue !== 'acme/widgets#99')).toEqual([
      { id: got!.id, issue: 'acme/widgets#1', key: 'gitea:acme/widgets:comment#1:created' },
    ]);
    await server!.restart(300);
    await until('told to read again', () => heard.includes(null), 20_000);
    heard.length = 0;
    let after: Awaited<ReturnType<typeof b.store.accept>>;
    for (;;) {
      try {
        after = await b.store.accept(
          'gitea:acme/widgets:comment#5:created',
          event('acme/widgets#5'),
        );
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    await until('heard after the outage', () => heard.some((e) => e?.id === after!.id));
    stop();
    for (const s of [a, b, elsewhere]) await s.close();
  }, 60_000);

  it('reads the bottles and open events whose issue nobody holds', async () => {
    const s: PostgresState = await openPostgresState({ url: server!.url, schema: 'unleased' });
    for (const n of [1, 2, 3, 4]) await s.store.upsert(row(n));
    await s.leases.claim('issue:acme/widgets#1', 'r1', 60_000); // held
    await s.leases.claim('issue:acme/widgets#2', 'r1', 50); // runs out
    await s.leases.claim('issue:acme/widgets#4', 'r2', 60_000);
    await s.leases.release('issue:acme/widgets#4', 'r2'); // given up
    await new Promise((r) => setTimeout(r, 150));
    expect((await s.store.unleasedRows('issue:', 'r9')).map((r) => r.issueNumber)).toEqual([
      2, 3, 4,
    ]);
    // r1's own lease is r1's to take back (a restart): not held by anyone else.
    expect((await s.store.unleasedRows('issue:', 'r1')).map((r) => r.issueNumber)).toEqual([
      1, 2, 3, 4,
    ]);
    const e1 = await s.store.accept('k1', event('acme/widgets#1'));
    const e3 = await s.store.accept('k3', event('acme/widgets#3'));
    const parked = await s.store.accept('k5', event(null));
    await s.store.accept('k6', event('acme/widgets#3', true));
    const open = (await s.store.unleasedEvents('issue:', 'r9')).map((e) => e.id);
    expect(open).toEqual([e3!.id, parked!.id]);
    expect(open).not.toContain(e1!.id);
    expect((await s.store.unleasedEvents('issue:', 'r1')).map((e) => e.id)).toEqual([
      e1!.id,
      e3!.id,
      parked!.id,
    ]);
    await s.close();
  }, 30_000);
});
