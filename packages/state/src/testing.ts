/**
 * @module
 * `@bb/state/testing`: the behaviour suites every `ForgeStateStore`,
 * `DeliveryLedger`, `EventInbox` and `LeaseStore` implementation must pass. Call them from a vitest test file:
 *
 * ```ts
 * import { describeStoreConformance } from '@bb/state/testing';
 * describeStoreConformance('my store', { create: () => new MyStore() });
 * ```
 *
 * `vitest` is an optional peer dependency, needed only here.
 */
import { type BbErrorCode, isBbError } from '@bb/errors';
import { afterEach, describe, expect, it } from 'vitest';
import type { DeliveryLedger } from './delivery-ledger';
import type { ForgeState } from './forge-state';
import type { EventInbox } from './inbox';
import type { LeaseStore } from './leases';
import type { ForgeStateStore } from './store';
import { sampleState } from './testing-data';

export { sampleState };

export interface ConformanceOptions<T> {
  /** A fresh, empty instance per test. */
  create: () => T | Promise<T>;
  /** Called after each test with the instance `create` returned. */
  dispose?: (instance: T) => void | Promise<void>;
  /** Tests to skip, by name, with the reason shown in the test report. */
  skip?: { reason: string; tests: string[] };
}

/**
 * A fresh instance per test (`make`), disposed after it, and `test`, which
 * skips by name with the reason shown: for other packages' suites too.
 */
export function conformanceSetup<T>(options: ConformanceOptions<T>) {
  let current: T | undefined;
  afterEach(async () => {
    if (current !== undefined) await options.dispose?.(current);
    current = undefined;
  });
  const make = async () => {
    current = await options.create();
    return current;
  };
  const test = (name: string, fn: () => Promise<void> | void) => {
    if (options.skip?.tests.includes(name)) {
      it.skip(`${name} (skipped: ${options.skip.reason})`, () => {});
    } else {
      it(name, fn);
    }
  };
  return { make, test };
}

/**
 * Expects `fn` to fail with a `BbError` of `code`, whether it throws at once or
 * returns a promise that rejects: both are how an implementation may refuse.
 * For other packages' conformance suites too.
 */
export async function expectCode(fn: () => unknown, code: BbErrorCode): Promise<void> {
  let thrown: unknown;
  try {
    await fn();
  } catch (err) {
    thrown = err;
  }
  expect(thrown, `expected a BbError with code ${code}`).toBeDefined();
  expect(
    isBbError(thrown, code),
    `expected code ${code}, got ${String((thrown as { code?: string }).code)}: ${String(thrown)}`,
  ).toBe(true);
}

/** The behaviour every `ForgeStateStore` must have. */
export function describeStoreConformance<T extends ForgeStateStore>(
  name: string,
  options: ConformanceOptions<T>,
): void {
  describe(`ForgeStateStore conformance: ${name}`, () => {
    const { make, test } = conformanceSetup(options);

    test('get returns undefined for a missing row', async () => {
      const store = await make();
      expect(await store.get('acme', 'widgets', 1)).toBeUndefined();
      expect(await store.all()).toEqual([]);
    });

    test('upsert then get round-trips every field', async () => {
      const store = await make();
      const s = sampleState(17, {
        bottleNames: ['default', 'with-node'],
        prNumber: 18,
        status: 'frozen',
        sessionId: '1b6f0a6e-2f3c-4c2e-9a55-7f0c1f0c9a11',
        cwd: '/workspace',
      });
      await store.upsert(s);
      expect(await store.get('acme', 'widgets', 17)).toEqual(s);
    });

    test('upsert replaces every field but createdAt', async () => {
      const store = await make();
      await store.upsert(sampleState(17));
      const next = sampleState(17, {
        status: 'frozen',
        prNumber: 18,
        sessionId: 'sess-1',
        createdAt: '2030-01-01T00:00:00.000Z',
        updatedAt: '2026-11-22T06:00:00.000Z',
        lastCheckinAt: '2026-11-22T05:59:00.000Z',
      });
      await store.upsert(next);
      const got = await store.get('acme', 'widgets', 17);
      expect(got).toEqual({ ...next, createdAt: sampleState(17).createdAt });
      expect(await store.all()).toHaveLength(1);
    });

    test('rows are keyed by owner, repo and issue number', async () => {
      const store = await make();
      await store.upsert(sampleState(1, { slug: 'a-1' }));
      await store.upsert(sampleState(1, { slug: 'b-1', repo: 'gadgets' }));
      await store.upsert(sampleState(1, { slug: 'c-1', owner: 'zeta' }));
      expect((await store.get('acme', 'widgets', 1))?.slug).toBe('a-1');
      expect((await store.get('acme', 'gadgets', 1))?.slug).toBe('b-1');
      expect((await store.get('zeta', 'widgets', 1))?.slug).toBe('c-1');
      expect(await store.get('acme', 'widgets', 2)).toBeUndefined();
    });

    test('delete removes the row and is idempotent', async () => {
      const store = await make();
      await store.upsert(sampleState(5));
      await store.delete('acme', 'widgets', 5);
      expect(await store.get('acme', 'widgets', 5)).toBeUndefined();
      await store.delete('acme', 'widgets', 5);
      await store.delete('acme', 'widgets', 999);
    });

    test('all() is ordered by owner, repo, issue number', async () => {
      const store = await make();
      const keys: Array<[string, string, number]> = [
        ['zeta', 'a', 1],
        ['acme', 'widgets', 10],
        ['acme', 'widgets', 9],
        ['acme', 'gadgets', 100],
        ['Acme', 'widgets', 3],
      ];
      for (const [i, [owner, repo, n]] of keys.entries()) {
        await store.upsert(sampleState(n, { owner, repo, slug: `s-${i}` }));
      }
      expect((await store.all()).map((s) => `${s.owner}/${s.repo}#${s.issueNumber}`)).toEqual([
        'Acme/widgets#3',
        'acme/gadgets#100',
        'acme/widgets#9',
        'acme/widgets#10',
        'zeta/a#1',
      ]);
    });

    test('returned rows are copies: changing them does not change the store', async () => {
      const store = await make();
      await store.upsert(sampleState(3));
      const got = (await store.get('acme', 'widgets', 3))!;
      got.bottleNames.push('evil');
      got.status = 'destroyed';
      expect(await store.get('acme', 'widgets', 3)).toEqual(sampleState(3));
    });

    test('invalid values are rejected with INVALID_INPUT and change nothing', async () => {
      const store = await make();
      await store.upsert(sampleState(7));
      const bad: Array<Partial<Record<keyof ForgeState, unknown>>> = [
        { status: 'paused' },
        { issueNumber: -1 },
        { issueNumber: 1.5 },
        { slug: '../etc' },
        { owner: '' },
        { bottleNames: 'default' },
        { lastCheckinAt: 'yesterday' },
        { prNumber: 0 },
      ];
      for (const over of bad) {
        await expectCode(
          () => store.upsert({ ...sampleState(7), ...over } as ForgeState),
          'INVALID_INPUT',
        );
      }
      expect(await store.all()).toEqual([sampleState(7)]);
      await expectCode(() => store.get('acme', 'widgets', 0), 'INVALID_INPUT');
      await expectCode(() => store.get('', 'widgets', 1), 'INVALID_INPUT');
      await expectCode(() => store.delete('acme', 'widgets', Number.NaN), 'INVALID_INPUT');
    });

    test('a slug already used by another issue is a CONFLICT and changes nothing', async () => {
      const store = await make();
      await store.upsert(sampleState(1, { slug: 'same' }));
      await expectCode(() => store.upsert(sampleState(2, { slug: 'same' })), 'CONFLICT');
      expect(await store.get('acme', 'widgets', 2)).toBeUndefined();
      expect(await store.all()).toHaveLength(1);
    });

    test('a destroyed row leaves all() for the history, and get() still finds it', async () => {
      const store = await make();
      await store.upsert(sampleState(4, { slug: 'gone-1', prNumber: 40 }));
      await store.upsert(sampleState(5, { slug: 'kept-1' }));
      const destroyed = sampleState(4, {
        slug: 'gone-1',
        prNumber: 40,
        status: 'destroyed',
        updatedAt: '2026-11-22T07:00:00.000Z',
      });
      await store.upsert(destroyed);
      expect((await store.all()).map((r) => r.slug)).toEqual(['kept-1']);
      expect(await store.get('acme', 'widgets', 4)).toEqual(destroyed);
      expect(await store.history()).toEqual([destroyed]);
      // The same issue launched again: the live row wins, the old one stays history.
      await store.upsert(sampleState(4, { slug: 'again-1' }));
      expect((await store.get('acme', 'widgets', 4))?.slug).toBe('again-1');
      expect((await store.history()).map((r) => r.slug)).toEqual(['gone-1']);
      await store.delete('acme', 'widgets', 4);
      expect(await store.get('acme', 'widgets', 4)).toBeUndefined();
      expect(await store.history()).toEqual([]);
    });

    test('history() pages destroyed rows, most recently updated first', async () => {
      const store = await make();
      for (let i = 1; i <= 5; i++)
        await store.upsert(
          sampleState(i, {
            slug: `h-${i}`,
            status: 'destroyed',
            updatedAt: `2026-11-22T0${i}:00:00.000Z`,
          }),
        );
      const first = await store.history({ limit: 2 });
      expect(first.map((r) => r.slug)).toEqual(['h-5', 'h-4']);
      const next = await store.history({ limit: 2, before: first.at(-1)!.updatedAt });
      expect(next.map((r) => r.slug)).toEqual(['h-3', 'h-2']);
      await expectCode(() => store.history({ limit: 0 }), 'INVALID_INPUT');
    });

    test('findByPr finds the live row with that PR, never a destroyed one', async () => {
      const store = await make();
      await store.upsert(sampleState(7, { slug: 'p-7', prNumber: 70 }));
      await store.upsert(sampleState(8, { slug: 'p-8', prNumber: 80, repo: 'gadgets' }));
      expect((await store.findByPr('acme', 'widgets', 70))?.slug).toBe('p-7');
      expect(await store.findByPr('acme', 'widgets', 80)).toBeUndefined();
      expect((await store.findByPr('acme', 'gadgets', 80))?.slug).toBe('p-8');
      await store.upsert(sampleState(7, { slug: 'p-7', prNumber: 70, status: 'destroyed' }));
      expect(await store.findByPr('acme', 'widgets', 70)).toBeUndefined();
    });

    test('many rows survive in full', async () => {
      const store = await make();
      for (let i = 1; i <= 300; i++) await store.upsert(sampleState(i));
      const all = await store.all();
      expect(all).toHaveLength(300);
      expect(all.map((s) => s.issueNumber)).toEqual(Array.from({ length: 300 }, (_, i) => i + 1));
    });
  });
}

/** The behaviour every `EventInbox` must have. */
export function describeInboxConformance<T extends EventInbox>(
  name: string,
  options: ConformanceOptions<T>,
): void {
  describe(`EventInbox conformance: ${name}`, () => {
    const { make, test } = conformanceSetup(options);
    const ev = (issue: string | null, occurredAt: string, n = 1) => ({
      issue,
      occurredAt,
      payload: { kind: 'comment_created', n },
    });

    test('an event is accepted once under its key and waits until done', async () => {
      const inbox = await make();
      const accepted = await inbox.accept('k1', ev('acme/widgets#1', '2026-11-22T05:00:00Z'));
      expect(accepted).toMatchObject({ key: 'k1', state: 'pending' });
      expect(
        await inbox.accept('k1', ev('acme/widgets#1', '2026-11-22T05:00:00Z', 2)),
      ).toBeUndefined();
      const [open] = await inbox.openEvents();
      expect(open?.id).toBe(accepted!.id);
      expect(open).toMatchObject({
        key: 'k1',
        issue: 'acme/widgets#1',
        state: 'pending',
        payload: { kind: 'comment_created', n: 1 },
      });
      await inbox.settle(open!.id, 'done');
      expect(await inbox.openEvents()).toEqual([]);
    });

    it("openEventsOf reads one issue's open events alone, in order (when the inbox has it)", async (ctx) => {
      if (
        options.skip?.tests.includes(
          "openEventsOf reads one issue's open events alone, in order (when the inbox has it)",
        )
      )
        return ctx.skip(options.skip.reason);
      const inbox = await make();
      if (!inbox.openEventsOf) return ctx.skip('the inbox has no openEventsOf (it is optional)');
      await inbox.accept('b2', ev('acme/widgets#2', '2026-11-22T05:00:02Z'));
      await inbox.accept('a1', ev('acme/widgets#1', '2026-11-22T05:00:03Z'));
      await inbox.accept('b1', ev('acme/widgets#2', '2026-11-22T05:00:01Z'));
      const done = await inbox.accept('b3', ev('acme/widgets#2', '2026-11-22T05:00:04Z'));
      await inbox.settle(done!.id, 'done');
      await inbox.accept('p', ev(null, '2026-11-22T05:00:00Z'));
      expect((await inbox.openEventsOf('acme/widgets#2')).map((e) => e.key)).toEqual(['b1', 'b2']);
      expect(await inbox.openEventsOf('acme/widgets#9')).toEqual([]);
      const all = (await inbox.openEvents()).filter((e) => e.issue === 'acme/widgets#2');
      expect(await inbox.openEventsOf('acme/widgets#2')).toEqual(all);
    });

    test('an event accepted as done is remembered under its key and waits for nothing', async () => {
      const inbox = await make();
      expect(
        await inbox.accept('d', { ...ev(null, '2026-11-22T05:00:00Z'), done: true }),
      ).toMatchObject({
        key: 'd',
        state: 'done',
      });
      expect(await inbox.openEvents()).toEqual([]);
      expect(await inbox.accept('d', ev(null, '2026-11-22T05:00:00Z'))).toBeUndefined();
    });

    test('open events come in the order they happened, then were accepted', async () => {
      const inbox = await make();
      await inbox.accept('late', ev('acme/widgets#1', '2026-11-22T05:00:02Z'));
      await inbox.accept('early', ev('acme/widgets#1', '2026-11-22T05:00:01Z'));
      await inbox.accept('same-a', ev('acme/widgets#2', '2026-11-22T05:00:03Z'));
      await inbox.accept('same-b', ev('acme/widgets#2', '2026-11-22T05:00:03Z'));
      expect((await inbox.openEvents()).map((e) => e.key)).toEqual([
        'early',
        'late',
        'same-a',
        'same-b',
      ]);
    });

    test('an event with no issue is parked until it is routed', async () => {
      const inbox = await make();
      await inbox.accept('c', ev(null, '2026-11-22T05:00:00Z'));
      const [parked] = await inbox.openEvents();
      expect(parked).toMatchObject({ state: 'parked', issue: null });
      await inbox.settle(parked!.id, 'pending', 'acme/widgets#3');
      expect((await inbox.openEvents())[0]).toMatchObject({
        state: 'pending',
        issue: 'acme/widgets#3',
      });
      await inbox.settle(parked!.id, 'deferred');
      expect((await inbox.openEvents())[0]).toMatchObject({
        state: 'deferred',
        issue: 'acme/widgets#3',
      });
    });

    test('recentEvents lists events by key prefix, newest first, done ones too', async () => {
      const inbox = await make();
      await inbox.accept('bb:note:acme/widgets#1:a', {
        ...ev(null, '2026-11-22T05:00:00Z'),
        done: true,
      });
      await inbox.accept('other:1', ev('acme/widgets#1', '2026-11-22T05:00:01Z'));
      await inbox.accept('bb:note:acme/widgets#2:b', {
        ...ev(null, '2026-11-22T04:00:00Z'),
        done: true,
      });
      await inbox.accept('bb:notes-not-this', ev('acme/widgets#3', '2026-11-22T05:00:02Z'));
      expect((await inbox.recentEvents('bb:note:', 10)).map((e) => e.key)).toEqual([
        'bb:note:acme/widgets#2:b',
        'bb:note:acme/widgets#1:a',
      ]);
      expect((await inbox.recentEvents('bb:note:', 1)).map((e) => e.key)).toEqual([
        'bb:note:acme/widgets#2:b',
      ]);
      expect(await inbox.recentEvents('zzz', 5)).toEqual([]);
      await expectCode(() => inbox.recentEvents('', 5), 'INVALID_INPUT');
      await expectCode(() => inbox.recentEvents('bb:', 0), 'INVALID_INPUT');
    });

    test('prune removes only done events accepted before the time', async () => {
      const inbox = await make();
      await inbox.accept('a', ev('acme/widgets#1', '2026-11-22T05:00:00Z'));
      await inbox.accept('b', ev('acme/widgets#1', '2026-11-22T05:00:01Z'));
      await inbox.settle((await inbox.openEvents())[0]!.id, 'done');
      expect(await inbox.pruneInbox(new Date(Date.now() - 60_000))).toBe(0);
      expect(await inbox.pruneInbox(new Date(Date.now() + 60_000))).toBe(1);
      expect((await inbox.openEvents()).map((e) => e.key)).toEqual(['b']);
    });

    test('bad input is INVALID_INPUT and changes nothing', async () => {
      const inbox = await make();
      await expectCode(() => inbox.accept('', ev(null, '2026-11-22T05:00:00Z')), 'INVALID_INPUT');
      await expectCode(
        () => inbox.accept('k', ev('not an issue', '2026-11-22T05:00:00Z')),
        'INVALID_INPUT',
      );
      await expectCode(() => inbox.accept('k', ev(null, 'yesterday')), 'INVALID_INPUT');
      await expectCode(() => inbox.settle(0, 'done'), 'INVALID_INPUT');
      await expectCode(() => inbox.settle(1, 'finished' as never), 'INVALID_INPUT');
      expect(await inbox.openEvents()).toEqual([]);
    });
  });
}

/**
 * The behaviour of an inbox that routes events by PR (`InboxInput.byPr`) from
 * the forge state it also keeps: every store the orchestrator uses as both.
 */
export function describeRoutedInboxConformance<T extends EventInbox & ForgeStateStore>(
  name: string,
  options: ConformanceOptions<T>,
): void {
  describe(`EventInbox routing by PR conformance: ${name}`, () => {
    const { make, test } = conformanceSetup(options);
    const at = '2026-11-24T05:00:00Z';
    const byPr = (
      pr: number,
      unclaimed: 'done' | 'parkIfRunning' = 'parkIfRunning',
      repo = 'widgets',
    ) => ({
      issue: null,
      occurredAt: at,
      payload: { pr },
      byPr: { owner: 'acme', repo, pr, unclaimed },
    });

    test("an event about a live bottle's PR goes to its issue in the same step", async () => {
      const store = await make();
      await store.upsert(sampleState(7, { slug: 'r-7', prNumber: 70, status: 'frozen' }));
      const e = await store.accept('pr-70', byPr(70));
      expect(e).toMatchObject({ issue: 'acme/widgets#7', state: 'pending' });
      expect((await store.openEvents()).map((x) => [x.key, x.issue, x.state])).toEqual([
        ['pr-70', 'acme/widgets#7', 'pending'],
      ]);
    });

    test('a PR nobody owns is parked while a bottle runs in its repository, done otherwise', async () => {
      const store = await make();
      await store.upsert(sampleState(8, { slug: 'r-8', status: 'running' }));
      expect(await store.accept('a', byPr(80))).toMatchObject({ issue: null, state: 'parked' });
      expect(await store.accept('b', byPr(80, 'done'))).toMatchObject({ state: 'done' });
      expect(await store.accept('c', byPr(80, 'parkIfRunning', 'gadgets'))).toMatchObject({
        issue: null,
        state: 'done',
      });
      // A destroyed bottle's PR belongs to nobody.
      await store.upsert(sampleState(9, { slug: 'r-9', prNumber: 90, status: 'destroyed' }));
      expect(await store.accept('d', byPr(90, 'parkIfRunning', 'widgets'))).toMatchObject({
        issue: null,
        state: 'parked',
      });
      expect((await store.openEvents()).map((x) => x.key)).toEqual(['a', 'd']);
      // Accepted before: nothing changes, whatever the routing says now.
      expect(await store.accept('a', byPr(80))).toBeUndefined();
    });

    test('byPr with an issue, or malformed, is INVALID_INPUT', async () => {
      const store = await make();
      await expectCode(
        () => store.accept('x', { ...byPr(1), issue: 'acme/widgets#1' }),
        'INVALID_INPUT',
      );
      await expectCode(
        () =>
          store.accept('y', {
            ...byPr(1),
            byPr: { owner: 'acme', repo: 'widgets', pr: 0, unclaimed: 'done' },
          }),
        'INVALID_INPUT',
      );
      expect(await store.openEvents()).toEqual([]);
    });
  });
}

/** The behaviour every `DeliveryLedger` must have. */
export function describeLedgerConformance<T extends DeliveryLedger>(
  name: string,
  options: ConformanceOptions<T>,
): void {
  describe(`DeliveryLedger conformance: ${name}`, () => {
    const { make, test } = conformanceSetup(options);

    test('a key is new once, then known', async () => {
      const ledger = await make();
      expect(
        await ledger.recordDelivery('issues:acme/widgets#17:assigned:2026-11-22T05:00:00Z'),
      ).toBe(true);
      expect(
        await ledger.recordDelivery('issues:acme/widgets#17:assigned:2026-11-22T05:00:00Z'),
      ).toBe(false);
      expect(
        await ledger.recordDelivery('issues:acme/widgets#17:assigned:2026-11-22T05:00:01Z'),
      ).toBe(true);
    });

    test('the first delivery meta is kept', async () => {
      const ledger = await make();
      await ledger.recordDelivery('k1', { deliveryId: 'uuid-1', event: 'issues' });
      await ledger.recordDelivery('k1', { deliveryId: 'uuid-2', event: 'issues' });
      const rec = await ledger.getDelivery('k1');
      expect(rec?.deliveryId).toBe('uuid-1');
      expect(rec?.event).toBe('issues');
      expect(Number.isNaN(Date.parse(rec?.receivedAt ?? ''))).toBe(false);
      expect(await ledger.getDelivery('missing')).toBeUndefined();
    });

    test('prune removes only older entries', async () => {
      const ledger = await make();
      await ledger.recordDelivery('old');
      const removed = await ledger.pruneDeliveries(new Date(Date.now() - 60_000));
      expect(removed).toBe(0);
      expect(await ledger.pruneDeliveries(new Date(Date.now() + 60_000))).toBe(1);
      expect(await ledger.getDelivery('old')).toBeUndefined();
      expect(await ledger.recordDelivery('old')).toBe(true);
    });

    test('bad keys are INVALID_INPUT', async () => {
      const ledger = await make();
      await expectCode(() => ledger.recordDelivery(''), 'INVALID_INPUT');
      await expectCode(() => ledger.recordDelivery('x'.repeat(513)), 'INVALID_INPUT');
      await expectCode(() => ledger.recordDelivery(42 as unknown as string), 'INVALID_INPUT');
    });
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The behaviour every `LeaseStore` must have. Two leases run out during it
 * (about a second in all): the store's clock must be real time.
 */
export function describeLeaseConformance<T extends LeaseStore>(
  name: string,
  options: ConformanceOptions<T>,
): void {
  describe(`LeaseStore conformance: ${name}`, () => {
    const { make, test } = conformanceSetup(options);

    test('a free lease is taken; nobody else gets it until it runs out, then one does', async () => {
      const leases = await make();
      const first = await leases.claim('issue:acme/widgets#1', 'replica-a', 300);
      expect(first).toMatchObject({ held: true, holder: 'replica-a' });
      expect(first.takenFrom).toBeUndefined();
      expect(await leases.claim('issue:acme/widgets#1', 'replica-b', 300)).toMatchObject({
        held: false,
        holder: 'replica-a',
      });
      await sleep(450);
      const taken = await leases.claim('issue:acme/widgets#1', 'replica-b', 5_000);
      expect(taken).toMatchObject({ held: true, holder: 'replica-b' });
      expect(taken.takenFrom?.holder).toBe('replica-a');
      expect(Date.parse(taken.takenFrom!.expiredAt)).toBeLessThanOrEqual(Date.now());
      expect(await leases.claim('issue:acme/widgets#1', 'replica-a', 300)).toMatchObject({
        held: false,
        holder: 'replica-b',
      });
    });

    test('the holder extends its leases; one taken by another is not renewed', async () => {
      const leases = await make();
      await leases.claim('a', 'r1', 300);
      await leases.claim('b', 'r1', 300);
      await leases.claim('c', 'r2', 60_000);
      // Claiming again extends; renewing keeps a and b past their first end.
      expect((await leases.claim('a', 'r1', 300)).held).toBe(true);
      expect((await leases.renew('r1', ['a', 'b', 'c'], 60_000)).sort()).toEqual(['a', 'b']);
      await sleep(450);
      expect((await leases.claim('a', 'r2', 300)).held).toBe(false);
      // Run out and taken: the old holder's renewal does not get it back.
      await leases.claim('short', 'r1', 100);
      await sleep(200);
      expect((await leases.claim('short', 'r2', 60_000)).held).toBe(true);
      expect(await leases.renew('r1', ['short'], 60_000)).toEqual([]);
      // Run out but taken by nobody: still the holder's to renew.
      await leases.claim('lapsed', 'r1', 100);
      await sleep(200);
      expect(await leases.renew('r1', ['lapsed'], 60_000)).toEqual(['lapsed']);
      expect((await leases.claim('lapsed', 'r2', 100)).held).toBe(false);
      expect(await leases.renew('r1', [], 1000)).toEqual([]);
    });

    test('a released lease is free at once; only its holder can release it', async () => {
      const leases = await make();
      await leases.claim('x', 'r1', 60_000);
      await leases.release('x', 'r2');
      expect((await leases.claim('x', 'r2', 60_000)).held).toBe(false);
      await leases.release('x', 'r1');
      const again = await leases.claim('x', 'r2', 60_000);
      expect(again.held).toBe(true);
      expect(again.takenFrom).toBeUndefined();
      await leases.release('never-held', 'r1');
    });

    test('of many claimants of a free lease exactly one gets it', async () => {
      const leases = await make();
      const results = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          Promise.resolve().then(() => leases.claim('contested', `r${i}`, 60_000)),
        ),
      );
      const winners = results.filter((r) => r.held);
      expect(winners).toHaveLength(1);
      expect(results.every((r) => r.holder === winners[0]!.holder)).toBe(true);
    });

    test('leases() lists those not run out, by name', async () => {
      const leases = await make();
      await leases.claim('b', 'r1', 60_000);
      await leases.claim('a', 'r2', 60_000);
      await leases.claim('gone', 'r1', 100);
      await sleep(200);
      const live = await leases.leases();
      expect(live.map((l) => [l.name, l.holder])).toEqual([
        ['a', 'r2'],
        ['b', 'r1'],
      ]);
      expect(Date.parse(live[0]!.expiresAt)).toBeGreaterThan(Date.now());
    });

    test('bad input is INVALID_INPUT and changes nothing', async () => {
      const leases = await make();
      await expectCode(() => leases.claim('', 'r1', 1000), 'INVALID_INPUT');
      await expectCode(() => leases.claim('x', 'has space', 1000), 'INVALID_INPUT');
      await expectCode(() => leases.claim('x', 'r1', 0), 'INVALID_INPUT');
      await expectCode(() => leases.claim('x', 'r1', 1.5), 'INVALID_INPUT');
      await expectCode(() => leases.renew('r1', [''], 1000), 'INVALID_INPUT');
      await expectCode(() => leases.release('x', ''), 'INVALID_INPUT');
      expect(await leases.leases()).toEqual([]);
    });
  });
}
