import { describe, expect, it } from 'vitest';
import type { EventInbox } from '../inbox';
import type { ForgeStateStore } from '../store';
import { sampleState } from '../testing-data';
import { type ConformanceOptions, conformanceSetup, conformanceSuite, expectCode } from './setup';

/** The behaviour every `EventInbox` must have. */
export const describeInboxConformance = conformanceSuite<EventInbox>(
  'EventInbox',
  ({ make, test, options }) => {
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
  },
);

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
